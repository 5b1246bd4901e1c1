"""``dial-runtime eval``: score candidate agents on recorded conversations (counterfactual replay), and its
``selfplay`` and ``tau2`` commands."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._command import _CommandError, _usage

if TYPE_CHECKING:
    from ..runtime.events import LogEntry
    from .counterfactual import Candidate

__all__ = ["add_eval_parser"]

_FACTORY = "python:"


def add_eval_parser(commands: Any) -> None:
    """Add ``eval`` (and its ``selfplay`` and ``tau2`` commands) to the command line's subcommands; what they run
    is imported when they run, so the command line starts without the MCP SDK or httpx."""

    scoring = commands.add_parser(
        "eval",
        help="score candidate agents at every point of recorded conversations (nothing runs); selfplay, tau2",
        description=(
            "Counterfactual replay: each candidate answers where the recorded agent replied, given the same "
            "history, and is scored against what the person decided. Conversations come from --store (every one, "
            "or those named by --id) and from --log files."
        ),
    )
    scoring.add_argument("--store", metavar="URL", help="the store holding the recorded conversations")
    scoring.add_argument("--id", action="append", default=[], metavar="ID", help="a conversation (repeat it)")
    scoring.add_argument(
        "--log", action="append", default=[], metavar="FILE", help="a JSON Lines log, as export writes (repeat it)"
    )
    scoring.add_argument(
        "--candidate",
        action="append",
        default=[],
        metavar="[NAME=]AGENT",
        help=(
            "an agent URI (script:FILE included) or python:MODULE:FACTORY, FACTORY(history) returning the agent; "
            "twice for an A/B comparison"
        ),
    )
    scoring.add_argument(
        "--domain", metavar="MODULE:FACTORY", help="the domain: its checks, previews and system prompt (never run)"
    )
    scoring.add_argument("--max-turns", type=int, default=8, metavar="N", help="as recorded (default: 8)")
    scoring.add_argument("--json", metavar="FILE", help="also write the whole report as JSON")
    scoring.add_argument("--out", metavar="DIR", help="write report.json, report.md and chart.png into DIR")
    scoring.set_defaults(run=_run_eval)
    more = scoring.add_subparsers(dest="eval_command", metavar="{selfplay,tau2,rules}")
    selfplay = more.add_parser("selfplay", help="run conversations with a simulated person into a store")
    add_selfplay_arguments(selfplay)
    selfplay.set_defaults(run=_selfplay)
    tau2 = more.add_parser("tau2", help="run and score tau2-bench's airline tasks")
    add_tau2_arguments(tau2)
    tau2.set_defaults(run=_tau2)
    rules = more.add_parser(
        "rules",
        help="try rules for whether to ask against every recorded decision (nothing runs)",
        description=(
            "Try the rules a Python file declares (RULES, a list of dial_runtime.decisions.rules.Rule) at every "
            "point where a person was asked to decide in a store's conversations: what they would have approved "
            "that people dismissed, and denied that people accepted. Nothing runs."
        ),
    )
    rules.add_argument(
        "--store", required=True, metavar="URL", help="the store holding the recorded conversations"
    )
    rules.add_argument("--rules", required=True, metavar="FILE", help="a Python file declaring RULES")
    rules.add_argument("--id", action="append", default=[], metavar="ID", help="a conversation (repeat it)")
    rules.add_argument("--json", metavar="FILE", help="also write the whole report as JSON")
    rules.set_defaults(run=_rules)


def add_selfplay_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``dial-runtime eval selfplay``."""
    parser.description = (
        "Hold N conversations of an agent with a simulated person (a model given a persona and a goal) into a "
        "store, and write a manifest that --repeat holds again; eval then scores them like any recorded one."
    )
    parser.add_argument("--agent", metavar="URI", help="the agent under test (an agent URI, script:FILE included)")
    parser.add_argument("--persona", metavar="FILE", help="the person: a JSON (or YAML) file with a goal")
    parser.add_argument(
        "--persona-model",
        metavar="URI",
        help="the model that plays the person: an agent URI, or builtin:accept or builtin:dismiss (a rule that "
        "accepts or dismisses every card: a first try without a model)",
    )
    parser.add_argument(
        "--domain", metavar="MODULE:FACTORY", help="the domain, e.g. dial_runtime.demo:NotesDomain"
    )
    parser.add_argument(
        "--store", metavar="URL", help="where the conversations go (sqlite:FILE, postgresql://...)"
    )
    parser.add_argument("-n", type=int, metavar="N", help="how many conversations (default: 1)")
    parser.add_argument(
        "--seed", type=int, metavar="S", help="conversation i's models send seed S+i (default: each URI's seed)"
    )
    parser.add_argument(
        "--manifest", metavar="OUT.json", help="where the manifest goes (default: selfplay-<run id>.json)"
    )
    parser.add_argument(
        "--repeat", metavar="MANIFEST", help="hold a manifest's run again, into --store (which must not hold it)"
    )


