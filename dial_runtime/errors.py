"""The library's exceptions.

Every error raised on purpose derives from :class:`DialError`::

    DialError
    ├── DialSizeError        an envelope is larger than the parser's limit (also a ValueError)
    ├── ConversationBusy     a call came while another call (here or in another worker) drives the conversation
    │   └── StoreConflict    an append to a store whose log moved on (dial_runtime.stores)
    ├── IllegalTransition    a state machine was asked for a transition its table does not have
    ├── LogError             a log that no run of the runtime could have written (names the entry's seq)
    └── AgentError           an agent's endpoint refused the request (dial_runtime.agents)

Built-in types are used where they fit: ``TypeError`` for a collaborator without a required method or a
decision of the wrong shape, ``ValueError`` for a value the caller should not have passed.
"""

from __future__ import annotations


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


class LogError(DialError):
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
