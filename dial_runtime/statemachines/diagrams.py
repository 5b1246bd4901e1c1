"""Diagrams of the lifecycle machines, generated from their definitions.

Each machine is drawn from its compiled :class:`~dial_runtime.statemachines.Table`, so a diagram shows exactly
the transitions the runtime runs. The output is deterministic (declaration order, no object ids), which lets a
test fail when a committed diagram is stale. Guards appear on edge labels: ``[flag]`` for the first guarded
transition of a state and event, ``[else if flag]`` and ``[else]`` for those tried after it. Final states are
double circles.

SVG comes from Graphviz's ``dot``, whose output varies with its version; each SVG therefore carries the sha256
of the DOT source it was rendered from (:func:`svg_stamp`), and staleness is checked against that.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from statemachine import StateMachine

from dial_runtime.statemachines import (
    CallGate,
    ClaimRules,
    ConversationLife,
    DecisionRules,
    SuggestionLifecycle,
    Table,
    TurnLoop,
    compile_machine,
)

__all__ = ["MACHINES", "render_dot", "render_mermaid", "svg_stamp", "write_diagrams", "write_flow_diagram"]

MACHINES: dict[str, type[StateMachine]] = {
    "suggestion_lifecycle": SuggestionLifecycle,
    "turn_loop": TurnLoop,
    "conversation_life": ConversationLife,
    "call_gate": CallGate,
    "decision_rules": DecisionRules,
    "claim_rules": ClaimRules,
}
"""The machines drawn, by the file name their diagrams get."""

_FONT = "Helvetica"


def _guard(cond: tuple[str, ...], unless: tuple[str, ...]) -> str:
    return " and ".join([*cond, *(f"not {name}" for name in unless)])


def _edges(table: Table, actions: Mapping[str, Sequence[str]] | None = None) -> list[tuple[str, str, list[str]]]:
    """The edges to draw as (source, target, label lines), in declaration order.

    Transitions from one state to one target share an edge, one label line per event; consecutive guarded
    transitions of one event to one target share a line, their guards joined by ``or``. ``actions`` names, by
    event, the domain actions bound to it, shown after the event: ``confirm (confirm-order)``.
    """
    by_route: dict[tuple[str, str], list[tuple[str, tuple[str, ...], tuple[str, ...]]]] = {}
    for t in table.transitions:
        by_route.setdefault((t.source, t.event), []).append((t.target, t.cond, t.unless))
    edges: dict[tuple[str, str], list[str]] = {}
    for (source, event), branches in by_route.items():
        lines: list[tuple[str, str, list[str]]] = []
        for position, (target, cond, unless) in enumerate(branches):
            guard = _guard(cond, unless)
            keyword = "" if position == 0 else "else if " if guard else "else"
            if guard and lines and lines[-1][0] == target and lines[-1][1] == keyword:
                lines[-1][2].append(guard)
            else:
                lines.append((target, keyword, [guard] if guard else []))
        for target, keyword, guards in lines:
            if len(guards) > 1:
                guards = [f"({g})" if " and " in g else g for g in guards]
            condition = f"{keyword}{' or '.join(guards)}"
            label = f"{event} [{condition}]" if condition else event
            if actions and actions.get(event):
                label += f" ({', '.join(actions[event])})"
            edges.setdefault((source, target), []).append(label)
    return [(source, target, labels) for (source, target), labels in edges.items()]


def _quote(*lines: str) -> str:
    """A DOT string literal; several lines are joined by DOT's centred line break."""
    return '"' + "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"') for line in lines) + '"'


