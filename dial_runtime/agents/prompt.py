"""The system prompt that teaches an agent DIAL and one application's vocabulary, generated from its domain.

:func:`system_prompt` writes a short DIAL primer (informing, asking, suggesting an action with its payload, how
outcomes come back and how to react to each status) followed by the domain's actions. Nothing in it is written
per application: it is read from the domain, where everything but ``actions`` is optional:

- ``domain.actions``: action name -> ``ActionSpec`` or ``{"mutates": ..., "destructive": ..., "handoff": ...,
  "repeatable": ...}``;
- ``domain.description``: one or two sentences on what the application is for;
- ``domain.vocabulary``: action name -> a mapping with any of ``"description"`` (text), ``"schema"`` (a JSON
  Schema of the payload) and ``"example"`` (an example payload);
- ``domain.describe(action)``: the action's description when the vocabulary gives none;
- the keys ``description``, ``payload_schema`` and ``payload_example`` of a dict action spec (or attributes of
  those names on a spec object), when the two above give nothing;
- ``domain.preview(action, payload)``: the text of each example suggestion (the action's name when it fails);
- ``domain.flow_rules``: the domain's flow (a :class:`~dial_runtime.runtime.flow.FlowRules`), described after the
  actions: where it starts, what ends it, and which action moves it where.

An action with a schema but no example gets the example :func:`~dial_runtime.domains.example_from_schema` builds
from the schema (meant to pass it), as a typed domain's actions do. Every DIAL example in the prompt is a fenced
``xml`` block holding one ``<dial>`` document that validates against the lenient XSD; the outcome example is
written by :func:`~dial_runtime.outcome_reply` itself, so it always matches what the agent will receive.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ..domains.examples import example_from_schema
from ..language.outcomes import Outcome, compact_json, escape_attribute, escape_text, outcome_reply
from ..runtime.flow import FlowRules
from ..runtime.records import ActionSpec, as_action_spec

__all__ = ["VocabularyEntry", "codec_prompt", "json_prompt", "system_prompt", "tools_prompt", "vocabulary"]


class VocabularyEntry(msgspec.Struct, frozen=True, kw_only=True):
    """What the prompt says of one action: its spec, description, payload schema and example payload.

    ``example`` is the domain's own example, else one built from ``schema``, else ``None`` (the payload is not
    described).
    """

    name: str
    spec: ActionSpec
    description: str = ""
    schema: Any = None
    example: Any = None


#: What the primer's examples show when no action of the domain has an example payload.
_PLACEHOLDER_ENTRY = VocabularyEntry(
    name="ACTION", spec=ActionSpec(mutates=True), description="What it will do", example={"field": "value"}
)


#: The keys a ``domain.vocabulary`` entry may hold.
VOCABULARY_KEYS = ("description", "schema", "example")
#: The keys a dict action spec may hold: the spec's own, then the documentation the prompt reads from it.
SPEC_KEYS = ("mutates", "destructive", "handoff", "repeatable", "description", "payload_schema", "payload_example")


def vocabulary(domain: Any) -> tuple[VocabularyEntry, ...]:
    """The domain's actions, in its order, with what the domain says of each (see the module docstring).

    ``ValueError``, in one line, for documentation it would otherwise ignore without a word: a vocabulary entry
    for an action the domain does not have, an entry that is not a mapping, or a key of an entry or of a dict
    action spec that is not read (``payload_schema`` in a vocabulary entry, whose key is ``schema``).
    """
    actions: Mapping[str, Any] = getattr(domain, "actions", None) or {}
    documented: Mapping[str, Any] = getattr(domain, "vocabulary", None) or {}
    _check_documentation(actions, documented)
    describe = getattr(domain, "describe", None)
    entries = []
    for name, raw_spec in actions.items():
        entry = documented.get(name) or {}
        description = entry.get("description") or (describe(name) if callable(describe) else None)
        description = description or _spec_value(raw_spec, "description")
        schema = entry.get("schema") or _spec_value(raw_spec, "payload_schema")
        example = entry.get("example")
        if example is None:
            example = _spec_value(raw_spec, "payload_example")
        if example is None and isinstance(schema, Mapping):
            example = example_from_schema(schema)
        entries.append(
            VocabularyEntry(
                name=name,
                spec=as_action_spec(raw_spec),
                description=str(description or "").strip(),
                schema=schema,
                example=example,
            )
        )
    return tuple(entries)


def _check_documentation(actions: Mapping[str, Any], documented: Mapping[str, Any]) -> None:
    """Refuse a vocabulary or dict spec that says something :func:`vocabulary` would not read."""
    keys = ", ".join(repr(key) for key in VOCABULARY_KEYS)
    for name, entry in documented.items():
        if name not in actions:
            known = ", ".join(repr(action) for action in actions)
            raise ValueError(f"domain.vocabulary names {name!r}, which is not an action (the actions are {known})")
        if not isinstance(entry, Mapping):
            raise ValueError(f"domain.vocabulary[{name!r}] is {type(entry).__name__}, not a mapping of {keys}")
        _check_keys(f"domain.vocabulary[{name!r}]", entry, VOCABULARY_KEYS)
    for name, spec in actions.items():
        if isinstance(spec, Mapping):
            _check_keys(f"domain.actions[{name!r}]", spec, SPEC_KEYS)


def _check_keys(where: str, given: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    for key in given:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
            guess = f" (did you mean {close[0]!r}?)" if close else ""
            known = ", ".join(repr(name) for name in allowed)
            raise ValueError(f"{where}: unknown key {key!r}{guess}; the keys are {known}")


def system_prompt(domain: Any) -> str:
    """The system prompt for an agent working in ``domain``: the DIAL primer, then the domain's actions."""
    entries = vocabulary(domain)
    about = str(getattr(domain, "description", "") or "").strip()
    parts = [_INTRODUCTION, f"The application: {about}"] if about else [_INTRODUCTION]
    parts.append(_REPLYING)
    if entries:
        shown = _example_entry(entries)
        # Without a domain example, the primer shows a placeholder action rather than a payload that misleads.
        owner = domain if shown is not None else None
        shown = shown or _PLACEHOLDER_ENTRY
        note = "" if owner is not None else "\n\n(`ACTION` stands for one of the actions listed at the end.)"
        parts.append(_SUGGESTING.format(example=_envelope(_suggest(owner, shown)), note=note))
        parts.append(_OUTCOMES.format(example=_outcome_example(owner, shown)))
    parts.append(_RECEIVING)
    parts.append(
        _vocabulary_section(
            entries, lambda entry: ["- Example:", "", "```xml", _envelope(_suggest(domain, entry)), "```"]
        )
    )
    rules = getattr(domain, "flow_rules", None)
    if isinstance(rules, FlowRules):
        parts.append(_flow_section(rules))
    return "\n\n".join(parts) + "\n"


