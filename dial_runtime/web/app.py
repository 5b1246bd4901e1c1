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
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import (
    Ask,
    LogEntry,
    Suggestion,
    open_store,
)
from ..decisions.announce import FLUSH_GRACE, Announcer
from ..decisions.deadlines import (
    DeadlineScheduler,
    LocalDeadlines,
    PostgresDeadlines,
    conversation_opener,
    waiting,
)
from ..decisions.links import (
    Keyring,
    MemoryUsedTokens,
    UsedTokens,
)
from ..decisions.notify import Notifications
from ..ports import StorePort
from ..stores.postgres import PostgresStore
from ..views.person import Card
from .decide import decide_url
from .guards import LOOPBACK_HOSTS, Cors, HostAndOriginGuard, Hosts, json_error
from .inbox import InboxRoutes
from .surface import DESCRIBING_ID, STATIC, AgentFactory, DomainFactory, Settings, WebSurface, panel_page

__all__ = ["LOOPBACK_HOSTS", "AgentFactory", "DomainFactory", "create_app", "scripted_agents"]

logger = logging.getLogger("dial_runtime.web")


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
    comment every ``heartbeat`` seconds while it does not), the panel at ``/``, the inbox at ``/inbox`` (every card
    waiting for the caller across conversations, with ``GET /inbox/cards``, ``GET /inbox/changes``, ``POST
    /inbox/decide`` and ``POST /inbox/claim``, ``/release``, ``/assign``: :mod:`dial_runtime.web.inbox`), and,
    with ``links``, ``GET`` and ``POST /decide`` (decision links, below).

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
    ``abort_grace`` seconds later, logged as ``cancelled by <principal>`` (``cancelled by the person`` without
    ``auth``), unless ``POST /agui/detach`` (JSON
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
        domain_factory, domain = domain, domain(DESCRIBING_ID, [])
    store = open_store(store) if isinstance(store, str) else store
    if used_tokens is None and links is not None:
        used_tokens = _shared_used_tokens(store)
    keeper = getattr(store, "detaches", None)
    settings = Settings(
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
    surface = WebSurface(settings)
    inbox = InboxRoutes(surface)
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
        Route("/inbox/cards", inbox.cards, methods=["GET"]),
        Route("/inbox/changes", inbox.changes, methods=["GET"]),
        Route("/inbox/decide", inbox.decide, methods=["POST"]),
        Route("/inbox/claim", inbox.claim, methods=["POST"]),
        Route("/inbox/release", inbox.release, methods=["POST"]),
        Route("/inbox/assign", inbox.assign, methods=["POST"]),
    ]
    if panel:
        routes += [Route("/", panel_page, methods=["GET"]), Route("/inbox", inbox.page, methods=["GET"])]
    if links is not None:
        routes += [
            Route("/decide", surface.decide_page, methods=["GET"]),
            Route("/decide", surface.decide, methods=["POST"]),
        ]
    if panel or links is not None:
        routes.append(Mount("/static", app=StaticFiles(directory=str(STATIC)), name="static"))
    guard = Middleware(HostAndOriginGuard, hosts=Hosts(allowed_hosts), origins=settings.origins)
    return Starlette(
        routes=routes,
        middleware=[guard, Middleware(Cors, origins=settings.origins)],
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
        lifespan=lambda app: _lifespan(settings),
    )


def _shared_used_tokens(store: StorePort) -> UsedTokens:
    """Where the links' used tokens are kept by default: the store's own database when it offers a keeper (every
    worker and restart shares it), else this process's memory."""
    keeper = getattr(store, "used_tokens", None)
    return keeper() if callable(keeper) else MemoryUsedTokens()


@contextlib.asynccontextmanager
async def _lifespan(settings: Settings) -> AsyncIterator[None]:
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
async def _firing_deadlines(settings: Settings) -> AsyncIterator[None]:
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
            if settings.announcer is not None:  # the digests gathered so far go now, not with the process
                with anyio.move_on_after(FLUSH_GRACE, shield=True):
                    await settings.announcer.flush()
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
    return json_error(500, "the server failed on this request; its log has the details")


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
