"""The hash chain: every store chains what it appends, and verification names the first entry that does not match
and how it was tampered with, on logs of real conversations changed behind the store's back.

The tampering is done to the database itself (sqlite3, psycopg; the in-process store's lists), the way someone
with access to it would: rows edited, removed (with the later ones renumbered, or not), inserted (with a hash of
their own, made up, or none), swapped; and a log rewritten whole with every hash recomputed, which verifies and
only a signed head catches (``tests/cli/test_chain_cli.py``).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dial_runtime import Accept, Conversation, Dismiss, LogEntry, scripted_human
from dial_runtime.runtime.events import DecidedEvent, DeclareEvent, SaidEvent, entry_from_dict, entry_to_dict
from dial_runtime.stores import MemoryStore, PostgresStore, SQLiteStore, StorePort, open_store
from dial_runtime.stores.base import decode, encode
from dial_runtime.stores.chain import (
    GENESIS,
    ChainCheck,
    StoredRow,
    canonical,
    chain_hash,
    link_through,
    verify_log,
    verify_store,
)
from dial_runtime.stores.jsonl import export_rows, read_jsonl

from ..fakes import Agent, Notes, envelope, suggest

#: A row as a tamperer sees it: seq, the entry's JSON text, its hash.
Row = tuple[int, str, str | None]

CONVERSATION = "c"


def replies() -> list[str]:
    return [
        envelope(suggest("add-note", '{"text":"milk"}'), suggest("add-note", '{"text":"eggs"}'), prose="Two."),
        envelope('<dial-acknowledge of="sg-1">Added.</dial-acknowledge>'),
    ]


async def hold(store: StorePort, conversation_id: str = CONVERSATION) -> None:
    """A conversation with a person who defers two suggestions, then accepts one and dismisses the other: 27
    entries, the decisions at 14 (accept, by ada) and 20 (dismiss, by bob)."""
    options: dict[str, Any] = {
        "agent": Agent(replies()),
        "domain": Notes(),
        "human": scripted_human(["defer"] * 2),
    }
    conversation = await Conversation.open(store, conversation_id, **options)
    assert (await conversation.say("add milk and eggs", by="ada")).status == "awaiting"
    assert (await conversation.decide("sg-1", Accept(), by="ada")).status == "awaiting"
    assert (await conversation.decide("sg-2", Dismiss(), by="bob")).status == "idle"


def run(work: Callable[[], Any]) -> Any:
    """``work()`` on a real-clock trio loop (the stores wait on threads and servers)."""
    return anyio.run(work, backend="trio")


# --- the stores, and what a tamperer does to each --------------------------------------------------------------


class Backend:
    """A store of one kind holding the conversation, and a way to rewrite its rows behind its back."""

    kind = ""

    def store(self) -> StorePort:
        raise NotImplementedError

    def read(self) -> list[Row]:
        raise NotImplementedError

    def write(self, rows: list[Row]) -> None:
        raise NotImplementedError

    def check(self, **options: Any) -> ChainCheck:
        """The conversation's chain as the store holds it, verified."""

        async def work() -> ChainCheck:
            store = self.store()
            try:
                (check,) = (await verify_store(store, [CONVERSATION], **options)).conversations
                return check
            finally:
                if self.kind != "memory":
                    await store.aclose()

        return run(work)


class Memory(Backend):
    kind = "memory"

    def __init__(self) -> None:
        self.shared = MemoryStore()

    def store(self) -> StorePort:
        return self.shared

    def read(self) -> list[Row]:
        return [(row.seq, row.text, row.hash) for row in run(lambda: self.shared.rows(CONVERSATION))]

    def write(self, rows: list[Row]) -> None:
        self.shared._logs[CONVERSATION] = [entry_from_dict(json.loads(text)) for _, text, _ in rows]
        self.shared._hashes[CONVERSATION] = [hash_ for _, _, hash_ in rows]


class SQLite(Backend):
    kind = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path

    def store(self) -> StorePort:
        return SQLiteStore(self.path)

    def read(self) -> list[Row]:
        with sqlite3.connect(self.path) as connection:
            return connection.execute(
                "SELECT seq, entry, hash FROM dial_log WHERE conversation_id = ? ORDER BY seq", (CONVERSATION,)
            ).fetchall()

    def write(self, rows: list[Row]) -> None:
        connection = sqlite3.connect(self.path)
        with connection:
            connection.execute("DELETE FROM dial_log WHERE conversation_id = ?", (CONVERSATION,))
            connection.executemany(
                "INSERT INTO dial_log VALUES (?, ?, ?, ?, ?)",
                [(CONVERSATION, seq, json.loads(text)["time"], text, hash_) for seq, text, hash_ in rows],
            )
        connection.close()


