"""The web surface: an ASGI application (Starlette) that hosts many durable conversations on one store and speaks
AG-UI over server-sent events, and serves the ``<dial-chat>`` panel.

Every run drives a conversation through the public API only (``Conversation.open``, ``say``, ``decide``,
``answer``, ``pending``, ``log``): the person is a human that defers every decision and answer, so a run that needs
the person ends ``awaiting`` and its pending suggestions and asks become AG-UI interrupts; the next run's
``resume`` entries become ``decide`` and ``answer`` calls, decided by the principal ``auth`` returned.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import anyio
from ag_ui.core import (
    BaseEvent,
    MessagesSnapshotEvent,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
)
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from .. import (
    Accept,
    AlreadyDecided,
    Ask,
    Conversation,
    ConversationBusy,
    Defer,
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
from ..runtime.events import Event, InformDeltaEvent
from ..runtime.projection import Projection, project
from .mapping import EventMapper, interrupt_for, interrupt_id, messages_of

__all__ = ["AgentFactory", "create_app", "scripted_agents"]

logger = logging.getLogger("dial_runtime.web")

#: Builds the agent for one run of a conversation from its id and its stored log (each run gets its own agent,
#: rebuilt from the log: a chat agent's history, a scripted agent's position).
AgentFactory = Callable[[str, Sequence[LogEntry]], Any]

_THREAD_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
_STATIC = resources.files("dial_runtime.web") / "static"
_ENCODER = EventEncoder()


class _Refused(Exception):
    """A run that cannot be taken: it ends with ``RUN_ERROR`` carrying ``code``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class _DeferringHuman:
    """The person on the web: every decision and answer comes in a later request."""

    def decide(self, suggestion: Suggestion) -> Defer:
        return Defer()

    def answer(self, ask: Ask) -> Defer:
        return Defer()


class _NoAgent:
    """The agent of a conversation only read (a snapshot): it is never sent anything."""

    def send(self, message: str) -> str:
        raise RuntimeError("a snapshot sends nothing to the agent")


class _AgentOnFirstUse:
    """A run's agent, built by the factory the first time the conversation talks to it: inside a call, so under
    the conversation's lock and with its log as the store holds it (folded, caught up with what other workers
    wrote, and recovered), never from a copy read before the lock was taken."""

    def __init__(self, factory: AgentFactory, conversation_id: str) -> None:
        self._factory = factory
        self._id = conversation_id
        self._built: Any = None
        self.conversation: Conversation | None = None

    def _agent(self) -> Any:
        if self._built is None:
            assert self.conversation is not None, "the agent is used only by the conversation's calls"
            self._built = self._factory(self._id, self.conversation.log)
        return self._built

    def send(self, message: str) -> Any:
        return self._agent().send(message)

    def __getattr__(self, name: str) -> Any:
        if name == "stream":  # asked for at each send: the built agent streams or not
            return self._agent().stream
        raise AttributeError(name)

    async def aclose(self) -> None:
        close = getattr(self._built, "aclose", None)
        if close is not None:
            await close()


@dataclass(frozen=True)
class _Step:
    """One call a run makes on the conversation."""

    call: Callable[[Conversation], Awaitable[TurnResult]]


@dataclass
class _Settings:
    store: StorePort
    domain: Any
    agent: AgentFactory
    auth: Callable[[Request], Any] | None
    can_decide: Callable[[str, Suggestion | Ask], bool] | None
    can_view: Callable[[str, str], bool] | None
    origins: frozenset[str]
    max_body: int
    max_text: int
    heartbeat: float
    options: dict[str, Any] = field(default_factory=dict)


