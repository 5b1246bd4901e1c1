"""What the agent saw: each message it was sent and what it replied, read from the log.

Every reader of the agent's side of a conversation reads it here: a model agent's chat history when a stored
conversation is taken up (:func:`dial_runtime.llm.history_from_log`), a recorded agent's replies
(:meth:`dial_runtime.RecordedAgent.from_log`), a script read from a JSON Lines log, the web surface's count of
replies, and evaluation's points.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from ..language.records import Option
from ..runtime.events import (
    AskEvent,
    Event,
    ProposedEvent,
    ReplyEvent,
    ReplyProgressEvent,
    ReplyStartedEvent,
    SentEvent,
)
from ..runtime.records import ProviderMessage

__all__ = ["Called", "Exchange", "Exchanges", "exchanges"]


class Called(msgspec.Struct, frozen=True, kw_only=True):
    """A suggestion or an ask the runtime read from a reply, as the log has it: what a model speaking in calls
    would have called. ``id`` is the runtime's, ``element`` where the reply held it; a suggestion has its
    ``action``, ``payload`` (its declare's included) and ``text``, an ask its question (``text``) and
    ``options`` (``action`` ``None``)."""

    id: str
    element: int | None
    action: str | None = None
    payload: Any = None
    text: str = ""
    options: tuple[Option, ...] = ()


class Exchange(msgspec.Struct, frozen=True, kw_only=True):
    """One message the agent was sent, and its reply as far as the log has it.

    ``reply`` is the whole reply, ``None`` when the log has none (no answer came, or a streamed one was cut off
    by the log's end or a dead process); ``delivered`` whether a reply began (a streamed one's first chunk, or
    the whole reply); ``so_far`` what arrived of a streamed reply whose end the log lacks (its ``reply-progress``
    texts); ``provider`` the model's own message a codec read ``reply`` from, when the agent gave one;
    ``called`` the suggestions and asks the runtime read from the reply, in the order it read them."""

    message: str
    reply: str | None = None
    delivered: bool = False
    so_far: str = ""
    provider: ProviderMessage | None = None
    called: tuple[Called, ...] = ()


class Exchanges:
    """The exchanges of a log, fed its events one at a time (:meth:`feed`); :attr:`found` holds them in order,
    each as it stands after the events fed so far."""

    def __init__(self) -> None:
        self.found: list[Exchange] = []
        self._open: Exchange | None = None  # the last message sent, until its reply ends

    def feed(self, event: Event) -> None:
        """Take the next event of the log."""
        opened = self._open
        if isinstance(event, SentEvent):
            self._open = Exchange(message=event.message)
            self.found.append(self._open)
            return
        if isinstance(event, (ProposedEvent, AskEvent)) and self.found:  # as the reply streams, or once whole
            if isinstance(event, ProposedEvent):
                called = Called(
                    id=event.id, element=event.element, action=event.action, payload=event.payload, text=event.text
                )
            else:
                called = Called(id=event.id, element=event.element, text=event.text, options=event.options)
            last = self.found[-1]
            self.found[-1] = msgspec.structs.replace(last, called=(*last.called, called))
            if opened is not None:
                self._open = self.found[-1]
            return
        if opened is None:
            return
        if isinstance(event, ReplyStartedEvent):
            self._replace(msgspec.structs.replace(opened, delivered=True))
        elif isinstance(event, ReplyProgressEvent):
            self._replace(msgspec.structs.replace(opened, so_far=opened.so_far + event.text))
        elif isinstance(event, ReplyEvent):
            self._replace(
                msgspec.structs.replace(
                    opened, reply=event.text, delivered=True, so_far="", provider=event.provider
                )
            )
            self._open = None

    def _replace(self, exchange: Exchange) -> None:
        self.found[-1] = self._open = exchange


def exchanges(events: Iterable[Event]) -> list[Exchange]:
    """Every message the agent was sent in ``events`` (a log's, in order), with its reply."""
    view = Exchanges()
    for event in events:
        view.feed(event)
    return view.found
