"""Names and modules found on first use.

- :func:`lazy_exports`: a package's exports loaded when first asked for, so importing it does not import what
  only some users need (httpx for :class:`~dial_runtime.ChatAgent`, psycopg for the PostgreSQL store); and names
  that moved elsewhere, still found at their old place with a :class:`DeprecationWarning` for one release.
- :data:`MOVED_MODULES` and :class:`MovedModules`: modules that moved, importable by their old names for one
  release (the import gives the module at its new place, so both names are one module object), with a
  :class:`DeprecationWarning` naming the new place.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import warnings
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

#: Old module name -> new one, for the modules the package's layout moved in 0.2 (removed in 0.3).
MOVED_MODULES: Mapping[str, str] = {
    f"dial_runtime.{old}": f"dial_runtime.{new}"
    for old, new in {
        "links": "decisions.links",
        "notify": "decisions.notify",
        "deadlines": "decisions.deadlines",
        "web.announce": "decisions.announce",
        "web.linking": "web.decide",
        "stores.signing": "audit.signing",
        "mcp": "adapters.mcp",
        "http_domain": "adapters.http",
        "agents.chat": "llm.chat",
        "agents.grammar": "llm.grammar",
        "agents.uri": "llm.uri",
        "surfaces": "terminal",
        "surfaces.terminal": "terminal.surface",
        "transcript": "terminal.transcript",
        "jsonl": "stores.jsonl",
        "loading": "domains.loading",
        "diagrams": "statemachines.diagrams",
        "runtime.projection": "views.person",
    }.items()
}


def moved_warning(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}; the old name goes in the next release", DeprecationWarning, stacklevel=3)


def lazy_exports(
    package: str,
    where: Mapping[str, str],
    namespace: dict[str, Any],
    *,
    moved: Mapping[str, str] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module's ``__getattr__`` and ``__dir__`` for the names ``where`` maps to the (relative) module defining
    each: the module is imported on first access and the name cached in ``namespace``, the package's globals.

    ``moved`` maps names the package no longer exports to the (absolute) module that does: each is still found,
    with a :class:`DeprecationWarning`, and never cached, so every use warns."""
    gone = moved or {}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is not None:
            value = namespace[name] = getattr(importlib.import_module(module, package), name)
            return value
        new = gone.get(name)
        if new is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        moved_warning(f"{package}.{name}", f"{new}.{name}")
        return getattr(importlib.import_module(new), name)

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__


class _Alias(importlib.abc.Loader):
    """Loads an old module name as the module now at its new name."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        moved_warning(spec.name, self.new)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module ran at its new name."""


class MovedModules(importlib.abc.MetaPathFinder):
    """Finds the old names of :data:`MOVED_MODULES` (on ``sys.meta_path`` once ``dial_runtime`` is imported)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED_MODULES.get(fullname)
        return None if new is None else importlib.util.spec_from_loader(fullname, _Alias(new))
