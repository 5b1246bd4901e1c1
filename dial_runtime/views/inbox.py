"""What waits for a person across conversations: each suggestion waiting for a decision and each question waiting
for an answer, as the inbox lists it (:class:`WaitingCard`), and the read model a store keeps of them.

:func:`waiting_cards` reads them from a conversation's folded state, the same state every rule is checked on, so
the inbox never lists a card the conversation would not take a decision on, nor misses one it would.

The read model: a store that keeps it (:class:`InboxStorePort`: the in-process, SQLite and PostgreSQL stores, in
the table ``dial_waiting``) is handed a conversation's cards with each append that changes them
(``append(..., waiting=rows)``, :func:`stored_rows`) and writes them in the append's own transaction, so a
conversation's rows are always those of its log as stored, never ahead and never behind: a copy of the logs'
truth for reading many conversations at once, never a second truth (``dial-runtime inbox --rebuild`` writes them
again from the logs). A row (:data:`WaitingRow`) holds what a :class:`WaitingQuery` finds and sorts by, and the
card as JSON text. No I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any, Literal, Protocol

import msgspec

from ..language.records import Option
from ..ports import StorePort
from ..runtime.events import LogEntry
from ..runtime.records import Issue, RuleVerdict, payload_digest
from ..runtime.state import ConversationState, OpenSuggestion, admits, claim_holder, deadline_passed
from .person import why_asked

__all__ = [
    "InboxStorePort",
    "WaitingCard",
    "WaitingQuery",
    "WaitingRow",
    "card_from_row",
    "matches",
    "members",
    "members_of",
    "sort_key",
    "stored_rows",
    "waiting_cards",
]


class WaitingCard(msgspec.Struct, frozen=True, kw_only=True):
    """A suggestion (``kind="suggestion"``) waiting for a decision, or a question (``"question"``) waiting for an
    answer, in conversation ``conversation``. ``text`` is the agent's words for it (a question's question),
    ``preview`` the domain's words for it as it was shown (kept after an edit the domain refused), ``payload`` what
    waits to run, ``options`` a question's choices. After the domain refused the payload waiting (an edit, or an
    accept the domain no longer takes), ``issue`` says why, and ``edit_preview`` is the domain's words for a
    refused edit: a surface offers to edit it again or to dismiss it, not to accept it as it is. ``asked_by`` is
    whose words the agent answered when it asked (when the log says), ``since`` when it began waiting, ``deadline``
    when the time to decide ends (seconds since the epoch). ``remind_at`` and ``escalate_at`` are when it is
    reminded and escalated, until it has been (``reminded``, ``escalated_to``). ``roles`` are the roles whose
    holders may decide it, as its approval policy says (and, once it escalated, those it escalated to; empty:
    anyone), ``approvals_needed`` how many people must approve it under its policy (0: no policy, one decision of
    anyone) and ``approvers`` who has so far. ``claimed_by`` is who claimed it last, until ``claimed_until``
    (:meth:`holder` says whether the claim still holds); ``assigned_to`` the person or ``assigned_role`` the role
    it is assigned to. ``ruled`` is what a rule for whether to ask said of it, when one had an opinion (it asked,
    it failed, or its approval was not enough for the policy), and ``why_asked`` why a person decides it in words.
    """

    conversation: str
    id: str
    kind: Literal["suggestion", "question"] = "suggestion"
    action: str = ""
    text: str = ""
    preview: str = ""
    payload: Any = None
    destructive: bool = False
    options: tuple[Option, ...] = ()
    asked_by: str | None = None
    since: float = 0.0
    deadline: float | None = None
    remind_at: float | None = None
    reminded: bool = False
    escalate_at: float | None = None
    escalated_to: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    approvals_needed: int = 0
    approvers: tuple[str, ...] = ()
    claimed_by: str | None = None
    claimed_until: float | None = None
    assigned_to: str | None = None
    assigned_role: str | None = None
    issue: Issue | None = None
    edit_preview: str | None = None
    ruled: RuleVerdict | None = None
    why_asked: str = ""

    def holder(self, now: float) -> str | None:
        """Who holds a claim on it at ``now`` (``None``: nobody, or the claim's time ran out)."""
        return claim_holder(self.claimed_by, self.claimed_until, now)

    @property
    def digest(self) -> str | None:
        """The digest of the action and payload waiting (what a decision names as shown); ``None`` for a
        question."""
        return payload_digest(self.action, self.payload) if self.kind == "suggestion" else None

    def overdue(self, now: float) -> bool:
        """Whether its deadline has passed at ``now`` (it expires the next time its conversation is touched)."""
        return deadline_passed(self.deadline, now)

    def open_to(self, principal: str | None, roles: Collection[str]) -> bool:
        """Whether ``principal`` holding ``roles`` may decide it now: anyone when its policy names no roles, else
        a holder of one of its roles; never someone who approved it already (their approval is counted)."""
        return admits(self.roles, roles) and (principal is None or principal not in self.approvers)


def _suggestion_card(conversation_id: str, opened: OpenSuggestion) -> WaitingCard:
    policy = opened.policy
    return WaitingCard(
        conversation=conversation_id,
        id=opened.id,
        action=opened.action,
        text=opened.text,
        preview=opened.shown_preview,
        payload=opened.payload,
        destructive=opened.destructive,
        asked_by=opened.speaker,
        since=opened.waiting_since,
        deadline=opened.deadline,
        remind_at=opened.remind_at,
        reminded=opened.reminded,
        escalate_at=opened.escalate_at,
        escalated_to=opened.escalate_to if opened.escalated else (),
        roles=opened.restricted_to,
        approvals_needed=policy.approvals if policy is not None else 0,
        approvers=opened.approvers,
        claimed_by=opened.claimed_by,
        claimed_until=opened.claimed_until if opened.claimed_by is not None else None,
        assigned_to=opened.assigned_to,
        assigned_role=opened.assigned_role,
        issue=opened.issue,
        edit_preview=opened.preview if opened.issue is not None and opened.edited else None,
        ruled=opened.ruled,
        why_asked=why_asked(opened.ruled, policy),
    )


def waiting_cards(conversation_id: str, state: ConversationState) -> tuple[WaitingCard, ...]:
    """What waits for a person in the conversation whose folded state is ``state``: its deferred suggestions,
    then its deferred questions, each in the order it was asked. A suggestion being decided right now (in a
    call that holds the conversation) is not listed: nobody else can decide it meanwhile."""
    cards = [
        _suggestion_card(conversation_id, opened) for opened in state.open_suggestions.values() if opened.deferred
    ]
    for ask_id, ask in state.open_asks.items():
        cards.append(
            WaitingCard(
                conversation=conversation_id,
                id=ask_id,
                kind="question",
                text=ask.text,
                options=ask.options,
                asked_by=state.speaker,
                since=state.asks_waiting_since.get(ask_id, 0.0),
            )
        )
    return tuple(cards)


#: One waiting card as a store keeps it: subject id, action, since, deadline, roles and approvers (each a
#: :func:`members` text), the card (JSON text).
WaitingRow = tuple[str, str, float, float | None, str, str, str]


class WaitingQuery(msgspec.Struct, frozen=True, kw_only=True):
    """Which waiting rows to find: of one ``conversation``, of one ``action``, whose deadline passed before
    ``overdue_at``; ``roles``: only those that holders of one of these roles may decide, or that anyone may
    (``None``: any row); ``not_approved_by``: not those this person approved already. At most ``limit`` rows
    (``None``: all)."""

    conversation: str | None = None
    action: str | None = None
    overdue_at: float | None = None
    roles: tuple[str, ...] | None = None
    not_approved_by: str | None = None
    limit: int | None = None


class InboxStorePort(StorePort, Protocol):
    """A store that keeps the inbox's read model beside its logs."""

    async def append(
        self,
        conversation_id: str,
        entries: Sequence[LogEntry],
        *,
        expected_seq: int,
        waiting: Sequence[WaitingRow] | None = None,
    ) -> None:
        """Append as :meth:`StorePort.append` does; ``waiting``, when given, becomes the conversation's waiting
        rows in the same transaction (``None``: they stay as they are)."""
        ...

    async def waiting(self, query: WaitingQuery) -> list[tuple[str, str]]:
        """The conversation id and card text of each row ``query`` finds, by deadline (none last), then since."""
        ...

    async def keep_waiting(self, conversation_id: str, rows: Sequence[WaitingRow], *, at_seq: int) -> bool:
        """Make ``rows`` the conversation's waiting rows iff its log ends at ``at_seq`` (whether it did)."""
        ...

    async def waiting_conversations(self) -> list[str]:
        """The ids of the conversations with waiting rows, sorted."""
        ...


def members(values: Sequence[str]) -> str:
    """Names as a column of the read model keeps them, so that a search for a text finds one exactly: each a JSON
    string, each followed by a comma, all after a comma (``,"ops","dba",``); ``""`` for none. Inside a JSON string
    a quote is always escaped, so ``,"`` only ever begins a name and ``",`` only ever ends one."""
    if not values:
        return ""
    return "," + "".join(msgspec.json.encode(value).decode() + "," for value in values)


def members_of(text: str) -> list[str]:
    """The names :func:`members` wrote."""
    return json.loads("[" + text[1:-1] + "]") if text else []


_ENCODER = msgspec.json.Encoder()
_CARD = msgspec.json.Decoder(WaitingCard)


def stored_rows(cards: Sequence[WaitingCard]) -> list[WaitingRow]:
    """The rows a store keeps for ``cards``: the id, action, since and deadline it sorts and filters by, the roles
    and approvers (matched by the decider asking), and the card as JSON text."""
    return [
        (
            card.id,
            card.action,
            card.since,
            card.deadline,
            members(card.roles),
            members(card.approvers),
            _ENCODER.encode(card).decode(),
        )
        for card in cards
    ]


def card_from_row(text: str) -> WaitingCard:
    """The card a stored row's JSON text holds."""
    return _CARD.decode(text)


def matches(query: WaitingQuery, conversation_id: str, row: WaitingRow) -> bool:
    """Whether :func:`query_sql` finds ``row`` of ``conversation_id`` (for a store that keeps rows in memory)."""
    _, action, _, deadline, roles, approvers, _ = row
    if query.conversation is not None and conversation_id != query.conversation:
        return False
    if query.action is not None and action != query.action:
        return False
    if query.overdue_at is not None and (deadline is None or deadline >= query.overdue_at):
        return False
    if query.roles is not None and roles and not set(members_of(roles)).intersection(query.roles):
        return False
    return query.not_approved_by is None or query.not_approved_by not in members_of(approvers)


def sort_key(conversation_id: str, row: WaitingRow) -> tuple[bool, float, float, str, str]:
    """Where :func:`query_sql` sorts ``row`` of ``conversation_id``."""
    subject_id, _, since, deadline, _, _, _ = row
    return (deadline is None, deadline or 0.0, since, conversation_id, subject_id)
