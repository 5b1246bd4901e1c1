"""``dial-runtime worker``: fire the deadlines of conversations stored on PostgreSQL, with nobody watching."""

from __future__ import annotations

import argparse
import contextlib
from typing import TYPE_CHECKING, Any

from .._command import _usage
from ..domains.loading import load_domain, load_made
from ..stores.urls import open_url

if TYPE_CHECKING:
    from ..decisions.announce import Announcer


def _worker(args: argparse.Namespace) -> int:
    """``dial-runtime worker``: fire the deadlines of conversations stored on PostgreSQL, with nobody watching,
    until interrupted (it prints ``ready`` once it takes jobs). The conversations are built as ``serve`` builds
    them; an expiry talks to the agent only when a turn follows anyway. ``--announce MODULE:FACTORY``:
    ``FACTORY()`` returns a :class:`~dial_runtime.web.announce.Announcer`, which tells people of the expiries,
    reminders and escalations this worker fires, as the web surface tells of those it fires."""
    import asyncio

    if not args.store.startswith(("postgresql://", "postgres://")):
        _usage(
            "worker fires deadlines stored on PostgreSQL (postgresql://...); with another store, the process "
            "that serves it fires them"
        )
    if args.poll <= 0 or args.concurrency < 1 or (args.decide_timeout is not None and not args.decide_timeout > 0):
        _usage("--poll and --decide-timeout must be above 0 and --concurrency at least 1")
    from ..decisions.deadlines import conversation_opener, run_worker
    from ..web.serve import agent_factory

    domain = load_domain(args.domain)
    announcer = load_announcer(args.announce) if args.announce is not None else None
    store = open_url(args.store)
    options = {"decide_timeout": args.decide_timeout, "max_turns": args.max_turns}
    opener = conversation_opener(store, agent=agent_factory(args.agent, domain), domain=domain, **options)
    if announcer is not None:
        opener = announcer.announcing(opener, store)

    async def work() -> None:
        try:
            async with announcer if announcer is not None else contextlib.nullcontext():
                await run_worker(
                    args.store,
                    opener,
                    ready=lambda: print("ready", flush=True),
                    poll=args.poll,
                    concurrency=args.concurrency,
                )
        finally:
            await store.aclose()

    asyncio.run(work())
    return 0


def load_announcer(spec: str) -> Announcer:
    """The announcer ``--announce MODULE:FACTORY`` names (``FACTORY()``'s); a one-line error for anything else."""
    from ..decisions.announce import Announcer

    made: Announcer = load_made(
        spec,
        option="--announce",
        example="myapp.notify:announcer",
        what="an Announcer",
        fits=lambda made: isinstance(made, Announcer),
    )
    return made


def register(commands: Any) -> None:
    """Add ``worker``."""
    working = commands.add_parser(
        "worker", help="fire the deadlines of conversations stored on PostgreSQL, with nobody watching"
    )
    working.add_argument("--store", required=True, metavar="URL", help="postgresql://...")
    working.add_argument(
        "--agent", required=True, metavar="URI", help="the agent, as serve's (told only when a turn follows)"
    )
    working.add_argument("--domain", required=True, metavar="MODULE:FACTORY", help="the domain, as serve's")
    working.add_argument("--decide-timeout", type=float, metavar="S", help="as serve's (default: none)")
    working.add_argument("--max-turns", type=int, default=8, metavar="N", help="as serve's (default: 8)")
    working.add_argument(
        "--poll", type=float, default=0.2, metavar="S", help="seconds between looks for due jobs (default: 0.2)"
    )
    working.add_argument("--concurrency", type=int, default=8, metavar="N", help="jobs at once (default: 8)")
    working.add_argument(
        "--announce",
        metavar="MODULE:FACTORY",
        help="FACTORY() returns a dial_runtime.web.announce.Announcer: people are told of the expiries, reminders "
        "and escalations this worker fires (mail, webhooks, with decision links)",
    )
    working.set_defaults(run=_worker)
