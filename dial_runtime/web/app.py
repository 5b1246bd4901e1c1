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
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

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
from anyio.streams.memory import MemoryObjectReceiveStream
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import (
    Accept,
    AlreadyDecided,
    Ask,
    Conversation,
    ConversationBusy,
    Dismiss,
    Edit,
    LogEntry,
    PayloadChanged,
    Say,
    StorePort,
    Suggestion,
    TurnResult,
    open_store,
)
from ..agents.prompt import vocabulary
from ..deadlines import DeadlineScheduler, LocalDeadlines, PostgresDeadlines, conversation_opener, waiting
from ..driver.built import AgentOnFirstUse, DeferringHuman, DomainOnFirstUse
from ..runtime.events import Event, InformDeltaEvent
from ..runtime.projection import Card, Notice, Projection, Question, project
from ..stores.postgres import PostgresStore
from .mapping import EventMapper, encode_sse, interrupt_for, interrupt_id, messages_of

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
) -> Starlette:
    """The ASGI application: ``POST /agui`` (AG-UI runs), ``POST /agui/detach``, ``GET /actions`` (the domain's
    actions, which the panel's empty state names), ``GET /conversations``, ``GET
    /conversations/{id}/changes`` (a server-sent event each time a conversation's log grows, in any worker; a
    comment every ``heartbeat`` seconds while it does not), and the panel at ``/``.

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
    in the log, and a snapshot taken meanwhile says a turn is running. A worker knows only its own runs: a detach
    that reaches another worker is answered 404 and changes nothing. ``timeout``, ``reply_timeout``,
    ``idle_timeout``, ``max_turns`` and ``decide_timeout`` are each conversation's (see
    :class:`~dial_runtime.Conversation`).

    ``deadlines`` fires the deadlines of what waits with nobody watching (see :mod:`dial_runtime.deadlines`):
    each run that ends with suggestions waiting schedules them. ``"auto"``: on a PostgreSQL store, Procrastinate
    jobs in its database, fired by a worker this application runs (on asyncio, as under uvicorn) and by any
    ``run_worker`` process; on another store, a timer in this process, given what waits when the application
    starts. They run in the application's lifespan (an ASGI server that runs no lifespan fires none: deadlines then
    fire when their conversation is next opened). ``None``: no scheduler; or a :class:`DeadlineScheduler` of your
    own, whose ``schedule`` is called.
    """
    domain_factory: DomainFactory | None = None
    if not callable(getattr(domain, "run", None)):
        if not callable(domain):
            raise TypeError("create_app: domain must be a domain (with a run method) or a domain factory")
        domain_factory, domain = domain, domain(_DESCRIBING_ID, [])
    settings = _Settings(
        store=open_store(store) if isinstance(store, str) else store,
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
        options={
            "timeout": timeout,
            "reply_timeout": reply_timeout,
            "idle_timeout": idle_timeout,
            "max_turns": max_turns,
            "decide_timeout": decide_timeout,
        },
    )
    if deadlines == "auto":
        opener = conversation_opener(
            settings.store, agent=agent, domain=domain_factory or domain, describing=domain, **settings.options
        )
        url = getattr(settings.store, "url", None)
        settings.deadlines = (
            PostgresDeadlines(url, open_conversation=opener)
            if isinstance(settings.store, PostgresStore) and isinstance(url, str)
            else LocalDeadlines(opener)
        )
    else:
        settings.deadlines = deadlines
    surface = _WebSurface(settings)
    routes: list[Route | Mount] = [
        Route("/agui", surface.agui, methods=["POST"]),
        Route("/agui/detach", surface.detach, methods=["POST"]),
        Route("/actions", surface.actions, methods=["GET"]),
        Route("/conversations", surface.conversations, methods=["GET"]),
        Route("/conversations/{thread}/changes", surface.changes, methods=["GET"]),
    ]
    if panel:
        routes += [
            Route("/", _panel, methods=["GET"]),
            Mount("/static", app=StaticFiles(directory=str(_STATIC)), name="static"),
        ]
    guard = Middleware(_Guard, hosts=_Hosts(allowed_hosts), origins=settings.origins)
    return Starlette(
        routes=routes,
        middleware=[guard],
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
        lifespan=lambda app: _firing_deadlines(settings),
    )