def tools_prompt(domain: Any) -> str:
    """The system prompt for a model that proposes actions as tool calls (the ``tools`` codec): what the
    application is, and how its calls are decided and reported. The tools themselves carry the actions'
    descriptions and schemas."""
    about = str(getattr(domain, "description", "") or "").strip()
    parts = [_TOOLS_INTRODUCTION]
    if about:
        parts.append(f"The application: {about}")
    rules = getattr(domain, "flow_rules", None)
    if isinstance(rules, FlowRules):
        parts.append(_flow_section(rules))
    return "\n\n".join(parts) + "\n"


def json_prompt(domain: Any) -> str:
    """The system prompt for a model whose replies are JSON objects of acts (the ``json`` codec): how to write
    one, what comes back, and the domain's actions with their payload schemas and examples."""
    entries = vocabulary(domain)
    about = str(getattr(domain, "description", "") or "").strip()
    parts = [_JSON_INTRODUCTION]
    if about:
        parts.append(f"The application: {about}")
    parts.append(_vocabulary_section(entries, _json_example))
    rules = getattr(domain, "flow_rules", None)
    if isinstance(rules, FlowRules):
        parts.append(_flow_section(rules))
    return "\n\n".join(parts) + "\n"


def codec_prompt(codec: str, domain: Any) -> str:
    """The system prompt a model speaking ``codec`` (``dial``, ``tools`` or ``json``) needs for ``domain``:
    :func:`system_prompt`, :func:`tools_prompt` or :func:`json_prompt`."""
    prompts = {"dial": system_prompt, "tools": tools_prompt, "json": json_prompt}
    if codec not in prompts:
        raise ValueError(f"unknown codec {codec!r}; use one of {', '.join(prompts)}")
    return prompts[codec](domain)


def _json_example(entry: VocabularyEntry) -> list[str]:
    """A suggestion of ``entry``'s action, as an act of a JSON reply."""
    act = {"act": "suggest", "action": entry.name, "text": "...", "payload": entry.example}
    return ["- Example act:", "", "```json", json.dumps(act, ensure_ascii=False, default=str), "```"]


_JSON_INTRODUCTION = """\
You are the assistant inside an application. You help the person by talking with them and by proposing actions \
the application can run; you never run anything yourself. Write every reply as one JSON object \
{"acts": [...]}, its acts handled in order:

- {"act": "inform", "text": "..."} tells the person something;
- {"act": "ask", "question": "...", "options": ["...", "..."]} asks them (no options: a free answer);
- {"act": "suggest", "action": "...", "text": "...", "payload": {...}} proposes an action: the application checks \
it, shows it to the person, and runs it only if they accept it (they may change it first, or refuse it).

Messages come to you as JSON too: "message" holds the person's words (and the application's context), \
"outcomes" how each proposal ended (its status: done, failed, invalid, dismissed, superseded or handed-off, with \
the result or the error), "notices" what was wrong with a reply of yours. Until an outcome says a proposal was \
done, nothing was done: never tell the person otherwise."""


