"""Deadlines that fire with nobody watching: a suggestion that waits for the person ends ``dismissed``,
``expired`` at its deadline even when no process holds its conversation.

A :class:`DeadlineScheduler` is told, after each call, what waits in a conversation (``Conversation.deadlines``);
at each deadline it opens the conversation and calls :meth:`~dial_runtime.Conversation.expire_due`, which ends
what is due exactly once, under the store's lock. Scheduling is idempotent, and a job whose suggestion was
decided (or expired) meanwhile does nothing.

- :class:`PostgresDeadlines`: one Procrastinate job per (conversation, suggestion), in the store's PostgreSQL
  database (Procrastinate's own tables), run by worker processes (:func:`run_worker`) or inside a server. Jobs
  survive restarts and crashes: any worker fires them. asyncio only, as Procrastinate is.
- :class:`LocalDeadlines`: for embedded stores (SQLite, memory), a task of the serving process that sleeps until
  the soonest deadline it was told of; it forgets everything when the process ends, so the process gives it what
  waits when it starts (:func:`waiting`).
"""

from __future__ import annotations

import contextlib
import datetime
import heapq
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.abc
import sniffio

from ..driver.built import AgentOnFirstUse, DeferringHuman, DomainOnFirstUse
from ..errors import ConversationBusy, LogError, StoreError
from ..runtime.state import ConversationState, fold_log

if TYPE_CHECKING:
    from ..driver.conversation import Conversation
    from ..ports import StorePort

__all__ = [
    "DeadlineScheduler",
    "LocalDeadlines",
    "OpenConversation",
    "PostgresDeadlines",
    "conversation_opener",
    "expire",
    "run_worker",
    "waiting",
]

logger = logging.getLogger("dial_runtime.deadlines")

#: Opens a stored conversation by its id, as the serving process builds it (its agent, domain, human, options).
OpenConversation = Callable[[str], Awaitable["Conversation"]]

#: The Procrastinate task that fires one deadline, and the one that puts back the jobs of workers that died.
TASK = "dial_runtime.expire_deadline"
RECOVER_TASK = "dial_runtime.retry_stalled_deadlines"

#: How long :func:`expire` retries a conversation another worker holds (seconds), and its longest pause.
BUSY_FOR = 10.0
BUSY_PAUSE = 0.5


class DeadlineScheduler(Protocol):
    """Fires the deadlines of suggestions that wait for the person."""

    async def schedule(self, conversation_id: str, deadlines: Sequence[tuple[str, float]]) -> None:
        """Make sure each ``(suggestion_id, deadline)`` (seconds since the epoch; ``Conversation.deadlines``) of
        the conversation fires at its deadline; scheduling one again changes nothing."""
        ...


async def expire(
    open_conversation: OpenConversation, conversation_id: str, *, busy_for: float = BUSY_FOR
) -> Conversation:
    """Open the conversation and end what is due (``expire_due``); returns it, what still waits in
    ``deadlines``. While another worker holds it, tries again after a pause that doubles from 20 ms to
    :data:`BUSY_PAUSE`, for ``busy_for`` seconds, then raises :class:`ConversationBusy`."""
    pause, give_up = 0.02, time.monotonic() + busy_for
    while True:
        conversation: Conversation | None = None
        try:
            conversation = await open_conversation(conversation_id)
            await conversation.expire_due()
            return conversation
        except ConversationBusy:
            if time.monotonic() + pause > give_up:
                raise
        finally:
            if conversation is not None and isinstance(conversation.agent, AgentOnFirstUse):
                with anyio.CancelScope(shield=True):
                    await conversation.agent.aclose()
        await anyio.sleep(pause)
        pause = min(pause * 2, BUSY_PAUSE)


