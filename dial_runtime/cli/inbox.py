"""``dial-runtime inbox``: every decision and answer waiting in a store, for whoever must give it; and the
maintenance of the read model it reads (``--rebuild``, ``--check``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import msgspec
import trio

from .._command import _CommandError, _usage
from ..stores.urls import open_url, shown_url
from .common import STORE_HELP


def _run(args: argparse.Namespace) -> int:
    from ..decisions.inbox import Inbox, keeps_inbox

    if args.limit is not None and args.limit < 1:
        _usage(f"--limit is a positive whole number, not {args.limit}")
    if (args.rebuild or args.check) and (args.decider or args.role or args.overdue or args.action or args.limit):
        _usage("--rebuild and --check take no filter but --conversation: they cover every conversation")
    if args.rebuild and args.check:
        _usage("choose one of --rebuild and --check")
    store = open_url(args.store, create=args.rebuild)
    if not keeps_inbox(store):
        raise _CommandError(
            f"{shown_url(args.store)} keeps no inbox: use a memory:, sqlite: or postgresql:// store"
        )
    inbox = Inbox(store)
    named = [args.conversation] if args.conversation else None

    async def work() -> Any:
        try:
            if args.rebuild:
                return await inbox.rebuild(named)
            if args.check:
                return await inbox.differences(named)
            return await inbox.waiting(
                decider=args.decider,
                roles=args.role if args.role or args.decider else None,
                overdue=args.overdue,
                action=args.action,
                conversation=args.conversation,
                limit=args.limit,
            )
        finally:
            await store.aclose()

    found = trio.run(work)
    if args.rebuild:
        return _rebuilt(args, found)
    if args.check:
        return _checked(args, found)
    if args.json:
        for card in found:
            print(json.dumps({**msgspec.to_builtins(card), "digest": card.digest}, ensure_ascii=False))
        return 0
    if not found:
        print("nothing waits" + (" for you" if args.decider or args.role else ""), file=sys.stderr)
        return 0
    now = time.time()
    for card in found:
        print(_line(card, now))
    return 0


def _rebuilt(args: argparse.Namespace, rebuilt: Any) -> int:
    print(
        f"rebuilt the inbox of {rebuilt.conversations} conversation(s) in {shown_url(args.store)}: "
        f"{rebuilt.cards} waiting"
    )
    for conversation_id, why in rebuilt.refused:
        print(f"{conversation_id}: refused: {why}", file=sys.stderr)
    for conversation_id in rebuilt.busy:
        print(f"{conversation_id}: held by another worker all along; its next write rewrites it", file=sys.stderr)
    if rebuilt.refused or rebuilt.busy:
        raise _CommandError(f"{len(rebuilt.refused) + len(rebuilt.busy)} conversation(s) not rebuilt")
    return 0


def _checked(args: argparse.Namespace, differences: Any) -> int:
    for difference in differences:
        logged = ", ".join(card.id for card in difference.logged) or "nothing"
        kept = ", ".join(card.id for card in difference.kept) or "nothing"
        print(f"{difference.conversation}: the log says {logged} waits; the inbox holds {kept}")
    if differences:
        raise _CommandError(
            f"the inbox of {shown_url(args.store)} differs from the logs in {len(differences)} conversation(s):"
            " dial-runtime inbox --rebuild rewrites it"
        )
    print(f"the inbox of {shown_url(args.store)} agrees with every log")
    return 0


def _span(seconds: float) -> str:
    """A span of time in its two largest units: ``3d 4h``, ``5m 10s``, ``42s``."""
    whole = int(abs(seconds))
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    shown = [f"{value}{unit}" for value, unit in parts if value][:2]
    return " ".join(shown) or "0s"


def _line(card: Any, now: float) -> str:
    """One waiting card on one line: when it is due, how long it has waited, where, what, who may decide, and
    who has claimed it or has it assigned."""
    from ..views.person import holding_words

    if card.deadline is None:
        due = "no deadline"
    elif card.overdue(now):
        due = f"overdue {_span(now - card.deadline)}"
    else:
        due = f"due in {_span(card.deadline - now)}"
    what = card.preview or card.text or card.action
    marks = []
    if card.kind == "question":
        marks.append("question")
    if card.destructive:
        marks.append("destructive")
    if card.approvals_needed > 1:
        marks.append(f"{len(card.approvers)} of {card.approvals_needed} approvals")
    if card.roles:
        marks.append("for " + " or ".join(card.roles))
    if card.escalated_to:
        marks.append("escalated to " + " and ".join(card.escalated_to))
    elif card.reminded:
        marks.append("reminded")
    if card.ruled is not None:  # a rule asked, failed, or approved short of the policy (shown above)
        marks.append(f"why: {card.why_asked}")
    if card.issue is not None:  # the edit waiting was refused: it is edited again, or dismissed
        marks.append(f"refused: {card.issue.hint or card.issue.code or 'not valid'}")
    holding = holding_words(card, now)
    if holding is not None:
        marks.append(holding)
    if card.asked_by:
        marks.append(f"asked by {card.asked_by}")
    tail = f"  ({'; '.join(marks)})" if marks else ""
    return f"{due:<16} waited {_span(now - card.since):<7}  {card.conversation} {card.id}  {what}{tail}"


def register(commands: Any) -> None:
    """Add ``inbox``."""
    inbox = commands.add_parser(
        "inbox",
        help="list what waits for a decision or an answer across a store's conversations",
        description="List every suggestion waiting for a decision and every question waiting for an answer in a "
        "store, the nearest deadline first, then the longest waiting.",
    )
    inbox.add_argument("--store", required=True, metavar="URL", help=STORE_HELP)
    inbox.add_argument("--as", dest="decider", metavar="NAME", help="only what NAME may decide now")
    inbox.add_argument(
        "--role", action="append", default=[], metavar="ROLE", help="a role the decider holds (repeatable)"
    )
    inbox.add_argument("--overdue", action="store_true", help="only what waited past its deadline")
    inbox.add_argument("--action", metavar="NAME", help="only suggestions of this action")
    inbox.add_argument("--conversation", metavar="ID", help="only this conversation")
    inbox.add_argument("--limit", type=int, metavar="N", help="at most N")
    inbox.add_argument("--json", action="store_true", help="one JSON object per line, with each card's digest")
    inbox.add_argument(
        "--rebuild", action="store_true", help="rewrite the inbox from the logs (a store from before the inbox)"
    )
    inbox.add_argument("--check", action="store_true", help="say where the inbox and the logs disagree (exit 1)")
    inbox.set_defaults(run=_run)
