"""A log that shows tampering: every stored entry carries a hash that chains it onto the entry before it.

Scheme version 2 (:data:`SCHEME`, what every store writes):

- An entry's *text* is its JSON text exactly as the store keeps it, which is the text
  :func:`~dial_runtime.stores.base.encode` writes for it: ``{"seq": ..., "time": ..., "event": ...}``, keys in the
  order the event's fields are declared, no spaces, ASCII escapes, ``NaN``/``Infinity`` as Python's JSON writes
  them (``json.dumps(data, separators=(",", ":"))``). That text is canonical in the sense that matters here: it
  reads back (``json.loads``, which keeps the order of keys) to a dict that writes it again byte for byte, so a
  row carried through a JSON Lines export and import hashes the same.
- Entry ``n``'s hash is ``"2:" + SHA-256(previous + "\\n" + text_n).hexdigest()`` (:func:`chain_hash`), the
  SHA-256 taken over the UTF-8 bytes of entry ``n - 1``'s hash as stored, a newline (0x0A) and entry ``n``'s
  text. Entry 1's ``previous`` is :data:`GENESIS`, ``"1:"`` and 64 zeros. The scheme's version is the prefix of
  every hash, so a scheme can take over at any entry without rewriting the ones before it.
- Scheme 1, which earlier versions wrote, is the same but for the text: the entry's dict with its keys sorted at
  every level (:func:`canonical`), so a store had to write the entry a second time, sorted, at every append.
  Scheme 1 hashes still verify, and a log may hold both: entries chained under scheme 1, then under scheme 2 from
  the first append by this version on.
- The hash is kept beside the row, in the column ``dial_log.hash`` (SQLite and PostgreSQL; the in-process store
  keeps it beside each entry), written by the store in the transaction of the append that checks the seq.

Entries stored before the chain existed (a database made by an older version) have no hash. They must come
first: such a prefix ``1..k`` *predates the chain* (:attr:`ChainCheck.predates`). The chain still runs through
it, each unhashed entry linked as the scheme of entry ``k + 1``'s hash links an entry (the scheme that wrote
it), so entry ``k + 1``'s stored hash covers entries ``1..k`` from the moment it is written; a log that is all
prefix is covered by no hash until its next append (and is linked as :data:`SCHEME` links). An entry without a
hash after one with a hash is tampering, or a write by an older version or by a store with the chain turned off:
it is reported as ``"hash missing"``.

Verification hashes the rows as stored (:class:`StoredRow`), never entries decoded and encoded again by this
version of the code, which would write an old entry differently once its event class gains a field.

What the chain shows, and what it cannot: an entry edited, removed from the middle of the log, inserted or moved
breaks it, and :func:`verify_log` names the first entry that does not match and how. Entries removed from the end,
or a log rewritten whole with every hash recomputed, leave a chain that verifies: only a head signed and kept
elsewhere catches those (:mod:`dial_runtime.stores.signing`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol

import msgspec

from ..ports import StorePort
from .base import ENTRY_TEXT

__all__ = [
    "GENESIS",
    "SCHEME",
    "SCHEMES",
    "ChainBreak",
    "ChainCheck",
    "ChainReport",
    "ChainedStorePort",
    "StoredRow",
    "Tampering",
    "canonical",
    "chain_hash",
    "link_through",
    "parsed",
    "scheme_of",
    "verify_log",
    "verify_store",
    "well_formed",
]

#: The version of the hash-chain scheme the stores write.
SCHEME = 2

#: The versions this module checks.
SCHEMES = (1, 2)

#: What entry 1's hash chains onto (under either scheme).
GENESIS = "1:" + "0" * 64

_HEX = frozenset("0123456789abcdef")
_PREFIXES = frozenset(str(scheme) for scheme in SCHEMES)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
_ENCODERS = {1: _CANONICAL, 2: ENTRY_TEXT}

#: How an entry fails to match its chain.
Tampering = Literal["edited", "removed", "inserted", "reordered", "hash missing", "unknown scheme"]


def canonical(data: Any) -> str:
    """Scheme 1's text of an entry's dict (or the canonical text of any JSON value): sorted keys, no spaces, ASCII
    escapes, and ``NaN``/``Infinity`` as Python's JSON writes them."""
    return _CANONICAL.encode(data)


def chain_hash(previous: str, text: str, scheme: int = SCHEME) -> str:
    """The hash of an entry whose text (under ``scheme``) is ``text``, chained onto the link ``previous``."""
    hasher = _SHA256.copy()
    hasher.update(f"{previous}\n{text}".encode("utf-8", "surrogatepass"))
    return f"{scheme}:" + hasher.hexdigest()


