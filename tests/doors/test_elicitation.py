"""MCP elicitation as a client: a real MCP server (the tests' own, on the ``mcp`` SDK's resolvers) asks the user in
the middle of a tool call, over the 2026-07-28 protocol (``input_required`` rounds) and the handshake versions
(``elicitation/create``); each question is a card a person answers on a surface, on the log, and the server hears
accept (with the form), decline or cancel."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dial_runtime import Conversation, ScriptedAgent, policy_human
from dial_runtime.adapters.mcp import Elicitation, Elicited, McpDomain
from dial_runtime.agents.outside import OutsideAgent
from dial_runtime.doors.elicitation import Elicitations, Questions, question_payload
from dial_runtime.driver.built import DeferringHuman
from dial_runtime.runtime.records import Accept, Decision, Defer, Dismiss, Edit, Say, Suggestion
from dial_runtime.stores import StorePort
from dial_runtime.views.person import Card, project

from ..fakes import envelope, suggest
from ..strategies import json_values
from ..terminal.test_terminal import Start, Terminal, terminal
from ..web_server import accept, decode, free_port, run_input, server_process

pytestmark = pytest.mark.anyio
__all__ = ["terminal"]  # the fixture, from the terminal's tests

ROOT = Path(__file__).parents[2]
ASKING = [sys.executable, str(ROOT / "tests" / "mcp_asking_server.py")]
CLI = str(Path(sys.executable).parent / "dial-runtime")
MODES = [pytest.param("auto", id="2026-07-28"), pytest.param("legacy", id="handshake")]


class Person:
    """Answers each question's card with what ``answer(payload)`` gives (a decision), and keeps what it saw."""

    def __init__(self, answer: Callable[[dict[str, Any]], Decision | Defer]) -> None:
        self.answering = answer
        self.seen: list[Suggestion] = []

    def decide(self, suggestion: Suggestion) -> Decision | Defer:
        self.seen.append(suggestion)
        return self.answering(dict(suggestion.payload))

    def answer(self, ask: Any) -> None:
        return None


def filled(**answer: Any) -> Callable[[dict[str, Any]], Decision]:
    return lambda payload: Edit({**payload, "answer": answer})


def effects(ledger: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []


async def cards(store: StorePort) -> dict[str, Card]:
    """Every question's card in the store, by conversation."""
    found = {}
    for conversation in await store.conversations():
        for item in project(await store.read(conversation)).items:
            if isinstance(item, Card) and conversation.startswith("elicit:"):
                found[conversation] = item
    return found


def asking(ledger: Path, elicit: Any, mode: str = "auto", **options: Any) -> McpDomain:
    options.setdefault("deadline", 20)
    return McpDomain.stdio([*ASKING, "--ledger", str(ledger)], elicit=elicit, protocol=mode, **options)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.jsonl"


# --- the answers ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_form_filled_in_is_accepted_with_the_answer_and_the_card_is_on_the_log(
    mode: str, ledger: Path, store: StorePort
) -> None:
    person = Person(filled(name="release", force=True))
    async with asking(ledger, Elicitations(store, human=person), mode) as domain:
        result = await domain.run("rename_branch", {"branch": "main"}, key="run-1")
    assert result == {"result": "renamed main to release"}
    assert effects(ledger) == [{"tool": "rename_branch", "branch": "main", "name": "release", "force": True}]
    (shown,) = person.seen
    assert shown.preview.startswith("Asks: What should the branch 'main' be called?")
    assert "Name (required): (to fill in)" in shown.preview and "default false" in shown.preview
    found = await cards(store)
    assert list(found) == ["elicit:@key:run-1:q1"]
    card = found["elicit:@key:run-1:q1"]
    assert card.status == "done" and card.payload["answer"] == {"name": "release", "force": True}
    assert (
        card.proposed["tool"] == "rename_branch" and "answer" not in card.proposed
    )  # a required field, no default


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("decision", "heard"),
    [
        pytest.param(Dismiss(), "decline", id="dismissed-declines"),
        pytest.param(Say("never mind"), "cancel", id="words-instead-cancel"),
        pytest.param(Accept(), "cancel", id="accepted-unanswered-cancels"),
    ],
)
async def test_what_the_person_does_is_what_the_server_hears(
    mode: str, decision: Decision, heard: str, ledger: Path, store: StorePort
) -> None:
    async with asking(ledger, Elicitations(store, human=Person(lambda payload: decision)), mode) as domain:
        result = await domain.run("rename_branch", {"branch": "main"}, key="run-1")
    assert result == {"result": f"not renamed: the user chose {heard}"}
    assert effects(ledger) == []


