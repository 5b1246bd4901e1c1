"""The stored-conversation commands as a user meets them: import checks the whole log before writing anything,
list says what each conversation waits for, log says who decided and why a turn stopped, and a script agent
lets a person try a domain without a model."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from dial_runtime import Conversation, LogEntry, agent_from_uri
from dial_runtime.agents import ScriptedAgent
from dial_runtime.cli import main
from dial_runtime.cli.log import audit_line
from dial_runtime.demo import NotesDomain
from dial_runtime.driver.humans import scripted_human
from dial_runtime.runtime.events import InterruptedEvent, OutcomeEvent
from dial_runtime.stores import open_store
from dial_runtime.views.person import stopped_in_words

from ..fakes import envelope, suggest

RECORDINGS = Path(__file__).parents[1] / "recordings"
DEMO = (RECORDINGS / "demo.jsonl").read_text(encoding="utf-8").splitlines()


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def _edited(line: int, change: Any) -> list[str]:
    """The demo recording with the entry on ``line`` (1-based, the header is line 1) changed by ``change``."""
    lines = list(DEMO)
    entry = json.loads(lines[line - 1])
    change(entry)
    lines[line - 1] = json.dumps(entry, allow_nan=True)
    return lines


def _set(path: str, value: Any) -> Any:
    def change(entry: dict[str, Any]) -> None:
        *keys, last = path.split(".")
        target = entry
        for key in keys:
            target = target[key]
        target[last] = value

    return change


def _first(kind: str) -> int:
    """The line of the demo recording's first event of this type."""
    return next(n for n, line in enumerate(DEMO, 1) if n > 1 and json.loads(line)["event"]["type"] == kind)


#: Logs no run of the runtime could have written, and what import says of each.
IMPOSSIBLE: dict[str, tuple[list[str], str]] = {
    "an outcome that exploded": (
        _edited(_first("outcome"), _set("event.status", "exploded")),
        "status 'exploded' is not one of",
    ),
    "a decision of maybe": (
        _edited(_first("decided"), _set("event.decision", "maybe")),
        "decision 'maybe' is not one of",
    ),
    "a turn named one": (_edited(_first("sent"), _set("event.turn", "one")), "Expected `int`, got `str`"),
    "a NaN time": (_edited(3, _set("time", float("nan"))), "time is nan, not a finite number"),
    "an action started for an unknown suggestion": (
        _edited(_first("action-started"), _set("event.suggestion_id", "sg-99")),
        "log entry 8 (action-started): no suggestion 'sg-99' is open",
    ),
    "a gap in the numbering": (DEMO[:3] + DEMO[4:], "entry has seq 4, expected 3"),
}