@contextlib.asynccontextmanager
async def _firing_deadlines(settings: _Settings) -> AsyncIterator[None]:
    """The application's lifespan: the deadline scheduler runs while it serves (one that cannot, Procrastinate's
    off asyncio, is logged and left out: deadlines then fire when their conversation is next opened)."""
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
            if isinstance(entered, PostgresDeadlines):
                tasks.start_soon(entered.run)
            else:
                for conversation_id, waits in (await waiting(settings.store)).items():
                    await entered.schedule(conversation_id, waits)
            yield
            tasks.cancel_scope.cancel()
    finally:
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
        return _EventStream(
            lambda emit, stop: self._run(run, principal, words, emit, stop),
            run,
            principal,
            runs=self.runs,
            grace=self.settings.abort_grace,
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
        if stop is None or stop.principal != principal:
            return _error(404, "no run of yours by that id is running here")
        stop.detached.set()
        logger.info("run %s of %s goes on without its client", run_id[:64], thread)
        return JSONResponse({"detached": True}, status_code=202)

    async def _run(
        self,
        run: RunAgentInput,
        principal: str,
        words: str | None,
        emit: Callable[[BaseEvent], None],
        stop: _Stop,
    ) -> None:
        """Drive the conversation for one run, emitting its AG-UI events (RUN_STARTED is already out); ``stop``
        is told the conversation once it is open, so a client that aborts the run stops it in words.

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
                opened_at = conversation.log[-1].seq if conversation.log else 0
                for mapped in catch_up():
                    emit(mapped)
                plan = self._plan(conversation, mapper.projection, run.resume or [], words, principal)
                for ignored in plan.ignored:
                    emit(CustomEvent(name="dial.resume-entry-ignored", value=ignored))
                for step in plan.steps:
                    last = await step.call(conversation)
            finally:
                for mapped in [*catch_up(), *mapper.close()]:
                    emit(mapped)
                with anyio.CancelScope(shield=True):
                    await agent.aclose()
        except ConversationBusy:
            raise _Refused("busy", "another run is driving this conversation; try again") from None
        except AlreadyDecided as error:  # another tab or worker decided it between this run's check and its call
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
            plan.steps.append(_resolution(entry, subject, principal))
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
                    _Step(lambda conversation: conversation.decide(first, Say(words), by=principal, via=VIA))
                )
            else:
                plan.steps.append(_Step(lambda conversation: conversation.say(words, by=principal)))
        return plan


def _resolution(entry: ResumeEntry, subject: Suggestion | Ask, principal: str) -> _Step:
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
        lambda conversation: conversation.decide(suggestion_id, decision, by=principal, shown=digest, via=VIA)
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
    ) -> None:
        self._drive = run
        self._input = run_input
        self._principal = principal
        self._runs = runs
        self._grace = grace

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        sender, receiver = anyio.create_memory_object_stream[BaseEvent](math.inf)
        stop = _Stop(self._principal)
        thread, run_id = self._input.thread_id, self._input.run_id
        client_gone = False

        def emit(event: BaseEvent) -> None:
            with contextlib.suppress(anyio.BrokenResourceError):  # the server cancelled the request: none reads
                sender.send_nowait(event)

        async def produce() -> None:
            with sender:
                with stop.scope:
                    try:
                        await self._drive(emit, stop)
                    except _Refused as refusal:
                        emit(RunErrorEvent(message=str(refusal), code=refusal.code))
                    except Exception as error:
                        logger.error("run of %s failed: %s", thread, type(error).__name__)
                        emit(RunErrorEvent(message=_failure(error), code="run-failed"))
                if stop.scope.cancelled_caught:
                    cancelled = RunFinishedCancelledOutcome()
                    emit(RunFinishedEvent(thread_id=thread, run_id=run_id, outcome=cancelled))

        async def aborted() -> None:
            nonlocal client_gone
            while (await receive())["type"] != "http.disconnect":
                pass
            client_gone = True
            with anyio.move_on_after(self._grace):
                await stop.detached.wait()
            if not stop.detached.is_set():
                stop()

        started = RunStartedEvent(thread_id=thread, run_id=run_id)
        with self._runs.serving(thread, run_id, stop):
            async with anyio.create_task_group() as group:
                group.start_soon(produce)
                group.start_soon(aborted)
                await send({"type": "http.response.body", "body": encode_sse(started), "more_body": True})
                async with receiver:
                    while queued := await _queued(receiver):
                        if not client_gone:
                            body = b"".join(map(encode_sse, queued))
                            await send({"type": "http.response.body", "body": body, "more_body": True})
                group.cancel_scope.cancel()  # the run has ended: nothing left to stop
        if not client_gone:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _queued(receiver: MemoryObjectReceiveStream[BaseEvent]) -> list[BaseEvent]:
    """Every event queued in ``receiver`` now, taken without a round of the event loop each; when none is, the
    next one, waited for. Empty once the stream has ended. One body carries them all: a send per batch, not per
    event, and no event waits for another to be sent."""
    queued: list[BaseEvent] = []
    while True:
        try:
            queued.append(receiver.receive_nowait())
        except anyio.WouldBlock:
            if queued:
                return queued
            try:
                queued.append(await receiver.receive())
            except anyio.EndOfStream:
                return queued
        except anyio.EndOfStream:
            return queued


def _failure(error: Exception) -> str:
    """What a failed run tells the client: only the error's kind (its text may hold what the client must not see;
    an agent that failed to answer is ``no-reply``, in the log's words)."""
    return f"the run failed ({type(error).__name__}); the conversation is unchanged beyond what its log shows"


def scripted_agents(scripts: Mapping[str, Sequence[str]] | Sequence[str]) -> AgentFactory:
    """An agent factory for demos and tests: every conversation replies with the list ``scripts`` (or, given a
    mapping, conversation ``id`` with ``scripts[id]``), taken up after the replies its log already holds."""
    from .. import ScriptedAgent

    def build(conversation_id: str, log: Sequence[LogEntry]) -> ScriptedAgent:
        replies = scripts.get(conversation_id, ()) if isinstance(scripts, Mapping) else scripts
        used = sum(1 for entry in log if entry.event.type == "reply")
        return ScriptedAgent(list(replies)[used:])

    return build
