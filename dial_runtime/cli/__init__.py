"""The ``dial-runtime`` command: validate DIAL, chat with an agent, run the demo conversation, write the lifecycle
diagrams, list, print, export, import and replay stored conversations, and verify and sign their hash chains.

Every failure is one line on standard error, ``dial-runtime COMMAND: what went wrong``, and a non-zero exit status:
2 when the command line itself is wrong (an unknown option, a malformed URL or ``module:factory``, a file that
does not exist), 1 for everything else (a store that cannot be used, a refused log, a divergent replay, an
invalid envelope); ``verify`` and ``sign`` keep 1 for a chain that does not match, and a store they cannot read
is 2. Set ``DIAL_RUNTIME_TRACEBACK=1`` to see the traceback behind an unexpected one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from .._command import USAGE, _CommandError
from ..errors import DialError
from . import (
    audit,
    chain,
    chat,
    decide,
    demo,
    diagrams,
    inbox,
    log,
    mcp_server,
    replay,
    serve,
    transfer,
    validate,
    worker,
)

__all__ = ["BROKEN_PIPE", "build_parser", "console", "main"]

#: Each command's module, in the order ``--help`` lists them: each adds its parsers with ``register``.
COMMANDS = (
    validate,
    chat,
    demo,
    diagrams,
    decide,
    inbox,
    log,
    replay,
    transfer,
    audit,
    chain,
    worker,
    serve,
    mcp_server,
)


class _OneLineParser(argparse.ArgumentParser):
    """argparse's parser, refusing a command line in one line (``dial-runtime serve: argument --port: invalid int
    value: 'x'``) and exit status 2, like every other failure, rather than its usage text; ``--help`` has that."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE, f"{self.prog}: {' '.join(message.split())} (see {self.prog} --help)\n")


def _version() -> str:
    """The installed distribution's version (``unknown`` when the package runs from a tree never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dial-runtime")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The command line's argument parser: each command's module adds its own, then ``eval``'s."""
    parser = _OneLineParser(prog="dial-runtime", description=__doc__)
    parser.add_argument("--version", action="version", version=f"dial-runtime {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(commands)
    from ..evaluate.command import add_eval_parser

    add_eval_parser(commands)
    return parser


#: The exit status after standard output closed early (``dial-runtime log ... | head``): a shell's for SIGPIPE.
BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return its exit status. Every failure is one line on standard error."""
    args = build_parser().parse_args(argv)
    name = f"dial-runtime {args.command}"
    try:
        status: int = args.run(args)
        sys.stdout.flush()
        return status
    except (Exception, KeyboardInterrupt) as raised:
        error = _leaf(raised)
        if isinstance(error, BrokenPipeError):
            _drop_stdout()
            return BROKEN_PIPE
        if isinstance(error, KeyboardInterrupt):
            print(f"{name}: interrupted", file=sys.stderr)
            return 130
        if isinstance(error, _CommandError):
            message, status = str(error), error.status
        elif isinstance(error, DialError):
            message, status = " ".join(str(error).split()) or type(error).__name__, 1
        else:  # what a callback or a component raised: its words, and its kind only when it has none
            message, status = " ".join(str(error).split()) or type(error).__name__, 1
        print(f"{name}: {message}", file=sys.stderr)
        if os.environ.get("DIAL_RUNTIME_TRACEBACK"):
            traceback.print_exception(raised)
        return status


def _leaf(error: BaseException) -> BaseException:
    """The exception inside groups of one (task groups wrap what their tasks raise)."""
    inner: Any = getattr(error, "exceptions", None)  # a BaseExceptionGroup (the exceptiongroup backport on 3.10)
    while isinstance(inner, tuple) and len(inner) == 1 and isinstance(inner[0], BaseException):
        error = inner[0]
        inner = getattr(error, "exceptions", None)
    return error


def _drop_stdout() -> None:
    """Point standard output at /dev/null, so the interpreter's last flush finds no closed pipe to fail on."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def console() -> None:
    """The console script's entry point."""
    sys.exit(main())