@pytest.mark.parametrize("mode", MODES)
async def test_two_questions_in_one_call_are_two_cards_answered_in_turn(
    mode: str, ledger: Path, store: StorePort
) -> None:
    def answer(payload: dict[str, Any]) -> Decision:
        if "plan" in payload["question"]:
            return filled(plan="team", age=30)(payload)
        return filled(sure=True)(payload)

    async with asking(ledger, Elicitations(store, human=Person(answer)), mode) as domain:
        result = await domain.run("open_account", {"owner": "ada"}, key="run-2")
    assert result == {"result": "opened ada's team account"}
    assert effects(ledger) == [{"tool": "open_account", "owner": "ada", "plan": "team", "age": 30}]
    assert sorted(await cards(store)) == ["elicit:@key:run-2:q1", "elicit:@key:run-2:q2"]


async def test_an_answer_the_form_refuses_is_refused_and_asked_again(ledger: Path, store: StorePort) -> None:
    """Too young, then a plan that is no choice: each edit is refused with the field at fault, the card asks
    again, and the third answer goes through."""
    answers = iter([{"plan": "team", "age": 12}, {"plan": "gold", "age": 30}, {"plan": "free", "age": 40}])

    def answer(payload: dict[str, Any]) -> Decision:
        if "plan" in payload["question"]:
            return Edit({**payload, "answer": next(answers)})
        return filled(sure=True)(payload)

    person = Person(answer)
    async with asking(ledger, Elicitations(store, human=person)) as domain:
        result = await domain.run("open_account", {"owner": "ada"}, key="run-3")
    assert result == {"result": "opened ada's free account"}
    refused = [shown.issue for shown in person.seen if shown.issue is not None]
    assert [issue.field for issue in refused] == ["answer.age", "answer.plan"]


async def test_an_edit_that_loosens_the_form_does_not_reach_the_server(ledger: Path, store: StorePort) -> None:
    """The card's payload carries the form; an edit that changes it passes the card's check, but the server's
    own form decides what it hears: cancel, never an answer its schema refuses."""

    def answer(payload: dict[str, Any]) -> Decision:
        form = json.loads(json.dumps(payload["form"]))
        del form["properties"]["age"]["minimum"]
        return Edit({**payload, "form": form, "answer": {"plan": "team", "age": 12}})

    async with asking(ledger, Elicitations(store, human=Person(answer))) as domain:
        result = await domain.run("open_account", {"owner": "ada"}, key="run-4")
    assert result == {"result": "not opened"}
    assert effects(ledger) == []


async def test_a_page_to_open_is_accepted_or_declined(ledger: Path, store: StorePort) -> None:
    """URL mode (the SDK asks it over the handshake versions only): the card shows the page; accepted, the server
    hears accept, with no content."""
    person = Person(lambda payload: Accept())
    async with asking(ledger, Elicitations(store, human=person), "legacy") as domain:
        assert await domain.run("sign_in", {"service": "git"}) == {"result": "sign-in: accept"}
    async with asking(ledger, Elicitations(store, human=Person(lambda payload: Dismiss())), "legacy") as domain:
        assert await domain.run("sign_in", {"service": "git"}) == {"result": "sign-in: decline"}
    assert person.seen[0].preview == "Asks: Sign in to git — open https://example.com/git/login"
    assert [effect["action"] for effect in effects(ledger)] == ["accept", "decline"]


# --- waiting: deadlines, a call given up, a run asked again -----------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_question_nobody_answers_in_time_is_cancelled_and_its_card_expires(
    mode: str, ledger: Path, store: StorePort
) -> None:
    async with asking(ledger, Elicitations(store, wait=0.5), mode) as domain:
        with anyio.fail_after(15):
            result = await domain.run("rename_branch", {"branch": "main"}, key="run-5")
    assert result == {"result": "not renamed: the user chose cancel"}
    card = (await cards(store))["elicit:@key:run-5:q1"]
    assert card.status == "dismissed" and card.reported is not None and card.reported.expired


