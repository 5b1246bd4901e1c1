"""The OpenAI Agents SDK's approvals as dial-runtime cards: ``result.interruptions`` in, ``state.approve`` and
``state.reject`` out.

::

    result = await Runner.run(agent, prompt)              # a tool with needs_approval stopped the run
    if result.interruptions:
        edits = Gate(domain, store, human=policy_human())    # your domain's actions run your tools
        approvals = OpenAIAgentsApprovals(Gate(Approvals(domain), store), edits=edits)
        state = await approvals.decide(result, within=600)    # decided on any surface
        result = await Runner.run(agent, state)

Each interruption is a card of the :class:`~dial_runtime.doors.gate.Gate` (usually over
:class:`~dial_runtime.doors.approvals.Approvals`), named by its call id, so asking again after a restart finds
the same cards. An accepted call is approved in the run state, and the tool runs in the SDK when the run
resumes. Dismissed, expired or refused by the domain: rejected, the reason in words as the rejection message (the
model reads it).

The SDK has no edit: it runs a tool with the model's arguments or not at all. An edited call therefore runs
through the runtime: ``edits`` is a gate over the application's own domain (its actions run the tools) whose
person approves in the call (the person approved the edit already), and the edited call is its proposal, named
by the call id, so it runs once and is logged and audited like any other (the tool's name, or its name in the
domain's spelling: ``append-line`` for ``append_line``). The SDK's call is rejected with a
message saying what ran instead and what it returned. Without ``edits``, an edited call is rejected with the
arguments the person wanted, and nothing runs.

Needs ``openai-agents`` (``pip install 'dial-runtime[openai-agents]'``).
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import StillWaiting
from .approvals import spelled
from .gate import Ended, Gate, Refused, Waits, not_run

try:
    from agents import RunState, ToolApprovalItem
except ImportError as error:  # pragma: no cover - only without the extra
    raise ImportError(
        "dial_runtime.doors.openai_agents needs the OpenAI Agents SDK: pip install 'dial-runtime[openai-agents]'"
    ) from error

__all__ = ["OpenAIAgentsApprovals"]


class OpenAIAgentsApprovals:
    """The approvals of OpenAI Agents SDK runs through ``gate``, edited calls run through ``edits`` (see the
    module); ``by`` names the agent on the log."""

    def __init__(self, gate: Gate, *, edits: Gate | None = None, by: str = "openai-agents") -> None:
        self.gate = gate
        self.edits = edits
        self.by = by

    async def propose(self, interruptions: list[ToolApprovalItem]) -> dict[str, Refused | Waits | Ended]:
        """Each interruption as a proposal (a card waiting, or the one it was), by call id; ``ValueError`` for
        what is not an SDK approval item of a function call."""
        found: dict[str, Refused | Waits | Ended] = {}
        for item in interruptions:
            name, arguments, call_id = _call(item)
            found[call_id] = await self.gate.propose(name, arguments, by=self.by, key=call_id)
        return found

    async def decide(self, paused: Any, *, within: float) -> RunState[Any]:
        """The run state of ``paused`` (a run result with interruptions, or its ``RunState``) with every
        interruption approved or rejected as decided, once each is (``within`` seconds at most, all together);
        :class:`~dial_runtime.StillWaiting` naming the cards still waiting when the time is up."""
        if isinstance(paused, RunState):
            state, interruptions = paused, paused.get_interruptions()
        elif callable(getattr(paused, "to_state", None)) and isinstance(
            getattr(paused, "interruptions", None), list
        ):
            state, interruptions = paused.to_state(), paused.interruptions
        else:
            raise TypeError(f"expected an Agents SDK run result or RunState, not {type(paused).__name__}")
        settled = await self.gate.settle_all(await self.propose(interruptions), by=self.by, within=within)
        for item in interruptions:
            name, _, call_id = _call(item)
            answer = settled[call_id]
            if isinstance(answer, Refused):
                at = f" (at {answer.field})" if answer.field else ""
                state.reject(item, rejection_message=f"Refused, {answer.code}{at}: {answer.hint}")
                continue
            outcome = answer.card.reported
            assert outcome is not None
            if outcome.status != "done":
                state.reject(item, rejection_message=not_run(answer.card)[0])
            elif not outcome.edited:
                state.approve(item)
            else:
                told = await self._run_edit(name, dict(answer.card.payload), call_id, within)
                state.reject(item, rejection_message=told)
        return state

    async def _run_edit(self, name: str, arguments: dict[str, Any], call_id: str, within: float) -> str:
        """Run the edited call through ``edits`` (once: it is named by the call id); what to tell the model."""
        shown = json.dumps(arguments, ensure_ascii=False)
        if self.edits is None:
            return f"The person changed the call, and it was not run: they wanted {name} with {shown}."
        action = spelled(getattr(self.edits.domain, "actions", None) or {}, name) or name
        ran = await self.edits.propose(action, arguments, by=self.by, key=f"{call_id}.edited")
        if isinstance(ran, Refused):
            return f"The person changed the call to {shown}, which was refused: {ran.code}: {ran.hint}"
        if isinstance(ran, Waits):  # the edits gate's person deferred (a policy of two): it waits as any card
            ran = await self.edits.settle(ran, by=self.by, within=within)
            if isinstance(ran, Waits):
                raise StillWaiting([ran])
        assert ran.card.reported is not None
        outcome = ran.card.reported
        if outcome.status != "done":
            return f"The person changed the call to {shown}: {not_run(ran.card)[0]}"
        result = json.dumps(outcome.result, ensure_ascii=False)
        return f"The person changed the call; it ran with {shown} instead, and returned: {result}"


def _call(item: Any) -> tuple[str, dict[str, Any], str]:
    """The name, arguments and call id of an SDK approval item; ``ValueError`` for anything else."""
    if not isinstance(item, ToolApprovalItem):
        raise ValueError(f"expected the Agents SDK's ToolApprovalItem, not {type(item).__name__}")
    name, call_id, text = item.name, item.call_id, item.arguments
    if not (isinstance(name, str) and name and isinstance(call_id, str) and call_id):
        raise ValueError("an approval item without a tool name or a call id (only function calls are approved)")
    try:
        arguments = json.loads(text or "{}")
    except ValueError:
        raise ValueError(f"the arguments of call {call_id} are not JSON: {text!r}") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"the arguments of call {call_id} are not a JSON object")
    return name, arguments, call_id
