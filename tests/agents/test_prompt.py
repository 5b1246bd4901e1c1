"""The generated system prompt: the DIAL primer, each domain's vocabulary, and examples that are valid DIAL."""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dial_runtime import ActionSpec, Outcome, parse
from dial_runtime.agents import VocabularyEntry, system_prompt, vocabulary
from dial_runtime.agents.prompt import SPEC_KEYS, VOCABULARY_KEYS
from dial_runtime.demo import NotesDomain
from dial_runtime.language.outcomes import outcome_reply
from dial_runtime.language.schema import validate

from ..fakes import Notes

STATUSES = ("done", "failed", "invalid", "dismissed", "superseded", "handed-off")
TRICKY = 'a </dial-payload> & <b> "quoted" ]]>'


class Tasks:
    """A documented domain: a description, a vocabulary with schemas and examples, markup in its texts."""

    description = "A task list for a small team <beta> & friends."
    actions: ClassVar[dict[str, Any]] = {
        "add-task": ActionSpec(mutates=True),
        "delete-task": ActionSpec(mutates=True, destructive=True),
        "find-tasks": ActionSpec(mutates=False),
        "assign-task": ActionSpec(mutates=False, handoff=True),
    }
    vocabulary: ClassVar[dict[str, Any]] = {
        "add-task": {
            "description": "Add a task; titles may hold <tags> & ampersands.",
            "schema": {
                "type": "object",
                "properties": {"title": {"type": "string"}, "due": {"type": "string", "format": "date"}},
                "required": ["title"],
            },
            "example": {"title": TRICKY, "due": "2025-06-01"},
        },
        "delete-task": {"description": "Delete a task for good.", "example": {"id": 7}},
        "find-tasks": {
            "description": "Find tasks by words in their title.",
            "schema": {
                "type": "object",
                "properties": {
                    "words": {"type": "array", "items": {"type": "string"}},
                    "status": {"enum": ["open", "closed"]},
                    "limit": {"type": "integer", "default": 10},
                    "mine": {"type": ["null", "boolean"]},
                },
            },
        },
    }

    def preview(self, action: str, payload: Any) -> str:
        return f"{action} <{json.dumps(payload)}>"

    def run(self, action: str, payload: Any) -> Any:
        return None


class DocumentedSpec(ActionSpec, frozen=True, kw_only=True):
    """An action spec that carries its own documentation."""

    description: str = ""
    payload_example: Any = None


class Recipes:
    """Descriptions from describe(), the rest from the specs themselves; a preview that fails."""

    actions: ClassVar[dict[str, Any]] = {
        "save-recipe": {
            "mutates": True,
            "description": "overridden by describe()",
            "payload_schema": {"type": "object", "properties": {"name": {"type": "string"}}},
            "payload_example": {"name": "soup"},
        },
        "rate-recipe": DocumentedSpec(mutates=True, description="Rate a recipe.", payload_example={"stars": 4}),
        "list-recipes": {"mutates": False},
    }

    def describe(self, action: str) -> str | None:
        return "Save a recipe." if action == "save-recipe" else None

    def preview(self, action: str, payload: Any) -> str:
        raise KeyError(action)

    def run(self, action: str, payload: Any) -> Any:
        return None


class Silent:
    """A domain without actions."""

    def run(self, action: str, payload: Any) -> Any:
        return None


DOMAINS = [NotesDomain(), Notes(), Tasks(), Recipes(), Silent()]
IDS = ["demo-notes", "test-notes", "tasks", "recipes", "no-actions"]


def xml_blocks(prompt: str) -> list[str]:
    return re.findall(r"```xml\n(.*?)\n```", prompt, flags=re.DOTALL)


def section(prompt: str, action: str) -> str:
    """The part of the prompt about one action."""
    start = prompt.index(f"## `{action}`")
    end = prompt.find("\n## `", start + 1)
    return prompt[start : end if end != -1 else len(prompt)]


def suggests(block: str) -> list[Any]:
    envelope = parse(block)
    assert envelope is not None
    assert envelope.issues == ()
    return [element for element in envelope.elements if type(element).__name__ == "Suggest"]


@pytest.mark.parametrize("domain", DOMAINS, ids=IDS)
def test_every_dial_example_validates(domain: Any) -> None:
    blocks = xml_blocks(system_prompt(domain))
    assert len(blocks) >= 2
    for block in blocks:
        assert validate(block) == [], block
        envelope = parse(block)
        assert envelope is not None
        assert envelope.issues == ()