@pytest.mark.parametrize("mode", MODES)
async def test_the_call_s_deadline_stops_while_a_person_answers(mode: str, ledger: Path, store: StorePort) -> None:
    """The call may take 1 s; the person takes 2 s to answer (deciding from elsewhere, as a panel would): the
    call is not cut short, since the person's time is not the server's."""
    async with (
        asking(ledger, Elicitations(store), mode, deadline=1.0) as domain,
        anyio.create_task_group() as tasks,
    ):

        async def answer_later() -> None:
            await anyio.sleep(2.0)
            question = await Conversation.open(
                store, "elicit:@key:run-6:q1", agent=OutsideAgent(), domain=Questions(), human=DeferringHuman()
            )
            (card,) = [item for item in project(question.log).items if isinstance(item, Card)]
            await question.decide(card.id, Edit({**card.payload, "answer": {"name": "later"}}), by="ada")

        tasks.start_soon(answer_later)
        result = await domain.run("rename_branch", {"branch": "main"}, key="run-6")
    assert result == {"result": "renamed main to later"}


async def test_a_call_given_up_while_its_question_waits_withdraws_the_card(ledger: Path, store: StorePort) -> None:
    async with asking(ledger, Elicitations(store)) as domain:
        with anyio.move_on_after(3):
            await domain.run("rename_branch", {"branch": "main"}, key="run-7")
    card = (await cards(store))["elicit:@key:run-7:q1"]
    assert card.status == "superseded" and not card.waiting
    assert effects(ledger) == []


async def test_a_run_asked_again_under_its_key_finds_the_answer_given(ledger: Path, store: StorePort) -> None:
    """Recovery calls a run again under the same key: its question is the same card, answered already, and the
    person is not asked twice."""
    person = Person(filled(name="release"))
    async with asking(ledger, Elicitations(store, human=person)) as domain:
        first = await domain.run("rename_branch", {"branch": "main"}, key="run-8")
        again = await domain.run("rename_branch", {"branch": "main"}, key="run-8")
    assert first == again == {"result": "renamed main to release"}
    assert len(person.seen) == 1


async def test_without_elicit_the_server_is_told_elicitation_is_not_offered(ledger: Path) -> None:
    async with McpDomain.stdio([*ASKING, "--ledger", str(ledger)], deadline=20, protocol="legacy") as domain:
        with pytest.raises(Exception, match=r"(?i)elicitation|not supported|capab"):
            await domain.run("rename_branch", {"branch": "main"})
    assert effects(ledger) == []


async def test_an_elicit_that_raises_is_a_cancel_and_the_session_lives_on(ledger: Path) -> None:
    async def broken(asked: Elicitation) -> Elicited:
        raise RuntimeError("no person here")

    async with asking(ledger, broken) as domain:
        assert await domain.run("rename_branch", {"branch": "a"}) == {
            "result": "not renamed: the user chose cancel"
        }
        assert await domain.run("rename_branch", {"branch": "b"}) == {
            "result": "not renamed: the user chose cancel"
        }


# --- the cards' domain ----------------------------------------------------------------------------------------

FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "title": "Name"},
        "force": {"type": "boolean", "default": False},
    },
    "required": ["name"],
}


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"server": "s", "question": "q", "form": FORM}, None),
        ({"server": "s", "question": "q", "form": FORM, "answer": {"name": "x"}}, None),
        ({"server": "s", "question": "q", "url": "https://example.com"}, None),
        ({"server": "s", "question": "q", "form": FORM, "answer": {"force": True}}, "answer"),
        ({"server": "s", "question": "q", "form": FORM, "answer": {"name": ""}}, "answer.name"),
        ({"server": "s", "question": "q", "form": FORM, "answer": {"name": 3}}, "answer.name"),
        ({"server": "s", "question": "q", "url": "https://example.com", "answer": {}}, "answer"),
        ({"server": "s", "question": "q"}, None),
        ({"server": "s", "question": "q", "form": FORM, "url": "u"}, None),
        ({"server": "s", "question": "", "form": FORM}, "question"),
        ({"server": "s", "question": "q", "form": FORM, "extra": 1}, "extra"),
        (
            {"server": "s", "question": "q", "form": {"type": "object", "properties": {"a": {"type": "object"}}}},
            "form",
        ),
        (
            {"server": "s", "question": "q", "form": {"type": "object", "properties": {"a": {"type": "nope"}}}},
            "form",
        ),
        ({"server": "s", "question": "q", "form": ["not", "a", "form"]}, "form"),
    ],
)
def test_the_questions_domain_checks_the_question_and_the_answer(
    payload: dict[str, Any], field: str | None
) -> None:
    issue = Questions().validate("answer", payload)
    valid = field is None and ("form" in payload) != ("url" in payload)
    assert (issue is None) == valid, issue
    if field is not None:
        assert issue is not None and issue.field is not None and issue.field.startswith(field)


