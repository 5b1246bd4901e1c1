"""An MCP server's questions to the user, asked of a person as cards: MCP elicitation, answered on any surface.

A server used as a domain (:class:`~dial_runtime.adapters.mcp.McpDomain`) may ask the user something in the
middle of a tool call: a form to fill (the new branch's name, a plan and an age) or a page to open (a sign-in).
:class:`Elicitations`, given to the domain as its ``elicit``, makes each question a card of the :class:`Questions`
domain, in a conversation of its own in the store, through a :class:`~dial_runtime.doors.gate.Gate`; the person
answers it where they decide anything (the terminal, the panel, a decision link, ``dial-runtime decide``, an
approval policy), and the answer is on the log like every decision:

- **accept** (with the form as it stands) or **edit** (the form's ``answer`` filled in or changed): the server is
  told *accept*, with the answer, which is checked against the server's form first;
- **dismiss**: the server is told *decline*;
- the card's deadline passing, the call giving up or the domain closing (the card is then withdrawn), an answer
  that does not fit the form: the server is told *cancel*.

A question is named by the run's idempotency key and its number in the call (``elicit:@key:KEY:q1``), so a run
the runtime calls again under the same key (recovery after a crash) finds the answers already given, and the
person is not asked twice.
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio

from ..adapters.mcp import Elicitation, Elicited
from ..agents.outside import OutsideAgent
from ..domains import words
from ..domains.payloads import SchemaPayload
from ..ports import HumanPort, StorePort
from ..runtime.records import ActionError, ActionSpec, Issue
from ..views.person import Card
from .gate import Gate, Refused, Waits

__all__ = [
    "ANSWER",
    "DEFAULT_WAIT",
    "PREFIX",
    "Elicitations",
    "Questions",
    "answering_questions",
    "question_payload",
]

logger = logging.getLogger(__name__)

#: The one action of :class:`Questions`: answering the question the card holds.
ANSWER = "answer"

#: What begins the conversation id of every question's card, by default.
PREFIX = "elicit"

#: Seconds a question waits for its answer by default before the server is told ``cancel``.
DEFAULT_WAIT = 600.0

#: The kinds of field an elicitation form may hold (MCP allows flat fields of these types only).
_FIELD_TYPES = frozenset({"string", "number", "integer", "boolean", "array"})
_KEYS = frozenset({"server", "tool", "question", "form", "url", "answer"})


def question_payload(asked: Elicitation) -> dict[str, Any]:
    """The card's payload for ``asked``: the server, the tool, the question, the form (or the page to open) and,
    when the form's defaults answer every required field, those defaults as the ``answer`` to accept as is."""
    payload: dict[str, Any] = {"server": asked.server, "question": asked.message}
    if asked.tool is not None:
        payload["tool"] = asked.tool
    if asked.schema is None:
        payload["url"] = asked.url or ""
        return payload
    form = dict(asked.schema)
    payload["form"] = form
    properties = form.get("properties")
    defaults = {
        name: field["default"]
        for name, field in (properties.items() if isinstance(properties, Mapping) else ())
        if isinstance(field, Mapping) and "default" in field
    }
    required = form.get("required")
    if all(name in defaults for name in (required if isinstance(required, list) else ())):
        payload["answer"] = defaults
    return payload


class Questions:
    """The domain of an MCP server's questions: one action, :data:`ANSWER`, whose payload is
    :func:`question_payload`'s; its ``answer`` must fit the ``form``. The processes that decide build it too
    (``dial-runtime decide --domain dial_runtime.doors.elicitation:Questions --agent outside:``)."""

    description = "Questions an MCP server asks the user in the middle of a tool call."

    def __init__(self) -> None:
        self.actions: Mapping[str, ActionSpec] = {ANSWER: ActionSpec(mutates=True)}

    def validate(self, action: str, payload: Any) -> Issue | None:
        if action != ANSWER:
            return Issue(code="unknown-action", hint=f"The only action is {ANSWER!r}.")
        if not isinstance(payload, Mapping):
            return Issue(code="invalid-payload", hint="The payload is an object: the question and its answer.")
        unknown = sorted(set(payload) - _KEYS)
        if unknown:
            return Issue(code="invalid-payload", field=unknown[0], hint=f"Leave out {unknown[0]!r}.")
        for name in ("server", "question"):
            if not isinstance(payload.get(name), str) or not payload[name]:
                return Issue(code="invalid-payload", field=name, hint=f"Give the {name} as text.")
        if "tool" in payload and not isinstance(payload["tool"], str):
            return Issue(code="invalid-payload", field="tool", hint="Give the tool's name as text.")
        if ("form" in payload) == ("url" in payload):
            return Issue(code="invalid-payload", hint="A question has a form or a page to open: one of the two.")
        if "url" in payload:
            if not isinstance(payload["url"], str):
                return Issue(code="invalid-payload", field="url", hint="Give the page's address as text.")
            if "answer" in payload:
                return Issue(code="invalid-payload", field="answer", hint="Opening a page takes no answer.")
            return None
        checked = _form(payload["form"])
        if isinstance(checked, Issue):
            return checked
        if "answer" not in payload:
            return None
        issue = checked.issue(payload["answer"])
        if issue is None:
            return None
        field = f"answer.{issue.field}" if issue.field else "answer"
        return Issue(code=issue.code or "invalid-payload", field=field, hint=issue.hint)

    def preview(self, action: str, payload: Any) -> str:
        """The question, and the answer as it stands: ``Asks: What should 'main' be called? — Name: (to fill
        in, required); Force: false``."""
        if not isinstance(payload, Mapping):
            return "Answer a question"
        question = str(payload.get("question", ""))
        if "url" in payload:
            return f"Asks: {question} — open {payload['url']}"
        form = _mapping(payload.get("form"))
        properties, answer = _mapping(form.get("properties")), _mapping(payload.get("answer"))
        named = form.get("required")
        required: list[Any] = named if isinstance(named, list) else []
        shown = []
        for name, field in properties.items():
            described = _mapping(field)
            title = str(described.get("title") or words(name)) + (" (required)" if name in required else "")
            if name in answer:
                value = json.dumps(answer[name], ensure_ascii=False)
            elif "default" in described:
                value = f"(to fill in; default {json.dumps(described['default'], ensure_ascii=False)})"
            else:
                value = "(to fill in)"
            shown.append(f"{title}: {value}")
        return f"Asks: {question} — {'; '.join(shown)}" if shown else f"Asks: {question}"

    def run(self, action: str, payload: Any) -> dict[str, Any]:
        """The answer, to hand back to the server (nothing else happens); a form with a required field left
        unanswered fails, saying which."""
        if "url" in payload:
            return {"accept": payload["url"]}
        answer = payload.get("answer")
        if answer is None:
            required = payload["form"].get("required") or []
            raise ActionError(
                "the question was not answered",
                code="unanswered",
                field="answer",
                hint=f"Edit the card to give the answer ({', '.join(required)}), then accept it.",
            )
        return {"accept": answer}

    def context(self) -> str:
        return ""


