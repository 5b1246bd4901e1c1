"""The terminal: a surface that shows a conversation in a terminal and plays the person in it
(:class:`TerminalSurface`, the ``chat`` command; it needs the ``terminal`` extra: ``pip install
'dial-runtime[terminal]'``), and the plain-text transcript it and ``demo`` print (:mod:`.transcript`, which needs
nothing more, so :class:`TerminalSurface` is imported on first use)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .surface import TerminalSurface

__all__ = ["TerminalSurface"]

__getattr__, __dir__ = lazy_exports(__name__, {"TerminalSurface": ".surface"}, globals())
