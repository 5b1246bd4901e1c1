"""``dial-runtime replay``: replay a recorded conversation through this runtime."""

from __future__ import annotations

import argparse
from typing import Any

from .._command import _usage
from ..domains.loading import load_domain
from ..runtime.events import LogEntry
from ..stores.urls import read_log
from .common import STORE_HELP, add_stream_deadlines, read_log_file


def _replay(args: argparse.Namespace) -> int:
    from ..driver.replay import replay

    if args.file is not None:
        conversation_id, entries = read_file(args.file)
    elif args.id is None:
        _usage("replaying from a store needs the conversation's ID")
    else:
        conversation_id, entries = args.id, read_log(args.store, args.id)
    if args.recheck and args.domain is None:
        _usage("replay --recheck asks the domain again: name it with --domain")
    report = replay(
        entries,
        domain=None if args.domain is None else load_domain(args.domain),
        recheck=args.recheck,
        conversation_id=conversation_id,
        max_turns=args.max_turns,
        timeout=args.timeout,
        reply_timeout=args.reply_timeout,
        idle_timeout=args.idle_timeout,
        decide_timeout=args.decide_timeout,
    )
    print(report)
    return 0 if report.ok else 1


def read_file(path: str) -> tuple[str, list[LogEntry]]:
    """The entries of a JSON Lines log, each checked, and the log checked as a whole (see ``check_log``)."""
    read = read_log_file(path)
    return read.conversation_id, read.entries


def register(commands: Any) -> None:
    """Add ``replay``."""
    replaying = commands.add_parser(
        "replay", help="replay a recorded conversation through this runtime; exit 1 when it diverges"
    )
    replaying.add_argument("id", nargs="?", help="the conversation's id (with --store)")
    source = replaying.add_mutually_exclusive_group(required=True)
    source.add_argument("--store", metavar="URL", help=STORE_HELP)
    source.add_argument("--file", metavar="FILE", help="a JSON Lines log (what export writes) instead of a store")
    replaying.add_argument(
        "--domain",
        help="module:factory; factory() returns the domain (its flow; with --recheck its verdicts)",
    )
    replaying.add_argument("--max-turns", type=int, default=8, metavar="N", help="as recorded (default: 8)")
    replaying.add_argument(
        "--timeout", type=float, default=90.0, metavar="S", help="seconds per reply, as recorded (default: 90)"
    )
    add_stream_deadlines(replaying, ", as recorded")
    replaying.add_argument(
        "--decide-timeout", type=float, metavar="S", help="seconds per decision, as recorded (default: none)"
    )
    replaying.add_argument(
        "--recheck",
        action="store_true",
        help="ask the domain again for actions, validate and preview (by default the log answers; nothing runs)",
    )
    replaying.set_defaults(run=_replay)
