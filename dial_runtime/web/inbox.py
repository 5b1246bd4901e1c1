"""The web surface's inbox: every card waiting across the store's conversations for the person asking, read from
the read model the store keeps (:class:`~dial_runtime.decisions.inbox.Inbox`), kept live by a change stream, and
decided several at a time (:func:`~dial_runtime.decisions.inbox.decide_each`), each decision checked and logged on
its own, ``via="inbox"``.

``GET /inbox`` is the page; ``GET /inbox/cards``, ``GET /inbox/changes``, ``POST /inbox/decide`` and ``POST
/inbox/claim``, ``/release`` and ``/assign`` (:func:`~dial_runtime.decisions.inbox.hold_card`) are what it (or any
client) reads and sends. The principal is ``auth``'s, its roles ``roles(principal)``'s; ``can_view`` hides
the conversations a person may not see, ``can_decide`` refuses, card by card, what they may not decide.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

import msgspec
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response

from ..decisions.deadlines import conversation_opener
from ..decisions.inbox import (
    BulkChoice,
    BulkOutcome,
    CardHolding,
    HoldingOutcome,
    Inbox,
    decide_each,
    hold_card,
    keeps_inbox,
)
from ..views.inbox import WaitingCard
from .guards import THREAD_ID, json_error, read_body
from .mapping import payload_fields, pretty_json
from .streams import InboxChangeStream

if TYPE_CHECKING:
    from ..driver.conversation import Conversation
    from .surface import WebSurface

__all__ = ["INBOX_VIA", "InboxRoutes", "card_view"]

#: The surface a decision taken from the inbox is logged as having come through (``DecidedEvent.via``).
INBOX_VIA = "inbox"

#: The filters ``GET /inbox/cards`` takes.
FILTERS = frozenset({"overdue", "action", "conversation", "limit"})

#: How many cards ``GET /inbox/cards`` lists at most, and when no ``limit`` is given.
MOST_CARDS = 1000
DEFAULT_CARDS = 200

#: How many decisions one ``POST /inbox/decide`` may carry.
MOST_DECISIONS = 200

#: The keys of one decision of ``POST /inbox/decide``.
_DECISION_KEYS = frozenset({"threadId", "id", "decision", "digest"})

#: The keys ``POST /inbox/claim``, ``/release`` and ``/assign`` take, beyond ``threadId`` and ``id``.
_HOLDING_KEYS = {"claim": frozenset({"minutes"}), "release": frozenset(), "assign": frozenset({"person", "role"})}

#: The longest claim ``POST /inbox/claim`` makes, in minutes (a working day).
MOST_CLAIM_MINUTES = 480

#: The HTTP status of each refusal of a claim, a release or an assignment.
_HOLDING_STATUS = {"not-waiting": 404, "forbidden": 403, "busy": 503}


class _Refusal(Exception):
    """A request refused whole, before anything is decided: its status and one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def card_view(card: WaitingCard, now: float) -> dict[str, Any]:
    """A waiting card as the inbox sends it: its fields (``conversation`` as ``threadId``), the digest a decision
    names as shown, whether it is overdue at ``now``, its payload as exact JSON text and field by field."""
    view: dict[str, Any] = msgspec.to_builtins(card)
    view["threadId"] = view.pop("conversation")
    view["digest"] = card.digest
    view["overdue"] = card.overdue(now)
    view["payload_json"] = pretty_json(card.payload)
    view["payload_fields"] = payload_fields(card.payload)
    return view


def _outcome_view(outcome: BulkOutcome) -> dict[str, Any]:
    view: dict[str, Any] = {"threadId": outcome.conversation, "id": outcome.id, "decision": outcome.decision}
    if outcome.refused is None:
        view["status"] = outcome.status
    else:
        view.update(refused=outcome.refused, reason=outcome.reason)
    return view