async def waiting(store: StorePort) -> dict[str, list[tuple[str, float]]]:
    """What waits in every conversation of ``store``: each one's ``(suggestion_id, time)``, the soonest time each
    deferred suggestion has coming (a reminder, an escalation, its deadline, the next check of its premise),
    soonest first (conversations with none are left out), read from the stored logs without taking any lock; a log
    that does not fold is logged and skipped. For a scheduler that starts empty (:class:`LocalDeadlines`), or to
    schedule logs written before a scheduler was in place."""
    found: dict[str, list[tuple[str, float]]] = {}
    now = time.time()
    for conversation_id in await store.conversations():
        state = ConversationState()
        try:
            fold_log(await store.read(conversation_id), state)
        except LogError as error:
            logger.warning(
                "conversation %r does not fold (%s): its deadlines are not scheduled", conversation_id, error
            )
            continue
        soonest = ((o.id, o.soonest(now)) for o in state.open_suggestions.values())
        deadlines = sorted(
            ((ident, when) for ident, when in soonest if when is not None), key=lambda pair: pair[1]
        )
        if deadlines:
            found[conversation_id] = deadlines
    return found


def conversation_opener(
    store: StorePort, *, agent: Any, domain: Any, describing: Any = None, **options: Any
) -> OpenConversation:
    """An :data:`OpenConversation` for a worker, built as ``create_app`` builds a run's conversation: ``agent``
    (``agent(conversation_id, log)``) and, for a domain factory (a callable without ``run``), the domain are built
    only if a call uses them; the person defers everything; ``options`` are ``Conversation``'s
    (``decide_timeout``, ``max_turns``, ...). ``describing`` is the domain that describes a factory's
    conversations (their flow), when the caller has built it already; else ``domain("", [])`` is built here."""
    from ..driver.conversation import Conversation

    factory: Callable[[str, Sequence[Any]], Any] | None = None
    if not callable(getattr(domain, "run", None)):
        if not callable(domain):
            raise TypeError("conversation_opener: domain must be a domain (with a run method) or a domain factory")
        factory, domain = domain, domain("", []) if describing is None else describing
    human = DeferringHuman()

    async def open_conversation(conversation_id: str) -> Conversation:
        lazy_agent = AgentOnFirstUse(agent, conversation_id)
        lazy_domain = None if factory is None else DomainOnFirstUse(factory, conversation_id, domain)
        conversation = Conversation(
            store=store,
            conversation_id=conversation_id,
            agent=lazy_agent,
            domain=domain if lazy_domain is None else lazy_domain,
            human=human,
            **options,
        )
        lazy_agent.conversation = conversation
        if lazy_domain is not None:
            lazy_domain.conversation = conversation
        return conversation

    return open_conversation


