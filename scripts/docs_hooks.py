"""MkDocs hooks for the documentation site: the state machines' diagrams are generated into ``diagrams/`` at the
repository's root (``dial-runtime diagrams``, kept fresh by a test), and the site serves those very files under
``diagrams/`` rather than a copy that could go stale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

DIAGRAMS = Path(__file__).resolve().parents[1] / "diagrams"


def on_files(files: Files, config: Any) -> Files:
    for svg in sorted(DIAGRAMS.glob("*.svg")):
        files.append(File.generated(config, f"diagrams/{svg.name}", abs_src_path=str(svg)))
    return files
