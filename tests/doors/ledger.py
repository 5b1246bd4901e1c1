"""A domain whose effects are lines in a file, so that a test counts the runs of an action across processes
(``--domain tests.doors.ledger:Ledger``, the file named by ``DIAL_TEST_LEDGER``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import msgspec

from dial_runtime import ActionError, ApprovalPolicy, Domain, Issue

Line = Annotated[str, msgspec.Meta(min_length=1, max_length=40, pattern=r"^[^\n]*\S[^\n]*$")]


class Ledger(Domain):
    """Lines in a file: append one (waits for a person), read them (runs at once), strike one out (destructive,
    refused for a line that is not there), and sign one off (two people must approve)."""

    def __init__(self, path: str | Path | None = None) -> None:
        super().__init__("ledger", description="Lines in a file, one per entry.")
        self.file = Path(path if path is not None else os.environ["DIAL_TEST_LEDGER"])
        file = self.file

        def lines() -> list[str]:
            return file.read_text(encoding="utf-8").splitlines() if file.exists() else []

        self.lines = lines

        @self.action(preview="Append the line '{text}'")
        def append_line(text: Line) -> dict[str, int]:
            """Append a line to the ledger."""
            with file.open("a", encoding="utf-8") as opened:
                opened.write(text + "\n")
            return {"lines": len(lines())}

        @self.action(read_only=True, preview="Read the ledger")
        def read_lines() -> dict[str, list[str]]:
            """Every line of the ledger, oldest first."""
            return {"lines": lines()}

        def present(text: str) -> Issue | None:
            if text in lines():
                return None
            return Issue(code="not-found", field="text", hint="Read the ledger and use a line's exact text.")

        @self.action(destructive=True, check=present, preview="Strike out '{text}'")
        def strike_line(text: Line) -> dict[str, int]:
            """Strike a line out of the ledger, given its exact text."""
            kept = lines()
            if text not in kept:
                raise ActionError("no such line", code="not-found", field="text")
            kept.remove(text)
            file.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
            return {"lines": len(kept)}

        @self.action(policy=ApprovalPolicy(approvals=2), preview="Sign off '{text}'")
        def sign_off(text: Line) -> dict[str, int]:
            """Sign a line off: two people must approve."""
            with file.open("a", encoding="utf-8") as opened:
                opened.write(f"signed: {text}\n")
            return {"lines": len(lines())}
