"""Exactly once where the domain can help: each run carries an idempotency key derived from the log, and after a
crash mid-action recovery asks the domain's ``reconcile`` what became of the run before it reports anything.

A process that died inside an action is made exactly: the core is driven to its ``RunAction`` effect and left
there, so the log ends with ``action-started`` and no outcome, as a killed worker's store holds it (the driver
writes the log before it runs an action). The SIGKILL tests with real processes are in ``test_exactly_once``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar

import msgspec
import pytest

from dial_runtime import (
    Accept,
    ActionError,
    ActionSpec,
    Conversation,
    Domain,
    IdempotencyKey,
    policy_human,
    replay,
    system_prompt,
)
from dial_runtime.driver.built import DomainOnFirstUse
from dial_runtime.errors import LogError
from dial_runtime.runtime.core import ConversationCore, idempotency_key
from dial_runtime.runtime.effects import (
    Answer,
    Consult,
    ConsultRules,
    GetContext,
    LookUp,
    Replied,
    Review,
    Reviewed,
    RunAction,
    Send,
)
from dial_runtime.runtime.events import ActionStartedEvent, LogEntry, OutcomeEvent
from dial_runtime.stores import MemoryStore, SQLiteStore
from dial_runtime.stores.jsonl import check_log
from dial_runtime.views.person import project

from ..fakes import Agent, envelope, suggest

SEND = envelope(suggest("send-email", '{"to": "ada@example.org"}'))
ACK = envelope("<dial-acknowledge>ok</dial-acknowledge>")
SPEC = ActionSpec(mutates=True)


def died_running(conversation_id: str | None = "c-1", reply: str = SEND) -> list[LogEntry]:
    """The log a process leaves when it dies inside the run of ``sg-1`` (the one suggestion of ``reply``;
    ``send-email`` by default), accepted."""
    core = ConversationCore(conversation_id=conversation_id)
    call = core.say("mail ada")
    value: object = None
    while True:
        effect = call.send(value)
        if isinstance(effect, GetContext):
            value = None
        elif isinstance(effect, Send):
            value = Replied(reply)
        elif isinstance(effect, LookUp):
            value = SPEC
        elif isinstance(effect, Review):
            value = Reviewed(None, "Email ada")
        elif isinstance(effect, ConsultRules):
            value = None  # no rules for whether to ask
        elif isinstance(effect, Consult):
            value = Answer(Accept(), by="ada")
        elif isinstance(effect, RunAction):
            return list(core.log.entries())  # the process dies here, the run's effect unknown
        else:
            raise AssertionError(f"unexpected effect {effect!r}")


class Mail:
    """A domain whose ``send-email`` records each run's key; ``told`` is what its ``reconcile`` does."""

    actions: ClassVar[dict[str, ActionSpec]] = {"send-email": SPEC}

    def __init__(self, told: Any = None) -> None:
        self.told = told
        self.keys: list[str] = []
        self.asked: list[str] = []

    def validate(self, action: str, payload: Any) -> None:
        return None

    def preview(self, action: str, payload: Any) -> str:
        return "Email ada"

    def run(self, action: str, payload: Any, *, key: str | None = None) -> Any:
        assert key is not None
        self.keys.append(key)
        return {"sent": True}

    def reconcile(self, action: str, payload: Any, *, key: str) -> Any:
        self.asked.append(key)
        if isinstance(self.told, BaseException):
            raise self.told
        return self.told


class AsyncMail(Mail):
    async def reconcile(self, action: str, payload: Any, *, key: str) -> Any:
        return super().reconcile(action, payload, key=key)


class OldMail:
    """A domain written before keys: its ``run`` takes none, and it has no ``reconcile``."""

    actions: ClassVar[dict[str, ActionSpec]] = {"send-email": SPEC}

    def __init__(self) -> None:
        self.runs = 0

    def run(self, action: str, payload: Any) -> Any:
        self.runs += 1
        return {"sent": True}


def ending(conversation: Conversation) -> OutcomeEvent:
    outcomes = [entry.event for entry in conversation.log if isinstance(entry.event, OutcomeEvent)]
    assert len(outcomes) == 1
    return outcomes[0]


RECOVERIES: list[tuple[str, Callable[[], Any], dict[str, Any]]] = [
    ("it ran", lambda: Mail({"sent": True}), {"status": "done", "result": {"sent": True}, "reconciled": True}),
    ("it ran (async)", lambda: AsyncMail({"id": 7}), {"status": "done", "result": {"id": 7}, "reconciled": True}),
    (
        "it failed",
        lambda: Mail(ActionError("the mailbox is full", code="smtp-552", hint="Try later.")),
        {"status": "failed", "code": "smtp-552", "error": "the mailbox is full", "reconciled": True},
    ),
    ("it cannot tell", lambda: Mail(LookupError("no such key")), {"status": "failed", "code": "interrupted"}),
    ("its reconcile is broken", lambda: Mail(TypeError("bug")), {"status": "failed", "code": "interrupted"}),
    ("its reconcile has a key bug", lambda: Mail(KeyError("to")), {"status": "failed", "code": "interrupted"}),
    ("no reconcile", OldMail, {"status": "failed", "code": "interrupted"}),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("name", "make", "expected"), RECOVERIES, ids=[case[0] for case in RECOVERIES])