def create_app(
    *,
    store: StorePort | str,
    domain: Any,
    agent: AgentFactory,
    auth: Callable[[Request], Any] | None = None,
    can_decide: Callable[[str, Suggestion | Ask], bool] | None = None,
    can_view: Callable[[str, str], bool] | None = None,
    allowed_origins: Iterable[str] = (),
    max_body: int = 1 << 20,
    max_text: int = 64 << 10,
    panel: bool = True,
    timeout: float | None = 90.0,
    reply_timeout: float | None = 300.0,
    idle_timeout: float | None = 30.0,
    max_turns: int = 8,
    decide_timeout: float | None = None,
    heartbeat: float = 15.0,
) -> Starlette:
    """The ASGI application: ``POST /agui`` (AG-UI runs), ``GET /conversations``, ``GET
    /conversations/{id}/changes`` (a server-sent event each time a conversation's log grows, in any worker; a
    comment every ``heartbeat`` seconds while it does not), and the panel at ``/``.

    ``store`` is a :class:`StorePort` or its URL (one store holds every conversation; PostgreSQL when several
    workers share it). ``domain`` serves every conversation. ``agent(conversation_id, log)`` builds the agent of
    one run. ``auth(request)`` (plain or ``async``) returns the caller's principal, or ``None`` to refuse the
    request (401); it is what decisions are logged ``by``, never a value the client sends. Without ``auth`` every
    caller is ``"local"``: bind such a server to 127.0.0.1. ``can_decide(principal, suggestion_or_ask)`` says who
    may decide what (default: anyone who may view); ``can_view(principal, conversation_id)`` who may see a
    conversation (default: everyone). A state-changing request whose ``Origin`` is neither the server's own nor in
    ``allowed_origins`` is refused (403); a body over ``max_body`` bytes (413) and words over ``max_text``
    characters are refused. ``timeout``, ``reply_timeout``, ``idle_timeout``, ``max_turns`` and ``decide_timeout``
    are each conversation's (see :class:`~dial_runtime.Conversation`).
    """
    settings = _Settings(
        store=open_store(store) if isinstance(store, str) else store,
        domain=domain,
        agent=agent,
        auth=auth,
        can_decide=can_decide,
        can_view=can_view,
        origins=frozenset(origin.rstrip("/") for origin in allowed_origins),
        max_body=max_body,
        max_text=max_text,
        heartbeat=heartbeat,
        options={
            "timeout": timeout,
            "reply_timeout": reply_timeout,
            "idle_timeout": idle_timeout,
            "max_turns": max_turns,
            "decide_timeout": decide_timeout,
        },
    )
    surface = _WebSurface(settings)
    routes: list[Route | Mount] = [
        Route("/agui", surface.agui, methods=["POST"]),
        Route("/conversations", surface.conversations, methods=["GET"]),
        Route("/conversations/{thread}/changes", surface.changes, methods=["GET"]),
    ]
    if panel:
        routes += [
            Route("/", _panel, methods=["GET"]),
            Mount("/static", app=StaticFiles(directory=str(_STATIC)), name="static"),
        ]
    return Starlette(routes=routes)


async def _panel(request: Request) -> Response:
    return FileResponse(str(_STATIC / "index.html"), headers={"Cache-Control": "no-cache"})


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class _WebSurface:
    """The handlers, sharing the settings."""

    def __init__(self, settings: _Settings) -> None:
        self.settings = settings

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
        origin = request.headers.get("origin")
        if origin is not None and origin.rstrip("/") not in self._origins(request):
            return _error(403, f"origin {origin[:200]!r} may not post here")
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
        return _EventStream(lambda emit: self._run(run, principal, words, emit), run)

    def _origins(self, request: Request) -> frozenset[str]:
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        return self.settings.origins | {own}

    async def _run(
        self, run: RunAgentInput, principal: str, words: str | None, emit: Callable[[BaseEvent], None]
    ) -> None:
        """Drive the conversation for one run, emitting its AG-UI events (RUN_STARTED is already out)."""
        settings = self.settings
        thread = run.thread_id
        entries = await settings.store.read(thread)
        if words is None and not run.resume:
            # Rebuilt in memory, not opened: a snapshot takes no lock, and shows a call that a dead worker left
            # open as the next run will find it (a started action failed, what waited waiting).
            held = Conversation(agent=_NoAgent(), domain=settings.domain, human=_DeferringHuman(), log=entries)
            held.recover()
            seen = project(held.log)
            emit(MessagesSnapshotEvent(messages=messages_of(seen)))
            emit(self._finished(run, principal, held, seen, stored=entries[-1].seq if entries else 0))
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

        agent = _AgentOnFirstUse(settings.agent, thread)
        try:
            conversation = await Conversation.open(
                settings.store,
                thread,
                agent=agent,
                domain=settings.domain,
                human=_DeferringHuman(),
                on_event=on_event,
                **settings.options,
            )
            agent.conversation = conversation
            opened.append(conversation)
            for mapped in catch_up():
                emit(mapped)
            steps = self._plan(conversation, mapper.projection, run.resume or [], words, principal)
            for step in steps:
                await step.call(conversation)
        except ConversationBusy:
            raise _Refused("busy", "another run is driving this conversation; try again") from None
        except AlreadyDecided as error:  # another tab or worker decided it between this run's check and its call
            raise _already(error) from None
        except PayloadChanged as error:
            raise _Refused("digest-mismatch", f"{error}; reload") from None
        finally:
            for mapped in [*catch_up(), *mapper.close()]:
                emit(mapped)
            await agent.aclose()
        log = conversation.log
        emit(self._finished(run, principal, conversation, mapper.projection, stored=log[-1].seq if log else 0))

    def _finished(
        self,
        run: RunAgentInput,
        principal: str,
        conversation: Conversation,
        seen: Projection,
        *,
        stored: int,
    ) -> RunFinishedEvent:
        """The run's last event; ``metadata.seq`` is the stored log's last seq the run saw (or wrote), which the
        change stream's events are compared with: a page that has shown seq N needs no snapshot for a change at
        N. ``result`` is the conversation's result once its flow reached a final state (``None`` before)."""
        marks = {"seq": stored}
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
    ) -> list[_Step]:
        """The calls a run makes, every resume entry checked first: a refusal raises and nothing has changed
        (``projection``: the projection of the conversation's log as it was opened)."""
        waiting = {interrupt_id(each.id, projection.refusals(each.id)): each for each in conversation.pending}
        steps: list[_Step] = []
        cancelled: list[Suggestion] = []
        seen: set[str] = set()
        for entry in resume:
            if entry.interrupt_id in seen:
                raise _Refused("invalid-resume", f"interrupt {entry.interrupt_id!r} is answered twice")
            seen.add(entry.interrupt_id)
            subject = waiting.get(entry.interrupt_id)
            if subject is None:
                raise _unknown(entry.interrupt_id, waiting.values(), projection)
            if not self._may_decide(principal, subject):
                raise _Refused("forbidden", f"{principal} may not decide {subject.id!r}")
            if entry.status == "cancelled":
                if words is None:
                    raise _Refused(
                        "invalid-resume",
                        f"interrupt {entry.interrupt_id!r}: cancelling needs a new user message (say something "
                        "else); to not run a suggestion, resolve it with {approved: false}",
                    )
                if isinstance(subject, Suggestion):
                    cancelled.append(subject)
                continue
            steps.append(_resolution(entry, subject, principal))
        if words is not None:
            if cancelled:
                first = cancelled[0].id
                steps.append(_Step(lambda conversation: conversation.decide(first, Say(words), by=principal)))
            else:
                steps.append(_Step(lambda conversation: conversation.say(words)))
        return steps


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
    decision: Accept | Edit | Dismiss
    if not approved:
        decision = Dismiss()
    elif "editedArgs" in payload:
        decision = Edit(payload["editedArgs"])
    else:
        decision = Accept()
    suggestion_id = subject.id
    return _Step(lambda conversation: conversation.decide(suggestion_id, decision, by=principal, shown=digest))


