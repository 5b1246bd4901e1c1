"""``dial-runtime audit``: every proposal of a stored conversation, and its hash chain's verdict."""

from __future__ import annotations

import argparse
from typing import Any

import trio
import trio.testing

from .._command import _CommandError
from ..errors import LogError
from ..runtime.events import LogEntry
from ..stores.urls import open_url, shown_url
from .common import STORE_HELP


def _audit(args: argparse.Namespace) -> int:
    """Print the audit of one stored conversation (``--json``: as JSON): every proposal's story, with the hash
    chain's verdict first. Exit 1 when the chain is broken, the log does not fold (the report then says what the
    log now claims), the store cannot be read or holds no such conversation."""
    import msgspec

    from ..audit.report import audit, audit_text
    from ..errors import StoreError
    from ..stores.chain import verify_log

    store = open_url(args.store, create=False)

    async def read() -> tuple[list[Any], list[LogEntry] | LogError]:
        try:
            rows = await store.rows(args.id)
            try:
                return rows, await store.read(args.id)
            except LogError as error:  # a row edited into something that is no entry: the chain names it
                return rows, error
        finally:
            await store.aclose()

    try:
        rows, read_back = trio.run(read)
    except StoreError as error:
        raise _CommandError(str(error)) from None
    if not rows:
        listing = "dial-runtime list --store URL lists them"
        raise _CommandError(f"{shown_url(args.store)} holds no conversation {args.id!r} ({listing})")
    chain = verify_log(rows, conversation_id=args.id)
    if isinstance(read_back, LogError):
        raise _CommandError(f"{args.id!r}: {chain.summary()}; the log cannot be read: {read_back}")
    report = audit(read_back, conversation_id=args.id, chain=chain)
    if args.json:
        print(msgspec.json.encode(report).decode())
    else:
        print(audit_text(report))
    if not report.trustworthy:
        raise _CommandError(f"{args.id!r} does not match its record: see the report's first lines")
    return 0


def register(commands: Any) -> None:
    """Add ``audit``."""
    auditing = commands.add_parser(
        "audit",
        help="report every proposal of a stored conversation: proposed, shown, decided (by whom, through what), "
        "run, result, reconciled; with its hash chain's verdict (exit 1 when the log does not match its record)",
    )
    auditing.add_argument("id", help="the conversation's id")
    auditing.add_argument("--store", required=True, metavar="URL", help=STORE_HELP)
    auditing.add_argument("--json", action="store_true", help="write the report as JSON")
    auditing.set_defaults(run=_audit)