async def test_recovery_reports_what_the_domain_tells(
    name: str, make: Callable[[], Any], expected: dict[str, Any]
) -> None:
    entries = died_running()
    domain = make()
    conversation = Conversation(agent=Agent([]), domain=domain, human=policy_human(), log=entries)
    await conversation.recover()
    outcome = ending(conversation)
    got = {field: getattr(outcome, field) for field in expected}
    assert got == expected
    assert outcome.reconciled is expected.get("reconciled", False)
    if isinstance(domain, Mail):  # asked once, under the key the run had
        started = next(entry.event for entry in entries if isinstance(entry.event, ActionStartedEvent))
        assert domain.asked == [started.key]
        assert domain.keys == []  # nothing was run again
    check_log(list(conversation.log))  # the log it wrote folds


@pytest.mark.anyio
async def test_a_reconcile_that_breaks_is_logged_for_the_operator_and_leaves_the_effect_unknown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    conversation = Conversation(
        agent=Agent([]), domain=Mail(TypeError("secret dsn")), human=policy_human(), log=died_running()
    )
    with caplog.at_level(logging.ERROR, logger="dial_runtime"):
        await conversation.recover()
    outcome = ending(conversation)
    assert "secret dsn" not in msgspec.json.encode(list(conversation.log)).decode()
    assert (outcome.code, outcome.reconciled) == ("interrupted", False)
    assert "domain.reconcile raised" in caplog.text


@pytest.mark.anyio
async def test_the_agent_is_told_the_reconciled_outcome_with_the_next_message() -> None:
    store = MemoryStore()
    await store.append("c-1", died_running(), expected_seq=0)
    agent = Agent([ACK])
    domain = Mail({"sent": True})
    conversation = await Conversation.open(store, "c-1", agent=agent, domain=domain, human=policy_human())
    assert ending(conversation).status == "done"
    result = await conversation.say("thanks")
    assert result.status == "idle"
    assert '{"action":"send-email","status":"done","result":{"sent":true}}' in agent.sent[0]
    stored = [entry.event for entry in await store.read("c-1")]
    assert [e.reconciled for e in stored if isinstance(e, OutcomeEvent)] == [True]
    card = project(await store.read("c-1")).card("sg-1")
    assert card is not None
    assert card.status == "done"
    assert card.reported is not None
    assert card.reported.reconciled


@pytest.mark.anyio
async def test_a_run_gets_its_key_when_its_run_takes_one_and_the_key_comes_from_the_log() -> None:
    domain = Mail()
    conversation = await Conversation.open(
        MemoryStore(), "c-9", agent=Agent([SEND, ACK]), domain=domain, human=policy_human()
    )
    await conversation.say("mail ada")
    started = next(e.event for e in conversation.log if isinstance(e.event, ActionStartedEvent))
    assert domain.keys == [started.key] == [idempotency_key("c-9", conversation.log[0].time, "sg-1", 1)]
    old = OldMail()  # a run without a key keyword still runs
    await Conversation(agent=Agent([SEND, ACK]), domain=old, human=policy_human()).say("mail ada")
    assert old.runs == 1


def test_keys_differ_by_conversation_log_suggestion_and_attempt_and_fit_a_header() -> None:
    keys = {
        idempotency_key(conversation, began, suggestion, attempt)
        for conversation in ("c-1", "c-2", "c-1/sg-1", "é\udc80", None)
        for began in (1.5, 2.5, None)
        for suggestion in ("sg-1", "sg-2")
        for attempt in (1, 2)
    }
    assert len(keys) == 60
    assert all(len(key) == 32 and key.isascii() and key.isalnum() for key in keys)


def test_conversations_without_an_id_get_keys_from_when_their_log_began() -> None:
    first, second = died_running(None), died_running(None)
    keys = [next(e.event.key for e in log if isinstance(e.event, ActionStartedEvent)) for log in (first, second)]
    assert first[0].time != second[0].time
    assert keys[0] != keys[1]


@pytest.mark.anyio
async def test_a_reconciled_log_replays_without_a_difference() -> None:
    conversation = Conversation(
        agent=Agent([]), domain=Mail({"sent": True}), human=policy_human(), log=died_running()
    )
    await conversation.recover()
    report = replay(conversation.log, conversation_id="c-1")
    assert report.divergences == ()


