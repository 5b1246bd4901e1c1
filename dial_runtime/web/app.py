"""The web surface: an ASGI application (Starlette) that hosts many durable conversations on one store and speaks
AG-UI over server-sent events, and serves the ``<dial-chat>`` panel.

Every run drives a conversation through the public API only (``Conversation.open``, ``say``, ``decide``,
``answer``, ``pending``, ``log``): the person is a human that defers every decision and answer, so a run that needs
the person ends ``awaiting`` and its pending suggestions and asks become AG-UI interrupts; the next run's
``resume`` entries become ``decide`` and ``answer`` calls, decided by the principal ``auth`` returned.

A resume is checked whole before any call. Under AG-UI's coverage rule it answers every open interrupt; a card the
person does not decide in this run is ``cancelled``, which leaves it waiting in the log (and so on every tab and
device) under the same interrupt id; with new words, cancelled cards are superseded. A client that closes a run's
request (AG-UI's abort) stops the run after a short grace, and the log says who stopped it; a page that goes away
(a reload) says first that its run should go on without it (``POST /agui/detach``), and the run ends in the log.

With a keyring (``create_app(links=...)``), a card can also be decided from a signed link (``/decide``: a page
that shows the card as the panel does, and the decision it posts, logged ``via="link"``), and with
``notifications`` people are told when a card waits for them (with their links) and when it is decided.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import logging
import math
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal, Protocol
from urllib.parse import urlencode

import anyio
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    MessagesSnapshotEvent,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
)
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
    open_store,
)
from ..agents.prompt import vocabulary
from ..decisions.announce import Announcer, marks
from ..decisions.deadlines import (
    DeadlineScheduler,
    LocalDeadlines,
    PostgresDeadlines,
    conversation_opener,
    waiting,
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
from ..decisions.notify import Notification, Notifications
from ..driver.built import AgentOnFirstUse, DeferringHuman, DomainOnFirstUse
from ..ports import StorePort
from ..runtime.events import Event, InformDeltaEvent
from ..stores.postgres import PostgresStore
from ..views.person import Card, Notice, Projection, Question, project
from .decide import LINK_VIA, REFUSAL_STATUS, decide_url, decision_page
from .mapping import EventMapper, encode_sse, interrupt_for, interrupt_id, item_view, messages_of

__all__ = ["LOOPBACK_HOSTS", "AgentFactory", "DomainFactory", "create_app", "scripted_agents"]

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
_DESCRIBING_ID = ""

#: The surface a decision taken through this app is logged as having come through (``DecidedEvent.via``).
VIA = "web"

#: The names a server on this machine is reached by, which ``create_app``'s ``allowed_hosts`` defaults to.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


_THREAD_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
_STATIC = resources.files("dial_runtime.web") / "static"


class _Refused(Exception):
    """A run that cannot be taken: it ends with ``RUN_ERROR`` carrying ``code``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


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


class _Detaches(Protocol):
    """Where detaches meant for another worker are kept (:mod:`~dial_runtime.stores.shared`)."""

    def note(self, conversation_id: str, run_id: str, principal: str) -> None: ...

    def noted(self, conversation_id: str, run_id: str, principal: str) -> bool: ...


@dataclass
class _Settings:
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
    detaches: _Detaches | None = None  # where a detach for another worker's run is noted (the store's database)


