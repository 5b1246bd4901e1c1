"""Exactly once under SIGKILL: workers (``tests.reconcile_child``) drive one stored conversation, each killed at a
random moment of its turns and the next carrying on from what it left, hundreds of times; then the store's log and
the domain's own database must agree.

With a domain that takes the run's idempotency key and can ``reconcile`` (mode ``reconcile``), every note added is
added once and reported ``done``, however many runs a kill cut short (recovery asks the domain what became of
them); with a domain that can do neither (mode ``plain``), a run is never repeated (at most once), and a run a kill
cut short is reported ``failed``/``interrupted``, whether or not its note was added: the gap ``reconcile`` closes.
Either way, each kill inside an action leaves exactly one run for recovery to end, and the kills must have landed
at every point of a turn (between calls, in the agent, in the decision, in the action).

Over SQLite (the test on trio) and PostgreSQL (on asyncio); each worker runs on trio or asyncio at random. The
randomness is seeded: ``DIAL_EXACTLY_ONCE_SEED`` replays a run's choices (the kills' timing still varies), and
every failure names the seed; ``DIAL_EXACTLY_ONCE_KILLS`` sets the kills per test (4 x 100: about three minutes on
two cores).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from dial_runtime import Conversation, policy_human
from dial_runtime.runtime.core import idempotency_key
from dial_runtime.runtime.events import ActionStartedEvent, LogEntry, OutcomeEvent, ProposedEvent
from dial_runtime.runtime.state import ConversationState
from dial_runtime.stores import StorePort, open_store
from dial_runtime.stores.jsonl import check_log

from ..children import Worker
from ..reconcile_child import Effects, NoteAgent, Pauses, domain_for, open_conversation

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parents[2]
SEED = int(os.environ.get("DIAL_EXACTLY_ONCE_SEED") or random.randrange(1 << 32))

#: Workers killed in each test (four tests: SQLite and PostgreSQL, each mode).
KILLS = int(os.environ.get("DIAL_EXACTLY_ONCE_KILLS") or 100)

#: The fewest runs a kill must have cut short after their effect (reconciled, or interrupted in plain mode), for
#: the kills to have tested the window at all.
IN_THE_WINDOW = 3

#: The share of kills made without waiting for the worker to have opened the conversation (so some land in its
#: recovery), and how long a worker runs otherwise once it has (seconds).
EARLY = 0.15
RUNS_FOR = (0.0, 0.25)


@pytest.fixture
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Real clocks (the test waits on processes and servers), on the backend the parameters give."""
    return request.param  # type: ignore[no-any-return]


@asynccontextmanager
async def worker(
    mode: str, url: str, conversation_id: str, effects: Path, index: int, seed: str, tmp: Path
) -> AsyncIterator[Worker]:
    backend = random.Random(f"{seed}/backend/{index}").choice(["trio", "asyncio"])
    name = f"w{index}"
    command = [
        sys.executable,
        "-m",
        "tests.reconcile_child",
        mode,
        backend,
        url,
        conversation_id,
        str(effects),
        name,
        f"{seed}/{index}",
    ]
    errors = tmp / f"{name}.err"
    with errors.open("wb") as stderr:
        process = await anyio.open_process(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, cwd=ROOT
        )
    try:
        yield Worker(process, errors)
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            await process.aclose()


async def kill_again_and_again(
    mode: str, url: str, conversation_id: str, effects: Path, seed: str, tmp: Path, kills: int
) -> Counter[str]:
    """Let ``kills`` workers in turn carry the conversation on, each killed after a random short time; the next
    is started while the one before runs, so that it is ready the moment that one is dead. Returns where the
    kills landed: the type of the last event each killed worker had stored (or that it had stored none yet)."""
    timing = random.Random(f"{seed}/kills")
    landed: Counter[str] = Counter()
    seen: list[LogEntry] = []
    store = open_store(url)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(store.aclose)

        async def start(index: int) -> Worker:
            return await stack.enter_async_context(worker(mode, url, conversation_id, effects, index, seed, tmp))

        following = await start(0)
        for index in range(kills):
            current = following
            await current.expect("ready")
            await current.go()
            following = await start(index + 1)
            if timing.random() < EARLY:
                await anyio.sleep(timing.uniform(0, 0.05))
            else:
                await current.expect("opened")
                await anyio.sleep(timing.uniform(*RUNS_FOR))
            await current.kill()
            written = await store.read(conversation_id, after_seq=len(seen))  # nothing writes until the next go
            landed[written[-1].event.type if written else "its first write"] += 1
            seen += written
        await following.kill()  # started, never let go
    return landed


