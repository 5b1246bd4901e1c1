"""Loading what the command line names as ``module:NAME``: the domain a conversation runs (``chat``, ``replay``,
``serve`` and each of its workers) and the flow ``diagrams`` draws.

It sits below the command line and the web surface's ``serve``, which both load domains, so neither imports the
other. A domain that cannot be loaded is the one line the command reports (``_CommandError``); a flow, a
``ValueError``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from typing import Any

from statemachine import StateMachine

from ._command import _CommandError, _described, _usage
from .agents.prompt import vocabulary
from .domains import Domain

__all__ = ["load_domain", "load_flow"]


def load_domain(spec: str) -> Any:
    """The domain ``module:factory`` names: the module is imported (looked for in the current directory first, as
    ``python -m`` and uvicorn do) and ``factory()`` called; what it returns must have a ``run`` method, and
    ``actions``, when it has them, must map action names to their specs."""
    module_name, _, factory_name = spec.partition(":")
    if not module_name or not factory_name:
        _usage(f"--domain {spec!r}: expected module:factory, e.g. dial_runtime.demo:NotesDomain")
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        _usage(f"--domain {spec!r}: cannot import {module_name}: {error}")
    except Exception as error:
        raise _CommandError(f"--domain {spec!r}: importing {module_name} raised {_described(error)}") from error
    factory: Any = module
    for name in factory_name.split("."):
        factory = getattr(factory, name, None)
    if not callable(factory):
        _usage(f"--domain {spec!r}: {module_name} has no callable {factory_name}")
    try:
        domain = factory()
    except Exception as error:
        raise _CommandError(f"--domain {spec!r}: {factory_name}() raised {_described(error)}") from error
    if not callable(getattr(domain, "run", None)):
        raise _CommandError(
            f"--domain {spec!r}: {factory_name}() returned {_kind(domain)}, not a domain (no run method)"
        )
    actions = getattr(domain, "actions", None)
    if actions is not None and not isinstance(actions, Mapping):
        raise _CommandError(
            f"--domain {spec!r}: the domain's actions are {_kind(actions)}, not a mapping of action names to specs"
        )
    try:
        vocabulary(domain)  # what the system prompt reads, checked before anything runs
    except ValueError as error:
        raise _CommandError(f"--domain {spec!r}: {error}") from error
    return domain


def _kind(value: object) -> str:
    """A value's type in words: "a list", "an int", "None"."""
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


def load_flow(spec: str) -> tuple[Any, dict[str, list[str]]]:
    """The flow ``module:NAME`` names (a StateMachine class, or a Domain with a flow) and the actions bound to its
    events, from that domain or, for a class, from every Domain in the module that uses it."""
    module_name, _, name = spec.partition(":")
    try:
        module = importlib.import_module(module_name) if module_name and name else None
    except ImportError as error:
        raise ValueError(f"--flow {spec!r}: cannot import {module_name}: {error}") from None
    found = getattr(module, name, None) if module is not None else None
    if isinstance(found, Domain) and found.flow_machine is not None:
        return found.flow_machine, found.bound_actions
    if not (isinstance(found, type) and issubclass(found, StateMachine)):
        raise ValueError(
            f"--flow {spec!r}: expected module:Class naming a StateMachine class or a Domain with a flow"
        )
    actions: dict[str, list[str]] = {}
    for value in vars(module).values():
        if isinstance(value, Domain) and value.flow_machine is found:
            for event, bound in value.bound_actions.items():
                actions.setdefault(event, []).extend(bound)
    return found, actions
