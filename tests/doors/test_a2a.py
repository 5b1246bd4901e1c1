"""A dial-runtime conversation served as an A2A task, driven by a2a-sdk's own client over HTTP (uvicorn): a card
waiting is the task's input-required state with the card as a data part, a decision is a message checked as
every decision is, and the task completes with the outcomes as an artifact."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import get_data_parts, new_data_part, new_text_part
from a2a.types.a2a_pb2 import (
    Message,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)

from dial_runtime import ActionSpec, ApprovalPolicy, ScriptedAgent
from dial_runtime.doors.a2a import a2a_app

from ..decisions.test_notify_servers import Receiver, receiving
from ..fakes import Notes, envelope, suggest
from ..web_server import free_port, serving

pytestmark = pytest.mark.anyio

ADD = envelope(suggest("add-note", '{"text":"buy milk"}'), prose="Here is the note.")
ACK = '<dial><dial-acknowledge of="sg-1">Added.</dial-acknowledge></dial>'


class SignedNotes(Notes):
    """The notes, whose removals two reviewers must approve."""

    actions: ClassVar[dict[str, Any]] = {
        **Notes.actions,
        "remove-note": ActionSpec(
            mutates=True, policy=ApprovalPolicy(approvals=2, roles=frozenset({"reviewers"}))
        ),
    }


SCRIPTS: dict[str, list[str]] = {}


def agents(conversation_id: str, log: Any) -> ScriptedAgent:
    """Each conversation's agent: the replies its test set, taken up where its log left them."""
    replies = SCRIPTS.setdefault(conversation_id, [ADD, ACK])
    told = sum(1 for entry in log if entry.event.type == "reply")
    return ScriptedAgent(replies[told:])


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    app = a2a_app(
        store=f"sqlite:{tmp_path / 'a2a.db'}",
        domain=SignedNotes(),
        agent=agents,
        name="notes",
        url=f"http://127.0.0.1:{port}/",
        principal=lambda call: call.state["headers"].get("x-user"),
        roles=lambda principal: {"rita": ["reviewers"], "rex": ["reviewers"]}.get(principal, []),
    )
    with serving(app, port) as served:
        yield served


@pytest.fixture
async def client(url: str) -> AsyncIterator[Any]:
    async with httpx.AsyncClient(base_url=url, headers={"x-user": "ada"}, timeout=30) as http:
        made = await create_client(url, ClientConfig(streaming=False, httpx_client=http))
        yield made
        await made.close()


async def send(client: Any, *parts: Any, context_id: str = "", task_id: str = "", push: str | None = None) -> Task:
    message = Message(
        message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=list(parts), context_id=context_id, task_id=task_id
    )
    configuration = SendMessageConfiguration(
        task_push_notification_config=TaskPushNotificationConfig(url=push, token="secret-7") if push else None
    )
    found = None
    async for response in client.send_message(SendMessageRequest(message=message, configuration=configuration)):
        if response.HasField("task"):
            found = response.task
    assert found is not None, "the server answers with the task"
    return found


def cards(task: Task) -> list[dict[str, Any]]:
    return [part["card"] for part in get_data_parts(list(task.status.message.parts)) if "card" in part]


def refusals(task: Task) -> list[dict[str, Any]]:
    return [part["refused"] for part in get_data_parts(list(task.status.message.parts)) if "refused" in part]


def decision(card: dict[str, Any], choice: str, **extra: Any) -> Any:
    return new_data_part(
        {"decision": {"suggestion": card["suggestion"], "choice": choice, "digest": card["digest"], **extra}}
    )


async def test_a_waiting_card_is_input_required_and_a_decision_completes_the_task(client: Any) -> None:
    task = await send(client, new_text_part("add milk"))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    (card,) = cards(task)
    assert (card["action"], card["preview"], card["payload"]) == (
        "add-note",
        "Add the note 'buy milk'",
        {"text": "buy milk"},
    )
    done = await send(client, decision(card, "accept"), context_id=task.context_id, task_id=task.id)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    outcomes = [part["outcome"] for artifact in done.artifacts for part in get_data_parts(list(artifact.parts))]
    assert outcomes == [{"suggestion": "sg-1", "action": "add-note", "status": "done", "result": {"count": 1}}]


