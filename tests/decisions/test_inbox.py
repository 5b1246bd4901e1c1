"""The inbox: what waits for a person across a store's conversations, read from a read model the store keeps in
its own database, written in the transaction of the append that changes it, and never anything but what the logs
say (checked against the projection of every log, rebuilt from the logs)."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dial_runtime import (
    ActionSpec,
    ApprovalPolicy,
    Conversation,
    project,
    scripted_human,
)
from dial_runtime.decisions.inbox import Inbox, logged_cards
from dial_runtime.errors import ClaimRefused, StoreConflict
from dial_runtime.runtime.events import LogEntry, SaidEvent
from dial_runtime.runtime.state import ConversationState, OpenSuggestion
from dial_runtime.statemachines import DECISION_REFUSALS
from dial_runtime.stores import MemoryStore, StorePort, open_store
from dial_runtime.views.inbox import (
    WaitingCard,
    WaitingQuery,
    matches,
    members,
    sort_key,
    stored_rows,
    waiting_cards,
)

from ..fakes import Agent, Notes, envelope, suggest

pytestmark = pytest.mark.anyio

ASK = envelope('<dial-ask id="ask-1">Which colour?</dial-ask>')
ACK = envelope("<dial-acknowledge>ok</dial-acknowledge>")


class Clock:
    """A clock the test moves by hand: every entry's time and every deadline is read from it."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class Desk(Notes):
    """The notes domain with the actions a desk decides: notes anyone may add, refunds for ``finance`` that two
    people approve (and that escalate to ``ops`` after an hour), and destructive purges."""

    actions: ClassVar[dict[str, Any]] = {
        **Notes.actions,
        "refund": ActionSpec(
            mutates=True,
            policy=ApprovalPolicy(approvals=2, roles=frozenset({"finance"})),
            escalate_after=3600,
            escalate_to=frozenset({"ops"}),
        ),
        "purge": ActionSpec(mutates=True, destructive=True, deadline=600),
    }

    def preview(self, action: str, payload: Any) -> str:
        if action == "refund":
            return f"Refund {payload['amount']} to {payload['to']}"
        if action == "purge":
            return f"Purge {payload['table']}"
        return super().preview(action, payload)


@pytest.fixture
def anyio_backend(real_clocks: str) -> str:
    """The stores wait on threads and servers: real clocks."""
    return real_clocks


async def waiting_on(
    store: StorePort, conversation_id: str, reply: str, clock: Clock, *, by: str = "ada", **options: Any
) -> Conversation:
    """A conversation of ``store`` whose agent proposed ``reply``, deferred by the person."""
    conversation = await Conversation.open(
        store,
        conversation_id,
        agent=Agent([reply, ACK, ACK, ACK]),
        domain=Desk(),
        human=scripted_human(["defer"] * 4),
        clock=clock,
        **options,
    )
    assert (await conversation.say("please", by=by)).status == "awaiting"
    return conversation


async def logs_say(store: StorePort) -> list[WaitingCard]:
    """What the logs say waits, read one by one (what the read model must equal)."""
    cards = [
        card
        for conversation_id in await store.conversations()
        for card in logged_cards(conversation_id, await store.read(conversation_id))
    ]
    return sorted(cards, key=lambda card: (card.conversation, card.id))


def by_identity(cards: list[WaitingCard]) -> list[WaitingCard]:
    return sorted(cards, key=lambda card: (card.conversation, card.id))


