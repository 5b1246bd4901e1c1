"""``benchmarks/chart_tau2.py``: the codecs' tau2 figure the docs show, drawn from ``bench_tau2.py`` reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "chart_tau2.py"
RESULTS = Path(__file__).parents[2] / "benchmarks" / "results" / "tau2-codecs.jsonl"

pytest.importorskip("matplotlib")


def chart(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, argv)], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_measured_reports_draw_the_same_figure_each_time(tmp_path: Path) -> None:
    first, second = tmp_path / "a.svg", tmp_path / "b.svg"
    assert chart(RESULTS, "-o", first).returncode == 0
    assert chart(RESULTS, "-o", second).returncode == 0
    drawn = first.read_text(encoding="utf-8")
    assert drawn == second.read_text(encoding="utf-8") and "<svg" in drawn
    for run in map(json.loads, RESULTS.read_text(encoding="utf-8").splitlines()):
        assert run["model"].removesuffix(".gguf") in drawn  # each model in the legend


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("", "no reports"),
        ("{not json\n", ":1: not JSON"),
        ('{"benchmark": "codecs"}\n', ":1: not a bench_tau2.py"),
    ],
)
def test_what_is_not_a_report_is_refused_in_one_line(tmp_path: Path, content: str, says: str) -> None:
    given = tmp_path / "runs.jsonl"
    given.write_text(content, encoding="utf-8")
    ran = chart(given, "-o", tmp_path / "out.svg")
    assert ran.returncode == 1 and says in ran.stderr and len(ran.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.svg").exists()
