"""A domain's flow as plain data: its compiled table and which action fires which of its events.

The conversation core holds a :class:`FlowRules` (never the domain object): every question about the flow (may
this action be suggested now, where does its ``done`` outcome lead, what goes with the turn) is a lookup in the
table, with no I/O. :class:`~dial_runtime.Domain` builds one from its declarations (``domain.flow_rules``); any
domain may offer one under that name.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import attrs

from ..language.outcomes import escape_attribute
from ..statemachines.compiled import Table
from .records import Issue

__all__ = ["NOT_ALLOWED_NOW", "FlowRules"]

NOT_ALLOWED_NOW = "not-allowed-now"
"""The code of the issue for an action whose flow event is not allowed in the flow's current state."""


def _frozen(events: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(events))


@attrs.frozen(kw_only=True)
class FlowRules:
    """A flow's table, the domain's ``name`` (what hints and the context call the flow), its ``actions`` in
    declaration order, and ``events``: the flow event each bound action fires (unbound actions are allowed in
    every state and move nothing).

    ``ValueError`` when an event is not the table's, or a bound action is not among ``actions``; ``TypeError``
    for a table with guarded transitions (a flow's moves depend on the actions' outcomes alone).
    """

    name: str
    table: Table
    actions: tuple[str, ...]
    events: Mapping[str, str] = attrs.field(converter=_frozen)
    _allowed: dict[str, tuple[str, ...]] = attrs.field(init=False, repr=False, eq=False)
    _contexts: dict[str, str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        if self.table.flags:
            raise TypeError(f"{self.name}: the flow {self.table.name} has guarded transitions; a flow cannot")
        for action, event in self.events.items():
            if event not in self.table.events:
                raise ValueError(f"{self.name}: the flow {self.table.name} has no event {event!r}")
            if action not in self.actions:
                raise ValueError(f"{self.name}: the action {action!r} bound to {event!r} is not declared")
        # What each state allows, and the context text that says so, are read once: a turn only looks them up.
        allowed = {
            state: tuple(name for name in self.actions if self.events.get(name, None) in (None, *events))
            for state, events in ((state, self.table.allowed(state)) for state in self.table.states)
        }
        name = escape_attribute(self.name)
        contexts = {
            state: f'<flow name="{name}" state="{escape_attribute(state)}" '
            f'allowed="{escape_attribute(" ".join(actions))}"/>'
            for state, actions in allowed.items()
        }
        object.__setattr__(self, "_allowed", allowed)
        object.__setattr__(self, "_contexts", contexts)

    @property
    def initial(self) -> str:
        """The state a conversation's flow starts in."""
        return self.table.initial

    def event_of(self, action: str) -> str | None:
        """The flow event ``action`` is bound to, or ``None``."""
        return self.events.get(action)

    def allowed_actions(self, state: str) -> tuple[str, ...]:
        """The actions allowed in ``state``, in declaration order: every unbound action, and each bound one whose
        event ``state`` has a transition for. ``ValueError`` for a state the flow lacks."""
        try:
            return self._allowed[state]
        except KeyError:
            raise ValueError(f"{self.table.name}: unknown state {state!r}") from None

    def allowed_now(self, state: str, action: str) -> Issue | None:
        """``None`` when ``action`` may be suggested in ``state``, else ``not-allowed-now`` with a hint naming the
        state and the actions allowed in it."""
        event = self.events.get(action)
        if event is None or event in self.table.allowed(state):
            return None
        allowed = ", ".join(f"`{name}`" for name in self.allowed_actions(state)) or "none"
        return Issue(
            code=NOT_ALLOWED_NOW,
            hint=f"Not possible while the {self.name} flow is in {state!r}; allowed now: {allowed}.",
        )

    def after_done(self, state: str, action: str) -> str:
        """The state once ``action`` ended ``done`` in ``state``: its event's target, or ``state`` for an unbound
        action. :class:`~dial_runtime.IllegalTransition` where the event is not allowed."""
        event = self.events.get(action)
        return state if event is None else self.table.fire(state, event)

    def context(self, state: str) -> str:
        """The flow's state and the actions allowed in it, as the text that goes with a turn's context."""
        try:
            return self._contexts[state]
        except KeyError:
            raise ValueError(f"{self.table.name}: unknown state {state!r}") from None
