"""The ports: what a conversation asks of the parts a user plugs into it, as ``typing.Protocol``\\ s.

A class satisfies a port by having the methods, with compatible signatures; it does not subclass anything, so
``mypy --strict`` checks a user's agent, person, domain or store where it is passed to the runtime::

    class Notes:
        actions = {"add-note": ActionSpec(mutates=True)}

        def validate(self, action: str, payload: Any) -> dict[str, Any]: ...
        def preview(self, action: str, payload: Any) -> str: ...
        async def run(self, action: str, payload: Any) -> dict[str, int]: ...
        def context(self) -> str: ...

    domain: DomainPort = Notes()      # mypy reports a missing method or a wrong signature here

Every method the runtime calls may be a plain function or a coroutine function where the documentation says so (an
agent's ``send``, a person's ``decide`` and ``answer``, a domain's ``run``): the return types below are
``MaybeAwaitable``. Parameters are positional-only, as the runtime passes them, so a user's names are free.

The ports state the whole documented contract; the runtime stays more lenient at run time, where it reads a
collaborator duck-typed: an agent needs only ``send``, a person only ``decide`` (without ``answer`` asks are shown
and never put), a domain only ``run`` (without ``actions`` every action is unknown, without ``validate`` every
payload is accepted, without ``preview`` the action's name is shown, without ``context`` nothing is added). The
dict forms (``{"mutates": True}``, ``{"ok": False, ...}``, ``{"accept": True}``) are part of the types.

Each port is named for its role with ``Port`` after it (:class:`AgentPort`, :class:`StreamingAgentPort`,
:class:`HumanPort`, :class:`DomainPort`, :class:`DescribedDomainPort`, :class:`ReconcilingDomainPort`,
:class:`StorePort`), so that no port shares
a name with a class that plays the role: :class:`~dial_runtime.Domain` is the typed-functions domain, which
satisfies :class:`DomainPort`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeAlias, TypeVar

from .runtime.events import LogEntry
from .runtime.records import ActionSpec, AgentReply, Ask, Decision, Defer, Issue, ProviderMessage, Suggestion

__all__ = [
    "ActionSpecLike",
    "AgentPort",
    "AgentReply",
    "AnswerLike",
    "DecisionLike",
    "DescribedDomainPort",
    "DomainPort",
    "HumanPort",
    "IssueLike",
    "MaybeAwaitable",
    "ProviderMessage",
    "ReconcilingDomainPort",
    "StorePort",
    "StreamingAgentPort",
]

T = TypeVar("T")

#: A value, or an awaitable of it: what a method that may be plain or ``async`` returns.
MaybeAwaitable: TypeAlias = T | Awaitable[T]

#: An action's spec: the record, or the dict ``{"mutates": ..., "destructive": ..., "handoff": ...}``.
ActionSpecLike: TypeAlias = ActionSpec | Mapping[str, Any]

#: What ``validate`` returns: ``None`` or ``{"ok": True}`` to accept; an :class:`Issue` or ``{"ok": False,
#: "code": ..., "field": ..., "hint": ...}`` to refuse.
IssueLike: TypeAlias = Issue | Mapping[str, Any] | None

#: A person's decision: a record, ``Defer()``, or the dicts ``{"accept": True}``, ``{"dismiss": True}``,
#: ``{"edit": payload}``, ``{"say": text}``.
DecisionLike: TypeAlias = Decision | Defer | Mapping[str, Any]

#: A person's answer: text (empty or ``None``: the question stands) or ``Defer()``.
AnswerLike: TypeAlias = str | Defer | None


class AgentPort(Protocol):
    """Whatever answers the runtime's messages: ``send`` returns the agent's reply text (``None`` counts as an
    empty reply), or an :class:`AgentReply` holding it with the model's own message a codec read it from."""

    def send(self, message: str, /) -> MaybeAwaitable[str | AgentReply | None]: ...


class StreamingAgentPort(AgentPort, Protocol):
    """An agent that can also stream its reply: ``stream`` yields the reply's text in chunks as they arrive.

    The runtime uses ``stream`` whenever an agent has it, and handles each element as soon as it is complete.
    After its text a stream may yield one :class:`ProviderMessage`: the model's message the text was read from.
    """

    def stream(self, message: str, /) -> AsyncIterator[str | ProviderMessage]: ...


class HumanPort(Protocol):
    """The person in the loop, or a policy standing in for one."""

    def decide(self, suggestion: Suggestion, /) -> MaybeAwaitable[DecisionLike]:
        """Accept, dismiss, edit, say something else, or ``Defer()`` to decide later."""
        ...

    def answer(self, ask: Ask, /) -> MaybeAwaitable[AnswerLike]:
        """Answer the agent's question, or ``Defer()`` to answer later."""
        ...


