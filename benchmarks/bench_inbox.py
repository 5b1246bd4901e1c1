"""Inbox benchmarks: prints one JSON line.

(r) What the read model adds to an append. Defer-then-decide conversations (each opened, given one ``say`` whose
suggestion the person defers, then ``decide(..., Accept())``): the two appends that change what waits (the card
appears, the card goes) each write the conversation's rows too, in the append's transaction; the other appends
write none. Measured on SQLite and on PostgreSQL (``synchronous_commit`` on), each store once as it is and once
behind a wrapper that hides its read model (so the conversation writes its log alone), passes taken in turn so
that the machine's swings weigh on both alike: the best pass's milliseconds per append, and the overhead in per
cent, for every append and for the appends that write rows.

(q) The inbox's query at scale, on PostgreSQL: ``--conversations`` stored conversations (100,000; 1,000 with
``--smoke``), one in ten with a card waiting (some for roles, some with a deadline, some approved once already),
the logs written as the runtime writes them (a real conversation's log, copied under each id) and the read model
as the runtime writes it (:func:`~dial_runtime.views.inbox.stored_rows` of each log's cards). Then the first page
(100 cards) of the inbox of one decider (a name and a role), asked 200 times of deciders in turn: p50 and p99 in
milliseconds; likewise every card for one decider (no page), and the overdue ones.

(d) The approval desk, on the same database, served by ``dial-runtime serve --workers 4``: an inbox page's read
(``GET /inbox/cards``, 100 cards) asked 200 times, p50 and p99; how long after a decision is sent (``POST
/inbox/decide``, one card, to whichever worker takes it) the change stream of an inbox open on another connection
names its conversation, 20 times, p50 and p99 (an upper bound: it counts the decision's own work); and two people
bulk-deciding 100 cards each at once, half of them the same cards: each one's request, end to end, and whether
every card was decided exactly once (one ``decided`` entry in its log) with every card taken by one of them.

The PostgreSQL server is the one ``DIAL_TEST_POSTGRES_URL`` names, else a throwaway cluster started like the
tests' (``tests/pg.py``), syncing to disk; a fresh schema holds the tables and is dropped at the end.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import httpx
import psycopg
import trio
from bench_runtime import ACKNOWLEDGE_REPLY, SUGGESTION_REPLY, Alternating, Notes
from bench_store import postgres

from dial_runtime import Accept, ActionSpec, ApprovalPolicy, Conversation, scripted_human
from dial_runtime.decisions.inbox import Inbox, logged_cards
from dial_runtime.stores import StorePort, open_store
from dial_runtime.stores.base import encode
from dial_runtime.views.inbox import stored_rows

WORDS = "add a note: buy milk"


class LogsOnly:
    """A store with its read model hidden: a conversation on it writes its log alone."""

    def __init__(self, store: StorePort) -> None:
        self.append, self.read, self.conversations = store.append, store.read, store.conversations
        self.lock, self.watch, self.aclose = store.lock, store.watch, store.aclose


class Counting:
    """A store that counts the appends made through it (and those that wrote rows)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.appends = self.with_rows = 0
        self.read, self.conversations = store.read, store.conversations
        self.lock, self.watch, self.aclose = store.lock, store.watch, store.aclose
        if callable(getattr(store, "keep_waiting", None)):
            self.keep_waiting, self.waiting = store.keep_waiting, store.waiting

    async def append(self, conversation_id: str, entries: Any, *, expected_seq: int, waiting: Any = None) -> None:
        self.appends += 1
        if waiting is None:
            await self._store.append(conversation_id, entries, expected_seq=expected_seq)
        else:
            self.with_rows += 1
            await self._store.append(conversation_id, entries, expected_seq=expected_seq, waiting=waiting)


async def defer_then_decide(store: Any, conversation_id: str) -> None:
    conversation = await Conversation.open(
        store,
        conversation_id,
        agent=Alternating([SUGGESTION_REPLY, ACKNOWLEDGE_REPLY]),
        domain=Notes(),
        human=scripted_human(["defer"]),
    )
    assert (await conversation.say(WORDS)).status == "awaiting"
    decided = await conversation.decide("sg-1", Accept())
    assert decided.outcomes[0].status == "done", decided


def append_pass(url: str, hidden: bool, count: int, prefix: str) -> tuple[float, int, int]:
    """Seconds per append over ``count`` conversations, the appends made and those that wrote rows."""

    async def work() -> tuple[float, int, int]:
        store = open_store(url)
        counted = Counting(LogsOnly(store) if hidden else store)
        try:
            await store.conversations()  # connect before the clock starts
            began = time.perf_counter()
            for n in range(count):
                await defer_then_decide(counted, f"{prefix}-{n}")
            return (time.perf_counter() - began) / counted.appends, counted.appends, counted.with_rows
        finally:
            await store.aclose()

    return trio.run(work)


