"""Scenarios (m) and (r) of ``bench_runtime.py`` for a base commit and the working tree, side by side: prints one
JSON line.

Bytes held per finished conversation after one ``say`` (tracemalloc): (m) everything the program holds for it,
the application's agent, domain and person's function included; (r) what the runtime holds (those made before
the count starts). Each side runs in an interpreter of its own, with the side's package first on ``sys.path`` and
this checkout's ``bench_runtime.py``, over ``--conversations`` conversations (default 1,000). Memory, unlike time,
does not swing with the machine's load: one run per side is the measure. ``--smoke`` runs small sizes and compares
with ``HEAD`` unless ``--base`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_compare import BENCHMARKS, CompareError, export

#: Measures both scenarios with the package found at argv[1] over argv[3] conversations; prints them as JSON.
MEASURE = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import bench_runtime
count = int(sys.argv[3])
print(json.dumps({"m": bench_runtime.scenario_m(count), "r": bench_runtime.scenario_r(count)}))
"""


def measure(tree: Path, conversations: int) -> dict[str, float]:
    """Scenarios (m) and (r), in bytes per conversation, with the package in ``tree``."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(tree), str(BENCHMARKS), str(conversations)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tree,
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise CompareError(f"the measurement failed: {lines[-1] if lines else done.returncode}")
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base", help="the commit to compare with (default: HEAD with --smoke)")
    parser.add_argument("--conversations", type=int, help="conversations measured per side (default: 1000)")
    parser.add_argument("--smoke", action="store_true", help="small sizes, to check the benchmark runs")
    args = parser.parse_args()
    base = args.base or ("HEAD" if args.smoke else None)
    if base is None:
        parser.error("--base is required (or --smoke, which compares with HEAD)")
    conversations = args.conversations or (50 if args.smoke else 1000)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            old = measure(export(base, Path(scratch)), conversations)
            new = measure(BENCHMARKS.parent, conversations)
    except CompareError as error:
        sys.exit(f"bench_memory: {error}")
    print(
        json.dumps(
            {
                "benchmark": "memory",
                "python": platform.python_version(),
                "smoke": args.smoke,
                "base": base,
                "conversations": conversations,
                "m_bytes": {"base": round(old["m"]), "new": round(new["m"])},
                "r_runtime_bytes": {"base": round(old["r"]), "new": round(new["r"])},
                "targets": {"m_bytes": 3000},
            }
        )
    )


if __name__ == "__main__":
    main()
