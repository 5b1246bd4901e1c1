"""``dial-runtime export`` and ``import``: a stored conversation's log as JSON Lines, and back."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from .._command import _CommandError
from ..stores.urls import checked_log, open_url, read_stored, shown_url

if TYPE_CHECKING:
    from ..stores.chain import StoredRow


from .common import STORE_HELP, read_log_file


def _export(args: argparse.Namespace) -> int:
    from ..stores.jsonl import export_rows

    rows = read_rows(args.store, args.id)
    if args.output is None:
        export_rows(rows, sys.stdout, conversation_id=args.id)
        return 0
    try:
        with open(args.output, "w", encoding="utf-8") as file:
            export_rows(rows, file, conversation_id=args.id)
    except OSError as error:
        raise _CommandError(f"cannot write {args.output}: {error.strerror or error}") from None
    return 0


def _import(args: argparse.Namespace) -> int:
    from ..stores import StoreConflict

    read = read_log_file(args.file)
    entries = read.entries
    if not entries:
        raise _CommandError(f"{args.file} holds no events")
    conversation_id = args.id or read.conversation_id
    store = open_url(args.store)

    async def write() -> list[StoredRow]:
        from ..decisions.inbox import keeps_inbox, logged_cards
        from ..views.inbox import stored_rows

        try:
            if keeps_inbox(store):
                waiting = stored_rows(logged_cards(conversation_id, entries))
                await store.append(conversation_id, entries, expected_seq=0, waiting=waiting)
            else:
                await store.append(conversation_id, entries, expected_seq=0)
            return await store.rows(conversation_id) if read.chain is not None else []
        finally:
            await store.aclose()

    try:
        stored = trio.run(write)
    except StoreConflict:
        raise _CommandError(
            f"conversation {conversation_id!r} already has events in {shown_url(args.store)}; choose another --id"
        ) from None
    imported = f"imported {len(entries)} event(s) into {shown_url(args.store)} as {conversation_id!r}"
    if read.chain is not None:
        imported += _kept(read.rows, stored)
    print(imported)
    return 0


def _kept(written: list[StoredRow], stored: list[StoredRow]) -> str:
    """How the store's hashes of an imported log stand to the file's."""
    for mine, theirs in zip(written, stored, strict=False):
        if mine.hash is not None and mine.hash != theirs.hash:
            return (
                f"; the store's hash chain differs from the file's from entry {mine.seq} on (this version stores "
                "that entry differently), so a head signed from the file does not match the store"
            )
    head = stored[-1].hash if stored else None
    return f", their hash chain kept (head #{len(stored)} {(head or '')[:18]}…)"


def read_rows(url: str, conversation_id: str) -> list[StoredRow]:
    """The conversation's rows as stored, with their hashes, read without creating or writing anything; refused
    as ``_read_log`` refuses the log."""
    from ..stores.base import decode

    rows: list[StoredRow] = read_stored(url, lambda store: store.rows(conversation_id))
    checked_log(url, conversation_id, [decode(row.text) for row in rows])
    return rows


def register(commands: Any) -> None:
    """Add ``export`` and ``import``."""
    export = commands.add_parser("export", help="write a stored conversation's log as JSON Lines")
    export.add_argument("id", help="the conversation's id")
    export.add_argument("--store", required=True, metavar="URL", help=STORE_HELP)
    export.add_argument("-o", "--output", metavar="FILE", help="the file to write (default: standard output)")
    export.set_defaults(run=_export)

    importing = commands.add_parser(
        "import", help="store a JSON Lines log; refuses a conversation that already has events"
    )
    importing.add_argument("file", help="a JSON Lines log (what export writes)")
    importing.add_argument("--store", required=True, metavar="URL", help=STORE_HELP)
    importing.add_argument("--id", metavar="NEW_ID", help="store it under this id (default: the file's)")
    importing.set_defaults(run=_import)
