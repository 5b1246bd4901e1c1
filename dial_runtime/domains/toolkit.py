"""A domain written as typed functions: each action's payload, schema, validation and preview come from its
signature.

::

    notes = Domain("notes")

    @notes.action(preview="Add the note '{text}'")
    def add_note(text: Annotated[str, msgspec.Meta(min_length=1, max_length=60)]) -> dict[str, int]:
        \"\"\"Add a note to the notebook.\"\"\"

A :class:`Domain` is the duck-typed domain the runtime uses (``actions``, ``validate``, ``preview``, ``run``,
``context``) plus what :func:`~dial_runtime.system_prompt` reads (``description``, ``vocabulary``,
``describe``), so the agent is told each action's JSON Schema and a valid example.
"""

from __future__ import annotations

import inspect
import json
import string
import typing
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar, overload

import attrs
import msgspec
from statemachine import StateMachine

from ..runtime.asking import Rule, checked_rules
from ..runtime.core import PRECONDITION_FAILED
from ..runtime.flow import FlowRules
from ..runtime.records import ActionError, ActionSpec, ApprovalPolicy, IdempotencyKey, Issue, as_issue
from ..statemachines.compiled import Table, compile_machine
from .examples import example_from_schema
from .payloads import KeywordPayload, Payload, payload_of

__all__ = ["UNKNOWN_ACTION", "ActionDefinition", "Domain", "default_preview", "words"]

UNKNOWN_ACTION = "unknown-action"
"""The code of the issue for an action the domain does not have."""

F = TypeVar("F", bound=Callable[..., Any])
Preview = str | Callable[..., object] | None
#: How often, in seconds, the premise of a card waiting for a decision is checked again (``recheck_every``).
RECHECK_EVERY = 300.0

# A value in a default preview is cut to this many characters.
_PREVIEW_VALUE = 60


@attrs.frozen(kw_only=True)
class ActionDefinition:
    """One typed action: its name, contract, function, payload form, preview, check hook and documentation."""

    name: str
    spec: ActionSpec
    function: Callable[..., Any]
    payload: Payload
    preview: Preview
    check: Callable[..., object] | None
    precondition: Callable[..., object] | None
    description: str
    example: Any
    key_parameter: str | None = None
    reconcile: Callable[..., Any] | None = None
    asynchronous: bool = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "asynchronous", inspect.iscoroutinefunction(self.function))

    def shape_issue(self, payload: Any) -> Issue | None:
        """The issue with ``payload``'s shape and types (the check hook is not called), or ``None``."""
        converted = self.payload.convert(payload)
        return converted if isinstance(converted, Issue) else None


class _Compiled(msgspec.Struct, frozen=True):
    """What a typed action's declaration compiles from its function and the declaration's own arguments: its
    name, the payload form (its validator and JSON Schema), the parameter that receives the run's key, the
    description and the example payload (or the :class:`Issue` an example given refuses)."""

    name: str
    payload: Payload
    key_parameter: str | None
    description: str
    example: Any


#: The compiled forms of typed actions, by what determines them, so that a domain built for each conversation
#: (its actions declared in ``__init__``, closures of one function each) compiles each action once per process,
#: not once per instance: the forms are immutable, and 10,000 conversations share them.
_COMPILED: dict[Any, _Compiled] = {}
#: One copy of each action spec declared (specs are frozen values): a domain built per conversation shares them.
_SPECS: dict[ActionSpec, ActionSpec] = {}