class Postgres(Backend):
    kind = "postgres"

    def __init__(self, url: str) -> None:
        self.url = url

    def store(self) -> StorePort:
        return PostgresStore(self.url)

    def read(self) -> list[Row]:
        with psycopg.connect(self.url) as connection:
            return connection.execute(
                "SELECT seq, entry, hash FROM dial_log WHERE conversation_id = %s ORDER BY seq", (CONVERSATION,)
            ).fetchall()

    def write(self, rows: list[Row]) -> None:
        with psycopg.connect(self.url) as connection:
            connection.execute("DELETE FROM dial_log WHERE conversation_id = %s", (CONVERSATION,))
            with connection.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO dial_log VALUES (%s, %s, %s, %s, %s)",
                    [(CONVERSATION, seq, json.loads(text)["time"], text, hash_) for seq, text, hash_ in rows],
                )


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Each kind of store, holding the conversation :func:`hold` makes."""
    made: Backend
    if request.param == "memory":
        made = Memory()
    elif request.param == "sqlite":
        made = SQLite(tmp_path / "logs.db")
    else:
        made = Postgres(request.getfixturevalue("pg_schema_url"))

    run(lambda: filled(made))
    return made


# --- what a tamperer does to the rows ---------------------------------------------------------------------------


def changed(text: str, **fields: Any) -> str:
    """``text``'s entry with ``fields`` replaced (``seq``, ``time``) or, under ``event``, merged in."""
    data = json.loads(text)
    event = fields.pop("event", None)
    data.update(fields)
    if event:
        data["event"] = {**data["event"], **event}
    return json.dumps(data, separators=(",", ":"))


def relabelled(row: Row, seq: int) -> Row:
    return (seq, changed(row[1], seq=seq), row[2])


def edit(seq: int, **event: Any) -> Callable[[list[Row]], list[Row]]:
    def tamper(rows: list[Row]) -> list[Row]:
        at, text, hash_ = rows[seq - 1]
        return [*rows[: seq - 1], (at, changed(text, event=event), hash_), *rows[seq:]]

    return tamper


def drop(seq: int, *, renumber: bool) -> Callable[[list[Row]], list[Row]]:
    def tamper(rows: list[Row]) -> list[Row]:
        later = rows[seq:]
        if renumber:
            later = [relabelled(row, row[0] - 1) for row in later]
        return [*rows[: seq - 1], *later]

    return tamper


def approval(seq: int, rows: list[Row]) -> str:
    """A decision to accept sg-2, by eve, as the entry numbered ``seq`` (in the text a store keeps)."""
    decided = DecidedEvent(suggestion_id="sg-2", decision="accept", by="eve")
    return encode(LogEntry(seq=seq, time=json.loads(rows[seq - 2][1])["time"], event=decided))


def insert(seq: int, hashed: str) -> Callable[[list[Row]], list[Row]]:
    """An approval inserted as entry ``seq``, the later entries renumbered; its hash made over entry ``seq -
    1``'s (``own``), made up (``made up``) or none (``none``)."""

    def tamper(rows: list[Row]) -> list[Row]:
        text = approval(seq, rows)
        hash_ = {"own": chain_hash(str(rows[seq - 2][2]), text), "made up": "1:" + "ab" * 32, "none": None}[hashed]
        later = [relabelled(row, row[0] + 1) for row in rows[seq - 1 :]]
        return [*rows[: seq - 1], (seq, text, hash_), *later]

    return tamper


def texts_only(tamper: Callable[[list[Row]], list[Row]]) -> Callable[[list[Row]], list[Row]]:
    """``tamper`` done to the entries' text only: each hash stays at the seq it was stored at."""

    def apply(rows: list[Row]) -> list[Row]:
        hashes = {seq: hash_ for seq, _, hash_ in rows}
        return [(seq, text, hashes.get(seq)) for seq, text, _ in tamper(rows)]

    return apply


