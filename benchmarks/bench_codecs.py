"""What each codec costs a turn, against the DIAL codec, on the same scripted conversation: prints one JSON line.

The conversation is the approval conversation of ``bench_compare.py --public`` (the person asks for a note, the
agent proposes it, the person accepts, it runs, the agent acknowledges it): two turns. Each codec's agent answers
from a script of the model's own messages (DIAL text, a tool call, a JSON object of acts) and does what
:class:`~dial_runtime.llm.ChatAgent` does around a request: the history, the codec's messages for the runtime's
message, the codec's reading of the model's message, the reply with the model's message for the log. No HTTP by
default: the figure is the runtime's and the codec's work, which is what a codec adds.

The codecs take their passes in turn in one interpreter (so the machine's swings weigh on all alike), and the
report gives each codec's best pass in microseconds per turn and the median of the passes' ratios to the DIAL
codec's, with their quartiles. ``--instructions`` counts instructions per turn instead, under valgrind's
cachegrind (steadier than time; a pass of 1 conversation is taken from a pass of ``--conversations`` to leave the
start-up out). ``--through chat-agent`` measures the whole agent instead: a :class:`ChatAgent` per conversation
whose requests httpx answers in process (its ``MockTransport``), so the figure holds what a request costs this
side of the network. ``--smoke`` runs small sizes, and checks every codec's conversation ends as the DIAL one does.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, ClassVar

import anyio
import httpx
import msgspec

from dial_runtime import ActionSpec, Conversation, policy_human
from dial_runtime.llm.chat import ChatAgent
from dial_runtime.llm.codecs import Codec, DialCodec, StructuredCodec, ToolCallCodec
from dial_runtime.ports import AgentReply, ProviderMessage

#: The model's messages for each codec: the proposal, then the acknowledgement.
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "dial": [
        {
            "role": "assistant",
            "content": 'Sure.\n<dial>\n  <dial-suggest action="add-note">Add "buy milk"</dial-suggest>\n'
            '  <dial-declare context-key="add-note">{"text":"buy milk"}</dial-declare>\n</dial>',
        },
        {
            "role": "assistant",
            "content": '<dial>\n  <dial-acknowledge of="sg-1">Added.</dial-acknowledge>\n</dial>',
        },
    ],
    "tools": [
        {
            "role": "assistant",
            "content": "Sure.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "add-note", "arguments": '{"text":"buy milk"}'},
                }
            ],
        },
        {"role": "assistant", "content": "Added."},
    ],
    "json": [
        {
            "role": "assistant",
            "content": '{"acts":[{"act":"inform","text":"Sure."},{"act":"suggest","action":"add-note",'
            '"text":"Add \\"buy milk\\"","payload":{"text":"buy milk"}}]}',
        },
        {"role": "assistant", "content": '{"acts":[{"act":"inform","text":"Added."}]}'},
    ],
}


class Notes:
    """The domain of ``bench_compare.py --public``, with a payload schema for the tools and the JSON reply."""

    actions: ClassVar[dict[str, ActionSpec]] = {"add-note": ActionSpec(mutates=True)}
    vocabulary: ClassVar[dict[str, Any]] = {
        "add-note": {
            "description": "Add one note.",
            "schema": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
                "additionalProperties": False,
            },
        }
    }

    def __init__(self) -> None:
        self.count = 0

    def validate(self, action: str, payload: Any) -> Any:
        return {"ok": True} if isinstance(payload, dict) and payload.get("text") else {"ok": False, "code": "x"}

    def preview(self, action: str, payload: Any) -> str:
        return f"Add the note '{payload['text']}'"

    def run(self, action: str, payload: Any) -> Any:
        self.count += 1
        return {"count": self.count}

    def context(self) -> str:
        return f'<context notes="{self.count}"/>'


def make_codec(name: str) -> Codec:
    if name == "tools":
        return ToolCallCodec.for_domain(Notes())
    if name == "json":
        return StructuredCodec.for_domain(Notes())
    return DialCodec()


class ScriptedModel:
    """An agent doing what ``ChatAgent`` does around each request, the model's messages taken from a script."""

    def __init__(self, codec: Codec, script: list[dict[str, Any]]) -> None:
        self.codec, self.script = codec, list(script)
        self.history: list[dict[str, Any]] = []

    def send(self, message: str) -> str | AgentReply:
        incoming = self.codec.incoming(message, self.history)
        answer = self.script.pop(0)
        read = self.codec.read(answer, self.history + incoming)
        self.history += [*incoming, read.message]
        if self.codec.name == "dial":
            return read.dial
        return AgentReply(text=read.dial, provider=ProviderMessage(api="openai-chat", message=answer))