@pytest.mark.parametrize(
    ("change", "code"),
    [
        pytest.param({"digest": "sha256:" + "0" * 64}, "PayloadChanged", id="stale-digest"),
        pytest.param({"suggestion": "sg-9"}, "NotWaiting", id="no-such-card"),
        pytest.param({"choice": "maybe"}, "malformed", id="unknown-choice"),
        pytest.param({"digest": None}, "no-digest", id="no-digest"),
    ],
)
async def test_a_decision_that_cannot_be_taken_is_refused_and_the_card_waits(
    client: Any, change: dict[str, Any], code: str
) -> None:
    task = await send(client, new_text_part("add milk"))
    (card,) = cards(task)
    shown = {"suggestion": card["suggestion"], "choice": "accept", "digest": card["digest"], **change}
    refused = await send(client, new_data_part({"decision": shown}), context_id=task.context_id, task_id=task.id)
    assert refused.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert [each["code"] for each in refusals(refused)] == [code]
    assert cards(refused) == [card], "the card waits on, as it was"
    done = await send(client, decision(card, "accept"), context_id=task.context_id, task_id=task.id)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED


async def test_a_decision_the_policy_does_not_admit_is_refused(url: str) -> None:
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    SCRIPTS[conversation] = [envelope(suggest("remove-note", '{"text":"old"}')), ACK]
    async with httpx.AsyncClient(base_url=url, headers={"x-user": "ada"}, timeout=30) as http:
        ada = await create_client(url, ClientConfig(streaming=False, httpx_client=http))
        task = await send(ada, new_text_part("remove old"), context_id=conversation)
        (card,) = cards(task)
        refused = await send(ada, decision(card, "accept"), context_id=conversation, task_id=task.id)
        assert [each["code"] for each in refusals(refused)] == ["approval-refused"]
        await ada.close()
    for reviewer, state in (
        ("rita", TaskState.TASK_STATE_INPUT_REQUIRED),
        ("rex", TaskState.TASK_STATE_COMPLETED),
    ):
        async with httpx.AsyncClient(base_url=url, headers={"x-user": reviewer}, timeout=30) as http:
            them = await create_client(url, ClientConfig(streaming=False, httpx_client=http))
            task = await send(them, decision(card, "accept"), context_id=conversation, task_id=task.id)
            assert task.status.state == state
            await them.close()


async def test_each_update_of_a_task_is_pushed_as_webhooks_are_delivered(client: Any) -> None:
    """The receiver refuses the first POST (503): it is tried again under the same Idempotency-Key, and every
    update arrives once delivered, with the task's token."""
    receiver = Receiver(statuses=(503,))
    with receiving(receiver) as hook:
        task = await send(client, new_text_part("add milk"), push=f"{hook}/a2a")
        (card,) = cards(task)
        await send(client, decision(card, "accept"), context_id=task.context_id, task_id=task.id)
        deadline = anyio.current_time() + 10
        while not _states(receiver, TaskState.TASK_STATE_COMPLETED) and anyio.current_time() < deadline:
            await anyio.sleep(0.05)
    assert _states(receiver, TaskState.TASK_STATE_INPUT_REQUIRED), "the card waiting was pushed"
    assert _states(receiver, TaskState.TASK_STATE_COMPLETED), "and the task completing"
    first, again = receiver.posts[0], receiver.posts[1]
    assert first[1]["idempotency-key"] == again[1]["idempotency-key"] and first[2] == again[2], "retried the same"
    assert all(headers["x-a2a-notification-token"] == "secret-7" for _, headers, _ in receiver.posts)


def _states(receiver: Receiver, state: int) -> list[Any]:
    """The pushes that carry the task in ``state``."""
    found = []
    for _, _, body in receiver.posts:
        pushed = json.loads(body)
        status = pushed.get("statusUpdate", pushed.get("task", {})).get("status", {})
        if status.get("state") == TaskState.Name(state):
            found.append(pushed)
    return found
