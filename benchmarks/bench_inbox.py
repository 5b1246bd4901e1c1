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

The PostgreSQL server is the one ``DIAL_TEST_POSTGRES_URL`` names, else a throwaway cluster started like the
tests' (``tests/pg.py``), syncing to disk; a fresh schema holds the tables and is dropped at the end.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

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
    print(
        json.dumps(
            {
                "benchmark": "inbox",
                "python": platform.python_version(),
                "smoke": smoke,
                "load_average_1m": round(load, 2),
                "r": cost,
                "q": scale,
                "targets": {"overhead_percent": 10, "page_p99_ms": 50},
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
