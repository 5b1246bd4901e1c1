"""The terminal surface, used as a person would: the real ``dial-runtime chat`` and ``demo --interactive``
processes in a pseudo-terminal, talking to a real chat-completions server on 127.0.0.1."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pexpect
import pytest
from rich.console import Console

from dial_runtime import Conversation, open_store, scripted_human
from dial_runtime.cli import main
from dial_runtime.demo import NotesDomain
from dial_runtime.runtime.events import InformDeltaEvent, InformEvent, event_from_dict
from dial_runtime.terminal.surface import TerminalSurface

from ..fakes import Agent
from ..openai_server import OpenAIServer, Reply, Request

# pexpect forks while the server's threads run; the child only execs the command line.
pytestmark = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")

DOMAIN = "dial_runtime.demo:NotesDomain"
ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|[()][0-9A-Za-z]|[=>])")
EDITOR = """\
import json, pathlib, sys
queue, seen, target = (pathlib.Path(arg) for arg in sys.argv[1:])
edits = json.loads(queue.read_text())
seen.write_text(seen.read_text() + json.dumps(target.read_text()) + "\\n")
target.write_text(edits.pop(0))
queue.write_text(json.dumps(edits))
"""


def dial(*elements: str) -> str:
    return "<dial>\n  " + "\n  ".join(elements) + "\n</dial>"


def suggest(action: str, text: str, payload: str) -> str:
    return f'<dial-suggest action="{action}">{text}<dial-payload>{payload}</dial-payload></dial-suggest>'


class Terminal:
    """A command line running in a 40x120 pseudo-terminal; ``screen`` is everything it showed, as text."""

    def __init__(self, *args: str, editor: str = "", cwd: Path | None = None) -> None:
        env = {**os.environ, "TERM": "xterm", "NO_COLOR": "1", "PROMPT_TOOLKIT_NO_CPR": "1", "EDITOR": editor}
        self.output = io.StringIO()
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "dial_runtime.cli", *args],
            env=env,
            dimensions=(40, 120),
            encoding="utf-8",
            timeout=10,
            cwd=cwd,
        )
        self.child.logfile_read = self.output

    def expect(self, *texts: str) -> None:
        """Wait until each text has appeared, in order."""
        for text in texts:
            self.child.expect_exact(text)

    def type(self, line: str, *, after: str) -> None:
        """Wait for the prompt ``after``, then type ``line`` and Enter."""
        self.expect(after)
        self.child.send(line + "\r")

    def press(self, keys: str, *, after: str | None = None) -> None:
        """Press keys (after the prompt ``after``, when given)."""
        if after is not None:
            self.expect(after)
        self.child.send(keys)

    def finish(self) -> int:
        """Wait for the process to end; its exit status."""
        self.child.expect(pexpect.EOF)
        self.child.close()
        status: int = self.child.exitstatus
        return status

    @property
    def screen(self) -> str:
        return ANSI.sub("", self.output.getvalue()).replace("\r", "")


Start = Callable[..., Terminal]


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as running:
        yield running


@pytest.fixture
def terminal() -> Iterator[Start]:
    """Starts command lines in terminals; any still running when the test ends is killed."""
    started: list[Terminal] = []

    def start(*args: str, editor: str = "") -> Terminal:
        started.append(Terminal(*args, editor=editor))
        return started[-1]

    yield start
    for term in started:
        if term.child.isalive():
            term.child.terminate(force=True)


def told(request: Request) -> str:
    """The last user message of a request: what the runtime sent in that turn."""
    return str(request.messages[-1]["content"])


def test_a_whole_chat_session(server: OpenAIServer, tmp_path: Path, terminal: Start) -> None:
    arrived = threading.Event()

    def slow(request: Request) -> Reply:
        arrived.set()
        return Reply(dial("<dial-inform>Sorry, I was slow.</dial-inform>"), delay=60)

    server.add(
        dial(suggest("add-note", "Add milk to your notes", '{"text": "buy milk"}')),
        dial("<dial-inform>Added.</dial-inform>"),
        dial(suggest("add-note", "Add a dentist reminder", '{"text": "call the dentist"}')),
        dial(
            "<dial-inform>Noted.</dial-inform>",
            '<dial-ask response-type="choice">Which note should I share?'
            '<dial-option value="milk">The milk note</dial-option>'
            '<dial-option value="dentist" default="true">The dentist note</dial-option></dial-ask>',
        ),
        dial(suggest("remove-note", "Remove the milk note", '{"text": "buy milk"}')),
        slow,
        dial("<dial-inform>Yes, I am here.</dial-inform>"),
    )
    queue, seen, editor = tmp_path / "edits.json", tmp_path / "seen.txt", tmp_path / "editor.py"
    long = "call the dentist before the long weekend, about the crown, in the morning"
    queue.write_text(json.dumps(["not json", json.dumps({"text": long}), '{"text": "call the dentist at 9"}']))
    seen.write_text("")
    editor.write_text(EDITOR)
    transcript = tmp_path / "transcript.txt"
    term = terminal(
        "chat",
        "--agent",
        f"{server.base_url}#test-model",
        "--domain",
        DOMAIN,
        "--transcript",
        str(transcript),
        "--no-stream",
        editor=shlex.join([sys.executable, str(editor), str(queue), str(seen)]),
    )

    # Accepted.
    term.type("add milk", after="you:")
    term.expect("╭─", "sg-1 · add-note", "Add the note 'buy milk'", "in the agent's words: Add milk to your notes")
    term.type("a", after="sg-1 ›")
    term.expect("✓ done: Add the note 'buy milk'", "agent: Added.", "turn(s)")

    # Edited in $EDITOR: not JSON (asked again), then refused by the domain, then accepted.
    term.type("add the dentist", after="you:")
    term.type("e", after="sg-2 ›")
    term.expect("That is not JSON", "the edit was refused: Expected `str` of length <= 60.")
    term.expect("refused: Expected `str` of length <= 60. (field text, code invalid-payload)", long[:40])
    term.type("e", after="sg-2 ›")
    term.expect("✓ done: Add the note 'call the dentist at 9'", "edited)")

    # A choice answered from the numbered menu, the default marked.
    term.expect("agent asks: Which note should I share?", "1. The milk note", "2. The dentist note (default)")
    term.type("1", after="choose 1-2 (Enter for 2)")
    term.expect("you answer: milk")

    # A destructive suggestion, dismissed.
    term.expect("sg-3 · remove-note", "DESTRUCTIVE", "Remove the note 'buy milk'")
    term.type("d", after="sg-3 ›")
    term.expect("– dismissed: Remove the note 'buy milk'", "turn(s)")

    # Ctrl-C while the agent is slow cancels the turn; the next message still carries the dismissal.
    term.type("hello?", after="you:")
    term.expect("the agent is told sg-3:dismissed", "the agent is thinking")
    assert arrived.wait(10)
    term.press("\x03")
    term.expect("turn cancelled")
    term.type("are you there", after="you:")
    term.expect("agent: Yes, I am here.", "turn(s)")
    term.type("/quit", after="you:")
    assert term.finish() == 0

    requests = server.requests
    assert not any(request.stream for request in requests)
    assert len(requests) == 7
    assert requests[0].messages[0]["role"] == "system" and "remove-note" in requests[0].messages[0]["content"]
    assert 'yield="sg-1:done"' in told(requests[1])
    assert [json.loads(line) for line in seen.read_text().splitlines()] == [
        json.dumps({"text": "call the dentist"}, indent=2) + "\n",
        "not json\n",
        json.dumps({"text": long}, indent=2) + "\n",
    ]
    assert 'yield="sg-2:done"' in told(requests[3]) and '"edited":true' in told(requests[3])
    assert told(requests[4]).endswith("milk")
    assert 'yield="sg-3:dismissed"' in told(requests[5]) and told(requests[5]).endswith("hello?")
    last = told(requests[6])
    assert 'yield="sg-3:dismissed"' in last and last.endswith("are you there")
    assert not any("hello?" in str(message["content"]) for message in requests[6].messages)

    lines = transcript.read_text(encoding="utf-8").splitlines()
    for line in [
        "you: add milk",
        "agent proposes sg-1: Add the note 'buy milk'",
        "   you decide on sg-1: accept",
        "   the edit was refused: Expected `str` of length <= 60.",
        '   you decide on sg-2: edit → {"text": "call the dentist at 9"}',
        "   2. The dentist note (default)",
        "   you answer: milk",
        "agent proposes sg-3: Remove the note 'buy milk'  [DESTRUCTIVE]",
        "   – dismissed: Remove the note 'buy milk'",
        "   (turn cancelled: what the agent was not told goes with your next message)",
        "agent: Yes, I am here.",
    ]:
        assert line in lines, line
    assert lines.index("you: hello?") < lines.index("you: are you there")


def test_streamed_replies_and_ctrl_c_at_a_decision(server: OpenAIServer, terminal: Start) -> None:
    server.add(
        Reply(dial(suggest("add-note", "Add milk", '{"text": "buy milk"}')), chunks=4, interval=0.05),
        Reply(dial("<dial-inform>Fine, I will not.</dial-inform>"), chunks=2),
        dial("<dial-inform>Bye.</dial-inform>"),
    )
    term = terminal("chat", "--agent", f"{server.base_url}#test-model", "--domain", DOMAIN)
    term.type("add milk", after="you:")
    term.expect("the agent is writing…", "characters", "sg-1 · add-note")
    term.press("\x03", after="sg-1 ›")
    term.expect("– superseded: Add the note 'buy milk'", "turn cancelled")
    term.type("never mind", after="you:")
    term.expect("agent: Fine, I will not.", "turn(s)")
    # Ctrl-C clears a line being typed; Ctrl-D at the empty prompt ends the session.
    term.press("draft", after="you:")
    term.press("\x03" + "ok\r")
    term.expect("agent: Bye.", "turn(s)")
    term.press("\x04", after="you:")
    assert term.finish() == 0

    assert [request.stream for request in server.requests] == [True, True, True]
    assert 'yield="sg-1:superseded"' in told(server.requests[1])
    assert told(server.requests[1]).endswith("never mind")
    assert told(server.requests[2]).split("\n\n")[-1] == "ok"


def test_text_shows_as_it_arrives_and_only_once(server: OpenAIServer, terminal: Start) -> None:
    story = "Once upon a time there was a lighthouse keeper who never slept."
    server.add(
        Reply(dial(f"<dial-inform>{story}</dial-inform>"), chunks=8, hold_after=4),
        Reply("Fine, fine, fine. " + dial("<dial-inform>The end.</dial-inform>"), chunks=6, interval=0.02),
    )
    term = terminal("chat", "--agent", f"{server.base_url}#test-model", "--domain", DOMAIN)
    term.type("tell me a story", after="you:")
    term.expect("agent: Once upon")  # while the rest of the reply is held back by the server
    assert story not in term.screen
    term.press("\x03")
    term.expect("turn cancelled")
    term.type("go on", after="you:")
    term.expect("agent: Fine, fine, fine.", "agent: The end.", "turn(s)")
    term.press("\x04", after="you:")
    assert term.finish() == 0
    screen = term.screen
    assert screen.count("Fine, fine, fine.") == 1 and screen.count("The end.") == 1, screen


def test_a_turn_the_person_cancels_is_logged_as_theirs(
    server: OpenAIServer, tmp_path: Path, terminal: Start
) -> None:
    server.add(Reply(dial("<dial-inform>Once upon a time, far away.</dial-inform>"), chunks=8, hold_after=3))
    store = f"sqlite:{tmp_path / 'c.db'}"
    term = terminal("chat", "--agent", f"{server.base_url}#m", "--domain", DOMAIN, "--store", store, "--id", "c1")
    term.type("tell me a story", after="you:")
    term.expect("agent: Once")
    term.press("\x03")
    term.expect("turn cancelled")
    term.press("\x04", after="you:")
    assert term.finish() == 0
    shown = subprocess.run(
        [sys.executable, "-m", "dial_runtime.cli", "log", "c1", "--store", store],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert "cancelled by the person" in shown, shown


def test_chat_cuts_a_stalled_stream_at_its_idle_deadline(server: OpenAIServer, terminal: Start) -> None:
    story = "Once upon a time there was a lighthouse keeper who never slept."
    server.add(
        Reply(dial(f"<dial-inform>{story}</dial-inform>"), chunks=8, hold_after=4),
        Reply(dial("<dial-inform>Sorry, I was cut off.</dial-inform>")),
    )
    term = terminal("chat", "--agent", f"{server.base_url}#m", "--domain", DOMAIN, "--idle-timeout", "0.5")
    term.type("tell me a story", after="you:")
    term.expect("agent: Once upon", "agent: Sorry, I was cut off.")
    term.press("\x04", after="you:")
    assert term.finish() == 0
    assert "the idle deadline passed" in told(server.requests[1])


def test_ctrl_c_at_the_empty_prompt_ends_the_session(
    server: OpenAIServer, tmp_path: Path, terminal: Start
) -> None:
    transcript = tmp_path / "transcript.txt"
    term = terminal("chat", "--agent", f"{server.base_url}#m", "--domain", DOMAIN, "--transcript", str(transcript))
    term.press("\x03", after="you:")
    assert term.finish() == 0
    assert transcript.exists() and not server.requests


def test_the_interactive_demo_lets_the_person_decide(terminal: Start) -> None:
    term = terminal("demo", "--interactive")
    term.expect("you: add a note: buy milk", "sg-1 · add-note")
    term.type("a", after="sg-1 ›")
    term.expect("✓ done: Add the note 'buy milk'", "agent: Added. You have 1 note.")
    # Edited inline (no $EDITOR): the payload is shown for editing; Esc Enter submits.
    term.expect("you: add one for the dentist, and tidy up", "sg-2 · add-note")
    term.type("e", after="sg-2 ›")
    term.expect("Esc then Enter finishes", '"call the dentist"')
    term.press("\x7f" * 40 + '{"text": "call the dentist soon"}' + "\x1b\r")
    term.expect("✓ done: Add the note 'call the dentist soon'")
    term.expect("sg-3 · remove-note", "DESTRUCTIVE")
    term.type("x", after="sg-3 ›")
    term.expect("Type a, d, e, s or l (/help explains).")
    term.type("d", after="sg-3 ›")
    term.expect("– dismissed: Remove the note 'buy milk'", "List the notes", "read-only: runs at once")
    # Enter takes the marked default.
    term.type("", after="choose 1-2 (Enter for 2)")
    term.expect("you answer: none", "(the conversation has ended)")
    assert term.finish() == 0
    assert '"notes": ["buy milk", "call the dentist soon"]' in term.screen


def test_chat_refuses_a_domain_it_cannot_load(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chat", "--agent", "ollama:m", "--domain", "dial_runtime.demo:NoSuchDomain"]) == 2
    assert "has no callable NoSuchDomain" in capsys.readouterr().err


def test_a_stored_chat_is_taken_up_where_a_killed_session_left_it(
    server: OpenAIServer, tmp_path: Path, terminal: Start
) -> None:
    server.add(
        dial(suggest("add-note", "Add milk", '{"text": "buy milk"}')),
        dial("<dial-inform>Added.</dial-inform>"),
        # A suggestion is put to the person once its reply has ended: the process is killed while they decide.
        dial(suggest("add-note", "Add bread", '{"text": "buy bread"}')),
        dial("<dial-inform>Both are in.</dial-inform>"),
    )
    store = f"sqlite:{tmp_path / 'chats.db'}"
    chat = ("chat", "--agent", f"{server.base_url}#m", "--domain", DOMAIN, "--store", store, "--id", "kitchen")
    first = terminal(*chat)
    first.expect("conversation kitchen (new) in sqlite:")
    first.type("add milk", after="you:")
    first.type("a", after="sg-1 ›")
    first.expect("agent: Added.")
    first.type("and bread", after="you:")
    first.expect("sg-2 · add-note", "sg-2 ›")
    first.child.kill(9)
    first.child.expect(pexpect.EOF)

    second = terminal(*chat)
    second.expect("conversation kitchen", "sg-2 · add-note", "waited for your decision")
    second.type("a", after="sg-2 ›")
    second.expect("✓ done: Add the note 'buy bread'", "agent: Both are in.")
    second.type("/quit", after="you:")
    assert second.finish() == 0

    last = server.requests[-1]
    assert 'yield="sg-2:done"' in told(last)
    spoken = [message["content"] for message in last.messages if message["role"] == "user"]
    assert spoken[0].endswith("add milk") and spoken[2].endswith("and bread")
    assert [message["role"] for message in last.messages[1:]] == ["user", "assistant"] * 3 + ["user"]
    assert "buy bread" in last.messages[6]["content"]  # the reply the person was deciding on when the process died


def _milk_chat(tmp_path: Path, conversation_id: str) -> tuple[str, tuple[str, ...]]:
    """A store, and the ``chat`` command line on it for ``conversation_id``, whose script agent proposes adding
    "buy milk", then says "Added."."""
    path = tmp_path / "replies.json"
    replies = [
        dial(suggest("add-note", "Add milk", '{"text": "buy milk"}')),
        dial("<dial-inform>Added.</dial-inform>"),
    ]
    path.write_text(json.dumps(replies), encoding="utf-8")
    store = f"sqlite:{tmp_path / 'chats.db'}"
    return store, (
        "chat",
        "--agent",
        f"script:{path}",
        "--domain",
        DOMAIN,
        "--store",
        store,
        "--id",
        conversation_id,
    )


def test_a_person_can_leave_a_decision_for_later_and_take_it_up(
    tmp_path: Path, terminal: Start, capsys: pytest.CaptureFixture[str]
) -> None:
    """ "l" leaves a suggestion waiting, /quit and Ctrl-D at a decision keep it waiting, /help is answered in the
    terminal, and a reopened conversation starts with a recap; the decision is recorded as the person's."""
    store, chat = _milk_chat(tmp_path, "kitchen")
    chat = (*chat, "--as", "ann")

    first = terminal(*chat)
    first.expect("conversation kitchen (new)")
    first.type("/help", after="you:")
    first.expect("l leaves it for later", "this text (never sent to the agent)")
    first.type("add milk", after="you:")
    first.expect("sg-1 · add-note")
    first.type("?", after="l later:")
    first.expect("/quit        leave")
    first.type("l", after="sg-1 ›")
    first.expect("sg-1 waits for your decision", "sg-1 waiting for you: /pending to decide now")
    first.type("/quit", after="you:")
    first.expect("chat --id kitchen takes it up")
    assert first.finish() == 0

    second = terminal(*chat)
    second.expect(
        "conversation kitchen in", "waiting for you: sg-1", "sg-1 · add-note", "waited for your decision"
    )
    second.press("\x04", after="sg-1 ›")  # Ctrl-D: leave, the decision still waiting
    second.expect("sg-1 waits for your decision")
    assert second.finish() == 0

    third = terminal(*chat)
    third.expect("waiting for you: sg-1")
    third.type("a", after="sg-1 ›")
    third.expect("✓ done: Add the note 'buy milk'", "agent: Added.")
    third.type("/quit", after="you:")
    assert third.finish() == 0
    assert main(["log", "kitchen", "--store", store]) == 0
    trail = capsys.readouterr().out
    assert "decided       sg-1 accept by ann" in trail
    assert trail.count("deferred      suggestion sg-1") == 1, "leaving again at the prompt adds nothing"
    assert "superseded" not in trail and "/help" not in trail