# An empty SHA-256 copied for each hash: the copy skips OpenSSL's look-up of the algorithm that a new hasher
# makes, which measured a tenth of the chain's cost per turn (copying is safe from any thread: it takes the
# hasher's lock, and the template is never updated).
_SHA256 = hashlib.sha256()


def link_through(previous: str, texts: Iterable[str]) -> str:
    """The chain's link after stored texts that have no hash of their own, starting from ``previous`` (how a
    store chains onto entries that predate the chain, or lost their hash), each linked as :data:`SCHEME` links
    an entry."""
    for text in texts:
        previous = chain_hash(previous, text)
    return previous


def scheme_of(value: object) -> int | None:
    """The scheme of a well-formed hash (``None`` for anything else)."""
    return int(value[0]) if well_formed(value) else None  # type: ignore[index]


def parsed(text: str) -> Any:
    """A stored row's text as ``json.loads`` gives it; ``None`` when it is not JSON (verification reports it)."""
    try:
        return json.loads(text)
    except ValueError:
        return None


def well_formed(value: object) -> bool:
    """Whether ``value`` is a hash of a scheme this module checks: the scheme's digit, ``":"`` and 64 lowercase
    hex digits."""
    return (
        isinstance(value, str)
        and len(value) == 66
        and value[0] in _PREFIXES
        and value[1] == ":"
        and _HEX.issuperset(value[2:])
    )


class StoredRow(msgspec.Struct, frozen=True):
    """One entry as its store holds it: its seq (the store's key), its JSON text as stored, and its hash
    (``None``: none is stored). A scheme-2 hash covers ``text`` itself; a scheme-1 hash covers :func:`canonical`
    of :attr:`entry` (which is ``text`` itself when the text is sorted, as scheme-1 stores wrote it)."""

    seq: int
    text: str
    hash: str | None = None

    @property
    def entry(self) -> Any:
        """The entry's dict, as ``json.loads`` of the stored text gives it (``None`` when the text is not JSON)."""
        return parsed(self.text)

    @classmethod
    def of(cls, seq: int, data: Any, hash: str | None = None) -> StoredRow:
        """The row of an entry held as a dict (a line of a file), its text written as a store writes it, in the
        dict's own order of keys (so a stored row read back from a file has its stored text again)."""
        return cls(seq, ENTRY_TEXT.encode(data), hash)


class ChainBreak(msgspec.Struct, frozen=True):
    """The first entry that does not match its chain: its seq, how it fails, and why, naming the entry."""

    seq: int
    kind: Tampering
    reason: str

    def __str__(self) -> str:
        return self.reason


class ChainCheck(msgspec.Struct, frozen=True, kw_only=True):
    """One conversation's chain, verified.

    ``predates``: entries ``1..predates`` have no hash (they were stored before the chain existed). ``head_seq``
    and ``head``: the last entry the chain reaches intact and the chain's link there (the log's last entry when
    ``ok``; :data:`GENESIS` at seq 0). ``heads``: the link at each seq asked for that the chain reaches intact.
    ``broken``: the first entry that does not match, or ``None``.
    """

    conversation_id: str
    entries: int
    predates: int = 0
    head_seq: int = 0
    head: str = GENESIS
    broken: ChainBreak | None = None
    heads: dict[int, str] = msgspec.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether every entry matches the chain."""
        return self.broken is None

    def summary(self) -> str:
        """The check in one line: what matched, or the first entry that does not and why."""
        if self.broken is not None:
            return str(self.broken)
        if self.entries == 0:
            return "no entries"
        count = f"{self.entries} entr{'y' if self.entries == 1 else 'ies'}"
        if self.predates == self.entries:
            return (
                f"ok: {count}, all stored before the chain existed: no hash covers them yet (the next append "
                "chains onto them; a signed head covers them now)"
            )
        head = f"head #{self.head_seq} {self.head[:18]}…"
        if self.predates:
            return (
                f"ok: {count}, {head}; entries 1–{self.predates} predate the chain (no hash of their own; entry "
                f"{self.predates + 1}'s hash covers them)"
            )
        return f"ok: {count}, {head}"


class ChainReport(msgspec.Struct, frozen=True):
    """The chains of a store's conversations, each verified."""

    conversations: tuple[ChainCheck, ...]

    @property
    def ok(self) -> bool:
        """Whether every conversation's chain matches."""
        return all(check.ok for check in self.conversations)

    @property
    def broken(self) -> tuple[ChainCheck, ...]:
        """The conversations whose chain does not match."""
        return tuple(check for check in self.conversations if not check.ok)