def chat_agent(name: str, codec: Codec) -> ChatAgent:
    """A :class:`ChatAgent` speaking ``codec`` (called ``name``) whose requests httpx answers in process, from the
    script."""
    # The answers in order, encoded once: the server's own work (reading the request, writing its answer) is not
    # the codec's, and reading the request would weigh the codecs' larger bodies (the tools, the schema).
    answers = iter(
        [
            msgspec.json.encode(
                {
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                }
            )
            for message in SCRIPTS[name]
        ]
    )

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=next(answers), headers={"content-type": "application/json"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    return ChatAgent("http://model.invalid/v1", "m", client=client, codec=codec)


class SendOnly:
    """A ChatAgent without its stream, as the scripted model has none."""

    def __init__(self, agent: ChatAgent) -> None:
        self.agent = agent

    async def send(self, message: str) -> str | AgentReply:
        return await self.agent.send(message)


async def talk(name: str, count: int, through: str = "codec") -> list[str]:
    """``count`` conversations with codec ``name``, ``through`` the codec alone or a ChatAgent; the outcomes'
    statuses of the last. The codec is made once: it is the same for every conversation in a domain, and its
    making (the tools, from the domain's vocabulary) is no turn's cost."""
    codec = make_codec(name)
    statuses: list[str] = []
    for _ in range(count):
        agent: Any = (
            ScriptedModel(codec, SCRIPTS[name]) if through == "codec" else SendOnly(chat_agent(name, codec))
        )
        conversation = Conversation(agent=agent, domain=Notes(), human=policy_human("accept"))
        result = await conversation.say("add a note: buy milk")
        statuses = [outcome.status for outcome in result.outcomes]
        if result.turns != 2 or statuses != ["done"]:
            raise AssertionError(f"the {name} codec's conversation ended {result.status}, {statuses}")
    return statuses


def one_pass(name: str, count: int, through: str) -> float:
    """Microseconds per turn of one pass of ``count`` conversations."""
    started = time.perf_counter()
    anyio.run(talk, name, count, through, backend="trio")
    return (time.perf_counter() - started) / (2 * count) * 1e6


def timed(names: list[str], conversations: int, passes: int, through: str) -> dict[str, Any]:
    for name in names:  # warm up: imports, caches
        one_pass(name, max(1, conversations // 10), through)
    taken: dict[str, list[float]] = {name: [] for name in names}
    for number in range(passes):
        order = names if number % 2 == 0 else names[::-1]
        for name in order:
            taken[name].append(one_pass(name, conversations, through))
    report: dict[str, Any] = {}
    for name in names:
        ratios = [mine / dial for mine, dial in zip(taken[name], taken["dial"], strict=True)]
        first, third = (ratios[0], ratios[0]) if len(ratios) < 2 else statistics.quantiles(ratios, n=4)[::2]
        report[name] = {
            "us_per_turn": round(min(taken[name]), 1),
            "ratio_to_dial": round(statistics.median(ratios), 3),
            "ratio_quartiles": [round(first, 3), round(third, 3)],
        }
    return report


def instructions(name: str, conversations: int, through: str) -> int:
    """Instructions per turn of codec ``name`` under cachegrind: a pass of ``conversations`` less a pass of 1."""

    def count(number: int) -> int:
        command = [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--one-pass",
            name,
            str(number),
            "--through",
            through,
        ]
        environment = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, capture_output=True, text=True, env=environment, check=True, timeout=600)
        found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
        if found is None:
            raise RuntimeError(f"no instruction count in valgrind's output:\n{done.stderr[-2000:]}")
        return int(found.group(1).replace(",", ""))

    return (count(conversations + 1) - count(1)) // (2 * conversations)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="small sizes, for CI")
    parser.add_argument("--conversations", type=int, default=300, metavar="N", help="per pass (default: 300)")
    parser.add_argument("--passes", type=int, default=9, metavar="N", help="per codec (default: 9)")
    parser.add_argument("--instructions", action="store_true", help="count instructions with valgrind instead")
    parser.add_argument(
        "--through",
        choices=("codec", "chat-agent"),
        default="codec",
        help="the codec alone (default), or a ChatAgent whose requests httpx answers in process",
    )
    parser.add_argument("--one-pass", nargs=2, metavar=("CODEC", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = list(SCRIPTS)
    if args.one_pass:
        anyio.run(talk, args.one_pass[0], int(args.one_pass[1]), args.through, backend="trio")
        return 0
    if args.conversations < 1 or args.passes < 1:
        parser.error("--conversations and --passes must be 1 or more")
    if args.smoke:
        args.conversations, args.passes = 20, 3
    report: dict[str, Any] = {"benchmark": "codecs", "python": platform.python_version(), "through": args.through}
    if args.instructions:
        if shutil.which("valgrind") is None:
            print(json.dumps({**report, "skipped": "no valgrind: apt-get install valgrind"}))
            return 0
        counted = {name: instructions(name, args.conversations, args.through) for name in names}
        report["instructions_per_turn"] = counted
        report["ratio_to_dial"] = {name: round(counted[name] / counted["dial"], 3) for name in names}
    else:
        report["conversations"], report["passes"] = args.conversations, args.passes
        report.update(timed(names, args.conversations, args.passes, args.through))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
