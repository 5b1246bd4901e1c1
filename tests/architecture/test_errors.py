"""Every exception lives in ``dial_runtime.errors``, under the tree its docstring draws, and every place one was
importable from before still gives the same class."""

from __future__ import annotations

import builtins
import importlib
import inspect
import re

import pytest

from dial_runtime import errors
from tests.modules import library_modules


def drawn_tree() -> dict[str, str]:
    """Each exception in the docstring's tree, with the one it is drawn under."""
    parents: dict[str, str] = {}
    path: list[str] = []
    for line in (errors.__doc__ or "").splitlines():
        match = re.match(r"    ((?:[│ ]   )*)(?:[├└]── )?(\w+)\s", line + " ")
        if not match or not match.group(2)[0].isupper():
            continue
        depth = len(match.group(1)) // 4 + (1 if "──" in line else 0)
        del path[depth:]
        if path:
            parents[match.group(2)] = path[-1]
        path.append(match.group(2))
    return parents


def public_exceptions_outside_errors() -> list[str]:
    """Every public exception class defined in a module of the package other than ``errors``."""
    found = []
    for module_info in library_modules():
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__ != errors.__name__
                and not name.startswith("_")
            ):
                found.append(f"{module.__name__}.{name}")
    return found


def test_every_public_exception_is_defined_in_errors() -> None:
    assert public_exceptions_outside_errors() == []


def test_the_docstring_draws_the_real_tree() -> None:
    tree = drawn_tree()
    classes = {
        name: kind
        for name, kind in vars(errors).items()
        if inspect.isclass(kind) and kind.__module__ == errors.__name__
    }
    assert set(tree) == set(classes) - {"DialError"}
    for name, parent in tree.items():
        assert classes[name].__bases__[0] is getattr(errors, parent, getattr(builtins, parent, None)), name


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("dial_runtime", "AgentError"),
        ("dial_runtime", "ActionError"),
        ("dial_runtime.stores", "StoreConflict"),
        ("dial_runtime.stores", "StoreClosed"),
        ("dial_runtime.stores.base", "StoreConflict"),
        ("dial_runtime.agents", "AgentError"),
        ("dial_runtime.llm.chat", "AgentError"),
        ("dial_runtime.runtime", "ActionError"),
        ("dial_runtime.runtime.records", "ActionError"),
    ],
)
def test_every_former_import_path_still_works(module: str, name: str) -> None:
    assert getattr(importlib.import_module(module), name) is getattr(errors, name)


@pytest.mark.parametrize(
    ("error", "also"),
    [
        (errors.StoreClosed("closed"), RuntimeError),
        (errors.DialSizeError(10, 5), ValueError),
        (errors.StoreConflict("moved on"), errors.ConversationBusy),
    ],
)
def test_errors_that_also_are_builtin_kinds(error: errors.DialError, also: type[Exception]) -> None:
    assert isinstance(error, errors.DialError) and isinstance(error, also)


def test_an_action_error_keeps_its_reasons() -> None:
    error = errors.ActionError("no such note", code="not-found", field="text", hint="List the notes first.")
    assert (str(error), error.code, error.field, error.hint) == (
        "no such note",
        "not-found",
        "text",
        "List the notes first.",
    )