def _mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one: a payload's parts read without trusting their shape."""
    return value if isinstance(value, Mapping) else {}


def _form(form: Any) -> SchemaPayload | Issue:
    """The form's validator, or the issue with it: an object of flat fields (text, numbers, yes/no, choices)."""
    bad = Issue(code="invalid-payload", field="form", hint="The form is a JSON Schema object of flat fields.")
    if not isinstance(form, Mapping) or form.get("type") != "object":
        return bad
    properties = form.get("properties", {})
    if not isinstance(properties, Mapping) or not all(
        isinstance(field, Mapping) and field.get("type") in _FIELD_TYPES for field in properties.values()
    ):
        return bad
    try:
        return SchemaPayload(form)
    except ValueError as error:
        return Issue(code="invalid-payload", field="form", hint=f"The form is {error}.")


class Elicitations:
    """Answers an MCP server's questions through cards a person decides (see the module): give it to
    :class:`~dial_runtime.adapters.mcp.McpDomain` as ``elicit``.

    The cards are kept in ``store``; ``human`` decides them in the call (the terminal's person, a policy;
    default: nobody, and each card waits for the panel, a link, ``dial-runtime decide``); ``announcer`` tells
    people of each card that starts waiting; ``wait`` bounds each question's wait in seconds (its card's
    deadline; ``None``: no bound); ``prefix`` begins each card's conversation id.
    """

    def __init__(
        self,
        store: StorePort,
        *,
        human: HumanPort | None = None,
        announcer: Any = None,
        wait: float | None = DEFAULT_WAIT,
        prefix: str = PREFIX,
    ) -> None:
        self.gate = Gate(Questions(), store, human=human, prefix=prefix, decide_timeout=wait, announcer=announcer)

    async def __call__(self, asked: Elicitation) -> Elicited:
        """The person's answer to ``asked``, once their card ended."""
        by = f"mcp:{asked.tool}" if asked.tool else "mcp"
        key = f"{asked.key}:q{asked.number}" if asked.key else f"{uuid.uuid4().hex}:q{asked.number}"
        proposed = await self.gate.propose(ANSWER, question_payload(asked), by=by, key=key)
        if isinstance(proposed, Refused):  # a form the domain refuses: nobody can answer it
            logger.error("the MCP server's question cannot be put to a person: %s", proposed.hint)
            return Elicited("cancel")
        while isinstance(proposed, Waits):
            waits = proposed
            try:
                proposed = await self.gate.settle(waits, by=by, within=math.inf)
            except anyio.get_cancelled_exc_class():  # the call gave up, the domain closes: nobody may answer now
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    await self.gate.withdraw(waits, by=by)
                raise
        return _answered(proposed.card, asked)


def answering_questions(
    domain: Any, agent: Callable[[str, Sequence[Any]], Any], *, prefix: str = PREFIX
) -> tuple[Callable[[str, Sequence[Any]], Any], Callable[[str, Sequence[Any]], Any]]:
    """The domain and agent factories (``factory(conversation_id, log)``) of a surface that serves ``domain``
    with ``agent`` and also lets people answer the questions' cards: a conversation whose id begins with
    ``prefix`` and a colon is a question's, of :class:`Questions` and an
    :class:`~dial_runtime.agents.outside.OutsideAgent`; any other is ``domain``'s and ``agent``'s."""
    questions = Questions()
    begins = f"{prefix}:"

    def domain_of(conversation_id: str, log: Sequence[Any]) -> Any:
        return questions if conversation_id.startswith(begins) else domain

    def agent_of(conversation_id: str, log: Sequence[Any]) -> Any:
        return OutsideAgent() if conversation_id.startswith(begins) else agent(conversation_id, log)

    return domain_of, agent_of


def _answered(card: Card, asked: Elicitation) -> Elicited:
    """What the ended card tells the server: the answer, a decline, or a cancel."""
    outcome = card.reported
    assert outcome is not None, "an ended card has its outcome"
    if outcome.status == "dismissed" and not outcome.expired:
        return Elicited("decline")
    if outcome.status != "done" or not isinstance(outcome.result, Mapping) or "accept" not in outcome.result:
        return Elicited("cancel")
    if asked.schema is None:
        return Elicited("accept")
    answer = outcome.result["accept"]
    # McpDomain checks the answer against the server's own form, whatever the card's payload became.
    return Elicited("accept", dict(answer)) if isinstance(answer, Mapping) else Elicited("cancel")
