"""The web surface over HTTP: a real uvicorn server, httpx as the client, AG-UI runs read off the SSE stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from dial_runtime import open_store
from dial_runtime.web import create_app, scripted_agents

from ..fakes import envelope, suggest
from ..runtime.test_flow_conversations import ORDER, orders
from ..web_domains import WebNotes
from ..web_server import accept, changes, decode, finished, interrupts, run, run_input, serving

pytestmark = pytest.mark.anyio

ACK = '<dial><dial-acknowledge of="sg-1">Done.</dial-acknowledge></dial>'
ADD = envelope(suggest("add-note", '{"text":"buy milk"}', text="Add buy milk"), prose="Here you go.")
REMOVE = envelope(suggest("remove-note", '{"text":"old"}'))
CHOICE = envelope(
    '<dial-ask id="which" response-type="choice">Which list?'
    '<dial-option value="home">Home</dial-option><dial-option value="work">Work</dial-option></dial-ask>'
)

SCRIPTS: dict[str, list[str]] = {}


@pytest.fixture(params=[pytest.param("trio", id="trio"), pytest.param("asyncio", id="asyncio")])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """The clients run on trio (with its real clock: the server is real) and on asyncio; uvicorn is asyncio."""
    return request.param  # type: ignore[no-any-return]


def principal(request: Any) -> str | None:
    """``X-User`` names the caller (default ada); ``nobody`` is refused."""
    user = request.headers.get("x-user", "ada")
    return None if user == "nobody" else user


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("web") / "conversations.db"


@pytest.fixture(scope="module")
def base_url(store_path: Path) -> Iterator[str]:
    app = create_app(
        store=f"sqlite:{store_path}",
        domain=WebNotes(),
        agent=scripted_agents(SCRIPTS),
        auth=principal,
        can_decide=lambda who, subject: who != "viewer",
        allowed_origins=["https://app.example"],
    )
    with serving(app) as url:
        yield url


@pytest.fixture
async def client(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base_url, timeout=10.0) as http:
        yield http


_COUNT = iter(range(1_000_000))


def thread(*replies: str) -> str:
    """A new conversation whose agent replies with ``replies``."""
    name = f"t{next(_COUNT)}"
    SCRIPTS[name] = list(replies)
    return name


def types(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


async def stored(store_path: Path, conversation: str, kind: str) -> list[Any]:
    store = open_store(f"sqlite:{store_path}")
    try:
        return [entry.event for entry in await store.read(conversation) if entry.event.type == kind]
    finally:
        await store.aclose()


async def test_a_suggestion_streams_as_a_tool_call_and_waits_as_an_interrupt(client: httpx.AsyncClient) -> None:
    name = thread(ADD, ACK)
    events = await run(client, run_input(name, words="add milk"))
    assert types(events) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "RUN_FINISHED",
    ]
    assert events[2]["delta"] == "Here you go."
    assert (events[4]["toolCallId"], events[4]["toolCallName"]) == ("sg-1", "add-note")
    assert json.loads(events[5]["delta"]) == {"text": "buy milk"}
    (interrupt,) = interrupts(events)
    assert interrupt["id"] == "sg-1" and interrupt["reason"] == "tool_call" and interrupt["toolCallId"] == "sg-1"
    assert interrupt["message"] == "Add the note 'buy milk'"
    assert interrupt["responseSchema"]["required"] == ["approved"]
    meta = interrupt["metadata"]
    assert (meta["action"], meta["payload"], meta["destructive"], meta["mutates"]) == (
        "add-note",
        {"text": "buy milk"},
        False,
        True,
    )
    assert meta["digest"].startswith("sha256:")


async def test_accept_runs_it_and_reports_the_outcome_as_a_tool_result(
    client: httpx.AsyncClient, store_path: Path
) -> None:
    name = thread(ADD, ACK)
    (interrupt,) = interrupts(await run(client, run_input(name, words="add milk")))
    events = await run(client, run_input(name, resume=[accept(interrupt)]), **{"x-user": "grace"})
    results = [event for event in events if event["type"] == "TOOL_CALL_RESULT"]
    assert [(r["toolCallId"], json.loads(r["content"])["status"]) for r in results] == [("sg-1", "done")]
    assert finished(events)["outcome"] == {"type": "success"}
    assert "Done." in [event.get("delta") for event in events]
    (decided,) = await stored(store_path, name, "decided")
    assert (decided.decision, decided.by) == ("accept", "grace")


@pytest.mark.parametrize(
    ("payload", "decision", "status"),
    [
        ({"approved": False}, "dismiss", "dismissed"),
        ({"approved": True, "editedArgs": {"text": "oat milk"}}, "edit", "done"),
    ],
)
async def test_resume_entries_become_decisions(
    client: httpx.AsyncClient, store_path: Path, payload: dict[str, Any], decision: str, status: str
) -> None:
    name = thread(ADD, ACK, ACK)
    (interrupt,) = interrupts(await run(client, run_input(name, words="add milk")))
    entry = {"interruptId": interrupt["id"], "status": "resolved", "payload": payload}
    events = await run(client, run_input(name, resume=[entry]))
    results = [json.loads(e["content"]) for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert [r["status"] for r in results] == [status]
    assert finished(events)["outcome"] == {"type": "success"}
    (decided,) = await stored(store_path, name, "decided")
    assert (decided.decision, decided.by) == (decision, "ada")


async def test_a_refused_edit_comes_back_as_a_new_interrupt_with_the_domains_reason(
    client: httpx.AsyncClient,
) -> None:
    name = thread(ADD, ACK)
    (first,) = interrupts(await run(client, run_input(name, words="add milk")))
    edit = {"interruptId": "sg-1", "status": "resolved", "payload": {"approved": True, "editedArgs": {"text": ""}}}
    events = await run(client, run_input(name, resume=[edit]))
    (again,) = interrupts(events)
    assert again["id"] == "sg-1~2" and again["toolCallId"] == "sg-1"
    assert again["metadata"]["issue"] == {"code": "missing-text", "field": "text", "hint": "Give the note's text."}
    stale = await run(client, run_input(name, resume=[accept(first)]))
    assert (stale[-1]["type"], stale[-1]["code"]) == ("RUN_ERROR", "stale-interrupt")
    fixed = {"approved": True, "editedArgs": {"text": "oat milk"}, "digest": again["metadata"]["digest"]}
    done = await run(
        client, run_input(name, resume=[{"interruptId": again["id"], "status": "resolved", "payload": fixed}])
    )
    assert [json.loads(e["content"])["status"] for e in done if e["type"] == "TOOL_CALL_RESULT"] == ["done"]


async def test_cancelled_with_new_words_is_saying_something_else(
    client: httpx.AsyncClient, store_path: Path
) -> None:
    name = thread(ADD, "<dial><dial-inform>Fine, no milk.</dial-inform></dial>")
    (interrupt,) = interrupts(await run(client, run_input(name, words="add milk")))
    cancel = {"interruptId": interrupt["id"], "status": "cancelled"}
    events = await run(client, run_input(name, words="no, forget it", resume=[cancel]))
    results = [json.loads(e["content"]) for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert [r["status"] for r in results] == ["superseded"]
    assert "Fine, no milk." in [event.get("delta") for event in events]
    assert finished(events)["outcome"] == {"type": "success"}
    (decided,) = await stored(store_path, name, "decided")
    assert (decided.decision, decided.text, decided.by) == ("say", "no, forget it", "ada")


async def test_a_choice_is_an_input_required_interrupt_answered_by_a_resume(
    client: httpx.AsyncClient, store_path: Path
) -> None:
    name = thread(CHOICE, "<dial><dial-inform>Home it is.</dial-inform></dial>")
    events = await run(client, run_input(name, words="make a list"))
    (interrupt,) = interrupts(events)
    assert (interrupt["id"], interrupt["reason"], interrupt["message"]) == (
        "which",
        "input_required",
        "Which list?",
    )
    assert interrupt["metadata"]["options"] == [
        {"value": "home", "label": "Home"},
        {"value": "work", "label": "Work"},
    ]
    assert interrupt["responseSchema"]["properties"]["answer"]["enum"] == ["home", "work"]
    wrong = {"interruptId": "which", "status": "resolved", "payload": {"answer": "garden"}}
    refused = await run(client, run_input(name, resume=[wrong]))
    assert (refused[-1]["type"], refused[-1]["code"]) == ("RUN_ERROR", "invalid-resume")
    right = {"interruptId": "which", "status": "resolved", "payload": {"answer": "home"}}
    events = await run(client, run_input(name, resume=[right]))
    assert "Home it is." in [event.get("delta") for event in events]
    (answered,) = await stored(store_path, name, "answered")
    assert (answered.text, answered.by) == ("home", "ada")


@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("unknown", "unknown-interrupt"),
        ("digest", "digest-mismatch"),
        ("decided", "already-decided"),
        ("viewer", "forbidden"),
        ("not-an-object", "invalid-resume"),
        ("twice", "invalid-resume"),
    ],
)
async def test_a_resume_that_cannot_be_taken_is_a_run_error_and_changes_nothing(
    client: httpx.AsyncClient, store_path: Path, case: str, code: str
) -> None:
    name = thread(ADD, ACK)
    (interrupt,) = interrupts(await run(client, run_input(name, words="add milk")))
    headers: dict[str, str] = {}
    entries = [accept(interrupt)]
    if case == "unknown":
        entries = [{**entries[0], "interruptId": "sg-9"}]
    elif case == "digest":
        entries = [accept(interrupt, digest="sha256:0")]
    elif case == "decided":
        await run(client, run_input(name, resume=[accept(interrupt)]), **{"x-user": "grace"})
    elif case == "viewer":
        headers = {"x-user": "viewer"}
    elif case == "not-an-object":
        entries = [{"interruptId": interrupt["id"], "status": "resolved", "payload": True}]
    elif case == "twice":
        entries = [accept(interrupt), accept(interrupt)]
    before = len(await stored(store_path, name, "decided"))
    events = await run(client, run_input(name, resume=entries), **headers)
    assert types(events) == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1]["code"] == code
    if case == "decided":
        assert "by grace" in events[-1]["message"]
    assert len(await stored(store_path, name, "decided")) == before


async def test_a_conversation_held_elsewhere_is_busy(client: httpx.AsyncClient, store_path: Path) -> None:
    name = thread(ADD, ACK)
    (interrupt,) = interrupts(await run(client, run_input(name, words="add milk")))
    other = open_store(f"sqlite:{store_path}")
    try:
        async with other.lock(name):
            events = await run(client, run_input(name, resume=[accept(interrupt)]))
    finally:
        await other.aclose()
    assert (events[-1]["type"], events[-1]["code"]) == ("RUN_ERROR", "busy")
    events = await run(client, run_input(name, resume=[accept(interrupt)]))
    assert finished(events)["outcome"] == {"type": "success"}


async def test_no_message_and_no_resume_is_a_snapshot_with_the_pending_interrupts(
    client: httpx.AsyncClient,
) -> None:
    name = thread(ADD, ACK)
    (interrupt,) = interrupts(await run(client, run_input(name, words="add milk")))
    events = await run(client, run_input(name))
    assert types(events) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    messages = events[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "assistant"]
    assert messages[0]["content"] == "add milk" and messages[0]["id"].startswith("said-")
    assert messages[1]["content"] == "Here you go."
    assert messages[2]["toolCalls"][0]["id"] == "sg-1"
    assert interrupts(events) == [interrupt]
    # Sending the snapshot back (the person's message last) says nothing new.
    again = await run(client, {**run_input(name), "messages": messages[:1]})
    assert types(again) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    done = await run(client, run_input(name, resume=[accept(interrupt)]))
    snapshot = (await run(client, run_input(name)))[1]["messages"]
    assert snapshot[-2]["role"] == "tool" and json.loads(snapshot[-2]["content"])["status"] == "done"
    assert finished(done)["outcome"] == {"type": "success"}


async def test_conversations_lists_what_the_store_holds(client: httpx.AsyncClient) -> None:
    name = thread(ADD)
    await run(client, run_input(name, words="add milk"))
    response = await client.get("/conversations")
    assert response.status_code == 200 and name in response.json()["conversations"]


@pytest.mark.parametrize(
    ("request_kwargs", "status"),
    [
        ({"headers": {"x-user": "nobody"}}, 401),
        ({"headers": {"origin": "https://evil.example"}}, 403),
        ({"content": b"{" + b" " * (2 << 20) + b"}"}, 413),
        ({"content": b'{"threadId": "x"}'}, 422),
        ({"json": {"threadId": "a b", "runId": "r", "messages": []}}, 400),
        (
            {
                "json": {
                    "threadId": "t",
                    "runId": "r",
                    "messages": [{"id": "u", "role": "user", "content": "x" * 70_000}],
                }
            },
            413,
        ),
    ],
)
async def test_requests_refused_before_any_run(
    client: httpx.AsyncClient, request_kwargs: dict[str, Any], status: int
) -> None:
    kwargs = {"json": run_input("refused", words="hi"), **request_kwargs}
    response = await client.post("/agui", **kwargs)
    assert response.status_code == status
    assert set(response.json()) == {"error"}


async def test_actions_lists_the_domain_s_actions_to_whoever_the_other_routes_serve(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/actions")
    assert response.status_code == 200
    assert response.json() == {
        "actions": [
            {"name": "add-note"},
            {"name": "remove-note", "destructive": True},
            {"name": "list-notes"},
            {"name": "share-note"},
        ]
    }
    refused = [
        await client.get("/actions", headers={"x-user": "nobody"}),
        await client.get("/actions", headers={"origin": "https://evil.example"}),
        await client.get("/actions", headers={"host": "rebound.example"}),
    ]
    assert [each.status_code for each in refused] == [401, 403, 400]


async def test_an_allowed_origin_may_post(client: httpx.AsyncClient) -> None:
    name = thread(ADD)
    response = await client.post(
        "/agui", json=run_input(name, words="hi"), headers={"origin": "https://app.example"}
    )
    assert response.status_code == 200


async def test_an_agent_with_no_reply_left_is_a_run_error_saying_so(client: httpx.AsyncClient) -> None:
    events = await run(client, run_input(thread(), words="hello?"))
    assert (events[-1]["type"], events[-1]["code"]) == ("RUN_ERROR", "no-reply")
    assert events[-1]["message"].startswith("the message could not be sent:")


def test_the_change_stream_names_the_log_s_last_seq_each_time_it_grows(base_url: str) -> None:
    name = thread(ADD, ACK)
    with changes(base_url, name) as stream, httpx.Client(base_url=base_url, timeout=10.0) as deciding:
        assert stream.next_seq() == 0  # nothing stored yet
        first = decode(deciding.post("/agui", json=run_input(name, words="add milk")).text)
        shown = finished(first)["metadata"]["seq"]
        assert stream.until(shown) == shown
        resume = [accept(interrupts(first)[0])]
        second = decode(deciding.post("/agui", json=run_input(name, resume=resume)).text)
        done = finished(second)["metadata"]["seq"]
        assert done > shown and stream.until(done) == done
        snapshot = decode(deciding.post("/agui", json=run_input(name)).text)
        assert finished(snapshot)["metadata"]["seq"] == done


@pytest.mark.parametrize(
    ("path", "headers", "status"),
    [
        ("/conversations/t/changes", {"x-user": "nobody"}, 401),
        ("/conversations/a%20b/changes", {}, 400),
        ("/conversations/secret/changes", {}, 403),
    ],
)
async def test_a_change_stream_is_refused_to_whoever_may_not_see_it(
    base_url: str, path: str, headers: dict[str, str], status: int
) -> None:
    app = create_app(
        store="memory:",
        domain=WebNotes(),
        agent=scripted_agents({}),
        auth=principal,
        can_view=lambda who, conversation: conversation != "secret",
    )
    with serving(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10.0) as http:
            response = await http.get(path, headers=headers)
    assert response.status_code == status and set(response.json()) == {"error"}


def test_the_agent_is_built_inside_the_call_from_the_stored_log() -> None:
    """The factory runs when the conversation first talks to the agent: under the lock, with the log the store
    holds then (here: this run's decision already in it), never a copy read before the run took the lock."""
    given: list[list[str]] = []

    def build(conversation_id: str, log: Any) -> Any:
        given.append([entry.event.type for entry in log])
        return scripted_agents([ADD, ACK])(conversation_id, log)

    app = create_app(store="memory:", domain=WebNotes(), agent=build)
    with serving(app) as url, httpx.Client(base_url=url, timeout=10.0) as http:
        first = decode(http.post("/agui", json=run_input("f", words="add milk")).text)
        assert "reply" not in given[0] and "said" in given[0]  # built for the first send, before any reply
        decode(http.post("/agui", json=run_input("f", resume=[accept(interrupts(first)[0])])).text)
    assert len(given) == 2 and "decided" in given[1] and "action-started" in given[1]


def test_a_flow_that_reaches_a_final_state_finishes_the_run_with_its_result() -> None:
    cancel = envelope(suggest("cancel-order", ORDER))
    app = create_app(store="memory:", domain=orders, agent=scripted_agents([cancel, ACK]))
    with serving(app) as url, httpx.Client(base_url=url, timeout=10.0) as http:
        first = decode(http.post("/agui", json=run_input("o", words="cancel it")).text)
        assert first[-1]["type"] == "RUN_FINISHED" and first[-1].get("result") is None
        last = decode(http.post("/agui", json=run_input("o", resume=[accept(interrupts(first)[0])])).text)
    assert last[-1]["type"] == "RUN_FINISHED" and last[-1]["result"] == "cancelled"


def test_the_surface_mounted_in_a_fastapi_application_serves_runs_under_its_prefix() -> None:
    api = FastAPI()
    api.mount("/chat", create_app(store="memory:", domain=WebNotes(), agent=scripted_agents([ADD, ACK])))
    with serving(api) as url, httpx.Client(base_url=f"{url}/chat", timeout=10.0) as http:
        events = decode(http.post("/agui", json=run_input("m", words="add milk")).text)
        assert [each["id"] for each in interrupts(events)] == ["sg-1"]
        assert "dial-chat" in http.get("/").text
