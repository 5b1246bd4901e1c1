"""``dial-runtime serve``: serve the chat panel and AG-UI over HTTP with uvicorn."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import add_agent_options, add_mcp_options, add_stream_deadlines, chat_agent_options, check_mcp_options


def _serve(args: argparse.Namespace) -> int:
    """``dial-runtime serve``: the web surface (AG-UI at /agui, the panel at /) under uvicorn."""
    try:
        from ..web.serve import McpServer, serve
    except ImportError as error:
        print(
            f"dial-runtime serve: needs the web extra (pip install 'dial-runtime[web]'): {error}", file=sys.stderr
        )
        return 2
    if args.workers < 1 or not 0 <= args.port <= 65535:
        print("dial-runtime serve: --workers must be at least 1 and --port within 0-65535", file=sys.stderr)
        return 2
    if args.max_turns < 1 or (args.decide_timeout is not None and not args.decide_timeout > 0):
        print("dial-runtime serve: --max-turns must be at least 1 and --decide-timeout above 0", file=sys.stderr)
        return 2
    check_mcp_options(args)
    agent_options = chat_agent_options(args)
    try:
        serve(
            agent=args.agent,
            agent_options=agent_options,
            domain=args.domain
            if args.mcp is None
            else McpServer(server=args.mcp, trust_read_only=args.trust_read_only, log=args.mcp_log),
            store=args.store,
            host=args.host,
            port=args.port,
            workers=args.workers,
            conversation={
                "timeout": args.timeout,
                "reply_timeout": args.reply_timeout,
                "idle_timeout": args.idle_timeout,
                "max_turns": args.max_turns,
                "decide_timeout": args.decide_timeout,
            },
            allowed_hosts=args.allowed_hosts,
        )
    except ValueError as error:
        print(f"dial-runtime serve: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


def register(commands: Any) -> None:
    """Add ``serve``."""
    serving = commands.add_parser("serve", help="serve the chat panel and AG-UI (/agui) over HTTP with uvicorn")
    serving.add_argument(
        "--agent", required=True, metavar="URI", help="script:FILE (a JSON list of replies) or a chat URI"
    )
    served = serving.add_mutually_exclusive_group(required=True)
    served.add_argument("--domain", metavar="MODULE:FACTORY", help="e.g. dial_runtime.demo:NotesDomain")
    add_mcp_options(serving, served)
    serving.add_argument(
        "--store", required=True, metavar="URL", help="sqlite:PATH, or postgresql://... for --workers"
    )
    serving.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    serving.add_argument(
        "--allowed-host",
        dest="allowed_hosts",
        action="append",
        default=[],
        metavar="NAME",
        help="a name the server is reached by besides localhost, 127.0.0.1 and [::1] (NAME, NAME:PORT or "
        "*.DOMAIN; repeat for more): a request naming another Host is refused",
    )
    serving.add_argument("--port", type=int, default=8000, help="the port (default: 8000)")
    serving.add_argument("--workers", type=int, default=1, metavar="N", help="worker processes (default: 1)")
    serving.add_argument(
        "--timeout", type=float, default=90.0, metavar="S", help="seconds to wait for each reply (default: 90)"
    )
    add_stream_deadlines(serving, "")
    serving.add_argument(
        "--max-turns", type=int, default=8, metavar="N", help="turns one run may take at most (default: 8)"
    )
    serving.add_argument(
        "--decide-timeout", type=float, metavar="S", help="seconds each decision may take (default: none)"
    )
    add_agent_options(serving)
    serving.set_defaults(run=_serve)