def _compiled(
    function: Callable[..., Any],
    name: str,
    schema: Mapping[str, Any] | None,
    example: Any,
    description: str | None,
) -> _Compiled:
    """The compiled form of an action (see :class:`_Compiled`), made once for each function's code, defaults and
    the declaration's arguments; a function whose defaults cannot be a key is compiled every time. Annotations
    are read from the first function of a code object (they are that code's constants under ``from __future__
    import annotations``, and module-level types otherwise): reading every closure's would give each its own
    annotations dict, the memory this saves."""
    try:
        key: Any = (
            getattr(function, "__code__", function),
            getattr(function, "__defaults__", None),
            tuple((getattr(function, "__kwdefaults__", None) or {}).items()),
            name,
            None if schema is None else msgspec.json.encode(schema, order="sorted"),
            None if example is None else msgspec.json.encode(example, order="sorted"),
            description,
        )
        hash(key)
    except (TypeError, msgspec.EncodeError):
        key = None
    found = None if key is None else _COMPILED.get(key)
    if found is not None:
        return found
    keyed = key_parameter(function)
    payload = payload_of(function, name, schema, besides=keyed)
    given = example is not None
    shown = example if given else example_from_schema(payload.schema)
    refused = payload.convert(shown)
    if isinstance(refused, Issue):  # a given example is refused; a built one that does not pass is left out
        shown = refused if given else None
    told = (description if description is not None else inspect.getdoc(function) or "").strip()
    found = _Compiled(name=name, payload=payload, key_parameter=keyed, description=told, example=shown)
    if key is not None:
        _COMPILED[key] = found
    return found


def key_parameter(function: Callable[..., Any]) -> str | None:
    """The parameter of ``function`` annotated :data:`~dial_runtime.IdempotencyKey` (alone or ``| None``), which
    receives the run's key rather than a payload field; ``None`` when it has none (or its hints cannot be read:
    the payload's own reading then says why)."""
    try:
        hints = typing.get_type_hints(function)
    except (NameError, TypeError):
        return None
    for name, hint in hints.items():
        if name != "return" and (hint is IdempotencyKey or IdempotencyKey in typing.get_args(hint)):
            return name
    return None


def action_name(function_name: str) -> str:
    """``add_note`` as the action name ``add-note``."""
    return function_name.strip("_").replace("_", "-")


def words(name: str) -> str:
    """An action's name as words: ``add-note`` as ``Add note``."""
    text = name.replace("-", " ").replace("_", " ").replace(".", " ").strip()
    return text[:1].upper() + text[1:]


def default_preview(label: str, payload: Any) -> str:
    """What a person reads when an action gives no preview: ``label`` and the payload's values, as in
    ``Add note: text="buy milk"``."""
    if isinstance(payload, Mapping) and payload:
        shown = []
        for key, value in payload.items():
            text = json.dumps(value, ensure_ascii=False, default=str)
            shown.append(f"{key}={text if len(text) <= _PREVIEW_VALUE else text[: _PREVIEW_VALUE - 1] + '…'}")
        return f"{label}: {', '.join(shown)}"
    if payload not in (None, {}):
        return f"{label}: {json.dumps(payload, ensure_ascii=False, default=str)}"
    return label


def _json_ready(result: Any) -> Any:
    """An action's result as JSON data: Structs, dataclasses, datetimes and the like through msgspec, pydantic
    models through their own ``model_dump``; anything else is left for the runtime to write with ``str()``."""
    try:
        return msgspec.to_builtins(result, enc_hook=_dump_model)
    except TypeError:
        return result


def _dump_model(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    raise TypeError(f"not JSON data: {type(value).__name__}")


def _check_preview(domain: str, action: str, preview: str, schema: Mapping[str, Any]) -> None:
    """Refuse a preview format string that names a field the payload does not have (``ValueError``)."""
    properties = schema.get("properties")
    known = set(properties) if isinstance(properties, Mapping) else None
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(preview) if name is not None]
    except ValueError as error:
        raise ValueError(f"{domain}: the preview of {action!r} is not a format string: {error}") from None
    for field in fields:
        root = field.split(".", 1)[0].split("[", 1)[0]
        if not root or root.isdigit() or (known is not None and root not in known):
            raise ValueError(
                f"{domain}: the preview of {action!r} names {{{field}}}, which is not a payload field"
            )


async def _awaited(pending: Any) -> Any:
    return _json_ready(await pending)


