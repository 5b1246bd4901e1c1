"""A dial-runtime conversation served as an A2A task (``a2a-sdk``): the card a person decides is the task's
``input-required`` state, and the decision is a message.

::

    app = a2a_app(store="sqlite:chats.db", domain=NotesDomain(), agent=agent_factory(uri, domain),
                  name="notes", url="http://127.0.0.1:8000")      # a Starlette app: uvicorn serves it

An A2A client sends a message; its ``context_id`` names the conversation (the server makes one for a first
message), and its text is said to the conversation's agent, as the panel says a person's words. When the call
leaves cards waiting, the task is ``TASK_STATE_INPUT_REQUIRED``, its status message holding the agent's words
and, for each card, a data part ``{"card": {...}}`` (its ``suggestion`` id, ``action``, ``preview``,
``payload``, ``digest``, ``destructive``, ``approvals_needed``). The client answers with a message in the same
task whose data parts carry decisions, ``{"decision": {"suggestion": "sg-1", "choice": "accept", "digest":
"sha256:..."}}`` (``dismiss``; ``edit`` with ``"payload"``), each checked as every decision is: the digest of
what was shown, the decider's roles under the action's approval policy, a card that is still waiting. A refused
decision leaves the card waiting, and the status message says why (a data part ``{"refused": {...}}``). Once
nothing waits the task is ``TASK_STATE_COMPLETED``, with the call's outcomes as an artifact (a data part each).

A client that registers a push notification config for a task (an URL, a token, authentication) is told of
each update of it by :class:`WebhookPushSender`: POSTed as dial-runtime's webhooks are (each update a
``StreamResponse`` under an ``Idempotency-Key`` of its own, retried by the runtime's retry policy, a receiver's
4xx final), so an update that failed to arrive is sent again, and one that arrived twice can be told apart.

Who decides is ``principal(call_context)``: by default the authenticated user the A2A server's authentication put
on the call (``user.user_name``); nobody otherwise, which an approval policy refuses. ``roles(principal)`` are
theirs.

Needs ``a2a-sdk[http-server]`` (``pip install 'dial-runtime[a2a]'``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..driver import Conversation
from ..errors import DialError
from ..runtime.records import Accept, Dismiss, Edit
from ..views.person import AgentText, Card, approval_refused, project

try:
    from a2a.helpers.proto_helpers import get_data_parts, get_message_text, new_data_part, new_task, new_text_part
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.context import ServerCallContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes.agent_card_routes import create_agent_card_routes
    from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
    from a2a.server.tasks import (
        InMemoryPushNotificationConfigStore,
        InMemoryTaskStore,
        PushNotificationConfigStore,
        PushNotificationSender,
        TaskStore,
        TaskUpdater,
    )
    from a2a.server.tasks.push_notification_sender import PushNotificationEvent
    from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, TaskState
    from a2a.utils.constants import PROTOCOL_VERSION_CURRENT
    from a2a.utils.proto_utils import to_stream_response
    from google.protobuf.json_format import MessageToDict
    from starlette.applications import Starlette
except ImportError as error:  # pragma: no cover - only without the extra
    raise ImportError("dial_runtime.doors.a2a needs the A2A SDK: pip install 'dial-runtime[a2a]'") from error

if TYPE_CHECKING:  # the links extra's, loaded only when pushes go out
    from ..decisions.notify import Notifications

logger = logging.getLogger(__name__)

__all__ = ["ConversationExecutor", "WebhookPushSender", "a2a_app"]

#: Who decides, from the call's context: a principal, or ``None`` (nobody known).
Principal = Callable[[ServerCallContext], "str | None"]


def authenticated_user(call: ServerCallContext) -> str | None:
    """The user the A2A server's authentication put on the call, else ``None``."""
    user = call.user
    return user.user_name if user.is_authenticated else None


