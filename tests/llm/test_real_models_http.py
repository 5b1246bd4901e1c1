"""What real servers do to a streamed reply: one that dies mid-reply, one that stops at the model's token limit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from dial_runtime import AgentError, ChatAgent, Conversation, policy_human
from dial_runtime.runtime.events import ReplyCutEvent

from ..fakes import Notes, envelope, stop, suggest
from ..openai_server import OpenAIServer, Reply

pytestmark = pytest.mark.anyio

INFORM = "<dial><dial-inform>I will remove the note you named, as you asked me to do earlier.</dial-inform>"
HALF_SUGGEST = '<dial-suggest action="remove-note"><dial-payload>{"text":"call'
REST = ' mom"}</dial-payload></dial-suggest></dial>'
OK = "<dial><dial-inform>ok</dial-inform></dial>"

#: A server in a process of its own: streams the first two of three pieces of its reply, then holds the rest.
CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from tests.openai_server import OpenAIServer, Reply
server = OpenAIServer([Reply(sys.argv[2], chunks=3, hold_after=2)]).start()
print(server.port, flush=True)
time.sleep(60)
"""


@pytest.fixture
def anyio_backend(real_clocks: str) -> str:
    return real_clocks


@pytest.fixture
def dying_server() -> Iterator[tuple[subprocess.Popen[str], str]]:
    root = str(Path(__file__).resolve().parents[2])
    # Three pieces: the inform whole and the suggestion begun, then (held back) the suggestion's end.
    text = INFORM + HALF_SUGGEST + REST
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, root, text], stdout=subprocess.PIPE, text=True, env={**os.environ}
    )
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        assert port, "the server did not start"
        yield process, f"http://127.0.0.1:{port}/v1"
    finally:
        if process.poll() is None:
            stop(process)
        if process.stdout is not None:
            process.stdout.close()


async def test_a_server_killed_mid_reply_cuts_it_and_nothing_unfinished_is_proposed(
    dying_server: tuple[subprocess.Popen[str], str],
) -> None:
    process, base_url = dying_server
    domain = Notes()
    killed = anyio.Event()

    def on_event(event: Any) -> None:
        if event.type == "inform" and not killed.is_set():  # the inform is whole, the suggestion half-sent
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
            killed.set()

    async with ChatAgent(base_url, "any-model", max_retries=0) as agent:
        conversation = Conversation(agent=agent, domain=domain, human=policy_human(), on_event=on_event)
        with anyio.fail_after(30), pytest.raises(AgentError):  # the next turn's message finds no server
            await conversation.say("remove 'call mom'")
    assert killed.is_set()
    events = [entry.event for entry in conversation.log]
    kinds = [event.type for event in events]
    assert "proposed" not in kinds and domain.ran == []
    (cut,) = [event for event in events if isinstance(event, ReplyCutEvent)]
    assert cut.cause == "broken" and cut.error is not None and "broke off" in cut.error
    assert kinds[kinds.index("reply") + 1] == "reply-cut"
    (refused,) = [event for event in events if event.type == "reply-refused"]
    assert refused.reason.startswith("the reply was cut: the stream broke off")
    with OpenAIServer([OK]) as server:  # the agent's next message says what happened
        async with ChatAgent(server.base_url, "any-model") as conversation.agent:
            await conversation.say("and now?")
        told = server.requests[0].messages[-1]["content"]
    assert 'yield="reply-1:invalid"' in told and "the stream broke off" in told


async def test_a_reply_at_the_token_limit_is_cut_and_the_agent_told() -> None:
    cut_short = INFORM + HALF_SUGGEST
    with OpenAIServer([Reply(cut_short, chunks=4, finish_reason="length"), OK]) as server:
        domain = Notes()
        async with ChatAgent(server.base_url, "any-model", max_tokens=40) as agent:
            conversation = Conversation(agent=agent, domain=domain, human=policy_human())
            result = await conversation.say("remove 'call mom'")
        told = server.requests[1].messages[-1]["content"]
    assert result.status == "idle" and domain.ran == []
    events = [entry.event for entry in conversation.log]
    assert [event.cause for event in events if isinstance(event, ReplyCutEvent)] == ["token-limit"]
    assert "proposed" not in {event.type for event in events}
    assert "token limit" in told and "send a shorter reply" in told
    assert "not valid JSON" not in told


async def test_a_complete_suggestion_before_the_break_is_still_proposed() -> None:
    whole = envelope(suggest("add-note", '{"text":"milk"}'))[: -len("</dial>")]
    with OpenAIServer([Reply(whole + HALF_SUGGEST + REST, chunks=2, drop_after=1), OK]) as server:
        domain = Notes()
        async with ChatAgent(server.base_url, "any-model") as agent:
            conversation = Conversation(agent=agent, domain=domain, human=policy_human())
            await conversation.say("add milk")
    kinds = [entry.event.type for entry in conversation.log]
    assert domain.ran == [("add-note", {"text": "milk"})] and kinds.count("proposed") == 1
    assert "reply-cut" in kinds
