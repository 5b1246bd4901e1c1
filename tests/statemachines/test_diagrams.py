"""The committed diagrams are fresh renderings of the machines, and the renderings say what the machines do."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
from statemachine import State, StateMachine

from dial_runtime.statemachines import compile_machine
from dial_runtime.statemachines.diagrams import MACHINES, render_dot, render_mermaid, svg_stamp, write_diagrams

DIAGRAMS = Path(__file__).resolve().parents[2] / "diagrams"
REGENERATE = "stale: run `dial-runtime diagrams --out diagrams` and commit the result"
SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize("name", MACHINES)
@pytest.mark.parametrize(("suffix", "render"), [(".dot", render_dot), (".mmd", render_mermaid)])
def test_committed_source_is_fresh(name: str, suffix: str, render: Callable[[type[StateMachine]], str]) -> None:
    path = DIAGRAMS / f"{name}{suffix}"
    assert path.is_file(), f"{path.name} is missing: run `dial-runtime diagrams --out diagrams`"
    assert path.read_text(encoding="utf-8") == render(MACHINES[name]), f"{path.name} is {REGENERATE}"


@pytest.mark.parametrize("name", MACHINES)
def test_committed_svg_is_rendered_from_the_current_dot(name: str) -> None:
    path = DIAGRAMS / f"{name}.svg"
    assert path.is_file(), f"{path.name} is missing: run `dial-runtime diagrams --out diagrams`"
    svg = path.read_text(encoding="utf-8")
    assert svg_stamp(render_dot(MACHINES[name])) in svg, f"{path.name} is {REGENERATE}"
    root = ET.fromstring(svg.encode("utf-8"))
    assert root.tag == f"{SVG}svg"
    titles = {title.text for title in root.iter(f"{SVG}title")}
    assert set(compile_machine(MACHINES[name]).states) <= titles


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not on PATH")
def test_write_diagrams_renders_everything(tmp_path: Path) -> None:
    written = write_diagrams(tmp_path / "out")
    assert [path.name for path in written] == [
        f"{name}{suffix}" for name in MACHINES for suffix in (".dot", ".mmd", ".svg")
    ]
    for name, cls in MACHINES.items():
        dot_source = (tmp_path / "out" / f"{name}.dot").read_text(encoding="utf-8")
        assert dot_source == render_dot(cls)
        svg = (tmp_path / "out" / f"{name}.svg").read_text(encoding="utf-8")
        assert svg.count(svg_stamp(dot_source)) == 1
        assert ET.fromstring(svg.encode("utf-8")).tag == f"{SVG}svg"


def test_write_diagrams_without_svg_needs_no_graphviz(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    written = write_diagrams(tmp_path, svg=False)
    assert sorted(path.name for path in written) == sorted(
        f"{name}{suffix}" for name in MACHINES for suffix in (".dot", ".mmd")
    )


def test_write_diagrams_says_when_graphviz_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="Graphviz's `dot` is not on PATH"):
        write_diagrams(tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_svg_stamp_names_the_source() -> None:
    assert svg_stamp("digraph {}") != svg_stamp("digraph { a }")
    assert svg_stamp("digraph {}").startswith("<!--") and svg_stamp("digraph {}").endswith("-->")


# -- what the renderings show --------------------------------------------------------------------------------


class Guards(StateMachine):
    start = State(initial=True)
    left = State()
    right = State()
    stop = State(final=True)

    go = start.to(left, cond=["a", "b"]) | start.to(right, unless="a") | start.to(right, cond="c") | start.to(left)
    halt = stop.from_(left, right)


@pytest.mark.parametrize(
    "line",
    [
        '"__initial__" -> "start";',
        '"stop" [shape=doublecircle, style=solid, width=0.3];',
        '"start" -> "left" [label="go [a and b]\\ngo [else]"];',
        '"start" -> "right" [label="go [else if not a or c]"];',
        '"left" -> "stop" [label="halt"];',
    ],
)
def test_dot_shows_guards_and_finals(line: str) -> None:
    assert f"  {line}\n" in render_dot(Guards)


def test_dot_draws_only_finals_as_double_circles() -> None:
    for name, cls in MACHINES.items():
        table = compile_machine(cls)
        dot_source = render_dot(cls)
        doubles = {state for state in table.states if f'"{state}" [shape=doublecircle' in dot_source}
        assert doubles == table.finals, name


@pytest.mark.parametrize(
    "line",
    [
        "stateDiagram-v2",
        "[*] --> start",
        "start --> left : go [a and b]",
        "start --> left : go [else]",
        "start --> right : go [else if not a or c]",
        "stop --> [*]",
    ],
)
def test_mermaid_shows_guards_and_finals(line: str) -> None:
    assert line in {text.strip() for text in render_mermaid(Guards).splitlines()}


def test_life_draws_ended_as_terminal_with_its_self_transitions() -> None:
    dot_source = render_dot(MACHINES["conversation_life"])
    assert '"ended" [shape=doublecircle' in dot_source
    assert '"ended" -> "ended" [label="end"];' in dot_source
    assert '"ended" -> "ending" [label="begin"];' in dot_source
    assert "    ended --> [*]" in render_mermaid(MACHINES["conversation_life"]).splitlines()