class LocalDeadlines:
    """The deadlines of an embedded store (SQLite, memory), fired by a task of this process.

    ``async with LocalDeadlines(open_conversation) as deadlines:`` (or ``await deadlines.run()`` in a task group
    of your own) sleeps until the soonest deadline scheduled, then expires its conversation (:func:`expire`; one
    another task holds is tried again for ``busy_for`` seconds, then a second later), and schedules what still
    waits there. It holds one time per conversation, the soonest, in memory only: give it :func:`waiting` when
    the process starts. ``clock`` is the conversations' (seconds since the epoch). Runs on trio and asyncio.
    """

    def __init__(
        self,
        open_conversation: OpenConversation,
        *,
        clock: Callable[[], float] = time.time,
        busy_for: float = BUSY_FOR,
    ) -> None:
        self._open = open_conversation
        self._clock = clock
        self._busy_for = busy_for
        self._heap: list[tuple[float, str]] = []
        self._next: dict[str, float] = {}  # when each conversation is next expired
        self._firing: set[str] = set()
        self._again: set[str] = set()  # came due while being fired: fired again after
        self._changed: anyio.Event | None = None
        self._group: anyio.abc.TaskGroup | None = None

    @property
    def scheduled(self) -> list[tuple[str, float]]:
        """When each conversation with a deadline is next expired, soonest first."""
        return sorted(self._next.items(), key=lambda each: each[1])

    async def schedule(self, conversation_id: str, deadlines: Sequence[tuple[str, float]]) -> None:
        """Expire the conversation at the soonest of ``deadlines`` (or sooner, if scheduled so already)."""
        if deadlines:
            self._add(conversation_id, min(deadline for _, deadline in deadlines))

    def _add(self, conversation_id: str, when: float) -> None:
        current = self._next.get(conversation_id)
        if current is not None and current <= when:
            return
        self._next[conversation_id] = when
        heapq.heappush(self._heap, (when, conversation_id))
        if self._changed is not None:
            self._changed.set()

    async def __aenter__(self) -> LocalDeadlines:
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        await group.start(self.run)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool | None:
        assert self._group is not None
        group, self._group = self._group, None
        group.cancel_scope.cancel()
        return await group.__aexit__(kind, error, trace)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Fire deadlines as they come, until cancelled."""
        async with anyio.create_task_group() as firing:
            task_status.started()
            while True:
                self._changed = anyio.Event()
                for conversation_id in self._due():
                    self._firing.add(conversation_id)
                    firing.start_soon(self._fire, conversation_id)
                wait = math.inf if not self._heap else self._heap[0][0] - self._clock()
                if wait > 0:
                    with anyio.move_on_after(wait):
                        await self._changed.wait()

    def _due(self) -> list[str]:
        """The conversations whose time has come, taken off the schedule (one being fired: once it is done)."""
        now, due = self._clock(), []
        while self._heap and self._heap[0][0] <= now:
            when, conversation_id = heapq.heappop(self._heap)
            if self._next.get(conversation_id) != when:
                continue  # overtaken by a sooner time
            del self._next[conversation_id]
            if conversation_id in self._firing:
                self._again.add(conversation_id)
            else:
                due.append(conversation_id)
        return due

    async def _fire(self, conversation_id: str) -> None:
        try:
            conversation = await expire(self._open, conversation_id, busy_for=self._busy_for)
        except ConversationBusy:
            logger.info("conversation %r stays busy: its deadlines fire a second later", conversation_id)
            self._add(conversation_id, self._clock() + 1.0)
        except Exception:
            logger.exception("expiring the deadlines of conversation %r failed", conversation_id)
        else:
            waits = conversation.deadlines
            if waits:  # one not due by the conversation's clock when it was read is fired a moment later
                self._add(conversation_id, max(waits[0][1], self._clock() + 0.05))
        finally:
            self._firing.discard(conversation_id)
            if conversation_id in self._again:
                self._again.discard(conversation_id)
                self._add(conversation_id, self._clock())


def _asyncio_only(what: str) -> None:
    """Refuse a caller that does not run on asyncio: Procrastinate does only."""
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        library = None
    if library != "asyncio":
        here = library or "no event loop"
        raise RuntimeError(
            f"PostgresDeadlines.{what}: Procrastinate runs on asyncio only (this is {here}); "
            "run the server under asyncio (uvicorn does) or the deadlines in a worker process (run_worker)"
        )


class PostgresDeadlines:
    """The deadlines of a PostgreSQL store, as Procrastinate jobs in the same database.

    ``async with PostgresDeadlines(url, open_conversation=...) as deadlines:`` opens a connection pool and
    applies Procrastinate's schema when its tables are missing (under an advisory lock, so workers starting
    together apply it once; an older Procrastinate's tables need its migrations). :meth:`schedule` defers one job
    per (conversation, suggestion) at its deadline, with a queueing lock naming both, so scheduling again makes no
    second job while the first waits. :meth:`run` works the jobs of ``queue`` until cancelled: each
    expires its conversation (:func:`expire`) through ``open_conversation`` (a conversation another worker holds is
    tried again for ``busy_for`` seconds, then the job is retried); when the suggestion still waits (this
    machine's clock is behind the database's), the job waits up to ``skew`` seconds for its deadline, else
    defers itself again.

    A job fires within ``poll`` seconds of its time, plus the expiry itself: Procrastinate's NOTIFY wakes a worker
    for a job due now, never for one scheduled later, so each worker looks for due jobs every ``poll`` seconds
    (one indexed query each time; ``poll=0.2`` is five a second per worker). Each worker runs up to
    ``concurrency`` jobs at once (each holds a store connection while its conversation is open), sends a
    heartbeat every ``heartbeat`` seconds, and every ``recover_every`` seconds one of them puts back the jobs
    of workers silent for ``stalled_after`` seconds (a worker killed mid-job), so those fire too, late. Finished
    jobs are deleted. Procrastinate is asyncio only: on trio every method raises ``RuntimeError``.
    """

    def __init__(
        self,
        url: str,
        *,
        open_conversation: OpenConversation | None = None,
        queue: str = "dial-deadlines",
        poll: float = 0.2,
        concurrency: int = 8,
        heartbeat: float = 5.0,
        stalled_after: float = 30.0,
        recover_every: int = 10,
        busy_for: float = BUSY_FOR,
        skew: float = 5.0,
        pool_size: int = 4,
    ) -> None:
        try:
            import procrastinate
        except ImportError as error:
            raise ImportError(
                "PostgresDeadlines needs Procrastinate: pip install 'dial-runtime[postgres]'"
            ) from error
        if not 0 < poll <= 60:
            raise ValueError("PostgresDeadlines: poll must be between 0 and 60 seconds")
        if not 1 <= recover_every <= 59:
            raise ValueError("PostgresDeadlines: recover_every must be 1 to 59 seconds")
        self.url = url
        self.queue = queue
        self.poll = poll
        self.concurrency = concurrency
        self.heartbeat = heartbeat
        self.stalled_after = stalled_after
        self._open = open_conversation
        self._busy_for = busy_for
        self._skew = skew
        connector = procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=max(2, pool_size))
        self._app = procrastinate.App(connector=connector)
        self._opened = False
        retry = procrastinate.RetryStrategy(
            max_attempts=10, wait=1, exponential_wait=2, retry_exceptions={ConversationBusy, StoreError, _NotYet}
        )
        self._fire_task = self._app.task(name=TASK, queue=queue, retry=retry)(self._fire)
        recover = self._app.task(name=RECOVER_TASK, queue=queue)(self._recover)
        self._app.periodic(cron=f"* * * * * */{recover_every}", periodic_id="stalled")(recover)

    async def __aenter__(self) -> PostgresDeadlines:
        _asyncio_only("__aenter__")
        await _apply_schema(self.url)
        await self._app.open_async()
        self._opened = True
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._opened = False
        await self._app.close_async()

    async def schedule(self, conversation_id: str, deadlines: Sequence[tuple[str, float]]) -> None:
        """Defer a job for each ``(suggestion_id, deadline)`` not scheduled yet (one job per suggestion)."""
        _asyncio_only("schedule")
        if not self._opened:
            raise RuntimeError("PostgresDeadlines.schedule: use it inside `async with`")
        import procrastinate.exceptions

        for suggestion_id, deadline in deadlines:
            job = self._fire_task.configure(
                queueing_lock=_lock(conversation_id, suggestion_id),
                schedule_at=datetime.datetime.fromtimestamp(deadline, tz=datetime.timezone.utc),
            )
            with contextlib.suppress(procrastinate.exceptions.AlreadyEnqueued):  # it waits already
                await job.defer_async(
                    conversation_id=conversation_id, suggestion_id=suggestion_id, deadline=deadline
                )

    async def run(self, *, ready: Callable[[], object] | None = None, signals: bool = False) -> None:
        """Work the deadline jobs until cancelled (or, with ``signals``, until SIGINT or SIGTERM, for a process of
        its own); ``ready()`` is called once jobs are being fetched."""
        _asyncio_only("run")
        if self._open is None:
            raise TypeError("PostgresDeadlines.run: a worker needs open_conversation")
        if not self._opened:
            raise RuntimeError("PostgresDeadlines.run: use it inside `async with`")
        if ready is not None:
            ready()
        await self._app.run_worker_async(
            queues=[self.queue],
            concurrency=self.concurrency,
            fetch_job_polling_interval=self.poll,
            abort_job_polling_interval=max(self.poll, 5.0),
            update_heartbeat_interval=self.heartbeat,
            stalled_worker_timeout=self.stalled_after,
            shutdown_graceful_timeout=5.0,
            delete_jobs="successful",
            install_signal_handlers=signals,
        )

    async def _fire(self, conversation_id: str, suggestion_id: str, deadline: float) -> None:
        """The job: expire the conversation; when the suggestion still waits, defer a job for its next time (a
        reminder fired, a premise checked and holding), or wait for this one when it is not due yet by this
        machine's clock."""
        assert self._open is not None
        for _ in range(3):
            conversation = await expire(self._open, conversation_id, busy_for=self._busy_for)
            left = dict(conversation.deadlines).get(suggestion_id)
            if left is None:
                return  # expired now, or decided or expired before: nothing more to do
            wait = left - time.time()
            # A later time of its own, a reused conversation id, or a clock far off: fire at the log's time.
            if left > deadline or wait > self._skew:
                await self.schedule(conversation_id, [(suggestion_id, left)])
                return
            await anyio.sleep(max(wait, 0.0) + 0.01)
        raise _NotYet(f"suggestion {suggestion_id!r} of {conversation_id!r} still waits past its deadline")

    async def _recover(self, timestamp: int) -> None:
        """The periodic job: put back the deadline jobs of workers whose heartbeat stopped."""
        from procrastinate import jobs

        manager = self._app.job_manager
        stalled = await manager.get_stalled_jobs(
            queue=self.queue, task_name=TASK, seconds_since_heartbeat=self.stalled_after
        )
        for job in stalled:
            try:
                await manager.retry_job(job)
            except Exception:  # a newer job with its queueing lock waits: that one fires the deadline
                await manager.finish_job(job=job, status=jobs.Status.FAILED, delete_job=True)