class ChainedStorePort(StorePort, Protocol):
    """A store that also gives a conversation's rows as stored, with their hashes (every store of
    :mod:`dial_runtime.stores` does)."""

    async def rows(self, conversation_id: str) -> list[StoredRow]:
        """The conversation's entries as stored, in seq order, each with its hash; ``[]`` when it has none."""
        ...


async def verify_store(
    store: ChainedStorePort,
    conversation_ids: Iterable[str] | None = None,
    *,
    heads_at: Mapping[str, Collection[int]] | None = None,
) -> ChainReport:
    """Verify the chain of every conversation in ``store`` (or of those named), reading each one's rows as stored;
    ``heads_at`` asks, per conversation, for the chain's link at some seqs (see :attr:`ChainCheck.heads`)."""
    ids = list(conversation_ids) if conversation_ids is not None else await store.conversations()
    wanted = heads_at or {}
    checks = []
    for conversation_id in ids:
        rows = await store.rows(conversation_id)
        checks.append(verify_log(rows, conversation_id=conversation_id, heads_at=wanted.get(conversation_id, ())))
    return ChainReport(tuple(checks))


def verify_log(
    rows: Sequence[StoredRow], *, conversation_id: str = "", heads_at: Collection[int] = ()
) -> ChainCheck:
    """Check one conversation's stored rows (in the order the store keeps them) against their hash chain: the
    first entry that does not match is named, with how (:data:`Tampering`) and why."""
    wanted = set(heads_at)
    heads = {0: GENESIS} if 0 in wanted else {}
    links: list[str] = []
    link = GENESIS
    predates = 0
    first = next((row.hash for row in rows if row.hash is not None), None)
    prefix = (_scheme(first) if first is not None else 0) or SCHEME  # how the unhashed entries link
    for index, row in enumerate(rows):
        seq = index + 1
        stored = row.hash
        if stored is not None and row.seq == seq and chain_hash(link, row.text, _scheme(stored)) == stored:
            link = stored  # the stored text is the text its hash covers: the common case, and cheap
        else:
            broken = _checked(rows, index, links, predates, prefix)
            if isinstance(broken, ChainBreak):
                return ChainCheck(
                    conversation_id=conversation_id,
                    entries=len(rows),
                    predates=min(predates, index),
                    head_seq=index,
                    head=links[-1] if links else GENESIS,
                    broken=broken,
                    heads=heads,
                )
            if stored is None:
                predates += 1
            link = broken
        links.append(link)
        if seq in wanted:
            heads[seq] = link
    return ChainCheck(
        conversation_id=conversation_id,
        entries=len(rows),
        predates=predates,
        head_seq=len(rows),
        head=link,
        heads=heads,
    )


def _checked(
    rows: Sequence[StoredRow], index: int, links: list[str], predates: int, prefix: int
) -> str | ChainBreak:
    """The chain's link after row ``index``, whose stored text is not what its hash covers (or which has no
    hash); or why the row does not match. ``links``: the verified link through each row before it; ``prefix``:
    the scheme that links the entries that predate the chain."""
    link = links[-1] if links else GENESIS
    row, seq = rows[index], index + 1
    broken = _misplaced(rows, index)
    if broken is not None:
        return broken
    if row.hash is None:
        if predates < index:
            return ChainBreak(
                seq,
                "hash missing",
                f"entry {seq} has no hash, though the entries before it have: it was inserted, or its hash "
                "deleted, or it was written without the chain (by an older version, or a store with the chain "
                "turned off)",
            )
        return chain_hash(link, row.text if prefix == 2 else _CANONICAL.encode(row.entry), prefix)
    scheme = scheme_of(row.hash)
    if scheme is None:
        return _bad_hash(seq, row.hash)
    if chain_hash(link, _ENCODERS[scheme].encode(row.entry), scheme) == row.hash:
        return row.hash  # its text is not written as its scheme writes it, but holds what its hash covers
    return _Diagnosis(rows, links, predates).at(index)