class InboxRoutes:
    """The inbox's handlers, over the web surface's settings and checks."""

    def __init__(self, surface: WebSurface) -> None:
        self.surface = surface
        settings = surface.settings
        opener = conversation_opener(
            settings.store,
            agent=settings.agent,
            domain=settings.domain_factory or settings.domain,
            describing=settings.domain,
            **settings.options,
        )
        if settings.announcer is not None:
            opener = settings.announcer.announcing(opener, settings.store)
        self._open: Callable[[str], Awaitable[Conversation]] = opener

    def _inbox(self) -> Inbox | None:
        store = self.surface.settings.store
        return Inbox(store) if keeps_inbox(store) else None

    async def page(self, request: Request) -> Response:
        """``GET /inbox``: the inbox page."""
        from .surface import STATIC

        return FileResponse(str(STATIC / "inbox.html"), headers={"Cache-Control": "no-cache"})

    async def cards(self, request: Request) -> Response:
        """``GET /inbox/cards?overdue=&action=&conversation=&limit=``: ``{"now", "you", "cards": [...]}``, the
        cards the caller (holding their roles) may decide now, in conversations they may see, the nearest deadline
        first (none last), then the longest waiting; ``now`` is the server's time, which countdowns are measured
        from, and ``you`` the caller as the server names them (whose claims the page offers to release).
        An unknown filter, a repeated one, or a limit that is no whole number from 1 to :data:`MOST_CARDS` is
        refused (400)."""
        surface = self.surface
        principal = await surface._principal(request)
        if principal is None:
            return json_error(401, "not signed in")
        inbox = self._inbox()
        if inbox is None:
            return json_error(501, "this store keeps no inbox (the in-process, SQLite and PostgreSQL stores do)")
        try:
            filters = _filters(request)
        except _Refusal as refusal:
            return json_error(refusal.status, str(refusal))
        roles = await surface._roles(principal)
        limit = filters.pop("limit")
        every = surface.settings.can_view is not None  # the cards of hidden conversations are left out here
        found = await inbox.waiting(decider=principal, roles=roles, limit=None if every else limit, **filters)
        visible = [card for card in found if surface._may_view(principal, card.conversation)][:limit]
        now = time.time()
        return JSONResponse(
            {"now": now, "you": principal, "cards": [card_view(card, now) for card in visible]},
            headers={"Cache-Control": "no-store"},
        )

    async def changes(self, request: Request) -> Response | InboxChangeStream:
        """``GET /inbox/changes``: a server-sent event stream saying which conversations the caller may see
        changed (:class:`~dial_runtime.web.streams.InboxChangeStream`); the page reads its cards again then."""
        surface = self.surface
        principal = await surface._principal(request)
        if principal is None:
            return json_error(401, "not signed in")
        if not callable(getattr(surface.settings.store, "watch", None)):
            return json_error(501, "this store cannot be watched (it has no watch method)")
        return InboxChangeStream(
            surface.settings.store,
            surface.settings.heartbeat,
            lambda conversation_id: surface._may_view(principal, conversation_id),
        )

    async def decide(self, request: Request) -> Response:
        """``POST /inbox/decide`` (JSON ``{"decisions": [{"threadId", "id", "decision", "digest"}, ...]}``, at most
        :data:`MOST_DECISIONS`, each ``accept`` or ``dismiss`` with the digest of the card the person was shown):
        ``{"results": [...]}``, one per decision in their order, ``{"threadId", "id", "decision", "status"}`` when
        it was taken, ``{..., "refused", "reason"}`` when it was not (``already-decided``, ``payload-changed``,
        ``not-waiting``, ``approval-refused``, ``forbidden``, ``busy``), nothing changed for it. A body that is not
        such a list is refused whole (400, 413, 415), nothing decided."""
        surface = self.surface
        principal = await surface._principal(request)
        if principal is None:
            return json_error(401, "not signed in")
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            return json_error(415, "decisions are sent as application/json")
        body = await read_body(request, surface.settings.max_body)
        if body is None:
            return json_error(413, f"the request body is over {surface.settings.max_body} bytes")
        try:
            choices = _choices(body)
        except _Refusal as refusal:
            return json_error(refusal.status, str(refusal))
        seen = [choice for choice in choices if surface._may_view(principal, choice.conversation)]
        roles = await surface._roles(principal)
        opened: dict[str, Conversation] = {}

        async def open_conversation(conversation_id: str) -> Conversation:
            opened[conversation_id] = await self._open(conversation_id)
            return opened[conversation_id]

        taken = await decide_each(
            seen,
            open_conversation=open_conversation,
            by=principal,
            roles=roles,
            via=INBOX_VIA,
            may_decide=lambda subject: surface._may_decide(principal, subject),
        )
        for conversation_id, conversation in opened.items():
            await surface._schedule(conversation_id, conversation)
        outcomes = iter(taken)
        results = [
            _outcome_view(next(outcomes))
            if surface._may_view(principal, choice.conversation)
            else {
                "threadId": choice.conversation,
                "id": choice.id,
                "decision": choice.decision,
                "refused": "forbidden",
                "reason": "you may not see this conversation",
            }
            for choice in choices
        ]
        return JSONResponse({"results": results}, headers={"Cache-Control": "no-store"})

    async def claim(self, request: Request) -> Response:
        """``POST /inbox/claim``: see :meth:`hold`."""
        return await self.hold(request, "claim")

    async def release(self, request: Request) -> Response:
        """``POST /inbox/release``: see :meth:`hold`."""
        return await self.hold(request, "release")

    async def assign(self, request: Request) -> Response:
        """``POST /inbox/assign``: see :meth:`hold`."""
        return await self.hold(request, "assign")

    async def hold(self, request: Request, kind: Literal["claim", "release", "assign"]) -> Response:
        """``POST /inbox/claim`` (JSON ``{"threadId", "id", "minutes"?}``: 30 unless told, at most
        :data:`MOST_CLAIM_MINUTES`), ``POST /inbox/release`` (``{"threadId", "id"}``) and ``POST /inbox/assign``
        (``{"threadId", "id", "person"? | "role"?}``, neither: to nobody), by the signed-in person: ``{"threadId",
        "id", "claim": true, "until"}`` (and so on) when it was made; else one line in ``error`` and a code in
        ``refused`` (the card's rules, 409; ``already-decided``, 409; ``not-waiting``, 404; ``forbidden``, 403;
        ``busy``, 503). A person assigned holds the roles ``roles(person)`` gives and must pass ``can_decide``, as
        the signed-in person must to claim or assign."""
        surface = self.surface
        principal = await surface._principal(request)
        if principal is None:
            return json_error(401, "not signed in")
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return json_error(415, f"a {kind} is sent as application/json")
        body = await read_body(request, surface.settings.max_body)
        if body is None:
            return json_error(413, f"the request body is over {surface.settings.max_body} bytes")
        try:
            holding = _holding(kind, body)
        except _Refusal as refusal:
            return json_error(refusal.status, str(refusal))
        if not surface._may_view(principal, holding.conversation):
            return json_error(403, "you may not see this conversation")
        person_roles = await surface._roles(holding.person) if holding.person is not None else ()
        outcome = await hold_card(
            holding,
            open_conversation=self._open,
            by=principal,
            roles=await surface._roles(principal),
            person_roles=person_roles,
            may_decide=surface._may_decide,
        )
        status = 200 if outcome.refused is None else _HOLDING_STATUS.get(outcome.refused, 409)
        return JSONResponse(
            _holding_view(holding, outcome), status_code=status, headers={"Cache-Control": "no-store"}
        )


