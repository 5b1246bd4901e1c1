"""The library's exceptions, all in this module.

Every exception the library raises on purpose, and the one a domain raises to fail an action, derives from
:class:`DialError`::

    DialError
    ├── DialSizeError        an envelope is larger than the parser's limit (also a ValueError)
    ├── ConversationBusy     a call came while another call (here or in another worker) drives the conversation
    │   └── StoreConflict    an append to a store whose log moved on since the caller read it
    ├── StoreClosed          a store was used after ``aclose()`` (also a RuntimeError)
    ├── StoreError           a store that cannot be used: not a database, no such file or folder, a refusing server
    ├── IllegalTransition    a state machine was asked for a transition its table does not have
    ├── NotWaiting           a decision or answer for a suggestion or ask that is not waiting for one
    │   └── AlreadyDecided   ... because it has already ended (says by whom, how)
    ├── PayloadChanged       a decision on a payload other than the one waiting (the person saw an older one)
    ├── LinkRefused          a decision link that may not be used (forged, expired, not this person's, used...)
    ├── ClaimRefused         a claim, release or assignment of a waiting card its rules refuse (says why)
    ├── LogError             a log no run of the runtime could have written (names the entry; a ValueError)
    ├── AgentError           an agent's endpoint refused the request, or its retries were used up
    │   └── TokenLimitReached  a streamed answer the model stopped at its token limit (a cut reply)
    ├── McpConnectionError   an MCP server could not be started, reached or initialised (dial_runtime.mcp)
    ├── StillWaiting         a door's calls whose cards still wait for a person when its time to wait ran out
    ├── ActionError          raised by a domain's ``run`` to fail an action with a code, field and hint
    └── RecordedError        an error as a log recorded it, thrown into a call by a replay

One is not an error but a cancellation carrying words, so no ``except Exception`` takes it for a failure::

    BaseException
    └── Interruption         a cancellation someone put in words, thrown into a call in its place

They are importable from here and from ``dial_runtime``; :class:`StoreConflict` also from
``dial_runtime.stores``, :class:`AgentError` from ``dial_runtime.agents`` and :class:`ActionError` from
``dial_runtime.runtime``, where they were first defined.

Built-in types are used where they fit: ``TypeError`` for a collaborator without a required method or a
decision of the wrong shape, ``ValueError`` for a value the caller should not have passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class DialError(Exception):
    """Base class of the errors this library raises on purpose."""


class DialSizeError(DialError, ValueError):
    """Raised by ``parse`` and ``StreamParser`` when the envelope, or the whole reply (``what="reply"``), is larger
    than its limit; ``size`` is in bytes of UTF-8 (for a stream: what had arrived when it was cut)."""

    def __init__(self, size: int, limit: int, *, what: str = "envelope") -> None:
        super().__init__(f"DIAL {what} is {size} bytes, over the limit of {limit} bytes")
        self.size = size
        self.limit = limit
        self.what = what


class ConversationBusy(DialError):
    """Raised at once by a call that would drive a conversation another call is already driving."""


class IllegalTransition(DialError):
    """Raised when a machine gets an event its current state does not accept; nothing changes."""

    def __init__(self, machine: str, state: str, event: str) -> None:
        super().__init__(f"{machine}: event '{event}' is not allowed in state '{state}'")
        self.machine = machine
        self.state = state
        self.event = event


class NotWaiting(DialError):
    """Raised by ``decide`` or ``answer`` when the suggestion or ask named is not waiting for one: there is no
    such id, it is not shown yet, or (:class:`AlreadyDecided`) it ended. Nothing changes. ``subject_id`` is the
    id named."""

    def __init__(self, subject_id: str, kind: str, awaited: str) -> None:
        super().__init__(f"Conversation: {kind} {subject_id!r} is not awaiting {awaited}")
        self.subject_id = subject_id


class AlreadyDecided(NotWaiting):
    """Raised by ``decide`` or ``answer`` on a suggestion or ask that has already ended: another call, tab or
    worker decided it first. Nothing changes.

    ``subject_id`` is the suggestion's or ask's id; ``by`` who decided (``None`` when the log does not say);
    ``how`` the decision (``accept``, ``dismiss``, ``edit``, ``say``, ``expire``), ``answered`` for an ask, or the
    outcome's status when it ended without a decision (superseded, interrupted, ...).
    """

    def __init__(self, subject_id: str, *, by: str | None, how: str) -> None:
        who = f" by {by}" if by else ""
        DialError.__init__(self, f"{subject_id!r} was already decided{who} ({how})")
        self.subject_id = subject_id
        self.by = by
        self.how = how


class PayloadChanged(DialError):
    """Raised by ``decide(..., shown=digest)`` when the digest of what the person was shown is not the digest of
    the payload that would run (a refused edit replaced it, or the person saw a stale copy). Nothing changes;
    show the suggestion again (``Suggestion.digest``) and let the person decide on what waits."""

    def __init__(self, suggestion_id: str, *, shown: str, waiting: str) -> None:
        super().__init__(f"{suggestion_id!r}: the payload decided on is not the one waiting")
        self.suggestion_id = suggestion_id
        self.shown = shown
        self.waiting = waiting


class LinkRefused(DialError):
    """A decision link that may not be used (:mod:`dial_runtime.links`); nothing was decided, and no token id
    was marked used.

    ``reason`` is one of ``dial_runtime.links.REFUSAL_REASONS``, for a program to act on (``payload-changed``:
    show the suggestion again; ``expired``: ask for a new link); the message says the same in one line.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"decision link refused ({reason}): {message}")
        self.reason = reason