async def test_a_deferred_suggestion_is_in_the_inbox_with_what_the_person_needs_until_it_is_decided(
    store: StorePort,
) -> None:
    clock = Clock()
    conversation = await waiting_on(
        store, "billing-7", envelope(suggest("refund", '{"amount": 40, "to": "bo"}')), clock
    )
    clock.now += 5
    (card,) = await Inbox(store, clock=clock).waiting()
    assert (card.conversation, card.id, card.kind, card.action) == ("billing-7", "sg-1", "suggestion", "refund")
    assert (card.preview, card.payload, card.destructive) == ("Refund 40 to bo", {"amount": 40, "to": "bo"}, False)
    assert (card.asked_by, card.since, card.deadline) == ("ada", clock.now - 5, None)
    assert (card.roles, card.approvals_needed, card.approvers) == (("finance",), 2, ())
    assert card.escalate_at == clock.now - 5 + 3600 and card.escalated_to == ()
    assert card.digest == conversation.pending[0].digest

    await conversation.decide("sg-1", {"accept": True}, by="cy", roles=["finance"])
    (card,) = await Inbox(store).waiting()
    assert card.approvers == ("cy",)
    await conversation.decide("sg-1", {"accept": True}, by="di", roles=["finance"])
    assert await Inbox(store).waiting() == []
    assert await Inbox(store).differences() == []


async def test_a_deferred_question_is_in_the_inbox_until_it_is_answered(store: StorePort) -> None:
    clock = Clock()
    conversation = await waiting_on(store, "c-1", ASK, clock)
    (card,) = await Inbox(store).waiting()
    assert (card.kind, card.id, card.text, card.action, card.digest) == (
        "question",
        "ask-1",
        "Which colour?",
        "",
        None,
    )
    await conversation.answer("ask-1", "blue")
    assert await Inbox(store).waiting() == []


async def test_the_inbox_sorts_by_deadline_then_by_how_long_each_waited(store: StorePort) -> None:
    clock = Clock()
    await waiting_on(store, "a", envelope(suggest("add-note", '{"text": "no deadline, oldest"}')), clock)
    clock.now += 10
    await waiting_on(store, "b", envelope(suggest("purge", '{"table": "t1"}')), clock)  # due at +610
    clock.now += 10
    await waiting_on(
        store, "c", envelope(suggest("add-note", '{"text": "due soonest"}')), clock, decide_timeout=30
    )
    clock.now += 10
    await waiting_on(store, "d", envelope(suggest("add-note", '{"text": "no deadline, newest"}')), clock)
    listed = await Inbox(store, clock=clock).waiting()
    assert [card.conversation for card in listed] == ["c", "b", "a", "d"]
    assert [card.conversation for card in await Inbox(store).waiting(limit=2)] == ["c", "b"]


#: Who asks, holding which roles, and which conversations' cards they may decide: ``n`` a note anyone may add,
#: ``r`` a refund for ``finance`` that ``cy`` approved already.
DECIDERS = [
    ("nobody named, no roles", None, None, ["n", "r"]),
    ("someone without roles", "bo", [], ["n"]),
    ("a finance holder", "di", ["finance"], ["n", "r"]),
    ("the finance holder who approved it", "cy", ["finance"], ["n"]),
    ("roles alone", None, ["finance", "legal"], ["n", "r"]),
    ("a role no policy names", "ed", ["ops"], ["n"]),
]


@pytest.mark.parametrize(("case", "decider", "roles", "expected"), DECIDERS, ids=[case[0] for case in DECIDERS])
async def test_the_inbox_lists_for_a_decider_what_the_policy_lets_them_decide(
    store: StorePort, case: str, decider: str | None, roles: list[str] | None, expected: list[str]
) -> None:
    clock = Clock()
    await waiting_on(store, "n", envelope(suggest("add-note", '{"text": "x"}')), clock)
    refund = await waiting_on(store, "r", envelope(suggest("refund", '{"amount": 1, "to": "x"}')), clock)
    await refund.decide("sg-1", {"accept": True}, by="cy", roles=["finance"])
    listed = await Inbox(store).waiting(decider=decider, roles=roles)
    assert [card.conversation for card in listed] == expected


async def test_an_escalated_card_is_listed_for_the_roles_it_escalated_to(store: StorePort) -> None:
    clock = Clock()
    conversation = await waiting_on(store, "r", envelope(suggest("refund", '{"amount": 1, "to": "x"}')), clock)
    assert await Inbox(store).waiting(decider="ed", roles=["ops"]) == []
    clock.now += 3601
    await conversation.recover()  # what the deadline scheduler does when the escalation is due
    (card,) = await Inbox(store).waiting(decider="ed", roles=["ops"])
    assert (card.escalated_to, card.escalate_at, card.roles) == (("ops",), None, ("finance", "ops"))