def swap(first: int, second: int, *, renumber: bool, hashes_follow: bool) -> Callable[[list[Row]], list[Row]]:
    """Entries ``first`` and ``second`` change places: their JSON (with its seq, or renumbered to the new
    place), with their hashes or leaving them where they were."""

    def tamper(rows: list[Row]) -> list[Row]:
        rows = list(rows)
        one, two = rows[first - 1], rows[second - 1]
        one_text = changed(one[1], seq=second) if renumber else one[1]
        two_text = changed(two[1], seq=first) if renumber else two[1]
        rows[first - 1] = (first, two_text, two[2] if hashes_follow else one[2])
        rows[second - 1] = (second, one_text, one[2] if hashes_follow else two[2])
        return rows

    return tamper


def hash_set(seq: int, value: str | None) -> Callable[[list[Row]], list[Row]]:
    def tamper(rows: list[Row]) -> list[Row]:
        at, text, _ = rows[seq - 1]
        return [*rows[: seq - 1], (at, text, value), *rows[seq:]]

    return tamper


def rechained(rows: list[Row]) -> list[Row]:
    """Every hash made again, from the first entry on: what a tamperer who knows the scheme does last."""
    link, made = GENESIS, []
    for seq, text, _ in rows:
        link = chain_hash(link, StoredRow.of(seq, json.loads(text)).text)  # the text as a store writes it
        made.append((seq, text, link))
    return made


@dataclasses.dataclass(frozen=True)
class Tampering:
    tamper: Callable[[list[Row]], list[Row]]
    seq: int | None  # the entry verification names (None: the chain still verifies)
    kind: str | None
    says: str = ""


TAMPERINGS: dict[str, Tampering] = {
    "a payload edited": Tampering(edit(5, payload={"text": "wine"}), 5, "edited", "no longer matches its hash"),
    "who decided edited": Tampering(edit(14, by="eve"), 14, "edited", "entry 14 was edited"),
    "the last entry edited": Tampering(edit(27, status="ended"), 27, "edited", "entry 27 was edited"),
    "a decision removed": Tampering(drop(20, renumber=False), 20, "removed", "entry 20 was removed"),
    "a decision removed, the later entries renumbered": Tampering(
        drop(14, renumber=True), 14, "removed", "entry 14 was removed and the entries after renumbered"
    ),
    "the first entry removed, the others renumbered": Tampering(
        drop(1, renumber=True), 1, "removed", "the entry numbered 1 now was entry 2"
    ),
    "an approval inserted with a hash of its own": Tampering(
        insert(20, "own"), 20, "inserted", "entry 20 was inserted"
    ),
    "an approval inserted with a made-up hash": Tampering(
        insert(20, "made up"), 20, "inserted", "entry 20 was inserted"
    ),
    "an approval inserted without a hash": Tampering(insert(20, "none"), 20, "hash missing", "has no hash"),
    "two decisions swapped": Tampering(
        swap(14, 20, renumber=False, hashes_follow=True), 14, "reordered", "entry 20"
    ),
    "two decisions swapped and renumbered, with their hashes": Tampering(
        swap(14, 20, renumber=True, hashes_follow=True), 14, "reordered", "what was entry 20"
    ),
    "two neighbours swapped and renumbered, with their hashes": Tampering(
        swap(20, 21, renumber=True, hashes_follow=True), 20, "reordered", "what was entry 21"
    ),
    "a hash deleted": Tampering(hash_set(10, None), 10, "hash missing", "entry 10 has no hash"),
    "a hash edited": Tampering(
        hash_set(10, "1:" + "0" * 63 + "x"), 10, "edited", "not a scheme-1 or scheme-2 hash"
    ),
    "a hash of a later scheme": Tampering(hash_set(10, "3:" + "0" * 64), 10, "unknown scheme", "scheme 3"),
    "an approval inserted, every hash recomputed": Tampering(
        lambda rows: rechained(insert(20, "own")(rows)), None, None
    ),
    "the last entries cut off": Tampering(lambda rows: rows[:-3], None, None),
}


#: Tamperings of the entries' text alone (``UPDATE dial_log SET entry = ...``): the hashes stay at their seq.
TEXTS_ONLY: dict[str, Tampering] = {
    "a decision removed, the later entries renumbered": Tampering(
        texts_only(drop(14, renumber=True)), 14, "removed", "the entry numbered 14 now was entry 15"
    ),
    "two decisions swapped and renumbered": Tampering(
        swap(14, 20, renumber=True, hashes_follow=False), 14, "reordered", "what was entry 20"
    ),
    "an approval inserted, the later entries renumbered": Tampering(
        texts_only(insert(20, "none")), 20, "inserted", "entry 20 was inserted"
    ),
}


