"""``dial-runtime diagrams``: write the state machines (or a domain's flow) as .dot, .svg and .mmd files."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .._command import _CommandError, _usage
from ..domains.loading import load_flow


def _diagrams(args: argparse.Namespace) -> int:
    import shutil

    from ..statemachines.diagrams import write_diagrams, write_flow_diagram

    if not args.no_svg and shutil.which("dot") is None:
        raise _CommandError(
            "Graphviz's dot is not on PATH: install Graphviz to draw the .svg files, or pass --no-svg "
            "to write only the .dot and .mmd ones"
        )
    if args.flow is None:
        paths = write_diagrams(Path(args.out), svg=not args.no_svg)
    else:
        try:
            machine, actions = load_flow(args.flow)
        except ValueError as error:
            _usage(str(error))
        paths = write_flow_diagram(machine, Path(args.out), actions=actions, svg=not args.no_svg)
    for path in paths:
        print(path)
    return 0


def register(commands: Any) -> None:
    """Add ``diagrams``."""
    diagrams = commands.add_parser("diagrams", help="write the state machines as .dot, .svg and .mmd files")
    diagrams.add_argument("--out", default="diagrams", help="the directory to write (default: diagrams)")
    diagrams.add_argument("--no-svg", action="store_true", help="skip the .svg files (they need Graphviz)")
    diagrams.add_argument(
        "--flow",
        metavar="MODULE:CLASS",
        help="draw this domain flow (a StateMachine class, or a Domain with a flow)",
    )
    diagrams.set_defaults(run=_diagrams)
