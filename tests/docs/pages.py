"""The README and the documentation site's pages as the tests read them: their fenced blocks, in order, with the
file name a block is titled with and why a block is not run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: Every page a reader may paste from: the README, then the site's pages.
PAGES = [README, *sorted(DOCS.rglob("*.md"))]

NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>[^>]+?)\s*-->\s*\Z")
RUNS_AGAINST = re.compile(r"<!--\s*runs against:\s*(?P<server>[\w-]+)\s*-->\s*\Z")
OPENING = re.compile(r'^```(?P<language>[\w-]*)(?:\s+title="(?P<title>[^"]+)")?\s*$')


class Block(NamedTuple):
    """A fenced block: its language, text, the line its fence opens on, why it is not run (``None``: it runs), the
    file it is titled with (``None``: a program, not a file) and the local server it runs against (``None``:
    none; ``llama-server``: the tests start one, with a small model, and give its address as ``LLAMA_HOST``)."""

    language: str
    code: str
    line: int
    not_run: str | None
    title: str | None = None
    server: str | None = None


def name(page: Path) -> str:
    """A page as the tests name it: its path in the repository."""
    return page.relative_to(ROOT).as_posix()


def blocks(language: str | None, text: str | None = None, page: Path = README) -> list[Block]:
    """The fenced blocks of ``language`` (``None``: all) on ``page`` (or in ``text``, for the tests of this)."""
    lines = (page.read_text(encoding="utf-8") if text is None else text).splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = OPENING.match(lines[index]) if lines[index].startswith("```") else None
        if opening is None:
            index += 1
            continue
        close = next((end for end in range(index + 1, len(lines)) if lines[end].rstrip() == "```"), None)
        if close is None:
            raise AssertionError(f"{name(page)}:{index + 1}: a code fence that is never closed")
        before = "\n".join(lines[:index]).rstrip()
        marked = NOT_RUN.search(before[-200:])
        served = RUNS_AGAINST.search(before[-200:])
        if language is None or opening["language"] == language:
            code = "\n".join(lines[index + 1 : close]) + "\n"
            reason = marked["reason"] if marked else None
            server = served["server"] if served else None
            found.append(Block(opening["language"], code, index + 1, reason, opening["title"], server))
        index = close + 1
    return found


def page_block(page: Path, heading: str, language: str = "python") -> Block:
    """The first block of ``language`` after the line ``heading`` (``## Flows``) of ``page``."""
    text = "\n" + page.read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n")
    line = text.count("\n", 0, start) + 1  # the heading's line
    return next(block for block in blocks(language, page=page) if block.line > line)
