"""``dial-runtime replay``: replay a recorded conversation through this runtime."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .._command import _usage
from ..domains.loading import load_domain
from ..runtime.events import LogEntry
from ..stores.urls import read_log
from .common import STORE_HELP, read_log_file

#: The deadlines a replay was once told, and now reads from the log.
_RECORDED = ("timeout", "reply_timeout", "idle_timeout", "decide_timeout")


def _replay(args: argparse.Namespace) -> int:
    from ..driver.replay import replay

    if args.file is not None:
        conversation_id, entries = read_file(args.file)
    elif args.id is None:
        _usage("replaying from a store needs the conversation's ID")
    else:
        conversation_id, entries = args.id, read_log(args.store, args.id)
    unused = [f"--{name.replace('_', '-')}" for name in _RECORDED if getattr(args, name) is not None]
    if unused:
        print(
            f"dial-runtime replay: {', '.join(unused)}: no longer needed, the log records each deadline",
            file=sys.stderr,
        )
    if args.recheck and args.domain is None:
        _usage("replay --recheck asks the domain again: name it with --domain")
    report = replay(
        entries,
        domain=None if args.domain is None else load_domain(args.domain),
        recheck=args.recheck,
        conversation_id=conversation_id,
        max_turns=args.max_turns,
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
    for name in _RECORDED:  # accepted and unused until the next release: the log records each deadline
        replaying.add_argument(f"--{name.replace('_', '-')}", type=float, help=argparse.SUPPRESS)
    replaying.add_argument(
        "--recheck",
        action="store_true",
        help="ask the domain again for actions, validate and preview (by default the log answers; nothing runs)",
    )
    replaying.set_defaults(run=_replay)
