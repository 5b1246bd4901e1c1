"""Agents and domains for the runtime's tests: small, explicit, and recording what happened to them."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.lowlevel

from dial_runtime import ActionError, ActionSpec, ApprovalPolicy, Conversation, policy_human
from dial_runtime.runtime.core import ConversationCore
from dial_runtime.runtime.state import ConversationState, fold_log
from dial_runtime.statemachines.compiled import Table


def suggest(action: str, payload: str | None = None, *, ident: str | None = None, text: str = "") -> str:
    """A ``dial-suggest`` element, with its payload inside when given."""
    id_attr = f' id="{ident}"' if ident else ""
    body = f"<dial-payload>{payload}</dial-payload>" if payload is not None else ""
    return f'<dial-suggest action="{action}"{id_attr}>{text}{body}</dial-suggest>'


def envelope(*elements: str, prose: str = "") -> str:
    """A reply: optional prose, then a ``<dial>`` holding the elements."""
    return (prose + "\n" if prose else "") + "<dial>\n" + "\n".join(elements) + "\n</dial>"


class Agent:
    """Replies from a list (a callable step computes a reply from the message); records every message."""

    def __init__(self, replies: Iterable[str | Callable[[str], Any]]) -> None:
        self.replies = list(replies)
        self.sent: list[str] = []

    async def send(self, message: str) -> str:
        self.sent.append(message)
        if not self.replies:
            raise AssertionError(f"the agent got an unexpected message: {message!r}")
        reply = self.replies.pop(0)
        if callable(reply):
            reply = reply(message)
            if hasattr(reply, "__await__"):
                reply = await reply
        return reply


async def hang(message: str) -> str:
    """An agent step that never answers."""
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


class Stall:
    """A wait that never ends and says when it began, so a test cancels the call stuck in it at that moment (as a
    caller's deadline would) instead of after some real time. An agent step, or awaited in a callback."""

    def __init__(self) -> None:
        self.reached = anyio.Event()

    async def __call__(self, *_: object) -> Any:
        self.reached.set()
        await anyio.sleep_forever()

    async def interrupt(self, call: Callable[[], Awaitable[object]]) -> None:
        """Run ``call`` and cancel it once it is stuck here (within 10 s); fail when it returned before."""
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:

                async def cancel_when_reached() -> None:
                    await self.reached.wait()
                    group.cancel_scope.cancel()

                group.start_soon(cancel_when_reached)
                await call()
                group.cancel_scope.cancel()
        assert self.reached.is_set(), "the call returned without reaching the stall"


class Notes:
    """A notes domain: add-note (mutates), remove-note (destructive), list-notes (read-only), open-poll
    (hand-off), and fail-note (mutates, always raises ActionError)."""

    actions: ClassVar[dict[str, Any]] = {
        "add-note": ActionSpec(mutates=True),
        "remove-note": {"mutates": True, "destructive": True},
        "list-notes": {"mutates": False},
        "open-poll": ActionSpec(mutates=False, handoff=True),
        "fail-note": ActionSpec(mutates=True),
    }

    def __init__(self, context: str = "") -> None:
        self.notes: list[str] = []
        self.ran: list[tuple[str, Any]] = []
        self._context = context

    def validate(self, action: str, payload: Any) -> Any:
        if action == "add-note":
            text = payload.get("text") if isinstance(payload, dict) else None
            if not text:
                return {"ok": False, "code": "missing-text", "field": "text", "hint": "Give the note's text."}
        return {"ok": True}

    def preview(self, action: str, payload: Any) -> str:
        if action == "add-note":
            return f"Add the note '{payload['text']}'"
        return ""

    async def run(self, action: str, payload: Any) -> Any:
        self.ran.append((action, payload))
        if action == "fail-note":
            raise ActionError("the notebook is locked", code="locked", hint="Unlock it first.")
        if action == "add-note":
            self.notes.append(payload["text"])
            return {"count": len(self.notes)}
        if action == "list-notes":
            return {"notes": list(self.notes)}
        return None

    def context(self) -> str:
        return self._context


class PremisedNotes(Notes):
    """The notes domain whose notes rest on a premise: the notebook is open while ``closed_file`` does not exist
    (a file, so that another process can close it); checked again every second while a note waits."""

    actions: ClassVar[dict[str, Any]] = {
        **Notes.actions,
        "add-note": ActionSpec(mutates=True, precondition=True, recheck_every=1.0),
    }

    def __init__(self, closed_file: str) -> None:
        super().__init__()
        self.closed_file = Path(closed_file)

    def precondition(self, action: str, payload: Any) -> Any:
        return (
            {"ok": False, "code": "closed", "hint": "The notebook was closed."}
            if self.closed_file.exists()
            else None
        )


class StreamingAgent(Agent):
    """Like :class:`Agent`, and also streams each reply in chunks of ``size`` characters."""

    def __init__(self, replies: Iterable[str | Callable[[str], Any]], *, size: int = 7) -> None:
        super().__init__(replies)
        self.size = size

    async def stream(self, message: str) -> AsyncIterator[str]:
        reply = await self.send(message)
        for start in range(0, len(reply), self.size):
            await anyio.lowlevel.checkpoint()
            yield reply[start : start + self.size]


def make(
    replies: list[Any], human: Any = None, *, domain: Any = None, **options: Any
) -> tuple[Conversation, Agent, list[Any]]:
    """A conversation with an :class:`Agent` replying ``replies``, the :class:`Notes` domain (unless given) and a
    person who accepts (unless given), recording every event it shows; with its agent and events."""
    events: list[Any] = []
    agent = Agent(replies)
    conversation = Conversation(
        agent=agent,
        domain=domain if domain is not None else Notes(),
        human=human if human is not None else policy_human("accept"),
        on_event=events.append,
        **options,
    )
    return conversation, agent, events


def types(events: list[Any]) -> list[str]:
    """The types of these events, in order."""
    return [event.type for event in events]


def statuses(outcomes: Any) -> list[tuple[str, str]]:
    """Each outcome's id and status."""
    return [(outcome.id, outcome.status) for outcome in outcomes]


def stop(process: subprocess.Popen[Any], *, grace: float = 10.0) -> None:
    """End a server process the tests started: asked to stop first, killed if it has not within ``grace``."""
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def folded(core: ConversationCore, flow: Table | None = None) -> ConversationState:
    """The state the core's log folds to from scratch (with the domain flow's table, when it has one), each entry
    at its time: a live state must equal it."""
    state = ConversationState(flow=flow)
    fold_log(core.log.entries(), state)
    return state


class OpsNotes(Notes):
    """The notes domain whose notes are added only on the word of someone holding ``ops``."""

    actions: ClassVar[dict[str, Any]] = {
        **Notes.actions,
        "add-note": ActionSpec(mutates=True, policy=ApprovalPolicy(roles=frozenset({"ops"}))),
    }