async def test_overdue_action_and_conversation_filter_the_inbox(store: StorePort) -> None:
    clock = Clock()
    await waiting_on(store, "a", envelope(suggest("purge", '{"table": "t"}')), clock)
    await waiting_on(store, "b", envelope(suggest("add-note", '{"text": "x"}')), clock, decide_timeout=60)
    await waiting_on(store, "c", envelope(suggest("add-note", '{"text": "y"}')), clock)
    inbox = Inbox(store, clock=clock)
    assert await inbox.waiting(overdue=True) == []
    clock.now += 61
    assert [card.conversation for card in await inbox.waiting(overdue=True)] == ["b"]
    assert [card.conversation for card in await inbox.waiting(action="add-note")] == ["b", "c"]
    assert [card.conversation for card in await inbox.waiting(conversation="a")] == ["a"]
    assert await inbox.waiting(action="nothing-like-it") == []


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "3"])
async def test_a_limit_that_is_no_positive_whole_number_is_refused(limit: Any) -> None:
    with pytest.raises(ValueError, match="limit is a positive whole number"):
        await Inbox(MemoryStore()).waiting(limit=limit)


class LogsOnly:
    """A store of an application's own that keeps logs and no inbox (it has only the StorePort's methods)."""

    def __init__(self) -> None:
        self._kept = MemoryStore()
        self.append, self.read, self.conversations = self._kept.append, self._kept.read, self._kept.conversations
        self.lock, self.watch, self.aclose = self._kept.lock, self._kept.watch, self._kept.aclose


async def test_a_store_that_keeps_no_inbox_is_refused_in_words_and_its_conversations_run_as_ever() -> None:
    store = LogsOnly()
    with pytest.raises(
        TypeError, match="LogsOnly keeps no inbox: the in-process, SQLite and PostgreSQL stores do"
    ):
        Inbox(store)  # type: ignore[arg-type]
    conversation = await waiting_on(store, "c-1", envelope(suggest("add-note", '{"text": "x"}')), Clock())  # type: ignore[arg-type]
    assert await conversation.decide("sg-1", {"accept": True}) is not None


async def test_an_append_refused_changes_neither_the_log_nor_the_inbox(store: StorePort) -> None:
    clock = Clock()
    await waiting_on(store, "c-1", envelope(suggest("add-note", '{"text": "x"}')), clock)
    before = await Inbox(store).waiting()
    said = LogEntry(seq=1, time=clock.now, event=SaidEvent(text="late"))
    with pytest.raises(StoreConflict):
        await store.append("c-1", [said], expected_seq=0, waiting=[])  # type: ignore[call-arg]
    assert await Inbox(store).waiting() == before


async def test_a_second_worker_deciding_keeps_the_inbox_true_for_the_first(store: StorePort) -> None:
    clock = Clock()
    first = await waiting_on(store, "c-1", envelope(suggest("add-note", '{"text": "x"}')), clock)
    # Another worker (another object on the same store) decides; the first then proposes again the same card.
    second = await Conversation.open(
        store, "c-1", agent=Agent([]), domain=Desk(), human=scripted_human([]), clock=clock
    )
    first.agent = Agent([envelope(suggest("add-note", '{"text": "x"}')), ACK])
    await second.decide("sg-1", {"dismiss": True})
    assert await Inbox(store).waiting() == []
    await first.say("once more")
    assert [card.id for card in await Inbox(store).waiting()] == ["sg-2"]
    assert await Inbox(store).differences() == []


# The read model against the projection, over open-ended histories -------------------------------------------

