"""A conversation's state as a fold over its event log: no I/O, no awaiting, no callbacks.

What the agent is owed (outcomes, refusals of unusable replies, words the person gave inside the conversation)
accumulates from the events that produce it and is cleared by the next reply, because a reply means the message
carrying it arrived. So a send that fails, a deadline that passes or a crash leaves it owed without any event
having to say so, and after a reply what is owed is exactly what that reply produced.

The fold also follows the machines: the conversation's life, the turn loop of the call in progress, and every
suggestion that has no outcome yet (its lifecycle state, current payload, preview and last refusal), so a
conversation rebuilt from its log (in another process, after a crash) can take a deferred decision, or carry on
with the rest of a reply, exactly where the original stopped.

The fold trusts nothing: every event goes through the machines and the checks below, live or read from a log, and
:func:`fold_log` turns any refusal into a :class:`~dial_runtime.errors.LogError` naming the entry, so a log that
no run of the runtime could have written builds no conversation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Iterable
from typing import Any, get_args

import attrs
import msgspec

from ..errors import IllegalTransition, LogError
from ..language.outcomes import Outcome
from ..statemachines import (
    BETWEEN_CALLS,
    CARD_HOLDING,
    CLAIM,
    CLAIM_REFUSALS,
    DECIDING,
    DECISION,
    DECISION_REFUSALS,
    ENDED,
    FINAL_STATE,
    IN_CALL,
    LIFE,
    MOVES_FLOW,
    NEEDS_REPLY,
    OUTCOME_STATUS,
    RUNNING,
    SILENT,
    SUCCEEDED,
    SUGGESTION,
    TURN_LOOP,
)
from ..statemachines.compiled import Table
from ..statemachines.suggestion import OutcomeStatus, OutcomeTrigger
from ..statemachines.turn_loop import CALL_STATUS
from .events import (
    EVENT_TYPES,
    ActionStartedEvent,
    AnsweredEvent,
    ApprovalRefusedEvent,
    ApprovalWaitingEvent,
    AskEvent,
    AssignedEvent,
    ClaimedEvent,
    DecidedEvent,
    DeclareEvent,
    DeferredEvent,
    EndedEvent,
    EscalatedEvent,
    Event,
    FinishedEvent,
    FlowMovedEvent,
    HandledEvent,
    InterruptedEvent,
    LogEntry,
    OutcomeEvent,
    ProposedEvent,
    RefusedEvent,
    ReleasedEvent,
    RemindedEvent,
    ReplyCutEvent,
    ReplyEvent,
    ReplyRefusedEvent,
    ReplyRepeatedEvent,
    ReplyStartedEvent,
    ResumedEvent,
    SaidEvent,
    SentEvent,
    SuggestionEvent,
    TurnLimitEvent,
    UnconfirmedEvent,
    vocabulary_refusal,
)
from .records import ApprovalPolicy, Ask, Issue, RuleVerdict, Suggestion

#: Declared keys the runtime itself uses to report outcomes; they never enter ``facts``.
OUTCOME_KEY_PREFIX = "outcome:"

#: The ids the runtime assigns: ``sg-N`` for suggestions, ``ask-N`` for asks.
_NUMBERED = re.compile(r"(?:sg|ask)-([1-9][0-9]*)")


#: The events the fold fires for every call, turn or suggestion, with the flags their guards read in the order
#: given (see ``Guard``: a lookup, not a call).
_LIFE_BEGIN = LIFE.guard("begin")
_LIFE_FINISH = LIFE.guard("finish")
_START_TURN = TURN_LOOP.guard("start_turn")
_REPLY = TURN_LOOP.guard("reply")
#: The events that end a suggestion with its outcome, each a lookup by state (see ``Guard``).
_ENDS = {trigger: SUGGESTION.guard(trigger) for trigger in get_args(OutcomeTrigger)}
_BEGIN = TURN_LOOP.guard("begin", "ending", "nothing_to_send")
_HANDLED = TURN_LOOP.guard(
    "handled",
    "person_pending",
    "cut_short",
    "ending",
    "call_spent",
    "words_pending",
    "needs_reply",
    "unusable_reply",
)
_REVIEW = SUGGESTION.guard("review", "read_only", "handoff", "rule_denied", "rule_approved", "policy")
_START_RUN = SUGGESTION.guard("start", "accepted", "handoff")
_REMIND = SUGGESTION.guard("remind", "reminder_due")
_ESCALATE = SUGGESTION.guard("escalate", "escalation_due")
#: Each kind of decision, with every flag of the decision machine in one order (see OpenSuggestion.verdict).
_VERDICTS = {
    event: DECISION.guard(
        event, "past_deadline", "unnamed", "outside_roles", "approved_already", "approvals_short", "vote"
    )
    for event in DECISION.events
}
_ARRIVED = DECISION.initial
#: Each kind of claim, release or assignment, with every flag of the claim machine in one order (see
#: OpenSuggestion.holding_verdict).
_HOLDING = {
    event: CLAIM.guard(
        event, "unnamed", "outside_roles", "approved_already", "held_by_other", "not_holder", "assignee_outside"
    )
    for event in CLAIM.events
}
_ARRIVED_HOLDING = CLAIM.initial
#: Each kind of decision's verdict on a suggestion without an approval policy, in time and past its deadline:
#: the table's own answers with every policy flag false, read once (nearly every decision is one of these).
_WITHOUT_POLICY = {
    event: (
        guard.fire(_ARRIVED, False, *(False,) * 5),
        guard.fire(_ARRIVED, True, *(False,) * 5),
    )
    for event, guard in _VERDICTS.items()
}
#: The kinds of decision an ``approval-refused`` entry may stand for, by its ``decision`` (``None``: an
#: approval; words refuse as a decision on the suggestion decided on, or as words over any other).
_REFUSED_KINDS = {None: ("accept", "edit"), "dismiss": ("dismiss",), "say": ("say", "supersede")}


class _NoEntries(dict[Any, Any]):
    """The one empty mapping every state holds where it has no asks, open suggestions or facts yet: most
    conversations never have any, and an empty dict each is 64 bytes a conversation keeps. It refuses entries
    (the fold puts a dict of its own in its place first), so no state can write into another's."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("the shared empty mapping takes no entries: put a dict of its own in its place")

    __setitem__ = setdefault = update = _refuse


#: The shared empty mapping (see :class:`_NoEntries`).
NO_ENTRIES: dict[Any, Any] = _NoEntries()


def proposal_key(action: str, payload: Any) -> bytes:
    """What makes two proposals the same: the action and the (JSON-ready) payload, keys sorted (msgspec's
    encoding, a twentieth of the time ``payload_digest`` takes: the fold keys every action done by it)."""
    return msgspec.json.encode([action, payload], order="sorted")


class _Refusal(Exception):
    """An event the state cannot take where it stands; :func:`fold_log` reports it as a LogError."""


