"""Agents a conversation can talk to."""

from __future__ import annotations

from .scripted import ScriptedAgent

__all__ = ["ScriptedAgent"]