#: What a step of a history does: propose (a note, a refund, a purge, a question) in a conversation, or decide on
#: what waits there (accept by a finance holder, dismiss, answer), claim, release or assign it (to a person or a
#: role), or let time pass.
STEP = st.one_of(
    st.tuples(st.just("propose"), st.integers(0, 3), st.sampled_from(["note", "refund", "purge", "ask"])),
    st.tuples(st.just("decide"), st.integers(0, 3), st.sampled_from(["accept", "dismiss", "say"])),
    st.tuples(st.just("hold"), st.integers(0, 3), st.sampled_from(["claim", "release", "person", "role"])),
    st.tuples(st.just("wait"), st.integers(0, 3), st.sampled_from([60, 700, 4000])),
)

REPLIES = {
    "note": envelope(suggest("add-note", '{"text": "n"}')),
    "refund": envelope(suggest("refund", '{"amount": 5, "to": "x"}')),
    "purge": envelope(suggest("purge", '{"table": "t"}')),
    "ask": ASK,
}


async def play(store: StorePort, steps: list[tuple[str, int, Any]]) -> None:
    """Run ``steps`` on four conversations of ``store``, each call on a new object (as workers do)."""
    clock = Clock()
    for kind, which, what in steps:
        if kind == "wait":
            clock.now += what
            continue
        agent = Agent([REPLIES[what] if kind == "propose" else ACK, ACK, ACK, ACK])
        conversation = await Conversation.open(
            store, f"c-{which}", agent=agent, domain=Desk(), human=scripted_human(["defer"] * 4), clock=clock
        )
        pending = conversation.pending
        if kind == "propose":
            await conversation.say("go", by="ada")
        elif kind == "hold":
            await hold(conversation, what)
        elif pending and pending[0].id.startswith("ask"):
            await conversation.answer(pending[0].id, "blue")
        elif pending:
            decision: Any = {"say": "no"} if what == "say" else {what: True}
            await conversation.decide(pending[0].id, decision, by=f"p{len(steps)}", roles=["finance"])


async def hold(conversation: Conversation, how: str) -> None:
    """Claim, release or assign (to a person or a role) the first card waiting, as a finance holder; a refusal
    of the card's rules is a step that changes nothing."""
    waiting = [each for each in conversation.pending if not each.id.startswith("ask")]
    if not waiting:
        return
    card, finance = waiting[0].id, ["finance"]
    with contextlib.suppress(ClaimRefused):
        if how == "claim":
            await conversation.claim(card, by="cleo", roles=finance, seconds=600)
        elif how == "release":
            await conversation.release(card, by="cleo")
        elif how == "person":
            await conversation.assign(card, by="cleo", roles=finance, person="dan", person_roles=finance)
        else:
            await conversation.assign(card, by="cleo", roles=finance, role="finance")


#: What the panel's card and the inbox's card both say of a suggestion waiting, beyond its id and digest.
SHOWN = (
    "preview",
    "deadline",
    "approvers",
    "claimed_by",
    "claimed_until",
    "assigned_to",
    "assigned_role",
    "issue",
)


def _as_shown(card: Any) -> tuple[Any, ...]:
    return () if card is None else tuple(getattr(card, name) for name in SHOWN)


async def assert_inbox_is_the_projection(store: StorePort) -> None:
    listed = by_identity(await Inbox(store).waiting())
    assert listed == await logs_say(store)
    shown = []
    for conversation_id in await store.conversations():
        projection = project(await store.read(conversation_id))
        for waiting in projection.waiting:
            card = projection.card(waiting.id)
            shown.append((conversation_id, waiting.id, waiting.digest, *_as_shown(card)))
    assert [
        (card.conversation, card.id, card.digest, *_as_shown(None if card.kind == "question" else card))
        for card in listed
    ] == sorted(shown, key=lambda row: (row[0], row[1]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, max_size=12))
async def test_the_inbox_is_what_the_projection_of_every_log_waits_for(url: str, steps: list[Any]) -> None:
    store = open_store(url)
    try:
        for conversation_id in await store.conversations():  # a fresh database per example would be slower
            await _forget(store, conversation_id)
        await play(store, steps)
        await assert_inbox_is_the_projection(store)
        assert await Inbox(store).differences() == []
    finally:
        await store.aclose()


