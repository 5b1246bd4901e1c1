"""``dial-runtime demo``: hold the shipped example conversation and print its transcript."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import anyio
import trio
import trio.testing

from .common import without_terminal_extra

if TYPE_CHECKING:
    from ..terminal.surface import TerminalSurface


async def _interactive_demo(surface: TerminalSurface) -> None:
    """The demo conversation with the person at the terminal deciding: each of the script's words gets its own
    recorded replies, so a decision that takes fewer turns does not shift the rest of the script (one that
    needs more finds no recorded reply, and that turn stops with the agent's error)."""
    from ..agents import ScriptedAgent
    from ..demo import SCRIPT, NotesDomain
    from ..driver import Conversation

    conversation = Conversation(
        agent=ScriptedAgent(()), domain=NotesDomain(), human=surface, on_event=surface.on_event
    )
    async with surface.interruptible():
        for words, replies in SCRIPT:
            if conversation.ended:
                break
            conversation.agent = ScriptedAgent(replies)
            surface.person(words)
            await surface.turn(conversation, words)


def _demo(args: argparse.Namespace) -> int:
    if args.interactive:
        try:
            from ..terminal.surface import TerminalSurface
        except ModuleNotFoundError as error:
            return without_terminal_extra("demo --interactive", error)
        anyio.run(_interactive_demo, TerminalSurface(), backend="asyncio")
        return 0
    from ..demo import run_demo

    trio.run(run_demo)
    return 0


def register(commands: Any) -> None:
    """Add ``demo``."""
    demo = commands.add_parser("demo", help="hold the shipped example conversation and print its transcript")
    demo.add_argument("--interactive", action="store_true", help="decide and answer yourself, in the terminal")
    demo.set_defaults(run=_demo)