def _misplaced(rows: Sequence[StoredRow], index: int) -> ChainBreak | None:
    """What is wrong with where row ``index`` stands or what it says it is, before any hash is looked at."""
    row, seq = rows[index], index + 1
    entry = row.entry
    own = entry.get("seq") if isinstance(entry, dict) else None
    if not isinstance(own, int) or isinstance(own, bool):
        return ChainBreak(seq, "edited", f"entry {seq} was edited: its stored row is not a log entry any more")
    if row.seq != seq:
        seqs = [other.seq for other in rows]
        if row.seq in seqs[:index]:
            return ChainBreak(seq, "inserted", f"entry {row.seq} was inserted: the log holds it twice")
        if row.seq > seq and seq not in seqs[index:]:
            gone = row.seq
            for later in range(seq + 1, row.seq):
                if later in seqs:
                    gone = later
                    break
            missing = f"entry {seq} was" if gone == seq + 1 else f"entries {seq}–{gone - 1} were"
            return ChainBreak(seq, "removed", f"{missing} removed: after entry {seq - 1} comes entry {row.seq}")
        return ChainBreak(
            seq, "reordered", f"the entries were reordered: entry {row.seq} stands where entry {seq} should"
        )
    if own != seq:
        if 1 <= own <= len(rows):
            return ChainBreak(
                seq, "reordered", f"entry {seq} was reordered: the row stored as entry {seq} holds entry {own}"
            )
        return ChainBreak(seq, "edited", f"entry {seq} was edited: its seq says {own}")
    return None


def _scheme(value: str) -> int:
    """The scheme a stored hash names (its first character; 0 when that is not a scheme this module checks, so
    the hash matches nothing)."""
    return int(value[0]) if value[:1] in _PREFIXES else 0


def _bad_hash(seq: int, value: str) -> ChainBreak:
    version, colon, _ = value.partition(":")
    known = " and ".join(str(scheme) for scheme in SCHEMES)
    if colon and version.isdigit() and int(version) not in SCHEMES:
        return ChainBreak(
            seq,
            "unknown scheme",
            f"entry {seq}'s hash is of chain scheme {int(version)}, which this version of dial-runtime cannot "
            f"check (it knows schemes {known})",
        )
    kinds = " or ".join(f"scheme-{scheme}" for scheme in SCHEMES)
    return ChainBreak(seq, "edited", f"entry {seq}'s hash was edited: it is not a {kinds} hash")