def create_app(
    *,
    store: StorePort | str,
    domain: Any | DomainFactory,
    agent: AgentFactory,
    auth: Callable[[Request], Any] | None = None,
    can_decide: Callable[[str, Suggestion | Ask], bool] | None = None,
    can_view: Callable[[str, str], bool] | None = None,
    allowed_origins: Iterable[str] = (),
    allowed_hosts: Iterable[str] = LOOPBACK_HOSTS,
    max_body: int = 1 << 20,
    max_text: int = 64 << 10,
    panel: bool = True,
    timeout: float | None = 90.0,
    reply_timeout: float | None = 300.0,
    idle_timeout: float | None = 30.0,
    max_turns: int = 8,
    decide_timeout: float | None = None,
    heartbeat: float = 15.0,
    abort_grace: float = 1.5,
    deadlines: DeadlineScheduler | Literal["auto"] | None = "auto",
    links: Keyring | None = None,
    used_tokens: UsedTokens | None = None,
    roles: Callable[[str], Iterable[str] | Awaitable[Iterable[str]]] | None = None,
    public_url: str | None = None,
    notifications: Notifications | None = None,
    recipients: Callable[[str, Card], Sequence[str] | Awaitable[Sequence[str]]] | None = None,
) -> Starlette:
    """The ASGI application: ``POST /agui`` (AG-UI runs), ``POST /agui/detach``, ``GET /actions`` (the domain's
    actions, which the panel's empty state names), ``GET /conversations``, ``GET
    /conversations/{id}/changes`` (a server-sent event each time a conversation's log grows, in any worker; a
    comment every ``heartbeat`` seconds while it does not), the panel at ``/``, and, with ``links``, ``GET`` and
    ``POST /decide`` (decision links, below).

    ``store`` is a :class:`StorePort` or its URL (one store holds every conversation; PostgreSQL when several
    workers share it). ``domain`` serves every conversation; or, a domain factory (a callable with no ``run``:
    :data:`DomainFactory`), ``domain(conversation_id, log)`` builds the domain of one run as the agent's is built,
    inside its first call (under the conversation's lock, from its log as stored), so each conversation has state
    of its own, rebuilt the same by a restarted server or another worker; what describes them all (``GET
    /actions``, the flow) is a new conversation's, built once here as ``domain("", [])`` (an id no conversation
    has). A run that asks the domain nothing (a snapshot) builds none. ``agent(conversation_id, log)`` builds the
    agent of one run. ``auth(request)`` (plain or ``async``) returns the caller's principal, or ``None`` to refuse
    the request (401); it is what decisions are logged ``by``, never a value the client sends. Without ``auth``
    every caller is ``"local"``: bind such a server to 127.0.0.1. ``can_decide(principal, suggestion_or_ask)``
    says who may decide what (default: anyone who may view); ``can_view(principal, conversation_id)`` who may see
    a conversation (default: everyone).

    Every request (the panel and its files too) must name in its ``Host`` one of ``allowed_hosts``, the names the
    server is reached by: ``name`` (any port), ``name:port``, ``*.domain`` (its subdomains, any port) or ``*``
    (any host: only behind a proxy that checks it). The default is the loopback names, ``localhost``,
    ``127.0.0.1`` and ``[::1]``: a page on another domain that resolves to this machine (DNS rebinding) is refused
    (400), as it would otherwise count as the server's own origin. A request whose ``Origin`` is neither the
    server's own nor in ``allowed_origins`` is refused (403); an allowed origin's CORS preflight is answered and
    its responses carry the CORS headers (credentials allowed). A body over ``max_body`` bytes (413) and words
    over ``max_text`` characters are refused. Every refusal and error is JSON, ``{"error": "..."}`` (404, 405 and
    500 too), never a traceback.

    A client that closes a run's request (``HttpAgent.abortRun()``, the panel's Stop) stops the run
    ``abort_grace`` seconds later, logged as ``cancelled by <principal>``, unless ``POST /agui/detach`` (JSON
    ``{"threadId", "runId"}``, from the principal who started the run, as the panel sends it with
    ``navigator.sendBeacon`` when its page goes away) said the run should go on without its client: it then ends
    in the log, and a snapshot taken meanwhile says a turn is running. A detach that reaches another worker than
    the run's is noted in the store's database (SQLite, PostgreSQL: :mod:`~dial_runtime.stores.shared`) and
    answered 202 ``{"detached": true, "noted": true}``; the run's worker reads it once the grace has passed, and
    lets the run go on only for the run's own principal. With the in-process store a worker knows only its own
    runs, and a detach for another is 404. ``timeout``, ``reply_timeout``, ``idle_timeout``, ``max_turns`` and
    ``decide_timeout`` are each conversation's (see :class:`~dial_runtime.Conversation`).

    ``deadlines`` fires the deadlines of what waits with nobody watching (see :mod:`dial_runtime.deadlines`):
    each run that ends with suggestions waiting schedules them. ``"auto"``: on a PostgreSQL store, Procrastinate
    jobs in its database, fired by a worker this application runs (on asyncio, as under uvicorn) and by any
    ``run_worker`` process; on another store, a timer in this process, given what waits when the application
    starts. They run in the application's lifespan (an ASGI server that runs no lifespan fires none: deadlines then
    fire when their conversation is next opened). ``None``: no scheduler; or a :class:`DeadlineScheduler` of your
    own, whose ``schedule`` is called.

    ``links``, a :class:`~dial_runtime.links.Keyring`, serves decision links (:mod:`dial_runtime.web.linking`,
    whose :func:`~dial_runtime.web.linking.decision_links` issues them for a waiting card): ``GET
    /decide?token=...`` is a page, in the panel's look, with the one card the token names, rendered by the panel's
    own renderer, and only the decisions the token allows; opening it decides nothing and marks nothing used (mail
    scanners open links), and it is sent ``Cache-Control: no-store``, ``Referrer-Policy: no-referrer`` and a policy
    that keeps it out of frames. ``POST /decide`` (JSON ``{"token", "decision", "payload"?}``: ``accept``,
    ``dismiss``, or ``edit`` with the payload to run) takes the decision: the token is verified against the card
    waiting now (its conversation, suggestion, payload digest, expiry, the decisions it allows), and its decider,
    or one of its roles, must be the caller's principal from ``auth`` (holding the roles ``roles(principal)``
    returns, plain or ``async``; none by default: the same roles go with every decision the principal makes, in the
    panel too, for an action's approval policy). Without ``auth`` every caller is ``"local"``, so a link is then
    issued for the decider ``"local"``, or for a role ``roles("local")`` returns. ``can_view`` and ``can_decide``
    apply as to any decision: a link lets its holder decide from elsewhere, never decide what they may not. The
    decision is ``decide(..., by=principal, shown=<the token's digest>, via="link")``, checked again under the
    conversation's lock, and the answer (once the call it starts has ended, as a run's does) is ``{"decision",
    "status", "card"}``, the card as it is then (still waiting, ``status`` ``awaiting``, when an approval policy
    wants more approvers); after an edit the domain refused, the refused payload waits, and ``token`` is a link's
    token for it (same person, decisions and expiry). A refusal is ``{"error", "reason", "card"?}``: 400
    ``malformed``; 401 ``not-signed-in``; 403 ``bad-signature``, ``unknown-key``, ``not-yet-valid``,
    ``wrong-person``, ``decision-not-allowed``, ``forbidden``; 404 ``unknown-suggestion``; 409 ``payload-changed``,
    ``busy`` (another call drives the conversation: try again), ``not-waiting``; 410 ``expired``, ``replayed``,
    ``already-decided``; 413, 415. Each token is used once: its id goes into ``used_tokens`` once its decision is
    in the log, never for a refusal. By default they are kept where the store keeps its logs (a SQLite or
    PostgreSQL store's own database, :mod:`~dial_runtime.stores.shared`), so every worker serving it and every
    restart sees them; with a store that offers none (the in-process one), in this process's memory
    (:class:`~dial_runtime.links.MemoryUsedTokens`). A token whose card has ended is refused anyway, so what
    they guard is a second decision on a card that still waits (an approval policy's). ``public_url`` is where
    people reach this server (``https://dial.example``): the base of the links notifications carry.

    ``notifications`` (:class:`~dial_runtime.notify.Notifications`) tells people what happens to cards: when a
    run (or a link's decision) ends with a card waiting that was not waiting before, or waits anew on another
    payload (after a refused edit), a ``waiting`` notification; when a card is decided (accepted, dismissed,
    edited, words said instead, or expired, whether through the panel, a link, or a deadline this application's
    scheduler fires), a ``decided`` one. ``recipients(conversation_id, card)`` (plain or ``async``) names whom to
    tell, as principals (what ``auth`` returns; each notifier resolves them to addresses): each gets a ``waiting``
    notification of their own, with links only they can use when there are ``links`` and a ``public_url``
    (``accept``, unless the payload waiting was refused, ``dismiss``, and ``open``, whose page also offers the
    editor; valid for a day), its id telling it from another's; such links need ``auth`` (without it every
    caller is ``"local"``, who could use none of them: refused at start). Without ``recipients`` one
    notification, with no recipients and no links, goes to every notifier. They are built when the run ends and
    sent once its response is complete (a deadline's, in the lifespan), never in its way: a notifier that fails,
    or ``recipients`` that raises, is logged and the run is unchanged.
    """
    if (used_tokens is not None or public_url is not None) and links is None:
        raise ValueError("create_app: used_tokens and public_url go with links (a Keyring)")
    if recipients is not None and notifications is None:
        raise ValueError("create_app: recipients go with notifications")
    if recipients is not None and links is not None and public_url is not None and auth is None:
        raise ValueError(
            "create_app: links for named recipients need auth: without it every caller is 'local', so nobody "
            "else could use the link mailed to them"
        )
    if public_url is not None:
        decide_url(public_url)
    domain_factory: DomainFactory | None = None
    if not callable(getattr(domain, "run", None)):
        if not callable(domain):
            raise TypeError("create_app: domain must be a domain (with a run method) or a domain factory")
        domain_factory, domain = domain, domain(_DESCRIBING_ID, [])
    store = open_store(store) if isinstance(store, str) else store
    if used_tokens is None and links is not None:
        used_tokens = _shared_used_tokens(store)
    keeper = getattr(store, "detaches", None)
    settings = _Settings(
        store=store,
        detaches=keeper() if callable(keeper) else None,
        domain=domain,
        domain_factory=domain_factory,
        agent=agent,
        auth=auth,
        can_decide=can_decide,
        can_view=can_view,
        origins=frozenset(origin.rstrip("/") for origin in allowed_origins),
        max_body=max_body,
        max_text=max_text,
        heartbeat=heartbeat,
        abort_grace=abort_grace,
        links=links,
        used_tokens=MemoryUsedTokens() if used_tokens is None else used_tokens,
        roles=roles,
        panel=panel,
        public_url=public_url,
        announcer=None
        if notifications is None
        else Announcer(notifications, recipients=recipients, links=links, public_url=public_url),
        options={
            "timeout": timeout,
            "reply_timeout": reply_timeout,
            "idle_timeout": idle_timeout,
            "max_turns": max_turns,
            "decide_timeout": decide_timeout,
        },
    )
    surface = _WebSurface(settings)
    if deadlines == "auto":
        opener = conversation_opener(
            settings.store, agent=agent, domain=domain_factory or domain, describing=domain, **settings.options
        )
        if settings.announcer is not None:
            opener = settings.announcer.announcing(opener, settings.store)
        url = getattr(settings.store, "url", None)
        settings.deadlines = (
            PostgresDeadlines(url, open_conversation=opener)
            if isinstance(settings.store, PostgresStore) and isinstance(url, str)
            else LocalDeadlines(opener)
        )
    else:
        settings.deadlines = deadlines
    routes: list[Route | Mount] = [
        Route("/agui", surface.agui, methods=["POST"]),
        Route("/agui/detach", surface.detach, methods=["POST"]),
        Route("/actions", surface.actions, methods=["GET"]),
        Route("/conversations", surface.conversations, methods=["GET"]),
        Route("/conversations/{thread}/changes", surface.changes, methods=["GET"]),
    ]
    if panel:
        routes.append(Route("/", _panel, methods=["GET"]))
    if links is not None:
        routes += [
            Route("/decide", surface.decide_page, methods=["GET"]),
            Route("/decide", surface.decide, methods=["POST"]),
        ]
    if panel or links is not None:
        routes.append(Mount("/static", app=StaticFiles(directory=str(_STATIC)), name="static"))
    guard = Middleware(_Guard, hosts=_Hosts(allowed_hosts), origins=settings.origins)
    return Starlette(
        routes=routes,
        middleware=[guard],
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
        lifespan=lambda app: _lifespan(settings),
    )