def test_the_log_says_who_decided(tmp_path: Path, terminal: Start, capsys: pytest.CaptureFixture[str]) -> None:
    store, chat = _milk_chat(tmp_path, "k")
    chat = (*chat, "--as", "ann")
    first = terminal(*chat)
    first.type("add milk", after="you:")
    first.type("/quit", after="sg-1 ›")
    assert first.finish() == 0
    second = terminal(*chat[:-1], "bob")
    second.type("a", after="sg-1 ›")
    second.expect("agent: Added.")
    second.type("/quit", after="you:")
    assert second.finish() == 0
    assert main(["log", "k", "--store", store]) == 0
    assert "decided       sg-1 accept by bob" in capsys.readouterr().out


def test_two_sessions_on_one_conversation(tmp_path: Path, terminal: Start) -> None:
    """The second session to decide hears that it was decided elsewhere, and by whom, and carries on."""
    _, chat = _milk_chat(tmp_path, "k")
    setup = terminal(*chat, "--as", "ann")
    setup.type("add milk", after="you:")
    setup.type("/quit", after="sg-1 ›")
    assert setup.finish() == 0

    ann, bob = terminal(*chat, "--as", "ann"), terminal(*chat, "--as", "bob")
    ann.expect("sg-1 ›")
    bob.expect("sg-1 ›")
    ann.child.send("a\r")
    ann.expect("✓ done: Add the note 'buy milk'", "agent: Added.", "you:")
    bob.child.send("a\r")
    bob.expect("sg-1 was decided elsewhere by ann: accept (done)", "you:")
    bob.type("/quit", after="")
    ann.type("/quit", after="")
    assert (ann.finish(), bob.finish()) == (0, 0)
    assert "Traceback" not in bob.screen