def _holding(kind: Literal["claim", "release", "assign"], body: bytes) -> CardHolding:
    """The claim, release or assignment a ``POST /inbox/{kind}`` body asks for (:class:`_Refusal` for a body that
    is not one)."""
    try:
        named = msgspec.json.decode(body)
    except (ValueError, RecursionError):
        named = None
    extra = _HOLDING_KEYS[kind]
    if (
        not isinstance(named, dict)
        or not {"threadId", "id"} <= named.keys() <= {"threadId", "id", *extra}
        or not all(isinstance(named[key], str) for key in ("threadId", "id"))
        or not THREAD_ID.fullmatch(named["threadId"])
    ):
        more = f" and {' or '.join(sorted(extra))}" if extra else ""
        raise _Refusal(400, f"give threadId (1 to 128 letters, digits or ._:@-) and id{more} as JSON")
    if kind == "claim":
        minutes = named.get("minutes", 30)
        if type(minutes) is not int or not 1 <= minutes <= MOST_CLAIM_MINUTES:
            raise _Refusal(400, f"minutes is a whole number from 1 to {MOST_CLAIM_MINUTES}")
        return CardHolding(conversation=named["threadId"], id=named["id"], kind="claim", seconds=minutes * 60.0)
    person, role = named.get("person"), named.get("role")
    if person is not None and role is not None:
        raise _Refusal(400, "assign a card to a person or to a role, not both")
    for key, value in (("person", person), ("role", role)):
        if value is not None and (not isinstance(value, str) or not value.strip() or len(value) > 128):
            raise _Refusal(400, f"{key} is a name of 1 to 128 characters")
    return CardHolding(
        conversation=named["threadId"],
        id=named["id"],
        kind=kind,
        person=person.strip() if person else None,
        role=role.strip() if role else None,
    )