def _shared_used_tokens(store: StorePort) -> UsedTokens:
    """Where the links' used tokens are kept by default: the store's own database when it offers a keeper (every
    worker and restart shares it), else this process's memory."""
    keeper = getattr(store, "used_tokens", None)
    return keeper() if callable(keeper) else MemoryUsedTokens()


@contextlib.asynccontextmanager
async def _lifespan(settings: _Settings) -> AsyncIterator[None]:
    """The application's lifespan: the deadline scheduler runs while it serves, and the connections of the state
    shared through the store (used tokens, detaches: a PostgreSQL keeper's) are closed when it stops."""
    try:
        async with _firing_deadlines(settings):
            yield
    finally:
        for keeper in (settings.used_tokens, settings.detaches):
            close = getattr(keeper, "close", None)
            if callable(close):
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(close)


@contextlib.asynccontextmanager
async def _firing_deadlines(settings: _Settings) -> AsyncIterator[None]:
    """The deadline scheduler, run while the application serves (one that cannot, Procrastinate's off asyncio, is
    logged and left out: deadlines then fire when their conversation is next opened)."""
    scheduler = settings.deadlines
    if not isinstance(scheduler, (LocalDeadlines, PostgresDeadlines)):
        yield
        return
    try:
        entered = await scheduler.__aenter__()
    except Exception:
        logger.exception(
            "the deadline scheduler could not start; deadlines fire when their conversation is opened"
        )
        settings.deadlines = None
        yield
        return
    try:
        async with anyio.create_task_group() as tasks:
            if settings.announcer is not None:
                settings.announcer.background = tasks
            if isinstance(entered, PostgresDeadlines):
                tasks.start_soon(entered.run)
            else:
                for conversation_id, waits in (await waiting(settings.store)).items():
                    await entered.schedule(conversation_id, waits)
            yield
            tasks.cancel_scope.cancel()
    finally:
        if settings.announcer is not None:
            settings.announcer.background = None
        await scheduler.__aexit__(None, None, None)


