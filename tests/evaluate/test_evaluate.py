"""Counterfactual replay (dial_runtime.evaluate): candidates answer at every recorded point and are scored against
what the person did, on hand-made conversations whose answers are known; nothing runs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from dial_runtime import Conversation
from dial_runtime.agents import ScriptedAgent
from dial_runtime.cli import main
from dial_runtime.demo import NotesDomain
from dial_runtime.domains import Domain
from dial_runtime.driver import scripted_human
from dial_runtime.evaluate import EvalReport, evaluate, payload_distance, write_chart
from dial_runtime.llm.chat import ChatMessage
from dial_runtime.runtime.events import LogEntry
from dial_runtime.stores.jsonl import export_jsonl


def suggest(action: str, payload: dict[str, Any], ident: str = "s") -> str:
    return (
        f'<dial><dial-suggest action="{action}" id="{ident}">'
        f"<dial-payload>{json.dumps(payload)}</dial-payload></dial-suggest></dial>"
    )


def ack(ident: str = "s") -> str:
    return f'<dial><dial-acknowledge of="{ident}">done</dial-acknowledge></dial>'


ASK = '<dial><dial-ask id="q">Which note?</dial-ask></dial>'


class Trip(Domain):
    """Two-field payloads, so an edit can be partly right; ``runs`` counts what ran."""

    def __init__(self) -> None:
        super().__init__("trips", description="Book trips.")
        self.runs = 0

        @self.action(preview="Book {city} for {nights} nights")
        def book(city: str, nights: int) -> dict[str, str]:
            """Book a trip."""
            self.runs += 1
            return {"booked": city}

        @self.action(read_only=True, preview="Look up {city}")
        def look_up(city: str) -> dict[str, str]:
            """Look a city up."""
            self.runs += 1
            return {"weather": "sun"}


def recorded(domain: Any, replies: Sequence[str], steps: Sequence[Any], words: Sequence[str]) -> list[LogEntry]:
    """A real conversation's log: the scripted agent and person, each ``words`` said in turn."""

    async def run() -> list[LogEntry]:
        conversation = Conversation(agent=ScriptedAgent(replies), domain=domain, human=scripted_human(steps))
        for said in words:
            await conversation.say(said)
        return list(conversation.log)

    return anyio.run(run)


def answering(*replies: str) -> Any:
    """A candidate factory answering point k with ``replies[k]`` (the history says which point it is), and with
    prose past them."""

    def make(history: Sequence[ChatMessage]) -> ScriptedAgent:
        point = len(history) // 2
        return ScriptedAgent([replies[point] if point < len(replies) else "Done."])

    return make


def scored(entries: list[LogEntry], *replies: str, domain: Any = None) -> dict[str, float | None]:
    """The candidate's scores at the log's first point."""
    report = anyio.run(lambda: evaluate({"c": entries}, {"cand": answering(*replies)}, domain=domain))
    return report.conversations[0].points[0].scores["cand"]


# One recorded turn per verdict; the candidate's first reply, and the scores it must get (None: not applicable).
BOOK = {"city": "Oslo", "nights": 2}
CASES = [
    ("accepted, same payload", "accept", suggest("book", BOOK), {"accepted_payload": 1.0, "same_action": 1.0}),
    (
        "accepted, other payload",
        "accept",
        suggest("book", {"city": "Rome", "nights": 2}),
        {"accepted_payload": 0.0, "same_action": 1.0},
    ),
    (
        "accepted, nothing proposed",
        "accept",
        "Sure.",
        {"accepted_payload": 0.0, "same_action": 0.0, "valid": None},
    ),
    (
        "edited, the person's edit",
        {"edit": {"city": "Oslo", "nights": 3}},
        suggest("book", {"city": "Oslo", "nights": 3}),
        {"edit_distance": 0.0},
    ),
    ("edited, half right", {"edit": {"city": "Oslo", "nights": 3}}, suggest("book", BOOK), {"edit_distance": 0.5}),
    ("edited, not proposed", {"edit": {"city": "Oslo", "nights": 3}}, "Hm.", {"edit_distance": 1.0}),
    (
        "dismissed, proposed again",
        "dismiss",
        suggest("book", BOOK),
        {"repeats_dismissed": 1.0, "accepted_payload": None},
    ),
    (
        "dismissed, avoided",
        "dismiss",
        suggest("book", {"city": "Bergen", "nights": 2}),
        {"repeats_dismissed": 0.0},
    ),
    (
        "an invalid payload, judged now",
        "accept",
        suggest("book", {"city": "Oslo"}),
        {"valid": None, "valid_now": 0.0, "parses": 1.0},
    ),
    ("an unknown action", "accept", suggest("fly", BOOK), {"valid": 0.0, "same_action": 0.0}),
    ("an envelope that never ends", "accept", "<dial>", {"parses": 0.0}),
]


