"""The OpenAI Agents SDK's approvals through the gate, with the SDK's own Runner and its ScriptedModel: a run
stops at a tool that needs approval, the call becomes a card, a person decides in another conversation object (as
another process would), and the run resumes with the call approved or rejected in its RunState; an edited call,
which the SDK cannot run, runs through the runtime, once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from dial_runtime import Accept, Dismiss, Edit, policy_human
from dial_runtime.doors.approvals import Approvals
from dial_runtime.doors.gate import Gate, Waits
from dial_runtime.doors.openai_agents import OpenAIAgentsApprovals
from dial_runtime.errors import StillWaiting
from dial_runtime.stores import StorePort

from .desk import decide
from .ledger import Ledger

pytestmark = pytest.mark.anyio

#: No traces sent anywhere: the tests run offline.
OFFLINE = RunConfig(tracing_disabled=True)


def ledger_agent(lines: list[str]) -> tuple[Agent[Any], ScriptedModel]:
    model = ScriptedModel(
        [
            [function_call("append_line", {"text": "milk"}, call_id="call-1")],
            [assistant_message("finished")],
        ]
    )

    @function_tool(needs_approval=True)
    def append_line(text: str) -> str:
        """Append a line to the ledger."""
        lines.append(text)
        return f"appended {text}"

    return Agent(name="ledger", model=model, tools=[append_line]), model


def told(model: ScriptedModel) -> str:
    """What the model was given with its last call (the tool's output, or the rejection)."""
    call = model.last_call
    assert call is not None
    return str(call.input)


@pytest.mark.parametrize(
    ("decision", "ran", "ledger", "said"),
    [
        pytest.param(Accept(), ["milk"], [], "appended milk", id="accepted"),
        pytest.param(Dismiss(), [], [], "dismissed the call: it was not run", id="dismissed"),
        pytest.param(
            Edit({"text": "oat milk"}),
            [],
            ["oat milk"],
            'it ran with {"text": "oat milk"} instead, and returned: {"lines": 1}',
            id="edited-runs-through-the-runtime",
        ),
    ],
)
async def test_an_interruption_is_a_card_and_the_decision_resumes_the_run(
    store: StorePort, tmp_path: Path, decision: Any, ran: list[str], ledger: list[str], said: str
) -> None:
    lines: list[str] = []
    agent, model = ledger_agent(lines)
    result = await Runner.run(agent, "note milk", run_config=OFFLINE)
    assert len(result.interruptions) == 1 and lines == []
    edits = Gate(Ledger(tmp_path / "ledger.txt"), store, prefix="edits", human=policy_human("accept"))
    approvals = OpenAIAgentsApprovals(Gate(Approvals(), store, prefix="oa"), edits=edits)
    (waits,) = (await approvals.propose(result.interruptions)).values()
    assert isinstance(waits, Waits)
    with pytest.raises(StillWaiting):
        await approvals.decide(result, within=0.2)
    await decide(store, waits, decision)
    with anyio.fail_after(30):
        state = await approvals.decide(result, within=30)
    resumed = await Runner.run(agent, state, run_config=OFFLINE)
    assert resumed.final_output == "finished"
    assert lines == ran, "the SDK ran the tool only as approved"
    assert said in told(model)
    assert Ledger(tmp_path / "ledger.txt").lines() == ledger, "an edit ran through the runtime, once"
    again = await approvals.decide(result, within=1)  # asked again: the same decision, the edit not run twice
    assert again is not None
    assert Ledger(tmp_path / "ledger.txt").lines() == ledger


async def test_without_an_edits_gate_an_edit_is_rejected_and_nothing_runs(store: StorePort) -> None:
    lines: list[str] = []
    agent, model = ledger_agent(lines)
    result = await Runner.run(agent, "note milk", run_config=OFFLINE)
    approvals = OpenAIAgentsApprovals(Gate(Approvals(), store, prefix="oa"))
    (waits,) = (await approvals.propose(result.interruptions)).values()
    assert isinstance(waits, Waits)
    await decide(store, waits, Edit({"text": "oat milk"}))
    await Runner.run(agent, await approvals.decide(result, within=30), run_config=OFFLINE)
    assert lines == []
    assert "they wanted append_line with" in told(model)


async def test_what_is_not_a_paused_run_is_refused(store: StorePort) -> None:
    approvals = OpenAIAgentsApprovals(Gate(Approvals(), store, prefix="oa"))
    with pytest.raises(TypeError, match="run result or RunState"):
        await approvals.decide("paused", within=1)
    with pytest.raises(ValueError, match="ToolApprovalItem"):
        await approvals.propose(["not an item"])  # type: ignore[list-item]