def read_model_cost(urls: dict[str, str], count: int, rounds: int) -> dict[str, Any]:
    """Scenario (r): the best pass per store and per way, and what the read model adds."""
    results: dict[str, Any] = {"conversations": count}
    for name, url in urls.items():
        append_pass(url, False, 5, "warm")
        best = {False: float("inf"), True: float("inf")}
        shares = (0, 0)
        for round_ in range(rounds):
            for hidden in (False, True) if round_ % 2 == 0 else (True, False):
                seconds, appends, with_rows = append_pass(url, hidden, count, f"r{round_}-{int(hidden)}")
                best[hidden] = min(best[hidden], seconds)
                if not hidden:
                    shares = (appends, with_rows)
        bare, kept = best[True], best[False]
        appends, with_rows = shares
        results[name] = {
            "ms_per_append_without_read_model": round(bare * 1e3, 3),
            "ms_per_append_with_read_model": round(kept * 1e3, 3),
            "overhead_percent": round((kept / bare - 1) * 100, 1),
            "appends_writing_rows": f"{with_rows} of {appends}",
            # The whole difference laid on the appends that write rows.
            "overhead_percent_on_appends_writing_rows": round((kept - bare) * appends / with_rows / bare * 100, 1),
        }
    return results


class Desk(Notes):
    """The benchmark's notes, with refunds for ``finance`` that two people approve."""

    actions: ClassVar[dict[str, ActionSpec]] = {
        **Notes.actions,
        "refund": ActionSpec(mutates=True, policy=ApprovalPolicy(approvals=2, roles=frozenset({"finance"}))),
    }

    def validate(self, action: str, payload: Any) -> Any:
        return {"ok": True} if action == "refund" else super().validate(action, payload)

    def preview(self, action: str, payload: Any) -> str:
        return (
            f"Refund {payload['amount']} to {payload['to']}"
            if action == "refund"
            else super().preview(action, payload)
        )


REFUND = (
    '<dial>\n  <dial-suggest action="refund">Refund bo</dial-suggest>\n'
    '  <dial-declare context-key="refund">{"amount": 40, "to": "bo"}</dial-declare>\n</dial>'
)


async def template_logs() -> dict[str, list[Any]]:
    """Real logs to copy: a conversation done, a note waiting (with a deadline), a refund waiting for finance
    (approved once)."""
    store = open_store("memory:")
    logs: dict[str, list[Any]] = {}
    done = Conversation(
        store=store,
        conversation_id="done",
        agent=Alternating([SUGGESTION_REPLY, ACKNOWLEDGE_REPLY]),
        domain=Notes(),
        human=scripted_human(["accept"]),
    )
    await done.say(WORDS)
    note = Conversation(
        store=store,
        conversation_id="note",
        agent=Alternating([SUGGESTION_REPLY]),
        domain=Notes(),
        human=scripted_human(["defer"]),
        decide_timeout=3600,
    )
    await note.say(WORDS, by="ada")
    refund = Conversation(
        store=store,
        conversation_id="refund",
        agent=Alternating([REFUND, ACKNOWLEDGE_REPLY]),
        domain=Desk(),
        human=scripted_human(["defer"]),
    )
    await refund.say("refund bo", by="ada")
    await refund.decide("sg-1", Accept(), by="cy", roles=["finance"])
    for conversation_id in ("done", "note", "refund"):
        logs[conversation_id] = await store.read(conversation_id)
    return logs


def populate(url: str, conversations: int) -> int:
    """Write ``conversations`` logs and their rows with COPY (one in ten waiting); how many cards wait."""
    logs = trio.run(template_logs)
    texts = {name: [(entry.seq, entry.time, encode(entry)) for entry in entries] for name, entries in logs.items()}
    now = time.time()
    waiting = 0
    log_buffer, row_buffer = io.StringIO(), io.StringIO()
    with psycopg.connect(url, autocommit=True) as connection:
        for n in range(conversations):
            conversation_id = f"conversation-{n:06d}"
            kind = "done" if n % 10 else ("note" if n % 20 else "refund")
            shift = now - 86_400 + n * 0.5  # spread over the last day: ages and deadlines differ
            for seq, when, text in texts[kind]:
                log_buffer.write(f"{conversation_id}\t{seq}\t{when - logs[kind][0].time + shift}\t{_copy(text)}\n")
            if kind != "done":
                shifted = [
                    card.__class__(
                        **{
                            **{field: getattr(card, field) for field in card.__struct_fields__},
                            "conversation": conversation_id,
                            "since": shift,
                            "deadline": None if card.deadline is None else shift + 3600,
                        }
                    )
                    for card in logged_cards(kind, logs[kind])
                ]
                for row in stored_rows(shifted):
                    waiting += 1
                    cells = [conversation_id, *("\\N" if cell is None else _copy(str(cell)) for cell in row)]
                    row_buffer.write("\t".join(cells) + "\n")
        with connection.cursor() as cursor:
            with cursor.copy("COPY dial_log (conversation_id, seq, time, entry) FROM STDIN") as copy:
                copy.write(log_buffer.getvalue())
            with cursor.copy(
                "COPY dial_waiting (conversation_id, subject_id, action, since, deadline, roles, approvers, card)"
                " FROM STDIN"
            ) as copy:
                copy.write(row_buffer.getvalue())
        connection.execute("ANALYZE")
    return waiting