class ConversationExecutor(AgentExecutor):
    """Each A2A task a call of a stored conversation (see the module): ``open_conversation(conversation_id)``
    opens the conversation of a context (as :func:`~dial_runtime.decisions.deadlines.conversation_opener`
    builds them); ``principal`` and ``roles`` say who decides."""

    def __init__(
        self,
        open_conversation: Callable[[str], Awaitable[Conversation]],
        *,
        principal: Principal = authenticated_user,
        roles: Callable[[str], Iterable[str]] = lambda principal: (),
    ) -> None:
        self.open_conversation = open_conversation
        self.principal = principal
        self.roles = roles

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        updater = TaskUpdater(event_queue, task_id, context_id)
        message = context.message
        if context.current_task is None:
            history = [message] if message is not None else []
            await event_queue.enqueue_event(
                new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED, history=history)
            )
        await updater.start_work()
        by = self.principal(context.call_context)
        held = tuple(self.roles(by)) if by is not None else ()
        conversation = await self.open_conversation(context_id)
        async with conversation.holding():  # the log as stored: what the decisions are checked against
            started = len(conversation.log)
        refused: list[dict[str, Any]] = []
        decisions = [part["decision"] for part in _data(message) if "decision" in part]
        try:
            if decisions:
                for decision in decisions:
                    refusal = await _decide(conversation, decision, by, held)
                    if refusal is not None:
                        refused.append(refusal)
            else:
                await conversation.say(get_message_text(message) if message is not None else "", by=by, roles=held)
        finally:
            close = getattr(conversation.agent, "aclose", None)
            if close is not None:
                await close()
        await _report(updater, conversation.log, started, refused)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()


async def _decide(
    conversation: Conversation, decision: Any, by: str | None, roles: tuple[str, ...]
) -> dict[str, Any] | None:
    """Take one decision of a message; why it was refused, else ``None``."""
    if not isinstance(decision, Mapping) or not isinstance(decision.get("suggestion"), str):
        return {"code": "malformed", "hint": 'A decision is {"suggestion": ID, "choice": ..., "digest": ...}.'}
    suggestion, choice = decision["suggestion"], decision.get("choice")
    chosen: Accept | Dismiss | Edit
    if choice == "accept":
        chosen = Accept()
    elif choice == "dismiss":
        chosen = Dismiss()
    elif choice == "edit" and "payload" in decision:
        chosen = Edit(decision["payload"])
    else:
        hint = "choice is accept, dismiss or edit (with payload)."
        return {"suggestion": suggestion, "code": "malformed", "hint": hint}
    digest = decision.get("digest")
    if not isinstance(digest, str):
        return {
            "suggestion": suggestion,
            "code": "no-digest",
            "hint": "Send the digest of the card you decide on.",
        }
    before = project(conversation.log).card(suggestion)
    try:
        await conversation.decide(suggestion, chosen, by=by, shown=digest, via="a2a", roles=roles)
    except DialError as error:  # already decided, a payload changed, not waiting, busy
        return {"suggestion": suggestion, "code": type(error).__name__, "hint": str(error)}
    refused = approval_refused(before, project(conversation.log).card(suggestion))
    if refused is not None:
        return {"suggestion": suggestion, "code": "approval-refused", "hint": refused}
    return None


async def _report(updater: TaskUpdater, log: Any, started: int, refused: list[dict[str, Any]]) -> None:
    """The task's state after the call: input required with the waiting cards, else completed with the call's
    outcomes as an artifact; the agent's words and any refusal in the status message."""
    projection = project(log)
    parts: list[Part] = []
    words = [item.text for item in projection.items if isinstance(item, AgentText) and (item.seq or 0) > started]
    if words:
        parts.append(new_text_part("\n\n".join(words)))
    parts += [new_data_part({"refused": refusal}) for refusal in refused]
    waiting = [item for item in projection.items if isinstance(item, Card) and item.waiting]
    if waiting:
        parts += [new_data_part({"card": _shown(card)}) for card in waiting]
        await updater.requires_input(updater.new_agent_message(parts))
        return
    ended = [
        item
        for item in projection.items
        if isinstance(item, Card) and item.reported is not None and (item.ended_seq or 0) > started
    ]
    if ended:
        outcomes = [_outcome(card) for card in ended]
        await updater.add_artifact(outcomes, name="outcomes")
    await updater.complete(updater.new_agent_message(parts or [new_text_part("")]))


def _outcome(card: Card) -> Part:
    assert card.reported is not None
    return new_data_part({"outcome": {"suggestion": card.id, **card.reported.fact()}})


def _shown(card: Card) -> dict[str, Any]:
    """A waiting card as the client is shown it: what it decides on, and the digest a decision names."""
    return {
        "suggestion": card.id,
        "action": card.action,
        "preview": card.preview,
        "text": card.text,
        "payload": json.loads(json.dumps(card.payload, default=str)),
        "digest": card.digest,
        "destructive": card.destructive,
        "approvals_needed": card.approvals_needed,
        "approvers": list(card.approvers),
    }


