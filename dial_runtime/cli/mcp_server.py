"""``dial-runtime mcp``: serve a domain's actions, or an upstream MCP server's tools, as an MCP server whose
calls that change something wait for a person."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .._command import _CommandError, _described, _usage
from ..stores.urls import open_url
from .common import STORE_HELP
from .worker import load_announcer

#: The environment variable holding the key that seals a 2026-07-28 call's ``requestState`` (so that a call in
#: flight survives a restart of the server, and every worker behind one address opens the others' states).
STATE_KEY_VARIABLE = "DIAL_MCP_STATE_KEY"


def _mcp(args: argparse.Namespace) -> int:
    """``dial-runtime mcp``: serve over standard input and output (one client, as MCP clients start a local
    server), or over streamable HTTP with ``--http``, until stopped."""
    try:
        from ..doors.elicitation import DEFAULT_WAIT, Elicitations
        from ..doors.gate import Gate
        from ..doors.mcp_server import GatedServer, gated_domain
    except ImportError as error:
        _usage(f"needs the mcp extra (pip install 'dial-runtime[mcp]'): {error}")
    for option, seconds in (
        ("--wait", args.wait),
        ("--round", args.round),
        ("--decide-timeout", args.decide_timeout),
    ):
        if seconds is not None and not 0 < seconds < float("inf"):
            _usage(f"{option} is a positive number of seconds, not {seconds:g}")
    where = _address(args.http) if args.http is not None else None
    key = os.environ.get(STATE_KEY_VARIABLE, "")
    if key and len(key) < 32:
        _usage(f"{STATE_KEY_VARIABLE} must hold at least 32 characters (a random secret)")
    ask: Any = "all" if "all" in args.ask else args.ask
    human = _human(args.human) if args.human is not None else None
    announcer = load_announcer(args.announce) if args.announce is not None else None
    store = open_url(args.store)
    errlog = sys.stderr if args.upstream_log is None else _opened(args.upstream_log)

    async def serve() -> None:
        try:
            # What the upstream asks the user in the middle of a call is a card too (elicit:...), announced alike.
            questions = Elicitations(store, announcer=announcer, wait=args.decide_timeout or DEFAULT_WAIT)
            served = gated_domain(args.domain, args.upstream, ask=ask, errlog=errlog, elicit=questions)
            async with served as domain:
                gate = Gate(
                    domain,
                    store,
                    human=human,
                    prefix=args.prefix,
                    decide_timeout=args.decide_timeout,
                    announcer=announcer,
                )
                server = GatedServer(
                    gate,
                    wait=args.wait,
                    round_seconds=args.round,
                    progress_seconds=args.progress,
                    state_keys=[key.encode()] if key else (),
                )
                if where is None:
                    await server.run_stdio()
                    return
                import uvicorn

                host, port = where
                config = uvicorn.Config(
                    server.http_app(host=host), host=host, port=port, log_level="warning", lifespan="on"
                )
                print(f"serving MCP at http://{host}:{port}/mcp", file=sys.stderr, flush=True)
                await uvicorn.Server(config).serve()
        finally:
            await store.aclose()

    import anyio

    try:
        anyio.run(serve)
    except KeyboardInterrupt:
        pass
    except ValueError as error:  # a bad --ask, a domain that cannot be loaded
        raise _CommandError(str(error), 2) from None
    except Exception as error:  # an upstream that cannot be reached, a store that cannot be opened
        raise _CommandError(_described(error)) from None
    return 0


def _human(spec: str) -> Any:
    """The person ``--human MODULE:FACTORY`` names: ``FACTORY()``, which must have a ``decide`` method."""
    from ..domains.loading import load_made

    return load_made(
        spec,
        option="--human",
        example="dial_runtime.driver.humans:policy_human",
        what="a person (with a decide method)",
        fits=lambda made: callable(getattr(made, "decide", None)),
    )


def _address(text: str) -> tuple[str, int]:
    """``[HOST:]PORT`` as a host (127.0.0.1 by default) and a port. Only a loopback address: the server has no
    sign-in of its own, and a read-only tool runs for whoever calls it, so it is reached from elsewhere only
    through a proxy that authenticates (and the SDK's DNS-rebinding protection holds for loopback hosts)."""
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        _usage(f"--http takes [HOST:]PORT, not {text!r}")
    host = host.strip("[]") or "127.0.0.1"
    if host not in ("127.0.0.1", "localhost", "::1"):
        _usage(
            f"--http serves on a loopback address (127.0.0.1, localhost, ::1), not {host}: the server signs "
            "nobody in; reach it from elsewhere through a proxy that does"
        )
    return host, int(port)


def _opened(path: str) -> Any:
    try:
        return open(path, "a", encoding="utf-8")
    except OSError as error:
        _usage(f"--upstream-log: {error.strerror or error}: {path}")


def register(commands: Any) -> None:
    """Add ``mcp``."""
    serving = commands.add_parser(
        "mcp",
        help="serve a domain's actions or an upstream MCP server's tools over MCP, each call that changes "
        "something waiting for a person",
    )
    served = serving.add_mutually_exclusive_group(required=True)
    served.add_argument("--domain", metavar="MODULE:FACTORY", help="e.g. dial_runtime.demo:NotesDomain")
    served.add_argument(
        "--upstream",
        metavar="'COMMAND ARGS...'|URL",
        help="an MCP server whose tools are proxied: a command to start (stdio) or an http(s) URL",
    )
    serving.add_argument("--store", required=True, metavar="URL", help=STORE_HELP)
    serving.add_argument(
        "--http",
        metavar="[HOST:]PORT",
        help="serve streamable HTTP at /mcp on a loopback address (default: standard input and output)",
    )
    serving.add_argument(
        "--prefix",
        default="mcp",
        help="the start of each call's conversation id (letters, digits and ._:@-; default: mcp)",
    )
    serving.add_argument(
        "--human",
        metavar="MODULE:FACTORY",
        help="who decides in the call, before anyone else: a policy (its Defer leaves the card waiting for the "
        "other surfaces; default: nobody decides in the call)",
    )
    serving.add_argument(
        "--announce",
        metavar="MODULE:FACTORY",
        help="FACTORY() returns an Announcer that tells people of each card that starts waiting, with decision "
        "links",
    )
    serving.add_argument(
        "--ask",
        action="append",
        default=[],
        metavar="TOOL",
        help="a tool that waits for a person even though it is marked read-only (repeat; 'all': every tool)",
    )
    serving.add_argument(
        "--wait",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds a call stays open for a decision before saying it still waits (default: 600); clients of "
        "the 2026-07-28 protocol ask again by themselves instead",
    )
    serving.add_argument(
        "--round",
        type=float,
        default=20.0,
        metavar="S",
        help="seconds of each round of a 2026-07-28 call before it answers input_required (default: 20)",
    )
    serving.add_argument(
        "--progress",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds between two progress notifications of a call that waits (default: 10)",
    )
    serving.add_argument(
        "--decide-timeout", type=float, metavar="S", help="seconds each decision may take (default: none)"
    )
    serving.add_argument(
        "--upstream-log", metavar="FILE", help="append the upstream server's standard error here (default: ours)"
    )
    serving.set_defaults(run=_mcp)