def _copy(text: str) -> str:
    """``text`` as a COPY text field."""
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1e3, 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3, 2),
    }


def query_at_scale(url: str, conversations: int, asks: int) -> dict[str, Any]:
    """Scenario (q)."""
    began = time.perf_counter()

    async def tables() -> None:
        store = open_store(url)
        await store.conversations()
        await store.aclose()

    trio.run(tables)
    waiting = populate(url, conversations)
    populated = time.perf_counter() - began
    deciders = [("bo", []), ("cy", ["finance"]), ("di", ["finance"]), ("ed", ["ops"])]

    async def ask(query: Callable[[Inbox, int], Any]) -> tuple[list[float], int]:
        store = open_store(url)
        inbox = Inbox(store)
        samples: list[float] = []
        found = 0
        try:
            await inbox.waiting(limit=1)  # connect, prepare
            for n in range(asks):
                began = time.perf_counter()
                cards = await query(inbox, n)
                samples.append(time.perf_counter() - began)
                found = max(found, len(cards))
        finally:
            await store.aclose()
        return samples, found

    def page(inbox: Inbox, n: int) -> Any:
        name, roles = deciders[n % len(deciders)]
        return inbox.waiting(decider=name, roles=roles, limit=100)

    def everything(inbox: Inbox, n: int) -> Any:
        name, roles = deciders[n % len(deciders)]
        return inbox.waiting(decider=name, roles=roles)

    def overdue(inbox: Inbox, n: int) -> Any:
        return inbox.waiting(overdue=True, limit=100)

    results: dict[str, Any] = {
        "conversations": conversations,
        "waiting_cards": waiting,
        "populate_seconds": round(populated, 1),
    }
    for name, query in (("page_of_100", page), ("every_card", everything), ("overdue_page", overdue)):
        samples, found = trio.run(ask, query)
        results[name] = {**percentiles(samples), "most_cards": found}
    return results


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serving(url: str, folder: Path, workers: int) -> tuple[subprocess.Popen[bytes], str]:
    """``dial-runtime serve`` on the store at ``url`` with ``workers`` workers, the desk's domain and a scripted
    agent that acknowledges every outcome; its process and base URL once it answers."""
    script = folder / "replies.json"
    script.write_text(json.dumps([SUGGESTION_REPLY, REFUND, *[ACKNOWLEDGE_REPLY] * 4]))
    port = free_port()
    command = [
        sys.executable, "-m", "dial_runtime.cli", "serve", "--agent", f"script:{script}",
        "--domain", "bench_inbox:Desk", "--store", url, "--port", str(port), "--workers", str(workers),
    ]  # fmt: skip
    here = str(Path(__file__).parent)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))}
    log = (folder / "serve.log").open("wb")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{base}/actions", timeout=2).status_code == 200:
                return server, base
        except httpx.TransportError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError(f"dial-runtime serve did not start: {(folder / 'serve.log').read_text()[-2000:]}")
        time.sleep(0.1)


def decisions(url: str, conversation_ids: list[str]) -> dict[str, int]:
    """How many ``decided`` entries each conversation's log holds."""
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT conversation_id, count(*) FROM dial_log WHERE conversation_id = ANY(%s)"
            " AND (entry::jsonb) -> 'event' ->> 'type' = 'decided' GROUP BY conversation_id",
            (conversation_ids,),
        ).fetchall()
    counts = dict.fromkeys(conversation_ids, 0)
    counts.update({conversation_id: count for conversation_id, count in rows})
    return counts


def desk_at_scale(url: str, workers: int, asks: int, bulk: int, live: int) -> dict[str, Any]:
    """Scenario (d), on the database (q) populated."""
    with tempfile.TemporaryDirectory(prefix="dial-desk-") as folder:
        server, base = serving(url, Path(folder), workers)
        try:
            return trio.run(_desk, url, base, asks, bulk, live)
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