class Domain:
    """A domain built from typed functions; see the module docstring and the documentation's "Typed domains and
    flows".

    ``name`` names the application; ``description`` (one or two sentences) goes into the system prompt.
    ``flow`` is a python-statemachine ``StateMachine`` class, the domain's own process: an action declared with
    ``event=`` is allowed only in the states where that event is (see :meth:`allowed_now`), and its ``done``
    outcome fires the event (:meth:`after_done`). The flow is compiled once into a table; a ``TypeError`` names
    what a flow cannot hold (compound states, eventless or guarded transitions). A
    :class:`~dial_runtime.Conversation` keeps the flow's state (see the documentation's "Flows").
    ``approval_rules`` are the rules for whether to ask (:class:`~dial_runtime.runtime.asking.Rule`, each for
    one action or every one): before a suggestion waits for a person, the first rule with an opinion approves
    it, denies it or asks (see the documentation's "Run an approval desk").
    """

    def __init__(
        self,
        name: str,
        *,
        description: str = "",
        flow: type[StateMachine] | None = None,
        approval_rules: Iterable[Rule] = (),
    ) -> None:
        self.name = name
        self.description = description
        self.approval_rules: tuple[Rule, ...] = checked_rules(approval_rules, f"Domain {name!r}")
        """The rules for whether to ask, in the order they are asked."""
        self.flow_machine = flow
        self.flow: Table | None = None if flow is None else compile_machine(flow)
        """The flow's compiled table (``None`` without a flow): the domain's process, see :meth:`allowed_now`."""
        self._events: dict[str, str] = {}
        self._rules: FlowRules | None = None  # built from the declarations when first asked for
        self._definitions: dict[str, ActionDefinition] = {}
        self._specs: dict[str, ActionSpec] = {}
        self._context: Callable[[], object] | None = None
        self.actions: Mapping[str, ActionSpec] = MappingProxyType(self._specs)
        """Action name -> :class:`~dial_runtime.ActionSpec`, in declaration order (read-only)."""
        self.flow_rules  # noqa: B018 - a flow the runtime cannot hold is refused here, not in a conversation

    def __repr__(self) -> str:
        return f"Domain({self.name!r}, actions={list(self._definitions)!r})"

    # ------------------------------------------------------------------------------------------ declaring

    @overload
    def action(self, function: F, /) -> F: ...

    @overload
    def action(
        self,
        /,
        *,
        name: str | None = None,
        preview: Preview = None,
        read_only: bool = False,
        destructive: bool = False,
        handoff: bool = False,
        repeatable: bool = False,
        deadline: float | None = None,
        policy: ApprovalPolicy | None = None,
        remind_after: float | None = None,
        escalate_after: float | None = None,
        escalate_to: Iterable[str] = (),
        check: Callable[..., object] | None = None,
        precondition: Callable[..., object] | None = None,
        recheck_every: float | None = None,
        reconcile: Callable[..., Any] | None = None,
        schema: Mapping[str, Any] | None = None,
        example: Any = None,
        description: str | None = None,
        event: str | None = None,
    ) -> Callable[[F], F]: ...

    def action(
        self,
        function: F | None = None,
        /,
        *,
        name: str | None = None,
        preview: Preview = None,
        read_only: bool = False,
        destructive: bool = False,
        handoff: bool = False,
        repeatable: bool = False,
        deadline: float | None = None,
        policy: ApprovalPolicy | None = None,
        remind_after: float | None = None,
        escalate_after: float | None = None,
        escalate_to: Iterable[str] = (),
        check: Callable[..., object] | None = None,
        precondition: Callable[..., object] | None = None,
        recheck_every: float | None = None,
        reconcile: Callable[..., Any] | None = None,
        schema: Mapping[str, Any] | None = None,
        example: Any = None,
        description: str | None = None,
        event: str | None = None,
    ) -> F | Callable[[F], F]:
        """Declare ``function`` as an action (as ``@domain.action`` or ``@domain.action(...)``).

        - ``name``: the action's name (default: the function's, ``add_note`` -> ``add-note``).
        - ``preview``: what the person is shown: a format string over the payload (``"Add the note '{text}'"``),
          a callable taking the function's arguments, or by default the action's name in words and its
          arguments (``Add note: text="buy milk"``).
        - ``deadline``: how many seconds the person has to decide on it once shown (default: the
          conversation's ``decide_timeout``); after it the suggestion ends ``dismissed``, ``expired``.
        - ``policy``: who must approve it (:class:`~dial_runtime.ApprovalPolicy`: how many distinct people,
          holding which roles, whether the person who asked may be its only approver, whether one dismissal
          ends it).
        - ``remind_after``, ``escalate_after`` and ``escalate_to``: seconds undecided after which its deciders
          are reminded, and after which it escalates to the deciders holding the ``escalate_to`` roles.
        - ``read_only``: runs without asking the person; ``destructive``: marked for the person; ``handoff``:
          taken over by the surface (see the suggestion lifecycle); ``repeatable``: a proposal that repeats one
          done already (the same payload) is not marked as done before.
        - ``check``: a domain rule beyond types, called with the function's arguments once they are valid;
          it returns ``None`` or an :class:`~dial_runtime.Issue` (``Issue(code="not-found", ...)``).
        - ``precondition``: whether the premise of a proposal still holds in the world (the invoice is still
          unpaid), called with the function's arguments when it is shown, before it runs, and every
          ``recheck_every`` seconds (default 300) while it waits for a decision; it returns ``None`` (it holds),
          an :class:`~dial_runtime.Issue`, or the reason in words. A card whose premise no longer holds ends
          ``invalid`` with that reason (code ``precondition-failed`` unless the issue gives one), and the agent
          is told.
        - ``reconcile``: says what became of a run a crash cut short, called as ``reconcile(key, **arguments)``
          (the run's idempotency key, then the function's arguments): it returns the result the run had, raises
          :class:`~dial_runtime.ActionError` for a run that failed, or ``LookupError`` when it cannot tell. It
          may be called more than once for one key and must not cause the effect itself. Without it, such a run
          ends ``failed`` (``interrupted``).
        - ``schema``: a JSON Schema for the payload instead of the function's annotations; the function's one
          parameter receives the payload.
        - ``example``: the example payload the system prompt shows (default: one built from the schema); it
          must pass the action's validation (``ValueError`` when it does not).
        - ``description``: what the prompt says of the action (default: the function's docstring).
        - ``event``: the flow's event a ``done`` outcome of the action fires; the action is allowed only where
          the event is (``ValueError`` without a flow, for an event the flow does not have, or on a hand-off).

        The function's keyword parameters, typed by their annotations, are the payload (or its one
        ``msgspec.Struct`` or pydantic model parameter), except one annotated :data:`~dial_runtime.IdempotencyKey`:
        it receives the run's idempotency key (to pass on as an ``Idempotency-Key`` header, or to record with the
        effect), and keeps its default when :meth:`run` is called without one. It may be plain or ``async``; it
        raises :class:`~dial_runtime.ActionError` to fail with a code, field and hint. ``TypeError`` when its
        signature cannot be a payload, ``ValueError`` for a name declared twice.
        """

        def declare(declared: F) -> F:
            self._declare(
                declared,
                name=name,
                preview=preview,
                spec=ActionSpec(
                    mutates=not read_only,
                    destructive=destructive,
                    handoff=handoff,
                    repeatable=repeatable,
                    deadline=deadline,
                    policy=policy,
                    remind_after=remind_after,
                    escalate_after=escalate_after,
                    escalate_to=frozenset(escalate_to),
                    precondition=precondition is not None,
                    recheck_every=(recheck_every or RECHECK_EVERY) if precondition is not None else recheck_every,
                ),
                check=check,
                precondition=precondition,
                reconcile=reconcile,
                schema=schema,
                example=example,
                description=description,
                event=event,
            )
            return declared

        return declare if function is None else declare(function)

    def _declare(
        self,
        function: Callable[..., Any],
        *,
        name: str | None,
        preview: Preview,
        spec: ActionSpec,
        check: Callable[..., object] | None,
        precondition: Callable[..., object] | None,
        reconcile: Callable[..., Any] | None,
        schema: Mapping[str, Any] | None,
        example: Any,
        description: str | None,
        event: str | None,
    ) -> None:
        named = name or action_name(getattr(function, "__name__", ""))
        if not named or named.startswith("<"):  # a lambda's name is "<lambda>"
            raise TypeError("Domain.action: give the action a name (name=...)")
        if named in self._definitions:
            raise ValueError(f"{self.name}: action {named!r} is declared twice")
        if event is not None:
            if self.flow is None:
                raise ValueError(
                    f"{self.name}: action {named!r} names the event {event!r}, but the domain has no flow"
                )
            if spec.handoff:
                raise ValueError(
                    f"{self.name}: action {named!r} is a hand-off, whose outcome is never done: it cannot fire "
                    f"the event {event!r}"
                )
            if event not in self.flow.events:
                known = ", ".join(sorted(self.flow.events))
                raise ValueError(f"{self.name}: the flow {self.flow.name} has no event {event!r} (it has {known})")
        compiled = _compiled(function, named, schema, example, description)
        named = compiled.name
        spec = _SPECS.setdefault(spec, spec)
        if isinstance(preview, str):
            _check_preview(self.name, named, preview, compiled.payload.schema)
        if isinstance(compiled.example, Issue):
            issue = compiled.example
            raise ValueError(f"{self.name}: the example of {named!r} is invalid: {issue.field}: {issue.hint}")
        self._definitions[named] = ActionDefinition(
            name=named,
            spec=spec,
            function=function,
            payload=compiled.payload,
            preview=preview,
            check=check,
            precondition=precondition,
            description=compiled.description,
            example=compiled.example,
            key_parameter=compiled.key_parameter,
            reconcile=reconcile,
        )
        self._specs[named] = spec
        if event is not None:
            self._events[named] = event
        self._rules = None

    @overload
    def context(self, /) -> str: ...

    @overload
    def context(self, function: Callable[[], object], /) -> Callable[[], object]: ...

    def context(self, function: Callable[[], object] | None = None, /) -> str | Callable[[], object]:
        """As ``@domain.context``: mark the function whose text goes with every turn. Called with no argument
        (as the runtime does): that text, or ``""``."""
        if function is not None:
            self._context = function
            return function
        if self._context is None:
            return ""
        text = self._context()
        return "" if text is None else str(text)

    # ------------------------------------------------------------------------------------------ reading

    @property
    def definitions(self) -> Mapping[str, ActionDefinition]:
        """Each action's :class:`ActionDefinition`, by name."""
        return MappingProxyType(self._definitions)

    @property
    def vocabulary(self) -> dict[str, dict[str, Any]]:
        """What the system prompt says of each action: ``description`` (with the flow's states it is allowed
        in, for an action bound to an event), ``schema`` and ``example``."""
        return {
            name: {"description": self._described(name), "schema": d.payload.schema, "example": d.example}
            for name, d in self._definitions.items()
        }

    def _described(self, action: str) -> str:
        description = self._definitions[action].description
        event = self._events.get(action)
        if event is None or self.flow is None:
            return description
        states = [state for state in self.flow.states if event in self.flow.allowed(state)]
        rule = f"Allowed only while the {self.name} flow is in: {', '.join(states)}."
        return f"{description}\n\n{rule}" if description else rule

    # ------------------------------------------------------------------------------------------ the flow

    @property
    def bound_actions(self) -> dict[str, list[str]]:
        """The actions bound to each flow event, by event (what a flow diagram labels its transitions with)."""
        bound: dict[str, list[str]] = {}
        for action, event in self._events.items():
            bound.setdefault(event, []).append(action)
        return bound

    def event_of(self, action: str) -> str | None:
        """The flow event ``action`` is bound to, or ``None``."""
        return self._events.get(action)

    @property
    def flow_rules(self) -> FlowRules | None:
        """The flow as the runtime holds it (its table and which action fires which event), ``None`` without a
        flow. A :class:`~dial_runtime.Conversation` reads it once, when it is made."""
        if self.flow is None:
            return None
        if self._rules is None:
            self._rules = FlowRules(
                name=self.name, table=self.flow, actions=tuple(self._definitions), events=self._events
            )
        return self._rules

    def allowed_actions(self, state: str) -> tuple[str, ...]:
        """The actions allowed in the flow's ``state``, in declaration order: every unbound action, and each
        bound one whose event the state has a transition for. ``ValueError`` for a state the flow lacks."""
        return self._require_flow().allowed_actions(state)

    def allowed_now(self, state: str, action: str) -> Issue | None:
        """``None`` when ``action`` may be suggested in the flow's ``state``, else ``not-allowed-now`` with a
        hint naming the state and the actions allowed in it. Pure: reads only the flow's table."""
        return self._require_flow().allowed_now(state, action)

    def after_done(self, state: str, action: str) -> str:
        """The flow's state once ``action`` ended ``done`` in ``state``: its event's target, or ``state`` for an
        unbound action. Raises :class:`~dial_runtime.IllegalTransition` where the event is not allowed."""
        return self._require_flow().after_done(state, action)

    def flow_context(self, state: str) -> str:
        """The flow's state and the actions allowed in it, as the text that goes with a turn's context."""
        return self._require_flow().context(state)

    def _require_flow(self) -> FlowRules:
        rules = self.flow_rules
        if rules is None:
            raise ValueError(f"{self.name}: the domain has no flow")
        return rules

    def describe(self, action: str) -> str:
        """The action's description (its docstring unless given)."""
        definition = self._definitions.get(action)
        return "" if definition is None else definition.description

    def schema(self, action: str) -> dict[str, Any]:
        """The JSON Schema of the action's payload (``KeyError`` for an unknown action)."""
        return self._definitions[action].payload.schema

    # ------------------------------------------------------------------------------------------ the runtime's

    def validate(self, action: str, payload: Any) -> Issue | None:
        """``None`` when ``payload`` is valid for ``action``, else the issue: its shape and types first
        (``invalid-payload``, the path of the value at fault, a hint), then the action's check hook."""
        definition = self._definitions.get(action)
        if definition is None:
            return Issue(code=UNKNOWN_ACTION, hint=f"Use one of: {', '.join(self._definitions) or 'no actions'}.")
        arguments = definition.payload.convert(payload)
        if isinstance(arguments, Issue):
            return arguments
        if definition.check is None:
            return None
        return as_issue(definition.check(**arguments))

    def precondition(self, action: str, payload: Any) -> Issue | None:
        """Why the premise of ``action`` with a valid ``payload`` no longer holds, as its ``precondition`` says
        (see :meth:`action`); ``None`` while it holds, or for an action without one."""
        definition = self._definitions.get(action)
        if definition is None or definition.precondition is None:
            return None
        arguments = definition.payload.convert(payload)
        if isinstance(arguments, Issue):
            return None  # validate refuses it: a payload of the wrong shape has no premise to check
        found = definition.precondition(**arguments)
        if isinstance(found, str):
            return Issue(code=PRECONDITION_FAILED, hint=found)
        return as_issue(found)

    def preview(self, action: str, payload: Any) -> str:
        """What the person is shown for ``action`` with a valid ``payload`` (see :meth:`action`)."""
        definition = self._definitions[action]
        shown = definition.preview
        if shown is None:
            return default_preview(words(action), payload)
        arguments = definition.payload.convert(payload)
        if isinstance(arguments, Issue):
            return default_preview(words(action), payload)
        if callable(shown):
            return str(shown(**arguments))
        # Keyword parameters are formatted with their defaults filled in; other forms over the payload's JSON.
        fields = arguments if isinstance(definition.payload, KeywordPayload) else payload
        return shown.format_map(fields) if isinstance(fields, Mapping) else shown

    def run(self, action: str, payload: Any, *, key: str | None = None) -> Any:
        """Call the action's function with the payload's values (and ``key``, the run's idempotency key, for the
        parameter that takes it); an ``async`` function's coroutine is returned for the runtime to await. The
        result comes back as JSON data (a ``Struct`` as a dict)."""
        definition = self._definitions[action]
        arguments = definition.payload.convert(payload)
        if isinstance(arguments, Issue):  # the runtime validates first; a direct caller may not have
            raise ActionError(
                "the payload is invalid", code=arguments.code, field=arguments.field, hint=arguments.hint
            )
        if key is not None and definition.key_parameter is not None:
            arguments[definition.key_parameter] = key
        if definition.asynchronous:
            return _awaited(definition.function(**arguments))
        return _json_ready(definition.function(**arguments))

    def reconcile(self, action: str, payload: Any, *, key: str) -> Any:
        """What became of the run of ``action`` under ``key`` that a crash cut short, as the action's
        ``reconcile`` tells (see :meth:`action`); ``LookupError`` for an action that declares none."""
        definition = self._definitions.get(action)
        if definition is None or definition.reconcile is None:
            raise LookupError(f"{self.name}: the action {action!r} declares no reconcile")
        arguments = definition.payload.convert(payload)
        if isinstance(arguments, Issue):
            raise LookupError(f"{self.name}: the payload of {action!r} is not one it runs")
        told = definition.reconcile(key, **arguments)
        return _awaited(told) if inspect.isawaitable(told) else _json_ready(told)