def test_approvals_given_elsewhere_show_at_the_prompt_as_they_are_stored(
    tmp_path: Path, terminal: Start, capsys: pytest.CaptureFixture[str]
) -> None:
    """A card two people must approve, left for later: while ann is at the prompt, rex approves from the command
    line and bob from another; each approval shows above her prompt as it is stored (the count, who), then the
    card's end, and the session goes on."""
    store, chat = _milk_chat(tmp_path, "k")
    chat = tuple("tests.terminal_domains:ReviewedNotes" if part == DOMAIN else part for part in chat)
    ann = terminal(*chat, "--as", "ann")
    ann.type("add milk", after="you:")
    ann.expect("0 of 2 approvals")
    ann.type("l", after="sg-1 ›")
    ann.expect("sg-1 waiting for you", "you:")
    decide = ["decide", "k", "sg-1", "accept", "--store", store, "--agent", chat[2], "--domain", chat[4]]
    assert main([*decide, "--as", "rex"]) == 0
    ann.expect("(sg-1: 1 of 2 approvals: rex)", "you:")
    assert main([*decide, "--as", "bob"]) == 0
    ann.expect("(sg-1 was decided elsewhere by bob via cli: accept)", "done: Add the note 'buy milk'")
    capsys.readouterr()
    ann.type("/quit", after="you:")
    assert ann.finish() == 0
    assert "Traceback" not in ann.screen


