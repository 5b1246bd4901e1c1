"""The dial-runtime command line: validate, demo, diagrams."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dial_runtime.cli import main

EXAMPLE = Path(__file__).parent.parent / "examples" / "reply.xml"


@pytest.mark.parametrize("strict", [False, True])
def test_the_shipped_example_is_valid(strict: bool, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLE), *(["--strict"] if strict else [])]) == 0
    assert "valid DIAL" in capsys.readouterr().out


def test_problems_are_one_line_each_with_line_element_and_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = '<dial>\n  <dial-ask response-type="maybe">Q</dial-ask>\n  <dial-declare>{}</dial-declare>\n</dial>'
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["validate", "--strict", "-"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("line 1: dial:") for line in lines)
    assert any(line.startswith("line 2: dial-ask: attribute 'response-type'") for line in lines)
    assert any(line.startswith("line 3: dial-declare: missing required attribute 'context-key'") for line in lines)


def test_a_missing_file_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "no/such/file.xml"]) == 2
    assert "cannot read no/such/file.xml" in capsys.readouterr().err


def test_the_demo_tells_the_whole_story(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    for line in [
        "you: add a note: buy milk",
        "agent proposes sg-1: Add the note 'buy milk'",
        "   you decide on sg-1: accept",
        "   ✓ done: Add the note 'buy milk' ({\"count\": 1})",
        "   (turn 2: the agent is told sg-1:done)",
        "   the edit was refused: Keep a note under 60 chars.",
        "agent proposes sg-3: Remove the note 'buy milk'  [DESTRUCTIVE]",
        "   – dismissed: Remove the note 'buy milk'",
        "agent proposes sg-4: List the notes  [read-only, runs at once]",
        "   1. The dentist note",
        "   you answer: dentist",
        "agent proposes sg-5: Share the note 'call the dentist today'  [hand-off]",
        "   (the agent ends the conversation)",
        "   [ended after 3 turn(s), 4 outcome(s)]",
    ]:
        assert line in out.splitlines(), line


def test_diagrams_are_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    svg = shutil.which("dot") is not None
    assert main(["diagrams", "--out", str(tmp_path), *([] if svg else ["--no-svg"])]) == 0
    written = {path.name for path in tmp_path.iterdir()}
    assert {"suggestion_lifecycle.dot", "turn_loop.mmd", "conversation_life.dot"} <= written
    assert ("turn_loop.svg" in written) == svg


def test_the_console_script_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dial_runtime.cli", "validate", str(EXAMPLE)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def _run_without_the_terminal_extra(*argv: str) -> subprocess.CompletedProcess[str]:
    """The command line in a process where rich and prompt_toolkit cannot be imported."""
    code = (
        "import sys\n"
        "sys.modules['rich'] = sys.modules['prompt_toolkit'] = None\n"
        "from dial_runtime.cli import main\n"
        f"sys.exit(main({list(argv)!r}))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "argv",
    [
        ("chat", "--agent", "ollama:llama3.1", "--domain", "dial_runtime.demo:NotesDomain"),
        ("demo", "--interactive"),
    ],
    ids=["chat", "demo-interactive"],
)
def test_the_terminal_surface_without_its_extra_says_how_to_install_it(argv: tuple[str, ...]) -> None:
    done = _run_without_the_terminal_extra(*argv)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"dial-runtime {' '.join(argv[:2]) if argv[0] == 'demo' else 'chat'}: the terminal surface needs rich and "
        "prompt_toolkit: pip install 'dial-runtime[terminal]'"
    ]


def test_the_quick_start_demo_needs_no_terminal_extra() -> None:
    done = _run_without_the_terminal_extra("demo")
    assert done.returncode == 0, done.stderr
    assert "you: add a note: buy milk" in done.stdout.splitlines()
