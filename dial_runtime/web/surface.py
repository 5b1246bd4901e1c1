"""The web surface's routes: AG-UI runs (a conversation driven through the public API by one request), the
snapshot and change streams of a conversation, the actions it may propose, and the decision pages a signed link
opens (the card as the panel shows it, and the decision it posts, logged ``via="link"``)."""

from __future__ import annotations

import functools
import inspect
import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import anyio
import msgspec
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    MessagesSnapshotEvent,
    ResumeEntry,
    RunAgentInput,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
)
from pydantic import ValidationError
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response

from .. import (
    Accept,
    AlreadyDecided,
    Ask,
    Conversation,
    ConversationBusy,
    DialError,
    Dismiss,
    Edit,
    LogEntry,
    PayloadChanged,
    Say,
    Suggestion,
    TurnResult,
)
from ..agents.prompt import vocabulary
from ..decisions.announce import Announcer, marks
from ..decisions.deadlines import (
    DeadlineScheduler,
)
from ..decisions.links import (
    DECISIONS,
    Keyring,
    LinkClaims,
    LinkRefused,
    MemoryUsedTokens,
    UsedTokens,
    token_from_url,
)
from ..decisions.notify import Notification
from ..driver.built import AgentOnFirstUse, DeferringHuman, DomainOnFirstUse
from ..ports import StorePort
from ..runtime.events import Event, InformDeltaEvent
from ..views.person import Card, Notice, Projection, Question, project
from .decide import LINK_VIA, REFUSAL_STATUS, decision_page
from .guards import LOCAL_PRINCIPAL, THREAD_ID, json_error, read_body
from .mapping import EventMapper, interrupt_for, interrupt_id, item_view, messages_of
from .streams import DETACH_MAX_BODY, ChangeStream, Detaches, EventStream, Runs, Stop, _Refused

logger = logging.getLogger("dial_runtime.web")

#: Builds the agent for one run of a conversation from its id and its stored log (each run gets its own agent,
#: rebuilt from the log: a chat agent's history, a scripted agent's position).
AgentFactory = Callable[[str, Sequence[LogEntry]], Any]

#: Builds the domain of one run of a conversation from its id and its stored log, so each conversation has domain
#: state of its own, rebuilt from its log (``NotesDomain.from_log``). It is told apart from a domain by having no
#: ``run`` method.
DomainFactory = Callable[[str, Sequence[LogEntry]], Any]

#: The conversation id a domain factory is given, with an empty log, for the domain that describes every
#: conversation's (its actions, their documentation, its flow): no conversation has it.
DESCRIBING_ID = ""

#: The surface a decision taken through this app is logged as having come through (``DecidedEvent.via``).
VIA = "web"


STATIC = resources.files("dial_runtime.web") / "static"


class _NoAgent:
    """The agent of a conversation only read (a snapshot): it is never sent anything."""

    def send(self, message: str) -> str:
        raise RuntimeError("a snapshot sends nothing to the agent")


@dataclass(frozen=True)
class _Step:
    """One call a run makes on the conversation."""

    call: Callable[[Conversation], Awaitable[TurnResult]]


@dataclass
class _Plan:
    """What a run does: its calls, in order, and the resume entries it leaves out (each with why)."""

    steps: list[_Step] = field(default_factory=list)
    ignored: list[dict[str, str]] = field(default_factory=list)


@dataclass
class Settings:
    store: StorePort
    domain: Any  # every conversation's, or (with a factory) the one describing them
    domain_factory: DomainFactory | None
    agent: AgentFactory
    auth: Callable[[Request], Any] | None
    can_decide: Callable[[str, Suggestion | Ask], bool] | None
    can_view: Callable[[str, str], bool] | None
    origins: frozenset[str]
    max_body: int
    max_text: int
    heartbeat: float
    abort_grace: float
    options: dict[str, Any] = field(default_factory=dict)
    deadlines: DeadlineScheduler | None = None
    links: Keyring | None = None
    used_tokens: UsedTokens = field(default_factory=MemoryUsedTokens)
    roles: Callable[[str], Any] | None = None
    panel: bool = True
    public_url: str | None = None
    announcer: Announcer | None = None  # with notifications
    detaches: Detaches | None = None  # where a detach for another worker's run is noted (the store's database)


async def panel_page(request: Request) -> Response:
    return FileResponse(str(STATIC / "index.html"), headers={"Cache-Control": "no-cache"})