def test_the_defaults_are_the_answer_when_they_answer_every_required_field() -> None:
    optional = {**FORM, "required": []}
    asked = Elicitation(server="s", message="q", schema=optional)
    assert question_payload(asked)["answer"] == {"force": False}
    assert "answer" not in question_payload(Elicitation(server="s", message="q", schema=FORM))


#: Payloads of the questions' shape, each part any JSON (a form most often a form, an answer most often an object).
question_shaped = st.dictionaries(
    st.sampled_from(["server", "tool", "question", "form", "url", "answer", "other"]),
    st.one_of(json_values, st.just(FORM), st.dictionaries(st.sampled_from(["name", "force"]), json_values)),
)


@given(payload=st.one_of(json_values, question_shaped))
@settings(max_examples=300, deadline=None)
def test_any_payload_is_checked_and_shown_without_raising(payload: Any) -> None:
    questions = Questions()
    questions.validate("answer", payload)
    assert isinstance(questions.preview("answer", payload), str)


# --- the surfaces -----------------------------------------------------------------------------------------------


async def test_a_question_decided_with_dial_runtime_decide_in_another_process(
    tmp_path: Path, ledger: Path
) -> None:
    """A conversation accepts rename_branch; its run waits on the server's question, whose card a person answers
    with ``dial-runtime decide --mcp`` from another process (which serves the questions' cards through the
    MCP server's domain); the run ends with the answer, the action done once."""
    from dial_runtime.stores import open_store

    url = f"sqlite:{tmp_path / 'chat.db'}"
    store = open_store(url)
    server = " ".join([*ASKING, "--ledger", str(ledger)])
    try:
        async with asking(ledger, Elicitations(store)) as domain, anyio.create_task_group() as tasks:
            conversation = await Conversation.open(
                store,
                "chat-1",
                agent=ScriptedAgent([envelope(suggest("rename_branch", '{"branch": "main"}')), "<dial/>"]),
                domain=domain,
                human=policy_human("accept"),
            )
            tasks.start_soon(conversation.say, "rename main")
            with anyio.fail_after(20):
                while not (found := await cards(store)):
                    await anyio.sleep(0.05)
            (question, card), *_ = found.items()
            answered = json.dumps({**card.payload, "answer": {"name": "from-cli"}})
            via = ["--agent", "outside:", "--mcp", server, "--as", "ada"]
            decided = await anyio.to_thread.run_sync(
                lambda: subprocess.run(
                    [CLI, "decide", question, card.id, "edit", "--payload", answered, "--store", url, *via],
                    capture_output=True,
                    text=True,
                    timeout=60,
                    cwd=ROOT,
                )
            )
            assert decided.returncode == 0, decided.stderr
        outcome = project(conversation.log).card("sg-1")
        assert outcome is not None and outcome.status == "done"
        assert effects(ledger) == [{"tool": "rename_branch", "branch": "main", "name": "from-cli", "force": False}]
        answered_card = (await cards(store))[question]
        assert answered_card.status == "done" and answered_card.decided_by == "ada"
    finally:
        await store.aclose()


