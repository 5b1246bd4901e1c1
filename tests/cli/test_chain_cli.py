"""The chain on the command line and in files: export keeps each entry's hash and import checks them; ``keygen``,
``sign`` and ``verify`` with their exit statuses (0: all match, 1: a mismatch named, 2: bad input) and one-line
errors; and a signed head, which catches what the chain alone cannot (a log rewritten whole, entries cut from
its end) and tells a log that grew since signing from one tampered with.
"""

from __future__ import annotations

import io
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from dial_runtime.audit.signing import (
    dumps_signed_head,
    generate_key,
    load_private_key,
    load_public_key,
    loads_signed_head,
    private_key_pem,
    public_key_pem,
    sign_head,
    verify_head,
)
from dial_runtime.cli import main
from dial_runtime.errors import LogError
from dial_runtime.stores import MemoryStore
from dial_runtime.stores.chain import ChainBreak, ChainCheck, verify_store
from dial_runtime.stores.jsonl import CHAINED_VERSION, FORMAT, export_rows, import_jsonl, read_jsonl

from ..audit.test_chain import (
    CONVERSATION,
    SQLite,
    Tampering,
    drop,
    edit,
    hold,
    insert,
    rechained,
    run,
    said,
    swap,
)

RECORDINGS = Path(__file__).parents[1] / "recordings"


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], status: int, says: str) -> str:
    """Run a command that must fail: its status, and one line on standard error saying ``says``."""
    done, _, err = cli(argv, capsys)
    lines = err.splitlines()
    assert done == status, err
    assert len(lines) == 1 and lines[0].startswith(f"dial-runtime {argv[0]}: "), err
    assert says in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def stored(tmp_path: Path) -> SQLite:
    """A SQLite store holding one real conversation (``c``, 27 entries) and a second one (``d``)."""
    backend = SQLite(tmp_path / "logs.db")

    async def fill() -> None:
        store = backend.store()
        try:
            await hold(store)
            await hold(store, "d")
        finally:
            await store.aclose()

    run(fill)
    return backend


def url(backend: SQLite) -> str:
    return f"sqlite:{backend.path}"


@pytest.fixture
def keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    private, public = str(tmp_path / "key.pem"), str(tmp_path / "key.pub")
    status, out, _ = cli(["keygen", private, public], capsys)
    assert status == 0 and "keep it secret" in out
    return private, public


# --- export and import -------------------------------------------------------------------------------------------


def test_export_then_import_keeps_every_hash(
    stored: SQLite, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exported = tmp_path / "c.jsonl"
    assert cli(["export", CONVERSATION, "--store", url(stored), "-o", str(exported)], capsys) == (0, "", "")
    lines = exported.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0]) == {"format": FORMAT, "version": CHAINED_VERSION, "conversation_id": CONVERSATION}
    rows = stored.read()
    assert [json.loads(line)["hash"] for line in lines[1:]] == [hash_ for _, _, hash_ in rows]
    copy = SQLite(tmp_path / "copy.db")
    status, out, _ = cli(["import", str(exported), "--store", url(copy), "--id", CONVERSATION], capsys)
    assert status == 0 and "their hash chain kept (head #27 " in out
    assert copy.read() == rows
    again = tmp_path / "again.jsonl"
    assert cli(["export", CONVERSATION, "--store", url(copy), "-o", str(again)], capsys)[0] == 0
    assert again.read_text(encoding="utf-8") == exported.read_text(encoding="utf-8")


