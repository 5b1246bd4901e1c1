"""Surfaces: what renders a conversation and plays the person in it."""

from __future__ import annotations

from .terminal import TerminalSurface

__all__ = ["TerminalSurface"]