@pytest.mark.parametrize(("name", "step", "reply", "expected"), CASES, ids=[case[0] for case in CASES])
def test_a_reply_is_scored_against_the_persons_verdict(
    name: str, step: Any, reply: str, expected: dict[str, float | None]
) -> None:
    entries = recorded(Trip(), [suggest("book", BOOK), ack()], [step], ["book Oslo"])
    scores = scored(entries, reply, domain=Trip())
    assert {key: scores[key] for key in expected} == expected, name


def test_the_recorded_agent_is_scored_the_same_way() -> None:
    entries = recorded(Trip(), [suggest("book", BOOK), ack()], [{"edit": {"city": "Oslo", "nights": 4}}], ["go"])
    report = anyio.run(lambda: evaluate({"c": entries}, {"cand": answering(suggest("book", BOOK), ack())}))
    first = report.conversations[0].points[0]
    assert first.scores["recorded"]["edit_distance"] == 0.5  # its payload was half the person's edit
    assert first.scores["recorded"]["same_action"] == 1.0
    assert [v.label for v in first.verdicts] == ["edited"]


def test_asks_count_where_the_recorded_agent_asked() -> None:
    entries = recorded(NotesDomain(), [ASK, "fine"], [{"answer": "the first"}], ["remove a note"])
    asked = scored(entries, '<dial><dial-ask id="x">Which one?</dial-ask></dial>', domain=NotesDomain())
    silent = scored(entries, "I will remove one.", domain=NotesDomain())
    assert (asked["asks"], silent["asks"]) == (1.0, 0.0)
    unasked = recorded(NotesDomain(), ["Hello."], [], ["hi"])
    assert scored(unasked, ASK, domain=NotesDomain())["asks"] is None


def test_without_a_domain_the_recording_judges_and_the_rest_is_unverified() -> None:
    entries = recorded(Trip(), [suggest("book", BOOK), ack()], ["accept"], ["book"])
    same = scored(entries, suggest("book", BOOK))
    other = scored(entries, suggest("book", {"city": "Oslo"}))  # invalid for the domain, never judged by the log
    assert (same["valid"], other["valid"]) == (1.0, None)


def test_nothing_runs_and_the_candidate_sees_the_recorded_history() -> None:
    domain = Trip()
    replies = [suggest("look-up", {"city": "Oslo"}, "l"), suggest("book", BOOK), ack()]
    entries = recorded(domain, replies, ["accept"], ["plan"])
    runs = domain.runs
    seen: list[tuple[list[tuple[str, str]], str]] = []

    class Watching:
        def __init__(self, history: Sequence[ChatMessage]) -> None:
            self.history = [(m.role, m.content) for m in history]

        def send(self, message: str) -> str:
            seen.append((self.history, message))
            return [suggest("look-up", {"city": "Rome"}, "l"), suggest("book", BOOK), ack()][
                len(self.history) // 2
            ]

    judge = Trip()
    report = anyio.run(lambda: evaluate({"c": entries}, {"w": Watching}, domain=judge))
    assert domain.runs == runs and judge.runs == 0  # the candidate's look-up of Rome was not run either
    sent = [e.event for e in entries if e.event.type == "sent"]
    replied = [e.event for e in entries if e.event.type == "reply"]
    assert [message for _, message in seen] == [event.message for event in sent]  # type: ignore[attr-defined]
    assert seen[2][0] == [
        (role, text)
        for pair in zip(sent[:2], replied[:2], strict=True)
        for role, text in (("user", pair[0].message), ("assistant", pair[1].text))  # type: ignore[attr-defined]
    ]
    assert report.conversations[0].points[0].candidates["w"].proposals[0].valid is True


