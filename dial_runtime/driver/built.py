"""The collaborators of a conversation that a server or a worker builds for each call: a person who defers every
decision (nobody is at the screen while the call runs), and an agent and a domain made by their factories only
the first time a call uses them.

A factory is called with the conversation's id and its log inside the call, so under the conversation's lock and
with the log as the store holds it (folded, caught up with what other workers wrote, and recovered), never from a
copy read before the lock was taken. The web surface and the deadline workers build conversations this way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..runtime.records import Ask, Defer, Suggestion
from .conversation import accepts_keyword

if TYPE_CHECKING:
    from ..runtime.events import LogEntry
    from .conversation import Conversation

__all__ = ["AgentOnFirstUse", "DeferringHuman", "DomainOnFirstUse"]


class DeferringHuman:
    """A person who is not there during the call: every decision and answer comes in a later call."""

    def decide(self, suggestion: Suggestion) -> Defer:
        return Defer()

    def answer(self, ask: Ask) -> Defer:
        return Defer()


class _OnFirstUse:
    """What ``factory(conversation_id, log)`` builds, the first time a call of :attr:`conversation` uses it."""

    def __init__(self, factory: Callable[[str, Sequence[LogEntry]], Any], conversation_id: str) -> None:
        self._factory = factory
        self._id = conversation_id
        self._built: Any = None
        self.conversation: Conversation | None = None

    def _now(self) -> Any:
        if self._built is None:
            assert self.conversation is not None, "it is used only by the conversation's calls"
            self._built = self._factory(self._id, self.conversation.log)
        return self._built


class AgentOnFirstUse(_OnFirstUse):
    """A call's agent, built the first time the conversation talks to it."""

    def send(self, message: str) -> Any:
        return self._now().send(message)

    def __getattr__(self, name: str) -> Any:
        if name == "stream":  # asked for at each send: the built agent streams or not
            return self._now().stream
        raise AttributeError(name)

    async def aclose(self) -> None:
        close = getattr(self._built, "aclose", None)
        if close is not None:
            await close()


class DomainOnFirstUse(_OnFirstUse):
    """A call's domain, built the first time a call asks it anything (its actions, a check, a preview, a run, its
    context); a call that asks nothing (a snapshot, an expiry) builds none. Its flow, which the conversation reads
    as it is made, is the describing domain's (``flow_rules``). A run's idempotency key reaches the built domain
    when its ``run`` takes one."""

    def __init__(
        self, factory: Callable[[str, Sequence[LogEntry]], Any], conversation_id: str, describing: Any
    ) -> None:
        super().__init__(factory, conversation_id)
        self.flow_rules = getattr(describing, "flow_rules", None)

    def run(self, action: str, payload: Any, *, key: str | None = None) -> Any:
        run = self._now().run
        return (
            run(action, payload, key=key)
            if key is not None and accepts_keyword(run, "key")
            else run(action, payload)
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._now(), name)