@dataclass
class Found:
    """What the log and the effects database hold, and what was counted in them."""

    events: list[Any]
    proposed: dict[str, str] = field(default_factory=dict)  # suggestion id -> note
    started: dict[str, list[ActionStartedEvent]] = field(default_factory=dict)
    outcomes: dict[str, list[OutcomeEvent]] = field(default_factory=dict)
    #: note -> (key, pid, result) of each effect recorded
    effects: dict[str, list[tuple[str | None, int, str]]] = field(default_factory=dict)
    runs: Counter[str] = field(default_factory=Counter)  # note -> runs
    reconciles: Counter[str] = field(default_factory=Counter)  # note -> reconcile calls


def gather(log: list[LogEntry], effects: Effects, why: str) -> Found:
    found = Found(events=[entry.event for entry in log])
    for event in found.events:
        if isinstance(event, ProposedEvent):
            assert event.id not in found.proposed, f"{event.id} was proposed twice; {why}"
            found.proposed[event.id] = event.payload["text"]
        elif isinstance(event, ActionStartedEvent):
            found.started.setdefault(event.suggestion_id, []).append(event)
        elif isinstance(event, OutcomeEvent):
            found.outcomes.setdefault(event.id, []).append(event)
    for note, key, pid, result in effects.connection.execute("SELECT note, key, pid, result FROM effects"):
        found.effects.setdefault(note, []).append((key, pid, result))
    for kind, note in effects.connection.execute("SELECT kind, note FROM calls"):
        (found.runs if kind == "run" else found.reconciles)[note] += 1
    return found


def check_common(found: Found, log: list[LogEntry], conversation_id: str, why: str) -> None:
    """What holds in either mode: the log folds, every suggestion has one outcome, nothing ran twice, and every
    note added was for a run the log started."""
    assert [entry.seq for entry in log] == list(range(1, len(log) + 1)), why
    check_log(log)
    state = ConversationState.fold(found.events)
    assert state.open_suggestions == {} and not state.in_call, why
    notes = list(found.proposed.values())
    assert len(set(notes)) == len(notes), f"a note was proposed twice; {why}"
    assert set(found.outcomes) == set(found.proposed), f"a suggestion has no outcome; {why}"
    several = {ident: [o.status for o in each] for ident, each in found.outcomes.items() if len(each) != 1}
    assert several == {}, f"suggestions with more than one outcome; {why}"
    twice = {ident: len(each) for ident, each in found.started.items() if len(each) != 1}
    assert twice == {}, f"actions started twice for one suggestion; {why}"
    for ident, (started,) in found.started.items():
        assert started.key == idempotency_key(conversation_id, log[0].time, ident, 1), why
        assert started.payload["text"] == found.proposed[ident], why
        assert found.outcomes[ident][0].status in ("done", "failed"), f"{ident} started, then superseded; {why}"
    by_note = {found.proposed[ident]: ident for ident in found.started}
    assert [note for note, runs in found.runs.items() if runs > 1] == [], f"a run repeated; {why}"
    assert set(found.runs) <= set(by_note), f"a run of a note whose action never started; {why}"
    assert [note for note, each in found.effects.items() if len(each) > 1] == [], f"duplicated effects; {why}"
    assert set(found.effects) <= set(by_note), f"an effect without its action-started; {why}"
    for ident, (outcome,) in found.outcomes.items():
        note = found.proposed[ident]
        if outcome.status == "done":
            assert note in found.effects, f"{ident} done without its effect; {why}"
            ((_, _, result),) = found.effects[note]
            assert outcome.result == json.loads(result), f"{ident}'s result is not its effect's; {why}"
        elif outcome.status == "failed":
            assert (outcome.code, ident in found.started) == ("interrupted", True), f"{ident}: {outcome}; {why}"