def _unknown(interrupt: str, waiting: Iterable[Suggestion | Ask], seen: Projection) -> _Refused:
    """Why a resume names an interrupt that does not wait: replaced after a refused edit, decided elsewhere (by
    whom), ended otherwise, or never asked."""
    subject = interrupt.rpartition("~")[0] or interrupt
    if any(each.id == subject for each in waiting):
        return _Refused("stale-interrupt", f"interrupt {interrupt!r} was replaced after a refused edit; reload")
    ended = seen.already_decided(subject)
    if ended is not None:
        return _already(ended)
    return _Refused("unknown-interrupt", f"no interrupt {interrupt!r} waits in this conversation")


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


class _EventStream:
    """An AG-UI event stream: ``RUN_STARTED``, what the run emits, and ``RUN_ERROR`` if it is refused or fails.

    The run is shielded from the client: a page that reloads or loses its connection mid-turn does not cancel the
    agent's turn; the turn ends as it would have, in the log, and the next snapshot shows it.
    """

    def __init__(
        self, run: Callable[[Callable[[BaseEvent], None]], Awaitable[None]], run_input: RunAgentInput
    ) -> None:
        self._drive = run
        self._input = run_input

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        sender, receiver = anyio.create_memory_object_stream[BaseEvent](math.inf)

        async def produce() -> None:
            with anyio.CancelScope(shield=True), sender:
                try:
                    await self._drive(sender.send_nowait)
                except _Refused as refusal:
                    sender.send_nowait(RunErrorEvent(message=str(refusal), code=refusal.code))
                except Exception as error:
                    logger.error("run of %s failed: %s", self._input.thread_id, type(error).__name__)
                    sender.send_nowait(RunErrorEvent(message=_failure(error), code="run-failed"))

        started = RunStartedEvent(thread_id=self._input.thread_id, run_id=self._input.run_id)
        async with anyio.create_task_group() as group:
            group.start_soon(produce)
            await send(
                {"type": "http.response.body", "body": _ENCODER.encode(started).encode(), "more_body": True}
            )
            async with receiver:
                async for event in receiver:
                    chunk = _ENCODER.encode(event).encode()
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _failure(error: Exception) -> str:
    """What a failed run tells the client: the agent's own error (which never holds a key), else only its kind."""
    from ..agents import AgentError

    if isinstance(error, AgentError):
        return f"the agent failed: {error}"
    if isinstance(error, LookupError):
        return f"the agent has no reply: {error}"
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
