"""``dial-runtime serve``: the web surface under uvicorn, built from an agent URI, a domain (or an MCP server) and
a store URL.

With ``--workers N`` uvicorn starts N processes, each importing :func:`app_from_environment`, which reads the
settings from the environment (``DIAL_SERVE_AGENT``, ``DIAL_SERVE_DOMAIN`` or ``DIAL_SERVE_MCP`` with
``DIAL_SERVE_TRUST_READ_ONLY`` and ``DIAL_SERVE_MCP_LOG``, ``DIAL_SERVE_STORE``, and the agent's options,
``DIAL_SERVE_AGENT_OPTIONS``): every worker builds the same application on the same store. With an MCP
server, each worker connects to its own (a command starts one server process per worker) when uvicorn starts the
application, and closes it when uvicorn stops.

The store is checked before uvicorn starts: one that cannot be opened and listed (a corrupt SQLite file, a
PostgreSQL server that refuses the connection) is a one-line error. At Ctrl-C (or SIGTERM) open requests get
:data:`SHUTDOWN_GRACE` seconds to finish; then uvicorn cancels them, and an event stream a page still holds open
ends quietly (no traceback).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
import attrs
import httpx
import msgspec
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.types import Message, Receive, Scope, Send

from .. import LogEntry, open_store
from ..domains.loading import load_domain
from .app import LOOPBACK_HOSTS, AgentFactory, create_app, scripted_agents

__all__ = ["McpServer", "agent_factory", "app_from_environment", "serve"]

_ENV = {
    "agent": "DIAL_SERVE_AGENT",
    "agent_options": "DIAL_SERVE_AGENT_OPTIONS",
    "domain": "DIAL_SERVE_DOMAIN",
    "store": "DIAL_SERVE_STORE",
    "mcp": "DIAL_SERVE_MCP",
    "trust_read_only": "DIAL_SERVE_TRUST_READ_ONLY",
    "mcp_log": "DIAL_SERVE_MCP_LOG",
    "conversation": "DIAL_SERVE_CONVERSATION",
    "allowed_hosts": "DIAL_SERVE_ALLOWED_HOSTS",
}

#: What ``serve`` sets on each conversation (see :class:`~dial_runtime.Conversation`): the deadlines in seconds,
#: the turns of one call, each decision's deadline.
CONVERSATION_OPTIONS = ("timeout", "reply_timeout", "idle_timeout", "max_turns", "decide_timeout")


@attrs.frozen(kw_only=True)
class McpServer:
    """The MCP server whose tools are the served domain: ``server`` (a command line or an http(s) URL),
    ``trust_read_only`` (tools it marks read-only run without asking) and ``log`` (a file its standard error is
    appended to; ``None``: discarded)."""

    server: str
    trust_read_only: bool = False
    log: str | None = None

    def domain(self, errlog: Any, elicit: Any = None) -> Any:
        """The :class:`~dial_runtime.mcp.McpDomain`, not connected yet, its server's questions answered by
        ``elicit`` (``None``: not offered); ``ValueError`` naming a bad setting."""
        try:
            from ..adapters.mcp import mcp_domain
        except ImportError as error:
            raise ValueError(f"--mcp needs the mcp extra (pip install 'dial-runtime[mcp]'): {error}") from None
        try:
            return mcp_domain(self.server, trust_read_only=self.trust_read_only, errlog=errlog, elicit=elicit)
        except ValueError as error:
            raise ValueError(f"--mcp: {error}") from None

    @contextlib.asynccontextmanager
    async def connected(self, elicit: Any = None) -> AsyncIterator[Any]:
        """The domain, connected until the block ends, its server's questions answered by ``elicit`` (an
        :class:`~dial_runtime.doors.elicitation.Elicitations`; ``None``: not offered); ``ValueError`` when the
        log or the server cannot be opened. What the SDK logs goes to the log too (a line from the server it
        cannot read, with a traceback)."""
        from ..adapters.mcp import McpConnectionError, sdk_log_to

        try:
            errlog = open(self.log or os.devnull, "a", encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as error:
            raise ValueError(f"--mcp-log: {error.strerror or error}: {self.log}") from None
        with errlog, sdk_log_to(errlog):
            try:
                async with self.domain(errlog, elicit) as served:
                    yield served
            except (OSError, McpConnectionError) as error:  # connecting: the block itself raises neither
                raise ValueError(f"--mcp: {error}") from None


def agent_factory(uri: str, domain: Any, options: Mapping[str, Any] | None = None) -> AgentFactory:
    """The agent of each run: ``outside:`` is an agent the runtime does not drive, whose proposals come through a
    door (``dial-runtime mcp``, a framework's bridge: :class:`~dial_runtime.agents.outside.OutsideAgent`);
    ``script:FILE`` (JSON, YAML or a JSON Lines log: see :func:`~dial_runtime.agents.scripted.load_script`) replies
    from the file, taken up where the conversation's log left it; any other URI is a :class:`ChatAgent`
    (``agent_from_uri``) whose history is rebuilt from the log, sharing one HTTP client, made with ``options``
    (``ChatAgent``'s keyword arguments: ``server``, the generation settings, ``grammar`` as GBNF text; ``constrain:
    True`` for the domain's own grammar, :func:`~dial_runtime.agents.domain_grammar`). ``ValueError`` for a URI,
    file or option that cannot serve."""
    scheme, _, rest = uri.partition(":")
    if scheme == "outside":  # no model, so no HTTP client: the agent is built as agent_from_uri builds it
        from ..llm import agent_from_uri

        try:
            agent_from_uri(uri)
        except ValueError as error:
            raise ValueError(f"--agent {uri!r}: {error}") from None
        return lambda conversation_id, log: agent_from_uri(uri)
    if scheme == "script":
        from ..agents.scripted import load_script

        try:
            return scripted_agents(load_script(rest))
        except ValueError as error:
            raise ValueError(f"--agent {uri!r}: {error}") from None
    from ..llm import agent_from_uri

    chosen = dict(options or {})
    client = httpx.AsyncClient(timeout=None)
    # A bad URI, option or a missing key fails now, not later.
    agent_from_uri(uri, domain=domain, client=client, **chosen)

    def build(conversation_id: str, log: Sequence[LogEntry]) -> Any:
        return agent_from_uri(uri, domain=domain, log=log, client=client, **chosen)

    return build


def build_app(
    agent: str,
    domain: str | McpServer,
    store: str,
    conversation: Mapping[str, float | None] | None = None,
    allowed_hosts: Sequence[str] = (),
    agent_options: Mapping[str, Any] | None = None,
) -> Starlette:
    """The application ``serve`` runs; ``ValueError`` naming what is wrong with a setting. ``conversation``
    holds any of :data:`CONVERSATION_OPTIONS` for every conversation (the others keep :func:`create_app`'s
    defaults); the server answers to the loopback names and ``allowed_hosts`` (:func:`create_app`'s);
    ``agent_options`` go to every agent (:func:`agent_factory`).

    Over an MCP server, the application connects to it when the ASGI server starts it (its lifespan) and builds
    the web surface then, once the tools are listed (the system prompt is written from them). What the server
    asks the user in the middle of a call is a card in the store, in a conversation of its own (``elicit:...``),
    which the panel serves with the questions' domain (:mod:`dial_runtime.doors.elicitation`).
    """
    options: dict[str, Any] = {
        name: value for name, value in (conversation or {}).items() if name in CONVERSATION_OPTIONS
    }
    options["allowed_hosts"] = (*LOOPBACK_HOSTS, *allowed_hosts)
    if isinstance(domain, str):
        served = load_domain(domain)
        return create_app(store=store, domain=served, agent=agent_factory(agent, served, agent_options), **options)
    domain.domain(None)  # a command line that cannot be read is refused now
    surface: list[Starlette] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from ..doors.elicitation import DEFAULT_WAIT, Elicitations, answering_questions

        questions = open_store(store)
        wait = options.get("decide_timeout", DEFAULT_WAIT)
        try:
            async with domain.connected(Elicitations(questions, wait=wait)) as served:
                domain_of, agent_of = answering_questions(served, agent_factory(agent, served, agent_options))
                surface.append(create_app(store=store, domain=domain_of, agent=agent_of, **options))
                async with surface[-1].router.lifespan_context(surface[-1]):  # the surface's own: its deadlines
                    yield
        finally:
            await questions.aclose()

    async def forward(scope: Scope, receive: Receive, send: Send) -> None:
        await surface[0](scope, receive, send)

    return Starlette(routes=[Mount("/", app=forward)], lifespan=lifespan)


def _settings_from_environment() -> tuple[
    str, str | McpServer, str, dict[str, float | None], list[str], dict[str, Any]
]:
    environ = os.environ
    mcp = environ.get(_ENV["mcp"])
    domain: str | McpServer = (
        environ[_ENV["domain"]]
        if mcp is None
        else McpServer(
            server=mcp,
            trust_read_only=environ.get(_ENV["trust_read_only"]) == "1",
            log=environ.get(_ENV["mcp_log"]) or None,
        )
    )
    conversation = msgspec.json.decode(environ.get(_ENV["conversation"]) or "{}")
    allowed_hosts = msgspec.json.decode(environ.get(_ENV["allowed_hosts"]) or "[]")
    agent_options = msgspec.json.decode(environ.get(_ENV["agent_options"]) or "{}")
    return environ[_ENV["agent"]], domain, environ[_ENV["store"]], conversation, allowed_hosts, agent_options


def app_from_environment() -> _EndedQuietlyAtShutdown:
    """The application a uvicorn worker builds from the settings ``serve`` put in the environment."""
    app = _EndedQuietlyAtShutdown(build_app(*_settings_from_environment()))
    _freeze_what_lives_as_long_as_the_process()
    return app


#: Seconds uvicorn lets open requests finish after Ctrl-C before it cancels them (a page's event stream never
#: finishes on its own).
SHUTDOWN_GRACE = 1


class _EndedQuietlyAtShutdown:
    """The application, with a request that uvicorn cancels as it stops (after :data:`SHUTDOWN_GRACE`, or at a
    second Ctrl-C) ended as a stopping server ends it: a response under way is closed properly (a page's
    ``EventSource`` then reconnects to whichever server answers), one not begun is a 503, and uvicorn logs no
    traceback, for it is not the application failing, neither the cancellation nor what the application raises
    while it unwinds from it (a stream closed under it). Only the server cancels a request: the application's own
    cancellations end inside their cancel scopes."""

    def __init__(self, app: Starlette) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = {"started": False, "complete": False}

        async def sending(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.start":
                state["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                state["complete"] = True

        try:
            await self.app(scope, receive, sending)
        except anyio.get_cancelled_exc_class():
            await _end(state, send)
        except Exception:
            if not _cancelled_by_the_server():
                raise
            await _end(state, send)


def _cancelled_by_the_server() -> bool:
    """Whether the request's task has been cancelled (Python 3.11 and later count it; 3.10 says no)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return callable(cancelling) and cancelling() > 0


async def _end(state: Mapping[str, bool], send: Send) -> None:
    """End a response the server stopped: a 503 when it had not begun, else its last (empty) chunk."""
    if not state["started"]:
        await send({"type": "http.response.start", "status": 503, "headers": _STOPPING_HEADERS})
        await send({"type": "http.response.body", "body": b'{"error": "the server is stopping"}'})
    elif not state["complete"]:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


_STOPPING_HEADERS = [(b"content-type", b"application/json"), (b"connection", b"close")]


def _freeze_what_lives_as_long_as_the_process() -> None:
    """Move the objects made so far (the modules, the application) out of the garbage collector's reach: they
    live until the process ends, so walking them again is wasted, in every collection while serving and in the
    last one at exit, which would otherwise take most of a second of a Ctrl-C's stop."""
    gc.freeze()


async def check_store(url: str) -> None:
    """Open the store ``url`` names and list its conversations, as every request will: a
    :class:`~dial_runtime.errors.StoreError` now (a file that is not a SQLite database, a server that refuses the
    connection) rather than a failure on every request once serving."""
    store = open_store(url)
    try:
        await store.conversations()
    finally:
        await store.aclose()


async def _probe(server: McpServer) -> None:
    """Connect to the server once, and say which of its tools are refused (one line each)."""
    async with server.connected() as served:
        for line in served.refusals():
            print(f"dial-runtime serve: --mcp: {line}", file=sys.stderr)


def serve(
    *,
    agent: str,
    domain: str | McpServer,
    store: str,
    host: str,
    port: int,
    workers: int,
    conversation: Mapping[str, float | None] | None = None,
    allowed_hosts: Sequence[str] = (),
    agent_options: Mapping[str, Any] | None = None,
) -> None:
    """Run the web surface with uvicorn until interrupted; ``ValueError`` for a bad setting (checked first: an
    MCP server is started and its tools listed once before uvicorn starts, so that one it cannot reach is a
    one-line error, not a failed startup). ``agent_options`` go to every agent of every worker, as JSON values
    (:func:`agent_factory`)."""
    import uvicorn

    open_store(store)
    app = build_app(agent, domain, store, conversation, allowed_hosts, agent_options)
    anyio.run(check_store, store)
    if isinstance(domain, McpServer):
        anyio.run(_probe, domain)
    _freeze_what_lives_as_long_as_the_process()
    if workers == 1:
        uvicorn.run(
            _EndedQuietlyAtShutdown(app),
            host=host,
            port=port,
            log_level="info",
            ws="none",
            lifespan="on",  # the deadline scheduler (and an MCP server's session) live in it
            timeout_graceful_shutdown=SHUTDOWN_GRACE,
        )
        return
    settings = {
        _ENV["agent"]: agent,
        _ENV["store"]: store,
        _ENV["conversation"]: msgspec.json.encode(dict(conversation or {})).decode(),
        _ENV["allowed_hosts"]: msgspec.json.encode(list(allowed_hosts)).decode(),
        _ENV["agent_options"]: msgspec.json.encode(dict(agent_options or {})).decode(),
    }
    if isinstance(domain, McpServer):
        settings.update(
            {
                _ENV["mcp"]: domain.server,
                _ENV["trust_read_only"]: "1" if domain.trust_read_only else "",
                _ENV["mcp_log"]: domain.log or "",
            }
        )
    else:
        settings[_ENV["domain"]] = domain
    os.environ.update(settings)
    uvicorn.run(
        "dial_runtime.web.serve:app_from_environment",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="info",
        ws="none",
        lifespan="on",
        timeout_graceful_shutdown=SHUTDOWN_GRACE,
    )