def chat_accepting_rename(tmp_path: Path, ledger: Path, terminal: Start, closing: str) -> Terminal:
    """``dial-runtime chat --mcp`` over the asking server, the agent's rename_branch accepted (its second reply
    informs ``closing``): the terminal, once the run waits on the server's question."""
    replies = [
        envelope(suggest("rename_branch", '{"branch": "main"}')),
        envelope(f"<dial-inform>{closing}</dial-inform>"),
    ]
    (tmp_path / "replies.json").write_text(json.dumps(replies))
    server = " ".join([*ASKING, "--ledger", str(ledger)])
    term = terminal("chat", "--agent", f"script:{tmp_path / 'replies.json'}", "--mcp", server)
    term.type("rename main", after="you:")
    term.type("a", after="sg-1 ›")
    term.expect("the MCP server, running rename_branch, asks: What should the branch 'main' be called?")
    return term


def test_a_question_answered_at_the_terminal_field_by_field(tmp_path: Path, ledger: Path, terminal: Start) -> None:
    """The server's question comes as a form at the terminal: a required name (asked again when left empty), a
    yes/no with its default."""
    term = chat_accepting_rename(tmp_path, ledger, terminal, "Renamed.")
    term.type("", after="Name (required)")
    term.expect("This one is required.")
    term.type("release", after="Name (required)")
    term.type("", after="Enter for false")
    term.expect('you answer: {"name": "release", "force": false}', "✓ done", "agent: Renamed.")
    term.type("/quit", after="you:")
    assert term.finish() == 0
    assert effects(ledger) == [{"tool": "rename_branch", "branch": "main", "name": "release", "force": False}]


def test_a_question_declined_at_the_terminal(tmp_path: Path, ledger: Path, terminal: Start) -> None:
    term = chat_accepting_rename(tmp_path, ledger, terminal, "Left as it is.")
    term.type("/decline", after="Name (required)")
    term.expect("you decline the question", "not renamed: the user chose decline", "agent: Left as it is.")
    term.type("/quit", after="you:")
    assert term.finish() == 0
    assert effects(ledger) == []


def test_serve_over_a_server_that_asks_serves_the_question_s_card_on_the_web(tmp_path: Path, ledger: Path) -> None:
    """``dial-runtime serve --mcp``: the person accepts rename_branch; while it runs, the server's question is a
    card of its own conversation, which the same web surface serves with the questions' domain: an AG-UI run on
    that thread shows it, and a resume with the form filled in (``editedArgs``) answers it; the first run ends."""
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([envelope(suggest("rename_branch", '{"branch": "main"}')), "<dial/>"]))
    store_url = f"sqlite:{tmp_path / 'c.db'}"
    server = " ".join([*ASKING, "--ledger", str(ledger)])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "dial_runtime.cli", "serve", "--agent", f"script:{script}", "--mcp", server]
    with server_process([*command, "--store", store_url, "--port", str(port)], f"{url}/conversations"):
        events = decode(httpx.post(f"{url}/agui", json=run_input("c1", words="rename main"), timeout=20).text)
        (rename,) = events[-1]["outcome"]["interrupts"]
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(
                httpx.post, f"{url}/agui", json=run_input("c1", resume=[accept(rename)]), timeout=60
            )
            deadline = time.monotonic() + 30
            while not (waiting := anyio.run(_question_threads, store_url)):
                assert time.monotonic() < deadline and not running.done(), "no question appeared"
                time.sleep(0.1)
            (thread,) = waiting
            shown = decode(httpx.post(f"{url}/agui", json=run_input(thread), timeout=20).text)
            (question,) = shown[-1]["outcome"]["interrupts"]
            answered = {**question["metadata"]["payload"], "answer": {"name": "from-web"}}
            resumed = decode(
                httpx.post(
                    f"{url}/agui",
                    json=run_input(thread, resume=[accept(question, editedArgs=answered)]),
                    timeout=20,
                ).text
            )
            assert resumed[-1]["type"] == "RUN_FINISHED"
            ended = decode(running.result().text)
        assert [e["toolCallId"] for e in ended if e["type"] == "TOOL_CALL_RESULT"] == ["sg-1"]
    assert effects(ledger) == [{"tool": "rename_branch", "branch": "main", "name": "from-web", "force": False}]


async def _question_threads(store_url: str) -> list[str]:
    from dial_runtime.stores import open_store

    store = open_store(store_url)
    try:
        return [name for name, card in (await cards(store)).items() if card.waiting]
    finally:
        await store.aclose()
