"""The package's import graph, read from its source with ``ast``: no module imports itself back through others,
and no layer imports a layer above it.

Every ``import`` and ``from ... import`` counts, at module level, inside functions and under ``TYPE_CHECKING``
alike, and so does a lazy export (``lazy_exports(__name__, {"Name": ".module"}, ...)``): each is a dependency the
program can follow. ``from . import name`` depends on the submodule ``name`` when there is one, else on the
package.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "dial_runtime"

#: The layers, lowest first; a module belongs to the first entry that is its name or a package above it.
LAYERS: list[tuple[str, ...]] = [
    # what everything may use: the exceptions, lazy exports and moved names, the command line's one-line failure,
    # the one retry policy
    ("errors", "_lazy", "_command", "_retry", "dial_xsd"),
    ("statemachines",),
    ("language",),
    # the sans-IO core (events, the fold, the core), and the protocols of what it is handed
    ("runtime", "ports"),
    # the three readings of the log: what the person sees, what the agent saw, where calls and turns begin
    ("views",),
    # the drivers of the core: Conversation performs its effects under anyio; replay feeds it a recording
    ("driver",),
    # what plugs into the runtime: domains, the homes of a log, and the agents that need no model
    ("domains", "stores", "agents"),
    # the satellites, each in its own package over the core; the package itself is the public API's front door
    ("llm", "adapters", "audit"),
    ("decisions", "terminal", ""),
    ("web", "evaluate", "demo", "doors"),
    ("cli",),
]

#: The core's packages and modules: everything below the satellites.
CORE = (
    "errors",
    "_lazy",
    "_command",
    "_retry",
    "dial_xsd",
    "statemachines",
    "language",
    "runtime",
    "ports",
    "views",
)
CORE += ("driver",)
CORE += ("domains", "stores", "agents")

#: Upward imports that stand for now, each with why; the test fails once one is gone, so the entry goes too.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


def modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package by dotted name (relative to ``dial_runtime``; ``""`` is the package itself),
    with its file and whether it is a package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _absolute(name: str | None, level: int, module: str, is_package: bool) -> str | None:
    """The dotted name (within the package) an import names; ``None`` for another package's."""
    if level == 0:
        if name != "dial_runtime" and not (name or "").startswith("dial_runtime."):
            return None
        return (name or "").removeprefix("dial_runtime").removeprefix(".")
    base = module.split(".") if module else []
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, *([name] if name else [])])


def _imports(tree: ast.AST, module: str, is_package: bool, known: Collection[str]) -> Iterator[str]:
    """The modules of the package that the import statements and lazy exports of ``tree`` name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [_absolute(alias.name, 0, module, is_package) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, module, is_package)
            if base is None:
                continue
            # from package import name: the submodule when there is one, else the package
            submodules = [f"{base}.{alias.name}".lstrip(".") for alias in node.names]
            names = [name if name in known else base for name in submodules]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "").endswith("lazy_exports"):
            where = node.args[1] if len(node.args) > 1 else None
            values = where.values if isinstance(where, ast.Dict) else []
            relative = [v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
            names = [_absolute(r.lstrip("."), len(r) - len(r.lstrip(".")), module, True) for r in relative]
        else:
            continue
        yield from (name for name in names if name is not None and name in known and name != module)


def graph() -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports."""
    known = modules()
    return {
        module: set(_imports(ast.parse(path.read_text(encoding="utf-8")), module, is_package, known))
        for module, (path, is_package) in known.items()
    }


def layer_of(module: str) -> int:
    for rank, names in enumerate(LAYERS):
        for name in names:
            if module == name or (name and module.startswith(name + ".")):
                return rank
    raise AssertionError(f"dial_runtime.{module} has no layer: add it to LAYERS in {Path(__file__).name}")


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle of imports (its modules, the first repeated at the end), or ``None``."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        path.append(module)
        for imported in sorted(edges.get(module, ())):
            cycle = visit(imported)
            if cycle is not None:
                return cycle
        path.pop()
        done.add(module)
        return None

    for module in sorted(edges):
        cycle = visit(module)
        if cycle is not None:
            return cycle
    return None


def _shown(module: str) -> str:
    return f"dial_runtime.{module}" if module else "dial_runtime"


def test_every_module_has_a_layer() -> None:
    for module in modules():
        layer_of(module)


def test_no_module_imports_itself_back() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, "an import cycle: " + " -> ".join(_shown(module) for module in cycle or ())


