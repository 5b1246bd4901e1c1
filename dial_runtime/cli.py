"""The ``dial-runtime`` command: validate DIAL, run the demo conversation, write the lifecycle diagrams."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import trio

from .language.schema import validate


def _validate(args: argparse.Namespace) -> int:
    if args.file == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(args.file).read_text(encoding="utf-8")
        except OSError as error:
            print(f"dial-runtime validate: cannot read {args.file}: {error.strerror}", file=sys.stderr)
            return 2
    issues = validate(text, strict=args.strict)
    for issue in issues:
        print(f"line {issue.line if issue.line is not None else '?'}: {issue.message}")
    if not issues:
        print(f"{args.file}: valid DIAL ({'strict' if args.strict else 'lenient'} schema)")
    return 1 if issues else 0


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    trio.run(run_demo)
    return 0


def _diagrams(args: argparse.Namespace) -> int:
    from .diagrams import write_diagrams

    for path in write_diagrams(Path(args.out), svg=not args.no_svg):
        print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command line's argument parser."""
    parser = argparse.ArgumentParser(prog="dial-runtime", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser("validate", help="check a DIAL envelope against the schema")
    check.add_argument("file", help="a file holding one <dial> envelope, or - for standard input")
    check.add_argument("--strict", action="store_true", help="use the spec's strict schema")
    check.set_defaults(run=_validate)

    demo = commands.add_parser("demo", help="hold the shipped example conversation and print its transcript")
    demo.set_defaults(run=_demo)

    diagrams = commands.add_parser("diagrams", help="write the state machines as .dot, .svg and .mmd files")
    diagrams.add_argument("--out", default="diagrams", help="the directory to write (default: diagrams)")
    diagrams.add_argument("--no-svg", action="store_true", help="skip the .svg files (they need Graphviz)")
    diagrams.set_defaults(run=_diagrams)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return its exit status."""
    args = build_parser().parse_args(argv)
    status: int = args.run(args)
    return status


def console() -> None:
    """The console script's entry point."""
    sys.exit(main())


if __name__ == "__main__":
    console()