@pytest.mark.parametrize("case", TAMPERINGS)
def test_verification_names_the_entry_tampered_with(backend: Backend, case: str) -> None:
    tampered(backend, TAMPERINGS[case])


@pytest.mark.parametrize("case", TEXTS_ONLY)
def test_texts_moved_under_their_hashes_name_the_entry(backend: Backend, case: str) -> None:
    tampered(backend, TEXTS_ONLY[case])


async def filled(backend: Backend) -> None:
    store = backend.store()
    try:
        await hold(store)
    finally:
        if backend.kind != "memory":
            await store.aclose()


def tampered(backend: Backend, tampering: Tampering) -> None:
    """Check the chain, tamper with the rows, and check that verification names what was done."""
    assert backend.check().ok
    backend.write(tampering.tamper(backend.read()))
    check = backend.check()
    if tampering.seq is None:
        assert check.ok, check.broken
        return
    assert check.broken is not None, "the tampering was not found"
    assert (check.broken.seq, check.broken.kind) == (tampering.seq, tampering.kind), check.broken
    assert tampering.says in check.broken.reason, check.broken
    assert check.head_seq < tampering.seq or tampering.kind == "inserted"


def test_an_intact_chain_verifies_on_every_store(backend: Backend) -> None:
    check = backend.check(heads_at={CONVERSATION: [0, 14, 27, 40]})
    assert check.ok and check.entries == 27 and check.predates == 0 and check.head_seq == 27
    rows = backend.read()
    assert check.head == rows[-1][2]
    assert check.heads == {0: GENESIS, 14: rows[13][2], 27: rows[-1][2]}
    assert all(hash_ is not None and hash_.startswith("2:") and len(hash_) == 66 for _, _, hash_ in rows)
    assert check.summary().startswith("ok: 27 entries, head #27 2:")


def test_every_store_writes_the_same_chain(tmp_path: Path, pg_schema_url: str) -> None:
    """The chain depends on the entries alone: the in-process store, SQLite (hashed in Python) and PostgreSQL
    (hashed by the server) give one log the same hashes."""
    heads = []
    for backend in (Memory(), SQLite(tmp_path / "a.db"), Postgres(pg_schema_url)):
        run(lambda backend=backend: each(backend))
        heads.append([hash_ for _, _, hash_ in backend.read()])
    assert heads[0] == heads[1] == heads[2]


async def each(backend: Backend) -> None:
    store = backend.store()
    try:
        await store.append(CONVERSATION, LOG, expected_seq=0)
        await store.append(CONVERSATION, [said(len(LOG) + 1, "more")], expected_seq=len(LOG))
    finally:
        if backend.kind != "memory":
            await store.aclose()


def said(seq: int, text: str) -> LogEntry:
    return LogEntry(seq=seq, time=1_700_000_000.0 + seq, event=SaidEvent(text=text))


LOG = [
    said(1, "hello"),
    LogEntry(seq=2, time=1.5, event=DeclareEvent(context_key="odd", value=["\ud800", math.nan, -0.0, 1e308])),
    LogEntry(seq=3, time=2.0, event=DeclareEvent(context_key="é", value={"b": 1, "a": {"\x00": None}})),
]


def test_the_scheme_is_as_documented() -> None:
    """Entry n's hash is "2:" + SHA-256(hash of n-1 + "\\n" + the entry's text as stored), from "1:" + 64 zeros."""
    import hashlib

    text = encode(LOG[0])
    assert text == '{"seq":1,"time":1700000001.0,"event":{"type":"said","text":"hello"}}'
    expected = "2:" + hashlib.sha256(("1:" + "0" * 64 + "\n" + text).encode("ascii")).hexdigest()
    assert chain_hash(GENESIS, text) == expected
    rows = [StoredRow.of(entry.seq, entry_to_dict(entry)) for entry in LOG]
    assert [row.text for row in rows] == [encode(entry) for entry in LOG]
    hashes, link = [], GENESIS
    for row in rows:
        link = chain_hash(link, row.text)
        hashes.append(link)
    chained = [msgspec.structs.replace(row, hash=h) for row, h in zip(rows, hashes, strict=True)]
    assert verify_log(chained).head == hashes[-1]