@pytest.mark.parametrize("name", sorted(IMPOSSIBLE))
def test_import_refuses_an_impossible_log_and_writes_nothing(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines, says = IMPOSSIBLE[name]
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    store = f"sqlite:{tmp_path / 'logs.db'}"
    status, out, err = run(["import", str(path), "--store", store], capsys)
    assert (status, out) == (1, "")
    assert err.count("\n") == 1 and err.startswith(f"dial-runtime import: {path}: ") and says in err, err
    assert not (tmp_path / "logs.db").exists(), "nothing is written, not even an empty database"
    assert run(["replay", "--file", str(path), "--domain", "dial_runtime.demo:NotesDomain"], capsys)[0] == 1


def test_import_says_where_it_put_the_log_without_the_password(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = postgres_url + "&password=s3cret"
    status, out, err = run(["import", str(RECORDINGS / "demo.jsonl"), "--store", url, "--id", "pw-demo"], capsys)
    assert status == 0, err
    assert "s3cret" not in out and "password=***" in out
    status, out, err = run(["log", "nobody", "--store", url], capsys)
    assert status == 1 and "s3cret" not in err and "holds no conversation 'nobody'" in err


async def _hold(store: str) -> None:
    """Three conversations: one waiting for a decision, one ended, one whose turn was cancelled."""
    logs = open_store(store)
    add = envelope(suggest("add-note", '{"text": "milk"}'))
    bye = '<dial><dial-phatic signal="session-complete">Bye.</dial-phatic></dial>'
    try:
        waiting = await Conversation.open(
            logs, "waiting", agent=ScriptedAgent([add]), domain=NotesDomain(), human=scripted_human(["defer"])
        )
        await waiting.say("add milk")
        ended = await Conversation.open(
            logs, "ended", agent=ScriptedAgent([bye]), domain=NotesDomain(), human=scripted_human([])
        )
        await ended.say("that's all")

        class Slow:
            async def send(self, message: str) -> str:
                scope.cancel()
                await anyio.sleep_forever()
                raise AssertionError("unreachable")

        cancelled = await Conversation.open(
            logs, "cancelled", agent=Slow(), domain=NotesDomain(), human=scripted_human([])
        )
        with anyio.CancelScope() as scope:
            await cancelled.say("hello?")
    finally:
        await logs.aclose()


def test_list_and_log_say_what_waits_who_decided_and_why_a_turn_stopped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:{tmp_path / 'logs.db'}"
    anyio.run(_hold, store)
    status, out, _ = run(["list", "--store", store], capsys)
    assert status == 0
    rows = [re.split(r"\s{2,}", line) for line in out.splitlines()]
    assert [(row[0], row[-1]) for row in rows] == [
        ("cancelled", "open"),
        ("ended", "ended"),
        ("waiting", "waits for sg-1"),
    ]
    status, out, _ = run(["log", "cancelled", "--store", store], capsys)
    assert status == 0 and "interrupted   turn 1: cancelled before it finished" in out
    assert "cancel scope" not in out and "Task" not in out


@pytest.mark.parametrize(
    ("recorded", "words"),
    [
        (
            "CancelledError: Cancelled via cancel scope 7ff7fa8cf920 by <Task pending name='Task-1'>",
            "cancelled before",
        ),
        ("Cancelled: cancelled due to explicit from task <Task 'x' at 0x7fe4>", "cancelled before"),
        ("KeyboardInterrupt", "cancelled by the person"),
        ("interrupted by the person (Ctrl-C)", "cancelled by the person (Ctrl-C)"),
        ("the call was cancelled", "cancelled before it finished"),
        ("the process exited", "the process exited"),
        ("TimeoutError", "the deadline passed"),
        ("TooSlowError: deadline passed", "the deadline passed"),
        ("the process stopped", "the process stopped"),
        ("the person said something else", "the person said something else"),
        ("ValueError: something specific", "ValueError: something specific"),
    ],
)
def test_stopped_turns_and_actions_are_logged_in_words(recorded: str, words: str) -> None:
    assert stopped_in_words(recorded).startswith(words)
    turn = audit_line(LogEntry(seq=1, time=0.0, event=InterruptedEvent(turn=2, reason=recorded)))
    assert turn is not None and turn.endswith(f"turn 2: {stopped_in_words(recorded)}")
    outcome = OutcomeEvent(id="sg-1", action="add-note", status="failed", error=recorded, code="interrupted")
    line = audit_line(LogEntry(seq=2, time=0.0, event=outcome))
    assert line is not None and f"error={json.dumps(stopped_in_words(recorded))}" in line


# --- trying a domain without a model ----------------------------------------------------------------------------


def test_a_script_agent_replies_from_a_json_list_or_a_recorded_log(tmp_path: Path) -> None:
    listed = tmp_path / "replies.json"
    listed.write_text(json.dumps(["one", "two", "three"]), encoding="utf-8")
    agent = agent_from_uri(f"script:{listed}")
    assert isinstance(agent, ScriptedAgent)
    assert [agent.send("a"), agent.send("b")] == ["one", "two"]
    taken_up = agent_from_uri(f"script:{listed}", history=[_Message("user"), _Message("assistant")])
    assert isinstance(taken_up, ScriptedAgent) and taken_up.send("c") == "two"

    recorded = agent_from_uri(f"script:{RECORDINGS / 'demo.jsonl'}")
    assert isinstance(recorded, ScriptedAgent)
    replies = [json.loads(line)["event"]["text"] for line in DEMO[1:] if '"type":"reply"' in line]
    assert replies and [recorded.send("m") for _ in replies] == replies


def test_a_script_agent_replies_from_a_yaml_list_with_multi_line_replies(tmp_path: Path) -> None:
    script = tmp_path / "replies.yaml"
    script.write_text(
        "- |\n  <dial>\n    <dial-inform>Hello.</dial-inform>\n  </dial>\n- Plain prose.\n", encoding="utf-8"
    )
    agent = agent_from_uri(f"script:{script}")
    assert isinstance(agent, ScriptedAgent)
    assert agent.send("a") == "<dial>\n  <dial-inform>Hello.</dial-inform>\n</dial>\n"
    assert agent.send("b") == "Plain prose."


class _Message:
    def __init__(self, role: str) -> None:
        self.role = role


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("script.json", None, "cannot read it"),
        ("script.json", b'{"not": "a list"}', "neither a JSON list of replies nor a dial-runtime JSON Lines log"),
        ("script.json", b"[1, 2", "not a JSON list of replies"),
        ("script.json", b'["fine", {"reply": "x"}]', "reply 2 is dict, not a string"),
        ("script.json", b"\xff\xfe[]", "not UTF-8 text"),
        ("script.json", b"hello\n", "neither a JSON list of replies nor a dial-runtime JSON Lines log"),
        ("script.yaml", b"- one\n- [unclosed\n", "not YAML at line 3"),
        ("script.yml", b"reply: one\n", "expected a YAML list of replies"),
        ("script.yaml", b"- one\n- 2\n", "reply 2 is int, not a string"),
    ],
)
def test_a_script_agent_refuses_a_bad_file_in_one_line(
    tmp_path: Path, name: str, content: bytes | None, says: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(says)) as raised:
        agent_from_uri(f"script:{path}")
    assert "\n" not in str(raised.value) and str(path) in str(raised.value)


class _NamedPerson:
    """A person the terminal plays: it accepts, and says who it is in ``by`` (as ``TerminalSurface(by=...)``)."""

    by = "ann"

    def decide(self, suggestion: Any) -> Any:
        from dial_runtime import Accept

        return Accept()


def test_a_decision_taken_during_a_turn_records_who_took_it() -> None:
    async def hold() -> tuple[LogEntry, ...]:
        agent = ScriptedAgent([envelope(suggest("add-note", '{"text": "milk"}')), "ok"])
        conversation = Conversation(agent=agent, domain=NotesDomain(), human=_NamedPerson())
        await conversation.say("add milk")
        return conversation.log

    decided = [entry.event for entry in anyio.run(hold) if entry.event.type == "decided"]
    assert [getattr(event, "by", None) for event in decided] == ["ann"]