def test_no_layer_imports_a_layer_above_it() -> None:
    upward = {
        (module, imported)
        for module, imports in graph().items()
        for imported in imports
        if layer_of(imported) > layer_of(module)
    }
    unexpected = sorted(upward - set(KNOWN_UPWARD))
    assert not unexpected, "upward imports: " + ", ".join(f"{_shown(a)} -> {_shown(b)}" for a, b in unexpected)
    gone = sorted(set(KNOWN_UPWARD) - upward)
    assert not gone, "no longer imported, drop from KNOWN_UPWARD: " + ", ".join(f"{a} -> {b}" for a, b in gone)


def _in(module: str, names: tuple[str, ...]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


def test_the_core_imports_no_satellite() -> None:
    """The core works without any satellite installed or imported: each satellite sits on the core alone."""
    edges = graph()
    reached = {
        (module, imported)
        for module, imports in edges.items()
        if module and _in(module, CORE)
        for imported in imports
        if not _in(imported, CORE)
    }
    assert not reached, "the core imports: " + ", ".join(f"{_shown(a)} -> {_shown(b)}" for a, b in sorted(reached))
    assert {module.partition(".")[0] for module in edges if module and not _in(module, CORE)} == {
        "adapters",
        "audit",
        "cli",
        "decisions",
        "demo",
        "doors",
        "evaluate",
        "llm",
        "terminal",
        "web",
    }


SAMPLE = """
import json
import dial_runtime.errors
from typing import TYPE_CHECKING
from . import stream
from ..stores import open_store
from ..runtime.events import LogEntry

if TYPE_CHECKING:
    from ..stores.base import Store

def later():
    from ..stores.jsonl import import_jsonl

__getattr__, __dir__ = lazy_exports(__name__, {"ChatAgent": "..llm.chat"}, globals())
"""


def test_the_graph_sees_every_kind_of_import() -> None:
    """Absolute and relative imports, ``from package import submodule`` and ``from package import name``, an
    import inside a function, one under ``TYPE_CHECKING`` and a lazy export; another package's is left out."""
    known = modules()
    found = set(_imports(ast.parse(SAMPLE), "language", True, known))  # as if it were language/__init__.py
    assert found == {
        "errors",
        "language.stream",
        "stores",
        "runtime.events",
        "stores.base",
        "stores.jsonl",
        "llm.chat",
    }
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


# --- who tells one event from another -------------------------------------------------------------------------


def _event_names() -> tuple[frozenset[str], frozenset[str]]:
    """The class names of the logged events, and their type tags."""
    import typing

    from dial_runtime.runtime.events import EVENT_TYPES, Event

    return frozenset(kind.__name__ for kind in typing.get_args(Event)), frozenset(EVENT_TYPES)


def _reads_events(tree: ast.AST, classes: frozenset[str], tags: frozenset[str]) -> list[int]:
    """The lines of ``tree`` that test an event's type: ``isinstance`` with a logged event's class, or a
    comparison of a ``type`` (attribute or key) with an event's tag or ``RENDERED``."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            if any(getattr(kind, "id", None) in classes for kind in kinds):
                lines.append(node.lineno)
        elif isinstance(node, ast.Compare):
            left = node.left
            typed = (isinstance(left, ast.Attribute) and left.attr == "type") or (
                isinstance(left, ast.Subscript) and getattr(left.slice, "value", None) == "type"
            )
            named = [
                each
                for comparator in node.comparators
                for each in (comparator.elts if isinstance(comparator, (ast.Tuple, ast.Set)) else [comparator])
            ]
            if typed and any(
                (isinstance(each, ast.Constant) and each.value in tags) or getattr(each, "id", None) == "RENDERED"
                for each in named
            ):
                lines.append(node.lineno)
    return lines


def test_only_the_core_and_the_views_tell_events_apart() -> None:
    """Surfaces, agents' histories, replay and evaluation read the views; no module outside the core
    (``runtime``) and the views tests an event's type."""
    classes, tags = _event_names()
    readers = {}
    for module, (path, _) in modules().items():
        if _in(module, ("runtime", "views")):
            continue
        lines = _reads_events(ast.parse(path.read_text(encoding="utf-8")), classes, tags)
        if lines:
            readers[module] = lines
    assert not readers, f"modules that test an event's type (read a view instead): {readers}"


def test_the_event_reader_check_sees_each_kind_of_test() -> None:
    classes, tags = _event_names()
    sample = """
isinstance(event, SentEvent)
isinstance(event, (int, ReplyEvent))
event.type == "said"
entry.event.type in ("reply", "sent")
event["type"] == "ended"
event.type in RENDERED
isinstance(event, InformDeltaEvent)
message.type == "TEXT_MESSAGE_START"
"""
    assert _reads_events(ast.parse(sample), classes, tags) == [2, 3, 4, 5, 6, 7]