class _LinkRefusal(Exception):
    """A decision link refused: answered ``{"error", "reason", "card"?}`` with the reason's HTTP status (the page,
    for ``GET /decide``). ``card`` is the card's view, given only once the caller is known to be the link's."""

    def __init__(
        self, reason: str, message: str, *, card: dict[str, Any] | None = None, thread: str | None = None
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.card = card
        self.thread = thread  # the conversation, named once the caller may see it

    @classmethod
    def of(
        cls, refused: LinkRefused, *, card: dict[str, Any] | None = None, thread: str | None = None
    ) -> _LinkRefusal:
        """The refusal :mod:`dial_runtime.links` gave, in its own words."""
        words = str(refused).removeprefix(f"decision link refused ({refused.reason}): ")
        return cls(refused.reason, words, card=card, thread=thread)

    @property
    def status(self) -> int:
        return REFUSAL_STATUS.get(self.reason, 400)

    def body(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"error": str(self), "reason": self.reason}
        if self.card is not None:
            shown["card"] = self.card
        return shown

    def response(self) -> JSONResponse:
        headers = {"Cache-Control": "no-store"}
        if self.reason == "busy":
            headers["Retry-After"] = "1"
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


@dataclass(frozen=True)
class _Linked:
    """A decision link checked against its conversation as stored: whose it is, the card it names as it waits,
    the log's projection it was checked on, and the roles the caller holds."""

    claims: LinkClaims
    card: Card
    seen: Projection
    roles: frozenset[str]


#: What a decision page is sent with: never kept (it carries a token), never a referrer, never in a frame.
_PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
}

#: The keys of a decision's JSON body.
_DECISION_KEYS = frozenset({"token", "decision", "payload"})


