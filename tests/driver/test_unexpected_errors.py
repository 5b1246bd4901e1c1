"""An action that fails by an exception not raised on purpose: its text (a DSN with a password, a path, a key)
reaches no one but the operator's log. The agent, the log, every surface and the web's wire and snapshots are
told only its type; a failure raised on purpose (an ``ActionError``, or an exception with a ``code``) keeps its
words."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import msgspec
import pytest

from dial_runtime import ActionError, Conversation, policy_human, project
from dial_runtime.terminal.transcript import Transcript
from dial_runtime.web import create_app, scripted_agents
from dial_runtime.web.mapping import messages_from_log

from ..fakes import Agent, Notes, envelope, suggest
from ..web_server import accept, interrupts, run, run_input, serving

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend(real_clocks: str) -> str:
    """Real clocks: the web test waits on a server in another thread."""
    return real_clocks


SECRET = "postgresql://app:hunter2@db.internal/orders"
ACK = "<dial><dial-acknowledge>Sorry.</dial-acknowledge></dial>"
ADD = envelope(suggest("add-note", '{"text":"buy milk"}'))


class Coded(Exception):
    """Not an ActionError, but it carries a code: raised on purpose."""

    code = "quota"


class Leaky(Notes):
    """Notes whose ``add-note`` fails by ``error``."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    async def run(self, action: str, payload: Any) -> Any:
        raise self.error


FAILURES = [
    pytest.param(RuntimeError(f"no route to {SECRET}"), "the action raised RuntimeError", id="unexpected"),
    pytest.param(KeyError(SECRET), "the action raised KeyError", id="unexpected-key"),
    pytest.param(ActionError("the notebook is full", code="full"), "the notebook is full", id="action-error"),
    pytest.param(Coded("over quota"), "over quota", id="a-code"),
]


def written(log: Any) -> str:
    """The transcript of the log, as ``transcript`` writes it."""
    lines: list[str] = []
    shown = Transcript(lines.append)
    for entry in log:
        shown.show(entry)
    return "\n".join(lines)


@pytest.mark.parametrize(("error", "told"), FAILURES)
async def test_only_a_deliberate_failure_keeps_its_words(
    error: Exception, told: str, caplog: pytest.LogCaptureFixture
) -> None:
    agent = Agent([ADD, ACK])
    conversation = Conversation(agent=agent, domain=Leaky(error), human=policy_human("accept"))
    with caplog.at_level(logging.ERROR, logger="dial_runtime"):
        result = await conversation.say("add milk")
    (outcome,) = result.outcomes
    assert (outcome.status, outcome.error) == ("failed", told)
    log = conversation.log
    everything_read = [
        msgspec.json.encode(log).decode(),
        msgspec.json.encode(project(log).items).decode(),
        json.dumps([message.model_dump(mode="json") for message in messages_from_log(log)]),
        written(log),
        agent.sent[-1],
    ]
    for text in everything_read:
        assert SECRET not in text
    assert told in agent.sent[-1]
    operator = [record for record in caplog.records if record.exc_info is not None]
    assert bool(operator) == (told.startswith("the action raised"))
    if operator:
        assert SECRET in str(operator[0].exc_info[1])  # type: ignore[index]


async def test_the_web_surface_never_sends_an_unexpected_exception_s_text() -> None:
    app = create_app(
        store="memory:",
        domain=Leaky(RuntimeError(f"could not connect to {SECRET}")),
        agent=scripted_agents([ADD, ACK]),
    )
    with serving(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10.0) as client:
            (interrupt,) = interrupts(await run(client, run_input("leaky", words="add milk")))
            accepted = await run(client, run_input("leaky", resume=[accept(interrupt)]))
            snapshot = await run(client, run_input("leaky"))
    wire = json.dumps([accepted, snapshot])
    assert SECRET not in wire
    assert "the action raised RuntimeError" in wire


class RaisingNotes(Notes):
    """Notes whose callback ``where`` raises an unexpected error with a secret in its text."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where

    def _raise_in(self, where: str) -> None:
        if where == self.where:
            raise ValueError(f"cannot reach {SECRET}")

    def validate(self, action: str, payload: Any) -> Any:
        self._raise_in("validate")
        return super().validate(action, payload)

    def context(self) -> str:
        self._raise_in("context")
        return ""


class RaisingHuman:
    def decide(self, suggestion: Any) -> Any:
        raise ValueError(f"the approvals database {SECRET} is down")

    def answer(self, ask: Any) -> Any:
        raise ValueError(f"the approvals database {SECRET} is down")


class RaisingAgent(Agent):
    def send(self, message: str) -> str:
        raise ConnectionError(f"cannot reach {SECRET}")


CALLBACKS = {
    "domain.validate": lambda: (Agent([ADD, ACK]), RaisingNotes("validate"), policy_human("accept")),
    "domain.context": lambda: (Agent([ADD, ACK]), RaisingNotes("context"), policy_human("accept")),
    "human.decide": lambda: (Agent([ADD, ACK]), Notes(), RaisingHuman()),
    "agent.send": lambda: (RaisingAgent([]), Notes(), policy_human("accept")),
}


@pytest.mark.parametrize("callback", list(CALLBACKS))
async def test_a_callback_that_raises_gives_the_log_its_type_and_the_operator_its_text(
    callback: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Whichever callback raises by accident, ``say`` raises it to its caller as it was, the log and every
    surface keep only its type, and the ``dial_runtime`` logger has its text and traceback."""
    agent, domain, human = CALLBACKS[callback]()
    conversation = Conversation(agent=agent, domain=domain, human=human)
    with caplog.at_level(logging.ERROR, logger="dial_runtime"), pytest.raises(Exception, match="hunter2"):
        await conversation.say("add milk")
    log = conversation.log
    for text in [
        msgspec.json.encode(log).decode(),
        msgspec.json.encode(project(log).items).decode(),
        json.dumps([message.model_dump(mode="json") for message in messages_from_log(log)]),
        written(log),
    ]:
        assert "hunter2" not in text
    stopped = [entry.event for entry in log if entry.event.type in ("interrupted", "send-failed")]
    assert stopped and all(
        getattr(event, "reason", getattr(event, "error", None)) in ("ValueError", "ConnectionError")
        for event in stopped
    ), stopped
    assert any(record.exc_info and "hunter2" in str(record.exc_info[1]) for record in caplog.records)
