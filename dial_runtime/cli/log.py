"""``dial-runtime log`` and ``list``: a stored conversation's audit trail, and a store's conversations."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from typing import Any

import trio
import trio.testing

from .._command import _CommandError
from ..errors import LogError
from ..runtime.events import LogEntry
from ..stores.urls import open_url, read_log, shown_url
from ..views.person import Moment, project
from .common import STORE_HELP


def audit_line(entry: LogEntry) -> str | None:
    """The audit trail's line for a log entry (``None`` when the event is not part of it): its time in ISO-8601
    UTC, its sequence number, what happened, to which suggestion or ask, and who decided."""
    moments = project([entry]).trail
    return _audit_text(moments[0]) if moments else None


def _audit_text(moment: Moment) -> str:
    """A moment of the projection's audit trail as a line of ``log``."""
    when = datetime.fromtimestamp(moment.time or 0.0, tz=timezone.utc).isoformat(timespec="milliseconds")
    return f"{when.replace('+00:00', 'Z')}  #{moment.seq:<4} {moment.label:<13} {moment.text}"


def _log(args: argparse.Namespace) -> int:
    for moment in project(read_log(args.store, args.id)).trail:
        print(_audit_text(moment))
    return 0


def _list(args: argparse.Namespace) -> int:
    """One line per stored conversation: its id, its size, when it was last written, and what it waits for. A log
    no run of the runtime could have written is listed too, with why, and the command then exits 1 (standard
    error says how many)."""
    from ..runtime.state import ConversationState, fold_log

    store = open_url(args.store, create=False)

    async def read() -> list[tuple[str, list[LogEntry] | LogError]]:
        held: list[tuple[str, list[LogEntry] | LogError]] = []
        try:
            for ident in await store.conversations():
                try:
                    held.append((ident, await store.read(ident)))
                except LogError as error:  # a row that does not decode: the other conversations are listed
                    held.append((ident, error))
            return held
        finally:
            await store.aclose()

    held = trio.run(read)
    if not held:
        print(f"{shown_url(args.store)} holds no conversation", file=sys.stderr)
    width = max((len(ident) for ident, _ in held), default=0)
    refused = 0
    for ident, entries in held:
        state = ConversationState()
        try:
            if isinstance(entries, LogError):
                raise entries
            fold_log(entries, state)
        except LogError as error:
            refused += 1
            print(f"{ident:<{width}}  refused: {' '.join(str(error).split())}")
            continue
        when = datetime.fromtimestamp(entries[-1].time, tz=timezone.utc).isoformat(timespec="seconds")
        waiting = ", ".join(item.id for item in state.pending())
        ended = f"ended: {state.result}" if state.result else "ended"
        status = ended if state.ended else f"waits for {waiting}" if waiting else "open"
        print(f"{ident:<{width}}  {len(entries):>5} events  last {when.replace('+00:00', 'Z')}  {status}")
    if refused:
        raise _CommandError(
            f"{refused} conversation(s) in {shown_url(args.store)} hold a log no run could have written"
        )
    return 0


def register(commands: Any) -> None:
    """Add ``log`` and ``list``."""
    log = commands.add_parser("log", help="print a stored conversation's audit trail, one line per event")
    log.add_argument("id", help="the conversation's id")
    log.add_argument("--store", required=True, metavar="URL", help=STORE_HELP)
    log.set_defaults(run=_log)

    listing = commands.add_parser(
        "list", help="list a store's conversations: size, last write, what each waits for"
    )
    listing.add_argument("--store", required=True, metavar="URL", help=STORE_HELP)
    listing.set_defaults(run=_list)