def render_dot(cls: type[StateMachine], actions: Mapping[str, Sequence[str]] | None = None) -> str:
    """The Graphviz DOT source of the declared machine ``cls`` (``actions``: see :func:`_edges`)."""
    table = compile_machine(cls)
    lines = [
        f"// {table.name}: generated from its declaration by `dial-runtime diagrams`.",
        f"digraph {_quote(table.name)} {{",
        f'  graph [rankdir=LR, fontname="{_FONT}", fontsize=12, label={_quote(table.name)}, labelloc=t];',
        f'  node [fontname="{_FONT}", fontsize=10, shape=box, style=rounded];',
        f'  edge [fontname="{_FONT}", fontsize=9];',
        '  "__initial__" [shape=point, width=0.12, label=""];',
    ]
    for state in table.states:
        attributes = " [shape=doublecircle, style=solid, width=0.3]" if state in table.finals else ""
        lines.append(f"  {_quote(state)}{attributes};")
    lines.append(f'  "__initial__" -> {_quote(table.initial)};')
    for source, target, labels in _edges(table, actions):
        lines.append(f"  {_quote(source)} -> {_quote(target)} [label={_quote(*labels)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_mermaid(cls: type[StateMachine], actions: Mapping[str, Sequence[str]] | None = None) -> str:
    """The Mermaid ``stateDiagram-v2`` source of the declared machine ``cls`` (``actions``: see :func:`_edges`)."""
    table = compile_machine(cls)
    lines = ["---", f"title: {table.name}", "---", "stateDiagram-v2", "    direction LR"]
    lines.append(f"    [*] --> {table.initial}")
    for source, target, labels in _edges(table, actions):
        lines.extend(f"    {source} --> {target} : {label}" for label in labels)
    lines.extend(f"    {state} --> [*]" for state in table.states if state in table.finals)
    return "\n".join(lines) + "\n"


def svg_stamp(dot_source: str) -> str:
    """The XML comment an SVG carries to name the DOT source it was rendered from."""
    digest = hashlib.sha256(dot_source.encode("utf-8")).hexdigest()
    return f"<!-- dial-runtime diagram source sha256:{digest} -->"


def _render_svg(dot: str, name: str, dot_source: str) -> str:
    done = subprocess.run([dot, "-Tsvg"], input=dot_source, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"Graphviz failed to render {name}.dot (exit {done.returncode}): {done.stderr.strip()}")
    svg = done.stdout
    at = svg.find("<svg")
    if at < 0:
        raise RuntimeError(f"Graphviz produced no <svg> element for {name}.dot")
    return f"{svg[:at]}{svg_stamp(dot_source)}\n{svg[at:]}"


def write_diagrams(out_dir: Path, *, svg: bool = True) -> list[Path]:
    """Write ``<name>.dot``, ``<name>.mmd`` and (with ``svg``) ``<name>.svg`` for every machine in
    :data:`MACHINES` into ``out_dir``, creating it if needed; return the paths written.

    Raises ``FileNotFoundError`` before writing anything when ``svg`` is asked for and Graphviz's ``dot`` is
    not on ``PATH``.
    """
    return _write(MACHINES, out_dir, dot=_dot(svg))


def _dot(svg: bool) -> str | None:
    """Graphviz's ``dot`` when SVG is asked for; ``FileNotFoundError`` when it is asked for and missing."""
    dot = shutil.which("dot")
    if svg and dot is None:
        raise FileNotFoundError(
            "Graphviz's `dot` is not on PATH: install Graphviz (e.g. `apt-get install graphviz`) to render the "
            "SVG diagrams, or write only the .dot and .mmd files with svg=False"
        )
    return dot if svg else None


def write_flow_diagram(
    cls: type[StateMachine], out_dir: Path, *, actions: Mapping[str, Sequence[str]] | None = None, svg: bool = True
) -> list[Path]:
    """Write a domain flow's diagram as ``<Class>.dot``, ``.mmd`` and (with ``svg``) ``.svg`` into ``out_dir``,
    each transition labelled with the actions bound to its event; as :func:`write_diagrams` otherwise."""
    return _write({cls.__name__: cls}, out_dir, dot=_dot(svg), actions=actions)


def _write(
    machines: Mapping[str, type[StateMachine]],
    out_dir: Path,
    *,
    dot: str | None,
    actions: Mapping[str, Sequence[str]] | None = None,
) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name, cls in machines.items():
        dot_source = render_dot(cls, actions)
        outputs = {".dot": dot_source, ".mmd": render_mermaid(cls, actions)}
        if dot is not None:
            outputs[".svg"] = _render_svg(dot, name, dot_source)
        for suffix, text in outputs.items():
            path = out_dir / f"{name}{suffix}"
            path.write_text(text, encoding="utf-8", newline="\n")
            written.append(path)
    return written
