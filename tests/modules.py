"""The library's modules, for the tests that look at every one of them."""

from __future__ import annotations

import pkgutil
from collections.abc import Iterator

import dial_runtime


def library_modules() -> Iterator[pkgutil.ModuleInfo]:
    """Every module of the package, but those run as programs (``python -m``), which importing would run."""
    for found in pkgutil.walk_packages(dial_runtime.__path__, "dial_runtime."):
        if not found.name.endswith(".__main__"):
            yield found