_TOOLS_INTRODUCTION = """\
You are the assistant inside an application. You help the person by talking with them and by calling the \
application's tools. A call is a proposal: the application checks it, shows it to the person, and runs it only if \
they accept it (they may change it first, or refuse it). The tool's result tells you how it ended. Until a result \
says a call was done, nothing was done: never tell the person otherwise. Call ask_user when you need the person's \
answer to go on."""


# ---------------------------------------------------------------------------------------------- primer

_INTRODUCTION = """\
You are the assistant inside an application. You help the person by talking with them and by proposing actions \
the application can run. You never run anything yourself: you speak DIAL, an XML speech-act language, and the \
application checks every proposal, shows it to the person, runs what they accept, and tells you how each one \
ended."""

_REPLYING = """\
# Replying in DIAL

Write every reply as one `<dial>` envelope holding one or more elements; they are handled in order. A short \
sentence of plain text before the envelope is shown to the person too. Element text is XML: write `&` as `&amp;` \
and `<` as `&lt;`.

## Inform

Tell the person something. Nothing comes back.

```xml
<dial>
  <dial-inform>Here is what I found.</dial-inform>
</dial>
```

## Ask

Ask when you need something from the person; their answer is the next message you receive. `response-type` is \
`text` (the default), `confirm` (yes or no), `number` or `choice`. For a choice, give each `<dial-option>` the \
`value` you want back and a label, and mark at most one `default="true"`.

```xml
<dial>
  <dial-ask response-type="choice">Which one should I use?\
<dial-option value="first" default="true">The first one</dial-option>\
<dial-option value="second">The second one</dial-option></dial-ask>
</dial>
```"""

_SUGGESTING = """\
## Suggest an action

Propose one action per `<dial-suggest>`: `action` is one of the actions listed at the end, the text says in a \
few plain words what will happen, and `<dial-payload>` holds the action's arguments as JSON. One reply may hold \
several suggestions. Leave out `id`: the application numbers suggestions sg-1, sg-2, … across the conversation \
and names that id when it reports back. An action that changes data waits for the person to accept, edit or \
dismiss it; a read-only action runs at once. Never say an action is done before its outcome says so.

```xml
{example}
```{note}"""

_OUTCOMES = """\
## Outcomes

Every suggestion ends in exactly one outcome, reported to you in DIAL: a `<dial-acknowledge>` whose `yield` is \
`ID:STATUS`, then a `<dial-declare context-key="outcome:ID">` whose JSON payload holds the `action`, the \
`status` and, depending on how it ended, `result` (what the action returned), `error`, `code`, `field`, `hint`, \
`edited: true` (the person changed the payload before it ran) or `expired: true` (nobody decided in time). \
For example:

```xml
{example}
```

React to each status:

- `done`: it ran; `result` holds what it returned. Tell the person briefly and go on.
- `failed`: it ran and did not work; `error`, `code` and `hint` say why. Explain it, then fix the cause or \
propose a corrected action; do not repeat the same proposal unchanged.
- `invalid`: the person never saw it, because the action is unknown or its payload was refused. Correct it \
using `code`, `field` and `hint` and suggest it again, or ask the person for what is missing.
- `dismissed`: the person declined it. Do not propose it again unless they ask for it.
- `superseded`: the person said something else instead of deciding; their words come in the same message. \
Answer them, and propose the action again only if it still fits.
- `handed-off`: the application opened it in its own panel, where the person carries on. Do not propose it \
again.

`done`, `failed` and `invalid` are reported at once; `dismissed`, `superseded` and `handed-off` come with the \
person's next words."""

_RECEIVING = """\
## What you receive

Each message holds, in this order: outcome reports (if any), the application's current context (if any), then \
the person's words. A reply the application could not use at all comes back as \
`<dial-acknowledge of="reply-N" yield="reply-N:invalid">` with the reason: send a usable reply. When the person \
says they are finished, end your last envelope with `<dial-phatic signal="session-complete"/>`."""


# ---------------------------------------------------------------------------------------------- vocabulary