class WebSurface:
    """The handlers, sharing the settings."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runs = Runs()

    async def _principal(self, request: Request) -> str | None:
        auth = self.settings.auth
        if auth is None:
            return LOCAL_PRINCIPAL
        principal = auth(request)
        if inspect.isawaitable(principal):
            principal = await principal
        return None if principal is None else str(principal)

    def _may_view(self, principal: str, conversation_id: str) -> bool:
        can_view = self.settings.can_view
        return can_view is None or bool(can_view(principal, conversation_id))

    def _may_decide(self, principal: str, subject: Suggestion | Ask) -> bool:
        can_decide = self.settings.can_decide
        return can_decide is None or bool(can_decide(principal, subject))

    async def actions(self, request: Request) -> Response:
        """``GET /actions``: ``{"actions": [{"name", "description"?, "destructive"?}]}``, the domain's actions in
        its order, described as the agent's system prompt describes them (the domain's ``vocabulary``,
        ``describe(action)`` or the spec's ``description``); ``destructive`` only when true."""
        if await self._principal(request) is None:
            return json_error(401, "not signed in")
        listed: list[dict[str, Any]] = []
        for entry in vocabulary(self.settings.domain):
            described: dict[str, Any] = {"name": entry.name}
            if entry.description:
                described["description"] = entry.description
            if entry.spec.destructive:
                described["destructive"] = True
            listed.append(described)
        return JSONResponse({"actions": listed})

    async def conversations(self, request: Request) -> Response:
        """``GET /conversations``: the ids of the conversations the caller may see."""
        principal = await self._principal(request)
        if principal is None:
            return json_error(401, "not signed in")
        ids = await self.settings.store.conversations()
        return JSONResponse({"conversations": [each for each in ids if self._may_view(principal, each)]})

    async def changes(self, request: Request) -> Response | ChangeStream:
        """``GET /conversations/{id}/changes``: a server-sent event stream that says when the conversation's log
        grows, whoever made it grow (another tab, another worker): a page listening takes a snapshot then."""
        principal = await self._principal(request)
        if principal is None:
            return json_error(401, "not signed in")
        thread = request.path_params["thread"]
        if not THREAD_ID.fullmatch(thread):
            return json_error(400, "the conversation id must be 1 to 128 letters, digits or ._:@-")
        if not self._may_view(principal, thread):
            return json_error(403, "you may not see this conversation")
        if not callable(getattr(self.settings.store, "watch", None)):
            return json_error(501, "this store cannot be watched (it has no watch method)")
        return ChangeStream(self.settings.store, thread, self.settings.heartbeat)

    async def agui(self, request: Request) -> Response | EventStream:
        """``POST /agui``: one AG-UI run, answered as a server-sent event stream."""
        principal = await self._principal(request)
        if principal is None:
            return json_error(401, "not signed in")
        body = await read_body(request, self.settings.max_body)
        if body is None:
            return json_error(413, f"the request body is over {self.settings.max_body} bytes")
        try:
            run = RunAgentInput.model_validate_json(body)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            return json_error(422, f"not an AG-UI RunAgentInput: {where}: {first['msg']}")
        if not THREAD_ID.fullmatch(run.thread_id):
            return json_error(400, "threadId must be 1 to 128 letters, digits or ._:@-")
        if not self._may_view(principal, run.thread_id):
            return json_error(403, "you may not see this conversation")
        words = new_words(run)
        if words is not None and len(words) > self.settings.max_text:
            return json_error(413, f"the message is over {self.settings.max_text} characters")
        outbox: list[Notification] = []
        return EventStream(
            lambda emit, stop: self._run(run, principal, words, emit, stop, outbox),
            run,
            principal,
            runs=self.runs,
            grace=self.settings.abort_grace,
            detaches=self.settings.detaches,
            after=lambda: self._deliver(outbox),
        )

    async def detach(self, request: Request) -> Response:
        """``POST /agui/detach`` (JSON ``{"threadId", "runId"}``): the run goes on without its client, whose
        request closing then stops nothing. Only the principal who started the run may say so, for a run of this
        worker that has not ended: anything else is refused (404 for a run unknown here, or another's) and
        changes nothing."""
        principal = await self._principal(request)
        if principal is None:
            return json_error(401, "not signed in")
        body = await read_body(request, DETACH_MAX_BODY)
        if body is None:
            return json_error(413, f"the request body is over {DETACH_MAX_BODY} bytes")
        try:
            named = msgspec.json.decode(body)
        except ValueError:
            named = None
        thread = named.get("threadId") if isinstance(named, dict) else None
        run_id = named.get("runId") if isinstance(named, dict) else None
        if not isinstance(thread, str) or not isinstance(run_id, str):
            return json_error(422, 'give {"threadId": ..., "runId": ...} as JSON')
        if not THREAD_ID.fullmatch(thread):
            return json_error(400, "threadId must be 1 to 128 letters, digits or ._:@-")
        if not self._may_view(principal, thread):
            return json_error(403, "you may not see this conversation")
        stop = self.runs.find(thread, run_id)
        if stop is None and self.settings.detaches is not None:  # another worker's run, maybe: noted for it
            try:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self.settings.detaches.note, thread, run_id, principal)
            except Exception as error:
                logger.error("a detach of %s could not be noted: %s", thread, type(error).__name__)
                return json_error(503, "the detach could not be noted; the run stops when its client has gone")
            logger.info("run %s of %s: a detach noted for the worker serving it", run_id[:64], thread)
            return JSONResponse({"detached": True, "noted": True}, status_code=202)
        if stop is None or stop.principal != principal:
            return json_error(404, "no run of yours by that id is running here")
        stop.detached.set()
        logger.info("run %s of %s goes on without its client", run_id[:64], thread)
        return JSONResponse({"detached": True}, status_code=202)

    async def _roles(self, principal: str) -> frozenset[str]:
        """The roles ``principal`` holds (``create_app``'s ``roles``; none without it)."""
        roles = self.settings.roles
        if roles is None:
            return frozenset()
        held = roles(principal)
        if inspect.isawaitable(held):
            held = await held
        if isinstance(held, str):
            raise TypeError("create_app: roles(principal) returns a collection of roles, not one string")
        return frozenset(str(role) for role in held)

    async def _check_link(self, token: str, principal: str, decision: str | None) -> _Linked:
        """The link ``token`` checked for ``principal`` making ``decision`` (``None``: the page, any decision the
        link allows) on its card as the store holds it now; nothing is marked used. Raises :class:`_LinkRefusal`:
        first what the token says (its form, signature, validity, whose it is), then what the caller may see and
        decide, then the card's state (``already-decided`` once it ended, ``payload-changed``, ``replayed``)."""
        keyring = self.settings.links
        assert keyring is not None
        try:
            claims = keyring.authenticate(token)
        except LinkRefused as refused:
            raise _LinkRefusal.of(refused) from None
        roles = await self._roles(principal)
        if not claims.may_be_used_by(principal, roles):
            raise _LinkRefusal("wrong-person", f"the link is not for {principal[:60]!r}")
        thread, suggestion_id = claims.conversation_id, claims.suggestion_id
        if not THREAD_ID.fullmatch(thread):
            raise _LinkRefusal("malformed", "the link names a conversation id this server does not serve")
        if not self._may_view(principal, thread):
            raise _LinkRefusal("forbidden", "you may not see this conversation")
        entries = await self.settings.store.read(thread)
        seen = project(entries)
        card = seen.card(suggestion_id)
        if card is None:
            raise _LinkRefusal("unknown-suggestion", f"no proposal {suggestion_id[:60]!r} in this conversation")
        view = item_view(card)
        chosen = decision if decision is not None else min(claims.decisions, key=DECISIONS.index)
        waiting = card.waiting
        checked = functools.partial(
            keyring.verify,
            token,
            conversation_id=thread,
            suggestion_id=suggestion_id,
            waiting_digest=card.digest if waiting else claims.digest,
            principal=principal,
            principal_roles=roles,
            decision=chosen,
            used=self.settings.used_tokens,
            consume=False,
        )
        try:
            await anyio.to_thread.run_sync(checked)  # the used tokens may be a database's
        except LinkRefused as refused:
            raise _LinkRefusal.of(refused, card=view, thread=thread) from None
        if not waiting:
            ended = seen.already_decided(suggestion_id)
            words = str(ended) if ended is not None else f"{suggestion_id[:60]!r} ended ({card.status})"
            raise _LinkRefusal("already-decided", words, card=view, thread=thread)
        domain = self._domain(thread)
        held = Conversation(agent=_NoAgent(), domain=domain, human=DeferringHuman(), log=entries)
        if isinstance(domain, DomainOnFirstUse):
            domain.conversation = held
        subject = next((each for each in held.pending if each.id == suggestion_id), None)
        if isinstance(subject, Suggestion) and not self._may_decide(principal, subject):
            raise _LinkRefusal(
                "forbidden", f"{principal[:60]} may not decide {suggestion_id[:60]!r}", card=view, thread=thread
            )
        return _Linked(claims=claims, card=card, seen=seen, roles=roles)

    def _open_url(self, thread: str) -> str | None:
        """The panel's page of conversation ``thread``, relative to the decision page (none without a panel)."""
        if not self.settings.panel:
            return None
        return "./?" + urlencode({"thread": thread})

    async def decide_page(self, request: Request) -> Response:
        """``GET /decide?token=...``: the decision page of a link, the card it names and the decisions it allows
        (or why it cannot be used, with the HTTP status of the refusal). Decides nothing, marks nothing used."""
        data: dict[str, Any] = {"token": None, "decisions": [], "card": None}
        try:
            token = token_from_url(request.url.query)
        except LinkRefused as refused:
            return self._page(_LinkRefusal.of(refused), data)
        data["token"] = token
        principal = await self._principal(request)
        if principal is None:
            return self._page(_LinkRefusal("not-signed-in", "not signed in"), data)
        try:
            linked = await self._check_link(token, principal, None)
        except _LinkRefusal as refusal:
            return self._page(refusal, data)
        claims = linked.claims
        data.update(
            decisions=[each for each in DECISIONS if each in claims.decisions],
            card=item_view(linked.card),
            expires_at=claims.expires_at,
            open=self._open_url(claims.conversation_id),
        )
        return HTMLResponse(decision_page(data), headers=_PAGE_HEADERS)

    def _page(self, refusal: _LinkRefusal, data: dict[str, Any]) -> Response:
        """The decision page saying why the link cannot be used."""
        shown = {**data, **refusal.body(), "decisions": []}
        if refusal.thread is not None:
            shown["open"] = self._open_url(refusal.thread)
        return HTMLResponse(decision_page(shown), status_code=refusal.status, headers=_PAGE_HEADERS)

    async def decide(self, request: Request) -> Response:
        """``POST /decide`` (JSON ``{"token", "decision", "payload"?}``): the decision a link allows, taken once;
        the card as it is after it, or the refusal (see ``create_app``)."""
        principal = await self._principal(request)
        if principal is None:
            return _LinkRefusal("not-signed-in", "not signed in").response()
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            return _LinkRefusal("not-json", "a decision is sent as application/json").response()
        body = await read_body(request, self.settings.max_body)
        if body is None:
            return _LinkRefusal("too-large", f"the request body is over {self.settings.max_body} bytes").response()
        try:
            named = msgspec.json.decode(body)
        except (ValueError, RecursionError):
            named = None
        if not isinstance(named, dict) or not named.keys() <= _DECISION_KEYS:
            return _LinkRefusal("malformed", 'give {"token", "decision", "payload"?} as JSON').response()
        token, decision = named.get("token"), named.get("decision")
        if not isinstance(token, str) or decision not in DECISIONS:
            return _LinkRefusal("malformed", f"give the token and a decision of {', '.join(DECISIONS)}").response()
        if (decision == "edit") != ("payload" in named):
            return _LinkRefusal("malformed", "an edit, and only an edit, gives the payload to run").response()
        try:
            linked = await self._check_link(token, principal, decision)
            return await self._decide_by_link(linked, principal, decision, named.get("payload"))
        except _LinkRefusal as refusal:
            return refusal.response()

    async def _decide_by_link(self, linked: _Linked, principal: str, decision: str, payload: Any) -> Response:
        """Take the decision a checked link allows: ``decide(..., shown=<the token's digest>, via="link",
        link=<the token's id>)`` under the conversation's lock, where the log refuses a second decision through
        the same link however the requests race; the token is also marked used once the decision is in the log,
        which refuses a replay before any card is read."""
        settings = self.settings
        claims = linked.claims
        thread, suggestion_id = claims.conversation_id, claims.suggestion_id
        chosen: Accept | Dismiss | Edit = (
            Accept() if decision == "accept" else Dismiss() if decision == "dismiss" else Edit(payload)
        )
        agent = AgentOnFirstUse(settings.agent, thread)
        domain = self._domain(thread)
        conversation: Conversation | None = None
        before = len(linked.card.decisions)
        status = "failed"
        try:
            try:
                conversation = await Conversation.open(
                    settings.store, thread, agent=agent, domain=domain, human=DeferringHuman(), **settings.options
                )
                agent.conversation = conversation
                if isinstance(domain, DomainOnFirstUse):
                    domain.conversation = conversation
                subject = next((each for each in conversation.pending if each.id == suggestion_id), None)
                if isinstance(subject, Suggestion) and not self._may_decide(principal, subject):
                    raise _LinkRefusal("forbidden", f"{principal[:60]} may not decide {suggestion_id[:60]!r}")
                result = await conversation.decide(
                    suggestion_id,
                    chosen,
                    by=principal,
                    shown=claims.digest,
                    via=LINK_VIA,
                    roles=linked.roles,
                    link=claims.token_id,
                )
                status = result.status
            finally:
                with anyio.CancelScope(shield=True):
                    await agent.aclose()
        except ConversationBusy:
            raise _LinkRefusal("busy", "another call is driving this conversation; try again") from None
        except AlreadyDecided as error:
            raise _LinkRefusal(
                "already-decided", str(error), card=self._card_now(conversation, suggestion_id)
            ) from None
        except PayloadChanged:
            raise _LinkRefusal(
                "payload-changed",
                "the payload changed after the link was made: show it again",
                card=self._card_now(conversation, suggestion_id),
            ) from None
        except LinkRefused as refused:  # the link decided this card already, through another request
            raise _LinkRefusal.of(refused, card=self._card_now(conversation, suggestion_id)) from None
        except _LinkRefusal:
            raise
        except DialError as error:
            if not self._taken(conversation, suggestion_id, before):
                raise _LinkRefusal("not-waiting", str(error)[:300]) from None
            logger.error("the call after a link's decision in %s failed: %s", thread, type(error).__name__)
        except Exception as error:
            if not self._taken(conversation, suggestion_id, before):
                raise
            logger.error("the call after a link's decision in %s failed: %s", thread, type(error).__name__)
        assert conversation is not None
        try:
            with anyio.CancelScope(shield=True):  # the decision is on the log: the token is used, whoever hangs up
                await anyio.to_thread.run_sync(settings.used_tokens.mark_used, claims.token_id, claims.expires_at)
        except Exception as error:  # the decision stands: a card that ended, or a person counted, refuses a replay
            logger.error("the used link token of %s could not be kept: %s", thread, type(error).__name__)
        await self._schedule(thread, conversation)
        card = project(conversation.log).card(suggestion_id)
        assert card is not None
        answer: dict[str, Any] = {"decision": decision, "status": status, "card": item_view(card)}
        outbox: list[Notification] = []
        if settings.announcer is not None:
            with anyio.CancelScope(shield=True):
                outbox = await settings.announcer.announcements(
                    thread, marks(linked.seen.items), project(conversation.log).items
                )
        keyring = settings.links
        now = math.floor(time.time())
        refused_edit = decision == "edit" and card.waiting and card.digest != claims.digest
        if refused_edit and keyring is not None and keyring.current is not None and now < claims.expires_at:
            follow = LinkClaims(
                conversation_id=thread,
                suggestion_id=suggestion_id,
                digest=card.digest,
                decider=claims.decider,
                roles=claims.roles,
                decisions=claims.decisions,
                issued_at=now,
                expires_at=claims.expires_at,
                token_id=secrets.token_urlsafe(16),
            )
            answer["token"] = keyring.sign(follow)
        later = BackgroundTask(self._deliver, outbox) if outbox else None
        return JSONResponse(answer, headers={"Cache-Control": "no-store"}, background=later)

    @staticmethod
    def _card_now(conversation: Conversation | None, suggestion_id: str) -> dict[str, Any] | None:
        """The card's view as the conversation holds it now (``None`` before it was opened)."""
        card = None if conversation is None else project(conversation.log).card(suggestion_id)
        return None if card is None else item_view(card)

    @staticmethod
    def _taken(conversation: Conversation | None, suggestion_id: str, before: int) -> bool:
        """Whether the conversation's log holds a decision on the card beyond the ``before`` it had: a call that
        failed after the decision was recorded (the agent failed to answer) still took it."""
        card = None if conversation is None else project(conversation.log).card(suggestion_id)
        return card is not None and len(card.decisions) > before and card.decisions[-1].via == LINK_VIA

    async def _run(
        self,
        run: RunAgentInput,
        principal: str,
        words: str | None,
        emit: Callable[[BaseEvent], None],
        stop: Stop,
        outbox: list[Notification],
    ) -> None:
        """Drive the conversation for one run, emitting its AG-UI events (RUN_STARTED is already out); ``stop``
        is told the conversation once it is open, so a client that aborts the run stops it in words. What the
        run changed that people are told of goes into ``outbox``, however the run ends.

        A run whose agent never answered (no reply in time, or the message could not be sent: refused, 401, ...)
        ends ``RUN_ERROR`` with code ``no-reply`` and the log's own words for it, which a reload shows too."""
        settings = self.settings
        thread = run.thread_id
        entries = await settings.store.read(thread)
        if words is None and not run.resume:
            await self._snapshot(run, principal, entries, emit)
            return
        count = 0

        def message_id() -> str:
            nonlocal count
            count += 1
            return f"{run.run_id}:{count}"

        mapper = EventMapper(message_ids=message_id, history=entries)
        announcer = settings.announcer
        before = marks(mapper.projection.items) if announcer is not None else None
        opened: list[Conversation] = []

        def on_event(event: Event | InformDeltaEvent) -> None:
            """Show what the log added since (the person's answers, the payload that ran, ... with the event
            shown), or the text still arriving; what happens while the conversation opens is shown once open."""
            fresh = mapper.map(event) if isinstance(event, InformDeltaEvent) else catch_up(event)
            for mapped in fresh:
                emit(mapped)

        def catch_up(through: object = None) -> list[BaseEvent]:
            return mapper.catch_up(opened[0].log, through=through) if opened else []

        agent = AgentOnFirstUse(settings.agent, thread)
        domain = self._domain(thread)
        opened_at = entries[-1].seq if entries else 0
        last: TurnResult | None = None
        try:
            try:
                conversation = await Conversation.open(
                    settings.store,
                    thread,
                    agent=agent,
                    domain=domain,
                    human=DeferringHuman(),
                    on_event=on_event,
                    **settings.options,
                )
                agent.conversation = conversation
                if isinstance(domain, DomainOnFirstUse):
                    domain.conversation = conversation
                stop.conversation = conversation
                opened.append(conversation)
                async with conversation.holding():  # the plan is checked and carried out with nobody between
                    opened_at = conversation.log[-1].seq if conversation.log else 0
                    for mapped in catch_up():
                        emit(mapped)
                    roles = await self._roles(principal) if run.resume or words is not None else frozenset[str]()
                    plan = self._plan(conversation, mapper.projection, run.resume or [], words, principal, roles)
                    for ignored in plan.ignored:
                        emit(CustomEvent(name="dial.resume-entry-ignored", value=ignored))
                    for step in plan.steps:
                        last = await step.call(conversation)
            finally:
                for mapped in [*catch_up(), *mapper.close()]:
                    emit(mapped)
                with anyio.CancelScope(shield=True):
                    await agent.aclose()
                    if announcer is not None and before is not None:
                        outbox += await announcer.announcements(thread, before, mapper.projection.items)
        except ConversationBusy:
            raise _Refused("busy", "another run is driving this conversation; try again") from None
        except AlreadyDecided as error:  # what the plan decides ended before its call came (the call says why)
            raise _already(error) from None
        except PayloadChanged as error:
            raise _Refused("digest-mismatch", f"{error}; reload") from None
        except Exception:
            unsent = _unanswered(mapper.projection, after=opened_at, what="send-failed")
            if unsent is None:
                raise
            raise _Refused("no-reply", unsent.text) from None
        if last is not None and last.status == "no-reply":
            late = _unanswered(mapper.projection, after=opened_at, what="no-reply")
            assert late is not None, "a call that ends no-reply logs why"
            raise _Refused("no-reply", late.text)
        await self._schedule(thread, conversation)
        log = conversation.log
        emit(self._finished(run, principal, conversation, mapper.projection, stored=log[-1].seq if log else 0))

    async def _deliver(self, outbox: Sequence[Notification]) -> None:
        """Send what ``outbox`` holds (once a response is complete)."""
        if self.settings.announcer is not None:
            await self.settings.announcer.deliver(outbox)

    async def _schedule(self, thread: str, conversation: Conversation) -> None:
        """Hand the deadlines of what waits to the scheduler; a scheduler that fails is logged, and the run goes
        on (the deadline still fires when the conversation is next opened)."""
        scheduler = self.settings.deadlines
        waits = conversation.deadlines
        if scheduler is None or not waits:
            return
        try:
            with anyio.fail_after(5):
                await scheduler.schedule(thread, waits)
        except Exception:
            logger.exception("scheduling the deadlines of conversation %r failed", thread)

    async def _snapshot(
        self, run: RunAgentInput, principal: str, entries: Sequence[LogEntry], emit: Callable[[BaseEvent], None]
    ) -> None:
        """A run with no words and no resume: ``MESSAGES_SNAPSHOT`` and ``RUN_FINISHED`` with what waits, read
        from the stored log, in memory (nothing is written).

        A call the log leaves open is either running (a run of this worker has the conversation open, or another
        worker holds its lock) or was left by a worker that died. A running one is shown as the store has it,
        and ``RUN_FINISHED.metadata.running`` is ``true``: nothing can be decided until it ends, and the change
        stream says when it does. A dead worker's is shown as the next run will find it (a started action ended
        as the domain's ``reconcile`` tells, else failed ``interrupted``; what waited waiting). Telling the two
        apart takes the lock for a moment, only when no run of this worker drives the conversation, so a run that
        starts in that moment is refused ``busy``."""
        domain = self._domain(run.thread_id)
        held = Conversation(agent=_NoAgent(), domain=domain, human=DeferringHuman(), log=entries)
        if isinstance(domain, DomainOnFirstUse):
            domain.conversation = held
        running = held.in_call and await self._driven(run.thread_id)
        if not running:
            await held.recover()
        shown = project(entries if running else held.log)
        emit(MessagesSnapshotEvent(messages=messages_of(shown)))
        stored = entries[-1].seq if entries else 0
        emit(self._finished(run, principal, held, shown, stored=stored, running=running))

    def _domain(self, thread: str) -> Any:
        """The domain of a run of conversation ``thread``: the one domain, or the factory's, built on first use."""
        factory = self.settings.domain_factory
        if factory is None:
            return self.settings.domain
        return DomainOnFirstUse(factory, thread, self.settings.domain)

    async def _driven(self, thread: str) -> bool:
        """Whether a run, in this worker or another, drives the conversation now."""
        if self.runs.driving(thread):
            return True
        try:
            async with self.settings.store.lock(thread):
                return False
        except ConversationBusy:
            return True

    def _finished(
        self,
        run: RunAgentInput,
        principal: str,
        conversation: Conversation,
        seen: Projection,
        *,
        stored: int,
        running: bool = False,
    ) -> RunFinishedEvent:
        """The run's last event; ``metadata.seq`` is the stored log's last seq the run saw (or wrote), which the
        change stream's events are compared with: a page that has shown seq N needs no snapshot for a change at
        N. ``result`` is the conversation's result once its flow reached a final state (``None`` before). A
        snapshot of a conversation whose turn is running says so (``metadata.running``), and offers nothing to
        decide until the turn ends."""
        marks: dict[str, Any] = {"seq": stored}
        if running:
            marks["running"] = True
            return RunFinishedEvent(
                thread_id=run.thread_id, run_id=run.run_id, outcome=RunFinishedSuccessOutcome(), metadata=marks
            )
        pending = conversation.pending
        if not pending:
            return RunFinishedEvent(
                thread_id=run.thread_id,
                run_id=run.run_id,
                outcome=RunFinishedSuccessOutcome(),
                result=conversation.result,
                metadata=marks,
            )
        interrupts = [
            interrupt_for(each, refusals=seen.refusals(each.id), can_decide=self._may_decide(principal, each))
            for each in pending
        ]
        return RunFinishedEvent(
            thread_id=run.thread_id,
            run_id=run.run_id,
            outcome=RunFinishedInterruptOutcome(interrupts=interrupts),
            metadata=marks,
        )

    def _plan(
        self,
        conversation: Conversation,
        projection: Projection,
        resume: Sequence[ResumeEntry],
        words: str | None,
        principal: str,
        roles: frozenset[str] = frozenset(),
    ) -> _Plan:
        """The calls a run makes, every resume entry checked first against the conversation as it was opened
        (``projection``: its log's projection then): its shape, who may decide it, the digest of the payload it
        was shown. A refusal raises before any call, so a resume is taken whole or not at all.

        AG-UI's coverage rule has a resume answer every open interrupt, and a person decides one card of several:
        a ``cancelled`` entry answers nothing in this run, so what it names stays waiting, in the log, under the
        same interrupt id (the run ends with it in its interrupt outcome again, and every tab and device shows it
        still open). With new words, cancelling is saying something else: the words supersede whatever still
        waits, which someone who may not decide all of it cannot do (``awaiting-reviewer``).

        A ``cancelled`` entry naming an interrupt that no longer waits (decided elsewhere, replaced) is left out
        with a warning rather than refused: it decides nothing, and a client that kept the interrupts of a run
        that then failed can move on by cancelling them."""
        pending = conversation.pending
        waiting = {interrupt_id(each.id, projection.refusals(each.id)): each for each in pending}
        plan = _Plan()
        cancelled: list[Suggestion] = []
        resolved: set[str] = set()
        seen: set[str] = set()
        for entry in resume:
            if entry.interrupt_id in seen:
                raise _Refused("invalid-resume", f"interrupt {entry.interrupt_id!r} is answered twice")
            seen.add(entry.interrupt_id)
            subject = waiting.get(entry.interrupt_id)
            if subject is None and entry.status == "cancelled":
                why = _unknown(entry.interrupt_id, pending, projection)
                plan.ignored.append({"interruptId": entry.interrupt_id, "code": why.code, "message": str(why)})
                continue
            if subject is None:
                raise _unknown(entry.interrupt_id, pending, projection)
            if entry.status == "cancelled":
                if isinstance(subject, Suggestion):
                    cancelled.append(subject)
                continue
            if not self._may_decide(principal, subject):
                raise _Refused("forbidden", f"{principal} may not decide {subject.id!r}")
            plan.steps.append(_resolution(entry, subject, principal, roles))
            resolved.add(subject.id)
        if words is not None:
            barred = [
                each.id for each in pending if each.id not in resolved and not self._may_decide(principal, each)
            ]
            if barred:
                names = ", ".join(repr(each) for each in barred)
                raise _Refused(
                    "awaiting-reviewer",
                    f"{principal} may not decide {names}, which new words would supersede; "
                    "say it once that is decided",
                )
            if cancelled:
                first = cancelled[0].id
                plan.steps.append(
                    _Step(
                        lambda conversation: conversation.decide(
                            first, Say(words), by=principal, via=VIA, roles=roles
                        )
                    )
                )
            else:
                plan.steps.append(_Step(lambda conversation: conversation.say(words, by=principal, roles=roles)))
        return plan


