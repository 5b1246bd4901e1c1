"""The public API is exactly what ``dial_runtime.__all__`` lists, and all of it imports."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
from collections import defaultdict

import dial_runtime
import dial_runtime.language
import dial_runtime.ports

#: The names the README documents; adding or removing one is a deliberate API change.
EXPECTED = {
    "Accept", "Acknowledge", "ActionError", "ActionSpec", "AgentError", "AlreadyDecided", "ApprovalPolicy", "Ask",
    "AskElement", "ChatAgent",
    "Conversation", "ConversationBusy", "Declare", "Defer", "Delegate", "DialError", "DialSizeError", "Dismiss",
    "Divergence", "Domain", "Edit", "Envelope", "Event", "Execute", "IdempotencyKey", "IllegalTransition",
    "Inform", "Issue", "LinkRefused",
    "LogEntry", "LogError", "Option", "Outcome", "ParseIssue", "PayloadChanged", "Phatic", "RecordedAgent",
    "ReplayReport",
    "RootAttributes", "Say", "SchemaIssue", "ScriptedAgent", "Step", "StoreClosed", "StoreConflict",
    "StoreError", "StreamParser", "Suggest", "Suggestion", "TokenLimitReached", "TurnResult", "__version__",
    "agent_from_uri", "event_from_dict", "event_to_dict", "export_jsonl", "extract_prose", "import_jsonl",
    "open_store", "outcome_reply", "parse", "policy_human", "replay", "scripted_human", "system_prompt",
    "validate",
    # the ports: what a conversation is handed, as typing.Protocols
    "AgentPort", "DomainPort", "HumanPort", "ReconcilingDomainPort", "StorePort", "StreamingAgentPort",
    # the projection: what a person sees
    "AgentText", "Aside", "Card", "Moment", "Notice", "PersonWords", "Projection", "Question", "RefusedProposal",
    "Told", "Waiting", "project",
}  # fmt: skip


def test_all_is_the_documented_api() -> None:
    assert set(dial_runtime.__all__) == EXPECTED
    assert len(dial_runtime.__all__) == len(EXPECTED)


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
    for found in pkgutil.walk_packages(dial_runtime.__path__, "dial_runtime."):
        module = importlib.import_module(found.name)
        for name, value in vars(module).items():
            if not name.startswith("_") and inspect.isclass(value) and value.__module__ == module.__name__:
                defined[name].add(module.__name__)
    assert {name: where for name, where in defined.items() if len(where) > 1} == {}


def test_the_ports_are_the_protocols_the_top_level_exports() -> None:
    protocols = {
        name
        for name in dial_runtime.ports.__all__
        if getattr(getattr(dial_runtime.ports, name), "_is_protocol", 0)
    }
    assert protocols == {
        name + "Port"
        for name in ("Agent", "StreamingAgent", "Human", "Domain", "DescribedDomain", "ReconcilingDomain", "Store")
    }
    assert {name for name in dial_runtime.__all__ if name.endswith("Port")} == protocols - {"DescribedDomainPort"}
    for name in protocols - {"DescribedDomainPort"}:
        assert getattr(dial_runtime, name) is getattr(dial_runtime.ports, name)


def test_the_language_package_exports_the_parse_records() -> None:
    records = {"Envelope", "RootAttributes", "Inform", "Acknowledge", "AskElement", "Suggest", "Declare", "Phatic"}
    records |= {"Delegate", "Execute", "Step", "Option", "ParseIssue"}
    assert records <= set(dial_runtime.language.__all__)
    for name in dial_runtime.language.__all__:
        value = getattr(dial_runtime.language, name)
        assert getattr(dial_runtime, name, value) is value, name
