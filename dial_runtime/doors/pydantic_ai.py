"""pydantic-ai's approvals as dial-runtime cards: ``DeferredToolRequests`` in, ``DeferredToolResults`` out.

::

    result = await agent.run(prompt)                      # output_type includes DeferredToolRequests
    if isinstance(result.output, DeferredToolRequests):
        approvals = PydanticAiApprovals(Gate(Approvals(), store))
        results = await approvals.results(result.output, within=600)   # decided on any surface
        result = await agent.run(message_history=result.all_messages(), deferred_tool_results=results)

Each call in ``requests.approvals`` is a card of the :class:`~dial_runtime.doors.gate.Gate` (usually over
:class:`~dial_runtime.doors.approvals.Approvals`), named by its ``tool_call_id`` so that asking again, after a
restart, finds the same cards. The decision goes back in pydantic-ai's own terms: accepted, ``True``; edited,
``ToolApproved(override_args=...)`` with what the person set; dismissed, expired or refused by the domain,
``ToolDenied`` with the reason in words (the model reads it). The tool itself runs in pydantic-ai when the run
resumes. Calls in ``requests.calls`` (external execution, questions) are not approvals and are left alone.

Needs ``pydantic-ai-slim`` (``pip install 'dial-runtime[pydantic-ai]'``).
"""

from __future__ import annotations

from typing import Any

from .gate import Ended, Gate, Refused, Waits, not_run

try:
    from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
    from pydantic_ai.messages import ToolCallPart
except ImportError as error:  # pragma: no cover - only without the extra
    raise ImportError(
        "dial_runtime.doors.pydantic_ai needs pydantic-ai: pip install 'dial-runtime[pydantic-ai]'"
    ) from error

__all__ = ["PydanticAiApprovals"]


class PydanticAiApprovals:
    """The approvals of pydantic-ai runs through ``gate`` (see the module); ``by`` names the agent on the log."""

    def __init__(self, gate: Gate, *, by: str = "pydantic-ai") -> None:
        self.gate = gate
        self.by = by

    async def propose(self, requests: DeferredToolRequests) -> dict[str, Refused | Waits | Ended]:
        """Each approval the requests ask for, as a proposal (a card waiting, or the one it was), by call id."""
        if not isinstance(requests, DeferredToolRequests):
            raise TypeError(f"expected pydantic-ai's DeferredToolRequests, not {type(requests).__name__}")
        found: dict[str, Refused | Waits | Ended] = {}
        for call in requests.approvals:
            found[call.tool_call_id] = await self.gate.propose(
                call.tool_name, _arguments(requests, call), by=self.by, key=call.tool_call_id
            )
        return found

    async def results(self, requests: DeferredToolRequests, *, within: float) -> DeferredToolResults:
        """The decision on every approval the requests ask for, as pydantic-ai's results, once each is decided
        (``within`` seconds at most, all together); :class:`~dial_runtime.StillWaiting` naming the
        cards still waiting when the time is up (asking again waits on the same cards)."""
        settled = await self.gate.settle_all(await self.propose(requests), by=self.by, within=within)
        approvals = {call_id: _approval(answer) for call_id, answer in settled.items()}
        answered_by = {
            call_id: answer.card.decided_by
            for call_id, answer in settled.items()
            if isinstance(answer, Ended) and answer.card.decided_by
        }
        return DeferredToolResults(approvals=dict(approvals), answered_by=answered_by)


def _arguments(requests: DeferredToolRequests, call: ToolCallPart) -> dict[str, Any]:
    """The arguments the tool would receive (validated, when pydantic-ai validated them), else the model's."""
    validated = requests.validated_args.get(call.tool_call_id)
    return dict(validated) if validated is not None else call.args_as_dict()


def _approval(answer: Refused | Ended) -> bool | ToolApproved | ToolDenied:
    """A decision in pydantic-ai's terms."""
    if isinstance(answer, Refused):
        at = f" (at {answer.field})" if answer.field else ""
        return ToolDenied(f"Refused, {answer.code}{at}: {answer.hint}")
    card = answer.card
    outcome = card.reported
    assert outcome is not None
    if outcome.status != "done":
        return ToolDenied(not_run(card)[0])
    if outcome.edited:
        return ToolApproved(override_args=dict(card.payload))
    return True