@pytest.mark.parametrize("domain", DOMAINS, ids=IDS)
def test_the_primer_teaches_informing_asking_and_the_outcomes(domain: Any) -> None:
    prompt = system_prompt(domain)
    for text in (
        "<dial-inform>",
        'response-type="choice"',
        "<dial-option value=",
        'default="true"',
        "session-complete",
    ):
        assert text in prompt
    has_actions = bool(getattr(domain, "actions", None))
    assert ("<dial-suggest" in prompt) is has_actions
    assert ('context-key="outcome:sg-1"' in prompt) is has_actions
    for status in STATUSES:
        assert (f"- `{status}`:" in prompt) is has_actions
    assert prompt.count("# This application's actions") == 1


def test_the_outcome_example_is_what_the_runtime_sends() -> None:
    prompt = system_prompt(Tasks())
    preview = Tasks().preview("add-task", Tasks.vocabulary["add-task"]["example"])
    expected = outcome_reply(
        [
            Outcome(id="sg-1", action="add-task", status="done", preview=preview),
            Outcome(
                id="sg-2",
                action="add-task",
                status="failed",
                preview=preview,
                error="the service is unavailable",
                code="unavailable",
                hint="Try again later.",
            ),
        ]
    )
    assert expected in xml_blocks(prompt)


def test_the_vocabulary_is_rendered_with_kinds_schemas_and_examples() -> None:
    prompt = system_prompt(Tasks())
    assert Tasks.description in prompt
    add = section(prompt, "add-task")
    assert "Add a task; titles may hold <tags> & ampersands." in add
    assert "Changes data" in add and "Destructive" not in add
    schema = json.loads(re.search(r"```json\n(.*?)\n```", add, flags=re.DOTALL).group(1))  # type: ignore[union-attr]
    assert schema == Tasks.vocabulary["add-task"]["schema"]
    assert "Changes data" in section(prompt, "delete-task")
    assert "Destructive" in section(prompt, "delete-task")
    assert "Read-only" in section(prompt, "find-tasks")
    assert "Hand-off" in section(prompt, "assign-task")
    assert "Payload: not described" in section(prompt, "assign-task")
    for name, entry in Tasks.vocabulary.items():
        if "example" in entry:
            (block,) = xml_blocks(section(prompt, name))
            (suggest,) = suggests(block)
            assert (suggest.action, suggest.payload) == (name, entry["example"])
            assert suggest.text == Tasks().preview(name, entry["example"])


def test_the_primers_suggestion_uses_an_action_that_changes_data() -> None:
    primer = system_prompt(Tasks()).split("# This application's actions")[0]
    (suggest,) = [element for block in xml_blocks(primer) for element in suggests(block)]
    assert (suggest.action, suggest.payload) == ("add-task", {"title": TRICKY, "due": "2025-06-01"})


def test_an_example_is_built_from_a_schema_when_none_is_given() -> None:
    entries = {entry.name: entry for entry in vocabulary(Tasks())}
    assert entries["find-tasks"].example == {"words": ["example"], "status": "open", "limit": 10, "mine": False}
    assert entries["assign-task"] == VocabularyEntry(name="assign-task", spec=Tasks.actions["assign-task"])
    (block,) = xml_blocks(section(system_prompt(Tasks()), "find-tasks"))
    assert suggests(block)[0].payload == entries["find-tasks"].example


def test_descriptions_come_from_the_vocabulary_then_describe_then_the_spec() -> None:
    entries = {entry.name: entry for entry in vocabulary(Recipes())}
    assert entries["save-recipe"].description == "Save a recipe."
    assert entries["save-recipe"].schema == {"type": "object", "properties": {"name": {"type": "string"}}}
    assert entries["save-recipe"].example == {"name": "soup"}
    assert entries["rate-recipe"].description == "Rate a recipe."
    assert entries["rate-recipe"].example == {"stars": 4}
    assert entries["rate-recipe"].spec.mutates
    assert entries["list-recipes"] == VocabularyEntry(name="list-recipes", spec=ActionSpec(mutates=False))


def test_a_failing_preview_leaves_the_action_name_as_the_examples_text() -> None:
    prompt = system_prompt(Recipes())
    (block,) = xml_blocks(section(prompt, "rate-recipe"))
    assert suggests(block)[0].text == "rate-recipe"
    assert "Rate a recipe." in section(prompt, "rate-recipe")


