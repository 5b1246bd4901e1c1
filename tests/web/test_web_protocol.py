"""The web surface's AG-UI contract over HTTP (a real uvicorn server, httpx as the client): a resume taken whole or
not at all, an interrupt id of its own for every open card, one card of several decided at a time, words from
someone who may not decide, and a run whose agent never answered."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dial_runtime import LogEntry, agent_from_uri
from dial_runtime.views.person import Notice, project
from dial_runtime.web import create_app, scripted_agents
from dial_runtime.web.mapping import interrupt_id

from ..fakes import envelope, suggest
from ..openai_server import Error, OpenAIServer, Reply
from ..web_domains import WebNotes
from ..web_server import accept, decode, finished, free_port, interrupts, run_input, serving, stored_log

ADD_TWO = envelope(
    suggest("add-note", '{"text":"milk"}', ident="n"),
    suggest("add-note", '{"text":"eggs"}', ident="n~2"),
)
TWO = envelope(suggest("add-note", '{"text":"milk"}'), suggest("add-note", '{"text":"eggs"}'))
ONE = envelope(suggest("add-note", '{"text":"milk"}'))
DONE = "<dial><dial-inform>Done.</dial-inform></dial>"

SCRIPTS: dict[str, list[str]] = {}
_COUNT = iter(range(1_000_000))


def thread(*replies: str) -> str:
    """A new conversation whose agent replies with ``replies``."""
    name = f"p{next(_COUNT)}"
    SCRIPTS[name] = list(replies)
    return name


def principal(request: Any) -> str:
    return request.headers.get("x-user", "ada")


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("protocol") / "conversations.db"


@pytest.fixture(scope="module")
def http(store_path: Path) -> Iterator[httpx.Client]:
    app = create_app(
        store=f"sqlite:{store_path}",
        domain=WebNotes(),
        agent=scripted_agents(SCRIPTS),
        auth=principal,
        can_decide=lambda who, subject: who != "viewer",
    )
    with serving(app) as url, httpx.Client(base_url=url, timeout=10.0) as client:
        yield client


def post(http: httpx.Client, body: dict[str, Any], **headers: str) -> list[dict[str, Any]]:
    """One run's events."""
    response = http.post("/agui", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return decode(response.text)


def kinds(entries: list[LogEntry]) -> list[str]:
    return [entry.event.type for entry in entries]


def results(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Each tool result's call and status."""
    ended = [event for event in events if event["type"] == "TOOL_CALL_RESULT"]
    return [(event["toolCallId"], json.loads(event["content"])["status"]) for event in ended]


def edit(interrupt: dict[str, Any], text: str) -> dict[str, Any]:
    payload = {"approved": True, "editedArgs": {"text": text}, "digest": interrupt["metadata"]["digest"]}
    return {"interruptId": interrupt["id"], "status": "resolved", "payload": payload}


def cancel(interrupt: dict[str, Any]) -> dict[str, Any]:
    return {"interruptId": interrupt["id"], "status": "cancelled"}


# --- interrupt ids -----------------------------------------------------------------------------------------------

subject_ids = st.text(st.sampled_from("n~21"), min_size=1, max_size=8)


@given(st.lists(st.tuples(subject_ids, st.integers(min_value=0, max_value=4)), unique=True, max_size=12))
def test_no_two_subjects_or_refusal_counts_share_an_interrupt_id(subjects: list[tuple[str, int]]) -> None:
    names = [interrupt_id(subject, refusals) for subject, refusals in subjects]
    assert len(set(names)) == len(names)


def test_agent_ids_that_look_like_refusal_counts_keep_their_own_interrupts(
    http: httpx.Client, store_path: Path
) -> None:
    """The agent's ``n`` and ``n~2``, ``n`` after a refused edit: two interrupts, and each decision reaches its
    own card."""
    name = thread(ADD_TWO, DONE)
    first = interrupts(post(http, run_input(name, words="add both")))
    assert [(each["id"], each["toolCallId"]) for each in first] == [("n", "n"), ("n~~2", "n~2")]
    refused = post(http, run_input(name, resume=[edit(first[0], ""), cancel(first[1])]))
    again = interrupts(refused)
    assert [(each["id"], each["toolCallId"]) for each in again] == [("n~2", "n"), ("n~~2", "n~2")]
    decided = post(http, run_input(name, resume=[accept(again[1]), cancel(again[0])]))
    assert results(decided) == [("n~2", "done")]
    assert [each["toolCallId"] for each in interrupts(decided)] == ["n"]
    (waiting,) = project(stored_log(store_path, name)).waiting
    assert waiting.id == "n"


# --- a resume is taken whole or not at all -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "second",
    [
        pytest.param(lambda interrupt: accept(interrupt, digest="sha256:0"), id="wrong-digest"),
        pytest.param(lambda interrupt: {**accept(interrupt), "interruptId": "sg-9"}, id="unknown"),
        pytest.param(lambda interrupt: {**accept(interrupt), "payload": True}, id="not-an-object"),
        pytest.param(lambda interrupt: {**accept(interrupt), "payload": {"approved": "yes"}}, id="not-a-bool"),
    ],
)
def test_a_resume_with_one_entry_it_cannot_take_takes_none(
    http: httpx.Client, store_path: Path, second: Any
) -> None:
    name = thread(TWO, DONE)
    first = interrupts(post(http, run_input(name, words="add both")))
    before = kinds(stored_log(store_path, name))
    refused = post(http, run_input(name, resume=[edit(first[0], "oat milk"), second(first[1])]))
    assert [event["type"] for event in refused] == ["RUN_STARTED", "RUN_ERROR"]
    assert kinds(stored_log(store_path, name)) == before
    done = post(http, run_input(name, resume=[edit(first[0], "oat milk"), accept(first[1])]))
    assert results(done) == [("sg-1", "done"), ("sg-2", "done")]
    assert finished(done)["outcome"] == {"type": "success"}


# --- one card of several, under AG-UI's coverage rule ------------------------------------------------------------


def test_a_cancelled_entry_leaves_its_card_waiting_under_the_same_interrupt(
    http: httpx.Client, store_path: Path
) -> None:
    name = thread(TWO, DONE)
    first = interrupts(post(http, run_input(name, words="add both")))
    one = post(http, run_input(name, resume=[accept(first[0]), cancel(first[1])]))
    assert results(one) == [("sg-1", "done")]
    assert interrupts(one) == [first[1]]
    snapshot = post(http, run_input(name))
    assert interrupts(snapshot) == [first[1]]
    dismissed = {"interruptId": first[1]["id"], "status": "resolved", "payload": {"approved": False}}
    other = post(http, run_input(name, resume=[dismissed]))
    assert results(other) == [("sg-2", "dismissed")]
    assert finished(other)["outcome"] == {"type": "success"}
    decided = [entry.event for entry in stored_log(store_path, name) if entry.event.type == "decided"]
    assert [(each.suggestion_id, each.decision) for each in decided] == [("sg-1", "accept"), ("sg-2", "dismiss")]


def test_a_cancelled_entry_for_an_interrupt_that_no_longer_waits_is_left_out_with_a_warning(
    http: httpx.Client,
) -> None:
    """A client that kept the interrupts of a run that then failed (here: another tab decided one) moves on."""
    name = thread(TWO, DONE)
    first = interrupts(post(http, run_input(name, words="add both")))
    post(http, run_input(name, resume=[accept(first[0]), cancel(first[1])]), **{"x-user": "grace"})
    events = post(http, run_input(name, resume=[cancel(first[0]), accept(first[1])]))
    (warning,) = [event for event in events if event.get("name") == "dial.resume-entry-ignored"]
    assert warning["value"]["interruptId"] == "sg-1" and warning["value"]["code"] == "already-decided"
    assert "by grace" in warning["value"]["message"]
    assert results(events) == [("sg-2", "done")]


def test_cancelled_entries_and_nothing_else_change_nothing(http: httpx.Client, store_path: Path) -> None:
    name = thread(TWO, DONE)
    first = interrupts(post(http, run_input(name, words="add both")))
    before = kinds(stored_log(store_path, name))
    events = post(http, run_input(name, resume=[cancel(each) for each in first]))
    assert interrupts(events) == first
    assert kinds(stored_log(store_path, name)) == before


# --- words from someone who may not decide -----------------------------------------------------------------------


def test_words_that_would_supersede_a_card_the_speaker_may_not_decide_are_refused(
    http: httpx.Client, store_path: Path
) -> None:
    name = thread(ONE, DONE, DONE)
    (card,) = interrupts(post(http, run_input(name, words="add milk")))
    before = kinds(stored_log(store_path, name))
    refused = post(http, run_input(name, words="never mind"), **{"x-user": "viewer"})
    assert [event["type"] for event in refused] == ["RUN_STARTED", "RUN_ERROR"]
    assert refused[-1]["code"] == "awaiting-reviewer" and "'sg-1'" in refused[-1]["message"]
    also = post(http, run_input(name, words="never mind", resume=[cancel(card)]), **{"x-user": "viewer"})
    assert also[-1]["code"] == "awaiting-reviewer"
    assert kinds(stored_log(store_path, name)) == before
    post(http, run_input(name, resume=[accept(card)]))
    said = post(http, run_input(name, words="thanks"), **{"x-user": "viewer"})
    assert finished(said)["outcome"] == {"type": "success"}
    spoken = [entry.event for entry in stored_log(store_path, name) if entry.event.type == "said"]
    assert [(each.text, each.by) for each in spoken] == [("add milk", "ada"), ("thanks", "viewer")]


def test_someone_who_may_not_decide_may_cancel_without_words(http: httpx.Client) -> None:
    """Coverage makes a client list every open interrupt; cancelling one decides nothing, so anyone may."""
    name = thread(ONE, DONE)
    (card,) = interrupts(post(http, run_input(name, words="add milk")))
    events = post(http, run_input(name, resume=[cancel(card)]), **{"x-user": "viewer"})
    (shown,) = interrupts(events)
    assert shown["id"] == card["id"] and shown["metadata"]["canDecide"] is False


# --- an agent that never answered --------------------------------------------------------------------------------


@pytest.fixture
def unreachable() -> Iterator[str]:
    yield f"http://127.0.0.1:{free_port()}/v1#model"


@pytest.fixture
def refusing() -> Iterator[str]:
    with OpenAIServer([Error(401, "invalid api key")]) as server:
        yield f"{server.base_url}#model"


@pytest.fixture
def silent() -> Iterator[str]:
    with OpenAIServer([Reply("too late", delay=30)]) as server:
        yield f"{server.base_url}#model"


@pytest.mark.parametrize(
    ("endpoint", "cause"),
    [
        ("unreachable", "All connection attempts failed"),
        ("refusing", "HTTP 401: invalid api key"),
        ("silent", "didn't reply within 0.2s"),
    ],
)
def test_a_run_whose_agent_never_answered_is_a_run_error_in_the_log_s_words(
    request: pytest.FixtureRequest, tmp_path: Path, endpoint: str, cause: str
) -> None:
    uri = request.getfixturevalue(endpoint)
    app = create_app(
        store=f"sqlite:{tmp_path / 'c.db'}",
        domain=WebNotes(),
        agent=lambda conversation, log: agent_from_uri(uri, max_retries=0),
        timeout=0.2,
    )
    with serving(app) as url, httpx.Client(base_url=url, timeout=10.0) as client:
        events = post(client, run_input("q", words="hello?"))
    error = events[-1]
    assert (error["type"], error["code"]) == ("RUN_ERROR", "no-reply")
    assert cause in error["message"]
    notices = [item for item in project(stored_log(tmp_path / "c.db", "q")).items if isinstance(item, Notice)]
    assert [notice.text for notice in notices] == [error["message"]]
