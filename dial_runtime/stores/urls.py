"""How the command line reads a store: opened only to read, each log checked as a conversation checks it when
it opens, every failure one line (shared by :mod:`dial_runtime.cli` and the ``eval`` commands)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from .._command import _CommandError, _usage
from ..errors import LogError
from ..runtime.events import LogEntry

__all__ = ["checked_log", "open_url", "read_log", "read_stored", "shown_url"]

T = TypeVar("T")


def open_url(url: str, *, create: bool = True) -> Any:
    """The store ``url`` names (``create=False``: one that is only read, so nothing is created in it)."""
    from . import open_store

    try:
        return open_store(url, create=create)
    except ValueError as error:
        _usage(str(error))


def shown_url(url: str) -> str:
    """``url`` as it may be shown: without a password."""
    from . import redact_url

    return redact_url(url)


def read_stored(url: str, read: Callable[[Any], Awaitable[T]]) -> T:
    """What ``read(store)`` gives of the store ``url``, opened only to read (nothing is created in it)."""
    store = open_url(url, create=False)

    async def work() -> T:
        try:
            return await read(store)
        finally:
            await store.aclose()

    return trio.run(work)


def checked_log(url: str, conversation_id: str, entries: list[LogEntry]) -> list[LogEntry]:
    """``entries`` folded as a conversation folds its log when it opens; a one-line error for a log no run of the
    runtime could have written, or none at all."""
    from ..runtime.state import fold_log

    try:
        checked = fold_log(entries)
    except LogError as error:
        raise _CommandError(f"{shown_url(url)} conversation {conversation_id!r}: {error}") from None
    if not checked:
        listing = "dial-runtime list --store URL lists them"
        raise _CommandError(f"{shown_url(url)} holds no conversation {conversation_id!r} ({listing})")
    return checked


def read_log(url: str, conversation_id: str) -> list[LogEntry]:
    """The conversation's stored log, read without creating or writing anything and checked as the conversation
    checks it when it opens; a one-line error when the store holds no such conversation, or a log no run of the
    runtime could have written."""
    return checked_log(url, conversation_id, read_stored(url, lambda store: store.read(conversation_id)))
