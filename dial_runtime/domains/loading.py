"""Loading what the command line names as ``module:NAME``: the domain a conversation runs (``chat``, ``replay``,
``serve`` and each of its workers) and the flow ``diagrams`` draws.

It sits below the command line and the web surface's ``serve``, which both load domains, so neither imports the
other. A domain that cannot be loaded is the one line the command reports (``_CommandError``); a flow, a
``ValueError``. A factory may also return a domain factory, ``(conversation_id, log) -> domain`` (callable, with
no ``run``), which ``serve`` calls for each conversation (:class:`DomainPerConversation`).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from statemachine import StateMachine

from .._command import _CommandError, _described, _usage
from ..agents.prompt import vocabulary
from ..runtime.events import LogEntry
from . import Domain

__all__ = ["DomainPerConversation", "load_callable", "load_domain", "load_flow"]


class DomainPerConversation:
    """A domain factory as ``--domain`` loads it: called as the factory is, ``(conversation_id, log) -> domain``,
    and described by the domain it builds for a new conversation (``factory("", [])``, an id no conversation
    has): every attribute but ``run`` is that domain's, so the system prompt, the domain's grammar and the
    vocabulary read its actions, their documentation and its flow. Having no ``run``, it is a domain factory to
    ``create_app``."""

    def __init__(self, factory: Callable[[str, Sequence[LogEntry]], Any], describing: Any) -> None:
        self._factory = factory
        self._describing = describing

    def __call__(self, conversation_id: str, log: Sequence[LogEntry]) -> Any:
        return self._factory(conversation_id, log)

    def __getattr__(self, name: str) -> Any:
        if name == "run" or name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._describing, name)


def load_callable(spec: str, *, option: str, example: str) -> Callable[..., Any]:
    """The callable ``module:name`` names (``name`` may be dotted), not called: the module is imported, looked
    for in the current directory first, as ``python -m`` and uvicorn do. A one-line error naming ``option`` (and
    ``example`` of the form) for a malformed spec, a module that cannot be imported or raises, or no such
    callable."""
    module_name, _, factory_name = spec.partition(":")
    if not module_name or not factory_name:
        _usage(f"{option} {spec!r}: expected module:factory, e.g. {example}")
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        _usage(f"{option} {spec!r}: cannot import {module_name}: {error}")
    except Exception as error:
        raise _CommandError(f"{option} {spec!r}: importing {module_name} raised {_described(error)}") from error
    found: Any = module
    for name in factory_name.split("."):
        found = getattr(found, name, None)
    if not callable(found):
        _usage(f"{option} {spec!r}: {module_name} has no callable {factory_name}")
    return found  # type: ignore[no-any-return]


def load_made(spec: str, *, option: str, example: str, what: str, fits: Callable[[Any], bool]) -> Any:
    """What ``factory()`` returns for the ``module:factory`` an option names (``--announce``, ``--human``), which
    ``fits`` must accept: a one-line error naming ``option`` when it cannot be loaded, raises, or returns
    something else than ``what`` (``an Announcer``)."""
    factory = load_callable(spec, option=option, example=example)
    try:
        made = factory()
    except Exception as error:
        raise _CommandError(f"{option} {spec!r}: the factory raised {_described(error)}") from error
    if not fits(made):
        _usage(f"{option} {spec!r}: the factory returned {type(made).__name__}, not {what}")
    return made


def load_domain(spec: str) -> Any:
    """The domain ``module:factory`` names: the module is imported (looked for in the current directory first, as
    ``python -m`` and uvicorn do) and ``factory()`` called; what it returns must have a ``run`` method, and
    ``actions``, when it has them, must map action names to their specs. What returns a domain factory instead (a
    callable with no ``run``) gives a :class:`DomainPerConversation`, checked on the domain it builds for a new
    conversation."""
    factory = load_callable(spec, option="--domain", example="dial_runtime.demo:NotesDomain")
    factory_name = spec.partition(":")[2]
    try:
        domain = factory()
    except Exception as error:
        raise _CommandError(f"--domain {spec!r}: {factory_name}() raised {_described(error)}") from error
    if callable(domain) and not callable(getattr(domain, "run", None)):
        try:
            describing = domain("", [])
        except Exception as error:
            raise _CommandError(
                f"--domain {spec!r}: the domain factory {factory_name}() returned raised {_described(error)}"
            ) from error
        if not callable(getattr(describing, "run", None)):
            raise _CommandError(
                f"--domain {spec!r}: the domain factory {factory_name}() returned built {_kind(describing)}, "
                "not a domain (no run method)"
            )
        domain = DomainPerConversation(domain, describing)
    elif not callable(getattr(domain, "run", None)):
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