def test_an_undocumented_domain_gets_a_placeholder_in_the_primer() -> None:
    domain = Notes()
    prompt = system_prompt(domain)
    for name in domain.actions:
        assert "Payload: not described" in section(prompt, name)
        assert xml_blocks(section(prompt, name)) == []
    (suggest,) = [element for block in xml_blocks(prompt) for element in suggests(block)]
    assert (suggest.action, suggest.payload) == ("ACTION", {"field": "value"})
    assert "`ACTION` stands for one of the actions listed at the end" in prompt


def test_the_demo_domains_kinds_are_named() -> None:
    prompt = system_prompt(NotesDomain())
    assert "Changes data" in section(prompt, "add-note")
    assert "Destructive" in section(prompt, "remove-note")
    assert "Read-only" in section(prompt, "list-notes")
    assert "Hand-off" in section(prompt, "share-note")


def test_a_domain_without_actions_is_told_to_suggest_nothing() -> None:
    prompt = system_prompt(Silent())
    assert "offers no actions" in prompt
    assert vocabulary(Silent()) == ()


# --- a vocabulary the prompt cannot read is refused, never silently ignored -------------------------------------


class Misread:
    """A domain whose documentation is written wrong, one way per case."""

    def __init__(self, vocabulary: Any = None, spec: Any = None) -> None:
        self.actions = {"save-recipe": spec if spec is not None else {"mutates": True}}
        if vocabulary is not None:
            self.vocabulary = vocabulary

    def run(self, action: str, payload: Any) -> Any:
        return None


SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}}


@pytest.mark.parametrize(
    ("domain", "message"),
    [
        (
            Misread({"save-recipe": {"payload_schema": SCHEMA}}),
            "domain.vocabulary['save-recipe']: unknown key 'payload_schema' (did you mean 'schema'?); "
            "the keys are 'description', 'schema', 'example'",
        ),
        (
            Misread({"save-recipe": {"description": "Save.", "examples": [{"name": "soup"}]}}),
            "domain.vocabulary['save-recipe']: unknown key 'examples' (did you mean 'example'?); "
            "the keys are 'description', 'schema', 'example'",
        ),
        (
            Misread({"save-recipe": {"colour": "red"}}),
            "domain.vocabulary['save-recipe']: unknown key 'colour'; "
            "the keys are 'description', 'schema', 'example'",
        ),
        (
            Misread({"save_recipe": {"description": "Save."}}),
            "domain.vocabulary names 'save_recipe', which is not an action (the actions are 'save-recipe')",
        ),
        (
            Misread({"save-recipe": "Save a recipe."}),
            "domain.vocabulary['save-recipe'] is str, not a mapping of 'description', 'schema', 'example'",
        ),
        (
            Misread(spec={"mutates": True, "schema": SCHEMA}),
            "domain.actions['save-recipe']: unknown key 'schema' (did you mean 'payload_schema'?); the keys are "
            "'mutates', 'destructive', 'handoff', 'repeatable', 'description', 'payload_schema', "
            "'payload_example'",
        ),
    ],
)
def test_a_vocabulary_with_a_key_it_does_not_read_is_refused(domain: Misread, message: str) -> None:
    for reads in (vocabulary, system_prompt):
        with pytest.raises(ValueError) as refused:
            reads(domain)
        assert str(refused.value) == message


@pytest.mark.parametrize("domain", [Tasks(), Recipes(), NotesDomain(), Misread({"save-recipe": {}})])
def test_every_key_the_documentation_names_is_read(domain: Any) -> None:
    assert len(vocabulary(domain)) == len(domain.actions)


@given(
    keys=st.sets(st.sampled_from(VOCABULARY_KEYS) | st.text(min_size=1, max_size=20)),
    spec_keys=st.sets(st.sampled_from(SPEC_KEYS) | st.text(min_size=1, max_size=20)),
)
def test_exactly_the_keys_it_reads_are_accepted(keys: set[str], spec_keys: set[str]) -> None:
    """Any key a vocabulary entry or a dict spec may hold is read; any other one is refused."""
    entry = dict.fromkeys(keys)
    spec = {"mutates": True, **dict.fromkeys(spec_keys - {"mutates"}, False)}
    domain = Misread({"save-recipe": entry}, spec)
    unread = keys - set(VOCABULARY_KEYS) or spec.keys() - set(SPEC_KEYS)
    if unread:
        with pytest.raises(ValueError, match="unknown key"):
            vocabulary(domain)
    else:
        assert [entry.name for entry in vocabulary(domain)] == ["save-recipe"]