def test_hashes_made_in_many_threads_at_once_are_each_sha_256_of_their_own_text() -> None:
    """The stores hash in worker threads too, and every hash starts from one shared empty hasher's copy: each must
    be the SHA-256 of its own text, whatever runs beside it."""
    import hashlib
    from concurrent.futures import ThreadPoolExecutor

    def hashes(worker: int) -> list[tuple[str, str]]:
        texts = [f'{{"seq":{n},"event":"{worker}-{n}{"x" * (n % 300)}"}}' for n in range(2000)]
        return [(text, chain_hash(GENESIS, text)) for text in texts]

    with ThreadPoolExecutor(max_workers=6) as pool:
        made = [pair for result in pool.map(hashes, range(6)) for pair in result]
    for text, hash_ in made:
        assert hash_ == "2:" + hashlib.sha256(f"{GENESIS}\n{text}".encode()).hexdigest()


def scheme_1(rows: list[StoredRow], start: str = GENESIS) -> list[StoredRow]:
    """``rows`` as an earlier version stored them: each text sorted (:func:`canonical`), each hash of scheme 1."""
    made, link = [], start
    for row in rows:
        text = canonical(row.entry)
        link = chain_hash(link, text, 1)
        made.append(StoredRow(row.seq, text, link))
    return made


