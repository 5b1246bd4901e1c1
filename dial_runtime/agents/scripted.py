"""An agent that answers from a list of replies: for demos, tests, benchmarks, and trying a domain without a
model (``dial-runtime chat --agent script:FILE``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any


class ScriptedAgent:
    """Replies with the given texts in order and records every message it was sent in ``sent``.

    When the script runs out it raises ``LookupError``, which ``say`` re-raises like any failed send.
    """

    #: How :meth:`send` says the script ran out.
    exhausted = "no reply left"

    def __init__(self, replies: Iterable[str]) -> None:
        self._replies = list(replies)
        self._next = 0
        self.sent: list[str] = []

    @classmethod
    def from_file(cls, path: str | Path, *, skip: int = 0) -> ScriptedAgent:
        """The agent that replies with the replies a file holds (see :func:`load_script`), the first ``skip``
        of them left out (they were given already, in an earlier session of a stored conversation)."""
        return cls(load_script(path)[skip:])

    def send(self, message: str) -> str:
        """The next reply; ``message`` is kept in ``sent``."""
        self.sent.append(message)
        if self._next >= len(self._replies):
            raise LookupError(f"{type(self).__name__}: {self.exhausted} for message {len(self.sent)}")
        reply = self._replies[self._next]
        self._next += 1
        return reply


def load_script(path: str | Path) -> list[str]:
    """The replies in ``path``: a JSON list of strings (each one reply, in order), the same list in YAML (a
    ``.yaml`` or ``.yml`` file, where a block scalar keeps a multi-line reply readable; needs the ``yaml`` extra),
    or a JSON Lines log as ``dial-runtime export`` writes it (the agent's replies in that conversation).

    ``ValueError`` with one line saying what is wrong (a file that cannot be read, is not UTF-8, is neither
    form, or holds something other than text where a reply should be).
    """
    shown = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"script {shown!r}: cannot read it ({error.strerror or error})") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"script {shown!r}: not UTF-8 text (byte {error.start})") from None
    if Path(path).suffix.lower() in (".yaml", ".yml"):
        return _replies(_yaml(text, shown), shown, "YAML")
    if text.lstrip().startswith("["):
        try:
            replies: Any = json.loads(text)  # json's errors name the line and column
        except ValueError as error:
            raise ValueError(f"script {shown!r}: not a JSON list of replies ({error})") from None
        return _replies(replies, shown, "JSON")
    from ..stores.jsonl import import_jsonl
    from ..views.agent import exchanges

    try:
        _, entries = import_jsonl(text.splitlines())
    except ValueError as error:
        raise ValueError(
            f"script {shown!r}: neither a JSON list of replies nor a dial-runtime JSON Lines log ({error})"
        ) from None
    return [each.reply for each in exchanges(entry.event for entry in entries) if each.reply is not None]


def _yaml(text: str, shown: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise ValueError(
            f"script {shown!r}: reading YAML needs the yaml extra (pip install 'dial-runtime[yaml]')"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(error, "problem", None) or error
        raise ValueError(f"script {shown!r}: not YAML{line} ({problem})") from None


def _replies(replies: Any, shown: str, form: str) -> list[str]:
    """``replies`` when it is a list of strings; else ``ValueError`` naming what is not."""
    if not isinstance(replies, list):
        raise ValueError(f"script {shown!r}: expected a {form} list of replies")
    for number, reply in enumerate(replies, start=1):
        if not isinstance(reply, str):
            raise ValueError(f"script {shown!r}: reply {number} is {type(reply).__name__}, not a string")
    return replies