def _vocabulary_section(
    entries: tuple[VocabularyEntry, ...], example: Callable[[VocabularyEntry], list[str]] | None = None
) -> str:
    """The domain's actions: each one's description, kind and payload schema, and ``example``'s lines for it
    (a suggestion of it in the reply's form), or a word that its payload is not described."""
    lines = ["# This application's actions"]
    if not entries:
        lines += ["", "This application offers no actions: inform the person and ask them, but suggest nothing."]
        return "\n".join(lines)
    lines += ["", "Use only these actions, with the payload each one describes."]
    for entry in entries:
        lines += ["", f"## `{entry.name}`", ""]
        if entry.description:
            lines += [entry.description, ""]
        lines.append(f"- {_kind(entry.spec)}")
        if entry.schema is not None:
            schema = json.dumps(entry.schema, ensure_ascii=False, default=str)
            lines += ["- Payload (JSON Schema):", "", "```json", schema, "```", ""]
        if entry.example is None or example is None:
            lines.append(
                "- Payload: not described. Send a JSON object with what the action needs; an `invalid` outcome's "
                "`hint` says what is missing."
            )
        else:
            lines += example(entry)
    return "\n".join(lines)


def _flow_section(rules: FlowRules) -> str:
    """What the agent must know of the domain's flow: where it starts, what ends it, how each action moves it."""
    table = rules.table
    finals = [f"`{state}`" for state in table.states if table.is_final(state)]
    ending = f" {_listed(finals)} end{'s' if len(finals) == 1 else ''} the conversation." if finals else ""
    lines = [
        "# This application's flow",
        "",
        f"The application follows a process, the `{rules.name}` flow, and some actions are possible only at some "
        f"of its steps. It starts in `{table.initial}`.{ending} Every message you receive carries the flow's "
        "current state and the actions allowed in it, with the application's context, as in:",
        "",
        "```",
        rules.context(table.initial),
        "```",
        "",
        "Suggest only actions it allows: any other ends `invalid` with code `not-allowed-now`. An action moves "
        "the flow only when its outcome is `done`:",
        "",
    ]
    for state in table.states:
        moves = [
            f"`{action}` -> `{table.fire(state, event)}`"
            for action, event in rules.events.items()
            if event in table.allowed(state)
        ]
        if moves:
            lines.append(f"- in `{state}`: {', '.join(moves)}")
    unbound = [f"`{action}`" for action in rules.actions if rules.event_of(action) is None]
    if unbound:
        verbs = (
            "is possible in every state and moves" if len(unbound) == 1 else "are possible in every state and move"
        )
        lines += ["", f"{_listed(unbound)} {verbs} nothing."]
    return "\n".join(lines)


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _kind(spec: ActionSpec) -> str:
    if spec.handoff:
        kind = (
            "Hand-off: the application opens it in its own panel for the person to complete, without asking "
            "first; its outcome is `handed-off`."
        )
    elif spec.mutates:
        kind = "Changes data: the person accepts, edits or dismisses it before it runs."
    else:
        kind = "Read-only: it runs at once, without asking the person; its result comes back in the outcome."
    if spec.destructive:
        kind += " Destructive: it deletes or overwrites something, so say so plainly in the suggestion's text."
    return kind


def _example_entry(entries: tuple[VocabularyEntry, ...]) -> VocabularyEntry | None:
    """The action the primer's examples use: one with an example payload, preferably one that changes data."""
    described = [entry for entry in entries if entry.example is not None]
    return min(described, key=lambda entry: not entry.spec.mutates or entry.spec.handoff, default=None)


def _outcome_example(domain: Any | None, entry: VocabularyEntry) -> str:
    preview = _preview(domain, entry)
    return outcome_reply(
        [
            Outcome(id="sg-1", action=entry.name, status="done", preview=preview),
            Outcome(
                id="sg-2",
                action=entry.name,
                status="failed",
                preview=preview,
                error="the service is unavailable",
                code="unavailable",
                hint="Try again later.",
            ),
        ]
    )


def _suggest(domain: Any | None, entry: VocabularyEntry) -> str:
    payload = {} if entry.example is None else entry.example
    return (
        f'<dial-suggest action="{escape_attribute(entry.name)}">{escape_text(_preview(domain, entry))}'
        f"<dial-payload>{escape_text(compact_json(payload))}</dial-payload></dial-suggest>"
    )


def _envelope(element: str) -> str:
    return f"<dial>\n  {element}\n</dial>"


def _preview(domain: Any | None, entry: VocabularyEntry) -> str:
    """What the person would be shown for the example payload: ``domain.preview``, else the action's name; the
    placeholder's description when there is no domain."""
    if domain is None:
        return entry.description
    preview = getattr(domain, "preview", None)
    if callable(preview):
        try:
            text = preview(entry.name, {} if entry.example is None else entry.example)
        except Exception:  # a preview that cannot handle the example only loses its wording
            text = None
        if text:
            return str(text)
    return entry.name


def _spec_value(spec: Any, name: str) -> Any:
    """A documentation field of an action spec: the dict key, else the attribute, else ``None``."""
    if isinstance(spec, Mapping):
        return spec.get(name)
    return getattr(spec, name, None)
