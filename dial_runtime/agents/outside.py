"""An agent the runtime does not drive: one that reaches it through a door (an MCP client calling the tools of
``dial-runtime mcp``, an agent framework's bridge) rather than being sent messages.

Its proposals come in through the door, each handed in as the reply to the turn the door starts for it; what it
is told goes back through the door, which reads the outcome from the log, so here it answers nothing. The
processes that decide on its proposals (``dial-runtime decide --agent outside:``, ``serve --agent outside:``)
build it too: the conversation carries on after a decision as with any agent, and the agent says nothing more.
"""

from __future__ import annotations

__all__ = ["OutsideAgent"]


class OutsideAgent:
    """The agent of a door's conversation: :meth:`send` answers with what :meth:`hand_in` was given for the next
    turn (the proposal the door received), once, and with nothing (an empty reply, which asks for nothing)
    afterwards."""

    def __init__(self) -> None:
        self._reply = ""

    def hand_in(self, reply: str) -> None:
        """Give the reply of the next turn: the DIAL of what the agent outside proposed."""
        self._reply = reply

    def send(self, message: str) -> str:
        """The reply handed in, once; then an empty one (what the agent is told reaches it through its door)."""
        reply, self._reply = self._reply, ""
        return reply
