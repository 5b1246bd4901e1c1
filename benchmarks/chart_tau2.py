"""Draw the codecs' tau2 comparison: each way's pass rate and proposals, per model, from ``bench_tau2.py`` runs.

    python benchmarks/chart_tau2.py benchmarks/results/tau2-codecs.jsonl -o docs/images/codecs-tau2.svg

Reads JSON Lines, one ``bench_tau2.py`` report a line (one per model), and writes one figure of two panels: the
pass rate of each way (DIAL, DIAL with the grammar, tool calls, JSON) and the proposals the agent made, each bar
labelled with how many of them were valid, grouped by way, one bar per model. The format follows the file's
suffix (SVG, PNG, ...); an SVG is written without a date, so the same reports draw the same file. Needs
matplotlib (the ``eval`` extra).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

#: The ways, in the order drawn, and their labels.
WAYS = {"dial": "DIAL", "dial+grammar": "DIAL + grammar", "tools": "tool calls", "json": "JSON schema"}


def read_runs(path: Path) -> list[dict[str, Any]]:
    """The reports of ``path``, one a line; ``ValueError`` naming the line that is not one."""
    runs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            run = json.loads(line)
        except ValueError as error:
            raise ValueError(f"{path}:{number}: not JSON: {error}") from None
        if not (isinstance(run, dict) and run.get("benchmark") == "tau2" and "model" in run):
            raise ValueError(f"{path}:{number}: not a bench_tau2.py report")
        runs.append(run)
    if not runs:
        raise ValueError(f"{path}: no reports")
    return runs


def draw(runs: list[dict[str, Any]], out: Path) -> None:
    """Write the figure of ``runs`` to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.hashsalt"] = "dial-runtime"  # ids stable from one drawing to the next
    ways = [way for way in WAYS if any(way in run for run in runs)]
    width = 0.8 / len(runs)
    figure, (passing, proposing) = plt.subplots(1, 2, figsize=(10, 4.2), layout="constrained")
    for place, run in enumerate(runs):
        label = run["model"].removesuffix(".gguf")
        if run.get("persona_model_file"):
            label += f" (the person: {run['persona_model_file'].removesuffix('.gguf')})"
        offsets = [index + (place - (len(runs) - 1) / 2) * width for index in range(len(ways))]
        figures = [run.get(way, {}) for way in ways]
        passing.bar(offsets, [each.get("pass_rate") or 0 for each in figures], width, label=label)
        made = [each.get("proposals") or 0 for each in figures]
        bars = proposing.bar(offsets, made, width, label=label)
        valid = [
            round((each.get("proposals_valid") or 0) * count) for each, count in zip(figures, made, strict=True)
        ]
        proposing.bar_label(
            bars, [f"{good}/{count}" if count else "" for good, count in zip(valid, made, strict=True)]
        )
    for axes, title in ((passing, "pass rate"), (proposing, "proposals (labelled: valid of them)")):
        axes.set_xticks(range(len(ways)), [WAYS[way] for way in ways])
        axes.set_title(title)
        axes.grid(axis="y", alpha=0.3)
    passing.set_ylim(0, 1)
    figure.legend(*passing.get_legend_handles_labels(), loc="outside lower center", fontsize="small")
    tasks = sorted({f"tasks {run['settings']['tasks']}, {run['date']}" for run in runs})
    figure.suptitle(f"tau2-bench airline ({'; '.join(tasks)}): small models on llama.cpp, each way of speaking")
    figure.savefig(out, metadata={"Date": None} if out.suffix == ".svg" else None)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="bench_tau2.py reports, one a line (JSON Lines)")
    parser.add_argument("-o", "--out", type=Path, required=True, help="the figure (.svg, .png, ...)")
    args = parser.parse_args(argv)
    try:
        runs = read_runs(args.results)
    except (OSError, ValueError) as error:
        print(f"chart_tau2: {error}", file=sys.stderr)
        return 1
    try:
        draw(runs, args.out)
    except ImportError:
        print("chart_tau2: needs matplotlib: pip install 'dial-runtime[eval]'", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
