"""Domains the terminal tests load with ``chat --domain``: the demo's notes, whose additions two people must
approve."""

from __future__ import annotations

import msgspec

from dial_runtime import ApprovalPolicy
from dial_runtime.demo import NotesDomain


class ReviewedNotes(NotesDomain):
    """The demo's notes; adding one needs two approvals."""

    def __init__(self) -> None:
        super().__init__()
        spec = self._specs["add-note"]
        self._specs["add-note"] = msgspec.structs.replace(spec, policy=ApprovalPolicy(approvals=2))
