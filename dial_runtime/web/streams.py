"""The web surface's server-sent event streams: a conversation's change notices (:class:`ChangeStream`), those of
every conversation an inbox page lists (:class:`InboxChangeStream`), and a
run's AG-UI events (:class:`EventStream`, fed through an :class:`Outbox`), and the runs being served, so that a
client's abort or a page's detach reaches the right one (:class:`Runs`, :class:`Stop`).

The events are encoded by AG-UI's ``EventEncoder`` (:func:`~dial_runtime.web.mapping.encode_sse`); the framing
is written here as plain ASGI rather than with sse-starlette, which at import replaces uvicorn's
``Server.handle_exit`` for the whole process and keeps its shutdown state in process globals, so one server's
shutdown ends or stalls the streams of every other server the process runs (an application embedding this surface
beside its own, or a test suite). A run's stream also sends the events queued meanwhile in one write, and waits a
grace after its client leaves before it stops the run: neither fits a response that iterates one event at a time.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Protocol

import anyio
import msgspec
from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunStartedEvent,
)
from starlette.types import Receive, Scope, Send

from .. import (
    Conversation,
)
from ..ports import StorePort
from .guards import LOCAL_PRINCIPAL
from .mapping import encode_sse

logger = logging.getLogger("dial_runtime.web")


class _Refused(Exception):
    """A run that cannot be taken: it ends with ``RUN_ERROR`` carrying ``code``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Detaches(Protocol):
    """Where detaches meant for another worker are kept (:mod:`~dial_runtime.stores.shared`)."""

    def note(self, conversation_id: str, run_id: str, principal: str) -> None: ...

    def noted(self, conversation_id: str, run_id: str, principal: str) -> bool: ...


def failure_words(error: Exception) -> str:
    """What a failed run tells the client: only the error's kind (its text may hold what the client must not see;
    an agent that failed to answer is ``no-reply``, in the log's words)."""
    return f"the run failed ({type(error).__name__}); the conversation is unchanged beyond what its log shows"


#: The headers of every server-sent event stream the surface serves.
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


