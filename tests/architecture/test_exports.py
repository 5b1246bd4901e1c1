"""The public API is exactly what ``dial_runtime.__all__`` lists, and all of it imports."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import textwrap
import types
from collections import defaultdict

import pytest

import dial_runtime
import dial_runtime.language
import dial_runtime.ports
from dial_runtime._lazy import MOVED_MODULES
from tests.modules import library_modules

#: The names the README documents; adding or removing one is a deliberate API change.
EXPECTED = {
    # a conversation and what is handed to it
    "Conversation", "Domain", "ActionSpec", "ApprovalPolicy", "IdempotencyKey", "Issue",
    "ScriptedAgent", "RecordedAgent", "ChatAgent", "agent_from_uri", "system_prompt",
    "policy_human", "scripted_human", "open_store",
    # what a person decides, and what a call returns
    "Accept", "Dismiss", "Edit", "Say", "Defer", "Suggestion", "Ask", "TurnResult", "Outcome",
    # the log, what the person sees of it, and reading it again
    "Event", "LogEntry", "export_jsonl", "import_jsonl", "replay", "ReplayReport", "Projection", "project",
    "parse",
    # the errors a caller catches most
    "DialError", "ActionError", "AgentError", "AlreadyDecided", "ConversationBusy", "PayloadChanged", "StoreError",
    "__version__",
}  # fmt: skip


def test_all_is_the_documented_api() -> None:
    assert set(dial_runtime.__all__) == EXPECTED
    assert len(dial_runtime.__all__) == len(EXPECTED) <= 40


def test_a_name_that_moved_is_found_at_its_old_place_with_a_warning() -> None:
    for name, module in dial_runtime._MOVED_NAMES.items():
        assert name not in dial_runtime.__all__
        with pytest.warns(DeprecationWarning, match=f"dial_runtime.{name} moved to {module}.{name}"):
            found = getattr(dial_runtime, name)
        assert found is getattr(importlib.import_module(module), name)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        dial_runtime.nothing  # noqa: B018


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_a_module_that_moved_imports_by_its_old_name_as_the_same_module(old: str) -> None:
    """Run in a fresh interpreter: a module imported once stays imported, and would not warn again."""
    new = MOVED_MODULES[old]
    code = textwrap.dedent(f"""
        import importlib, sys, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import {old}
        print(*(str(warning.message) for warning in caught), sep="\\n")
        print(sys.modules["{old}"] is importlib.import_module("{new}"))
    """)
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    *warned, same = ran.stdout.splitlines()
    assert f"{old} moved to {new}; the old name goes in the next release" == warned[-1]
    assert same == "True"


def test_no_module_is_hidden_by_a_name_of_its_package() -> None:
    """``import dial_runtime.x as m`` gives the module ``x``: no package exports a function or class under the
    name of one of its modules (the top level's ``replay`` is the function; its module is
    ``dial_runtime.driver.replay``)."""
    hidden = []
    for found in library_modules():
        package, _, name = found.name.rpartition(".")
        exported = getattr(importlib.import_module(package), "__all__", ())
        if name in exported:
            hidden.append(found.name)
    assert hidden == []


def test_every_exported_name_exists() -> None:
    for name in dial_runtime.__all__:
        assert hasattr(dial_runtime, name), name


def test_nothing_public_is_left_out_of_all() -> None:
    public = {
        name
        for name, value in vars(dial_runtime).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - {"annotations"} <= set(dial_runtime.__all__)


def test_no_two_classes_of_the_package_share_a_name() -> None:
    """A public name means one thing wherever it is found: a port is named for its role (``DomainPort``), never
    like a class that plays it (``Domain``, the typed-functions domain)."""
    defined: defaultdict[str, set[str]] = defaultdict(set)
    for found in library_modules():
        module = importlib.import_module(found.name)
        for name, value in vars(module).items():
            if not name.startswith("_") and inspect.isclass(value) and value.__module__ == module.__name__:
                defined[name].add(module.__name__)
    assert {name: where for name, where in defined.items() if len(where) > 1} == {}


def test_the_ports_are_protocols() -> None:
    protocols = {
        name
        for name in dial_runtime.ports.__all__
        if getattr(getattr(dial_runtime.ports, name), "_is_protocol", 0)
    }
    assert protocols == {
        name + "Port"
        for name in ("Agent", "StreamingAgent", "Human", "Domain", "DescribedDomain", "ReconcilingDomain", "Store")
    }
    assert not any(name.endswith("Port") for name in dial_runtime.__all__)


def test_the_language_package_exports_the_parse_records() -> None:
    records = {"Envelope", "RootAttributes", "Inform", "Acknowledge", "AskElement", "Suggest", "Declare", "Phatic"}
    records |= {"Delegate", "Execute", "Step", "Option", "ParseIssue"}
    assert records <= set(dial_runtime.language.__all__)
    assert dial_runtime.parse is dial_runtime.language.parse