class _NotYet(Exception):
    """A deadline job ran while its suggestion still waited by the conversation's clock."""


def _lock(conversation_id: str, suggestion_id: str) -> str:
    return f"dial-deadline:{len(conversation_id)}:{conversation_id}:{suggestion_id}"


# The two-int4 advisory key space the store's schema lock uses, with a key of its own.
_SCHEMA_LOCK = "SELECT pg_advisory_xact_lock(hashtext('dial_runtime'), hashtext('procrastinate'))"


async def _apply_schema(url: str) -> None:
    """Create Procrastinate's tables in the database (the first schema of its ``search_path``) unless there."""
    import procrastinate.schema
    import psycopg

    async with await psycopg.AsyncConnection.connect(url) as connection, connection.transaction():
        await connection.execute(
            "SELECT pg_advisory_xact_lock(hashtext('dial_runtime'), hashtext('procrastinate'))"
        )
        cursor = await connection.execute("SELECT to_regclass('procrastinate_jobs') IS NULL")
        row = await cursor.fetchone()
        if row is not None and row[0]:
            await connection.execute(procrastinate.schema.SchemaManager.get_schema())


async def run_worker(
    url: str,
    open_conversation: OpenConversation,
    *,
    ready: Callable[[], object] | None = None,
    signals: bool = True,
    **options: Any,
) -> None:
    """Run a deadline worker on the PostgreSQL database ``url`` until SIGINT or SIGTERM (``signals``) or
    cancellation: the body of a ``dial-runtime worker`` process. ``options`` are :class:`PostgresDeadlines`'s."""
    async with PostgresDeadlines(url, open_conversation=open_conversation, **options) as deadlines:
        await deadlines.run(ready=ready, signals=signals)
