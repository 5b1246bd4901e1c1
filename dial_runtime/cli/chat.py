"""``dial-runtime chat``: hold a conversation with an agent in the terminal."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import uuid
from typing import Any

import anyio

from .._command import _CommandError, _described, _usage
from ..domains.loading import load_domain
from ..stores.urls import open_url, shown_url
from .common import (
    add_agent_options,
    add_mcp_options,
    add_stream_deadlines,
    chat_agent_options,
    check_mcp_options,
    login_name,
    without_terminal_extra,
)


def _chat(args: argparse.Namespace) -> int:
    try:
        from ..terminal.surface import PlainAgent, TerminalSurface
    except ModuleNotFoundError as error:
        return without_terminal_extra("chat", error)
    from ..driver import Conversation
    from ..llm import agent_from_uri

    domain = load_domain(args.domain) if args.mcp is None else None
    check_mcp_options(args)
    agent_options = chat_agent_options(args)
    constrain = agent_options.pop("constrain", None)
    if args.id and not args.store:
        _usage("--id needs --store")
    store = open_url(args.store) if args.store else None
    ident = args.id or uuid.uuid4().hex[:12]
    surface = TerminalSurface(by=args.person, roles=args.roles)

    async def hold() -> int:
        async with contextlib.AsyncExitStack() as stack:
            if store is not None:
                stack.push_async_callback(store.aclose)
            chosen = domain if domain is not None else await served(args, stack, questions(surface, store))
            earlier = await store.read(ident) if store is not None else []
            if constrain is not None:
                agent_options["constrain"] = constrain
            try:
                agent = agent_from_uri(args.agent, domain=chosen, log=earlier, **agent_options)
            except ValueError as error:
                _usage(str(error))
            if callable(getattr(agent, "__aenter__", None)):
                await stack.enter_async_context(agent)  # type: ignore[arg-type]
            streams = callable(getattr(agent, "stream", None)) and not args.no_stream
            options: dict[str, Any] = {
                "agent": surface.streaming(agent) if streams else PlainAgent(agent),
                "domain": chosen,
                "human": surface,
                "on_event": surface.on_event,
                "timeout": args.timeout,
                "reply_timeout": args.reply_timeout,
                "idle_timeout": args.idle_timeout,
            }
            if store is None:
                await surface.chat(Conversation(**options))
                return 0
            conversation = await Conversation.open(store, ident, **options)
            surface.recap(conversation, ident, shown_url(args.store))
            if await surface.take_up(conversation):
                await surface.chat(conversation, store=store)
        return 0

    try:
        return anyio.run(hold, backend="asyncio")
    finally:
        if args.transcript:
            surface.save(args.transcript)


def questions(surface: Any, store: Any) -> Any:
    """What answers the ``--mcp`` server's questions: the person at the terminal, each question a card kept in
    ``store`` (in memory without one)."""
    from ..doors.elicitation import Elicitations
    from ..stores import MemoryStore
    from ..terminal.questions import ServerQuestions

    return Elicitations(store if store is not None else MemoryStore(), human=ServerQuestions(surface), wait=None)


async def served(args: argparse.Namespace, stack: contextlib.AsyncExitStack, elicit: Any = None) -> Any:
    """The MCP server ``--mcp`` names, as a domain held open until ``stack`` closes, its questions answered by
    ``elicit``."""
    try:
        from ..adapters.mcp import McpConnectionError, mcp_domain, sdk_log_to
    except ImportError as error:
        raise _CommandError(f"--mcp needs the mcp extra (pip install 'dial-runtime[mcp]'): {error}") from None
    try:
        errlog = stack.enter_context(open(args.mcp_log or os.devnull, "a", encoding="utf-8"))  # noqa: SIM115
        served = mcp_domain(args.mcp, errlog=errlog, trust_read_only=args.trust_read_only, elicit=elicit)
    except ValueError as error:
        _usage(f"--mcp: {error}")
    except OSError as error:
        raise _CommandError(f"--mcp-log: {_described(error)}") from None
    stack.enter_context(sdk_log_to(errlog))
    try:
        connected = await stack.enter_async_context(served)
    except (OSError, McpConnectionError) as error:
        raise _CommandError(f"--mcp: {error}") from None
    for line in connected.refusals():
        print(f"dial-runtime chat: --mcp: {line}", file=sys.stderr)
    return connected


def register(commands: Any) -> None:
    """Add ``chat``."""
    chat = commands.add_parser("chat", help="hold a conversation with an agent in the terminal")
    chat.add_argument(
        "--agent",
        required=True,
        metavar="URI",
        help="openai:MODEL, ollama:MODEL[@HOST:PORT], vllm:..., llamacpp:..., http(s)://HOST/v1#MODEL, or "
        "script:FILE (the replies in a JSON list or a JSON Lines log: try a domain without a model)",
    )
    domain = chat.add_mutually_exclusive_group(required=True)
    domain.add_argument(
        "--domain",
        metavar="MODULE:FACTORY",
        help="module:factory; factory() returns the domain (dial_runtime.demo:NotesDomain)",
    )
    add_mcp_options(chat, domain)
    chat.add_argument(
        "--transcript", metavar="FILE", help="save the transcript (plain text) here when the session ends"
    )
    chat.add_argument(
        "--timeout", type=float, default=90.0, metavar="S", help="seconds to wait for each reply (default: 90)"
    )
    add_stream_deadlines(chat, "")
    chat.add_argument(
        "--store", metavar="URL", help="keep the conversation in this store (sqlite:FILE, postgresql://...)"
    )
    chat.add_argument(
        "--id", default=None, help="the conversation to hold or take up in the store (default: a new one)"
    )
    chat.add_argument(
        "--as",
        dest="person",
        default=login_name(),
        metavar="NAME",
        help="who decides and answers, recorded with each decision (default: your login name)",
    )
    chat.add_argument(
        "--role",
        dest="roles",
        action="append",
        default=[],
        metavar="ROLE",
        help="a role you hold, which an action's approval policy may require (repeatable)",
    )
    chat.add_argument(
        "--no-stream",
        action="store_true",
        help="wait for each whole reply (by default replies stream: each element is shown as it arrives)",
    )
    add_agent_options(chat)
    chat.set_defaults(run=_chat)