def test_turns_to_the_persons_end_and_the_ab_comparison() -> None:
    replies = ["Which city?", suggest("book", BOOK), ack()]
    entries = recorded(Trip(), replies, ["accept"], ["book a trip", "Oslo, 2 nights"])
    quick = answering(suggest("book", BOOK), ack(), ack())
    slow = answering("Which city?", "Say again?", ack())
    report = anyio.run(lambda: evaluate({"c": entries}, {"quick": quick, "slow": slow}, domain=Trip()))
    conversation = report.conversations[0]
    assert conversation.turns_to_end == {"recorded": 2, "quick": 1, "slow": None}
    same = next(c for c in report.comparison if c.score == "same_action")
    assert (same.points, same.differing) == (3, 1)  # only at the first point: quick proposed, slow asked
    assert same.difference == pytest.approx(-1 / 3)
    assert report.summary["quick"]["same_action"].points == ("c#1", "c#2", "c#3")


def test_payload_distance() -> None:
    assert payload_distance({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 2]}) == 0.0
    assert payload_distance({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 3]}) == pytest.approx(1 / 3)
    assert payload_distance({"a": 1}, {"b": 1}) == 1.0
    assert payload_distance(9007199254740993, 9007199254740992) == 1.0  # numbers exact, as the digest binds them


def test_the_report_reads_writes_and_draws(tmp_path: Path) -> None:
    entries = recorded(Trip(), [suggest("book", BOOK), ack()], ["dismiss"], ["book"])
    report = anyio.run(lambda: evaluate({"c": entries}, {"cand": answering(suggest("book", BOOK), ack())}))
    again = msgspec.json.decode(report.to_json(), type=EvalReport)
    assert again == report
    text = str(report)
    assert "worst for cand: point 1" in text and "repeats_dismissed 1.00" in text
    chart = write_chart(report, tmp_path / "chart.png")
    assert chart.read_bytes().startswith(b"\x89PNG")


def _log_file(tmp_path: Path, entries: list[LogEntry]) -> Path:
    path = tmp_path / "c.jsonl"
    with path.open("w", encoding="utf-8") as file:
        export_jsonl(entries, file, conversation_id="c")
    return path


def test_the_command_scores_logs_and_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entries = recorded(NotesDomain(), [suggest("add-note", {"text": "milk"}), ack()], ["accept"], ["add milk"])
    log = _log_file(tmp_path, entries)
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([suggest("add-note", {"text": "milk"}), ack()]))
    out = tmp_path / "out"
    status = main(
        [
            "eval",
            "--log",
            str(log),
            "--candidate",
            f"mine=script:{script}",
            "--domain",
            "dial_runtime.demo:NotesDomain",
            "--out",
            str(out),
        ]
    )
    shown = capsys.readouterr().out
    assert status == 0 and "mine" in shown
    report = msgspec.json.decode((out / "report.json").read_bytes(), type=EvalReport)
    assert report.summary["mine"]["accepted_payload"].mean == 1.0
    assert "![" in (out / "report.md").read_text() and (out / "chart.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["eval", "--candidate", "script:x.json"], "needs recorded conversations"),
        (["eval", "--log", "LOG"], "needs a --candidate"),
        (["eval", "--log", "missing.jsonl", "--candidate", "script:x.json"], "missing.jsonl: cannot read it"),
        (["eval", "--log", "LOG", "--candidate", "python:no.such.module:make"], "No module named"),
        (
            ["eval", "--log", "LOG", "--candidate", "python:nothing"],
            "expected module:factory, e.g. python:my_agents:make",
        ),
        (["eval", "--log", "LOG", "--candidate", "python:json:nothing"], "json has no callable nothing"),
        (["eval", "--log", "LOG", "--candidate", "ftp:x"], "unknown scheme"),
        (
            ["eval", "--id", "c", "--log", "LOG", "--candidate", "script:x"],
            "--id names conversations of a --store",
        ),
    ],
)
def test_the_command_refuses_bad_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], said: str
) -> None:
    entries = recorded(NotesDomain(), ["Hello."], [], ["hi"])
    log = str(_log_file(tmp_path, entries))
    status = main([log if argument == "LOG" else argument for argument in arguments])
    error = capsys.readouterr().err.strip()
    assert status != 0 and said in error and "Traceback" not in error and len(error.splitlines()) == 1