async def _http_error(request: Request, error: Exception) -> Response:
    """A route that does not exist (404) or a method it does not take (405), as JSON."""
    assert isinstance(error, HTTPException)
    if error.status_code == 404:
        message = f"nothing at {request.url.path[:200]!r}"
    elif error.status_code == 405:
        message = f"{request.method} is not allowed here"
    else:
        message = str(error.detail)[:200]
    return JSONResponse({"error": message}, status_code=error.status_code, headers=error.headers)


async def _server_error(request: Request, error: Exception) -> Response:
    """An exception no handler expected: a 500 whose body names nothing of it (the server's log has it)."""
    return _error(500, "the server failed on this request; its log has the details")


def _host_and_port(value: str) -> tuple[str, str | None] | None:
    """A ``Host`` header's name (lower case) and port (``None`` when it names none); ``None`` when malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]") + 1
        if end == 0:
            return None
        name, rest = value[:end], value[end:]
    else:
        name, colon, port = value.partition(":")
        rest = colon + port
    port_ok = rest[1:].isascii() and rest[1:].isdigit()
    if not _HOST_NAME.fullmatch(name) or (rest and not (rest.startswith(":") and port_ok)):
        return None
    return name, rest[1:] or None


#: A host's name as a ``Host`` header writes it: a DNS name or IPv4 address, or an IPv6 address in brackets.
_HOST_NAME = re.compile(r"[a-z0-9_.-]+|\[[0-9a-f:.]+\]")


class _Hosts:
    """The hosts a server answers to (``create_app``'s ``allowed_hosts``)."""

    def __init__(self, allowed: Iterable[str]) -> None:
        if isinstance(allowed, str):
            raise TypeError("create_app: allowed_hosts is a list of hosts, not one string")
        self.any = False
        self._exact: set[tuple[str, str | None]] = set()
        self._domains: set[tuple[str, str | None]] = set()
        for entry in allowed:
            if entry.strip() == "*":
                self.any = True
                continue
            wildcard = entry.strip().startswith("*.")
            parsed = _host_and_port(entry.strip()[1:] if wildcard else entry)
            if parsed is None:
                raise ValueError(f"create_app: allowed_hosts entry {entry!r} is not a host, host:port or *.domain")
            (self._domains if wildcard else self._exact).add(parsed)

    def allow(self, host: str) -> bool:
        """Whether a request whose ``Host`` header is ``host`` is for this server."""
        if self.any:
            return True
        parsed = _host_and_port(host)
        if parsed is None:
            return False
        name, port = parsed
        if (name, port) in self._exact or (name, None) in self._exact:
            return True
        return any(
            name.endswith(domain) and (wanted is None or wanted == port) for domain, wanted in self._domains
        )


class _Guard:
    """What every request passes before any route, the panel's included: a ``Host`` the server does not serve is
    refused (400), an ``Origin`` that is neither the server's own nor allowed is refused (403), and an allowed
    origin gets CORS: its preflight answered (any method the routes take, the headers it asks for, credentials),
    its responses marked for it. Starlette's ``CORSMiddleware`` does not fit: its refusal of a preflight is plain
    text, and its origin rule cannot count the server's own origin, which needs the ``Host`` checked first."""

    def __init__(self, app: ASGIApp, *, hosts: _Hosts, origins: frozenset[str]) -> None:
        self._app = app
        self._hosts = hosts
        self._origins = origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host")
        if host is None or not self._hosts.allow(host):
            named = "no Host header" if host is None else f"the host {host[:200]!r} is not served here"
            await _error(400, f"{named} (create_app's allowed_hosts)")(scope, receive, send)
            return
        origin = headers.get("origin")
        if origin is None or origin.rstrip("/") == f"{scope['scheme']}://{host}":
            await self._app(scope, receive, send)
            return
        if origin.rstrip("/") not in self._origins:
            await _error(403, f"origin {origin[:200]!r} may not call here")(scope, receive, send)
            return
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await self._preflight(origin, headers)(scope, receive, send)
            return

        async def marked(message: Message) -> None:
            if message["type"] == "http.response.start":
                response = MutableHeaders(scope=message)
                response.update(_cors(origin))
                response.add_vary_header("Origin")
            await send(message)

        await self._app(scope, receive, marked)

    def _preflight(self, origin: str, headers: Headers) -> Response:
        method = headers["access-control-request-method"]
        if method not in _CORS_METHODS:
            return _error(403, f"{method[:20]!r} is not a method this server takes")
        answer = {**_cors(origin), "Access-Control-Allow-Methods": ", ".join(_CORS_METHODS)}
        answer["Access-Control-Max-Age"] = "600"
        answer["Vary"] = "Origin"
        asked = headers.get("access-control-request-headers")
        if asked:
            answer["Access-Control-Allow-Headers"] = asked
        return Response(status_code=204, headers=answer)


#: The methods the routes take, which a preflight may ask for.
_CORS_METHODS = ("GET", "POST")


def _cors(origin: str) -> dict[str, str]:
    """The CORS headers that let the page at ``origin`` (an allowed one) read a response, with its credentials."""
    return {"Access-Control-Allow-Origin": origin, "Access-Control-Allow-Credentials": "true"}


async def _panel(request: Request) -> Response:
    return FileResponse(str(_STATIC / "index.html"), headers={"Cache-Control": "no-cache"})


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


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


class _WebSurface:
    """The handlers, sharing the settings."""

    def __init__(self, settings: _Settings) -> None:
        self.settings = settings
        self.runs = _Runs()

    async def _principal(self, request: Request) -> str | None:
        auth = self.settings.auth
        if auth is None:
            return "local"
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
            return _error(401, "not signed in")
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
            return _error(401, "not signed in")
        ids = await self.settings.store.conversations()
        return JSONResponse({"conversations": [each for each in ids if self._may_view(principal, each)]})

    async def changes(self, request: Request) -> Response | _ChangeStream:
        """``GET /conversations/{id}/changes``: a server-sent event stream that says when the conversation's log
        grows, whoever made it grow (another tab, another worker): a page listening takes a snapshot then."""
        principal = await self._principal(request)
        if principal is None:
            return _error(401, "not signed in")
        thread = request.path_params["thread"]
        if not _THREAD_ID.fullmatch(thread):
            return _error(400, "the conversation id must be 1 to 128 letters, digits or ._:@-")
        if not self._may_view(principal, thread):
            return _error(403, "you may not see this conversation")
        if not callable(getattr(self.settings.store, "watch", None)):
            return _error(501, "this store cannot be watched (it has no watch method)")
        return _ChangeStream(self.settings.store, thread, self.settings.heartbeat)

    async def agui(self, request: Request) -> Response | _EventStream:
        """``POST /agui``: one AG-UI run, answered as a server-sent event stream."""
        principal = await self._principal(request)
        if principal is None:
            return _error(401, "not signed in")
        body = await _read_body(request, self.settings.max_body)
        if body is None:
            return _error(413, f"the request body is over {self.settings.max_body} bytes")
        try:
            run = RunAgentInput.model_validate_json(body)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            return _error(422, f"not an AG-UI RunAgentInput: {where}: {first['msg']}")
        if not _THREAD_ID.fullmatch(run.thread_id):
            return _error(400, "threadId must be 1 to 128 letters, digits or ._:@-")
        if not self._may_view(principal, run.thread_id):
            return _error(403, "you may not see this conversation")
        words = new_words(run)
        if words is not None and len(words) > self.settings.max_text:
            return _error(413, f"the message is over {self.settings.max_text} characters")
        outbox: list[Notification] = []
        return _EventStream(
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
            return _error(401, "not signed in")
        body = await _read_body(request, _DETACH_MAX_BODY)
        if body is None:
            return _error(413, f"the request body is over {_DETACH_MAX_BODY} bytes")
        try:
            named = json.loads(body)
        except ValueError:
            named = None
        thread = named.get("threadId") if isinstance(named, dict) else None
        run_id = named.get("runId") if isinstance(named, dict) else None
        if not isinstance(thread, str) or not isinstance(run_id, str):
            return _error(422, 'give {"threadId": ..., "runId": ...} as JSON')
        if not _THREAD_ID.fullmatch(thread):
            return _error(400, "threadId must be 1 to 128 letters, digits or ._:@-")
        if not self._may_view(principal, thread):
            return _error(403, "you may not see this conversation")
        stop = self.runs.find(thread, run_id)
        if stop is None and self.settings.detaches is not None:  # another worker's run, maybe: noted for it
            try:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self.settings.detaches.note, thread, run_id, principal)
            except Exception as error:
                logger.error("a detach of %s could not be noted: %s", thread, type(error).__name__)
                return _error(503, "the detach could not be noted; the run stops when its client has gone")
            logger.info("run %s of %s: a detach noted for the worker serving it", run_id[:64], thread)
            return JSONResponse({"detached": True, "noted": True}, status_code=202)
        if stop is None or stop.principal != principal:
            return _error(404, "no run of yours by that id is running here")
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
        if not _THREAD_ID.fullmatch(thread):
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
        body = await _read_body(request, self.settings.max_body)
        if body is None:
            return _LinkRefusal("too-large", f"the request body is over {self.settings.max_body} bytes").response()
        try:
            named = json.loads(body)
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
        stop: _Stop,
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


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The request's body, or ``None`` once it passes ``limit`` bytes (read no further)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


class _ChangeStream:
    """``changed`` events (data: ``{"threadId": ..., "seq": N}``, the log's last seq) for one conversation: one
    when the stream opens, then one each time the log grows, woken by the store's watch (PostgreSQL's
    ``LISTEN``/``NOTIFY`` across workers). A comment every ``heartbeat`` seconds keeps proxies from closing an
    idle stream and notices a client that left. The events carry no content: the page reads the conversation
    through ``/agui`` (a snapshot), where ``can_view`` and ``auth`` apply as for any run."""

    def __init__(self, store: StorePort, thread: str, heartbeat: float) -> None:
        self._store = store
        self._thread = thread
        self._heartbeat = heartbeat

    def _event(self, seq: int) -> bytes:
        data = json.dumps({"threadId": self._thread, "seq": seq}, separators=(",", ":"))
        return f"event: changed\ndata: {data}\n\n".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        async with anyio.create_task_group() as group:

            async def left() -> None:  # the client went away: stop watching
                while (await receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()

            group.start_soon(left)
            async with self._store.watch(self._thread) as changes:
                entries = await self._store.read(self._thread)
                seq = entries[-1].seq if entries else 0
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                first = b"retry: %d\n" % RECONNECT_MS + self._event(seq)
                await send({"type": "http.response.body", "body": first, "more_body": True})
                while True:
                    change: object = _ENDED
                    with anyio.move_on_after(self._heartbeat) as waited:
                        change = await anext(changes, _ENDED)
                    if waited.cancelled_caught:
                        await send({"type": "http.response.body", "body": b": still here\n\n", "more_body": True})
                        continue
                    if change is _ENDED:  # the store closed
                        break
                    fresh = await self._store.read(self._thread, after_seq=seq)
                    if fresh:
                        seq = fresh[-1].seq
                        await send({"type": "http.response.body", "body": self._event(seq), "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            group.cancel_scope.cancel()


_ENDED = object()

#: How long a browser's EventSource waits before it reconnects a change stream that broke (a worker that died).
RECONNECT_MS = 1000


#: The most bytes a detach's body may hold (two ids).
_DETACH_MAX_BODY = 4096


class _Stop:
    """How a run stops when its client closes the request (AG-UI's abort: ``HttpAgent.abortRun()``, the panel's
    Stop): the conversation driving it, once open, is told who stopped it, so the log records the interruption in
    those words, then the run is cancelled. What the run did before stays in the log; the log's writes are never
    cut short. ``detached`` is set when the run should go on without its client (a page that went away)."""

    def __init__(self, principal: str) -> None:
        self.scope = anyio.CancelScope()
        self.conversation: Conversation | None = None
        self.principal = principal
        self.why = f"cancelled by {principal}"
        self.detached = anyio.Event()

    def __call__(self) -> None:
        if self.conversation is not None:
            self.conversation.cancelling(self.why)
        self.scope.cancel()


class _Runs:
    """The runs this worker is serving, by conversation and run id: what a detach names, and what tells a
    snapshot that a conversation is driven here."""

    def __init__(self) -> None:
        self._by_thread: dict[str, dict[str, _Stop]] = {}

    @contextlib.contextmanager
    def serving(self, thread: str, run_id: str, stop: _Stop) -> Iterator[None]:
        runs = self._by_thread.setdefault(thread, {})
        runs[run_id] = stop
        try:
            yield
        finally:
            if runs.get(run_id) is stop:
                del runs[run_id]
            if not runs:
                self._by_thread.pop(thread, None)

    def find(self, thread: str, run_id: str) -> _Stop | None:
        return self._by_thread.get(thread, {}).get(run_id)

    def driving(self, thread: str) -> bool:
        """Whether a run of this worker has the conversation open (and so holds its lock)."""
        return any(stop.conversation is not None for stop in self._by_thread.get(thread, {}).values())


class _EventStream:
    """An AG-UI event stream: ``RUN_STARTED``, what the run emits, and ``RUN_ERROR`` if it is refused or fails.

    A client that closes the request aborts the run: ``grace`` seconds later, unless it was detached meanwhile,
    the run is stopped, and ends ``RUN_FINISHED`` with the cancelled outcome. A detached run goes on to its end,
    its events sent nowhere: the log keeps what it does.
    """

    def __init__(
        self,
        run: Callable[[Callable[[BaseEvent], None], _Stop], Awaitable[None]],
        run_input: RunAgentInput,
        principal: str,
        *,
        runs: _Runs,
        grace: float,
        detaches: _Detaches | None = None,
        after: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._drive = run
        self._detaches = detaches
        self._after = after
        self._input = run_input
        self._principal = principal
        self._runs = runs
        self._grace = grace

    async def _detached_elsewhere(self, thread: str, run_id: str) -> bool:
        """Whether the run's own principal asked another worker to let it go on (noted in the store's database);
        ``False`` when it cannot be told, so the run stops as a closed request says."""
        if self._detaches is None:
            return False
        try:
            with anyio.CancelScope(shield=True):
                noted = await anyio.to_thread.run_sync(self._detaches.noted, thread, run_id, self._principal)
        except Exception as error:
            logger.error("could not read the detaches of %s: %s", thread, type(error).__name__)
            return False
        return bool(noted)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        outbox = _Outbox()
        stop = _Stop(self._principal)
        thread, run_id = self._input.thread_id, self._input.run_id
        client_gone = False

        async def produce() -> None:
            try:
                with stop.scope:
                    try:
                        await self._drive(outbox.put, stop)
                    except _Refused as refusal:
                        outbox.put(RunErrorEvent(message=str(refusal), code=refusal.code))
                    except Exception as error:
                        logger.error("run of %s failed: %s", thread, type(error).__name__)
                        outbox.put(RunErrorEvent(message=_failure(error), code="run-failed"))
                if stop.scope.cancelled_caught:
                    cancelled = RunFinishedCancelledOutcome()
                    outbox.put(RunFinishedEvent(thread_id=thread, run_id=run_id, outcome=cancelled))
            finally:
                outbox.end()

        async def aborted() -> None:
            nonlocal client_gone
            while (await receive())["type"] != "http.disconnect":
                pass
            client_gone = True
            with anyio.move_on_after(self._grace):
                await stop.detached.wait()
            if not stop.detached.is_set() and not await self._detached_elsewhere(thread, run_id):
                stop()

        started = RunStartedEvent(thread_id=thread, run_id=run_id)
        with self._runs.serving(thread, run_id, stop):
            async with anyio.create_task_group() as group:
                group.start_soon(produce)
                group.start_soon(aborted)
                await send({"type": "http.response.body", "body": encode_sse(started), "more_body": True})
                try:
                    while queued := await outbox.take():
                        if not client_gone:
                            body = b"".join(map(encode_sse, queued))
                            await send({"type": "http.response.body", "body": body, "more_body": True})
                finally:
                    outbox.close()
                group.cancel_scope.cancel()  # the run has ended: nothing left to stop
        if not client_gone:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        if self._after is not None:  # the response is complete: what follows keeps no client waiting
            try:
                await self._after()
            except Exception:
                logger.exception("what follows the run of %s failed", thread)


class _Outbox:
    """The events a run emitted that its response has not sent yet, in order.

    The response takes every event queued at once (one body for them all, and no event waits for another to be
    sent) and waits only when none is. A memory object stream does the same with a round of the event loop
    before every take: one more task step for every streamed chunk. Once the response stops reading (the server
    cancelled the request), what the run emits is dropped, as nothing would send it.
    """

    def __init__(self) -> None:
        self._events: list[BaseEvent] = []
        self._arrived = anyio.Event()
        self._ended = False
        self._closed = False

    def put(self, event: BaseEvent) -> None:
        """Queue ``event`` for the response (dropped once the run has ended or the response stopped reading)."""
        if not (self._ended or self._closed):
            self._events.append(event)
            self._arrived.set()

    def end(self) -> None:
        """The run has ended: the response takes what is queued, then nothing."""
        self._ended = True
        self._arrived.set()

    def close(self) -> None:
        """The response reads no more: what is queued or emitted later is dropped."""
        self._closed = True
        self._events = []

    async def take(self) -> list[BaseEvent]:
        """Every event queued now, waited for while there is none; empty once the run has ended and all were
        taken."""
        while not self._events and not self._ended:
            if self._arrived.is_set():  # by what was taken before: waiting on it would not wait
                self._arrived = anyio.Event()
            await self._arrived.wait()
        events, self._events = self._events, []
        return events


def _failure(error: Exception) -> str:
    """What a failed run tells the client: only the error's kind (its text may hold what the client must not see;
    an agent that failed to answer is ``no-reply``, in the log's words)."""
    return f"the run failed ({type(error).__name__}); the conversation is unchanged beyond what its log shows"


def scripted_agents(scripts: Mapping[str, Sequence[str]] | Sequence[str]) -> AgentFactory:
    """An agent factory for demos and tests: every conversation replies with the list ``scripts`` (or, given a
    mapping, conversation ``id`` with ``scripts[id]``), taken up after the replies its log already holds."""
    from .. import ScriptedAgent
    from ..views.agent import exchanges

    def build(conversation_id: str, log: Sequence[LogEntry]) -> ScriptedAgent:
        replies = scripts.get(conversation_id, ()) if isinstance(scripts, Mapping) else scripts
        used = sum(1 for each in exchanges(entry.event for entry in log) if each.reply is not None)
        return ScriptedAgent(list(replies)[used:])

    return build