def _selfplay(args: argparse.Namespace) -> int:
    from .persona import run_selfplay_command

    return run_selfplay_command(args)


def add_tau2_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``dial-runtime eval tau2``."""
    parser.add_argument(
        "--agent",
        required=True,
        metavar="URI|builtin:expected|builtin:unasked",
        help="the agent: a model URI (llamacpp:MODEL@HOST:PORT, ...; it gets the airline's policy in its system "
        "prompt), builtin:expected (does each task's expected actions through the runtime) or builtin:unasked "
        "(does them itself, without asking)",
    )
    parser.add_argument(
        "--persona-model",
        required=True,
        metavar="URI|builtin:accept|builtin:dismiss",
        help="the model playing each task's user: a model URI, or a rule (accept or dismiss every card, done "
        "once a built-in agent has finished)",
    )
    parser.add_argument(
        "--tasks", default="all", metavar="all|0-9|0,3,5", help="the tasks to run, by id (default: all)"
    )
    parser.add_argument("--store", metavar="URL", help="keep the conversations in this store (default: in memory)")
    parser.add_argument("--report", metavar="OUT.json", help="also write the report as JSON")
    parser.add_argument("--chart", metavar="OUT.png", help="also draw the run's rates as an image")
    parser.add_argument(
        "--grammar",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="constrain a model agent's replies to valid DIAL for the airline's tools (llama.cpp, vLLM)",
    )
    parser.add_argument(
        "--max-turns",
        type=int,
        default=12,
        metavar="N",
        help="things the user says at most per task (default: 12)",
    )
    parser.add_argument(
        "--agent-turns",
        type=int,
        default=30,
        metavar="N",
        help="replies the agent gives at most to each thing the user says (default: 30)",
    )
    parser.add_argument(
        "--timeout", type=float, default=600.0, metavar="S", help="seconds one reply may take (default: 600)"
    )
    parser.add_argument(
        "--task-timeout",
        type=float,
        default=1800.0,
        metavar="S",
        help="seconds one task may take in all; then it ends timeout (default: 1800)",
    )
    parser.add_argument(
        "--state-dir", metavar="DIR", help="where the server keeps its state (default: a temporary directory)"
    )


def _tau2(args: argparse.Namespace) -> int:
    try:
        from .tau2 import run_tau2_command
    except ImportError as error:  # the MCP SDK or the tau2 server is missing: both come with the eval extra
        raise _CommandError(
            f"eval tau2 needs the eval extra (pip install 'dial-runtime[eval]'): {error.name}"
        ) from None

    return run_tau2_command(args)


def _rules(args: argparse.Namespace) -> int:
    """``dial-runtime eval rules``: the report of :func:`~dial_runtime.decisions.rules.try_rules` over the store's
    decision points; 1 when a conversation's log could not be read (it is named, and left out)."""
    import sys

    import msgspec

    from ..decisions.rules import load_rules, try_rules
    from ..errors import LogError
    from ..stores.urls import read_stored
    from ..views.points import decision_points

    try:
        rules = load_rules(args.rules)
    except ValueError as error:
        raise _CommandError(f"--rules {error}") from None

    async def read_all(store: Any) -> dict[str, list[LogEntry]]:
        ids = list(args.id) or await store.conversations()
        return {conversation: await store.read(conversation) for conversation in ids}

    logs = read_stored(args.store, read_all)
    points, left_out = [], []
    for conversation, entries in logs.items():
        if not entries:
            left_out.append(f"{conversation}: no such conversation")
            continue
        try:
            points += decision_points(conversation, entries)
        except LogError as error:
            left_out.append(f"{conversation}: {error}")
    report = try_rules(rules, points)
    print(rules_text(report, conversations=len(logs) - len(left_out), rules=len(rules)))
    for line in left_out:
        print(f"left out: {line}", file=sys.stderr)
    if args.json:
        document = {"summary": report.summary(), "tried": msgspec.to_builtins(report.tried), "left_out": left_out}
        Path(args.json).write_text(msgspec.json.format(msgspec.json.encode(document)).decode() + "\n")
    return 1 if left_out else 0


