"""LangGraph's interrupts as dial-runtime cards: ``interrupt()`` with the Agent Inbox ``HumanInterrupt`` shape in,
``Command(resume=...)`` out.

::

    state = graph.invoke(inputs, config)                  # a node called interrupt([human_interrupt])
    approvals = LangGraphApprovals(Gate(Approvals(), store))
    command = await approvals.resume(state["__interrupt__"], within=600)    # decided on any surface
    state = graph.invoke(command, config)

Each request of an interrupt (``{"action_request": {"action", "args"}, "config": {"allow_accept", "allow_edit",
"allow_respond", "allow_ignore"}, "description"}``, alone or in a list as the Agent Inbox sends them) is a card of
the :class:`~dial_runtime.doors.gate.Gate`, named by the interrupt's id (and the request's place in it), so asking
again after a restart finds the same cards. The decision goes back as the Agent Inbox's ``HumanResponse``:
accepted, ``accept``; edited, ``edit`` with the action and the arguments the person set; dismissed or expired,
``response`` with the reason in words (``ignore`` when the request allows no response). What the request does not
allow is not sent: an edit it does not allow goes back as a ``response`` saying what the person wanted. The node
runs the action itself when the graph resumes.

Needs ``langgraph`` (``pip install 'dial-runtime[langgraph]'``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .gate import Ended, Gate, Refused, Waits, not_run

try:
    from langgraph.types import Command, Interrupt
except ImportError as error:  # pragma: no cover - only without the extra
    raise ImportError(
        "dial_runtime.doors.langgraph needs langgraph: pip install 'dial-runtime[langgraph]'"
    ) from error

__all__ = ["LangGraphApprovals"]

_ALLOWED = ("allow_accept", "allow_edit", "allow_respond", "allow_ignore")


class LangGraphApprovals:
    """The approvals of LangGraph interrupts through ``gate`` (see the module); ``by`` names the graph."""

    def __init__(self, gate: Gate, *, by: str = "langgraph") -> None:
        self.gate = gate
        self.by = by

    async def propose(self, interrupts: Sequence[Interrupt]) -> dict[str, list[Refused | Waits | Ended]]:
        """Each request of each interrupt, as a proposal (a card waiting, or the one it was), by interrupt id;
        ``ValueError`` naming an interrupt that is not in the Agent Inbox's shape, or asks for no approval."""
        found: dict[str, list[Refused | Waits | Ended]] = {}
        for each in interrupts:
            if not isinstance(each, Interrupt):
                raise ValueError(f"expected LangGraph's Interrupt, not {type(each).__name__}")
            answers = []
            for place, request in enumerate(_requests(each)):
                action = request["action_request"]
                key = f"{each.id}.{place}"
                answers.append(
                    await self.gate.propose(action["action"], dict(action["args"]), by=self.by, key=key)
                )
            found[each.id] = answers
        return found

    async def resume(self, interrupts: Sequence[Interrupt], *, within: float) -> Command[Any]:
        """The decisions on every request of ``interrupts``, as the ``Command`` that resumes the graph, once each
        is decided (``within`` seconds at most, all together); :class:`~dial_runtime.StillWaiting` naming the
        cards still waiting when the time is up (asking again waits on the same cards)."""
        proposed = await self.propose(interrupts)
        flat = {
            (each, place): answer for each, answers in proposed.items() for place, answer in enumerate(answers)
        }
        settled = await self.gate.settle_all(flat, by=self.by, within=within)
        resumed: dict[str, Any] = {}
        for each in interrupts:
            requests = _requests(each)
            responses = [_response(request, settled[(each.id, place)]) for place, request in enumerate(requests)]
            resumed[each.id] = responses if isinstance(each.value, list) else responses[0]
        return Command(resume=resumed)


def _requests(each: Interrupt) -> list[Mapping[str, Any]]:
    """The Agent Inbox requests of an interrupt, checked; ``ValueError`` saying what is wrong."""
    value = each.value
    requests = value if isinstance(value, list) else [value]
    if not requests:
        raise ValueError(f"interrupt {each.id}: an empty list of requests")
    for request in requests:
        action = request.get("action_request") if isinstance(request, Mapping) else None
        if not (
            isinstance(action, Mapping) and isinstance(action.get("action"), str) and action["action"]
        ) or not isinstance(action.get("args"), Mapping):
            raise ValueError(
                f"interrupt {each.id}: not the Agent Inbox's HumanInterrupt shape "
                '({"action_request": {"action": NAME, "args": {...}}, "config": {...}})'
            )
        config = request.get("config", {})
        if not isinstance(config, Mapping) or any(
            not isinstance(config.get(flag, False), bool) for flag in _ALLOWED
        ):
            raise ValueError(f"interrupt {each.id}: its config allows with true or false: {', '.join(_ALLOWED)}")
        if not (config.get("allow_accept") or config.get("allow_edit")):
            raise ValueError(f"interrupt {each.id}: it allows neither accept nor edit, so it asks for no approval")
    return requests


def _response(request: Mapping[str, Any], answer: Refused | Ended) -> dict[str, Any]:
    """The Agent Inbox's ``HumanResponse`` for a request, within what it allows."""
    config = request.get("config", {})
    action = request["action_request"]
    if isinstance(answer, Ended) and answer.card.reported is not None and answer.card.reported.status == "done":
        card = answer.card
        if not answer.card.reported.edited:
            if config.get("allow_accept"):
                return {"type": "accept", "args": None}
            return {"type": "edit", "args": {"action": action["action"], "args": dict(card.payload)}}
        if config.get("allow_edit"):
            return {"type": "edit", "args": {"action": action["action"], "args": dict(card.payload)}}
        words = f"The person approved it only changed, with {card.payload}, which this step does not allow."
        return _refusal(config, words)
    if isinstance(answer, Refused):
        at = f" (at {answer.field})" if answer.field else ""
        return _refusal(config, f"Refused, {answer.code}{at}: {answer.hint}")
    return _refusal(config, not_run(answer.card)[0])


def _refusal(config: Mapping[str, Any], words: str) -> dict[str, Any]:
    if config.get("allow_respond") or not config.get("allow_ignore"):
        return {"type": "response", "args": words}
    return {"type": "ignore", "args": None}
