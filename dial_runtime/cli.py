"""The ``dial-runtime`` command: validate DIAL, chat with an agent, run the demo conversation, write the lifecycle
diagrams."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import trio
import trio.testing

from .language.parser import parse
from .language.schema import validate
from .runtime.events import LogEntry, event_to_dict

if TYPE_CHECKING:
    from .surfaces.terminal import TerminalSurface


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


def _load_domain(spec: str) -> Any:
    """The domain ``module:factory`` names: the module is imported and ``factory()`` called."""
    module_name, _, factory_name = spec.partition(":")
    if not module_name or not factory_name:
        raise ValueError(f"--domain {spec!r}: expected module:factory, e.g. dial_runtime.demo:NotesDomain")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"--domain {spec!r}: cannot import {module_name}: {error}") from None
    factory: Any = module
    for name in factory_name.split("."):
        factory = getattr(factory, name, None)
    if not callable(factory):
        raise ValueError(f"--domain {spec!r}: {module_name} has no callable {factory_name}")
    return factory()


def _without_terminal_extra(command: str, error: ModuleNotFoundError) -> int:
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


def _chat(args: argparse.Namespace) -> int:
    try:
        from .surfaces.terminal import PlainAgent, TerminalSurface
    except ModuleNotFoundError as error:
        return _without_terminal_extra("chat", error)
    from .agents import agent_from_uri, history_from_log, system_prompt
    from .runtime import Conversation
    from .stores import open_store

    try:
        domain = _load_domain(args.domain)
        store = open_store(args.store) if args.store else None
    except ValueError as error:
        print(f"dial-runtime chat: {error}", file=sys.stderr)
        return 2
    if args.id and store is None:
        print("dial-runtime chat: --id needs --store", file=sys.stderr)
        return 2
    ident = args.id or uuid.uuid4().hex[:12]
    surface = TerminalSurface()

    async def hold() -> int:
        earlier = await store.read(ident) if store is not None else []
        try:
            agent = agent_from_uri(
                args.agent, system_prompt=system_prompt(domain), history=history_from_log(earlier)
            )
        except ValueError as error:
            print(f"dial-runtime chat: {error}", file=sys.stderr)
            return 2
        options: dict[str, Any] = {
            "agent": PlainAgent(agent) if args.no_stream else surface.streaming(agent),
            "domain": domain,
            "human": surface,
            "on_event": surface.on_event,
            "timeout": args.timeout,
        }
        async with agent:
            if store is None:
                await surface.chat(Conversation(**options))
                return 0
            try:
                conversation = await Conversation.open(store, ident, **options)
                print(f"conversation {ident} ({len(conversation.log)} earlier events) in {args.store}")
                await surface.take_up(conversation)
                await surface.chat(conversation)
            finally:
                await store.aclose()
        return 0

    try:
        return anyio.run(hold, backend="asyncio")
    finally:
        if args.transcript:
            surface.save(args.transcript)


async def _interactive_demo(surface: TerminalSurface) -> None:
    """The demo conversation with the person at the terminal deciding: each of the script's words gets its own
    recorded replies, so a decision that takes fewer turns does not shift the rest of the script (one that
    needs more finds no recorded reply, and that turn stops with the agent's error)."""
    from .agents import ScriptedAgent
    from .demo import SCRIPT, NotesDomain
    from .runtime import Conversation

    conversation = Conversation(
        agent=ScriptedAgent(()), domain=NotesDomain(), human=surface, on_event=surface.on_event
    )
    async with surface.interruptible():
        for words, replies in SCRIPT:
            if conversation.ended:
                break
            conversation.agent = ScriptedAgent(replies)
            surface.person(words)
            await surface.turn(conversation, words)


def _demo(args: argparse.Namespace) -> int:
    if args.interactive:
        try:
            from .surfaces.terminal import TerminalSurface
        except ModuleNotFoundError as error:
            return _without_terminal_extra("demo --interactive", error)
        anyio.run(_interactive_demo, TerminalSurface(), backend="asyncio")
        return 0
    from .demo import run_demo

    trio.run(run_demo)
    return 0


def _diagrams(args: argparse.Namespace) -> int:
    from .diagrams import write_diagrams

    for path in write_diagrams(Path(args.out), svg=not args.no_svg):
        print(path)
    return 0


def _read_log(url: str, conversation_id: str) -> list[LogEntry]:
    """The conversation's stored log; ``ValueError`` when the store holds no such conversation."""
    from .stores import open_store

    async def read() -> list[LogEntry]:
        store = open_store(url)
        try:
            return await store.read(conversation_id)
        finally:
            await store.aclose()

    entries = trio.run(read)
    if not entries:
        raise ValueError(f"{url} holds no conversation {conversation_id!r}")
    return entries


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _audit_detail(event: dict[str, Any]) -> tuple[str, str] | None:
    """What the audit trail says of an event (its label and details), or ``None`` for one a reviewer needs not see
    (the agent's words, replies as such, turn bookkeeping)."""
    kind, by = event["type"], f" by {event['by']}" if event.get("by") else ""
    if kind == "said":
        return "said", _json_text(event["text"])
    if kind == "resumed":
        return "resumed", f"with {event['call']}()"
    if kind == "ask":
        options = ", ".join(option["value"] for option in event["options"])
        unasked = "" if event["asked"] else " [not put to the person]"
        kinds = f"{event['response_type']}: {options}" if options else event["response_type"]
        return "asked", f"{event['id']} {_json_text(event['text'])} ({kinds}){unasked}"
    if kind == "answered":
        if event["expired"]:
            return "answered", f"{event['ask_id']}: no answer in time"
        said = _json_text(event["text"]) if event["text"] else "nothing (the question stands)"
        return "answered", f"{event['ask_id']}{by}: {said}"
    if kind == "proposed":
        text = f" {_json_text(event['text'])}" if event["text"] else ""
        return "proposed", f"{event['id']} {event['action']} {_json_text(event['payload'])}{text}"
    if kind == "suggestion":
        marks = " [destructive]" if event["destructive"] else ""
        if event["handoff"]:
            marks += " [hand-off: runs without asking]"
        elif not event["mutates"]:
            marks += " [read-only: runs without asking]"
        return "shown", f"{event['id']} {_json_text(event['preview'])}{marks}"
    if kind == "decided":
        subject, decision = event["suggestion_id"], event["decision"]
        if decision == "edit":
            before, after = _json_text(event["previous"]), _json_text(event["payload"])
            return "decided", f"{subject} edit{by}: {before} → {after}"
        if decision == "say":
            return "decided", f"{subject} say instead{by}: {_json_text(event['text'])}"
        if decision == "expire":
            return "decided", f"{subject} expired: no decision in time"
        return "decided", f"{subject} {decision}{by}"
    if kind == "refused":
        field = f" ({event['field']})" if event["field"] else ""
        reason = ": ".join(part for part in (f"{event['code'] or ''}{field}".strip(), event["hint"]) if part)
        return "refused", f"{event['suggestion_id']} {_json_text(event['payload'])}: {reason or 'no reason given'}"
    if kind == "deferred":
        return "deferred", f"{event['kind']} {event['subject_id']}"
    if kind == "action-started":
        edited = " (edited)" if event["edited"] else ""
        return "run", f"{event['suggestion_id']} {event['action']} {_json_text(event['payload'])}{edited}"
    if kind == "outcome":
        parts = [event["id"], event["status"]]
        if event["result"] is not None:
            parts.append(_json_text(event["result"]))
        parts.extend(
            f"{name}={_json_text(event[name])}" for name in ("error", "code", "field", "hint") if event[name]
        )
        parts.extend(flag for flag in ("edited", "expired") if event[flag])
        return "outcome", " ".join(parts)
    if kind == "sent":
        envelope = parse(event["message"])
        reports = [token for element in (envelope.elements if envelope else ()) for token in element.yields]
        return "sent", f"turn {event['turn']}" + (f", reporting {', '.join(reports)}" if reports else "")
    if kind in ("no-reply", "send-failed", "interrupted"):
        return kind.replace("-", " "), f"turn {event['turn']}: {event.get('error') or event.get('reason')}"
    if kind == "reply-refused":
        return "reply refused", f"{event['reply_id']} (turn {event['turn']}): {event['reason']}"
    if kind == "turn-limit":
        return "turn limit", f"{event['turns']} turn(s) used"
    if kind == "declare":
        return "declared", f"{event['context_key']} = {_json_text(event['value'])}"
    if kind == "delegate":
        intent = f" ({event['intent']})" if event["intent"] else ""
        text = f": {_json_text(event['text'])}" if event["text"] else ""
        return "delegated", f"to {event['to']}{intent}{text}"
    if kind == "ended":
        return "ended", event["reason"]
    if kind == "finished":
        return "finished", f"{event['status']} after {event['turns']} turn(s)"
    return None


def audit_line(entry: LogEntry) -> str | None:
    """The audit trail's line for a log entry (``None`` when the event is not part of it): its time in ISO-8601
    UTC, its sequence number, what happened, to which suggestion or ask, and who decided."""
    detail = _audit_detail(event_to_dict(entry.event))
    if detail is None:
        return None
    when = datetime.fromtimestamp(entry.time, tz=timezone.utc).isoformat(timespec="milliseconds")
    label, text = detail
    return f"{when.replace('+00:00', 'Z')}  #{entry.seq:<4} {label:<13} {text}"


def _log(args: argparse.Namespace) -> int:
    try:
        entries = _read_log(args.store, args.id)
    except ValueError as error:
        print(f"dial-runtime log: {error}", file=sys.stderr)
        return 2
    for entry in entries:
        line = audit_line(entry)
        if line is not None:
            print(line)
    return 0


def _replay(args: argparse.Namespace) -> int:
    from .jsonl import import_jsonl
    from .replay import ReplayReport, replay

    try:
        if args.file is not None:
            with open(args.file, encoding="utf-8") as file:
                _, entries = import_jsonl(file)
        elif args.id is None:
            raise ValueError("replaying from a store needs the conversation's ID")
        else:
            entries = _read_log(args.store, args.id)
        domain = _load_domain(args.domain)
    except (OSError, ValueError) as error:
        print(f"dial-runtime replay: {error}", file=sys.stderr)
        return 2

    async def run() -> ReplayReport:
        return await replay(
            entries,
            domain=domain,
            max_turns=args.max_turns,
            timeout=args.timeout,
            decide_timeout=args.decide_timeout,
        )

    report = trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))
    print(report)
    return 0 if report.ok else 1