def rules_text(report: Any, *, conversations: int, rules: int) -> str:
    """The report of ``eval rules`` as a person reads it: the counts, then each point that would have gone
    another way than people decided, and each rule answer that could not be used."""

    def line(tried: Any) -> str:
        point, verdict = tried.point, tried.verdict
        said = f"{verdict.rule}" + (f": {verdict.reason!r}" if verdict.reason else "")
        if verdict.error:
            said += f": {verdict.error}"
        who = f" by {point.decided_by}" if point.decided_by else ""
        return (
            f"  {point.conversation} {point.id}  {point.preview or point.action}  ({said}; {point.decided}{who})"
        )

    counts = report.summary()
    lines = [
        f"tried {rules} rule(s) at {counts['points']} decision point(s) of {conversations} conversation(s)",
        f"would have approved {counts['approved']} automatically, of which people had dismissed "
        f"{counts['approved_yet_dismissed']} and run {counts['approved_yet_edited']} only after an edit",
        *(line(each) for each in report.approved_yet_dismissed + report.approved_yet_edited),
        f"would have denied {counts['denied']}, of which people had accepted {counts['denied_yet_accepted']}",
        *(line(each) for each in report.denied_yet_accepted),
        f"would have asked {counts['asked']}",
    ]
    if report.errors:
        lines.append(f"rules whose answer could not be used (asked instead): {counts['errors']}")
        lines += [line(each) for each in report.errors]
    return "\n".join(lines)


def _candidates(given: Sequence[str]) -> dict[str, Candidate]:
    if not given:
        _usage("eval needs a --candidate (an agent URI, or python:MODULE:FACTORY)")
    found: dict[str, Candidate] = {}
    for number, text in enumerate(given, start=1):
        name, equals, spec = text.partition("=")
        if not equals or ":" in name or "/" in name:
            name, spec = (f"candidate-{number}" if len(given) > 1 else "candidate"), text
        if name in found or name == "recorded":
            _usage(f"--candidate {text!r}: the name {name!r} is taken; write NAME=AGENT")
        if spec.startswith(_FACTORY):
            from ..domains.loading import load_callable

            example = f"{_FACTORY}my_agents:make"
            found[name] = load_callable(spec.removeprefix(_FACTORY), option="--candidate", example=example)
        else:
            found[name] = spec
    return found


def _stored(url: str, wanted: Sequence[str]) -> dict[str, list[LogEntry]]:
    """The conversations ``wanted`` (every one when none is named) of the store ``url``, each checked as it would
    open (see :func:`~dial_runtime._stored.read_log`)."""
    from ..stores.urls import read_log, read_stored

    ids = list(wanted) or read_stored(url, lambda store: store.conversations())
    return {conversation: read_log(url, conversation) for conversation in ids}


def _run_eval(args: argparse.Namespace) -> int:
    import anyio

    from ..domains.loading import load_domain
    from .report import EvalReport, markdown, write_chart
    from .scoring import evaluate, read_jsonl_logs

    if args.id and args.store is None:
        _usage("--id names conversations of a --store")
    if args.store is None and not args.log:
        _usage("eval needs recorded conversations: --store URL (and --id), or --log FILE")
    candidates = _candidates(args.candidate)
    conversations = _stored(args.store, args.id) if args.store is not None else {}
    try:
        conversations.update(read_jsonl_logs(args.log))
    except ValueError as error:  # a --log file that cannot be read, or is not a log: the command line names it
        _usage(str(error))
    domain = None if args.domain is None else load_domain(args.domain)

    async def scored() -> EvalReport:
        return await evaluate(conversations, candidates, domain=domain, max_turns=args.max_turns)

    try:
        report = anyio.run(scored)
    except ValueError as error:  # a candidate URI that names no agent, or a script that cannot be read
        _usage(str(error))
    print(report)
    try:
        if args.json is not None:
            Path(args.json).write_bytes(report.to_json())
        if args.out is not None:
            folder = Path(args.out)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "report.json").write_bytes(report.to_json())
            write_chart(report, folder / "chart.png")
            (folder / "report.md").write_text(markdown(report, "chart.png"), encoding="utf-8")
    except OSError as error:
        raise _CommandError(f"cannot write the report: {error.strerror or error}") from None
    return 0
