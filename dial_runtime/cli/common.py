"""What several commands share: reading a JSON Lines log file, the options of an agent, an MCP domain and a
streamed reply, and who is at the terminal."""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._command import _CommandError, _usage
from ..llm.codecs import CODECS

if TYPE_CHECKING:
    from ..stores.jsonl import LogFile

#: The help of every ``--store`` that reads a stored conversation.
STORE_HELP = "the store: memory:, sqlite:PATH or postgresql://..."


def login_name() -> str | None:
    """The name of the person at this terminal (their login name), ``None`` when the system knows none."""
    try:
        return getpass.getuser() or None
    except (KeyError, OSError):
        return None


def without_terminal_extra(command: str, error: ModuleNotFoundError) -> int:
    """Say in one line how to install what the terminal surface needs (exit 2); re-raise any other missing
    module."""
    if (error.name or "").partition(".")[0] not in ("rich", "prompt_toolkit"):
        raise error
    print(
        f"dial-runtime {command}: the terminal surface needs rich and prompt_toolkit: "
        "pip install 'dial-runtime[terminal]'",
        file=sys.stderr,
    )
    return 2


def chat_agent_options(args: argparse.Namespace) -> dict[str, Any]:
    """``ChatAgent``'s keyword arguments from ``--server``, ``--grammar`` (``domain``: ``constrain``, for the
    domain's grammar once the domain is known; a file: its GBNF text) and the generation settings; refused for a
    ``script:`` agent, which generates nothing."""
    settings = {
        "server": args.server,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "seed": args.seed,
        "stop": args.stop,
    }
    options: dict[str, Any] = {name: value for name, value in settings.items() if value is not None}
    if args.codec is not None:
        options["codec"] = args.codec
    if args.grammar == "domain":
        options["constrain"] = True
    elif args.grammar == "off":
        options["constrain"] = False
    elif args.grammar is not None:
        try:
            raw = Path(args.grammar).read_bytes()
        except OSError as error:
            _usage(f"--grammar: cannot read {args.grammar}: {error.strerror or error}")
        try:
            options["grammar"] = raw.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            _usage(f"--grammar: {args.grammar} is not UTF-8 text (at byte {error.start})")
    if options and args.agent.startswith("script:"):
        _usage(
            "--server, --codec, --grammar and the generation settings are for a model server; "
            "script:FILE takes none"
        )
    return options


def check_mcp_options(args: argparse.Namespace) -> None:
    """``--trust-read-only`` and ``--mcp-log`` speak of the ``--mcp`` server: refused without one."""
    if args.mcp is None and (args.trust_read_only or args.mcp_log):
        _usage(f"{'--trust-read-only' if args.trust_read_only else '--mcp-log'} needs --mcp")


def add_stream_deadlines(parser: argparse.ArgumentParser, recorded: str) -> None:
    """The deadlines of a streamed reply: the whole reply's, and the silence allowed between its chunks."""
    parser.add_argument(
        "--reply-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help=f"seconds a streamed reply may take in all{recorded} (default: 300)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help=f"seconds a streamed reply may go silent{recorded} (default: 30)",
    )


def add_agent_options(parser: argparse.ArgumentParser) -> None:
    """What goes with every request to a model server: the grammar, how to send it, the generation settings."""
    parser.add_argument(
        "--codec",
        choices=CODECS,
        help="how the model is spoken to: tools (native tool calls), json (structured output) or dial (the "
        "model writes DIAL); default: "
        "the URI's ?codec=, else tools for openai: and dial for the others",
    )
    parser.add_argument(
        "--grammar",
        metavar="off|domain|FILE",
        help="constrain DIAL replies: domain (the grammar of valid DIAL for the domain), or a file of GBNF "
        "(llama.cpp, vLLM; default: domain for llamacpp: URIs speaking DIAL, else off)",
    )
    parser.add_argument(
        "--server",
        metavar="openai|llamacpp|vllm|ollama",
        help="the kind of server, which says how the grammar is sent (default: the URI's scheme; openai for "
        "http(s) URIs)",
    )
    parser.add_argument(
        "--temperature", type=float, metavar="T", help="sampling temperature (default: the server's)"
    )
    parser.add_argument(
        "--top-p", type=float, metavar="P", help="nucleus sampling's top_p (default: the server's)"
    )
    parser.add_argument("--seed", type=int, metavar="N", help="the sampling seed (default: the server's)")
    parser.add_argument(
        "--max-tokens", type=int, metavar="N", help="tokens one reply may take at most (default: the server's)"
    )
    parser.add_argument(
        "--stop",
        action="append",
        metavar="TEXT",
        help="text at which the server stops generating (repeat for more)",
    )


def add_mcp_options(command: argparse.ArgumentParser, served: Any) -> None:
    """``--mcp`` (in the group ``served``, beside ``--domain``), ``--mcp-log`` and ``--trust-read-only``."""
    served.add_argument(
        "--mcp",
        metavar="'COMMAND ARGS...'|URL",
        help="an MCP server's tools as the domain: a command to start (stdio) or an http(s) URL (streamable HTTP)",
    )
    command.add_argument(
        "--mcp-log",
        metavar="FILE",
        help="append the MCP server's standard error here (default: discarded)",
    )
    command.add_argument(
        "--trust-read-only",
        action="store_true",
        help="run the --mcp server's tools it marks read-only without asking (MCP annotations are the server's "
        "hints: by default every tool waits for the person)",
    )


def read_log_file(path: str) -> LogFile:
    """What a JSON Lines log holds, each entry checked, its hash chain too (a version-2 file), and the log
    checked as a whole (see ``check_log``)."""
    from ..stores.jsonl import check_log, read_jsonl

    try:
        with open(path, encoding="utf-8") as file:
            read = read_jsonl(file)
    except FileNotFoundError:
        _usage(f"cannot read {path}: no such file")
    except OSError as error:
        raise _CommandError(f"cannot read {path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise _CommandError(f"{path} is not UTF-8 text (at byte {error.start})") from None
    except ValueError as error:
        raise _CommandError(f"{path}: {error}") from None
    try:
        check_log(read.entries)
    except ValueError as error:
        raise _CommandError(f"{path}: {error}") from None
    return read