def _export(args: argparse.Namespace) -> int:
    from .jsonl import export_jsonl

    try:
        entries = _read_log(args.store, args.id)
        if args.output is None:
            export_jsonl(entries, sys.stdout, conversation_id=args.id)
        else:
            with open(args.output, "w", encoding="utf-8") as file:
                export_jsonl(entries, file, conversation_id=args.id)
    except (OSError, ValueError) as error:
        print(f"dial-runtime export: {error}", file=sys.stderr)
        return 2
    return 0


def _import(args: argparse.Namespace) -> int:
    from .jsonl import import_jsonl
    from .stores import StoreConflict, open_store

    try:
        with open(args.file, encoding="utf-8") as file:
            recorded_id, entries = import_jsonl(file)
        if not entries:
            raise ValueError(f"{args.file} holds no events")
        store = open_store(args.store)
    except (OSError, ValueError) as error:
        print(f"dial-runtime import: {error}", file=sys.stderr)
        return 2
    conversation_id = args.id or recorded_id

    async def write() -> None:
        try:
            await store.append(conversation_id, entries, expected_seq=0)
        finally:
            await store.aclose()

    try:
        trio.run(write)
    except StoreConflict:
        print(
            f"dial-runtime import: conversation {conversation_id!r} already has events in {args.store}; "
            "choose another --id",
            file=sys.stderr,
        )
        return 2
    print(f"imported {len(entries)} event(s) into {args.store} as {conversation_id!r}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command line's argument parser."""
    parser = argparse.ArgumentParser(prog="dial-runtime", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser("validate", help="check a DIAL envelope against the schema")
    check.add_argument("file", help="a file holding one <dial> envelope, or - for standard input")
    check.add_argument("--strict", action="store_true", help="use the spec's strict schema")
    check.set_defaults(run=_validate)

    chat = commands.add_parser("chat", help="hold a conversation with an agent in the terminal")
    chat.add_argument(
        "--agent",
        required=True,
        metavar="URI",
        help="openai:MODEL, ollama:MODEL[@HOST:PORT], vllm:..., llamacpp:... or http(s)://HOST/v1#MODEL",
    )
    chat.add_argument(
        "--domain",
        required=True,
        metavar="MODULE:FACTORY",
        help="module:factory; factory() returns the domain (dial_runtime.demo:NotesDomain)",
    )
    chat.add_argument(
        "--transcript", metavar="FILE", help="save the transcript (plain text) here when the session ends"
    )
    chat.add_argument(
        "--timeout", type=float, default=90.0, metavar="S", help="seconds to wait for each reply (default: 90)"
    )
    chat.add_argument(
        "--store", metavar="URL", help="keep the conversation in this store (sqlite:FILE, postgresql://...)"
    )
    chat.add_argument(
        "--id", default=None, help="the conversation to hold or take up in the store (default: a new one)"
    )
    chat.add_argument(
        "--no-stream",
        action="store_true",
        help="wait for each whole reply (by default replies stream: each element is shown as it arrives)",
    )
    chat.set_defaults(run=_chat)

    demo = commands.add_parser("demo", help="hold the shipped example conversation and print its transcript")
    demo.add_argument("--interactive", action="store_true", help="decide and answer yourself, in the terminal")
    demo.set_defaults(run=_demo)

    diagrams = commands.add_parser("diagrams", help="write the state machines as .dot, .svg and .mmd files")
    diagrams.add_argument("--out", default="diagrams", help="the directory to write (default: diagrams)")
    diagrams.add_argument("--no-svg", action="store_true", help="skip the .svg files (they need Graphviz)")
    diagrams.set_defaults(run=_diagrams)

    store_help = "the store: memory:, sqlite:PATH or postgresql://..."
    log = commands.add_parser("log", help="print a stored conversation's audit trail, one line per event")
    log.add_argument("id", help="the conversation's id")
    log.add_argument("--store", required=True, metavar="URL", help=store_help)
    log.set_defaults(run=_log)

    replaying = commands.add_parser(
        "replay", help="replay a recorded conversation against this runtime and a domain; exit 1 when it diverges"
    )
    replaying.add_argument("id", nargs="?", help="the conversation's id (with --store)")
    source = replaying.add_mutually_exclusive_group(required=True)
    source.add_argument("--store", metavar="URL", help=store_help)
    source.add_argument("--file", metavar="FILE", help="a JSON Lines log (what export writes) instead of a store")
    replaying.add_argument(
        "--domain",
        required=True,
        help="module:factory; factory() returns the domain (dial_runtime.demo:NotesDomain)",
    )
    replaying.add_argument("--max-turns", type=int, default=8, metavar="N", help="as recorded (default: 8)")
    replaying.add_argument(
        "--timeout", type=float, default=90.0, metavar="S", help="seconds per reply, as recorded (default: 90)"
    )
    replaying.add_argument(
        "--decide-timeout", type=float, metavar="S", help="seconds per decision, as recorded (default: none)"
    )
    replaying.set_defaults(run=_replay)

    export = commands.add_parser("export", help="write a stored conversation's log as JSON Lines")
    export.add_argument("id", help="the conversation's id")
    export.add_argument("--store", required=True, metavar="URL", help=store_help)
    export.add_argument("-o", "--output", metavar="FILE", help="the file to write (default: standard output)")
    export.set_defaults(run=_export)

    importing = commands.add_parser(
        "import", help="store a JSON Lines log; refuses a conversation that already has events"
    )
    importing.add_argument("file", help="a JSON Lines log (what export writes)")
    importing.add_argument("--store", required=True, metavar="URL", help=store_help)
    importing.add_argument("--id", metavar="NEW_ID", help="store it under this id (default: the file's)")
    importing.set_defaults(run=_import)
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
