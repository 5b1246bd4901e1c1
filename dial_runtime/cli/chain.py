"""``dial-runtime keygen``, ``sign`` and ``verify``: the hash chains of stored conversations, and signed heads."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from .._command import USAGE, _CommandError, _usage
from ..stores.urls import open_url, shown_url

if TYPE_CHECKING:
    from ..stores.chain import ChainCheck


from .common import STORE_HELP


def _signing() -> Any:
    """:mod:`dial_runtime.audit.signing`; a one-line error (exit 2) when cryptography is not installed."""
    try:
        from ..audit import signing
    except ImportError as error:
        raise _CommandError(str(error), USAGE) from None
    return signing


def _key_file(path: str, *, private: bool) -> Any:
    """The Ed25519 key in the PEM file ``path``; a one-line error (exit 2) when it cannot be read or holds none."""
    signing = _signing()
    pem = _file_bytes(path)
    try:
        return signing.load_private_key(pem) if private else signing.load_public_key(pem)
    except ValueError as error:
        _usage(f"{path}: {error}")


def _file_bytes(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        _usage(f"cannot read {path}: {(error.strerror or str(error)).lower()}")


def check_chains(
    url: str, conversation_ids: Sequence[str] | None, heads_at: dict[str, list[int]]
) -> list[ChainCheck]:
    """The verified chains of the conversations named (``None``: every one in the store), read without writing
    anything; a store that cannot be read is a one-line error with exit status 2 (nothing could be checked)."""
    from ..errors import StoreError
    from ..stores.chain import verify_store

    store = open_url(url, create=False)

    async def check() -> list[ChainCheck]:
        try:
            ids = list(conversation_ids) if conversation_ids is not None else await store.conversations()
            ids += [signed for signed in heads_at if signed not in ids]
            return list((await verify_store(store, ids, heads_at=heads_at)).conversations)
        finally:
            await store.aclose()

    try:
        return trio.run(check)
    except StoreError as error:
        _usage(str(error))


def _keygen(args: argparse.Namespace) -> int:
    """Write a new Ed25519 key pair as PEM files: the private key readable by its owner only."""
    signing = _signing()
    for path in (args.private, args.public):
        if os.path.lexists(path):
            _usage(f"{path} exists: keygen never overwrites a key")
    key = signing.generate_key()
    written: list[str] = []
    try:
        for path, pem, mode in (
            (args.private, signing.private_key_pem(key), 0o600),
            (args.public, signing.public_key_pem(key), 0o644),
        ):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            written.append(path)
            with os.fdopen(descriptor, "wb") as file:
                file.write(pem)
    except OSError as error:
        for path in written:
            with contextlib.suppress(OSError):
                os.unlink(path)
        _usage(f"cannot write {error.filename or path}: {(error.strerror or str(error)).lower()}")
    print(
        f"wrote {args.private} (the private key: keep it secret, away from the store) and {args.public} "
        f"(the public key, {signing.fingerprint(key)[:24]}…)"
    )
    return 0


def _sign(args: argparse.Namespace) -> int:
    """Verify a conversation's chain and sign its head; the signature document goes to ``-o`` or stdout."""
    signing = _signing()
    key = _key_file(args.key, private=True)
    (check,) = check_chains(args.store, [args.id], {})
    if check.entries == 0:
        raise _CommandError(
            f"{shown_url(args.store)} holds no conversation {args.id!r} (dial-runtime list --store URL lists them)"
        )
    try:
        signed = signing.sign_head(check, key)
    except ValueError as error:
        raise _CommandError(str(error)) from None
    document = signing.dumps_signed_head(signed)
    if args.output is None:
        sys.stdout.write(document)
        return 0
    try:
        Path(args.output).write_text(document, encoding="utf-8")
    except OSError as error:
        raise _CommandError(f"cannot write {args.output}: {error.strerror or error}") from None
    print(f"signed {args.id!r} at entry #{signed.seq} (head {signed.head[:18]}…): {args.output}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    """Check every chain (or those named) and, with a signature, the signed head: exit 0 when all match, 1 with
    each mismatch or conversation the store does not hold named (a line per conversation), 2 when nothing could be
    checked (bad input)."""
    if (args.public_key is None) != (args.signature is None):
        _usage("--public-key and --signature go together: the signature is checked with the public key")
    signed, public = None, None
    if args.signature is not None:
        signing = _signing()
        public = _key_file(args.public_key, private=False)
        try:
            signed = signing.loads_signed_head(_file_bytes(args.signature).decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            _usage(f"{args.signature}: {error}")
        if args.ids and signed.conversation_id not in args.ids:
            _usage(
                f"{args.signature} signs conversation {signed.conversation_id!r}, which is not among the ids given"
            )
    heads_at = {signed.conversation_id: [signed.seq]} if signed is not None else {}
    checks = check_chains(args.store, args.ids or None, heads_at)
    if not checks:
        print(f"{shown_url(args.store)} holds no conversation", file=sys.stderr)
        return 0
    width = max(len(check.conversation_id) for check in checks)
    failed, absent = 0, []
    for check in checks:
        if check.entries == 0:  # named, or signed, but not in the store
            absent.append(check.conversation_id)
            print(f"{check.conversation_id:<{width}}  the store holds no such conversation")
            continue
        failed += not check.ok
        print(f"{check.conversation_id:<{width}}  {check.summary()}")
    problems = (
        [f"{failed} of {len(checks) - len(absent)} conversation(s) do not match their chain"] if failed else []
    )
    if absent:
        names = ", ".join(repr(each) for each in absent)
        problems.insert(
            0, f"{shown_url(args.store)} holds no conversation {names} (dial-runtime list --store URL lists them)"
        )
    if signed is not None:
        match = signing.verify_head(
            signed, public, next(check for check in checks if check.conversation_id == signed.conversation_id)
        )
        print(f"signature: {match.reason}")
        if not match.ok:
            problems.append(f"the signed head of {signed.conversation_id!r} does not match the store")
    if problems:
        raise _CommandError("; ".join(problems))
    return 0


def register(commands: Any) -> None:
    """Add ``verify``, ``sign`` and ``keygen``."""
    verifying = commands.add_parser(
        "verify",
        help="check the hash chains of a store's conversations (and a signed head): exit 0 when every one "
        "matches, 1 naming each first mismatch, 2 when nothing could be checked",
    )
    verifying.add_argument("ids", nargs="*", metavar="ID", help="the conversations to check (default: every one)")
    verifying.add_argument("--store", required=True, metavar="URL", help=STORE_HELP)
    verifying.add_argument("--public-key", metavar="PUB.pem", help="the public key the head was signed with")
    verifying.add_argument("--signature", metavar="FILE", help="a signature document (what sign writes)")
    verifying.set_defaults(run=_verify)

    signing = commands.add_parser(
        "sign", help="verify a conversation's hash chain and sign its head with an Ed25519 key"
    )
    signing.add_argument("id", help="the conversation's id")
    signing.add_argument("--store", required=True, metavar="URL", help=STORE_HELP)
    signing.add_argument("--key", required=True, metavar="PRIVATE.pem", help="the private key (keygen writes one)")
    signing.add_argument(
        "-o", "--output", metavar="FILE", help="the signature document to write (default: standard output)"
    )
    signing.set_defaults(run=_sign)

    keys = commands.add_parser("keygen", help="write a new Ed25519 key pair (PEM) for signing chain heads")
    keys.add_argument("private", metavar="PRIVATE_PATH", help="the private key to write (readable by you only)")
    keys.add_argument("public", metavar="PUBLIC_PATH", help="the public key to write (what verify needs)")
    keys.set_defaults(run=_keygen)