def test_the_fold_refuses_a_reconciled_outcome_of_a_run_not_in_flight() -> None:
    entries = died_running()
    interrupted = OutcomeEvent(
        id="sg-1", action="send-email", status="failed", code="interrupted", reconciled=True
    )
    with pytest.raises(LogError, match="reconciled"):  # an unknown effect cannot be one the domain told
        check_log(numbered([*(entry.event for entry in entries), interrupted]))
    before_start = [entry.event for entry in entries if not isinstance(entry.event, ActionStartedEvent)]
    done = OutcomeEvent(id="sg-1", action="send-email", status="done", reconciled=True)
    with pytest.raises(LogError, match="reconciled"):  # a suggestion accepted but never started
        check_log(numbered([*before_start, done]))


def numbered(events: list[Any]) -> list[LogEntry]:
    return [LogEntry(seq=seq, time=float(seq), event=event) for seq, event in enumerate(events, start=1)]


def test_an_outcome_not_reconciled_is_stored_as_it_always_was() -> None:
    event = OutcomeEvent(id="sg-1", action="a", status="done", preview="", result=None)
    stored = msgspec.json.decode(msgspec.json.encode(event))
    assert "reconciled" not in stored
    assert {"preview", "result", "error", "code", "field", "hint", "edited", "expired"} <= set(stored)


# --- typed domains ---------------------------------------------------------------------------------------------

mail = Domain("mail")
SENT: dict[str, dict[str, Any]] = {}


def was_sent(key: str, to: str) -> dict[str, Any]:
    if key not in SENT:
        raise LookupError(key)
    return SENT[key]


@mail.action(reconcile=was_sent)
def send_email(to: str, key: IdempotencyKey | None = None) -> dict[str, Any]:
    """Send an email."""
    SENT[key or ""] = {"to": to}
    return {"to": to}


@mail.action
async def send_fax(number: str) -> str:
    return number


def test_a_typed_actions_key_parameter_is_not_part_of_its_payload() -> None:
    schema = mail.vocabulary["send-email"]["schema"]
    assert set(schema["properties"]) == {"to"}
    assert mail.validate("send-email", {"to": "a", "key": "k"}) is not None  # no payload field named key
    assert "IdempotencyKey" not in system_prompt(mail)


@pytest.mark.anyio
async def test_a_typed_action_gets_the_key_and_its_reconcile_tells_what_became_of_it() -> None:
    SENT.clear()
    conversation = await Conversation.open(
        MemoryStore(),
        "c-3",
        agent=Agent([envelope(suggest("send-email", '{"to": "ada"}')), ACK]),
        domain=mail,
        human=policy_human(),
    )
    await conversation.say("mail ada")
    key = idempotency_key("c-3", conversation.log[0].time, "sg-1", 1)
    assert list(SENT.items()) == [(key, {"to": "ada"})]
    assert mail.reconcile("send-email", {"to": "ada"}, key=key) == {"to": "ada"}
    with pytest.raises(LookupError):
        mail.reconcile("send-email", {"to": "ada"}, key="never")
    with pytest.raises(LookupError, match="declares no reconcile"):
        mail.reconcile("send-fax", {"number": "1"}, key=key)
    assert mail.run("send-email", {"to": "bob"}) == {"to": "bob"}  # a direct call: the key keeps its default


@pytest.mark.anyio
async def test_a_domain_built_on_first_use_gets_the_runs_key() -> None:
    built = Mail()
    lazy = DomainOnFirstUse(lambda conversation_id, log: built, "c-1", built)
    conversation = await Conversation.open(
        MemoryStore(), "c-1", agent=Agent([SEND, ACK]), domain=lazy, human=policy_human()
    )
    lazy.conversation = conversation
    await conversation.say("mail ada")
    started = next(e.event for e in conversation.log if isinstance(e.event, ActionStartedEvent))
    assert built.keys == [started.key]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_stored_conversation_recovers_at_once_under_the_stores_lock(kind: str, tmp_path: Any) -> None:
    """``recover()`` on a stored conversation closes the dead call now, as it does for one built from a log."""
    store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "c.db")
    try:
        entries = died_running()
        await store.append("c-1", entries, expected_seq=0)
        domain = Mail({"sent": True})
        conversation = await Conversation.open(store, "c-1", agent=Agent([]), domain=domain, human=policy_human())
        await conversation.recover()
        assert (ending(conversation).status, ending(conversation).reconciled) == ("done", True)
        stored = await store.read("c-1")
        assert [entry.event.type for entry in stored] == [entry.event.type for entry in conversation.log]
        assert domain.keys == []  # nothing ran again
    finally:
        await store.aclose()