@pytest.mark.llama
def test_a_real_model_is_scored_at_every_point_and_repeatably(tmp_path: Path) -> None:
    """SmolLM2 behind llama.cpp's server as the candidate (an agent URI with repeatable settings: greedy, a seed,
    no prompt cache): it answers at each point with the recorded history, and two evaluations give the same
    scores."""
    from ..llm.test_llama import llama_server

    entries = recorded(NotesDomain(), [suggest("add-note", {"text": "milk"}), ack()], ["accept"], ["add milk"])
    with llama_server(tmp_path / "server.log") as (url, _):
        host = url.removeprefix("http://")
        candidate = f"llamacpp:smollm2@{host}?temperature=0&seed=1&max_tokens=250&extra.cache_prompt=false"
        scoring = lambda: evaluate({"c": entries}, {"smol": candidate}, domain=NotesDomain())  # noqa: E731
        first, second = anyio.run(scoring), anyio.run(scoring)
    points = first.conversations[0].points
    replies = [point.candidates["smol"] for point in points]
    # The model answers every point: with a reply, or with one it wrote past max_tokens, which is a point with no
    # reply that says so (greedy decoding is repeatable on one machine, but where it stops depends on the CPU's
    # arithmetic: on some machines SmolLM2 writes past 250 tokens at both points).
    assert len(points) == 2
    assert all(
        reply.text if reply.error is None else reply.text is None and "finish_reason length" in reply.error
        for reply in replies
    )
    assert [p.scores for p in points] == [p.scores for p in second.conversations[0].points]


SHAPES = [
    ("accepted", [suggest("book", BOOK), ack()], ["accept"], ["book"]),
    ("edited", [suggest("book", BOOK), ack()], [{"edit": {"city": "Oslo", "nights": 5}}], ["book"]),
    ("dismissed", [suggest("book", BOOK), "Fine."], ["dismiss"], ["book"]),
    (
        "read-only, then a card",
        [suggest("look-up", {"city": "Oslo"}, "l"), suggest("book", BOOK), ack()],
        ["accept"],
        ["go"],
    ),
    ("an invalid proposal", [suggest("book", {"city": "Oslo"}), suggest("book", BOOK), ack()], ["accept"], ["go"]),
    ("asked, then two calls", ["Which city?", suggest("book", BOOK), ack()], ["accept"], ["book", "Oslo"]),
    (
        "said instead of deciding",
        [
            suggest("book", BOOK),
            "Rome then.",
        ],
        [{"say": "no, Rome"}],
        ["book"],
    ),
]


@pytest.mark.parametrize(("name", "replies", "steps", "words"), SHAPES, ids=[shape[0] for shape in SHAPES])
def test_the_recorded_agent_as_candidate_scores_as_the_recording(
    tmp_path: Path, name: str, replies: list[str], steps: list[Any], words: list[str]
) -> None:
    """The recorded agent's own replies (its log as a script) handled again score exactly as the recording:
    what the core makes of a reply at a point is what it made of it then."""
    entries = recorded(Trip(), replies, steps, words)
    log = _log_file(tmp_path, entries)
    report = anyio.run(lambda: evaluate({"c": entries}, {"same": f"script:{log}"}, domain=Trip()))
    points = report.conversations[0].points
    assert points, name
    for point in points:
        assert point.scores["same"] == point.scores["recorded"], (name, point.number)
        assert point.candidates["same"].proposals == point.recorded.proposals


