"""A child process of a test, read line by line with bounded waits, and killed where it stands."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream


class Worker:
    """A worker process the test started, its standard error kept in the file ``errors`` for failure messages."""

    def __init__(self, process: Process, errors: Path) -> None:
        assert process.stdout is not None
        self.process = process
        self.stdout = BufferedByteReceiveStream(process.stdout)
        self.errors = errors

    def failed(self, why: str) -> str:
        return f"{why} (worker {self.process.pid}):\n{self.errors.read_text(errors='replace')}"

    async def line(self, within: float = 30) -> str:
        """The worker's next line; the test fails if it exits first."""
        try:
            with anyio.fail_after(within):
                return (await self.stdout.receive_until(b"\n", 1 << 16)).decode()
        except (anyio.IncompleteRead, anyio.EndOfStream):
            with anyio.fail_after(10):
                await self.process.wait()
            pytest.fail(self.failed(f"the worker exited with {self.process.returncode}"))

    async def expect(self, start: str, within: float = 30) -> str:
        """The worker's next line, which must begin with ``start``."""
        got = await self.line(within)
        assert got.startswith(start), self.failed(f"the worker said {got!r}, not {start!r}...")
        return got

    async def go(self) -> None:
        """Tell a worker that waits on its standard input to start."""
        assert self.process.stdin is not None
        await self.process.stdin.send(b"go\n")

    async def kill(self) -> None:
        """SIGKILL the worker where it stands; it must have been running until then."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        with anyio.fail_after(10):
            await self.process.wait()
        assert self.process.returncode == -signal.SIGKILL, self.failed(f"it ended with {self.process.returncode}")