class OpenSuggestion(msgspec.Struct):
    """A suggestion without an outcome yet: where its lifecycle stands and what the person would see (a mutable
    Struct: one is made for every suggestion, in a third of the instructions an attrs class takes)."""

    id: str
    action: str
    text: str
    payload: Any
    preview: str = ""  # the domain's words for the payload waiting (a refused edit's, after one)
    shown_preview: str = ""  # the card's own words, as it was shown (``SuggestionEvent.preview``)
    destructive: bool = False
    mutates: bool = False
    handoff: bool = False
    done_before: str | None = None  # the suggestion that did the same already (``SuggestionEvent.done_before``)
    state: str = SUGGESTION.initial
    issue: Issue | None = None
    edited: bool = False
    deferred: bool = False
    accepted: bool = False  # an accept or edit since the last refusal or deferral: the ``start`` guard
    key: str | None = None  # the idempotency key of its run, once started (``ActionStartedEvent.key``)
    deadline: float | None = None  # when the person's time to decide ends (``SuggestionEvent.deadline``)
    policy: ApprovalPolicy | None = None  # who must approve it (``SuggestionEvent.policy``)
    ruled: RuleVerdict | None = None  # what the rules for whether to ask said of it (``SuggestionEvent.ruled``)
    precondition: bool = False  # the domain checks its premise while it waits (``SuggestionEvent``)
    recheck_every: float | None = None  # how often, while it is deferred
    asked_by: str | None = None  # whose words asked for it, when the policy separates them from its approvers
    approvers: tuple[str, ...] = ()  # who approved the payload waiting, in order
    remind_at: float | None = None  # when its deciders are reminded, until they are (``SuggestionEvent``)
    escalate_at: float | None = None  # when it escalates, until it has
    escalate_to: tuple[str, ...] = ()  # the roles it escalates to, which may approve it once it has
    escalated: bool = False
    reminded: bool = False
    links: tuple[str, ...] = ()  # the ids of the single-use links its decisions were made with
    speaker: str | None = None  # whose words the reply that proposed it answered, when the log says
    waiting_since: float = 0.0  # when it was last deferred: since when it waits for a decision
    claimed_by: str | None = None  # who claimed it last (``ClaimedEvent``); the claim holds until claimed_until
    claimed_until: float = 0.0
    assigned_to: str | None = None  # the person it is assigned to (``AssignedEvent``), or
    assigned_role: str | None = None  # the role

    def suggestion(self) -> Suggestion:
        """The record the person decides on."""
        return Suggestion(
            id=self.id,
            action=self.action,
            text=self.text,
            payload=self.payload,
            preview=self.preview,
            destructive=self.destructive,
            mutates=self.mutates,
            issue=self.issue,
            done_before=self.done_before,
            deadline=self.deadline,
        )

    def decided_through(self, link: str | None) -> bool:
        """Whether a decision on it came through the single-use link of that id already (each decides once)."""
        return link is not None and link in self.links

    @property
    def restricted_to(self) -> tuple[str, ...]:
        """The roles one of which a decider must hold now (sorted), as its policy says and, once it escalated, the
        roles it escalated to; ``()`` when its policy names no roles (anyone who may decide, decides)."""
        policy = self.policy
        if policy is None or not policy.roles:
            return ()
        return tuple(sorted(self.approving_roles(policy)))

    def approving_roles(self, policy: ApprovalPolicy) -> frozenset[str]:
        """The roles whose holders may approve it: the policy's, and once it escalated, those it escalated to."""
        return policy.roles.union(self.escalate_to) if self.escalated else policy.roles

    @property
    def deciding(self) -> bool:
        """Whether the suggestion waits for the person's decision."""
        return self.state in DECIDING

    # The times' rules, one site each: the fold refuses what breaks them, the core asks them what to record.

    def expired_at(self, now: float) -> bool:
        """Whether the person's time to decide has passed at ``now``: a decision then is not taken, it expires."""
        return deadline_passed(self.deadline, now)

    def reminder_due(self, now: float) -> bool:
        """Whether its deciders are due a reminder at ``now`` (it was deferred, and not reminded yet)."""
        return self.deferred and self.remind_at is not None and now >= self.remind_at

    def escalation_due(self, now: float) -> bool:
        """Whether it is due to escalate at ``now`` (it was deferred, and has not escalated yet)."""
        return self.deferred and self.escalate_at is not None and now >= self.escalate_at

    def due(self, now: float) -> bool:
        """Whether a deferred suggestion has something due at ``now``: a reminder, an escalation or its expiry."""
        return self.deferred and (self.expired_at(now) or self.reminder_due(now) or self.escalation_due(now))

    def check_due(self, now: float) -> bool:
        """Whether its premise is due to be checked again at ``now``: deferred, and waiting a whole
        ``recheck_every`` or more (a check that finds it holding leaves no trace, so from then on every call
        checks it)."""
        every = self.recheck_every
        return self.deferred and every is not None and now >= self.waiting_since + every

    def soonest(self, now: float) -> float | None:
        """The soonest time a deferred suggestion has coming after ``now`` (a reminder, an escalation, its
        deadline, the next check of its premise), or ``None``: when something is due for it."""
        if not self.deferred:
            return None
        times = [t for t in (self.remind_at, self.escalate_at, self.deadline) if t is not None]
        every = self.recheck_every
        if every is not None:
            since = self.waiting_since
            times.append(since + every * (max(0.0, (now - since)) // every + 1))
        return min(times) if times else None

    def ends_with(self, trigger: OutcomeTrigger | None) -> OutcomeStatus:
        """The status of the outcome ``trigger`` ends it with (``None``: an earlier entry ended it already)."""
        return OUTCOME_STATUS[self.state if trigger is None else _ENDS[trigger][self.state]]

    # Who may decide, and what a decision comes to: the decision machine's rules (``DECISION``), one site.

    def verdict(self, decision: str, by: str | None, roles: Collection[str], now: float) -> str:
        """What ``decision`` (an event of :data:`DECISION`: ``accept``, ``edit``, ``dismiss``, ``say``, or
        ``supersede`` for words that end it) by ``by``, holding ``roles``, comes to at ``now``: the table's
        verdict, read with the flags this suggestion gives."""
        policy = self.policy
        # Words over it are no decision on it; without a deadline nothing is late (as for most suggestions).
        past_deadline = self.deadline is not None and decision != "supersede" and self.expired_at(now)
        if policy is None:  # as for most suggestions: nothing else to read
            return _WITHOUT_POLICY[decision][past_deadline]
        outside_roles = bool(policy.roles) and not admits(self.approving_roles(policy), roles)
        approvers = (by,) if decision == "edit" else (*self.approvers, by)
        return _VERDICTS[decision][
            _ARRIVED,
            past_deadline,
            by is None,
            outside_roles,
            decision == "accept" and by in self.approvers,
            by is not None and not policy.met(approvers, self.asked_by),  # type: ignore[arg-type]
            decision == "dismiss" and not policy.dismissal_ends,
        ]

    def refusal(self, decision: str, by: str | None, roles: Collection[str], now: float) -> tuple[str, str] | None:
        """The code and hint of the refusal :meth:`verdict` gives ``decision``, ``None`` when it is not refused."""
        verdict = self.verdict(decision, by, roles, now)
        code = DECISION_REFUSALS.get(verdict)
        if code is None:
            return None
        if verdict == "unknown_decider":
            return code, "This action needs named deciders: decide with by=<who>."
        assert self.policy is not None  # only a policy refuses a decider
        if verdict == "not_a_decider":
            return code, f"It is decided by one of: {', '.join(sorted(self.approving_roles(self.policy)))}."
        return code, f"{by} approved it already; it needs {self.policy.approvals} different people."

    # Who holds it while it waits: the claim machine's rules (``CLAIM``), one site.

    def holder(self, now: float) -> str | None:
        """Who holds a claim on it at ``now`` (``None``: nobody, or the last claim's time ran out)."""
        return claim_holder(self.claimed_by, self.claimed_until, now)

    def holding_verdict(
        self,
        kind: str,
        by: str | None,
        roles: Collection[str],
        now: float,
        *,
        person: str | None = None,
        person_roles: Collection[str] = (),
        role: str | None = None,
    ) -> str:
        """What ``kind`` (an event of :data:`CLAIM`: ``claim``, ``release``, ``assign``) by ``by``, holding
        ``roles``, comes to at ``now``; an assignment names ``person`` (holding ``person_roles``) or ``role``, or
        neither. The table's verdict, read with the flags this suggestion gives."""
        policy = self.policy
        restricted = bool(policy is not None and policy.roles)
        approving = self.approving_roles(policy) if policy is not None and restricted else frozenset()
        holder = self.holder(now)
        if person is not None:
            assignee_outside = (restricted and not admits(approving, person_roles)) or person in self.approvers
        else:
            assignee_outside = role is not None and restricted and role not in approving
        return _HOLDING[kind][
            _ARRIVED_HOLDING,
            not by,
            restricted and not admits(approving, roles),
            by in self.approvers,
            holder is not None and holder != by,
            holder is None or holder != by,
            assignee_outside,
        ]

    def holding_refusal(
        self, kind: str, by: str | None, roles: Collection[str], now: float, **assignee: Any
    ) -> tuple[str, str] | None:
        """The code and hint of the refusal :meth:`holding_verdict` gives (``assignee``: its ``person``,
        ``person_roles`` and ``role``), ``None`` when it is not refused."""
        verdict = self.holding_verdict(kind, by, roles, now, **assignee)
        code = CLAIM_REFUSALS.get(verdict)
        if code is None:
            return None
        hints = {
            "unknown_claimant": f"Say who makes the {kind}: {kind} with by=<who>.",
            "not_a_decider": f"It is decided by one of: {', '.join(self.restricted_to)}.",
            "already_approved": f"{by} approved it already; it waits for another approver.",
            "claimed": f"{self.claimed_by} has claimed it.",
            "not_claimed": f"{by} holds no claim on it.",
            "assignee_not_a_decider": (
                f"{assignee['person']} may not decide it."
                if assignee.get("person") is not None
                else f"The role {assignee.get('role')} does not approve it."
            ),
        }
        return code, hints[verdict]


@attrs.define(init=False)
class ConversationState:
    """Everything a conversation remembers, kept current by :meth:`apply`.

    ``flow`` is the table of the domain's flow, when it has one: ``flow_state`` starts at its initial state and
    each ``flow-moved`` must be a move the table makes. Folded without the table (a log read on its own),
    ``flow_state`` is unknown until the first ``flow-moved``, and the moves need only follow one another.
    ``result`` is the final flow state that ended the conversation.

    A new state is always the start of a conversation, so its ``__init__`` takes only ``flow`` and is written out:
    attrs' own would bind 28 keyword parameters to their defaults, 60% more instructions, and one state is made
    for every ``Conversation``. attrs gives the class its slots, ``repr`` and ``==``.
    """

    life: str
    loop: str
    turn: int
    owed_outcomes: list[Outcome] | tuple[Outcome, ...]  # () while none is owed: an empty list holds 56 bytes
    owed_refusals: tuple[ReplyRefusedEvent, ...]  # tuples: rarely owed, and an empty one costs nothing
    owed_words: tuple[str, ...]
    owed_corrections: tuple[str, ...]
    ended_suggestions: dict[str, str]  # every suggestion with an outcome: its status
    # The last suggestion the person decided on that ran done, by its action and payload (proposal_key).
    done_proposals: dict[bytes, str]
    suggestions_numbered: int
    asks_numbered: int
    replies: int
    reply: str | None
    streaming: bool
    call_spent: bool  # the call's deadline cut the reply being handled, or it repeats: the call stops
    unusable: str | None  # the text of the call's last reply handled, when it could not be used
    cursor: int
    instead: str | None
    speaker: str | None  # who said the words of the call being made, when the log says
    open_suggestions: dict[str, OpenSuggestion]
    asked: dict[str, Ask]
    open_asks: dict[str, Ask]
    asks_waiting_since: dict[str, float]  # when each open ask was deferred
    given_ids: set[str] | None  # the ids the agent chose (made at the first: most agents choose none)
    facts: dict[str, Any]
    flow: Table | None
    flow_state: str | None
    result: str | None
    # The time of the entry being folded (a decision is checked against its suggestion's deadline with it).
    now: float = attrs.field(eq=False)

    def __init__(self, *, flow: Table | None = None) -> None:
        self.life = LIFE.initial
        self.loop = TURN_LOOP.initial
        self.turn = 0
        self.owed_outcomes = ()
        self.owed_refusals = ()
        self.owed_words = ()
        self.owed_corrections = ()
        self.ended_suggestions = {}
        self.done_proposals = {}
        self.suggestions_numbered = 0
        self.asks_numbered = 0
        self.replies = 0
        self.reply = None
        self.streaming = False
        self.call_spent = False
        self.unusable = None
        self.cursor = -2
        self.instead = None
        self.speaker = None
        self.open_suggestions = NO_ENTRIES
        self.asked = NO_ENTRIES
        self.open_asks = NO_ENTRIES
        self.asks_waiting_since = NO_ENTRIES
        self.given_ids = None
        self.facts = NO_ENTRIES
        self.flow = flow
        self.flow_state = None if flow is None else flow.initial
        self.result = None
        self.now = 0.0

    @classmethod
    def fold(cls, events: Iterable[Event], *, flow: Table | None = None) -> ConversationState:
        """The state a conversation is in after these events (``_Refusal`` or ``IllegalTransition`` when an
        event cannot stand; :func:`fold_log` says which entry)."""
        state = cls(flow=flow)
        for event in events:
            state.apply(event)
        return state

    @property
    def in_call(self) -> bool:
        """Whether a call is in progress (or was, when a process died during it)."""
        return self.life in IN_CALL

    @property
    def ended(self) -> bool:
        """Whether the conversation has ended (later words are logged, never sent)."""
        return self.life in ENDED

    def owes(self) -> bool:
        """Whether anything is owed to the agent."""
        return bool(self.owed_outcomes or self.owed_refusals or self.owed_words or self.owed_corrections)

    def pending(self) -> tuple[Suggestion | Ask, ...]:
        """The suggestions and asks waiting for a decision or an answer that was deferred."""
        if not self.open_suggestions:  # as at the end of most calls: no list to build
            return tuple(self.open_asks.values())
        deferred = [each.suggestion() for each in self.open_suggestions.values() if each.deferred]
        return (*deferred, *self.open_asks.values())

    def awaits_person(self) -> bool:
        """Whether a deferred decision or answer is pending (:meth:`pending` without making the records)."""
        if self.open_asks:
            return True
        for each in self.open_suggestions.values():  # noqa: SIM110 (a loop: see _owes_a_reply)
            if each.deferred:
                return True
        return False

    def superseded(self, deciding: OpenSuggestion | None = None) -> list[OpenSuggestion]:
        """The suggestions new words end: ``deciding`` (the one decided on), then every other deferred one."""
        waiting = [each for each in self.open_suggestions.values() if each.deferred and each is not deciding]
        return waiting if deciding is None else [deciding, *waiting]

    def last_done(self, action: str, payload: Any) -> str | None:
        """The last suggestion the person decided on that ran ``done`` with this action and payload: a new one
        that would do the same is marked as done before (unless its action is repeatable)."""
        return self.done_proposals.get(proposal_key(action, payload)) if self.done_proposals else None

    def used(self, ident: str) -> bool:
        """Whether a suggestion or an ask of this conversation has the id already.

        The runtime assigns ``sg-N`` and ``ask-N`` in order, skipping the agent's own ids, so an assigned-looking
        id numbered up to the counter is taken either way.
        """
        if ident in self.ended_suggestions or ident in self.open_suggestions:  # as an acknowledgement's is
            return True
        if self.given_ids is not None and ident in self.given_ids:
            return True
        numbered = _NUMBERED.fullmatch(ident)
        if numbered is None:
            return False
        counter = self.suggestions_numbered if ident.startswith("sg-") else self.asks_numbered
        return int(numbered.group(1)) <= counter

    def next_id(self, prefix: str) -> str:
        """The next id the runtime assigns (``sg`` or ``ask``), skipping ids the agent used already."""
        number = self.suggestions_numbered if prefix == "sg" else self.asks_numbered
        while True:
            number += 1
            ident = f"{prefix}-{number}"
            if self.given_ids is None or ident not in self.given_ids:
                return ident

    def apply(self, event: Event) -> None:
        """Advance the state by one event; an event that cannot stand here raises and changes nothing the
        machines hold (``_Refusal`` or ``IllegalTransition``)."""
        try:
            handler = ADMITTED[self.life][type(event)]
        except KeyError:
            raise _Refusal(_not_admitted(self.life, event)) from None
        handler(self, event)

    def _place(self, event: Any) -> None:
        """Move the cursor to the element of the reply an event comes from (its ``element``), if it is further
        on: a resumed call carries on after it."""
        element = event.element
        if element is not None and element > self.cursor:
            self.cursor = element

    def _nothing(self, event: Any) -> None:
        """An event that changes nothing the state holds (its admission is the whole check)."""

    def _open(self, suggestion_id: str) -> OpenSuggestion:
        opened = self.open_suggestions.get(suggestion_id)
        if opened is None:
            raise _Refusal(f"no suggestion {suggestion_id!r} is open")
        return opened

    def _said(self, event: SaidEvent) -> None:
        life = _LIFE_BEGIN[self.life]
        nothing_to_send = not event.text and not self.owes()
        self.loop = _BEGIN[self.loop, life in ENDED, nothing_to_send]
        self.life = life
        self.turn = 0
        self.unusable = None
        self.speaker = event.by

    def _resumed(self, event: ResumedEvent) -> None:
        if (
            event.call == "say"
            and self.open_suggestions
            and (refused := refusals(self.superseded(), "supersede", event.by, event.roles, self.now))
        ):
            raise _Refusal(f"suggestion {refused[0][0]!r} may not be superseded by {event.by!r}'s words")
        life = _LIFE_BEGIN[self.life]
        self.loop = TURN_LOOP.fire(self.loop, "resume")
        self.life = life
        self.call_spent = False  # a call of its own, with its own time
        self.unusable = None

    def _finished(self, event: FinishedEvent) -> None:
        if event.status != "interrupted" and CALL_STATUS.get(self.loop) != event.status:
            raise _Refusal(f"a call cannot finish {event.status!r} with its turn loop {self.loop!r}")
        self.life = _LIFE_FINISH[self.life]

    def _ended(self, event: EndedEvent) -> None:
        if event.result is not None:
            if self.flow_state is not None and event.result != self.flow_state:
                raise _Refusal(f"the result {event.result!r} is not the flow's state {self.flow_state!r}")
            if self.flow is not None and not self.flow.is_final(event.result):
                raise _Refusal(f"the result {event.result!r} is not a final state of the flow {self.flow.name}")
            self.result = event.result
        self.life = LIFE.fire(self.life, "end")

    def _flow_moved(self, event: FlowMovedEvent) -> None:
        last = self.owed_outcomes[-1] if self.owed_outcomes else None
        if last is None or last.id != event.suggestion_id or last.status not in MOVES_FLOW:
            raise _Refusal(f"a flow moves only right after a done outcome (of {event.suggestion_id!r})")
        if last.action != event.action:
            raise _Refusal(f"suggestion {event.suggestion_id!r} was {last.action!r}, not {event.action!r}")
        if self.flow_state is not None and event.source != self.flow_state:
            raise _Refusal(f"the flow is in {self.flow_state!r}, not {event.source!r}")
        if self.flow is not None and self.flow.fire(event.source, event.event) != event.target:
            raise _Refusal(f"{event.event!r} leads the flow {self.flow.name} elsewhere than {event.target!r}")
        self.flow_state = event.target

    def _sent(self, event: SentEvent) -> None:
        if event.turn != self.turn + 1:
            raise _Refusal(f"turn {event.turn} follows turn {self.turn}")
        self.loop = _START_TURN[self.loop]
        self.turn = event.turn

    def _turn_limit(self, event: TurnLimitEvent) -> None:
        self.loop = TURN_LOOP.fire(self.loop, "start_turn", out_of_turns=True)

    def _reply(self, event: ReplyEvent) -> None:
        if self.streaming:
            self.streaming = False
        else:
            self._begin_reply()
        self.reply = event.text

    def _reply_started(self, event: ReplyStartedEvent) -> None:
        self._begin_reply()
        self.streaming = True

    def _begin_reply(self) -> None:
        self.loop = _REPLY[self.loop]
        self.replies += 1
        self.reply = ""
        self.cursor = -2
        self.instead = None
        self.call_spent = False
        if self.asked:
            self.asked = NO_ENTRIES
        self.owed_outcomes = ()
        self.owed_refusals = ()
        self.owed_words = ()
        self.owed_corrections = ()

    def _no_reply(self, event: Any) -> None:
        self.loop = TURN_LOOP.fire(self.loop, "time_out")

    def _send_failed(self, event: Any) -> None:
        self.loop = TURN_LOOP.fire(self.loop, "send_fail")

    def _interrupted(self, event: InterruptedEvent) -> None:
        self.loop = TURN_LOOP.fire(self.loop, "cancel")
        self.streaming = False

    def _handled(self, event: HandledEvent) -> None:
        # Written out where it is cheap to: this runs at the end of every turn.
        self.loop = _HANDLED[
            self.loop,
            bool(self.open_asks or self.open_suggestions) and self.awaits_person(),
            not event.complete,
            self.life in ENDED,
            self.call_spent,
            bool(self.owed_words),
            bool(self.owed_outcomes) and self._owes_a_reply(),
            bool(self.owed_refusals),
        ]
        self.unusable = self.reply if self.owed_refusals else None

    def _owes_a_reply(self) -> bool:
        """Whether an outcome owed to the agent is one it must answer (``NEEDS_REPLY``).

        This and :meth:`awaits_person` are loops, not ``any()`` over a generator, which costs three times the
        instructions: both run at the end of every turn (measured side by side)."""
        for outcome in self.owed_outcomes:  # noqa: SIM110
            if outcome.status in NEEDS_REPLY:
                return True
        return False

    def _outcome(self, event: OutcomeEvent) -> None:
        opened = self._open(event.id)
        final = FINAL_STATE[event.status]
        if event.action != opened.action:
            raise _Refusal(f"suggestion {event.id!r} is {opened.action!r}, not {event.action!r}")
        before = opened.state
        if event.reconciled and (
            before not in RUNNING or event.trigger == "interrupt" or event.code == "interrupted"
        ):
            raise _Refusal(f"suggestion {event.id!r}: only a run the domain can tell of ends reconciled")
        if event.trigger == "lapse" and not opened.precondition:
            raise _Refusal(f"suggestion {event.id!r} lapses, but the domain checks no premise of it")
        trigger = event.trigger
        if trigger is None and before not in SUGGESTION.finals:
            trigger = _recorded_before_triggers(before, event, self.instead)
        if trigger is not None:
            opened.state = _ENDS[trigger][before]
        if opened.state != final:
            raise _Refusal(f"suggestion {event.id!r} cannot end {event.status!r} from {before!r}")
        del self.open_suggestions[event.id]
        self.ended_suggestions[event.id] = event.status
        if event.status == "done" and opened.mutates and not opened.handoff:
            self.done_proposals[proposal_key(opened.action, opened.payload)] = event.id
        if not self.open_suggestions:  # a dict keeps its size once emptied: the shared empty one costs nothing
            self.open_suggestions = NO_ENTRIES
        owed = self.owed_outcomes
        if isinstance(owed, list):
            owed.append(event.outcome)
        else:
            self.owed_outcomes = [event.outcome]

    def _refused_reply(self, event: ReplyRefusedEvent) -> None:
        if self.loop != "handling":
            raise _Refusal("a reply is refused only while it is handled")
        self.owed_refusals = (*self.owed_refusals, event)
        self._place(event)

    def _unconfirmed(self, event: UnconfirmedEvent) -> None:
        if self.loop != "handling":
            raise _Refusal("an acknowledgement is found unconfirmed only while its reply is handled")
        self.owed_corrections = (*self.owed_corrections, event.reason)
        self._place(event)

    def _reply_cut(self, event: ReplyCutEvent) -> None:
        if self.loop != "handling" or self.reply is None or event.turn != self.turn:
            raise _Refusal(f"a reply is cut only right after it arrived (turn {event.turn})")
        self.call_spent = event.cause == "call-deadline"

    def repeats_unusable(self) -> bool:
        """Whether the reply being handled is byte for byte the call's previous reply, which could not be used."""
        return self.unusable is not None and self.reply == self.unusable

    def _reply_repeated(self, event: ReplyRepeatedEvent) -> None:
        if self.loop != "handling" or event.turn != self.turn or not self.owed_refusals:
            raise _Refusal(f"a reply repeats another only once refused, while it is handled (turn {event.turn})")
        if not self.repeats_unusable():
            raise _Refusal(f"the reply of turn {event.turn} is not the call's previous reply, unusable, again")
        self.call_spent = True

    def _ask(self, event: AskEvent) -> None:
        self._use_id(
            event.id, "ask", _NUMBERED.fullmatch(event.id) is not None and event.id == self.next_id("ask")
        )
        if event.asked:
            if self.asked is NO_ENTRIES:
                self.asked = {}
            self.asked[event.id] = Ask(
                id=event.id,
                text=event.text,
                response_type=event.response_type,
                options=event.options,
                timeout=event.timeout,
            )
        self._place(event)

    def _use_id(self, ident: str, prefix: str, assigned: bool) -> None:
        """Take an id, unique within the conversation: an assigned one moves the counter on to it (it must be
        the next), an id the agent chose is remembered."""
        if assigned:  # the next assigned id is never used: next_id skips the agent's ids
            expected = self.next_id(prefix)
            if ident != expected:
                raise _Refusal(f"the next assigned id is {expected!r}, not {ident!r}")
            if prefix == "sg":
                self.suggestions_numbered = int(ident[3:])
            else:
                self.asks_numbered = int(ident[4:])
            return
        if self.used(ident):
            raise _Refusal(f"the id {ident!r} is used already")
        if self.given_ids is None:
            self.given_ids = set()
        self.given_ids.add(ident)

    def _answered(self, event: AnsweredEvent) -> None:
        if self.asked.pop(event.ask_id, None) is None:
            if self.open_asks.pop(event.ask_id, None) is None:
                raise _Refusal(f"no ask {event.ask_id!r} waits for an answer")
            del self.asks_waiting_since[event.ask_id]
        if event.text:
            self.owed_words = (*self.owed_words, event.text)

    def _deferred(self, event: DeferredEvent) -> None:
        if event.kind == "suggestion":
            opened = self._open(event.subject_id)
            if not opened.deciding or opened.deferred:
                raise _Refusal(f"suggestion {event.subject_id!r} is not waiting for a decision")
            opened.deferred = True
            opened.accepted = False
            opened.waiting_since = self.now
        else:
            ask = self.asked.pop(event.subject_id, None)
            if ask is None:
                raise _Refusal(f"no ask {event.subject_id!r} is being asked")
            if self.open_asks is NO_ENTRIES:
                self.open_asks = {}
                self.asks_waiting_since = {}
            self.open_asks[event.subject_id] = ask
            self.asks_waiting_since[event.subject_id] = self.now

    def _proposed(self, event: ProposedEvent) -> None:
        if self.loop != "handling":
            raise _Refusal("a suggestion is proposed only while a reply is handled")
        self._use_id(event.id, "sg", event.numbered)
        if self.open_suggestions is NO_ENTRIES:
            self.open_suggestions = {}
        self.open_suggestions[event.id] = OpenSuggestion(
            id=event.id, action=event.action, text=event.text, payload=event.payload, speaker=self.speaker
        )
        self._place(event)

    def _suggestion(self, event: SuggestionEvent) -> None:
        opened = self._open(event.id)
        _same_proposal(opened, event.action, event.payload, "shows")
        if self.instead is not None:
            raise _Refusal(f"suggestion {event.id!r} is shown, but the person's words came first: it is overtaken")
        target = self._reviewed(opened, event)
        if event.done_before is not None:
            self._check_done_before(event)
        if event.precondition and (not event.mutates or event.handoff):
            raise _Refusal(
                f"suggestion {event.id!r} runs without asking: no premise of it is checked while it waits"
            )
        if event.recheck_every is not None and not event.precondition:
            raise _Refusal(
                f"suggestion {event.id!r} is checked again every {event.recheck_every} s, but has no premise"
            )
        opened.state = target
        opened.preview = opened.shown_preview = event.preview
        opened.destructive = event.destructive
        opened.mutates = event.mutates
        opened.handoff = event.handoff
        opened.done_before = event.done_before
        opened.deadline = event.deadline
        opened.policy = event.policy
        opened.ruled = event.ruled
        opened.precondition = event.precondition
        opened.recheck_every = event.recheck_every
        opened.asked_by = event.asked_by
        opened.remind_at = event.remind_at
        opened.escalate_at = event.escalate_at
        opened.escalate_to = event.escalate_to

    def shown_waits(self, shown: SuggestionEvent) -> bool:
        """Whether the suggestion ``shown`` would wait for the person once logged (not run at once, nor ended by a
        rule's verdict)."""
        return self._reviewed(self._open(shown.id), shown) in DECIDING

    @staticmethod
    def _reviewed(opened: OpenSuggestion, event: SuggestionEvent) -> str:
        """The state the suggestion's machine reviews ``opened`` into when ``event`` shows it."""
        if event.ruled is not None:
            _check_ruled(event, event.ruled)
        return shown_state(event, opened.state)

    def _check_done_before(self, event: SuggestionEvent) -> None:
        """Refuse a suggestion marked as done before unless the person decides on it and the suggestion it names
        is the last one done with the same action and payload."""
        if not event.mutates or event.handoff:
            raise _Refusal(f"suggestion {event.id!r} runs without asking: it is never marked as done before")
        if self.last_done(event.action, event.payload) != event.done_before:
            raise _Refusal(
                f"suggestion {event.id!r} is marked as done before by {event.done_before!r}, which is not the last"
                " suggestion done with its action and payload"
            )

    def _decided(self, event: DecidedEvent) -> None:
        opened = self._open(event.suggestion_id)
        if not opened.deciding:
            raise _Refusal(f"suggestion {event.suggestion_id!r} is not waiting for a decision")
        decision = event.decision
        if decision == "expire":  # the person's time ran out: the driver's timer, or a decision that came late
            opened.deferred = False
            opened.state = SUGGESTION.fire(opened.state, decision)
            return
        verdict = opened.verdict(decision, event.by, event.roles, self.now)
        if verdict == "expired":
            raise _Refusal(f"suggestion {event.suggestion_id!r} is decided after its deadline: it expired")
        if verdict in DECISION_REFUSALS:
            raise _Refusal(
                f"suggestion {opened.id!r} may not be ended by {event.by!r} ({DECISION_REFUSALS[verdict]})"
            )
        if (
            decision == "say"
            and (  # the words end every other waiting suggestion too
                refused := refusals(self.superseded(opened)[1:], "supersede", event.by, event.roles, self.now)
            )
        ):
            raise _Refusal(f"suggestion {refused[0][0]!r} may not be superseded by {event.by!r}'s words")
        if event.link is not None:
            if opened.decided_through(event.link):
                raise _Refusal(f"suggestion {event.suggestion_id!r} is decided twice by one single-use link")
            opened.links = (*opened.links, event.link)
        if decision == "edit" and event.previous != opened.payload:
            raise _Refusal(f"suggestion {event.suggestion_id!r} was edited from a payload it did not have")
        opened.deferred = False
        if decision == "accept" or decision == "edit":
            if opened.policy is not None and event.by is not None:
                # An edit is its editor's approval of the new payload: approvals of the one before no longer count.
                opened.approvers = (event.by,) if decision == "edit" else (*opened.approvers, event.by)
            if decision == "edit":
                opened.payload = event.payload
                opened.edited = True
            opened.accepted = verdict == "taken"
        elif verdict == "counted":
            return  # a dismissal that is a vote against: the suggestion waits on, for approvals or its deadline
        elif decision == "say":
            opened.state = SUGGESTION.fire(opened.state, "supersede")
            if event.text:
                self.instead = event.text
                self.owed_words = (*self.owed_words, event.text)
        else:
            opened.state = SUGGESTION.fire(opened.state, decision)

    def _approval_refused(self, event: ApprovalRefusedEvent) -> None:
        opened = self._open(event.suggestion_id)
        if not opened.deciding or opened.policy is None:
            raise _Refusal(f"suggestion {event.suggestion_id!r} has no approval to refuse")
        verdicts = {
            opened.verdict(kind, event.by, event.roles, self.now) for kind in _REFUSED_KINDS[event.decision]
        }
        if event.code not in {DECISION_REFUSALS.get(verdict) for verdict in verdicts}:
            raise _Refusal(f"suggestion {event.suggestion_id!r}: its rules do not refuse it ({event.code})")

    def _reminded(self, event: RemindedEvent) -> None:
        opened = self._open(event.suggestion_id)
        opened.state = _REMIND[opened.state, opened.reminder_due(self.now)]
        opened.remind_at = None
        opened.reminded = True

    def _escalated(self, event: EscalatedEvent) -> None:
        opened = self._open(event.suggestion_id)
        if event.to != opened.escalate_to:
            raise _Refusal(
                f"suggestion {event.suggestion_id!r} escalates to {opened.escalate_to!r}, not {event.to!r}"
            )
        opened.state = _ESCALATE[opened.state, opened.escalation_due(self.now)]
        opened.escalate_at = None
        opened.escalated = True

    def _waiting_card(self, suggestion_id: str) -> OpenSuggestion:
        opened = self._open(suggestion_id)
        if not opened.deferred:
            raise _Refusal(f"suggestion {suggestion_id!r} does not wait for a deferred decision")
        return opened

    def _holding(
        self, opened: OpenSuggestion, kind: str, by: str, roles: Collection[str], **assignee: Any
    ) -> None:
        refusal = opened.holding_refusal(kind, by, roles, self.now, **assignee)
        if refusal is not None:
            raise _Refusal(f"suggestion {opened.id!r}: its rules refuse the {kind} ({refusal[0]}: {refusal[1]})")

    def _claimed(self, event: ClaimedEvent) -> None:
        opened = self._waiting_card(event.suggestion_id)
        if not (math.isfinite(event.until) and event.until > self.now):
            raise _Refusal(f"a claim on {event.suggestion_id!r} ends after it is made, not at {event.until!r}")
        self._holding(opened, "claim", event.by, event.roles)
        opened.claimed_by, opened.claimed_until = event.by, event.until

    def _released(self, event: ReleasedEvent) -> None:
        opened = self._waiting_card(event.suggestion_id)
        self._holding(opened, "release", event.by, ())
        opened.claimed_by, opened.claimed_until = None, 0.0

    def _assigned(self, event: AssignedEvent) -> None:
        opened = self._waiting_card(event.suggestion_id)
        if event.person is not None and event.role is not None:
            raise _Refusal(f"suggestion {event.suggestion_id!r} is assigned to a person or a role, not both")
        self._holding(
            opened,
            "assign",
            event.by,
            event.roles,
            person=event.person,
            person_roles=event.person_roles,
            role=event.role,
        )
        opened.assigned_to, opened.assigned_role = event.person, event.role
        if event.person is not None and opened.claimed_by != event.person:
            opened.claimed_by, opened.claimed_until = None, 0.0

    def _approval_waiting(self, event: ApprovalWaitingEvent) -> None:
        opened = self._open(event.suggestion_id)
        policy = opened.policy
        if policy is None or opened.accepted or not opened.deciding or opened.deferred:
            raise _Refusal(f"suggestion {event.suggestion_id!r} waits for no further approval")
        if event.approvers != opened.approvers or event.needed != policy.approvals:
            raise _Refusal(f"suggestion {event.suggestion_id!r} has other approvals than the log says")
        opened.deferred = True

    def _refused(self, event: RefusedEvent) -> None:
        opened = self._open(event.suggestion_id)
        if event.payload != opened.payload:
            raise _Refusal(f"suggestion {event.suggestion_id!r} refuses a payload that is not the one waiting")
        opened.state = SUGGESTION.fire(opened.state, "refuse")
        opened.accepted = False
        opened.issue = Issue(code=event.code, field=event.field, hint=event.hint)
        if event.preview is not None:
            opened.preview = event.preview

    def _action_started(self, event: ActionStartedEvent) -> None:
        opened = self._open(event.suggestion_id)
        _same_proposal(opened, event.action, event.payload, "runs")
        opened.state = _START_RUN[opened.state, opened.accepted, opened.handoff]
        opened.preview = event.preview
        opened.key = event.key

    def _declare(self, event: DeclareEvent) -> None:
        if not event.context_key.startswith(OUTCOME_KEY_PREFIX):
            if self.facts is NO_ENTRIES:
                self.facts = {}
            self.facts[event.context_key] = event.value
        self._place(event)


_APPLY: dict[str, Callable[[ConversationState, Any], None]] = {
    "said": ConversationState._said,
    "resumed": ConversationState._resumed,
    "finished": ConversationState._finished,
    "ended": ConversationState._ended,
    "sent": ConversationState._sent,
    "turn-limit": ConversationState._turn_limit,
    "reply": ConversationState._reply,
    "reply-started": ConversationState._reply_started,
    "no-reply": ConversationState._no_reply,
    "send-failed": ConversationState._send_failed,
    "interrupted": ConversationState._interrupted,
    "handled": ConversationState._handled,
    "outcome": ConversationState._outcome,
    "reply-refused": ConversationState._refused_reply,
    "reply-cut": ConversationState._reply_cut,
    "reply-repeated": ConversationState._reply_repeated,
    "unconfirmed": ConversationState._unconfirmed,
    "ask": ConversationState._ask,
    "answered": ConversationState._answered,
    "deferred": ConversationState._deferred,
    "proposed": ConversationState._proposed,
    "suggestion": ConversationState._suggestion,
    "decided": ConversationState._decided,
    "refused": ConversationState._refused,
    "action-started": ConversationState._action_started,
    "approval-refused": ConversationState._approval_refused,
    "approval-waiting": ConversationState._approval_waiting,
    "reminded": ConversationState._reminded,
    "escalated": ConversationState._escalated,
    "claimed": ConversationState._claimed,
    "released": ConversationState._released,
    "assigned": ConversationState._assigned,
    "flow-moved": ConversationState._flow_moved,
    "declare": ConversationState._declare,
    "inform": ConversationState._place,
    "phatic": ConversationState._place,
    "delegate": ConversationState._place,
    "execute": ConversationState._place,
    "reply-progress": ConversationState._nothing,
}
"""How the fold takes each kind of event (every kind has its own: a test holds them to ``EVENT_TYPES``)."""


def deadline_passed(deadline: float | None, now: float) -> bool:
    """Whether a time to decide that ends at ``deadline`` (``None``: never) has passed at ``now``; the inbox's
    overdue cards are those it says so of (``deadline < now`` in its SQL)."""
    return deadline is not None and now > deadline


def claim_holder(claimed_by: str | None, claimed_until: float | None, now: float) -> str | None:
    """Who holds a claim made by ``claimed_by`` that lasts until ``claimed_until``, at ``now``: a claim holds
    until its time runs out (``None``: nobody holds it)."""
    if claimed_by is None or claimed_until is None or now >= claimed_until:
        return None
    return claimed_by


def admits(restricted_to: Collection[str], roles: Collection[str]) -> bool:
    """Whether a decider holding ``roles`` holds one of the roles a suggestion is restricted to (none: anyone)."""
    return not restricted_to or not frozenset(restricted_to).isdisjoint(roles)


def refusals(
    ended: Iterable[OpenSuggestion], decision: str, by: str | None, roles: Collection[str], now: float
) -> list[tuple[str, str, str]]:
    """The id, code and hint of each of ``ended`` that refuses ``decision`` by ``by``, holding ``roles``, at
    ``now`` (:meth:`OpenSuggestion.refusal`): the core asks this before it records; the fold refuses what it
    names."""
    refused = []
    for each in ended:
        refusal = each.refusal(decision, by, roles, now)
        if refusal is not None:
            refused.append((each.id, *refusal))
    return refused


def deciding_roles(ended: Iterable[OpenSuggestion], roles: Iterable[str]) -> tuple[str, ...]:
    """The decider's ``roles`` as a decision on ``ended`` logs them: sorted, and only when the approval policy
    of one of them names roles."""
    for each in ended:  # a loop, not any() over a generator: it runs for every decision
        if each.policy is not None and each.policy.roles:
            return tuple(sorted(roles))
    return ()


def _recorded_before_triggers(state: str, event: OutcomeEvent, instead: str | None) -> OutcomeTrigger | None:
    """The trigger of an outcome that ends a suggestion in a log written before outcomes recorded it: read from
    its status, the state it ended from and its error code, as those logs always were (the one step that
    upgrades them; ``None`` where no trigger gives the status, which the fold then refuses)."""
    status = event.status
    if state in RUNNING:
        if event.code == "interrupted":
            return "interrupt"
        return "succeed" if status in SUCCEEDED.values() else "fail"
    if status == "superseded":
        if state in DECIDING:
            return "supersede"
        return "overtake" if state == "proposed" and instead is not None else "interrupt"
    if status == "invalid" and state == "proposed":
        return "reject"
    return None


def _same_proposal(opened: OpenSuggestion, action: str, payload: Any, does: str) -> None:
    """Refuse an event that shows or runs another action or payload than the one waiting (proposed, or edited
    since): the payload validated is the one shown and the one run."""
    if action != opened.action:
        raise _Refusal(f"suggestion {opened.id!r} is {opened.action!r}: it {does} no {action!r}")
    if payload != opened.payload or type(payload) is not type(opened.payload):
        raise _Refusal(f"suggestion {opened.id!r} {does} a payload that is not the one waiting for it")


def shown_state(event: SuggestionEvent, state: str = "proposed") -> str:
    """The state the suggestion's machine reviews a suggestion in ``state`` into when ``event`` shows it: waiting
    for the person, cleared to run, or dismissed by a rule."""
    ruled, policy = event.ruled, event.policy is not None
    if ruled is None:
        return _REVIEW[state, not event.mutates, event.handoff, False, False, policy]
    return _REVIEW[state, False, False, ruled.kind == "deny", ruled.kind == "approve", policy]


def _check_ruled(event: SuggestionEvent, ruled: RuleVerdict) -> None:
    """Refuse a rule's verdict no run could have logged: on a suggestion that runs without asking, by no rule, a
    denial without its reason, or a reason or error on a verdict that carries none."""
    if not event.mutates or event.handoff:
        raise _Refusal(f"suggestion {event.id!r} runs without asking: no rule decides whether to ask")
    if not ruled.rule:
        raise _Refusal(f"suggestion {event.id!r} is ruled on by no rule")
    if (ruled.kind == "deny") != bool(ruled.reason.strip()):
        raise _Refusal(f"suggestion {event.id!r}: a rule's denial, and only a denial, gives its reason")
    if ruled.error is not None and ruled.kind != "ask":
        raise _Refusal(f"suggestion {event.id!r}: a rule that failed asks the person; it decides nothing")


def _not_admitted(life: str, event: object) -> str:
    """Why ``event`` cannot stand while the conversation's life is ``life``."""
    kind = getattr(event, "type", None)
    if not isinstance(kind, str) or kind not in EVENT_TYPES:
        return f"unknown event type {kind!r}"
    if type(event) is not EVENT_TYPES[kind]:
        return f"{type(event).__name__} is not the log's {kind!r} event"
    if life in IN_CALL:
        if kind in CARD_HOLDING:
            return f"a {kind!r} happens only between calls"
        return f"a conversation that has ended sends nothing (no {kind!r})"
    return f"a {kind!r} happens only during a call"


#: The kinds of event each life state admits, each with how the fold takes it: between calls only what
#: BETWEEN_CALLS names; during a call anything but CARD_HOLDING, and once the conversation has ended, nothing
#: SILENT. Keyed by the
#: event's class, not its ``type``: ``type`` is a class attribute, which an instance reads through the generic
#: attribute lookup, and one lookup per event both admits it and finds its handler.
ADMITTED: dict[str, dict[type, Callable[[ConversationState, Any], None]]] = {
    life: {
        EVENT_TYPES[kind]: handler
        for kind, handler in _APPLY.items()
        if (
            (kind not in SILENT or life not in ENDED) and kind not in CARD_HOLDING
            if life in IN_CALL
            else kind in BETWEEN_CALLS
        )
    }
    for life in LIFE.states
}


def checked_entry(entry: object, expected_seq: int) -> LogEntry:
    """``entry`` when it can stand at ``expected_seq`` of a log: a :class:`LogEntry` of that seq, a finite time,
    and an event whose every field has its declared type (a word of its field's vocabulary, where the field has
    one); else :class:`LogError`."""
    if not isinstance(entry, LogEntry):
        raise LogError(None, None, f"entry {expected_seq} is a {type(entry).__name__}, not a LogEntry")
    event = entry.event
    kind = getattr(event, "type", None)
    if type(entry.seq) is not int:
        raise LogError(None, kind, f"entry {expected_seq} has seq {entry.seq!r}, not a whole number")
    if entry.seq != expected_seq:
        raise LogError(
            entry.seq, kind, f"expected seq {expected_seq}: a log numbers from 1, with no gap and no repeat"
        )
    if not isinstance(entry.time, (int, float)) or isinstance(entry.time, bool) or not math.isfinite(entry.time):
        raise LogError(entry.seq, kind, f"its time {entry.time!r} is not a finite number")
    if not isinstance(event, msgspec.Struct) or not isinstance(kind, str):
        raise LogError(entry.seq, None, f"{event!r} is not an event")
    try:
        msgspec.convert(msgspec.to_builtins(event), type(event), strict=True)
    except (msgspec.ValidationError, TypeError) as error:
        why = vocabulary_refusal(str(error), kind) or f"a field has the wrong type ({error})"
        raise LogError(entry.seq, kind, why) from None
    return entry


def fold_log(
    entries: Iterable[object],
    state: ConversationState | None = None,
    *,
    first_seq: int = 1,
    flow: Table | None = None,
) -> list[LogEntry]:
    """Check a log (or the part of one that follows ``state``, from ``first_seq``) and fold it into ``state``.

    Returns the checked entries; raises :class:`LogError` naming the first entry that no run of the runtime
    could have written there, and then ``state`` must not be used. ``flow`` is the domain flow's table for a
    fresh state (a given ``state`` has its own).
    """
    folded = ConversationState(flow=flow) if state is None else state
    checked: list[LogEntry] = []
    for offset, raw in enumerate(entries):
        entry = checked_entry(raw, first_seq + offset)
        folded.now = entry.time
        try:
            folded.apply(entry.event)
        except (_Refusal, IllegalTransition) as error:
            raise LogError(entry.seq, entry.event.type, str(error)) from None
        checked.append(entry)
    return checked
