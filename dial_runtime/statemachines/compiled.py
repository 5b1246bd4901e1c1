"""Compile a declared state machine into a transition table that runs fast.

The machines are declared with python-statemachine, which states the rules readably and checks them when the
class is built; but one of its transitions costs hundreds of microseconds, and building an instance more.
:func:`compile_machine` reads a declared machine's structure once, at import, into a :class:`Table` whose
:meth:`Table.fire` is a dict lookup and a short loop. The runtime uses only the tables; a property test checks
that each table and its declared machine agree.

A guarded transition names boolean *flags* (``cond="ending"``, ``unless="..."``) that the caller passes to
:meth:`Table.fire`; the declared machine reads the same names from its model.
"""

from __future__ import annotations

from typing import TypeAlias

import attrs
from statemachine import StateMachine

from dial_runtime.errors import IllegalTransition

__all__ = ["Guard", "Table", "Transition", "compile_machine"]

_Branch: TypeAlias = tuple[str, tuple[str, ...], tuple[str, ...]]
_Route: TypeAlias = str | tuple[_Branch, ...]


@attrs.frozen(kw_only=True)
class Transition:
    """One declared transition: on ``event``, ``source`` goes to ``target`` when every flag in ``cond`` is true
    and every flag in ``unless`` is false."""

    source: str
    event: str
    target: str
    cond: tuple[str, ...] = ()
    unless: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class Table:
    """A machine's transitions as plain data, with the lookups the runtime needs.

    ``transitions`` keeps declaration order; for one state and event, the guarded transitions are tried in that
    order and the first whose conditions hold wins. ``flags`` is every flag name a guard mentions.
    """

    name: str
    initial: str
    states: tuple[str, ...]
    finals: frozenset[str]
    events: frozenset[str]
    transitions: tuple[Transition, ...]
    flags: frozenset[str] = attrs.field(init=False)
    _routes: dict[tuple[str, str], _Route] = attrs.field(init=False, repr=False, eq=False)
    _allowed: dict[str, frozenset[str]] = attrs.field(init=False, repr=False, eq=False)
    _next: dict[str, frozenset[str]] = attrs.field(init=False, repr=False, eq=False)
    _taken: dict[tuple[object, ...], str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        known = set(self.states)
        unknown = (
            {self.initial}
            | self.finals
            | {t.source for t in self.transitions}
            | {t.target for t in self.transitions}
        ) - known
        if unknown:
            raise ValueError(f"{self.name}: transitions or finals name unknown states {sorted(unknown)}")
        if undeclared := {t.event for t in self.transitions} - self.events:
            raise ValueError(f"{self.name}: transitions name undeclared events {sorted(undeclared)}")
        branches: dict[tuple[str, str], list[_Branch]] = {}
        for t in self.transitions:
            branches.setdefault((t.source, t.event), []).append((t.target, t.cond, t.unless))
        routes: dict[tuple[str, str], _Route] = {}
        for key, found in branches.items():
            target, cond, unless = found[0]
            routes[key] = target if not (cond or unless) else tuple(found)
        allowed: dict[str, set[str]] = {state: set() for state in self.states}
        for source, event in branches:
            allowed[source].add(event)
        object.__setattr__(self, "flags", frozenset(f for t in self.transitions for f in (*t.cond, *t.unless)))
        object.__setattr__(self, "_routes", routes)
        object.__setattr__(self, "_allowed", {state: frozenset(events) for state, events in allowed.items()})
        following: dict[str, set[str]] = {state: set() for state in self.states}
        for t in self.transitions:
            following[t.source].add(t.target)
        object.__setattr__(self, "_next", {state: frozenset(targets) for state, targets in following.items()})
        object.__setattr__(self, "_taken", {})

    def fire(self, state: str, event: str, **flags: bool) -> str:
        """Return the state that ``event`` leads to from ``state``, given the guard ``flags`` (absent = False).

        Raises :class:`~dial_runtime.errors.IllegalTransition` when ``state`` has no transition for ``event`` or
        none of its guarded transitions' conditions hold, and ``TypeError`` for a flag no guard mentions.

        A transition taken is remembered by its state, event and flag values (a handful per call site), so the
        guards are read once for each combination: reading them each time cost the runtime three times as many
        steps in its table lookups. The key is flat (the flags' names, then their values): a tuple of pairs took
        twice as long to build, hash and compare.
        """
        key = (state, event, *flags, *flags.values()) if flags else (state, event)
        target = self._taken.get(key)
        if target is None:
            target = self._taken[key] = self._resolve(state, event, flags)
        return target

    def guard(self, event: str, *names: str) -> Guard:
        """``event`` with the flags its guards read (none: all false), named once, for a caller that fires it
        often: see :class:`Guard`."""
        return Guard(self, event, names)

    def _resolve(self, state: str, event: str, flags: dict[str, bool]) -> str:
        if flags and not self.flags.issuperset(flags):
            raise TypeError(f"{self.name}: unknown flags {sorted(set(flags) - self.flags)}")
        route = self._routes.get((state, event))
        if route is None:
            raise IllegalTransition(self.name, state, event)
        if isinstance(route, str):
            return route
        for target, cond, unless in route:
            for name in cond:
                if not flags.get(name, False):
                    break
            else:
                for name in unless:
                    if flags.get(name, False):
                        break
                else:
                    return target
        raise IllegalTransition(self.name, state, event)

    def allowed(self, state: str) -> frozenset[str]:
        """The events ``state`` has a transition for (some may still be refused by their guards)."""
        try:
            return self._allowed[state]
        except KeyError:
            raise ValueError(f"{self.name}: unknown state {state!r}") from None

    def sources(self, event: str) -> frozenset[str]:
        """The states that have a transition for ``event``."""
        if event not in self.events:
            raise ValueError(f"{self.name}: unknown event {event!r}")
        return frozenset(t.source for t in self.transitions if t.event == event)

    def targets(self, event: str) -> frozenset[str]:
        """The states ``event`` can lead to, from any state."""
        if event not in self.events:
            raise ValueError(f"{self.name}: unknown event {event!r}")
        return frozenset(t.target for t in self.transitions if t.event == event)

    def reachable(self, state: str) -> frozenset[str]:
        """The states one transition (any event, any flags) leads to from ``state``."""
        try:
            return self._next[state]
        except KeyError:
            raise ValueError(f"{self.name}: unknown state {state!r}") from None

    def is_final(self, state: str) -> bool:
        """Whether ``state`` ends the machine's life."""
        if state in self.finals:
            return True
        if state in self._allowed:
            return False
        raise ValueError(f"{self.name}: unknown state {state!r}")


class Guard(dict[object, str]):
    """One event of a :class:`Table` and the flags its guards read, in a fixed order, as a mapping:
    ``guard[state, *values]`` (``guard[state]`` when it names no flags) is the state the event leads to from
    ``state`` when the flags in :attr:`names` have ``values``, in their order: what :meth:`Table.fire` gives with
    them as keywords, and ``IllegalTransition`` where it raises it. Flags not named are false.

    The fold fires a table for nearly every event. Keyword flags make a call cost four times the instructions of
    the lookup it does, and a Python call is itself worth a dozen bytecodes: here a transition taken before is a
    dict's own lookup, in C, and the first lookup of each key resolves it through the table (``__missing__``)
    and remembers it (a refusal is not remembered). An unknown flag is a ``TypeError`` here, once, instead of at
    a lookup."""

    __slots__ = ("_table", "event", "names")

    def __init__(self, table: Table, event: str, names: tuple[str, ...]) -> None:
        super().__init__()
        if event not in table.events:
            raise ValueError(f"{table.name}: unknown event {event!r}")
        if not table.flags.issuperset(names):
            raise TypeError(f"{table.name}: unknown flags {sorted(set(names) - table.flags)}")
        self._table = table
        self.event = event
        self.names = names

    def __missing__(self, key: object) -> str:
        if not self.names:
            state, values = key, ()
        elif isinstance(key, tuple) and len(key) == len(self.names) + 1:
            state, values = key[0], key[1:]
        else:
            raise TypeError(
                f"{self._table.name}: {self.event!r} takes a state and a value for each of {self.names}"
            )
        if not isinstance(state, str):
            raise IllegalTransition(self._table.name, repr(state), self.event)
        target = self[key] = self._table._resolve(state, self.event, dict(zip(self.names, values, strict=True)))
        return target

    def fire(self, state: str, *values: bool) -> str:
        """``self[state, *values]``: for a caller that does not fire it often."""
        key = (state, *values) if self.names else state
        return self[key]


def compile_machine(cls: type[StateMachine]) -> Table:
    """Read the declared machine ``cls`` into a :class:`Table`.

    Finals are the states declared ``final=True`` plus the ids in the class attribute ``terminal_states``, for
    states that end the machine's life yet keep self-transitions (python-statemachine forbids transitions out
    of a final state). Only what a table can reproduce is accepted: flat states, one target per transition,
    named events, and guards that are bare flag names; anything else raises ``TypeError``.
    """
    states = tuple(state.id for state in cls.states)
    finals = {state.id for state in cls.states if state.final}
    terminal: tuple[str, ...] = tuple(getattr(cls, "terminal_states", ()))
    transitions: list[Transition] = []
    for state in cls.states:
        if state.states:
            raise TypeError(f"{cls.__name__}: state {state.id!r} is compound; a table holds flat states only")
        for declared in state.transitions:
            where = f"{cls.__name__}: transition {declared}"
            if len(declared.targets) != 1 or declared.is_eventless or list(declared.validators):
                raise TypeError(
                    f"{where}: only single-target, event-driven transitions without validators compile"
                )
            cond: list[str] = []
            unless: list[str] = []
            for spec in declared.cond:
                if not (isinstance(spec.func, str) and spec.func.isidentifier()):
                    raise TypeError(f"{where}: guard {spec.func!r} is not a bare flag name")
                (cond if spec.expected_value else unless).append(spec.func)
            for event in declared.events:
                transitions.append(
                    Transition(
                        source=state.id,
                        event=event.id,
                        target=declared.targets[0].id,
                        cond=tuple(cond),
                        unless=tuple(unless),
                    )
                )
    return Table(
        name=cls.__name__,
        initial=cls.initial_state.id,
        states=states,
        finals=frozenset(finals | set(terminal)),
        events=frozenset(t.event for t in transitions),
        transitions=tuple(transitions),
    )