async def _forget(store: StorePort, conversation_id: str) -> None:
    """Empty one conversation of a durable test store, its log and its rows, behind the runtime's back."""
    if isinstance(store, MemoryStore):
        store._logs.pop(conversation_id, None)
        store._hashes.pop(conversation_id, None)
        store._waiting.pop(conversation_id, None)
        return
    statements = [
        "DELETE FROM dial_log WHERE conversation_id = ?",
        "DELETE FROM dial_waiting WHERE conversation_id = ?",
    ]
    if hasattr(store, "path"):
        with sqlite3.connect(store.path) as connection:
            for statement in statements:
                connection.execute(statement, (conversation_id,))
    else:
        with psycopg.connect(store.url, autocommit=True) as connection:  # type: ignore[attr-defined]
            for statement in statements:
                connection.execute(statement.replace("?", "%s"), (conversation_id,))


# Rebuilding and checking --------------------------------------------------------------------------------------


async def test_rebuilt_from_the_logs_the_inbox_equals_the_live_one(store: StorePort) -> None:
    await play(
        store,
        [
            ("propose", 0, "refund"),
            ("propose", 1, "ask"),
            ("propose", 2, "purge"),
            ("decide", 0, "accept"),
            ("propose", 3, "note"),
            ("decide", 3, "dismiss"),
            ("wait", 0, 4000),
            ("propose", 3, "note"),
        ],
    )
    live = await Inbox(store).waiting()
    assert len(live) == 4
    for conversation_id in await store.conversations():
        await _forget_rows(store, conversation_id)
    differences = await Inbox(store).differences()
    assert [difference.conversation for difference in differences] == ["c-0", "c-1", "c-2", "c-3"]
    assert all(difference.kept == () for difference in differences)
    rebuilt = await Inbox(store).rebuild()
    assert (rebuilt.conversations, rebuilt.cards, rebuilt.busy, rebuilt.refused) == (4, 4, (), ())
    assert await Inbox(store).waiting() == live
    assert await Inbox(store).differences() == []


async def _forget_rows(store: StorePort, conversation_id: str) -> None:
    """Drop a conversation's rows from the read model behind the runtime's back (a store from before the inbox)."""
    if isinstance(store, MemoryStore):
        store._waiting.pop(conversation_id, None)
    elif hasattr(store, "path"):
        with sqlite3.connect(store.path) as connection:
            connection.execute("DELETE FROM dial_waiting WHERE conversation_id = ?", (conversation_id,))
    else:
        with psycopg.connect(store.url, autocommit=True) as connection:  # type: ignore[attr-defined]
            connection.execute("DELETE FROM dial_waiting WHERE conversation_id = %s", (conversation_id,))


async def test_rebuilding_waits_for_a_conversation_held_elsewhere_and_reports_one_held_all_along(
    store: StorePort, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    await waiting_on(store, "c-1", envelope(suggest("add-note", '{"text": "x"}')), clock)
    monkeypatch.setattr("dial_runtime.decisions.inbox.BUSY_WAIT", 0.3)
    async with store.lock("c-1"):
        rebuilt = await Inbox(store).rebuild()
    assert (rebuilt.conversations, rebuilt.busy) == (0, ("c-1",))
    assert len(await Inbox(store).waiting()) == 1


# The command line ---------------------------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dial_runtime.cli", "inbox", *args], capture_output=True, text=True, timeout=60
    )


