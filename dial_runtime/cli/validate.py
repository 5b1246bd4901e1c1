"""``dial-runtime validate``: check a DIAL envelope against the schema."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .._command import _CommandError, _usage
from ..language.schema import validate


def _validate(args: argparse.Namespace) -> int:
    if args.file == "-":
        stdin = getattr(sys.stdin, "buffer", None)
        text = sys.stdin.read() if stdin is None else decode(stdin.read(), "standard input")
    else:
        try:
            raw = Path(args.file).read_bytes()
        except OSError as error:
            _usage(f"cannot read {args.file}: {error.strerror}")
        text = decode(raw, args.file)
    issues = validate(text, strict=args.strict)
    for issue in issues:
        print(f"line {issue.line if issue.line is not None else '?'}: {issue.message}")
    if not issues:
        print(f"{args.file}: valid DIAL ({'strict' if args.strict else 'lenient'} schema)")
    return 1 if issues else 0


def decode(raw: bytes, name: str) -> str:
    """``raw`` as UTF-8 text (a byte-order mark dropped); a one-line error saying where it is not."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise _CommandError(
            f"{name} is not UTF-8 text (byte 0x{raw[error.start]:02x} at offset {error.start}); "
            "DIAL is read as UTF-8"
        ) from None


def register(commands: Any) -> None:
    """Add ``validate``."""
    check = commands.add_parser("validate", help="check a DIAL envelope against the schema")
    check.add_argument("file", help="a file holding one <dial> envelope, or - for standard input")
    check.add_argument("--strict", action="store_true", help="use the spec's strict schema")
    check.set_defaults(run=_validate)
