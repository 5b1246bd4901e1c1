"""Typed actions: a Domain whose payload, validation, schema, preview and prompt come from each function."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dial_runtime import (
    ActionError,
    ActionSpec,
    Conversation,
    Domain,
    Issue,
    ScriptedAgent,
    parse,
    policy_human,
    scripted_human,
    system_prompt,
)
from dial_runtime.demo import NotesDomain
from dial_runtime.domains import INVALID_PAYLOAD, UNKNOWN_ACTION, SchemaPayload, json_schema_issue

from ..docs.pages import DOCS, page_block
from ..fakes import envelope, suggest

Short = Annotated[str, msgspec.Meta(min_length=1, max_length=10)]


class Item(msgspec.Struct, forbid_unknown_fields=True):
    name: Short
    quantity: Annotated[int, msgspec.Meta(ge=1, le=99)] = 1


class Order(msgspec.Struct):
    """An order as one Struct parameter."""

    customer: Short
    items: list[Item]


def shop() -> Domain:
    """A domain with one action of each payload form and each constraint kind."""
    domain = Domain("shop", description="A small shop.")

    @domain.action
    def add_item(
        name: Short,
        price: Annotated[float, msgspec.Meta(gt=0)],
        tags: Annotated[list[str], msgspec.Meta(max_length=2)] = [],  # noqa: B006 - msgspec copies it
        size: Literal["s", "m", "l"] = "m",
        code: Annotated[str, msgspec.Meta(pattern="^[A-Z]{3}$")] = "ABC",
    ) -> dict[str, Any]:
        """Add an item to the catalogue."""
        return {"name": name, "price": price}

    @domain.action(read_only=True)
    def place_order(order: Order) -> Order:
        return order

    @domain.action(
        schema={
            "type": "object",
            "properties": {
                "text": {"type": "string", "maxLength": 5},
                "lines": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"sku": {"type": "string"}},
                        "required": ["sku"],
                        "additionalProperties": False,
                    },
                },
            },
            "required": ["text"],
            "additionalProperties": False,
        }
    )
    def note(payload: dict[str, Any]) -> dict[str, Any]:
        """Write a note on the order."""
        return payload

    return domain


SHOP = shop()
VALID_ITEM = {"name": "milk", "price": 1.5}
VALID_ORDER = {"customer": "ada", "items": [{"name": "milk"}, {"name": "tea", "quantity": 2}]}

#: (action, payload, field, hint): every refusal is code invalid-payload.
REFUSALS = [
    ("add-item", {"price": 1.0}, "name", "Give `name`: it is required."),
    (
        "add-item",
        {**VALID_ITEM, "colour": "red"},
        "colour",
        "Remove `colour`: it is not a field (the fields are `name`, `price`, `tags`, `size`, `code`).",
    ),
    ("add-item", {**VALID_ITEM, "name": 3}, "name", "Expected `str`, got `int`."),
    ("add-item", {**VALID_ITEM, "price": "1.5"}, "price", "Expected `float`, got `str`."),
    ("add-item", {**VALID_ITEM, "name": ""}, "name", "Expected `str` of length >= 1."),
    ("add-item", {**VALID_ITEM, "name": "x" * 11}, "name", "Expected `str` of length <= 10."),
    ("add-item", {**VALID_ITEM, "price": 0}, "price", "Expected `float` > 0.0."),
    ("add-item", {**VALID_ITEM, "tags": ["a", "b", "c"]}, "tags", "Expected `array` of length <= 2."),
    ("add-item", {**VALID_ITEM, "tags": ["a", 1]}, "tags[1]", "Expected `str`, got `int`."),
    ("add-item", {**VALID_ITEM, "size": "xl"}, "size", "Invalid enum value 'xl'."),
    ("add-item", {**VALID_ITEM, "code": "abc"}, "code", "Expected `str` matching regex '^[A-Z]{3}$'."),
    ("add-item", ["milk"], None, "The payload must be a JSON object: expected `object`, got `array`."),
    ("add-item", None, None, "The payload must be a JSON object: expected `object`, got `null`."),
    ("place-order", {"customer": "ada"}, "items", "Give `items`: it is required."),
    (
        "place-order",
        {**VALID_ORDER, "note": 1},
        "note",
        "Remove `note`: it is not a field (the fields are `customer`, `items`).",
    ),
    (
        "place-order",
        {"customer": "ada", "items": [{"name": "a"}, {}]},
        "items[1].name",
        "Give `name`: it is required.",
    ),
    (
        "place-order",
        {"customer": "ada", "items": [{"name": "a", "q": 1}]},
        "items[0].q",
        "Remove `q`: it is not a field.",
    ),
    (
        "place-order",
        {"customer": "ada", "items": [{"name": "a", "quantity": 100}]},
        "items[0].quantity",
        "Expected `int` <= 99.",
    ),
    ("note", {}, "text", "Give `text`: it is required."),
    (
        "note",
        {"text": "a", "extra": 1},
        "extra",
        "Remove `extra`: it is not a field (the fields are `text`, `lines`).",
    ),
    ("note", {"text": 5}, "text", "Expected `string`, got `integer`."),
    ("note", {"text": "toolong"}, "text", 'Expected `string` of length <= 5, got "toolong".'),
    ("note", {"text": "a", "lines": [{"sku": "1"}, {}]}, "lines[1].sku", "Give `sku`: it is required."),
    ("note", {"text": "a", "lines": [{"sku": 1}]}, "lines[0].sku", "Expected `string`, got `integer`."),
    ("note", "text", None, "The payload must be a JSON object, got string."),
]


@pytest.mark.parametrize(("action", "payload", "field", "hint"), REFUSALS)
def test_an_invalid_payload_names_the_field_and_says_what_to_send(
    action: str, payload: Any, field: str | None, hint: str
) -> None:
    assert SHOP.validate(action, payload) == Issue(code=INVALID_PAYLOAD, field=field, hint=hint)


@pytest.mark.parametrize(
    ("action", "payload"),
    [
        ("add-item", VALID_ITEM),
        ("add-item", {**VALID_ITEM, "price": 2, "tags": ["x"], "size": "l", "code": "XYZ"}),
        ("place-order", VALID_ORDER),
        ("note", {"text": "hi", "lines": [{"sku": "a"}]}),
    ],
)
def test_a_valid_payload_passes(action: str, payload: Any) -> None:
    assert SHOP.validate(action, payload) is None


def test_an_unknown_action_is_refused_with_the_actions_named() -> None:
    issue = SHOP.validate("remove-item", {})
    assert issue == Issue(code=UNKNOWN_ACTION, hint="Use one of: add-item, place-order, note.")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
PAYLOADS = st.one_of(
    JSON,
    st.fixed_dictionaries({"name": JSON, "price": JSON}, optional={"tags": JSON, "size": JSON}),
    st.fixed_dictionaries(
        {"customer": JSON, "items": st.lists(st.dictionaries(st.sampled_from(["name", "quantity", "x"]), JSON))}
    ),
    st.fixed_dictionaries(
        {"text": JSON}, optional={"lines": st.lists(st.dictionaries(st.sampled_from(["sku", "y"]), JSON))}
    ),
)


@settings(max_examples=300, deadline=None)
@given(action=st.sampled_from(["add-item", "place-order", "note", "nope"]), payload=PAYLOADS)
def test_validate_answers_any_json_payload_with_an_issue_or_none(action: str, payload: Any) -> None:
    issue = SHOP.validate(action, payload)
    assert issue is None or (isinstance(issue, Issue) and issue.code and issue.hint)
    if issue is None:
        assert isinstance(SHOP.preview(action, payload), str)
    elif issue.field is not None and not any(issue.field.endswith(key) for key in _odd_keys(payload)):
        assert not issue.field.startswith(("$", ".")), issue.field  # no parser path leaks into a field's name


def _odd_keys(value: Any) -> set[str]:
    """The payload's keys, at any depth, that themselves begin like a parser's path (``"."``, ``"$x"``): an issue
    naming such a key may begin so too."""
    if isinstance(value, dict):
        found = {key for key in value if key.startswith(("$", "."))}
        return found.union(*(_odd_keys(item) for item in value.values()))
    if isinstance(value, list):
        return set().union(*(_odd_keys(item) for item in value))
    return set()


def test_the_arguments_are_typed_and_the_result_comes_back_as_json_data() -> None:
    assert SHOP.run("place-order", VALID_ORDER) == {
        "customer": "ada",
        "items": [{"name": "milk", "quantity": 1}, {"name": "tea", "quantity": 2}],
    }
    with pytest.raises(ActionError) as raised:
        SHOP.run("add-item", {"name": ""})
    assert (raised.value.code, raised.value.field) == (INVALID_PAYLOAD, "name")


def test_names_contract_and_description_come_from_the_declaration() -> None:
    assert list(SHOP.actions) == ["add-item", "place-order", "note"]
    assert SHOP.actions["add-item"] == ActionSpec(mutates=True)
    assert SHOP.actions["place-order"] == ActionSpec(mutates=False)
    assert SHOP.describe("add-item") == "Add an item to the catalogue."
    assert SHOP.describe("place-order") == "", "no docstring, no description"
    domain = Domain("x")

    @domain.action(name="files.delete", destructive=True, handoff=True, description="Delete it.")
    def anything() -> None:
        """Not this."""

    assert domain.actions["files.delete"] == ActionSpec(mutates=True, destructive=True, handoff=True)
    assert domain.describe("files.delete") == "Delete it."
    with pytest.raises(ValueError, match="declared twice"):
        domain.action(name="files.delete")(anything)


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        (lambda d: d.action(name="spread")(lambda *values: None), "cannot be given by name"),
        (lambda d: d.action(lambda: None), "give the action a name"),
        (lambda d: d.action(name="n", schema={"type": 5})(lambda p: p), "not a valid JSON Schema"),
        (lambda d: d.action(name="n", schema={"type": "object"})(lambda a, b: a), "one parameter"),
        (lambda d: d.action(example={"n": "x"})(_counted), "the example of 'counted' is invalid"),
        (lambda d: d.action(_takes_an_object), "action takes-an-object: type <class 'object'> is not supported"),
        (lambda d: d.action(preview="Count {m}")(_counted), "names {m}, which is not a payload field"),
        (lambda d: d.action(preview="Count {}")(_counted), "names {}, which is not a payload field"),
        (lambda d: d.action(preview="Count {n")(_counted), "is not a format string"),
    ],
)
def test_a_declaration_that_cannot_work_is_refused_when_declared(declare: Any, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=re.escape(message)):
        declare(Domain("x"))


def _counted(n: int) -> int:
    return n


def _takes_an_object(thing: object) -> None: ...


def test_the_check_hook_refuses_what_types_allow() -> None:
    notes = NotesDomain()
    issue = notes.validate("remove-note", {"text": "buy milk"})
    assert issue is not None and (issue.code, issue.field) == ("not-found", "text")
    notes.notes.append("buy milk")
    assert notes.validate("remove-note", {"text": "buy milk"}) is None
    assert notes.validate("remove-note", {"text": ""}) is not None, "types are checked before the hook"


@pytest.mark.parametrize(
    ("preview", "payload", "shown"),
    [
        ("Add {name} at {price}", VALID_ITEM, "Add milk at 1.5"),
        ("Add {name} in size {size}", VALID_ITEM, "Add milk in size m"),
        (lambda name, price, **rest: f"{name}! ({len(rest)} more)", VALID_ITEM, "milk! (3 more)"),
        (None, VALID_ITEM, 'Add item: name="milk", price=1.5'),
        (
            None,
            {"name": "x" * 10, "price": 1, "tags": ["y" * 70]},
            f'Add item: name="{"x" * 10}", price=1, tags=["{"y" * 57}…',
        ),
    ],
)
def test_the_preview_is_a_format_string_a_callable_or_readable_words(
    preview: Any, payload: Any, shown: str
) -> None:
    domain = Domain("shop")
    domain.action(preview=preview)(shop().definitions["add-item"].function)
    assert domain.preview("add-item", payload) == shown


def test_an_action_without_a_payload_previews_as_words() -> None:
    assert NotesDomain().preview("list-notes", {}) == "List the notes"
    domain = Domain("x")

    @domain.action(read_only=True)
    def list_all_notes() -> list[str]:
        return []

    assert domain.preview("list-all-notes", {}) == "List all notes"


def test_the_context_hook_is_what_context_returns() -> None:
    domain = Domain("x")
    assert domain.context() == ""
    count = [0]

    @domain.context
    def state() -> str:
        count[0] += 1
        return f"<context calls='{count[0]}'/>"

    assert (domain.context(), domain.context()) == ("<context calls='1'/>", "<context calls='2'/>")


@pytest.mark.parametrize("domain", [SHOP, NotesDomain()], ids=["shop", "demo-notes"])
def test_the_prompt_shows_each_schema_and_an_example_that_passes_validation(domain: Domain) -> None:
    prompt = system_prompt(domain)
    for name, definition in domain.definitions.items():
        section = prompt.split(f"## `{name}`", 1)[1].split("\n## `", 1)[0]
        assert json.dumps(definition.payload.schema, ensure_ascii=False) in section
        (block,) = re.findall(r"```xml\n(.*?)```", section, re.DOTALL)
        envelope_ = parse(block)
        assert envelope_ is not None
        (suggested,) = envelope_.elements
        assert suggested.action == name
        assert definition.shape_issue(suggested.payload) is None, (name, suggested.payload)


def test_a_given_example_is_shown_as_given() -> None:
    domain = Domain("x")

    @domain.action(example={"n": 42})
    def counted(n: int) -> int:
        return n

    assert domain.vocabulary["counted"]["example"] == {"n": 42}
    assert '{"n":42}' in system_prompt(domain)


def test_a_schema_with_a_pattern_the_example_cannot_meet_shows_no_example() -> None:
    domain = Domain("x")

    @domain.action
    def coded(code: Annotated[str, msgspec.Meta(pattern="^[0-9]{4}$")]) -> str:
        return code

    assert domain.vocabulary["coded"]["example"] is None


def test_json_schema_issues_can_be_used_on_their_own() -> None:
    payload = SchemaPayload({"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}})
    assert payload.issue({"n": 2}) == Issue(code=INVALID_PAYLOAD, field="n", hint="Expected a number >= 3, got 2.")
    assert payload.issue({"n": 3, "other": True}) is None, "a schema is honoured as written"
    assert json_schema_issue(payload._validator, {"n": 4}) is None


# --- through a real conversation --------------------------------------------------------------------------------


def counter() -> tuple[Domain, list[int]]:
    domain, ran = Domain("counter"), []

    @domain.action(check=lambda by: Issue(code="too-big", field="by", hint="At most 10.") if by > 10 else None)
    async def bump(by: Annotated[int, msgspec.Meta(ge=1)]) -> dict[str, int]:
        """Add to the counter."""
        if by == 7:
            raise ActionError("seven is unlucky", code="unlucky", field="by", hint="Pick another number.")
        ran.append(by)
        return {"total": sum(ran)}

    return domain, ran


@pytest.mark.anyio
async def test_each_proposal_of_a_typed_domain_gets_exactly_one_outcome() -> None:
    domain, ran = counter()
    reply = envelope(
        suggest("bump", '{"by": 2}'),
        suggest("bump", '{"by": "2"}'),
        suggest("bump", '{"by": 11}'),
        suggest("bump", '{"by": 7}'),
        suggest("bump", '{"by": 1, "twice": true}'),
    )
    conversation = Conversation(
        agent=ScriptedAgent([reply, "<dial><dial-inform>ok</dial-inform></dial>"]),
        domain=domain,
        human=policy_human("accept"),
    )
    result = await conversation.say("bump it")
    found = [(o.status, o.code, o.field, o.result) for o in result.outcomes]
    assert found == [
        ("done", None, None, {"total": 2}),
        ("invalid", INVALID_PAYLOAD, "by", None),
        ("invalid", "too-big", "by", None),
        ("failed", "unlucky", "by", None),
        ("invalid", INVALID_PAYLOAD, "twice", None),
    ]
    assert ran == [2]
    assert result.outcomes[0].preview == "Bump: by=2"


@pytest.mark.anyio
async def test_an_edit_of_a_typed_payload_is_validated_again() -> None:
    domain, ran = counter()
    conversation = Conversation(
        agent=ScriptedAgent(
            [envelope(suggest("bump", '{"by": 1}')), "<dial><dial-inform>ok</dial-inform></dial>"]
        ),
        domain=domain,
        human=scripted_human([{"edit": {"by": 0}}, {"edit": {"by": 3}}]),
    )
    result = await conversation.say("bump")
    ((status, edited),) = [(o.status, o.edited) for o in result.outcomes]
    assert (status, edited, ran) == ("done", True, [3])
    refused = [entry.event for entry in conversation.log if entry.event.type == "refused"]
    assert [(r.code, r.field, r.hint) for r in refused] == [(INVALID_PAYLOAD, "by", "Expected `int` >= 1.")]


# --- the domains page's example --------------------------------------------------------------------------------


def documented_domain() -> str:
    return page_block(DOCS / "how-to" / "domains.md", "# Domains").code


def test_the_documented_domain_is_short() -> None:
    assert len(documented_domain().strip().splitlines()) < 25


@pytest.mark.anyio
async def test_the_documented_domain_holds_a_conversation() -> None:
    namespace: dict[str, Any] = {}
    exec(compile(documented_domain(), "domains.md", "exec"), namespace)
    notes: Domain = namespace["notes"]
    assert list(notes.actions) == ["add-note", "remove-note", "list-notes"]
    reply = envelope(
        suggest("add-note", '{"text": "buy milk"}'),
        suggest("remove-note", '{"text": "call mum"}'),
        suggest("list-notes", "{}"),
        suggest("add-note", '{"text": ""}'),
    )
    agent = ScriptedAgent([reply, "<dial><dial-inform>ok</dial-inform></dial>"])
    conversation = Conversation(agent=agent, domain=notes, human=policy_human("accept"))
    result = await conversation.say("add milk")
    assert [(o.status, o.code, o.result) for o in result.outcomes] == [
        ("done", None, {"count": 1}),
        ("invalid", "not-found", None),
        ("done", None, ["buy milk"]),
        ("invalid", INVALID_PAYLOAD, None),
    ]
    assert '<context notes="1"/>' in agent.sent[1]
    assert "Remove a note, given its exact text." in system_prompt(notes)


def test_a_domain_built_per_conversation_compiles_each_action_once() -> None:
    """Each ``NotesDomain()`` declares its actions anew (closures over its own notes), yet shares what they
    compile to (the payload's validator and schema, the spec), and keeps its own behaviour."""
    from dial_runtime.demo import NotesDomain

    one, two = NotesDomain(), NotesDomain(["old"])
    for name in one.definitions:
        assert one.definitions[name].payload is two.definitions[name].payload
        assert one.actions[name] is two.actions[name]
        assert one.definitions[name].function is not two.definitions[name].function
    one.run("add-note", {"text": "milk"})
    assert (one.notes, two.notes) == (["milk"], ["old"])
    assert one.validate("remove-note", {"text": "old"}) != two.validate("remove-note", {"text": "old"})


def test_functions_of_one_code_with_other_defaults_compile_apart() -> None:
    def declare(default: int) -> Domain:
        domain = Domain("counts")

        @domain.action
        def count(n: int = default) -> int:
            """Count."""
            return n

        return domain

    five, six = declare(5), declare(6)
    assert five.definitions["count"].payload is not six.definitions["count"].payload
    assert five.run("count", {}) == 5 and six.run("count", {}) == 6