async def test_the_command_lists_filters_checks_and_rebuilds(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'desk.db'}"
    store = open_store(url)
    clock = Clock()
    import time

    clock.now = time.time()
    await waiting_on(store, "billing-7", envelope(suggest("refund", '{"amount": 40, "to": "bo"}')), clock)
    noting = await waiting_on(store, "notes-3", envelope(suggest("add-note", '{"text": "n"}')), clock)
    await noting.decide("sg-1", {"edit": {"text": ""}}, by="ada")
    purging = await waiting_on(store, "ops-1", envelope(suggest("purge", '{"table": "t"}')), clock)
    until = await purging.claim("sg-1", by="bo", seconds=600)
    await purging.assign("sg-1", by="bo", role="dba")
    await store.aclose()

    listed = cli("--store", url)
    assert listed.returncode == 0, listed.stderr
    purge, refund, note = listed.stdout.splitlines()
    assert "notes-3 sg-1  Add the note 'n'  (refused: Give the note's text.; asked by ada)" in note
    held = f"claimed by bo until {time.strftime('%H:%M', time.localtime(until))}, assigned to dba"
    assert purge.startswith("due in 9m") and f"ops-1 sg-1  Purge t  (destructive; {held}; asked by ada)" in purge
    assert refund.startswith("no deadline")
    assert "billing-7 sg-1  Refund 40 to bo  (0 of 2 approvals; for finance; asked by ada)" in refund

    mine = cli("--store", url, "--as", "bo", "--role", "dev")
    listed_for_bo = [line.split("  ")[-2] for line in mine.stdout.splitlines()]
    assert mine.returncode == 0 and listed_for_bo == ["Purge t", "Add the note 'n'"]
    as_json = cli("--store", url, "--json", "--action", "refund")
    assert as_json.returncode == 0 and '"conversation": "billing-7"' in as_json.stdout
    assert '"digest": "sha256:' in as_json.stdout and "ops-1" not in as_json.stdout

    checked = cli("--store", url, "--check")
    assert (checked.returncode, checked.stdout.strip()) == (0, f"the inbox of {url} agrees with every log")
    with sqlite3.connect(tmp_path / "desk.db") as connection:
        connection.execute("DELETE FROM dial_waiting")
    checked = cli("--store", url, "--check")
    assert checked.returncode == 1
    assert "billing-7: the log says sg-1 waits; the inbox holds nothing" in checked.stdout
    assert checked.stderr.strip().endswith("in 3 conversation(s): dial-runtime inbox --rebuild rewrites it")
    rebuilt = cli("--store", url, "--rebuild")
    assert (rebuilt.returncode, rebuilt.stdout.strip()) == (
        0,
        f"rebuilt the inbox of 3 conversation(s) in {url}: 3 waiting",
    )
    assert cli("--store", url, "--check").returncode == 0


BAD = [
    (["--store", "sqlite:{tmp}/none.db"], "no such database file", 1),
    (["--store", "jsonl:{tmp}"], "is not one of memory:, sqlite:PATH", 2),
    (["--store", "sqlite:{tmp}/desk.db", "--limit", "0"], "--limit is a positive whole number, not 0", 2),
    (["--store", "sqlite:{tmp}/desk.db", "--limit", "x"], "argument --limit: invalid int value: 'x'", 2),
    (["--store", "sqlite:{tmp}/desk.db", "--rebuild", "--overdue"], "--rebuild and --check take no filter", 2),
    (["--store", "sqlite:{tmp}/desk.db", "--rebuild", "--check"], "choose one of --rebuild and --check", 2),
    (["--store", "sqlite:{tmp}/desk.db", "--mine"], "unrecognized arguments: --mine", 2),
    (["--store", "postgresql://nobody:secret@127.0.0.1:1/none"], "PostgreSQL store 'postgresql://nobody:***@", 1),
]


@pytest.mark.parametrize(
    ("args", "said", "status"), BAD, ids=[" ".join(case[0][2:]) or case[0][1] for case in BAD]
)
def test_a_bad_command_line_is_refused_in_one_line(
    tmp_path: Path, args: list[str], said: str, status: int
) -> None:
    sqlite3.connect(tmp_path / "desk.db").close()
    done = cli(*[arg.format(tmp=tmp_path) for arg in args])
    assert done.returncode == status
    (line,) = done.stderr.splitlines()
    assert line.startswith("dial-runtime") and said in line and "secret" not in line