def _resolution(
    entry: ResumeEntry, subject: Suggestion | Ask, principal: str, roles: frozenset[str] = frozenset()
) -> _Step:
    """The call a ``resolved`` resume entry makes; ``_Refused`` for a payload it cannot take."""
    payload = entry.payload
    if not isinstance(payload, dict):
        raise _Refused("invalid-resume", f"interrupt {entry.interrupt_id!r}: the payload must be an object")
    if isinstance(subject, Ask):
        answer = payload.get("answer")
        if not isinstance(answer, str):
            raise _Refused(
                "invalid-resume", f"interrupt {entry.interrupt_id!r}: give the answer as {{answer: text}}"
            )
        values = [option.value for option in subject.options]
        if values and answer not in values:
            raise _Refused(
                "invalid-resume", f"interrupt {entry.interrupt_id!r}: the answer must be one of {values}"
            )
        ask_id = subject.id
        return _Step(lambda conversation: conversation.answer(ask_id, answer, by=principal))
    approved = payload.get("approved")
    if not isinstance(approved, bool):
        raise _Refused("invalid-resume", f"interrupt {entry.interrupt_id!r}: give {{approved: true|false}}")
    digest = payload.get("digest")
    if digest is not None and not isinstance(digest, str):
        raise _Refused("invalid-resume", f"interrupt {entry.interrupt_id!r}: the digest must be text")
    if digest is not None and digest != subject.digest:
        raise _Refused(
            "digest-mismatch", f"{PayloadChanged(subject.id, shown=digest, waiting=subject.digest)}; reload"
        )
    decision: Accept | Edit | Dismiss
    if not approved:
        decision = Dismiss()
    elif "editedArgs" in payload:
        decision = Edit(payload["editedArgs"])
    else:
        decision = Accept()
    suggestion_id = subject.id
    return _Step(
        lambda conversation: conversation.decide(
            suggestion_id, decision, by=principal, shown=digest, via=VIA, roles=roles
        )
    )