class _Diagnosis:
    """Why a row's hash does not match: the hypotheses a person can act on, each tested by hashing.

    Every hypothesis asks whether an entry, numbered as it once was, chains onto a link the log still holds: onto
    a verified link before the break, or onto a hash stored further on. Only a break pays for this; an intact
    chain never comes here.
    """

    def __init__(self, rows: Sequence[StoredRow], links: list[str], predates: int) -> None:
        self.rows = rows
        self.links = links  # the verified link through each row before the break
        self.predates = predates
        self._relabelled: dict[tuple[int, int], Callable[[int], str]] = {}

    def hash_at(self, index: int) -> str | None:
        stored = self.rows[index].hash if 0 <= index < len(self.rows) else None
        return stored if well_formed(stored) else None

    def prior(self, seq: int) -> str | None:
        """The link an entry at ``seq`` would chain onto: verified before the break, as stored after it."""
        if seq == 1:
            return GENESIS
        if seq - 2 < len(self.links):
            return self.links[seq - 2]
        return self.hash_at(seq - 2)

    def text(self, index: int, seq: int, scheme: int) -> str:
        """Row ``index``'s text under ``scheme``, had it been numbered ``seq``."""
        relabelled = self._relabelled.get((index, scheme))
        if relabelled is None:
            relabelled = self._relabelled[index, scheme] = _relabeller(self.rows[index].entry, scheme)
        return relabelled(seq)

    def makes(self, previous: str, index: int, seq: int, target: str | None) -> bool:
        """Whether row ``index``, numbered ``seq`` and chained onto ``previous``, gives the hash ``target``."""
        if target is None:
            return False
        scheme = _scheme(target)
        return chain_hash(previous, self.text(index, seq, scheme), scheme) == target

    def placed(self, index: int, seq: int, previous: str | None = None) -> bool:
        """Whether row ``index``, numbered ``seq``, chains onto ``previous`` (by default the link before ``seq``)
        and gives its own hash (it moved with its hash) or the hash stored at ``seq`` (its hash stayed)."""
        if previous is None:
            previous = self.prior(seq)
        if previous is None:
            return False
        return self.makes(previous, index, seq, self.hash_at(index)) or self.makes(
            previous, index, seq, self.hash_at(seq - 1)
        )

    def at(self, index: int) -> ChainBreak:
        rows, seq = self.rows, index + 1
        later = index + 1 < len(rows) and self.hash_at(index) is not None and self.hash_at(index + 1) is not None
        shift = self._successor_shift(index) if later else None
        if shift == 0 or not later:
            moved = self._found(index)
            if moved is not None and moved != seq:
                return self._moved(index, moved)
            if self.predates and self.predates == index:
                return self._prefix(seq)
            return ChainBreak(seq, "edited", f"entry {seq} was edited: its content no longer matches its hash")
        if shift is not None:
            return self._removed(seq, seq + shift)
        moved = self._found(index)
        if moved is not None:
            return self._moved(index, moved)
        for later_index in range(index + 1, len(rows)):
            if self.placed(later_index, seq):
                last = later_index  # rows index..later_index - 1 came in before it
                what = f"entry {seq} was" if last == seq else f"entries {seq}–{last} were"
                return ChainBreak(
                    seq,
                    "inserted",
                    f"{what} inserted and the entries after renumbered: entry {last + 1} was entry {seq}, right "
                    f"after entry {seq - 1}",
                )
        if self.predates and self.predates == index:
            return self._prefix(seq)
        return ChainBreak(
            seq,
            "reordered",
            f"entry {seq} does not chain onto entry {seq - 1}: the link between them is broken (entries around it "
            "were rewritten, removed or moved)",
        )

    def _successor_shift(self, index: int) -> int | None:
        """``d`` when the next row, numbered ``d`` further on than it is now, chains onto this row's stored hash:
        0 means this row's hash is its own, so its content changed; more means ``d`` entries before it went, and
        the ones after were renumbered."""
        stored, following = self.rows[index].hash, self.rows[index + 1].hash
        assert stored is not None
        seq = index + 2
        for shift in range(len(self.rows) + 1):
            if self.makes(stored, index + 1, seq + shift, following):
                return shift
        return None

    def _found(self, index: int) -> int | None:
        """The seq at which row ``index`` was stored when its hash was made, if the log still shows one."""
        for seq in range(1, len(self.rows) + 1):
            if seq != index + 1 and self.placed(index, seq):
                return seq
        swapped = self.hash_at(index + 1)  # two neighbours swapped with their hashes: it chains onto the next
        if swapped is not None and self.placed(index, index + 2, swapped):
            return index + 2
        return None

    def _moved(self, index: int, was: int) -> ChainBreak:
        seq = index + 1
        if was < seq:
            what = f"entry {was} was" if was == seq - 1 else f"entries {was}–{seq - 1} were"
            return ChainBreak(
                was,
                "inserted",
                f"{what} inserted and the entries after renumbered: entry {seq} was entry {was}, right after "
                f"entry {was - 1}",
            )
        if index + 1 < len(self.rows) and self.placed(index + 1, was + 1):
            return self._removed(seq, was)
        return ChainBreak(
            seq,
            "reordered",
            f"entry {seq} was reordered: it holds what was entry {was} (entries were swapped or moved)",
        )

    @staticmethod
    def _removed(seq: int, was: int) -> ChainBreak:
        what = f"entry {seq} was" if was == seq + 1 else f"entries {seq}–{was - 1} were"
        return ChainBreak(
            seq,
            "removed",
            f"{what} removed and the entries after renumbered: the entry numbered {seq} now was entry {was}",
        )

    @staticmethod
    def _prefix(seq: int) -> ChainBreak:
        return ChainBreak(
            seq,
            "edited",
            f"entry {seq}'s hash does not match it and the entries before it, which predate the chain (they have "
            f"no hash of their own): one of entries 1–{seq} was edited, removed, inserted or reordered",
        )


def _relabeller(entry: Any, scheme: int) -> Callable[[int], str]:
    """The text of ``entry`` under ``scheme`` for any seq: the rest of the entry is written once, around a mark
    where its seq goes."""
    encoder = _ENCODERS.get(scheme, ENTRY_TEXT)
    if not isinstance(entry, dict) or "seq" not in entry:
        return lambda seq: encoder.encode(entry)
    marked = encoder.encode({**entry, "seq": _MARK})
    if marked.count(_MARK_TEXT) != 1:  # the entry holds the mark itself: written whole for each seq
        return lambda seq: encoder.encode({**entry, "seq": seq})
    start, _, end = marked.partition(_MARK_TEXT)
    return lambda seq: f"{start}{seq}{end}"


_MARK = "\x00seq\x00"
_MARK_TEXT = json.dumps(_MARK)
