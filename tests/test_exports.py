"""The public API is exactly what ``dial_runtime.__all__`` lists, and all of it imports."""

from __future__ import annotations

import types

import dial_runtime

#: The names the README documents; adding or removing one is a deliberate API change.
EXPECTED = {
    "Accept", "Acknowledge", "ActionError", "ActionSpec", "Agent", "AgentError", "AlreadyDecided", "Ask",
    "AskElement", "ChatAgent",
    "Conversation", "ConversationBusy", "Declare", "Defer", "Delegate", "DialError", "DialSizeError", "Dismiss",
    "Divergence", "Domain", "Edit", "Envelope", "Event", "Execute", "Human", "IllegalTransition", "Inform",
    "Issue",
    "LogEntry", "LogError", "Option", "Outcome", "ParseIssue", "PayloadChanged", "Phatic", "RecordedAgent",
    "ReplayReport",
    "RootAttributes", "Say", "SchemaIssue", "ScriptedAgent", "Step", "Store", "StoreClosed", "StoreConflict",
    "StoreError", "StreamParser", "StreamingAgent", "Suggest", "Suggestion", "TurnResult", "__version__",
    "agent_from_uri", "event_from_dict", "event_to_dict", "export_jsonl", "extract_prose", "import_jsonl",
    "open_store", "outcome_reply", "parse", "policy_human", "replay", "scripted_human", "system_prompt",
    "validate",
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