def _data(message: Any) -> list[dict[str, Any]]:
    """The message's data parts that are objects."""
    if message is None:
        return []
    return [part for part in get_data_parts(list(message.parts)) if isinstance(part, dict)]


class WebhookPushSender(PushNotificationSender):
    """A2A push notifications delivered as dial-runtime delivers webhooks (see the module): each config the
    ``config_store`` holds for a task gets each update of it, through a
    :class:`~dial_runtime.decisions.notify.WebhookNotifier` (its token as ``X-A2A-Notification-Token``, its
    authentication as ``Authorization``), tried by ``delivery``'s policy (by default 5 tries, backing off from
    1 s). Never raises: what could not be delivered is logged and kept in ``delivery.undelivered``."""

    def __init__(self, config_store: PushNotificationConfigStore, delivery: Notifications | None = None) -> None:
        from ..decisions.notify import Notifications

        self.config_store = config_store
        self.delivery = delivery if delivery is not None else Notifications([])

    async def send_notification(self, task_id: str, event: PushNotificationEvent) -> None:
        from ..decisions.notify import WebhookNotifier

        try:
            configs = await self.config_store.get_info_for_dispatch(task_id)
        except Exception:
            logger.exception("the push configs of A2A task %s could not be read; nothing pushed", task_id)
            return
        body = MessageToDict(to_stream_response(event))
        key = f"{task_id}:{hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:24]}"
        for config in configs:
            headers = {}
            if config.token:
                headers["X-A2A-Notification-Token"] = config.token
            if config.HasField("authentication") and config.authentication.scheme:
                scheme, credentials = config.authentication.scheme, config.authentication.credentials
                headers["Authorization"] = f"{scheme} {credentials}".strip()
            try:
                notifier = WebhookNotifier(config.url, headers=headers, shape="json")
            except ValueError as error:  # not an http(s) URL: nothing to try
                logger.error("A2A push of task %s not delivered: %s", task_id, error)
                continue

            async def post(notifier: Any = notifier) -> None:
                await notifier.post(body, key=key)

            await self.delivery.attempt(
                post, key=key, about=f"A2A push {key} to {notifier.label}", label=notifier.label
            )


def a2a_app(
    *,
    store: Any,
    domain: Any,
    agent: Any,
    name: str,
    url: str,
    description: str = "",
    principal: Principal = authenticated_user,
    roles: Callable[[str], Iterable[str]] = lambda principal: (),
    task_store: TaskStore | None = None,
    push: Any = True,
    push_url_validator: Callable[[str], Awaitable[bool]] | None = None,
) -> Starlette:
    """The A2A server of conversations over ``domain`` with ``agent`` (an agent factory, as ``serve`` builds
    one), kept in ``store`` (a store or its URL): its agent card at ``/.well-known/agent-card.json`` and JSON-RPC
    at ``/`` (``url`` is where clients reach it). ``task_store`` keeps the A2A tasks (in memory by default: the
    conversations themselves are in ``store``). ``push``: push notifications (:class:`WebhookPushSender`), with
    the delivery policy given (a :class:`~dial_runtime.decisions.notify.Notifications`), or ``False`` for none;
    ``push_url_validator`` screens the URLs clients register (the A2A SDK's
    ``validate_push_notification_url`` refuses private addresses: use it on a public server)."""
    from ..decisions.deadlines import conversation_opener
    from ..stores import open_store

    opened = open_store(store) if isinstance(store, str) else store
    executor = ConversationExecutor(
        conversation_opener(opened, agent=agent, domain=domain), principal=principal, roles=roles
    )
    card = AgentCard(
        name=name,
        description=description or str(getattr(domain, "description", "") or name),
        version="1",
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", url=url, protocol_version=PROTOCOL_VERSION_CURRENT)
        ],
        capabilities=AgentCapabilities(streaming=False, push_notifications=push is not False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[
            AgentSkill(
                id="conversation",
                name=name,
                description="A conversation whose proposals a person approves: input-required holds the cards.",
                tags=["human-in-the-loop"],
            )
        ],
    )
    pushing: dict[str, Any] = {}
    if push is not False:
        configs = InMemoryPushNotificationConfigStore()
        pushing = {
            "push_config_store": configs,
            "push_sender": WebhookPushSender(configs, None if push is True else push),
            "push_url_validator": push_url_validator,
        }
    handler = DefaultRequestHandler(
        agent_executor=executor, task_store=task_store or InMemoryTaskStore(), agent_card=card, **pushing
    )
    routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")]
    return Starlette(routes=routes)