def test_an_imported_conversation_is_in_the_inbox_of_the_store_it_is_imported_into(tmp_path: Path) -> None:
    source, target = f"sqlite:{tmp_path / 'a.db'}", f"sqlite:{tmp_path / 'b.db'}"

    async def make() -> None:
        store = open_store(source)
        await waiting_on(store, "billing-7", envelope(suggest("refund", '{"amount": 40, "to": "bo"}')), Clock())
        await store.aclose()

    import trio

    trio.run(make)
    log = tmp_path / "billing-7.jsonl"
    exported = subprocess.run(
        [sys.executable, "-m", "dial_runtime.cli", "export", "billing-7", "--store", source, "-o", str(log)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert exported.returncode == 0, exported.stderr
    imported = subprocess.run(
        [sys.executable, "-m", "dial_runtime.cli", "import", str(log), "--store", target, "--id", "copy"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert imported.returncode == 0, imported.stderr
    listed = cli("--store", target, "--json")
    assert '"conversation": "copy"' in listed.stdout and '"id": "sg-1"' in listed.stdout


# The stores' query, against the rule it stands for --------------------------------------------------------------

#: Role names chosen to trip a text search: case, prefixes, wildcards, escapes, quotes, commas, brackets, none.
ROLE = st.sampled_from(["ops", "OPS", "op", "ops2", "%", "_", "\\", '"', 'a","b', "[", "é", "o%s", "o_s", ""])
ROW = st.tuples(
    st.sampled_from(["c-1", "c-2", "c-3"]),
    st.sampled_from(["add-note", "refund", ""]),
    st.floats(0, 100),
    st.none() | st.floats(0, 100),
    st.lists(ROLE, max_size=3, unique=True),
    st.lists(ROLE, max_size=3, unique=True),
)
QUERY = st.builds(
    WaitingQuery,
    conversation=st.none() | st.sampled_from(["c-1", "c-2"]),
    action=st.none() | st.sampled_from(["add-note", "refund", ""]),
    overdue_at=st.none() | st.floats(0, 100),
    roles=st.none() | st.lists(ROLE, max_size=3, unique=True).map(tuple),
    not_approved_by=st.none() | ROLE,
    limit=st.none() | st.integers(1, 5),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(ROW, max_size=8), queries=st.lists(QUERY, min_size=1, max_size=4))
async def test_each_store_finds_exactly_the_rows_the_query_names(
    url: str, rows: list[Any], queries: list[WaitingQuery]
) -> None:
    store = open_store(url)
    try:
        kept: dict[str, list[Any]] = {}
        for number, (conversation_id, action, since, deadline, roles, approvers) in enumerate(rows):
            kept.setdefault(conversation_id, []).append(
                (
                    f"sg-{number}",
                    action,
                    since,
                    deadline,
                    members(roles),
                    members(approvers),
                    f"card {number}",
                )
            )
        await store.conversations()  # the tables are made
        for conversation_id in ("c-1", "c-2", "c-3"):
            await _forget(store, conversation_id)
            said = LogEntry(seq=1, time=0.0, event=SaidEvent(text="hi"))
            await store.append(conversation_id, [said], expected_seq=0, waiting=kept.get(conversation_id, []))  # type: ignore[call-arg]
        for query in queries:
            expected = sorted(
                (
                    (conversation_id, row)
                    for conversation_id, held in kept.items()
                    for row in held
                    if matches(query, conversation_id, row)
                ),
                key=lambda pair: sort_key(*pair),
            )[: query.limit]
            found = await store.waiting(query)  # type: ignore[attr-defined]
            assert found == [(conversation_id, row[6]) for conversation_id, row in expected]
    finally:
        await store.aclose()


def test_the_rule_the_stores_query_stands_for_is_the_cards_own() -> None:
    """``matches`` (what the stores find for a decider) agrees with ``WaitingCard.open_to`` on every card."""
    for roles in ((), ("finance",), ("finance", "ops")):
        for approvers in ((), ("cy",)):
            card = WaitingCard(conversation="c", id="sg-1", roles=roles, approvers=approvers)
            (row,) = stored_rows([card])
            for decider in (None, "cy", "di"):
                for held in ((), ("finance",), ("ops",), ("legal", "finance")):
                    query = WaitingQuery(roles=held, not_approved_by=decider)
                    assert matches(query, "c", row) == card.open_to(decider, held), (card, decider, held)


@settings(max_examples=200, deadline=None)
@given(
    policy_roles=st.frozensets(st.sampled_from(["finance", "ops", "legal"]), max_size=2),
    escalate_to=st.frozensets(st.sampled_from(["ops", "board"]), max_size=2),
    escalated=st.booleans(),
    approvers=st.lists(st.sampled_from(["cy", "di"]), max_size=2, unique=True),
    decider=st.sampled_from(["cy", "di", "ed"]),
    held=st.frozensets(st.sampled_from(["finance", "ops", "legal", "board"]), max_size=3),
)
def test_a_card_is_listed_for_exactly_the_deciders_whose_approval_the_fold_would_take(
    policy_roles: frozenset[str],
    escalate_to: frozenset[str],
    escalated: bool,
    approvers: list[str],
    decider: str,
    held: frozenset[str],
) -> None:
    opened = OpenSuggestion(
        id="sg-1",
        action="refund",
        text="",
        payload={},
        policy=ApprovalPolicy(approvals=3, roles=policy_roles),
        approvers=tuple(approvers),
        escalate_to=tuple(sorted(escalate_to)),
        escalated=escalated,
        deferred=True,
    )
    state = ConversationState()
    state.open_suggestions = {"sg-1": opened}
    (card,) = waiting_cards("c-1", state)
    refused = opened.verdict("accept", decider, held, 0.0) in DECISION_REFUSALS
    assert card.open_to(decider, held) is not refused
    (row,) = stored_rows([card])
    assert matches(WaitingQuery(roles=tuple(held), not_approved_by=decider), "c-1", row) is not refused


class Forwarding:
    """An application's wrapper of a store: its own append (without the read model's rows), the rest forwarded."""

    def __init__(self, store: StorePort) -> None:
        self.store = store
        self.appended = 0

    async def append(self, conversation_id: str, entries: Any, *, expected_seq: int) -> None:
        self.appended += 1
        await self.store.append(conversation_id, entries, expected_seq=expected_seq)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def test_a_wrapped_store_whose_append_takes_no_rows_runs_conversations_as_ever(store: StorePort) -> None:
    wrapped = Forwarding(store)
    conversation = await waiting_on(wrapped, "c-1", envelope(suggest("add-note", '{"text": "x"}')), Clock())  # type: ignore[arg-type]
    assert (await conversation.decide("sg-1", {"accept": True})).outcomes[0].status == "done"
    assert wrapped.appended > 0


async def test_a_card_whose_edit_was_refused_keeps_its_own_words_and_says_why(store: StorePort) -> None:
    """After the domain refused a person's edit, the inbox and the panel show the card as it was proposed, the
    refusal, and the refused edit's own words; what waits to run is the edit (a surface offers to edit it
    again)."""
    clock = Clock()
    conversation = await waiting_on(store, "n", envelope(suggest("add-note", '{"text": "milk"}')), clock)
    result = await conversation.decide("sg-1", {"edit": {"text": ""}}, by="ada")
    assert result.status == "awaiting"
    (card,) = await Inbox(store, clock=clock).waiting()
    assert (card.preview, card.payload) == ("Add the note 'milk'", {"text": ""})
    assert card.issue is not None and (card.issue.code, card.issue.field) == ("missing-text", "text")
    assert card.edit_preview == "Add the note ''"
    shown = project(await store.read("n")).card("sg-1")
    assert shown is not None and shown.preview == "Add the note 'milk'"
    assert [(refusal.preview, refusal.hint) for refusal in shown.refusals] == [
        ("Add the note ''", "Give the note's text.")
    ]
    await (
        await Conversation.open(
            store, "n", agent=Agent([ACK]), domain=Desk(), human=scripted_human([]), clock=clock
        )
    ).decide("sg-1", {"edit": {"text": "oat milk"}}, by="ada")
    done = project(await store.read("n")).card("sg-1")
    assert done is not None and (done.status, done.preview) == ("done", "Add the note 'oat milk'")  # what ran