def _holding_view(holding: CardHolding, outcome: HoldingOutcome) -> dict[str, Any]:
    view: dict[str, Any] = {"threadId": holding.conversation, "id": holding.id, holding.kind: True}
    if outcome.refused is None:
        if outcome.until is not None:
            view["until"] = outcome.until
        return view
    view.update(error=f"{holding.id!r}: {outcome.reason}", refused=outcome.refused, reason=outcome.reason)
    if outcome.holder is not None:
        view.update(holder=outcome.holder, until=outcome.until)
    return view


def _filters(request: Request) -> dict[str, Any]:
    """The filters of ``GET /inbox/cards``, checked (:class:`_Refusal` for one that is unknown, repeated or
    malformed)."""
    params = request.query_params
    for name in params:
        if name not in FILTERS:
            raise _Refusal(400, f"unknown filter {name[:40]!r}: give {', '.join(sorted(FILTERS))}")
        if len(params.getlist(name)) > 1:
            raise _Refusal(400, f"the filter {name!r} is given twice")
    overdue = params.get("overdue", "false").lower()
    if overdue not in ("true", "false", "1", "0"):
        raise _Refusal(400, "overdue is true or false")
    limit_text = params.get("limit", str(DEFAULT_CARDS))
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= MOST_CARDS:
        raise _Refusal(400, f"limit is a whole number from 1 to {MOST_CARDS}")
    return {
        "overdue": overdue in ("true", "1"),
        "action": params.get("action") or None,
        "conversation": params.get("conversation") or None,
        "limit": int(limit_text),
    }


def _choices(body: bytes) -> list[BulkChoice]:
    """The decisions of a ``POST /inbox/decide`` body (:class:`_Refusal` for a body that is not a list of them,
    or names a card twice)."""
    try:
        named = msgspec.json.decode(body)
    except (ValueError, RecursionError):
        named = None
    decisions = named.get("decisions") if isinstance(named, dict) and named.keys() == {"decisions"} else None
    if not isinstance(decisions, list) or not decisions:
        raise _Refusal(400, 'give {"decisions": [{"threadId", "id", "decision", "digest"}, ...]} as JSON')
    if len(decisions) > MOST_DECISIONS:
        raise _Refusal(400, f"at most {MOST_DECISIONS} decisions at once, not {len(decisions)}")
    choices: list[BulkChoice] = []
    seen: set[tuple[str, str]] = set()
    for number, decision in enumerate(decisions, start=1):
        if (
            not isinstance(decision, dict)
            or decision.keys() != _DECISION_KEYS
            or not all(isinstance(decision[key], str) for key in _DECISION_KEYS)
            or decision["decision"] not in ("accept", "dismiss")
            or not THREAD_ID.fullmatch(decision["threadId"])
        ):
            raise _Refusal(
                400,
                f"decision {number}: give threadId (1 to 128 letters, digits or ._:@-), id, digest and a decision "
                "of accept or dismiss, as text",
            )
        identity = (decision["threadId"], decision["id"])
        if identity in seen:
            raise _Refusal(400, f"decision {number}: {decision['id'][:60]!r} is decided twice in one request")
        seen.add(identity)
        choices.append(
            BulkChoice(
                conversation=decision["threadId"],
                id=decision["id"],
                decision=decision["decision"],
                digest=decision["digest"],
            )
        )
    return choices