class _WatchStream:
    """A server-sent event stream woken by the store's watch of :attr:`watched` (a conversation, or ``None``:
    every one): :meth:`first` is sent when it opens, then what :meth:`changed` makes of each change (nothing when
    it says ``None``). A comment every ``heartbeat`` seconds keeps proxies from closing an idle stream and notices
    a client that left; the stream ends when the client leaves or the store closes."""

    watched: str | None = None

    def __init__(self, store: StorePort, heartbeat: float) -> None:
        self._store = store
        self._heartbeat = heartbeat

    async def first(self) -> bytes:
        raise NotImplementedError

    async def changed(self, change: str | None, changes: AsyncIterator[str | None]) -> bytes | None:
        raise NotImplementedError

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as group:

            async def left() -> None:  # the client went away: stop watching
                while (await receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()

            group.start_soon(left)
            async with self._store.watch(self.watched) as changes:
                opening = b"retry: %d\n" % RECONNECT_MS + await self.first()
                await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
                await send({"type": "http.response.body", "body": opening, "more_body": True})
                while True:
                    change: object = ENDED
                    with anyio.move_on_after(self._heartbeat) as waited:
                        change = await anext(changes, ENDED)
                    if waited.cancelled_caught:
                        await send({"type": "http.response.body", "body": b": still here\n\n", "more_body": True})
                        continue
                    if change is ENDED:  # the store closed
                        break
                    assert change is None or isinstance(change, str)
                    body = await self.changed(change, changes)
                    if body is not None:
                        await send({"type": "http.response.body", "body": body, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            group.cancel_scope.cancel()


class ChangeStream(_WatchStream):
    """``changed`` events (data: ``{"threadId": ..., "seq": N}``, the log's last seq) for one conversation: one
    when the stream opens, then one each time the log grows, woken by the store's watch (PostgreSQL's
    ``LISTEN``/``NOTIFY`` across workers). The events carry no content: the page reads the conversation
    through ``/agui`` (a snapshot), where ``can_view`` and ``auth`` apply as for any run."""

    def __init__(self, store: StorePort, thread: str, heartbeat: float) -> None:
        super().__init__(store, heartbeat)
        self.watched = thread
        self._thread = thread
        self._seq = 0

    def _event(self, seq: int) -> bytes:
        data = msgspec.json.encode({"threadId": self._thread, "seq": seq}).decode()
        return f"event: changed\ndata: {data}\n\n".encode()

    async def first(self) -> bytes:
        entries = await self._store.read(self._thread)
        self._seq = entries[-1].seq if entries else 0
        return self._event(self._seq)

    async def changed(self, change: str | None, changes: AsyncIterator[str | None]) -> bytes | None:
        fresh = await self._store.read(self._thread, after_seq=self._seq)
        if not fresh:
            return None
        self._seq = fresh[-1].seq
        return self._event(self._seq)


class InboxChangeStream(_WatchStream):
    """``changed`` events (data: ``{"threadIds": [...]}``, the conversations whose logs grew; ``[]`` when the store
    cannot say which) for an inbox page: one when the stream opens, then one each time any conversation the caller
    may see changes, woken by the store's watch of every conversation (PostgreSQL's ``LISTEN``/``NOTIFY`` across
    workers). Changes that come close together are sent as one event, at most one each :data:`INBOX_COALESCE`
    seconds, so a busy store does not make every open inbox read again for each append. The events carry ids only:
    the page reads the cards through ``GET /inbox/cards``."""

    def __init__(self, store: StorePort, heartbeat: float, visible: Callable[[str], bool]) -> None:
        super().__init__(store, heartbeat)
        self._visible = visible

    @staticmethod
    def _event(ids: Iterable[str]) -> bytes:
        data = msgspec.json.encode({"threadIds": sorted(ids)}).decode()
        return f"event: changed\ndata: {data}\n\n".encode()

    async def first(self) -> bytes:
        return self._event(())

    async def changed(self, change: str | None, changes: AsyncIterator[str | None]) -> bytes | None:
        named: set[str] = set() if change is None else {change}
        anything = change is None
        with anyio.move_on_after(INBOX_COALESCE):  # what else changes meanwhile goes in this event
            async for more in changes:
                anything = anything or more is None
                if more is not None:
                    named.add(more)
        shown = {each for each in named if self._visible(each)}
        return self._event(shown) if shown or anything else None


#: The shortest time between two events of an inbox's change stream (seconds).
INBOX_COALESCE = 0.1

ENDED = object()

#: How long a browser's EventSource waits before it reconnects a change stream that broke (a worker that died).
RECONNECT_MS = 1000


#: The most bytes a detach's body may hold (two ids).
DETACH_MAX_BODY = 4096


class Stop:
    """How a run stops when its client closes the request (AG-UI's abort: ``HttpAgent.abortRun()``, the panel's
    Stop): the conversation driving it, once open, is told who stopped it, so the log records the interruption in
    those words, then the run is cancelled. What the run did before stays in the log; the log's writes are never
    cut short. ``detached`` is set when the run should go on without its client (a page that went away)."""

    def __init__(self, principal: str) -> None:
        self.scope = anyio.CancelScope()
        self.conversation: Conversation | None = None
        self.principal = principal
        # Without sign-in, the one person at the panel stopped it: "local" names nobody a reader knows.
        self.why = "cancelled by the person" if principal == LOCAL_PRINCIPAL else f"cancelled by {principal}"
        self.detached = anyio.Event()

    def __call__(self) -> None:
        if self.conversation is not None:
            self.conversation.cancelling(self.why)
        self.scope.cancel()


class Runs:
    """The runs this worker is serving, by conversation and run id: what a detach names, and what tells a
    snapshot that a conversation is driven here."""

    def __init__(self) -> None:
        self._by_thread: dict[str, dict[str, Stop]] = {}

    @contextlib.contextmanager
    def serving(self, thread: str, run_id: str, stop: Stop) -> Iterator[None]:
        runs = self._by_thread.setdefault(thread, {})
        runs[run_id] = stop
        try:
            yield
        finally:
            if runs.get(run_id) is stop:
                del runs[run_id]
            if not runs:
                self._by_thread.pop(thread, None)

    def find(self, thread: str, run_id: str) -> Stop | None:
        return self._by_thread.get(thread, {}).get(run_id)

    def driving(self, thread: str) -> bool:
        """Whether a run of this worker has the conversation open (and so holds its lock)."""
        return any(stop.conversation is not None for stop in self._by_thread.get(thread, {}).values())


class EventStream:
    """An AG-UI event stream: ``RUN_STARTED``, what the run emits, and ``RUN_ERROR`` if it is refused or fails.

    A client that closes the request aborts the run: ``grace`` seconds later, unless it was detached meanwhile,
    the run is stopped, and ends ``RUN_FINISHED`` with the cancelled outcome. A detached run goes on to its end,
    its events sent nowhere: the log keeps what it does.
    """

    def __init__(
        self,
        run: Callable[[Callable[[BaseEvent], None], Stop], Awaitable[None]],
        run_input: RunAgentInput,
        principal: str,
        *,
        runs: Runs,
        grace: float,
        detaches: Detaches | None = None,
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
        outbox = Outbox()
        stop = Stop(self._principal)
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
                        outbox.put(RunErrorEvent(message=failure_words(error), code="run-failed"))
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


class Outbox:
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