def test_a_version_1_file_still_imports_and_is_chained(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = SQLite(tmp_path / "logs.db")
    status, out, _ = cli(["import", str(RECORDINGS / "demo.jsonl"), "--store", url(store)], capsys)
    assert (status, out) == (0, f"imported 50 event(s) into {url(store)} as 'demo'\n")
    check = run(lambda: first_check(store))
    assert check.ok and check.entries == 50 and check.predates == 0


async def first_check(backend: SQLite) -> Any:
    store = backend.store()
    try:
        return (await verify_store(store)).conversations[0]
    finally:
        await store.aclose()


def exported(backend: SQLite, conversation_id: str = CONVERSATION) -> list[str]:
    """The conversation's lines as ``export`` writes them."""

    async def rows() -> list[Any]:
        store = backend.store()
        try:
            return await store.rows(conversation_id)
        finally:
            await store.aclose()

    written = io.StringIO()
    export_rows(run(rows), written, conversation_id=conversation_id)
    return written.getvalue().splitlines()


def tampered_lines(lines: list[str], tampering: Tampering) -> list[str]:
    """The file's lines with its entries tampered with as the store's rows are in ``tests/audit/test_chain.py``."""
    rows = []
    for line in lines[1:]:
        data = json.loads(line)
        hash_ = data.pop("hash", None)
        rows.append((data["seq"], json.dumps(data), hash_))
    written = []
    for _, text, hash_ in tampering.tamper(rows):
        data = json.loads(text)
        written.append(json.dumps({**data, **({"hash": hash_} if hash_ is not None else {})}))
    return [lines[0], *written]


FILE_TAMPERINGS = {
    "a payload edited": (Tampering(edit(5, payload={"text": "wine"}), 5, "edited"), 6),
    "a decision removed": (Tampering(drop(20, renumber=False), 20, "removed"), 21),
    "a decision removed, the rest renumbered": (Tampering(drop(14, renumber=True), 14, "removed"), 15),
    "an approval inserted": (Tampering(insert(20, "own"), 20, "inserted"), 21),
    "two decisions swapped": (Tampering(swap(14, 20, renumber=True, hashes_follow=True), 14, "reordered"), 15),
}


@pytest.mark.parametrize("case", FILE_TAMPERINGS)
def test_import_refuses_a_file_whose_chain_is_broken(
    case: str, stored: SQLite, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tampering, line = FILE_TAMPERINGS[case]
    path = tmp_path / "tampered.jsonl"
    path.write_text("\n".join(tampered_lines(exported(stored), tampering)) + "\n", encoding="utf-8")
    target = tmp_path / "target.db"
    said = refused(["import", str(path), "--store", f"sqlite:{target}"], capsys, 1, f"line {line}: the hash chain")
    assert f"entry {tampering.seq} was {tampering.kind}" in said or f"entry {tampering.seq} " in said
    assert not target.exists() or not sqlite3.connect(target).execute("SELECT * FROM dial_log").fetchall()
    with (
        path.open(encoding="utf-8") as file,
        pytest.raises(LogError, match=f"line {line}: the hash chain is broken"),
    ):
        import_jsonl(file)


def test_a_file_whose_chain_was_recomputed_imports(stored: SQLite, tmp_path: Path) -> None:
    """What the file's chain cannot tell: every hash made again after an insertion. It reads; only a head signed
    before it shows (see the signature tests)."""
    lines = tampered_lines(
        exported(stored), Tampering(lambda rows: rechained(insert(20, "own")(rows)), None, None)
    )
    read = read_jsonl(lines)
    assert read.chain is not None and read.chain.ok and len(read.entries) == 28


def test_a_file_with_entries_from_before_the_chain(
    stored: SQLite, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store's entries from before the chain have no hash in its export: they import, and the store chains them
    so that the head is the file's."""
    lines = exported(stored)
    unhashed = [lines[0]] + [
        json.dumps({k: v for k, v in json.loads(line).items() if k != "hash"}) for line in lines[1:6]
    ]
    path = tmp_path / "prefix.jsonl"
    path.write_text("\n".join(unhashed + lines[6:]) + "\n", encoding="utf-8")
    read = read_jsonl(unhashed + lines[6:])
    assert read.chain is not None and read.chain.ok and read.chain.predates == 5
    copy = SQLite(tmp_path / "copy.db")
    status, out, _ = cli(["import", str(path), "--store", url(copy)], capsys)
    assert status == 0 and "hash chain kept" in out
    assert copy.read() == stored.read()
    later = [
        lines[0],
        *lines[1:3],
        json.dumps({k: v for k, v in json.loads(lines[3]).items() if k != "hash"}),
        *lines[4:],
    ]
    with pytest.raises(LogError, match="line 4: the hash chain is broken: entry 3 has no hash"):
        read_jsonl(later)


def test_a_version_1_line_may_not_carry_a_hash(stored: SQLite) -> None:
    lines = exported(stored)
    with pytest.raises(LogError, match=r"line 2: not a log entry .*unknown field\(s\) hash"):
        import_jsonl([lines[0].replace('"version": 2', '"version": 1'), *lines[1:]])
    with pytest.raises(LogError, match="its hash is 7, not a string"):
        import_jsonl([lines[0], lines[1].replace(json.loads(lines[1])["hash"].join('""'), "7")])
    with pytest.raises(LogError, match="version 3 is not supported"):
        import_jsonl([lines[0].replace('"version": 2', '"version": 3')])


# --- verify ------------------------------------------------------------------------------------------------------


def test_verify_says_every_chain_matches(stored: SQLite, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = cli(["verify", "--store", url(stored)], capsys)
    assert (status, err) == (0, "")
    assert [line.split()[:3] for line in out.splitlines()] == [["c", "ok:", "27"], ["d", "ok:", "27"]]
    assert cli(["verify", "d", "--store", url(stored)], capsys)[1].startswith("d  ok: 27 entries, head #27 2:")


def test_verify_names_the_first_mismatch_of_each_conversation(
    stored: SQLite, capsys: pytest.CaptureFixture[str]
) -> None:
    stored.write(edit(14, by="eve")(stored.read()))
    connection = sqlite3.connect(stored.path)
    with connection:
        connection.execute("DELETE FROM dial_log WHERE conversation_id = 'd' AND seq IN (3, 20)")
    connection.close()
    status, out, err = cli(["verify", "--store", url(stored)], capsys)
    assert status == 1
    assert out.splitlines() == [
        "c  entry 14 was edited: its content no longer matches its hash",
        "d  entry 3 was removed: after entry 2 comes entry 4",
    ]
    assert err == "dial-runtime verify: 2 of 2 conversation(s) do not match their chain\n"
    status, out, _ = cli(["verify", "c", "nobody", "--store", url(stored)], capsys)
    assert status == 1 and out.splitlines()[1] == "nobody  the store holds no such conversation"


def test_verify_reads_a_postgres_store(pg_schema_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from ..audit.test_chain import Postgres

    backend = Postgres(pg_schema_url)

    async def fill() -> None:
        store = backend.store()
        try:
            await hold(store)
        finally:
            await store.aclose()

    run(fill)
    assert cli(["verify", "--store", pg_schema_url], capsys)[0] == 0
    backend.write(swap(14, 20, renumber=True, hashes_follow=True)(backend.read()))
    status, out, _ = cli(["verify", "--store", pg_schema_url], capsys)
    assert (
        status == 1
        and out == "c  entry 14 was reordered: it holds what was entry 20 (entries were swapped or moved)\n"
    )


def test_verify_and_sign_write_nothing(
    stored: SQLite, keys: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    signature = tmp_path / "sig.json"
    assert cli(["sign", "c", "--store", url(stored), "--key", keys[0], "-o", str(signature)], capsys)[0] == 0
    connection = sqlite3.connect(stored.path)
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    before = {path.name: path.stat().st_mtime_ns for path in tmp_path.iterdir()}
    argv = ["--store", url(stored), "--public-key", keys[1], "--signature", str(signature)]
    assert cli(["verify", *argv], capsys)[0] == 0
    assert cli(["sign", "c", "--store", url(stored), "--key", keys[0]], capsys)[0] == 0
    assert {path.name: path.stat().st_mtime_ns for path in tmp_path.iterdir()} == before


BAD_INPUT = {
    "an unknown store URL": (["verify", "--store", "mysql://h/d"], "is not one of memory:"),
    "a database that is not there": (["verify", "--store", "sqlite:nowhere.db"], "no such database file"),
    "a public key without a signature": (["verify", "--store", "STORE", "--public-key", "PUB"], "go together"),
    "a signature that is not there": (
        ["verify", "--store", "STORE", "--public-key", "PUB", "--signature", "gone.json"],
        "cannot read gone.json: no such file",
    ),
    "a signature that is not one": (
        ["verify", "--store", "STORE", "--public-key", "PUB", "--signature", "PUB"],
        "not a signature document: not JSON",
    ),
    "a public key that is not one": (
        ["verify", "--store", "STORE", "--public-key", "SIG", "--signature", "SIG"],
        "not a PEM public key",
    ),
    "a private key given to verify": (
        ["verify", "--store", "STORE", "--public-key", "KEY", "--signature", "SIG"],
        "a private key: verifying needs only the public key",
    ),
    "a signature of another conversation": (
        ["verify", "d", "--store", "STORE", "--public-key", "PUB", "--signature", "SIG"],
        "signs conversation 'c', which is not among the ids given",
    ),
    "a signing key that is not there": (
        ["sign", "c", "--store", "STORE", "--key", "gone.pem"],
        "cannot read gone.pem",
    ),
    "a public key to sign with": (["sign", "c", "--store", "STORE", "--key", "PUB"], "not a PEM private key"),
    "keys that exist already": (["keygen", "KEY", "new.pub"], "exists: keygen never overwrites a key"),
    "a folder that is not there": (
        ["keygen", "no/such/key.pem", "no/such/key.pub"],
        "cannot write no/such/key.pem",
    ),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_is_one_line_and_exit_2(
    case: str,
    stored: SQLite,
    keys: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    signature = tmp_path / "sig.json"
    assert cli(["sign", "c", "--store", url(stored), "--key", keys[0], "-o", str(signature)], capsys)[0] == 0
    names = {"STORE": url(stored), "PUB": keys[1], "KEY": keys[0], "SIG": str(signature)}
    argv, says = BAD_INPUT[case]
    monkeypatch.chdir(tmp_path)
    refused([names.get(word, word) for word in argv], capsys, 2, says)


def test_keygen_writes_a_key_pair_only_its_owner_reads(keys: tuple[str, str]) -> None:
    private, public = keys
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    key = load_private_key(Path(private).read_bytes())
    assert public_key_pem(key) == Path(public).read_bytes()
    assert load_public_key(Path(public).read_bytes()) is not None


def test_sign_refuses_a_broken_chain_and_a_missing_conversation(
    stored: SQLite, keys: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    stored.write(edit(5, payload={"text": "wine"})(stored.read()))
    refused(
        ["sign", "c", "--store", url(stored), "--key", keys[0]], capsys, 1, "will not sign a broken chain: entry 5"
    )
    refused(
        ["sign", "nobody", "--store", url(stored), "--key", keys[0]], capsys, 1, "holds no conversation 'nobody'"
    )


# --- signed heads ------------------------------------------------------------------------------------------------


def signed_then(
    stored: SQLite,
    keys: tuple[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: Any = None,
    *,
    public: str | None = None,
) -> tuple[int, str, str]:
    """Sign conversation c's head, change the store (or the signature document) with ``change``, then verify."""
    signature = tmp_path / "sig.json"
    assert cli(["sign", "c", "--store", url(stored), "--key", keys[0], "-o", str(signature)], capsys)[0] == 0
    if change is not None:
        change(stored, signature)
    return cli(
        ["verify", "--store", url(stored), "--public-key", public or keys[1], "--signature", str(signature)],
        capsys,
    )


def grown(stored: SQLite, _: Path) -> None:
    async def more() -> None:
        store = stored.store()
        try:
            from dial_runtime import Conversation, policy_human

            from ..fakes import Agent, Notes

            agent = Agent(["<dial><dial-inform>Sure.</dial-inform></dial>"])
            conversation = await Conversation.open(
                store, "c", agent=agent, domain=Notes(), human=policy_human("accept")
            )
            await conversation.say("and bread?")
        finally:
            await store.aclose()

    run(more)


def rewritten(stored: SQLite, _: Path) -> None:
    stored.write(rechained(insert(20, "own")(stored.read())))


def cut(stored: SQLite, _: Path) -> None:
    stored.write(stored.read()[:-2])


def deleted(stored: SQLite, _: Path) -> None:
    connection = sqlite3.connect(stored.path)
    with connection:
        connection.execute("DELETE FROM dial_log WHERE conversation_id = 'c'")
    connection.close()


def head_altered(_: SQLite, signature: Path) -> None:
    document = json.loads(signature.read_text())
    document["seq"] = 20
    signature.write_text(json.dumps(document))


def broken_before(stored: SQLite, _: Path) -> None:
    stored.write(edit(5, payload={"text": "wine"})(stored.read()))


SIGNED = {
    "the head as signed": (None, 0, "the stored head is the signed head #27"),
    "the log grown since": (grown, 0, "entries 28–33 came after it, unsigned (not tampering"),
    "the log rewritten, every hash recomputed": (rewritten, 1, "no longer lead to its signed head #27"),
    "its last entries cut off": (cut, 1, "the log ends at entry 25, before its signed head #27"),
    "its last entries cut off, named": (cut, 1, "entries 26–27 were removed"),
    "the conversation deleted": (deleted, 1, "the store holds no such conversation, but its signed head #27"),
    "the signed head altered": (head_altered, 1, "the signature does not cover what the document says"),
    "an entry before the head edited": (broken_before, 1, "the chain breaks before its signed head"),
}


@pytest.mark.parametrize("case", SIGNED)
def test_a_signed_head_against_the_stored_log(
    case: str, stored: SQLite, keys: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change, status, says = SIGNED[case]
    done, out, err = signed_then(stored, keys, tmp_path, capsys, change)
    assert done == status, out + err
    signature_line = out.splitlines()[-1]
    assert signature_line.startswith("signature: conversation 'c': ") and says in signature_line, signature_line
    if status:
        assert len(err.splitlines()) == 1 and err.startswith("dial-runtime verify: ")
        if change in (rewritten, cut):  # the chain alone finds nothing wrong
            assert out.splitlines()[0].startswith("c  ok: ")
    else:
        assert err == ""


def test_a_signature_made_with_another_key(
    stored: SQLite, keys: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other.pub"
    other.write_bytes(public_key_pem(generate_key()))
    status, out, err = signed_then(stored, keys, tmp_path, capsys, public=str(other))
    assert status == 1 and "signature: conversation 'c': the head was signed by key ed25519:" in out
    assert "not by the key given" in out
    assert err == "dial-runtime verify: the signed head of 'c' does not match the store\n"


def test_signing_in_the_library() -> None:
    """sign_head and verify_head without the command line, on the in-process store: a head signed at entry 27 is
    the head, then a prefix once the log grows; another key, no conversation, a broken chain are told apart."""
    key = generate_key()
    store = MemoryStore()

    async def checked(seq: int) -> ChainCheck:
        return (await verify_store(store, heads_at={CONVERSATION: [seq]})).conversations[0]

    run(lambda: hold(store))
    chain = run(lambda: checked(27))
    signed = sign_head(chain, key)
    assert (signed.conversation_id, signed.seq, signed.head, signed.scheme) == (CONVERSATION, 27, chain.head, 2)
    assert loads_signed_head(dumps_signed_head(signed)) == signed
    assert verify_head(signed, key.public_key(), chain).status == "head"
    assert verify_head(signed, generate_key().public_key(), chain).status == "other key"
    assert verify_head(signed, key.public_key(), None).status == "missing"
    run(lambda: store.append(CONVERSATION, [said(28, "later")], expected_seq=27))
    grown = verify_head(signed, key.public_key(), run(lambda: checked(27)))
    assert (grown.status, grown.unsigned, grown.ok) == ("prefix", 1, True)
    assert "entry 28 came after it, unsigned (not tampering" in grown.reason
    assert load_private_key(private_key_pem(key)).public_key() == key.public_key()
    broken = msgspec.structs.replace(chain, broken=ChainBreak(3, "edited", "entry 3 was edited"))
    with pytest.raises(ValueError, match="will not sign a broken chain: entry 3 was edited"):
        sign_head(broken, key)


def _without_cryptography(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command line in a process where cryptography cannot be imported."""
    code = (
        "import sys\n"
        "sys.modules['cryptography'] = None\n"
        "from dial_runtime.cli import main\n"
        f"sys.exit(main({list(argv)!r}))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=cwd)


def test_without_cryptography_the_chain_verifies_and_signing_says_what_to_install(
    stored: SQLite, tmp_path: Path
) -> None:
    """The chain needs only hashlib; signing needs the sign extra, and says so in one line (exit 2)."""
    done = _without_cryptography("verify", "--store", url(stored), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("c  ok: 27 entries")
    for argv in (["keygen", "k.pem", "k.pub"], ["sign", "c", "--store", url(stored), "--key", "k.pem"]):
        done = _without_cryptography(*argv, cwd=tmp_path)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.splitlines() == [
            f"dial-runtime {argv[0]}: signing chain heads needs cryptography: pip install 'dial-runtime[sign]'"
        ]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["logs.db", "logs.db.locks"]