class ClaimRefused(DialError):
    """Raised by ``claim``, ``release`` or ``assign`` when the card's rules refuse it; nothing changes.

    ``code`` says which rule, for a program to act on: ``unknown-claimant`` (no one named), ``not-a-decider``
    (the card's approval policy does not admit them), ``already-approved`` (their approval is counted already),
    ``claimed`` (someone else's claim holds: ``holder``, until ``until``, seconds since the epoch),
    ``not-claimed`` (a release by someone who holds no claim on it), ``assignee-not-a-decider`` (the person or
    role assigned may not decide it). The message says the same in one line.
    """

    def __init__(
        self, suggestion_id: str, code: str, hint: str, *, holder: str | None = None, until: float | None = None
    ) -> None:
        super().__init__(f"{suggestion_id!r} refused ({code}): {hint}")
        self.suggestion_id = suggestion_id
        self.code = code
        self.hint = hint
        self.holder = holder
        self.until = until


class LogError(DialError, ValueError):
    """Raised when a log could not have been written by any run of the runtime; no conversation is built.

    ``seq`` is the offending entry's number (``None`` when the log as a whole is at fault), ``event_type`` its
    type and ``reason`` why it cannot stand where it is.
    """

    def __init__(self, seq: int | None, event_type: str | None, reason: str) -> None:
        where = "the log" if seq is None else f"log entry {seq}" + (f" ({event_type})" if event_type else "")
        super().__init__(f"{where}: {reason}")
        self.seq = seq
        self.event_type = event_type
        self.reason = reason


class StoreConflict(ConversationBusy):
    """An append whose expected sequence number is not the stored last one: another writer got there first.

    Nothing was written; the caller reads what the other writer stored and tries again, or gives up the call.
    """


class StoreClosed(DialError, RuntimeError):
    """A store was used (append, read, list, lock) after its ``aclose()``; nothing was done."""


class StoreError(DialError):
    """A store that cannot be used: a file that is not a database, a database or folder that does not exist, a
    server that refuses the connection. The message names the store (its URL with any password masked)."""


class AgentError(DialError):
    """A chat-completions request failed for good.

    Raised at once for an error that is not transient (``status`` 400, 401, 404, ... with the server's message),
    for a response that is not a chat completion, for a streamed answer that broke off after it had started, and
    when the retries of a transient failure are used up. ``status`` is the last HTTP status, ``None`` when no
    response came.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class TokenLimitReached(AgentError):
    """A streamed answer the model stopped at its token limit (an OpenAI-style ``finish_reason`` of ``length``).

    Raise it from an agent's ``stream`` to say so: the conversation handles the reply as cut by the token limit
    (``reply-cut`` with cause ``token-limit``), never as whole, and asks the agent for a shorter reply.
    """


class ActionError(DialError):
    """Raise from ``domain.run`` to fail an action with a code, field and hint the agent can act on.

    The runtime catches it (as any exception from ``run``) and reports the action ``failed`` with these reasons;
    it never propagates out of a conversation's call.
    """

    def __init__(
        self, message: str, *, code: str | None = None, field: str | None = None, hint: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.field = field
        self.hint = hint


class McpConnectionError(DialError):
    """The MCP server could not be started, reached or initialised, or its tools could not be listed."""


class StillWaiting(DialError):
    """A door's calls whose cards still wait for a person when its time to wait ran out (``waiting``: each
    call's :class:`~dial_runtime.doors.gate.Waits`, its conversation and card). Nothing of theirs has run;
    asking again finds the same cards."""

    def __init__(self, waiting: Sequence[Any]) -> None:
        self.waiting = tuple(waiting)
        shown = ", ".join(f"{each.card.id} in {each.conversation_id}" for each in self.waiting)
        super().__init__(f"{len(self.waiting)} proposal(s) still wait for a person: {shown}")


class RecordedError(DialError):
    """An error as a log recorded it (``"TypeName: message"``), thrown into a call by a replay: the core words it
    exactly so."""


class Interruption(BaseException):
    """Thrown into a call instead of a cancellation whose cause someone put in words (``why``: "cancelled by the
    person"): the core logs the interruption in those words, and the driver raises ``cause`` again once the call
    has closed."""

    def __init__(self, why: str, cause: BaseException) -> None:
        super().__init__(why)
        self.why = why
        self.cause = cause
