"""Cut replies from a real model: SmolLM2-135M on llama.cpp's ``llama-server`` (see ``tests/llm/test_llama.py``).

A reply the model's ``max_tokens`` ends (``finish_reason: length``) and a stream the server's death breaks off
are both cut replies: logged ``reply-cut`` with their cause, only their complete elements handled, and the agent
told in the next message.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import anyio
import pytest

from dial_runtime import Conversation, policy_human
from dial_runtime.llm.chat import ChatAgent

from .test_llama import REQUEST, Notes, llama, llama_server

pytestmark = [pytest.mark.llama, pytest.mark.anyio]

__all__ = ["llama"]


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


def logged(conversation: Conversation, kind: str) -> list[Any]:
    return [entry.event for entry in conversation.log if entry.event.type == kind]


async def test_a_reply_the_token_limit_ends_is_cut_and_the_agent_is_told(llama: str) -> None:
    settings = {"temperature": 0.0, "seed": 1, "max_tokens": 6}
    prompt = "Answer in DIAL: <dial><dial-inform>...</dial-inform></dial>."
    async with ChatAgent(f"{llama}/v1", "smollm2", system_prompt=prompt, server="llamacpp", **settings) as agent:
        conversation = Conversation(
            agent=agent, domain=Notes(), human=policy_human("accept"), timeout=REQUEST, max_turns=2
        )
        with anyio.fail_after(2 * REQUEST):
            await conversation.say("Tell me about the notes you keep, at length.")
    cuts = logged(conversation, "reply-cut")
    assert cuts and cuts[0].turn == 1 and cuts[0].cause == "token-limit", cuts
    told = logged(conversation, "sent")[1].message
    assert "the model reached its token limit" in told and "send a shorter reply" in told, told


#: A reply that shows an inform, then writes a suggestion long enough to be under way when the server dies.
LONG_SUGGESTION = (
    'root ::= "<dial>\\n<dial-inform>Adding it.</dial-inform>\\n<dial-suggest action=\\"add-note\\">" '
    '[a-z ]{600,700} "<dial-payload>{\\"text\\":\\"milk\\"}</dial-payload></dial-suggest>\\n</dial>"'
)


class KillingTheServerMidSuggestion:
    """The agent's stream, passed on piece by piece, SIGKILLing the server once a suggestion has begun."""

    def __init__(self, agent: ChatAgent, server: subprocess.Popen[bytes]) -> None:
        self.agent, self.server = agent, server
        self.send = agent.send

    async def stream(self, message: str) -> AsyncGenerator[str, None]:
        so_far = ""
        async with contextlib.aclosing(self.agent.stream(message)) as pieces:
            async for piece in pieces:
                so_far += piece
                if "<dial-suggest" in so_far and self.server.poll() is None:
                    self.server.kill()
                yield piece


async def test_a_stream_the_servers_death_breaks_off_proposes_nothing_unfinished(tmp_path: Path) -> None:
    with llama_server(tmp_path / "server.log") as (url, process):
        settings = {"temperature": 0.0, "seed": 1, "max_tokens": 1000, "max_retries": 0}
        async with ChatAgent(
            f"{url}/v1", "smollm2", server="llamacpp", grammar=LONG_SUGGESTION, **settings
        ) as agent:
            conversation = Conversation(
                agent=KillingTheServerMidSuggestion(agent, process),
                domain=Notes(),
                human=policy_human("accept"),
                timeout=REQUEST,
                max_turns=1,
            )
            with anyio.fail_after(2 * REQUEST):
                await conversation.say("add a note: milk")
        assert process.wait(timeout=10) == -signal.SIGKILL
    (cut,) = logged(conversation, "reply-cut")
    assert cut.cause == "broken" and cut.error, cut
    (shown,) = logged(conversation, "inform")
    assert shown.text == "Adding it."  # the complete element is handled
    assert not logged(conversation, "proposed") and not logged(conversation, "suggestion")
    (reply,) = logged(conversation, "reply")
    assert "<dial-suggest" in reply.text and "</dial-suggest>" not in reply.text, reply.text