def _unknown(interrupt: str, waiting: Iterable[Suggestion | Ask], seen: Projection) -> _Refused:
    """Why a resume names an interrupt that does not wait: replaced after a refused edit, decided elsewhere (by
    whom), ended otherwise, or never asked."""
    subject = _subject_of(interrupt, seen)
    if any(each.id == subject for each in waiting):
        return _Refused("stale-interrupt", f"interrupt {interrupt!r} was replaced after a refused edit; reload")
    ended = None if subject is None else seen.already_decided(subject)
    if ended is not None:
        return _already(ended)
    return _Refused("unknown-interrupt", f"no interrupt {interrupt!r} waits in this conversation")


def _subject_of(interrupt: str, seen: Projection) -> str | None:
    """The suggestion or ask that ``interrupt`` put to the person, now or before one of its edits was refused
    (:func:`~dial_runtime.web.mapping.interrupt_id` gives no two of them one id); ``None`` for one never asked."""
    for item in seen.items:
        if isinstance(item, (Card, Question)) and interrupt in {
            interrupt_id(item.id, count) for count in range(seen.refusals(item.id) + 1)
        }:
            return item.id
    return None


def _unanswered(seen: Projection, *, after: int, what: str) -> Notice | None:
    """The last notice of kind ``what`` (``no-reply``, ``send-failed``) after seq ``after``: the log's words for
    an agent that never answered."""
    for item in reversed(seen.items):
        if isinstance(item, Notice) and item.what == what and (item.seq or 0) > after:
            return item
    return None


def _already(error: AlreadyDecided) -> _Refused:
    """The ``already-decided`` refusal, saying by whom and how."""
    return _Refused("already-decided", f"{error}; reload")


def new_words(run: RunAgentInput) -> str | None:
    """The person's new words: the last message when it is the user's and not one a snapshot named (``said-N``).

    An AG-UI client sends the whole thread each run; only a user message at its end is new.
    """
    if not run.messages:
        return None
    last = run.messages[-1]
    if last.role != "user" or last.id.startswith("said-"):
        return None
    content = last.content
    if isinstance(content, str):
        return content
    return "".join(getattr(part, "text", "") for part in content)
