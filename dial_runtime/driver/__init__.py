"""The driver: :class:`Conversation`, which performs the core's effects under anyio, and ready-made people."""

from __future__ import annotations

from .conversation import Conversation
from .humans import policy_human, scripted_human

__all__ = ["Conversation", "policy_human", "scripted_human"]
