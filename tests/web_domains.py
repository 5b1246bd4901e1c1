"""Domains the web tests serve from a separate process (``--domain tests.web_domains:...``)."""

from __future__ import annotations

from typing import Any

import anyio

from dial_runtime.demo import NotesDomain


class StuckNotes(NotesDomain):
    """The notes domain, whose actions never finish: a worker killed while one runs leaves its effect unknown."""

    async def run(self, action: str, payload: Any) -> Any:
        await anyio.sleep_forever()
