"""The web surface's inbox over HTTP, served by uvicorn on SQLite and PostgreSQL: the cards waiting for the caller
(as their policies and ``can_view`` say), filters refused in one line when unknown, bulk decisions taken card by
card (a stale one refused alone), and a change stream that tells an open inbox of a decision made anywhere."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import httpx
import pytest

from dial_runtime import ActionSpec, ApprovalPolicy, Conversation, open_store, scripted_human
from dial_runtime.decisions.rules import Rule
from dial_runtime.runtime.asking import DecisionPoint
from dial_runtime.web import create_app, scripted_agents

from ..fakes import Agent, envelope, suggest
from ..web_domains import WebNotes
from ..web_server import ChangeStream, serving
from .test_web_links_race import stored

ACK = envelope("<dial-acknowledge>Done.</dial-acknowledge>")


def tidy_notes(point: DecisionPoint) -> str | None:
    """A rule for whether to ask: notes that tidy up run without asking; notes that check something ask."""
    text = str(point.payload.get("text", ""))
    return "approve" if text.startswith("tidy") else "ask" if text.startswith("check") else None


class DeskNotes(WebNotes):
    """The notebook, whose notes are due within ten minutes and whose shares two reviewers approve; a rule
    approves the notes that tidy up and asks for those that check something."""

    actions: ClassVar[dict[str, ActionSpec]] = {
        **WebNotes.actions,
        "add-note": ActionSpec(mutates=True, deadline=600),
        "share-note": ActionSpec(mutates=True, policy=ApprovalPolicy(approvals=2, roles=frozenset({"reviewers"}))),
    }
    approval_rules = (Rule(name="tidy-notes", version="1", action="add-note", decide=tidy_notes),)


def note(text: str) -> str:
    return envelope(suggest("add-note", json.dumps({"text": text})))


SHARE = envelope(suggest("share-note", '{"text": "plans"}'))
REMOVE = envelope(suggest("remove-note", '{"text": "old"}'))


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:{tmp_path / 'inbox.db'}"
    else:
        yield request.getfixturevalue("pg_schema_url")


def on_a_thread(work: Any, *args: Any) -> Any:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, work, *args).result(timeout=60)


def propose(url: str, proposals: dict[str, str]) -> None:
    """Each conversation named proposes its reply, which waits for a decision (another process's store object)."""

    async def work() -> None:
        store = open_store(url)
        try:
            for thread, reply in proposals.items():
                conversation = await Conversation.open(
                    store, thread, agent=Agent([reply]), domain=DeskNotes(), human=scripted_human(["defer"] * 4)
                )
                assert (await conversation.say("please", by="carl")).status == "awaiting"
        finally:
            await store.aclose()

    on_a_thread(work)


@contextlib.contextmanager
def desk(url: str, **options: Any) -> Iterator[httpx.Client]:
    """The web surface on ``url``, served; ``X-User`` names the caller (default ada), ``rev-*`` hold
    ``reviewers``; every conversation's agent acknowledges what it is told after the proposal it made."""
    store = open_store(url)
    scripts: dict[str, list[str]] = _Scripts()
    app = create_app(
        store=store,
        domain=DeskNotes(),
        agent=scripted_agents(scripts),
        auth=lambda request: str(request.headers.get("x-user", "ada")),
        roles=lambda who: {"reviewers"} if who.startswith("rev-") else set(),
        deadlines=None,
        **options,
    )
    try:
        with serving(app) as served, httpx.Client(base_url=served, timeout=30) as client:
            yield client
    finally:
        on_a_thread(store.aclose)


class _Scripts(dict[str, list[str]]):
    """Every conversation's script: its proposal (already in its log), then acknowledgements."""

    def get(self, key: str, default: Any = None) -> list[str]:  # type: ignore[override]
        return ["(proposed)", ACK, ACK, ACK]


def cards(client: httpx.Client, query: str = "", **headers: str) -> list[dict[str, Any]]:
    response = client.get(f"/inbox/cards{query}", headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["cards"]  # type: ignore[no-any-return]


def bulk(
    client: httpx.Client, chosen: list[dict[str, Any]], decision: str, **headers: str
) -> list[dict[str, Any]]:
    decisions = [
        {"threadId": card["threadId"], "id": card["id"], "decision": decision, "digest": card["digest"]}
        for card in chosen
    ]
    response = client.post("/inbox/decide", json={"decisions": decisions}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["results"]  # type: ignore[no-any-return]


def test_the_inbox_lists_what_the_caller_may_decide_with_what_they_need(store_url: str) -> None:
    propose(store_url, {"c-note": note("milk"), "c-share": SHARE, "c-remove": REMOVE})
    with desk(store_url) as client:
        listed = cards(client)
        assert [card["threadId"] for card in listed] == ["c-note", "c-remove"]  # the share is for reviewers
        first = listed[0]
        assert first["preview"] == "Add the note 'milk'" and first["action"] == "add-note"
        assert first["asked_by"] == "carl" and first["digest"].startswith("sha256:")
        assert first["deadline"] == pytest.approx(first["since"] + 600, abs=1)
        assert first["overdue"] is False and first["payload_fields"] == [{"name": "text", "json": '"milk"'}]
        assert listed[1]["destructive"] is True and listed[1]["deadline"] is None
        reviewer = cards(client, **{"x-user": "rev-1"})
        assert [card["threadId"] for card in reviewer] == ["c-note", "c-share", "c-remove"]  # deadline, then age
        assert reviewer[1]["roles"] == ["reviewers"] and reviewer[1]["approvals_needed"] == 2
        assert [card["threadId"] for card in cards(client, "?action=remove-note")] == ["c-remove"]
        assert [card["threadId"] for card in cards(client, "?conversation=c-note&limit=1")] == ["c-note"]
        assert cards(client, "?overdue=true") == []
        page = client.get("/inbox")
        assert page.status_code == 200 and "<dial-inbox" in page.text


def test_can_view_hides_the_cards_of_conversations_the_caller_may_not_see(store_url: str) -> None:
    propose(store_url, {"mine-1": note("a"), "theirs-1": note("b"), "mine-2": note("c")})
    with desk(store_url, can_view=lambda who, thread: thread.startswith("mine")) as client:
        assert [card["threadId"] for card in cards(client, "?limit=2")] == ["mine-1", "mine-2"]
        hidden = {"threadId": "theirs-1", "id": "sg-1", "digest": "sha256:x"}
        results = bulk(client, [hidden], "accept")
        assert results == [
            {
                "threadId": "theirs-1",
                "id": "sg-1",
                "decision": "accept",
                "refused": "forbidden",
                "reason": "you may not see this conversation",
            }
        ]
    assert not [entry for entry in stored(store_url, "theirs-1") if entry.event.type == "decided"]


BAD_QUERIES = [
    ("?status=open", "unknown filter 'status'"),
    ("?overdue=maybe", "overdue is true or false"),
    ("?limit=0", "limit is a whole number from 1 to 1000"),
    ("?limit=1001", "limit is a whole number from 1 to 1000"),
    ("?limit=ten", "limit is a whole number from 1 to 1000"),
    ("?action=a&action=b", "the filter 'action' is given twice"),
]


@pytest.mark.parametrize(("query", "error"), BAD_QUERIES, ids=[query for query, _ in BAD_QUERIES])
def test_a_bad_filter_is_refused_in_one_line(tmp_path: Path, query: str, error: str) -> None:
    with desk(f"sqlite:{tmp_path / 'inbox.db'}") as client:
        response = client.get(f"/inbox/cards{query}")
        assert response.status_code == 400 and response.json()["error"].startswith(error)
        assert "\n" not in response.json()["error"]


BAD_BODIES = [
    (b"not json", 400, 'give {"decisions"'),
    (b'{"decisions": []}', 400, 'give {"decisions"'),
    (b'{"decisions": [{"threadId": "c", "id": "sg-1", "decision": "edit", "digest": "d"}]}', 400, "decision 1:"),
    (b'{"decisions": [{"threadId": "c", "id": "sg-1", "decision": "accept"}]}', 400, "decision 1:"),
    (
        b'{"decisions": [{"threadId": "c/../x", "id": "sg-1", "decision": "accept", "digest": "d"}]}',
        400,
        "decision 1:",
    ),
    (
        b'{"decisions": [{"threadId": "c", "id": "sg-1", "decision": "accept", "digest": "d"},'
        b' {"threadId": "c", "id": "sg-1", "decision": "dismiss", "digest": "d"}]}',
        400,
        "decision 2: 'sg-1' is decided twice",
    ),
    (
        b'{"decisions": [{"threadId": "c", "id": "sg-1", "decision": "accept", "digest": "d"}], "x": 1}',
        400,
        "give",
    ),
]


@pytest.mark.parametrize(("body", "status", "error"), BAD_BODIES)
def test_a_bad_bulk_is_refused_whole_and_decides_nothing(
    tmp_path: Path, body: bytes, status: int, error: str
) -> None:
    url = f"sqlite:{tmp_path / 'inbox.db'}"
    propose(url, {"c": note("a")})
    with desk(url) as client:
        response = client.post("/inbox/decide", content=body, headers={"content-type": "application/json"})
        assert response.status_code == status and response.json()["error"].startswith(error)
        assert (
            client.post("/inbox/decide", content=b"{}", headers={"content-type": "text/plain"}).status_code == 415
        )
        too_many = {
            "decisions": [
                {"threadId": f"c{n}", "id": "sg-1", "decision": "accept", "digest": "d"} for n in range(201)
            ]
        }
        assert client.post("/inbox/decide", json=too_many).json() == {
            "error": "at most 200 decisions at once, not 201"
        }
        assert len(cards(client)) == 1


def test_a_bulk_takes_each_card_alone_and_refuses_a_stale_one_with_its_reason(store_url: str) -> None:
    propose(store_url, {f"c-{n}": note(f"n{n}") for n in range(5)})
    with desk(store_url) as client:
        listed = cards(client)
        assert len(listed) == 5
        first = bulk(client, listed[:1], "dismiss", **{"x-user": "bea"})  # decided meanwhile, by bea
        assert first[0]["status"] == "idle"
        listed[1] = {**listed[1], "digest": "sha256:stale"}
        results = bulk(client, listed, "accept")
        assert [(each["threadId"], each.get("refused")) for each in results] == [
            ("c-0", "already-decided"),
            ("c-1", "payload-changed"),
            ("c-2", None),
            ("c-3", None),
            ("c-4", None),
        ]
        assert results[0]["reason"] == "dismissed already by bea"
        assert [card["threadId"] for card in cards(client)] == ["c-1"]
    decided = [entry.event for entry in stored(store_url, "c-2") if entry.event.type == "decided"]
    assert [(event.decision, event.by, event.via) for event in decided] == [("accept", "ada", "inbox")]


def test_an_approval_the_policy_does_not_take_is_refused_on_its_card(store_url: str) -> None:
    propose(store_url, {"c-share": SHARE})
    with desk(store_url) as client:
        (card,) = cards(client, **{"x-user": "rev-1"})
        refused = bulk(client, [card], "accept", **{"x-user": "ada"})
        assert refused[0]["refused"] == "approval-refused"
        assert bulk(client, [card], "accept", **{"x-user": "rev-1"})[0]["status"] == "awaiting"
        assert cards(client, **{"x-user": "rev-1"}) == []  # rev-1 approved it: it waits for another reviewer
        (waiting,) = cards(client, **{"x-user": "rev-2"})
        assert waiting["approvers"] == ["rev-1"]
        assert bulk(client, [waiting], "accept", **{"x-user": "rev-2"})[0]["status"] == "idle"


class InboxEvents(ChangeStream):
    """The ``changed`` events of ``GET /inbox/changes``: the conversations each names."""

    def next(self) -> list[str]:
        return list(self.next_data()["threadIds"])


def test_an_open_inbox_is_told_of_a_decision_made_elsewhere_within_a_second(store_url: str) -> None:
    propose(store_url, {"c-0": note("a"), "c-1": note("b"), "hidden": note("c")})
    with (
        desk(store_url, can_view=lambda who, thread: thread != "hidden") as client,
        client.stream("GET", "/inbox/changes") as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        events = InboxEvents(response.iter_raw())
        assert events.next() == []  # the first event: read the cards now
        listed = cards(client)

        async def decide_elsewhere() -> float:  # another process's store object: another worker
            store = open_store(store_url)
            try:
                conversation = await Conversation.open(
                    store, "c-1", agent=Agent([ACK]), domain=DeskNotes(), human=scripted_human([])
                )
                await conversation.decide("sg-1", {"dismiss": True}, by="bea", shown=listed[1]["digest"])
                return time.monotonic()
            finally:
                await store.aclose()

        decided_at = on_a_thread(decide_elsewhere)
        seen = events.next()  # SQLite tells another process's change as [] (read again): its file says no more
        told_at = time.monotonic()
        while "c-1" not in seen and seen != []:
            seen = events.next()
            told_at = time.monotonic()
        assert told_at - decided_at <= 1.0
        assert [card["threadId"] for card in cards(client)] == ["c-0"]
        propose(store_url, {"hidden": note("d")})  # appends to a conversation the caller may not see
        propose(store_url, {"c-2": note("e")})
        seen = events.next()
        while "c-2" not in seen and seen != []:
            assert "hidden" not in seen
            seen = events.next()
        assert "hidden" not in seen


# Claims, releases and assignments -----------------------------------------------------------------------------


def test_a_claim_over_http_shows_who_has_the_card_and_is_refused_to_others_in_one_line(store_url: str) -> None:
    propose(store_url, {"c-share": SHARE})
    with desk(store_url) as client:
        rev1, rev2 = {"x-user": "rev-1"}, {"x-user": "rev-2"}
        target = {"threadId": "c-share", "id": "sg-1"}
        claimed = client.post("/inbox/claim", json={**target, "minutes": 15}, headers=rev1)
        assert claimed.status_code == 200, claimed.text
        until = claimed.json()["until"]
        assert until == pytest.approx(time.time() + 900, abs=5)
        (card,) = cards(client, **rev2)
        assert (card["claimed_by"], card["claimed_until"]) == ("rev-1", until)
        taken = client.post("/inbox/claim", json=target, headers=rev2)
        assert taken.status_code == 409
        assert taken.json() == {
            **target,
            "claim": True,
            "error": "'sg-1': rev-1 has claimed it.",
            "refused": "claimed",
            "reason": "rev-1 has claimed it.",
            "holder": "rev-1",
            "until": until,
        }
        outsider = client.post("/inbox/claim", json=target)  # ada holds no reviewers role
        assert (outsider.status_code, outsider.json()["refused"]) == (409, "not-a-decider")
        assert outsider.json()["error"] == "'sg-1': It is decided by one of: reviewers."
        released = client.post("/inbox/release", json=target, headers=rev2)
        assert (released.status_code, released.json()["refused"]) == (409, "not-claimed")
        assert client.post("/inbox/release", json=target, headers=rev1).status_code == 200
        assert cards(client, **rev2)[0]["claimed_by"] is None
        assigned = client.post("/inbox/assign", json={**target, "person": "rev-2"}, headers=rev1)
        assert assigned.status_code == 200, assigned.text
        assert cards(client, **rev1)[0]["assigned_to"] == "rev-2"
        # The person assigned holds the roles the application gives them, whatever a client says.
        refused = client.post("/inbox/assign", json={**target, "person": "ada"}, headers=rev1)
        assert (refused.status_code, refused.json()["refused"]) == (409, "assignee-not-a-decider")
        assert client.post("/inbox/assign", json={**target, "role": "reviewers"}, headers=rev1).status_code == 200
        assert cards(client, **rev1)[0]["assigned_role"] == "reviewers"
    kinds = [entry.event.type for entry in stored(store_url, "c-share")]
    assert [kind for kind in kinds if kind in ("claimed", "released", "assigned")] == [
        "claimed",
        "released",
        "assigned",
        "assigned",
    ]


def test_claims_respect_can_view_and_can_decide_and_an_ended_card_says_how_it_ended(store_url: str) -> None:
    propose(store_url, {"mine": note("a"), "theirs": note("b")})
    with desk(
        store_url,
        can_view=lambda who, thread: thread == "mine",
        can_decide=lambda who, subject: who != "bob",
    ) as client:
        hidden = client.post("/inbox/claim", json={"threadId": "theirs", "id": "sg-1"})
        assert (hidden.status_code, hidden.json()) == (403, {"error": "you may not see this conversation"})
        forbidden = client.post("/inbox/claim", json={"threadId": "mine", "id": "sg-1"}, headers={"x-user": "bob"})
        assert (forbidden.status_code, forbidden.json()["error"]) == (403, "'sg-1': bob may not decide it")
        to_bob = client.post("/inbox/assign", json={"threadId": "mine", "id": "sg-1", "person": "bob"})
        assert (to_bob.status_code, to_bob.json()["error"]) == (403, "'sg-1': bob may not decide it")
        unknown = client.post("/inbox/claim", json={"threadId": "mine", "id": "sg-7"})
        assert (unknown.status_code, unknown.json()["refused"]) == (404, "not-waiting")
        (card,) = cards(client)
        assert bulk(client, [card], "dismiss")[0]["status"] == "idle"
        ended = client.post("/inbox/claim", json={"threadId": "mine", "id": "sg-1"})
        assert (ended.status_code, ended.json()["error"]) == (409, "'sg-1': dismissed already by ada")
    assert not [entry for entry in stored(store_url, "theirs") if entry.event.type == "claimed"]


BAD_HOLDINGS = [
    ("claim", b"[]", "give threadId (1 to 128 letters, digits or ._:@-) and id and minutes as JSON"),
    ("claim", b'{"threadId": "c", "id": "sg-1", "minutes": 0}', "minutes is a whole number from 1 to 480"),
    ("claim", b'{"threadId": "c", "id": "sg-1", "minutes": 481}', "minutes is a whole number from 1 to 480"),
    ("claim", b'{"threadId": "c", "id": "sg-1", "minutes": 1.5}', "minutes is a whole number from 1 to 480"),
    ("claim", b'{"threadId": "c", "id": "sg-1", "minutes": true}', "minutes is a whole number from 1 to 480"),
    ("claim", b'{"threadId": "c", "id": "sg-1", "person": "x"}', "give threadId"),
    (
        "release",
        b'{"threadId": "c/../d", "id": "sg-1"}',
        "give threadId (1 to 128 letters, digits or ._:@-) and id as",
    ),
    (
        "assign",
        b'{"threadId": "c", "id": 1}',
        "give threadId (1 to 128 letters, digits or ._:@-) and id and person or role",
    ),
    (
        "assign",
        b'{"threadId": "c", "id": "sg-1", "person": "a", "role": "b"}',
        "assign a card to a person or to a role",
    ),
    ("assign", b'{"threadId": "c", "id": "sg-1", "person": " "}', "person is a name of 1 to 128 characters"),
    ("assign", b'{"threadId": "c", "id": "sg-1", "role": 5}', "role is a name of 1 to 128 characters"),
]


@pytest.mark.parametrize(("route", "body", "error"), BAD_HOLDINGS)
def test_a_bad_claim_release_or_assignment_is_refused_in_one_line_and_changes_nothing(
    tmp_path: Path, route: str, body: bytes, error: str
) -> None:
    url = f"sqlite:{tmp_path / 'inbox.db'}"
    propose(url, {"c": note("a")})
    with desk(url) as client:
        response = client.post(f"/inbox/{route}", content=body, headers={"content-type": "application/json"})
        assert response.status_code == 400 and response.json()["error"].startswith(error), response.text
        assert (
            client.post(f"/inbox/{route}", content=b"{}", headers={"content-type": "text/plain"}).status_code
            == 415
        )
        assert client.get(f"/inbox/{route}").status_code == 405
    assert [entry.event.type for entry in stored(url, "c")][-1] == "finished"
