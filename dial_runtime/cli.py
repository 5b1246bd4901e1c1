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
import getpass
import os
import sys
import traceback
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import trio
import trio.testing

from ._command import USAGE, _CommandError, _described, _usage
from .domains.loading import load_callable, load_domain, load_flow
from .errors import DialError, LogError
from .language.schema import validate
from .runtime.events import LogEntry
from .runtime.projection import Moment, project
from .runtime.projection import stopped_in_words as stopped_in_words
from .stores.urls import checked_log, open_url, read_log, read_stored, shown_url

if TYPE_CHECKING:
    from .decisions.announce import Announcer
    from .stores.chain import ChainCheck, StoredRow
    from .stores.jsonl import LogFile


def _decode(raw: bytes, name: str) -> str:
    """``raw`` as UTF-8 text (a byte-order mark dropped); a one-line error saying where it is not."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise _CommandError(
            f"{name} is not UTF-8 text (byte 0x{raw[error.start]:02x} at offset {error.start}); "
            "DIAL is read as UTF-8"
        ) from None


if TYPE_CHECKING:
    from .terminal.surface import TerminalSurface


def _validate(args: argparse.Namespace) -> int:
    if args.file == "-":
        stdin = getattr(sys.stdin, "buffer", None)
        text = sys.stdin.read() if stdin is None else _decode(stdin.read(), "standard input")
    else:
        try:
            raw = Path(args.file).read_bytes()
        except OSError as error:
            _usage(f"cannot read {args.file}: {error.strerror}")
        text = _decode(raw, args.file)
    issues = validate(text, strict=args.strict)
    for issue in issues:
        print(f"line {issue.line if issue.line is not None else '?'}: {issue.message}")
    if not issues:
        print(f"{args.file}: valid DIAL ({'strict' if args.strict else 'lenient'} schema)")
    return 1 if issues else 0


def _login_name() -> str | None:
    """The name of the person at this terminal (their login name), ``None`` when the system knows none."""
    try:
        return getpass.getuser() or None
    except (KeyError, OSError):
        return None


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
        from .terminal.surface import PlainAgent, TerminalSurface
    except ModuleNotFoundError as error:
        return _without_terminal_extra("chat", error)
    from .agents import system_prompt
    from .driver import Conversation
    from .llm import agent_from_uri, domain_grammar, history_from_log

    domain = load_domain(args.domain) if args.mcp is None else None
    _check_mcp_options(args)
    agent_options = _agent_options(args)
    constrain = agent_options.pop("constrain", False)
    if args.id and not args.store:
        _usage("--id needs --store")
    store = open_url(args.store) if args.store else None
    ident = args.id or uuid.uuid4().hex[:12]
    surface = TerminalSurface(by=args.person, roles=args.roles)

    async def hold() -> int:
        async with contextlib.AsyncExitStack() as stack:
            if store is not None:
                stack.push_async_callback(store.aclose)
            chosen = domain if domain is not None else await _served(args, stack)
            earlier = await store.read(ident) if store is not None else []
            if constrain:
                agent_options["grammar"] = domain_grammar(chosen)
            try:
                agent = agent_from_uri(
                    args.agent,
                    system_prompt=system_prompt(chosen),
                    history=history_from_log(earlier),
                    **agent_options,
                )
            except ValueError as error:
                _usage(str(error))
            if callable(getattr(agent, "__aenter__", None)):
                await stack.enter_async_context(agent)  # type: ignore[arg-type]
            streams = callable(getattr(agent, "stream", None)) and not args.no_stream
            options: dict[str, Any] = {
                "agent": surface.streaming(agent) if streams else PlainAgent(agent),
                "domain": chosen,
                "human": surface,
                "on_event": surface.on_event,
                "timeout": args.timeout,
                "reply_timeout": args.reply_timeout,
                "idle_timeout": args.idle_timeout,
            }
            if store is None:
                await surface.chat(Conversation(**options))
                return 0
            conversation = await Conversation.open(store, ident, **options)
            surface.recap(conversation, ident, shown_url(args.store))
            if await surface.take_up(conversation):
                await surface.chat(conversation, store=store)
        return 0

    try:
        return anyio.run(hold, backend="asyncio")
    finally:
        if args.transcript:
            surface.save(args.transcript)


def _agent_options(args: argparse.Namespace) -> dict[str, Any]:
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
    if args.grammar == "domain":
        options["constrain"] = True
    elif args.grammar != "off":
        try:
            raw = Path(args.grammar).read_bytes()
        except OSError as error:
            _usage(f"--grammar: cannot read {args.grammar}: {error.strerror or error}")
        try:
            options["grammar"] = raw.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            _usage(f"--grammar: {args.grammar} is not UTF-8 text (at byte {error.start})")
    if options and args.agent.startswith("script:"):
        _usage("--server, --grammar and the generation settings are for a model server; script:FILE takes none")
    return options


def _check_mcp_options(args: argparse.Namespace) -> None:
    """``--trust-read-only`` and ``--mcp-log`` speak of the ``--mcp`` server: refused without one."""
    if args.mcp is None and (args.trust_read_only or args.mcp_log):
        _usage(f"{'--trust-read-only' if args.trust_read_only else '--mcp-log'} needs --mcp")


async def _served(args: argparse.Namespace, stack: contextlib.AsyncExitStack) -> Any:
    """The MCP server ``--mcp`` names, as a domain held open until ``stack`` closes."""
    try:
        from .adapters.mcp import McpConnectionError, mcp_domain, sdk_log_to
    except ImportError as error:
        raise _CommandError(f"--mcp needs the mcp extra (pip install 'dial-runtime[mcp]'): {error}") from None
    try:
        errlog = stack.enter_context(open(args.mcp_log or os.devnull, "a", encoding="utf-8"))  # noqa: SIM115
        served = mcp_domain(args.mcp, errlog=errlog, trust_read_only=args.trust_read_only)
    except ValueError as error:
        _usage(f"--mcp: {error}")
    except OSError as error:
        raise _CommandError(f"--mcp-log: {_described(error)}") from None
    stack.enter_context(sdk_log_to(errlog))
    try:
        connected = await stack.enter_async_context(served)
    except (OSError, McpConnectionError) as error:
        raise _CommandError(f"--mcp: {error}") from None
    for line in connected.refusals():
        print(f"dial-runtime chat: --mcp: {line}", file=sys.stderr)
    return connected


async def _interactive_demo(surface: TerminalSurface) -> None:
    """The demo conversation with the person at the terminal deciding: each of the script's words gets its own
    recorded replies, so a decision that takes fewer turns does not shift the rest of the script (one that
    needs more finds no recorded reply, and that turn stops with the agent's error)."""
    from .agents import ScriptedAgent
    from .demo import SCRIPT, NotesDomain
    from .driver import Conversation

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
            from .terminal.surface import TerminalSurface
        except ModuleNotFoundError as error:
            return _without_terminal_extra("demo --interactive", error)
        anyio.run(_interactive_demo, TerminalSurface(), backend="asyncio")
        return 0
    from .demo import run_demo

    trio.run(run_demo)
    return 0


def _diagrams(args: argparse.Namespace) -> int:
    import shutil

    from .statemachines.diagrams import write_diagrams, write_flow_diagram

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


def audit_line(entry: LogEntry) -> str | None:
    """The audit trail's line for a log entry (``None`` when the event is not part of it): its time in ISO-8601
    UTC, its sequence number, what happened, to which suggestion or ask, and who decided."""
    moments = project([entry]).trail
    return _audit_text(moments[0]) if moments else None


def _audit_text(moment: Moment) -> str:
    """A moment of the projection's audit trail as a line of ``log``."""
    when = datetime.fromtimestamp(moment.time or 0.0, tz=timezone.utc).isoformat(timespec="milliseconds")
    return f"{when.replace('+00:00', 'Z')}  #{moment.seq:<4} {moment.label:<13} {moment.text}"


def _log(args: argparse.Namespace) -> int:
    for moment in project(read_log(args.store, args.id)).trail:
        print(_audit_text(moment))
    return 0


def _replay(args: argparse.Namespace) -> int:
    from .runtime.replay import replay

    if args.file is not None:
        conversation_id, entries = _read_file(args.file)
    elif args.id is None:
        _usage("replaying from a store needs the conversation's ID")
    else:
        conversation_id, entries = args.id, read_log(args.store, args.id)
    if args.recheck and args.domain is None:
        _usage("replay --recheck asks the domain again: name it with --domain")
    report = replay(
        entries,
        domain=None if args.domain is None else load_domain(args.domain),
        recheck=args.recheck,
        conversation_id=conversation_id,
        max_turns=args.max_turns,
        timeout=args.timeout,
        reply_timeout=args.reply_timeout,
        idle_timeout=args.idle_timeout,
        decide_timeout=args.decide_timeout,
    )
    print(report)
    return 0 if report.ok else 1


def _read_file(path: str) -> tuple[str, list[LogEntry]]:
    """The entries of a JSON Lines log, each checked, and the log checked as a whole (see ``check_log``)."""
    read = _read_log_file(path)
    return read.conversation_id, read.entries


def _read_log_file(path: str) -> LogFile:
    """What a JSON Lines log holds, each entry checked, its hash chain too (a version-2 file), and the log
    checked as a whole (see ``check_log``)."""
    from .stores.jsonl import check_log, read_jsonl

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


def _read_rows(url: str, conversation_id: str) -> list[StoredRow]:
    """The conversation's rows as stored, with their hashes, read without creating or writing anything; refused
    as ``_read_log`` refuses the log."""
    from .stores.base import decode

    rows: list[StoredRow] = read_stored(url, lambda store: store.rows(conversation_id))
    checked_log(url, conversation_id, [decode(row.text) for row in rows])
    return rows


def _export(args: argparse.Namespace) -> int:
    from .stores.jsonl import export_rows

    rows = _read_rows(args.store, args.id)
    if args.output is None:
        export_rows(rows, sys.stdout, conversation_id=args.id)
        return 0
    try:
        with open(args.output, "w", encoding="utf-8") as file:
            export_rows(rows, file, conversation_id=args.id)
    except OSError as error:
        raise _CommandError(f"cannot write {args.output}: {error.strerror or error}") from None
    return 0


def _import(args: argparse.Namespace) -> int:
    from .stores import StoreConflict

    read = _read_log_file(args.file)
    entries = read.entries
    if not entries:
        raise _CommandError(f"{args.file} holds no events")
    conversation_id = args.id or read.conversation_id
    store = open_url(args.store)

    async def write() -> list[StoredRow]:
        try:
            await store.append(conversation_id, entries, expected_seq=0)
            return await store.rows(conversation_id) if read.chain is not None else []
        finally:
            await store.aclose()

    try:
        stored = trio.run(write)
    except StoreConflict:
        raise _CommandError(
            f"conversation {conversation_id!r} already has events in {shown_url(args.store)}; choose another --id"
        ) from None
    imported = f"imported {len(entries)} event(s) into {shown_url(args.store)} as {conversation_id!r}"
    if read.chain is not None:
        imported += _kept(read.rows, stored)
    print(imported)
    return 0


def _kept(written: list[StoredRow], stored: list[StoredRow]) -> str:
    """How the store's hashes of an imported log stand to the file's."""
    for mine, theirs in zip(written, stored, strict=False):
        if mine.hash is not None and mine.hash != theirs.hash:
            return (
                f"; the store's hash chain differs from the file's from entry {mine.seq} on (this version stores "
                "that entry differently), so a head signed from the file does not match the store"
            )
    head = stored[-1].hash if stored else None
    return f", their hash chain kept (head #{len(stored)} {(head or '')[:18]}…)"


def _signing() -> Any:
    """:mod:`dial_runtime.audit.signing`; a one-line error (exit 2) when cryptography is not installed."""
    try:
        from .audit import signing
    except ImportError as error:
        raise _CommandError(str(error), USAGE) from None
    return signing


def _key_file(path: str, *, private: bool) -> Any:
    """The Ed25519 key in the PEM file ``path``; a one-line error (exit 2) when it cannot be read or holds none."""
    signing = _signing()
    pem = _file_bytes(path)
    try:
        return signing.load_private_key(pem) if private else signing.load_public_key(pem)
    except ValueError as error:
        _usage(f"{path}: {error}")


def _file_bytes(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        _usage(f"cannot read {path}: {(error.strerror or str(error)).lower()}")


def _check_chains(
    url: str, conversation_ids: Sequence[str] | None, heads_at: dict[str, list[int]]
) -> list[ChainCheck]:
    """The verified chains of the conversations named (``None``: every one in the store), read without writing
    anything; a store that cannot be read is a one-line error with exit status 2 (nothing could be checked)."""
    from .errors import StoreError
    from .stores.chain import verify_store

    store = open_url(url, create=False)

    async def check() -> list[ChainCheck]:
        try:
            ids = list(conversation_ids) if conversation_ids is not None else await store.conversations()
            ids += [signed for signed in heads_at if signed not in ids]
            return list((await verify_store(store, ids, heads_at=heads_at)).conversations)
        finally:
            await store.aclose()

    try:
        return trio.run(check)
    except StoreError as error:
        _usage(str(error))


def _keygen(args: argparse.Namespace) -> int:
    """Write a new Ed25519 key pair as PEM files: the private key readable by its owner only."""
    signing = _signing()
    for path in (args.private, args.public):
        if os.path.lexists(path):
            _usage(f"{path} exists: keygen never overwrites a key")
    key = signing.generate_key()
    written: list[str] = []
    try:
        for path, pem, mode in (
            (args.private, signing.private_key_pem(key), 0o600),
            (args.public, signing.public_key_pem(key), 0o644),
        ):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            written.append(path)
            with os.fdopen(descriptor, "wb") as file:
                file.write(pem)
    except OSError as error:
        for path in written:
            with contextlib.suppress(OSError):
                os.unlink(path)
        _usage(f"cannot write {error.filename or path}: {(error.strerror or str(error)).lower()}")
    print(
        f"wrote {args.private} (the private key: keep it secret, away from the store) and {args.public} "
        f"(the public key, {signing.fingerprint(key)[:24]}…)"
    )
    return 0


def _sign(args: argparse.Namespace) -> int:
    """Verify a conversation's chain and sign its head; the signature document goes to ``-o`` or stdout."""
    signing = _signing()
    key = _key_file(args.key, private=True)
    (check,) = _check_chains(args.store, [args.id], {})
    if check.entries == 0:
        raise _CommandError(
            f"{shown_url(args.store)} holds no conversation {args.id!r} (dial-runtime list --store URL lists them)"
        )
    try:
        signed = signing.sign_head(check, key)
    except ValueError as error:
        raise _CommandError(str(error)) from None
    document = signing.dumps_signed_head(signed)
    if args.output is None:
        sys.stdout.write(document)
        return 0
    try:
        Path(args.output).write_text(document, encoding="utf-8")
    except OSError as error:
        raise _CommandError(f"cannot write {args.output}: {error.strerror or error}") from None
    print(f"signed {args.id!r} at entry #{signed.seq} (head {signed.head[:18]}…): {args.output}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    """Check every chain (or those named) and, with a signature, the signed head: exit 0 when all match, 1 with
    each mismatch or conversation the store does not hold named (a line per conversation), 2 when nothing could be
    checked (bad input)."""
    if (args.public_key is None) != (args.signature is None):
        _usage("--public-key and --signature go together: the signature is checked with the public key")
    signed, public = None, None
    if args.signature is not None:
        signing = _signing()
        public = _key_file(args.public_key, private=False)
        try:
            signed = signing.loads_signed_head(_file_bytes(args.signature).decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            _usage(f"{args.signature}: {error}")
        if args.ids and signed.conversation_id not in args.ids:
            _usage(
                f"{args.signature} signs conversation {signed.conversation_id!r}, which is not among the ids given"
            )
    heads_at = {signed.conversation_id: [signed.seq]} if signed is not None else {}
    checks = _check_chains(args.store, args.ids or None, heads_at)
    if not checks:
        print(f"{shown_url(args.store)} holds no conversation", file=sys.stderr)
        return 0
    width = max(len(check.conversation_id) for check in checks)
    failed, absent = 0, []
    for check in checks:
        if check.entries == 0:  # named, or signed, but not in the store
            absent.append(check.conversation_id)
            print(f"{check.conversation_id:<{width}}  the store holds no such conversation")
            continue
        failed += not check.ok
        print(f"{check.conversation_id:<{width}}  {check.summary()}")
    problems = (
        [f"{failed} of {len(checks) - len(absent)} conversation(s) do not match their chain"] if failed else []
    )
    if absent:
        names = ", ".join(repr(each) for each in absent)
        problems.insert(
            0, f"{shown_url(args.store)} holds no conversation {names} (dial-runtime list --store URL lists them)"
        )
    if signed is not None:
        match = signing.verify_head(
            signed, public, next(check for check in checks if check.conversation_id == signed.conversation_id)
        )
        print(f"signature: {match.reason}")
        if not match.ok:
            problems.append(f"the signed head of {signed.conversation_id!r} does not match the store")
    if problems:
        raise _CommandError("; ".join(problems))
    return 0


def _audit(args: argparse.Namespace) -> int:
    """Print the audit of one stored conversation (``--json``: as JSON): every proposal's story, with the hash
    chain's verdict first. Exit 1 when the chain is broken, the log does not fold (the report then says what the
    log now claims), the store cannot be read or holds no such conversation."""
    import msgspec

    from .audit.report import audit, audit_text
    from .errors import StoreError
    from .stores.chain import verify_log

    store = open_url(args.store, create=False)

    async def read() -> tuple[list[Any], list[LogEntry] | LogError]:
        try:
            rows = await store.rows(args.id)
            try:
                return rows, await store.read(args.id)
            except LogError as error:  # a row edited into something that is no entry: the chain names it
                return rows, error
        finally:
            await store.aclose()

    try:
        rows, read_back = trio.run(read)
    except StoreError as error:
        raise _CommandError(str(error)) from None
    if not rows:
        listing = "dial-runtime list --store URL lists them"
        raise _CommandError(f"{shown_url(args.store)} holds no conversation {args.id!r} ({listing})")
    chain = verify_log(rows, conversation_id=args.id)
    if isinstance(read_back, LogError):
        raise _CommandError(f"{args.id!r}: {chain.summary()}; the log cannot be read: {read_back}")
    report = audit(read_back, conversation_id=args.id, chain=chain)
    if args.json:
        print(msgspec.json.encode(report).decode())
    else:
        print(audit_text(report))
    if not report.trustworthy:
        raise _CommandError(f"{args.id!r} does not match its record: see the report's first lines")
    return 0


def _list(args: argparse.Namespace) -> int:
    """One line per stored conversation: its id, its size, when it was last written, and what it waits for. A log
    no run of the runtime could have written is listed too, with why, and the command then exits 1 (standard
    error says how many)."""
    from .runtime.state import ConversationState, fold_log

    store = open_url(args.store, create=False)

    async def read() -> list[tuple[str, list[LogEntry] | LogError]]:
        held: list[tuple[str, list[LogEntry] | LogError]] = []
        try:
            for ident in await store.conversations():
                try:
                    held.append((ident, await store.read(ident)))
                except LogError as error:  # a row that does not decode: the other conversations are listed
                    held.append((ident, error))
            return held
        finally:
            await store.aclose()

    held = trio.run(read)
    if not held:
        print(f"{shown_url(args.store)} holds no conversation", file=sys.stderr)
    width = max((len(ident) for ident, _ in held), default=0)
    refused = 0
    for ident, entries in held:
        state = ConversationState()
        try:
            if isinstance(entries, LogError):
                raise entries
            fold_log(entries, state)
        except LogError as error:
            refused += 1
            print(f"{ident:<{width}}  refused: {' '.join(str(error).split())}")
            continue
        when = datetime.fromtimestamp(entries[-1].time, tz=timezone.utc).isoformat(timespec="seconds")
        waiting = ", ".join(item.id for item in state.pending())
        ended = f"ended: {state.result}" if state.result else "ended"
        status = ended if state.ended else f"waits for {waiting}" if waiting else "open"
        print(f"{ident:<{width}}  {len(entries):>5} events  last {when.replace('+00:00', 'Z')}  {status}")
    if refused:
        raise _CommandError(
            f"{refused} conversation(s) in {shown_url(args.store)} hold a log no run could have written"
        )
    return 0


def _decide(args: argparse.Namespace) -> int:
    """``dial-runtime decide``: take a decision on a suggestion that waits in a stored conversation, as the panel
    and the terminal take one (the same log, the same checks, under the conversation's lock), logged ``via
    cli``; the conversation then carries on with its agent and domain. Prints how the suggestion stands."""
    import json

    from .decisions.deadlines import conversation_opener
    from .errors import DialError
    from .runtime.records import Accept, Dismiss, Edit
    from .web.serve import agent_factory

    if args.decision == "edit" and args.payload is None:
        _usage("an edit needs the edited payload: --payload JSON")
    if args.decision != "edit" and args.payload is not None:
        _usage("--payload goes with edit")
    decision: Accept | Dismiss | Edit
    if args.decision == "accept":
        decision = Accept()
    elif args.decision == "dismiss":
        decision = Dismiss()
    else:
        try:
            decision = Edit(json.loads(args.payload))
        except ValueError as error:
            _usage(f"--payload is not JSON: {error}")
    domain = load_domain(args.domain)
    # The conversation is there (read only: a mistyped store creates nothing), and the card as it was seen.
    shown = project(read_log(args.store, args.id)).card(args.suggestion)
    decided_before = 0 if shown is None else len(shown.decisions)
    store = open_url(args.store)

    async def work() -> str:
        try:
            # Built as serve builds one: a domain factory's domain (and the agent) only if a call uses it.
            open_conversation = conversation_opener(store, agent=agent_factory(args.agent, domain), domain=domain)
            conversation = await open_conversation(args.id)
            try:
                result = await conversation.decide(
                    args.suggestion, decision, by=args.by, shown=args.shown, via="cli", roles=args.roles
                )
            finally:
                close = getattr(conversation.agent, "aclose", None)  # the agent built on first use, if it was
                if close is not None:
                    await close()
            card = project(conversation.log).card(args.suggestion)
            if card is not None and card.approval_refused and len(card.decisions) == decided_before:
                raise _CommandError(f"{args.suggestion} still waits: {card.approval_refused}")
            told = card.outcome if card is not None and card.outcome else "waiting"
            approvals = ""
            if card is not None and card.approvals_needed:
                approvals = f" ({len(card.approvers)} of {card.approvals_needed} approvals)"
            return f"{args.suggestion}: {told}{approvals}; the call ended {result.status}"
        except DialError as error:  # already decided, a payload changed, busy, not waiting
            raise _CommandError(str(error)) from None
        finally:
            await store.aclose()

    print(trio.run(work))
    return 0


def _worker(args: argparse.Namespace) -> int:
    """``dial-runtime worker``: fire the deadlines of conversations stored on PostgreSQL, with nobody watching,
    until interrupted (it prints ``ready`` once it takes jobs). The conversations are built as ``serve`` builds
    them; an expiry talks to the agent only when a turn follows anyway. ``--announce MODULE:FACTORY``:
    ``FACTORY()`` returns a :class:`~dial_runtime.web.announce.Announcer`, which tells people of the expiries,
    reminders and escalations this worker fires, as the web surface tells of those it fires."""
    import asyncio
    import contextlib

    if not args.store.startswith(("postgresql://", "postgres://")):
        _usage(
            "worker fires deadlines stored on PostgreSQL (postgresql://...); with another store, the process "
            "that serves it fires them"
        )
    if args.poll <= 0 or args.concurrency < 1 or (args.decide_timeout is not None and not args.decide_timeout > 0):
        _usage("--poll and --decide-timeout must be above 0 and --concurrency at least 1")
    from .decisions.deadlines import conversation_opener, run_worker
    from .web.serve import agent_factory

    domain = load_domain(args.domain)
    announcer = _announcer(args.announce) if args.announce is not None else None
    store = open_url(args.store)
    options = {"decide_timeout": args.decide_timeout, "max_turns": args.max_turns}
    opener = conversation_opener(store, agent=agent_factory(args.agent, domain), domain=domain, **options)
    if announcer is not None:
        opener = announcer.announcing(opener, store)

    async def work() -> None:
        try:
            async with announcer if announcer is not None else contextlib.nullcontext():
                await run_worker(
                    args.store,
                    opener,
                    ready=lambda: print("ready", flush=True),
                    poll=args.poll,
                    concurrency=args.concurrency,
                )
        finally:
            await store.aclose()

    asyncio.run(work())
    return 0


def _announcer(spec: str) -> Announcer:
    """The announcer ``--announce MODULE:FACTORY`` names (``FACTORY()``'s); a one-line error for anything else."""
    from .decisions.announce import Announcer

    factory = load_callable(spec, option="--announce", example="myapp.notify:announcer")
    try:
        made = factory()
    except Exception as error:
        raise _CommandError(f"--announce {spec!r}: the factory raised {_described(error)}") from error
    if not isinstance(made, Announcer):
        _usage(f"--announce {spec!r}: the factory returned {type(made).__name__}, not an Announcer")
    return made


def _serve(args: argparse.Namespace) -> int:
    """``dial-runtime serve``: the web surface (AG-UI at /agui, the panel at /) under uvicorn."""
    try:
        from .web.serve import McpServer, serve
    except ImportError as error:
        print(
            f"dial-runtime serve: needs the web extra (pip install 'dial-runtime[web]'): {error}", file=sys.stderr
        )
        return 2
    if args.workers < 1 or not 0 <= args.port <= 65535:
        print("dial-runtime serve: --workers must be at least 1 and --port within 0-65535", file=sys.stderr)
        return 2
    if args.max_turns < 1 or (args.decide_timeout is not None and not args.decide_timeout > 0):
        print("dial-runtime serve: --max-turns must be at least 1 and --decide-timeout above 0", file=sys.stderr)
        return 2
    _check_mcp_options(args)
    agent_options = _agent_options(args)
    try:
        serve(
            agent=args.agent,
            agent_options=agent_options,
            domain=args.domain
            if args.mcp is None
            else McpServer(server=args.mcp, trust_read_only=args.trust_read_only, log=args.mcp_log),
            store=args.store,
            host=args.host,
            port=args.port,
            workers=args.workers,
            conversation={
                "timeout": args.timeout,
                "reply_timeout": args.reply_timeout,
                "idle_timeout": args.idle_timeout,
                "max_turns": args.max_turns,
                "decide_timeout": args.decide_timeout,
            },
            allowed_hosts=args.allowed_hosts,
        )
    except ValueError as error:
        print(f"dial-runtime serve: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


def _add_stream_deadlines(parser: argparse.ArgumentParser, recorded: str) -> None:
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


def _add_agent_options(parser: argparse.ArgumentParser) -> None:
    """What goes with every request to a model server: the grammar, how to send it, the generation settings."""
    parser.add_argument(
        "--grammar",
        default="off",
        metavar="off|domain|FILE",
        help="constrain the replies: domain (the grammar of valid DIAL for the domain), or a file of GBNF "
        "(llama.cpp, vLLM; default: off)",
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


def _add_mcp_options(command: argparse.ArgumentParser, served: Any) -> None:
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


def _add_serve(commands: Any) -> None:

    working = commands.add_parser(
        "worker", help="fire the deadlines of conversations stored on PostgreSQL, with nobody watching"
    )
    working.add_argument("--store", required=True, metavar="URL", help="postgresql://...")
    working.add_argument(
        "--agent", required=True, metavar="URI", help="the agent, as serve's (told only when a turn follows)"
    )
    working.add_argument("--domain", required=True, metavar="MODULE:FACTORY", help="the domain, as serve's")
    working.add_argument("--decide-timeout", type=float, metavar="S", help="as serve's (default: none)")
    working.add_argument("--max-turns", type=int, default=8, metavar="N", help="as serve's (default: 8)")
    working.add_argument(
        "--poll", type=float, default=0.2, metavar="S", help="seconds between looks for due jobs (default: 0.2)"
    )
    working.add_argument("--concurrency", type=int, default=8, metavar="N", help="jobs at once (default: 8)")
    working.add_argument(
        "--announce",
        metavar="MODULE:FACTORY",
        help="FACTORY() returns a dial_runtime.web.announce.Announcer: people are told of the expiries, reminders "
        "and escalations this worker fires (mail, webhooks, with decision links)",
    )
    working.set_defaults(run=_worker)

    serving = commands.add_parser("serve", help="serve the chat panel and AG-UI (/agui) over HTTP with uvicorn")
    serving.add_argument(
        "--agent", required=True, metavar="URI", help="script:FILE (a JSON list of replies) or a chat URI"
    )
    served = serving.add_mutually_exclusive_group(required=True)
    served.add_argument("--domain", metavar="MODULE:FACTORY", help="e.g. dial_runtime.demo:NotesDomain")
    _add_mcp_options(serving, served)
    serving.add_argument(
        "--store", required=True, metavar="URL", help="sqlite:PATH, or postgresql://... for --workers"
    )
    serving.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    serving.add_argument(
        "--allowed-host",
        dest="allowed_hosts",
        action="append",
        default=[],
        metavar="NAME",
        help="a name the server is reached by besides localhost, 127.0.0.1 and [::1] (NAME, NAME:PORT or "
        "*.DOMAIN; repeat for more): a request naming another Host is refused",
    )
    serving.add_argument("--port", type=int, default=8000, help="the port (default: 8000)")
    serving.add_argument("--workers", type=int, default=1, metavar="N", help="worker processes (default: 1)")
    serving.add_argument(
        "--timeout", type=float, default=90.0, metavar="S", help="seconds to wait for each reply (default: 90)"
    )
    _add_stream_deadlines(serving, "")
    serving.add_argument(
        "--max-turns", type=int, default=8, metavar="N", help="turns one run may take at most (default: 8)"
    )
    serving.add_argument(
        "--decide-timeout", type=float, metavar="S", help="seconds each decision may take (default: none)"
    )
    _add_agent_options(serving)
    serving.set_defaults(run=_serve)


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
    """The command line's argument parser."""
    parser = _OneLineParser(prog="dial-runtime", description=__doc__)
    parser.add_argument("--version", action="version", version=f"dial-runtime {_version()}")
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
        help="openai:MODEL, ollama:MODEL[@HOST:PORT], vllm:..., llamacpp:..., http(s)://HOST/v1#MODEL, or "
        "script:FILE (the replies in a JSON list or a JSON Lines log: try a domain without a model)",
    )
    served = chat.add_mutually_exclusive_group(required=True)
    served.add_argument(
        "--domain",
        metavar="MODULE:FACTORY",
        help="module:factory; factory() returns the domain (dial_runtime.demo:NotesDomain)",
    )
    _add_mcp_options(chat, served)
    chat.add_argument(
        "--transcript", metavar="FILE", help="save the transcript (plain text) here when the session ends"
    )
    chat.add_argument(
        "--timeout", type=float, default=90.0, metavar="S", help="seconds to wait for each reply (default: 90)"
    )
    _add_stream_deadlines(chat, "")
    chat.add_argument(
        "--store", metavar="URL", help="keep the conversation in this store (sqlite:FILE, postgresql://...)"
    )
    chat.add_argument(
        "--id", default=None, help="the conversation to hold or take up in the store (default: a new one)"
    )
    chat.add_argument(
        "--as",
        dest="person",
        default=_login_name(),
        metavar="NAME",
        help="who decides and answers, recorded with each decision (default: your login name)",
    )
    chat.add_argument(
        "--role",
        dest="roles",
        action="append",
        default=[],
        metavar="ROLE",
        help="a role you hold, which an action's approval policy may require (repeatable)",
    )
    chat.add_argument(
        "--no-stream",
        action="store_true",
        help="wait for each whole reply (by default replies stream: each element is shown as it arrives)",
    )
    _add_agent_options(chat)
    chat.set_defaults(run=_chat)

    demo = commands.add_parser("demo", help="hold the shipped example conversation and print its transcript")
    demo.add_argument("--interactive", action="store_true", help="decide and answer yourself, in the terminal")
    demo.set_defaults(run=_demo)

    diagrams = commands.add_parser("diagrams", help="write the state machines as .dot, .svg and .mmd files")
    diagrams.add_argument("--out", default="diagrams", help="the directory to write (default: diagrams)")
    diagrams.add_argument("--no-svg", action="store_true", help="skip the .svg files (they need Graphviz)")
    diagrams.add_argument(
        "--flow",
        metavar="MODULE:CLASS",
        help="draw this domain flow (a StateMachine class, or a Domain with a flow)",
    )
    diagrams.set_defaults(run=_diagrams)

    store_help = "the store: memory:, sqlite:PATH or postgresql://..."
    deciding = commands.add_parser(
        "decide", help="decide on a suggestion that waits in a stored conversation, as the panel does"
    )
    deciding.add_argument("id", help="the conversation's id")
    deciding.add_argument("suggestion", help="the suggestion's id (sg-1, ...)")
    deciding.add_argument("decision", choices=["accept", "dismiss", "edit"])
    deciding.add_argument("--store", required=True, metavar="URL", help=store_help)
    deciding.add_argument("--agent", required=True, metavar="URI", help="the agent, as serve's (for what follows)")
    deciding.add_argument("--domain", required=True, metavar="MODULE:FACTORY", help="the domain, as serve's")
    deciding.add_argument(
        "--as", dest="by", metavar="NAME", default=_login_name(), help="who decides (default: your login name)"
    )
    deciding.add_argument(
        "--role", dest="roles", action="append", default=[], metavar="ROLE", help="a role you hold (repeatable)"
    )
    deciding.add_argument("--payload", metavar="JSON", help="the edited payload (with edit)")
    deciding.add_argument(
        "--shown", metavar="DIGEST", help="the digest of the payload you saw (refused if it changed since)"
    )
    deciding.set_defaults(run=_decide)

    log = commands.add_parser("log", help="print a stored conversation's audit trail, one line per event")
    log.add_argument("id", help="the conversation's id")
    log.add_argument("--store", required=True, metavar="URL", help=store_help)
    log.set_defaults(run=_log)

    replaying = commands.add_parser(
        "replay", help="replay a recorded conversation through this runtime; exit 1 when it diverges"
    )
    replaying.add_argument("id", nargs="?", help="the conversation's id (with --store)")
    source = replaying.add_mutually_exclusive_group(required=True)
    source.add_argument("--store", metavar="URL", help=store_help)
    source.add_argument("--file", metavar="FILE", help="a JSON Lines log (what export writes) instead of a store")
    replaying.add_argument(
        "--domain",
        help="module:factory; factory() returns the domain (its flow; with --recheck its verdicts)",
    )
    replaying.add_argument("--max-turns", type=int, default=8, metavar="N", help="as recorded (default: 8)")
    replaying.add_argument(
        "--timeout", type=float, default=90.0, metavar="S", help="seconds per reply, as recorded (default: 90)"
    )
    _add_stream_deadlines(replaying, ", as recorded")
    replaying.add_argument(
        "--decide-timeout", type=float, metavar="S", help="seconds per decision, as recorded (default: none)"
    )
    replaying.add_argument(
        "--recheck",
        action="store_true",
        help="ask the domain again for actions, validate and preview (by default the log answers; nothing runs)",
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

    auditing = commands.add_parser(
        "audit",
        help="report every proposal of a stored conversation: proposed, shown, decided (by whom, through what), "
        "run, result, reconciled; with its hash chain's verdict (exit 1 when the log does not match its record)",
    )
    auditing.add_argument("id", help="the conversation's id")
    auditing.add_argument("--store", required=True, metavar="URL", help=store_help)
    auditing.add_argument("--json", action="store_true", help="write the report as JSON")
    auditing.set_defaults(run=_audit)

    listing = commands.add_parser(
        "list", help="list a store's conversations: size, last write, what each waits for"
    )
    listing.add_argument("--store", required=True, metavar="URL", help=store_help)
    listing.set_defaults(run=_list)

    verifying = commands.add_parser(
        "verify",
        help="check the hash chains of a store's conversations (and a signed head): exit 0 when every one "
        "matches, 1 naming each first mismatch, 2 when nothing could be checked",
    )
    verifying.add_argument("ids", nargs="*", metavar="ID", help="the conversations to check (default: every one)")
    verifying.add_argument("--store", required=True, metavar="URL", help=store_help)
    verifying.add_argument("--public-key", metavar="PUB.pem", help="the public key the head was signed with")
    verifying.add_argument("--signature", metavar="FILE", help="a signature document (what sign writes)")
    verifying.set_defaults(run=_verify)

    signing = commands.add_parser(
        "sign", help="verify a conversation's hash chain and sign its head with an Ed25519 key"
    )
    signing.add_argument("id", help="the conversation's id")
    signing.add_argument("--store", required=True, metavar="URL", help=store_help)
    signing.add_argument("--key", required=True, metavar="PRIVATE.pem", help="the private key (keygen writes one)")
    signing.add_argument(
        "-o", "--output", metavar="FILE", help="the signature document to write (default: standard output)"
    )
    signing.set_defaults(run=_sign)

    keys = commands.add_parser("keygen", help="write a new Ed25519 key pair (PEM) for signing chain heads")
    keys.add_argument("private", metavar="PRIVATE_PATH", help="the private key to write (readable by you only)")
    keys.add_argument("public", metavar="PUBLIC_PATH", help="the public key to write (what verify needs)")
    keys.set_defaults(run=_keygen)
    _add_serve(commands)
    from .evaluate.command import add_eval_parser

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


if __name__ == "__main__":
    console()