class DomainPort(Protocol):
    """An application's vocabulary of actions: what each is, whether a payload is acceptable, how it reads, and
    the work itself. A domain may also declare ``approval_rules``, a sequence of
    :class:`~dial_runtime.runtime.asking.Rule`: whether to ask a person at all, asked before a suggestion waits
    for one."""

    @property
    def actions(self) -> Mapping[str, ActionSpecLike]:
        """Each action's spec, by name."""
        ...

    def validate(self, action: str, payload: Any, /) -> IssueLike:
        """Accept or refuse a payload; called before a suggestion is shown and again before it runs."""
        ...

    def preview(self, action: str, payload: Any, /) -> str:
        """The short text the person sees for the action (empty: the action's name)."""
        ...

    def run(self, action: str, payload: Any, /) -> MaybeAwaitable[object]:
        """Do the work and return its result (as JSON, or converted with ``str()``); raise to fail, with
        :class:`~dial_runtime.ActionError` for a code, field and hint the agent can act on."""
        ...

    def context(self) -> str | None:
        """Text sent with every turn (the application's current state, as the agent should see it)."""
        ...


class DescribedDomainPort(DomainPort, Protocol):
    """A domain that also documents its actions for the agent's system prompt
    (:func:`~dial_runtime.system_prompt`).

    ``vocabulary`` maps an action to any of ``"description"`` (text), ``"schema"`` (the payload's JSON Schema) and
    ``"example"`` (an example payload), and names only the domain's actions: the prompt refuses any other key or
    name with a ``ValueError``; ``describe`` gives an action's description when the vocabulary has none. Both are
    optional to the prompt: this protocol is for domains that want them checked.
    """

    @property
    def vocabulary(self) -> Mapping[str, Mapping[str, Any]]: ...

    def describe(self, action: str, /) -> str | None: ...


class ReconcilingDomainPort(Protocol):
    """What a domain adds to make its effects exactly once across crashes (both methods optional to the runtime,
    which reads a domain duck-typed; this protocol is for domains that want them checked).

    ``run`` takes the run's idempotency ``key`` (derived from the log: the conversation, the suggestion, the
    attempt) to hand on where the effect happens (an ``Idempotency-Key`` header, an MCP request's ``_meta``, a
    unique column). After a crash mid-action, recovery calls ``reconcile`` with the same key before reporting:
    it returns the result the run had, raises as the run did (an :class:`~dial_runtime.ActionError` for a
    failure), or raises ``LookupError`` when it cannot tell (the outcome is then ``failed``, ``interrupted``). It
    may be called more than once for one key, and must never cause the effect a second time.
    """

    def run(self, action: str, payload: Any, /, *, key: str | None = None) -> MaybeAwaitable[object]:
        """Do the work under ``key`` (``None``: a caller that has none, such as a test calling it directly); the
        default keeps the domain a :class:`DomainPort` too."""
        ...

    def reconcile(self, action: str, payload: Any, /, *, key: str) -> MaybeAwaitable[object]: ...


class StorePort(Protocol):
    """A durable home for conversation logs (see :mod:`dial_runtime.stores`)."""

    async def append(self, conversation_id: str, entries: Sequence[LogEntry], *, expected_seq: int) -> None:
        """Append ``entries`` (numbered ``expected_seq + 1``, ``+ 2``, ...) atomically, iff the stored log ends
        at ``expected_seq``; else raise :class:`~dial_runtime.errors.StoreConflict` and write nothing."""
        ...

    async def read(self, conversation_id: str, *, after_seq: int = 0) -> list[LogEntry]:
        """The entries after ``after_seq``, in order; ``[]`` for a conversation never appended to."""
        ...

    async def conversations(self) -> list[str]:
        """The ids of every conversation with at least one entry, sorted."""
        ...

    def lock(self, conversation_id: str) -> AbstractAsyncContextManager[None]:
        """Hold the conversation exclusively; raise :class:`~dial_runtime.ConversationBusy` at once when it is held
        elsewhere (another task, worker, process or connection). Released on exit, and when the holder dies."""
        ...

    def watch(self, conversation_id: str | None = None) -> AbstractAsyncContextManager[AsyncIterator[str | None]]:
        """Watch one conversation (``None``: every one) for the block's length: the iterator yields a
        conversation's id soon after entries are appended to it, by this process or (where the store can tell)
        another; ``None`` when any may have changed. A change is a hint to :meth:`read`, never the entries, and
        several appends may come as one. Enter the watch, then read: nothing appended after the read is missed.
        The iteration ends when the store closes."""
        ...

    async def aclose(self) -> None:
        """Release the store's connections; a closed store raises :class:`~dial_runtime.errors.StoreClosed`."""
        ...