@pytest.mark.parametrize("mode", ["reconcile", "plain"])
@pytest.mark.parametrize(
    ("durable_url", "anyio_backend"), [("sqlite", "trio"), ("postgres", "asyncio")], indirect=True
)
async def test_effects_under_sigkill(durable_url: str, anyio_backend: str, mode: str, tmp_path: Path) -> None:
    store_kind = "sqlite" if durable_url.startswith("sqlite") else "postgres"
    seed = f"{SEED}/{store_kind}/{mode}"
    why = f"seed {SEED} (DIAL_EXACTLY_ONCE_SEED={SEED}), {store_kind}, {mode}"
    conversation_id = f"c-{uuid.uuid4().hex[:8]}"
    effects_path = tmp_path / "effects.db"
    effects = Effects.create(str(effects_path))
    began = time.monotonic()
    landed = await kill_again_and_again(mode, durable_url, conversation_id, effects_path, seed, tmp_path, KILLS)
    killed_in = time.monotonic() - began

    store: StorePort = open_store(durable_url)
    try:
        parts: dict[str, Any] = {
            "agent": NoteAgent(),
            "domain": domain_for(mode, effects, Pauses(f"{seed}/last")),
            "human": policy_human(),
        }
        last = await open_conversation(store, conversation_id, **parts)  # recovers the last kill
        await last.say("that is all")  # ends what waited for a decision
        log = await store.read(conversation_id)
        again = await Conversation.open(store, conversation_id, **parts)
        assert list(again.log) == log, why
    finally:
        await store.aclose()
    found = gather(log, effects, why)
    effects.close()

    check_common(found, log, conversation_id, why)
    assert os.getpid() not in {pid for each in found.effects.values() for _, pid, _ in each}, why
    outcomes = [each for (each,) in found.outcomes.values()]
    started = [found.outcomes[ident][0] for ident in found.started]
    happened = [o for o in started if found.proposed[o.id] in found.effects]
    reconciled = [o for o in outcomes if o.reconciled]
    interrupted = [o for o in outcomes if o.code == "interrupted"]
    interrupted_happened = [o for o in interrupted if found.proposed[o.id] in found.effects]
    report = (
        f"{store_kind}/{mode}: {KILLS} kills in {killed_in:.1f}s, {len(found.proposed)} suggestions, "
        f"{len(started)} started, {len(happened)} effects, {sum(o.status == 'done' for o in outcomes)} done, "
        f"{len(reconciled)} reconciled, {len(interrupted)} interrupted "
        f"({len(interrupted_happened)} of which had happened), "
        f"{sum(found.reconciles.values())} reconcile calls; the kills landed after {dict(landed.most_common())}; "
        f"{why}"
    )
    print(report)
    assert len(found.proposed) > KILLS, f"too few turns to prove anything: {report}"
    missed = {"finished", "sent", "suggestion", "action-started"} - set(landed)
    assert not missed, f"no kill landed after {missed}: {report}"
    in_action = landed["action-started"]  # each such kill, and no other run, leaves one run to recover
    assert len(reconciled) + len(interrupted) == in_action, f"{in_action} kills in an action: {report}"
    if mode == "reconcile":
        lost = [o.id for o in happened if o.status != "done"]
        assert lost == [], f"effects that happened, not reported done: {lost}; {report}"
        assert interrupted_happened == [], report
        assert all(o.status == "done" and o.id in found.started for o in reconciled), report
        assert len(reconciled) >= IN_THE_WINDOW, f"the kills never hit the action's window: {report}"
        unreconciled = [o for o in interrupted if found.reconciles[found.proposed[o.id]] == 0]
        assert unreconciled == [], f"interrupted without asking reconcile: {report}"
    else:
        assert reconciled == [] and not found.reconciles, report
        assert len(interrupted_happened) >= IN_THE_WINDOW, f"the kills never hit the action's window: {report}"