def test_a_claim_made_elsewhere_shows_at_the_prompt_as_it_is_stored(tmp_path: Path, terminal: Start) -> None:
    """While ann is at the prompt, rex claims the waiting card and bob is assigned it (another process's store
    object): each shows above her prompt as it is stored, and her own decision still goes through."""
    store, chat = _milk_chat(tmp_path, "k")
    ann = terminal(*chat, "--as", "ann")
    ann.type("add milk", after="you:")
    ann.type("l", after="sg-1 ›")
    ann.expect("sg-1 waiting for you", "you:")

    async def elsewhere(how: str) -> float:
        opened = open_store(store)
        try:
            conversation = await Conversation.open(
                opened, "k", agent=Agent([]), domain=NotesDomain(), human=scripted_human([])
            )
            if how == "claim":
                return await conversation.claim("sg-1", by="rex", seconds=600)
            await conversation.assign("sg-1", by="rex", person="bob")
            return 0.0
        finally:
            await opened.aclose()

    until = anyio.run(elsewhere, "claim")
    ann.expect(f"(sg-1: claimed by rex until {time.strftime('%H:%M', time.localtime(until))})", "you:")
    anyio.run(elsewhere, "assign")
    ann.expect("(sg-1: assigned to bob)", "you:")  # an assignment to someone else ends rex's claim
    ann.type("/quit", after="")
    assert ann.finish() == 0
    assert "Traceback" not in ann.screen