class Echo:
    """The recorded agent once more: each message gets the reply the recording's agent gave it."""

    def __init__(self, entries: Sequence[LogEntry]) -> None:
        self.replies: dict[str, list[str]] = {}
        sent: str | None = None
        for entry in entries:
            event = entry.event
            if event.type == "sent":
                sent = event.message  # type: ignore[union-attr]
            elif event.type == "reply" and sent is not None:
                self.replies.setdefault(sent, []).append(event.text)  # type: ignore[union-attr]

    def __call__(self, history: Sequence[ChatMessage]) -> Any:
        replies = self.replies

        class Agent:
            def send(self, message: str) -> str:
                return replies[message][0]

        return Agent()


def note(action: str, payload: dict[str, Any], ident: str) -> str:
    return (
        f'<dial><dial-suggest action="{action}" id="{ident}">Here it is.'
        f"<dial-payload>{json.dumps(payload)}</dial-payload></dial-suggest></dial>"
    )


#: Conversations of several shapes with the notes domain: (replies, the person's steps, the words said).
SHAPES: dict[str, tuple[list[str], list[Any], list[str]]] = {
    "accepted then a refused removal": (
        [note("add-note", {"text": "milk"}, "a"), note("remove-note", {"text": "eggs"}, "b"), ack("b")],
        ["accept"],
        ["add milk"],
    ),
    "a payload the domain refuses": (
        [note("remove-note", {"index": "x"}, "a"), "<dial><dial-inform>Sorry.</dial-inform></dial>"],
        [],
        ["remove the first note"],
    ),
    "edited then dismissed": (
        [note("add-note", {"text": "mlk"}, "a"), note("add-note", {"text": "milk"}, "b"), ack("b")],
        [{"edit": {"text": "milk"}}, "dismiss"],
        ["add milk"],
    ),
    "an ask, then a read-only action": (
        [ASK, note("list-notes", {}, "a"), ack("a")],
        [{"answer": "all of them"}],
        ["which notes?"],
    ),
    "several turns": (
        [note("add-note", {"text": "tea"}, "a"), ack("a"), note("add-note", {"text": "tea"}, "b"), ack("b")],
        ["accept", "accept"],
        ["add tea", "and again"],
    ),
}


@pytest.mark.parametrize("with_domain", [False, True], ids=["no-domain", "domain"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_candidate_identical_to_the_recorded_agent_scores_as_the_recording(
    shape: str, with_domain: bool
) -> None:
    """The baseline agrees with itself: the recorded agent's own replies, scored as a candidate, get the
    recording's verdicts, every score and ``turns_to_end`` alike, whether or not a domain is asked (the domain
    asked now holds an empty notebook, unlike the recording's)."""
    replies, steps, words = SHAPES[shape]
    entries = recorded(NotesDomain(), replies, steps, words)
    domain = NotesDomain() if with_domain else None
    report = anyio.run(lambda: evaluate({"c": entries}, {"same": Echo(entries)}, domain=domain))
    (conversation,) = report.conversations
    assert conversation.points, shape
    for point in conversation.points:
        assert point.scores["same"] == point.scores["recorded"], (shape, point.number)
        assert point.scores["same"]["valid_now"] is None  # nothing needed judging anew
    assert conversation.turns_to_end["same"] == conversation.turns_to_end["recorded"]


def test_the_chart_and_the_table_show_every_number_and_say_what_does_not_apply(tmp_path: Path) -> None:
    """A 0.00 is labelled (its bar a sliver), a score that applies nowhere is marked n/a, the chart has a title,
    and no score's name is cut in the text table."""
    import matplotlib

    entries = recorded(Trip(), [suggest("book", BOOK), ack()], ["dismiss"], ["book"])
    report = anyio.run(lambda: evaluate({"c": entries}, {"cand": answering("Sure.", ack())}))
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        drawn = write_chart(report, tmp_path / "chart.svg").read_text(encoding="utf-8")
    assert (
        "Each side&#39;s mean score over 1 point(s)" in drawn or "Each side's mean score over 1 point(s)" in drawn
    )
    assert ">0.00<" in drawn and ">n/a<" in drawn and ">1.00<" in drawn
    table = str(report).splitlines()
    assert any(line.startswith("edit_distance (lower best) ") for line in table)
    assert any(line.startswith("repeats_dismissed (lower best) ") for line in table)
    assert " n/a " in next(line for line in table if line.startswith("asks "))