async def _desk(url: str, base: str, asks: int, bulk: int, live: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=20)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
        samples: list[float] = []
        for _ in range(asks):
            began = time.perf_counter()
            response = await client.get("/inbox/cards", params={"limit": "100"})
            samples.append(time.perf_counter() - began)
            assert response.status_code == 200, response.text
        page = percentiles(samples)
        cards = (await client.get("/inbox/cards", params={"limit": "1000", "action": "add-note"})).json()["cards"]
        assert len(cards) >= live + bulk * 3 // 2, f"{len(cards)} note cards wait: too few for the scenario"
        tell = await _told_within(client, cards[:live])
        rest = cards[live : live + bulk * 3 // 2]
        first, second = rest[:bulk], rest[bulk // 2 :]
        timings: dict[str, float] = {}
        answers: dict[str, list[dict[str, Any]]] = {}

        async def decide(who: str, chosen: list[dict[str, Any]]) -> None:
            body = {
                "decisions": [
                    {
                        "threadId": card["threadId"],
                        "id": card["id"],
                        "decision": "accept",
                        "digest": card["digest"],
                    }
                    for card in chosen
                ]
            }
            began = time.perf_counter()
            response = await client.post("/inbox/decide", json=body)
            timings[who] = time.perf_counter() - began
            assert response.status_code == 200, response.text
            answers[who] = response.json()["results"]

        async with trio.open_nursery() as nursery:
            nursery.start_soon(decide, "first", first)
            nursery.start_soon(decide, "second", second)
    taken = [each for results in answers.values() for each in results if "refused" not in each]
    refused = {each["refused"] for results in answers.values() for each in results if "refused" in each}
    counted = decisions(url, [card["threadId"] for card in rest])
    return {
        "page_of_100_over_http": page,
        "live_update": tell,
        "bulk": {
            "cards_each": bulk,
            "overlap": bulk // 2,
            "seconds_each": {who: round(seconds, 3) for who, seconds in sorted(timings.items())},
            "taken": len(taken),
            "refused_as": sorted(refused),
            "each_decided_once": set(counted.values()) == {1} and len(taken) == len(rest),
        },
    }


async def _told_within(client: httpx.AsyncClient, cards: list[dict[str, Any]]) -> dict[str, float]:
    """Decide each card alone while an inbox's change stream is open: seconds from sending the decision to the
    event that names its conversation."""
    samples: list[float] = []
    async with (
        httpx.AsyncClient(base_url=str(client.base_url), timeout=30) as watcher,
        watcher.stream("GET", "/inbox/changes") as stream,
    ):
        lines = stream.aiter_lines()
        async for line in lines:  # the first event: the stream is open
            if line.startswith("data: "):
                break
        for card in cards:
            body = {
                "decisions": [
                    {
                        "threadId": card["threadId"],
                        "id": card["id"],
                        "decision": "dismiss",
                        "digest": card["digest"],
                    }
                ]
            }
            told = trio.Event()
            arrived: list[float] = []
            began = time.perf_counter()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_listen, lines, card["threadId"], told, arrived)
                response = await client.post("/inbox/decide", json=body)
                assert response.status_code == 200 and "refused" not in response.json()["results"][0], (
                    response.text
                )
                with trio.fail_after(10):
                    await told.wait()
            samples.append(arrived[0] - began)
    return percentiles(samples)


async def _listen(lines: Any, thread: str, told: trio.Event, arrived: list[float]) -> None:
    """Read the change stream until an event names ``thread``; note when."""
    async for line in lines:
        if line.startswith("data: ") and thread in json.loads(line[len("data: ") :])["threadIds"]:
            arrived.append(time.perf_counter())
            told.set()
            return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the benchmark runs")
    parser.add_argument("--conversations", type=int, default=100_000, help="stored conversations for (q)")
    arguments = parser.parse_args()
    smoke = arguments.smoke
    count, rounds = (10, 1) if smoke else (200, 5)
    conversations = 1_000 if smoke else arguments.conversations
    load = os.getloadavg()[0]
    with postgres() as url, tempfile.TemporaryDirectory(prefix="dial-bench-") as folder:
        cost = read_model_cost(
            {"sqlite": f"sqlite:{Path(folder) / 'logs.db'}", "postgres": url("on")}, count, rounds
        )
    with postgres() as url:
        scale = query_at_scale(url("on"), conversations, 40 if smoke else 200)
        desk = desk_at_scale(
            url("on"), 2 if smoke else 4, 40 if smoke else 200, 10 if smoke else 100, 5 if smoke else 20
        )
    print(
        json.dumps(
            {
                "benchmark": "inbox",
                "python": platform.python_version(),
                "smoke": smoke,
                "load_average_1m": round(load, 2),
                "r": cost,
                "q": scale,
                "d": desk,
                "targets": {
                    "overhead_percent": 10,
                    "page_p99_ms": 50,
                    "live_update_p99_ms": 1000,
                    "bulk_of_100_seconds": 2,
                },
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