@pytest.mark.parametrize(
    ("deltas", "final", "shown"),
    [
        (["Hel", "lo"], "Hello there", "agent: Hello there\n"),
        (["Use a "], "Use a <tag>.", "agent: Use a <tag>.\n"),
        (["Wrong"], "Right", "agent: Wrong\nagent: Right\n"),  # the early text disagreed: the final on its line
    ],
    ids=["completed", "the-rest-added", "corrected"],
)
def test_the_terminal_prints_text_as_it_arrives_and_never_twice(deltas: list[str], final: str, shown: str) -> None:
    output = io.StringIO()
    surface = TerminalSurface(Console(file=output, width=80, color_system=None))
    for text in deltas:
        surface.on_event(InformDeltaEvent(text=text, act="inform", element=0))
    surface.on_event(InformEvent(text=final, act="inform", element=0))
    assert output.getvalue() == shown
    assert surface.lines == [f"agent: {final}"]


def test_a_refused_proposal_is_a_note_never_a_card(tmp_path: Path, terminal: Start) -> None:
    """An invalid suggestion is never shown as something to decide: no card, no choice, one line saying the
    agent's proposal was refused and why; the valid one beside it is a card as usual."""
    replies = [
        dial(
            suggest("fly", "Fly there", "{}"),
            suggest("add-note", "Add an empty note", '{"text": ""}'),
            suggest("add-note", "Add milk", '{"text": "buy milk"}'),
        ),
        dial("<dial-inform>Added the one that was right.</dial-inform>"),
    ]
    (tmp_path / "replies.json").write_text(json.dumps(replies))
    term = terminal("chat", "--agent", f"script:{tmp_path / 'replies.json'}", "--domain", DOMAIN)
    term.type("add milk", after="you:")
    term.expect(
        "(the agent's proposal fly was refused and not shown to you: There is no action 'fly'.",
        "(the agent's proposal add-note was refused and not shown to you: Expected `str` of length >= 1.)",
        "sg-3 · add-note",
    )
    term.type("a", after="sg-3 ›")
    term.expect("✓ done: Add the note 'buy milk'", "agent: Added the one that was right.")
    term.type("/quit", after="you:")
    assert term.finish() == 0
    screen = term.screen
    assert "sg-1 ·" not in screen and "sg-2 ·" not in screen and "✗ invalid" not in screen


def test_a_card_that_repeats_one_done_already_is_marked() -> None:
    output = io.StringIO()
    surface = TerminalSurface(Console(file=output, width=100, color_system=None))
    shown = {"type": "suggestion", "action": "add-note", "text": "", "payload": {"text": "buy milk"}}
    shown |= {"preview": "Add the note 'buy milk'", "destructive": False, "mutates": True}
    surface.on_event(event_from_dict({**shown, "id": "sg-1"}))
    surface.on_event(event_from_dict({"type": "outcome", "id": "sg-1", "action": "add-note", "status": "done"}))
    surface.on_event(event_from_dict({**shown, "id": "sg-2", "done_before": "sg-1"}))
    cards = output.getvalue().split("sg-2 · add-note")
    assert len(cards) == 2 and "already done" not in cards[0] and "already done as sg-1" in cards[1]
    assert "agent proposes sg-2: Add the note 'buy milk'  [already done as sg-1]" in surface.lines