def test_a_log_chained_under_scheme_1_still_verifies_and_scheme_2_takes_over_at_any_entry() -> None:
    """Scheme 1 (sorted text, "1:" hashes), which earlier versions wrote, verifies; a log whose first entries are
    of scheme 1 and the rest of scheme 2 (appended by this version) verifies; and an edit is named in either
    part."""
    old = scheme_1([StoredRow.of(entry.seq, entry_to_dict(entry)) for entry in LOG])
    assert old[0].text == '{"event":{"text":"hello","type":"said"},"seq":1,"time":1700000001.0}'
    assert old[0].hash is not None and old[0].hash.startswith("1:")
    assert verify_log(old).ok
    link, mixed = old[1].hash, [*old[:2]]
    assert link is not None
    for entry in LOG[2:]:
        link = chain_hash(link, encode(entry))
        mixed.append(StoredRow(entry.seq, encode(entry), link))
    check = verify_log(mixed)
    assert check.ok and check.head == link
    for seq in (1, 3):
        edited, row = list(mixed), mixed[seq - 1]
        text = json.dumps({**row.entry, "time": 99.0}, separators=(",", ":"))
        edited[seq - 1] = StoredRow(seq, text, row.hash)
        broken = verify_log(edited).broken
        assert broken is not None and (broken.seq, broken.kind) == (seq, "edited")


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_store_chained_under_scheme_1_goes_on_under_scheme_2(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A database an earlier version wrote (sorted texts, scheme-1 hashes): the conversation is taken up and goes
    on, its new entries chained under scheme 2 onto the last scheme-1 hash; the whole chain verifies, from the
    store and from its export, and an edit is named in either part."""
    backend: Backend = (
        SQLite(tmp_path / "x.db") if kind == "sqlite" else Postgres(request.getfixturevalue("pg_schema_url"))
    )
    run(lambda: filled(backend))
    old = scheme_1([StoredRow(seq, text) for seq, text, _ in backend.read()])
    backend.write([(row.seq, row.text, row.hash) for row in old])
    assert backend.check().ok

    async def go_on() -> list[StoredRow]:
        store = backend.store()
        try:
            options: dict[str, Any] = {
                "agent": Agent(replies()),
                "domain": Notes(),
                "human": scripted_human(["defer"] * 2),
            }
            conversation = await Conversation.open(store, CONVERSATION, **options)
            assert len(conversation.log) == 27
            await conversation.say("and bread", by="ada")
            return await store.rows(CONVERSATION)  # type: ignore[attr-defined, no-any-return]
        finally:
            await store.aclose()

    rows = run(go_on)
    assert len(rows) > 28
    assert [str(row.hash)[:2] for row in rows] == ["1:"] * 27 + ["2:"] * (len(rows) - 27)
    assert backend.check().ok
    exported = io.StringIO()
    export_rows(rows, exported, conversation_id=CONVERSATION)
    read = read_jsonl(exported.getvalue().splitlines(keepends=True))
    assert read.chain is not None and read.chain.ok and read.chain.head == rows[-1].hash
    for seq in (5, 29):
        backend.write([(row.seq, row.text, row.hash) for row in rows])
        backend.write(edit(seq, text="changed")(backend.read()))
        broken = backend.check().broken
        assert broken is not None and (broken.seq, broken.kind) == (seq, "edited")


def test_a_hash_of_a_scheme_this_version_does_not_know_is_named() -> None:
    rows = [StoredRow.of(entry.seq, entry_to_dict(entry)) for entry in LOG]
    rows[0] = msgspec.structs.replace(rows[0], hash="3:" + "ab" * 32)
    broken = verify_log(rows).broken
    assert broken is not None and broken.kind == "unknown scheme" and "schemes 1 and 2" in broken.reason


# --- canonical text: at append, and read back -----------------------------------------------------------------

json_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=12)
)
json_data = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=6),
            children,
            max_size=3,
        )
    ),
    max_leaves=10,
)
any_str = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=20)
entries = st.builds(
    LogEntry,
    seq=st.integers(1, 10**6),
    time=st.floats(allow_nan=True, allow_infinity=True),
    event=st.one_of(
        st.builds(DeclareEvent, context_key=any_str, value=json_data, element=st.none() | st.integers(-1, 9)),
        st.builds(SaidEvent, text=any_str, by=st.none() | any_str),
    ),
)


@settings(max_examples=400, deadline=None)
@given(entries)
def test_the_stored_text_reads_back_to_itself(entry: LogEntry) -> None:
    """What a store hashes when it appends (the text it keeps) is what verification hashes from the row, and what
    a row read back from an exported file (its dict, written again) hashes: byte for byte, NaN, the infinities,
    -0.0, lone surrogates and non-ASCII included."""
    stored = encode(entry)
    assert stored.isascii()
    assert StoredRow.of(entry.seq, json.loads(stored)).text == stored
    line = json.loads(json.dumps({**json.loads(stored), "hash": GENESIS}, separators=(",", ":")))  # exported
    del line["hash"]  # and imported
    assert StoredRow.of(entry.seq, line).text == stored
    assert decode(stored) == entry or _has_nan(entry)


def _has_nan(entry: LogEntry) -> bool:
    """NaN is not equal to itself, so an entry holding one never compares equal to its copy."""
    return "NaN" in canonical(entry_to_dict(entry))


@pytest.mark.parametrize(
    "value",
    [{1: "a", 10: "b", 2: "c"}, {None: 1, "b": 2}, {True: "yes", "x": [{3: 4, "4": 5}]}],
    ids=["number keys", "None beside a string", "a bool beside a string"],
)
def test_keys_the_runtime_never_writes_still_chain(value: Any, tmp_path: Path) -> None:
    """Keys that are not strings (a caller's own entries; the runtime's payloads have string keys): the stored
    text reads back to itself, so the entry is appended, and verifies from the store and from a file. (Keys that
    collide once written as strings, such as ``3`` beside ``"3"``, are no JSON object: no file can carry them.)"""
    entry = LogEntry(seq=1, time=1.0, event=DeclareEvent(context_key="k", value=value))
    stored = encode(entry)
    assert StoredRow.of(1, json.loads(stored)).text == stored

    async def appended(store: StorePort) -> list[StoredRow]:
        try:
            await store.append(CONVERSATION, [entry], expected_seq=0)
            return await store.rows(CONVERSATION)  # type: ignore[attr-defined, no-any-return]
        finally:
            await store.aclose()

    for store in (MemoryStore(), SQLiteStore(tmp_path / f"{len(str(value))}.db")):
        (row,) = run(lambda store=store: appended(store))
        assert row.text == stored
        assert row.hash == chain_hash(GENESIS, stored) and verify_log([row]).ok
        assert verify_log([StoredRow.of(1, json.loads(json.dumps(row.entry)), row.hash)]).ok


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_rows_respelled_keeping_their_keys_order_still_match(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A row written again with other spacing (what a JSON tool that keeps the keys' order does) verifies: its
    text read back writes the hashed text again. Keys put in another order do not: under scheme 2 the order is
    part of what the hash covers, so that row is reported edited (scheme 1 rows, sorted, were order-free)."""
    backend: Backend = (
        SQLite(tmp_path / "x.db") if kind == "sqlite" else Postgres(request.getfixturevalue("pg_schema_url"))
    )
    run(lambda: each(backend))
    rows = backend.read()
    respelled = [(seq, json.dumps(json.loads(text), indent=1), hash_) for seq, text, hash_ in rows]
    assert all(text != row[1] for (_, text, _), row in zip(respelled, rows, strict=True))
    backend.write(respelled)
    assert backend.check().ok
    reordered = dict(reversed(json.loads(rows[1][1]).items()))
    backend.write([*respelled[:1], (2, json.dumps(reordered), rows[1][2]), *respelled[2:]])
    broken = backend.check().broken
    assert broken is not None and (broken.seq, broken.kind) == (2, "edited")


# --- entries from before the chain ------------------------------------------------------------------------------

OLD_SCHEMA = """
CREATE TABLE dial_log (
    conversation_id TEXT NOT NULL, seq INTEGER NOT NULL, time REAL NOT NULL, entry TEXT NOT NULL,
    PRIMARY KEY (conversation_id, seq)
) WITHOUT ROWID
"""


def old_database(path: Path, entries: list[LogEntry]) -> None:
    """A database as stores wrote it before the chain: no dial_chain table, the entries as encode wrote them."""
    connection = sqlite3.connect(path)
    with connection:
        connection.execute(OLD_SCHEMA)
        connection.executemany(
            "INSERT INTO dial_log VALUES (?, ?, ?, ?)",
            [(CONVERSATION, entry.seq, entry.time, encode(entry)) for entry in entries],
        )
    connection.close()


def test_an_old_sqlite_database_reads_appends_and_chains_onto_its_entries(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old_database(path, LOG)
    reader = SQLite(path)

    async def read_only() -> tuple[list[LogEntry], ChainCheck]:
        store = SQLiteStore(path, create=False)
        try:
            return await store.read(CONVERSATION), (await verify_store(store)).conversations[0]
        finally:
            await store.aclose()

    read, check = run(read_only)
    assert read == LOG[:1] + read[1:2] + LOG[2:] and check.ok and check.predates == 3 == check.entries
    assert "all stored before the chain existed" in check.summary()
    with sqlite3.connect(path) as connection:  # reading created nothing
        assert connection.execute("SELECT name FROM sqlite_master WHERE name = 'dial_chain'").fetchall() == []

    async def append() -> None:
        store = SQLiteStore(path)
        try:
            await store.append(CONVERSATION, [said(4, "after"), said(5, "again")], expected_seq=3)
        finally:
            await store.aclose()

    run(append)
    check = reader.check()
    assert check.ok and (check.entries, check.predates) == (5, 3)
    assert "entries 1–3 predate the chain" in check.summary()
    assert [hash_ is None for _, _, hash_ in reader.read()] == [True, True, True, False, False]
    rows = reader.read()
    reader.write([rows[0], (2, changed(rows[1][1], event={"context_key": "forged"}), None), *rows[2:]])
    broken = reader.check().broken
    assert broken is not None and (broken.seq, broken.kind) == (4, "edited")
    assert "one of entries 1–4" in broken.reason


def test_an_old_postgres_table_gets_the_column_and_chains_onto_its_rows(
    postgres_url: str, pg_schema_url: str
) -> None:
    with psycopg.connect(pg_schema_url) as connection:
        connection.execute(
            OLD_SCHEMA.replace("WITHOUT ROWID", "")
            .replace("INTEGER", "bigint")
            .replace("REAL", "double precision")
        )
        for entry in LOG:
            connection.execute(
                "INSERT INTO dial_log VALUES (%s, %s, %s, %s)",
                (CONVERSATION, entry.seq, entry.time, encode(entry)),
            )

    async def read_only() -> ChainCheck:
        store = PostgresStore(pg_schema_url, create=False)
        try:
            return (await verify_store(store)).conversations[0]
        finally:
            await store.aclose()

    assert run(read_only).predates == 3
    with psycopg.connect(pg_schema_url) as connection:
        columns = connection.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = 'dial_log' AND table_schema = current_schema()"
        )
        assert "hash" not in {name for (name,) in columns}
    backend = Postgres(pg_schema_url)

    async def append() -> None:
        store = backend.store()
        try:
            await store.append(CONVERSATION, [said(4, "after")], expected_seq=3)
            await store.append(CONVERSATION, [said(5, "again")], expected_seq=4)
        finally:
            await store.aclose()

    run(append)
    check = backend.check()
    assert check.ok and (check.entries, check.predates) == (5, 3)
    memory = Memory()
    run(lambda: each_memory(memory))
    assert memory.read()[-1][2] == backend.read()[-1][2]  # chained onto the old rows as if they had hashes


async def each_memory(memory: Memory) -> None:
    await memory.shared.append(CONVERSATION, [*LOG, said(4, "after")], expected_seq=0)
    await memory.shared.append(CONVERSATION, [said(5, "again")], expected_seq=4)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_a_store_with_the_chain_off_writes_no_hash(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """``chain=False`` (for measuring what the chain costs): no hashes; appended to a chained log, its entries
    are reported as missing theirs, and an append with the chain on after them chains onto them."""
    url = {"memory": "memory:", "sqlite": f"sqlite:{tmp_path / 'x.db'}"}.get(kind) or request.getfixturevalue(
        "pg_schema_url"
    )
    shared = MemoryStore(chain=False)

    def opened(chain: bool) -> StorePort:
        if kind == "memory":
            shared.chain = chain
            return shared
        return SQLiteStore(tmp_path / "x.db", chain=chain) if kind == "sqlite" else PostgresStore(url, chain=chain)

    async def work() -> tuple[ChainCheck, ChainCheck, ChainCheck]:
        checks = []
        for chain, entries, after in ((False, LOG[:2], 0), (True, LOG[2:], 2)):
            store = opened(chain)
            try:
                await store.append(CONVERSATION, entries, expected_seq=after)
                checks.append((await verify_store(store)).conversations[0])
            finally:
                if kind != "memory":
                    await store.aclose()
        store = opened(False)
        try:
            await store.append(CONVERSATION, [said(4, "off")], expected_seq=3)
            checks.append((await verify_store(store)).conversations[0])
        finally:
            if kind != "memory":
                await store.aclose()
        return checks[0], checks[1], checks[2]

    unchained, chained, lapsed = run(work)
    assert unchained.ok and unchained.predates == 2
    assert chained.ok and (chained.entries, chained.predates) == (3, 2)
    assert lapsed.broken is not None and (lapsed.broken.seq, lapsed.broken.kind) == (4, "hash missing")


def test_an_append_chains_onto_an_entry_that_lost_its_hash(tmp_path: Path) -> None:
    """A row inserted by other code without a hash, after hashed ones: the next append chains onto the link
    through it, so only that row is reported."""
    backend = SQLite(tmp_path / "x.db")
    run(lambda: each(backend))
    connection = sqlite3.connect(backend.path)
    with connection:
        connection.execute(
            "INSERT INTO dial_log (conversation_id, seq, time, entry) VALUES (?, 5, 0, ?)",
            (CONVERSATION, encode(said(5, "rival"))),
        )
    connection.close()

    async def append() -> None:
        store = backend.store()
        try:
            await store.append(CONVERSATION, [said(6, "mine")], expected_seq=5)
        finally:
            await store.aclose()

    run(append)
    broken = backend.check().broken
    assert broken is not None and (broken.seq, broken.kind) == (5, "hash missing")
    rows = backend.read()
    link = chain_hash(str(rows[3][2]), rows[4][1])  # an unhashed entry, linked as the stores link one
    assert link == link_through(str(rows[3][2]), [rows[4][1]])
    assert rows[5][2] == chain_hash(link, rows[5][1])


def test_a_row_that_is_not_json_is_reported_not_raised(tmp_path: Path) -> None:
    backend = SQLite(tmp_path / "x.db")
    run(lambda: each(backend))
    connection = sqlite3.connect(backend.path)
    with connection:
        connection.execute("UPDATE dial_log SET entry = 'not json' WHERE seq = 2")
    connection.close()
    broken = backend.check().broken
    assert broken is not None and (broken.seq, broken.kind) == (2, "edited")
    assert "not a log entry" in broken.reason


def test_verify_store_checks_every_conversation(tmp_path: Path) -> None:
    async def work() -> list[tuple[str, bool]]:
        store = SQLiteStore(tmp_path / "x.db")
        try:
            for name in ("b", "a", "z"):
                await hold(store, name)
            connection = sqlite3.connect(tmp_path / "x.db")
            with connection:
                connection.execute("DELETE FROM dial_log WHERE conversation_id = 'z' AND seq = 3")
            connection.close()
            report = await verify_store(store)
            assert not report.ok and [check.conversation_id for check in report.broken] == ["z"]
            return [(check.conversation_id, check.ok) for check in report.conversations]
        finally:
            await store.aclose()

    assert run(work) == [("a", True), ("b", True), ("z", False)]


def test_open_store_chains_by_default(url: str) -> None:
    """What ``open_store`` opens, of every kind, writes a hash with every entry."""

    async def work() -> list[StoredRow]:
        store = open_store(url)
        try:
            await store.append(CONVERSATION, LOG, expected_seq=0)
            return await store.rows(CONVERSATION)
        finally:
            await store.aclose()

    rows = run(work)
    assert len(rows) == 3 and all(row.hash is not None for row in rows) and verify_log(rows).ok
