"""pydantic-ai's approvals through the gate, with pydantic-ai's own agent and its FunctionModel: a run stops at
a tool that requires approval, the call becomes a card, a person decides in another conversation object (as
another process would), and the run resumes with the decision as pydantic-ai's results; the tool runs in
pydantic-ai, once, with what the person approved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from dial_runtime import Accept, Dismiss, Edit
from dial_runtime.doors.approvals import Approvals
from dial_runtime.doors.gate import Gate, StillWaiting, Waits
from dial_runtime.doors.pydantic_ai import PydanticAiApprovals
from dial_runtime.stores import StorePort

from .desk import decide
from .ledger import Ledger

pytestmark = pytest.mark.anyio


def ledger_agent(lines: list[str], calls: list[dict[str, Any]]) -> Agent[None, str | DeferredToolRequests]:
    """An agent whose model asks for each call in ``calls`` (``append_line``), then says what came back."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = [
            part.content
            for message in messages
            for part in getattr(message, "parts", [])
            if isinstance(part, ToolReturnPart)
        ]
        if returned:
            return ModelResponse(parts=[TextPart(f"returned: {returned}")])
        return ModelResponse(
            parts=[
                ToolCallPart("append_line", arguments, tool_call_id=f"call-{number}")
                for number, arguments in enumerate(calls, 1)
            ]
        )

    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(model), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def append_line(text: str) -> str:
        """Append a line to the ledger."""
        lines.append(text)
        return f"appended {text}"

    return agent


@pytest.mark.parametrize(
    ("decision", "ran", "said"),
    [
        pytest.param(Accept(), ["milk"], "appended milk", id="accepted"),
        pytest.param(Edit({"text": "oat milk"}), ["oat milk"], "appended oat milk", id="edited"),
        pytest.param(Dismiss(), [], "dismissed the call", id="dismissed"),
    ],
)
async def test_an_approval_is_a_card_and_the_decision_resumes_the_run(
    store: StorePort, decision: Any, ran: list[str], said: str
) -> None:
    lines: list[str] = []
    agent = ledger_agent(lines, [{"text": "milk"}])
    first = await agent.run("note milk")
    requests = first.output
    assert isinstance(requests, DeferredToolRequests) and lines == []
    approvals = PydanticAiApprovals(Gate(Approvals(), store, prefix="pai"))
    (waits,) = (await approvals.propose(requests)).values()
    assert isinstance(waits, Waits) and waits.card.preview == 'Append line: text="milk"'
    with pytest.raises(StillWaiting, match="1 proposal"):
        await approvals.results(requests, within=0.2)
    await decide(store, waits, decision)
    with anyio.fail_after(30):
        results = await approvals.results(requests, within=30)
    assert results.answered_by == {"call-1": "ann"}
    resumed = await agent.run(message_history=first.all_messages(), deferred_tool_results=results)
    assert lines == ran, "the tool ran in pydantic-ai, once, with what the person approved"
    assert said in str(resumed.output)
    again = await approvals.results(requests, within=1)  # asked again (a restart): the same decision, no new card
    assert again.approvals == results.approvals


async def test_a_call_the_domain_refuses_is_denied_with_the_reason(store: StorePort, tmp_path: Path) -> None:
    lines: list[str] = []
    agent = ledger_agent(lines, [{"text": ""}])
    first = await agent.run("note nothing")
    assert isinstance(first.output, DeferredToolRequests)
    gate = Gate(Approvals(Ledger(tmp_path / "ledger.txt")), store, prefix="pai")
    results = await PydanticAiApprovals(gate).results(first.output, within=5)
    denied = results.approvals["call-1"]
    assert isinstance(denied, ToolDenied) and "invalid-payload (at text)" in denied.message
    assert await store.conversations() == [], "nobody was asked"


async def test_several_approvals_are_decided_each_on_its_own(store: StorePort) -> None:
    lines: list[str] = []
    agent = ledger_agent(lines, [{"text": "a"}, {"text": "b"}])
    first = await agent.run("note a and b")
    assert isinstance(first.output, DeferredToolRequests)
    approvals = PydanticAiApprovals(Gate(Approvals(), store, prefix="pai"))
    proposed = await approvals.propose(first.output)
    assert set(proposed) == {"call-1", "call-2"}
    waits_a, waits_b = (proposed[name] for name in ("call-1", "call-2"))
    assert isinstance(waits_a, Waits) and isinstance(waits_b, Waits)
    await decide(store, waits_b, Accept(), by="bob")
    with pytest.raises(StillWaiting) as still:
        await approvals.results(first.output, within=0.5)
    assert [each.card.id for each in still.value.waiting] == [waits_a.card.id]
    await decide(store, waits_a, Dismiss())
    results = await approvals.results(first.output, within=30)
    assert results.approvals["call-2"] is True and isinstance(results.approvals["call-1"], ToolDenied)
    await agent.run(message_history=first.all_messages(), deferred_tool_results=results)
    assert lines == ["b"]


async def test_what_is_not_pydantic_ai_s_requests_is_refused(store: StorePort) -> None:
    approvals = PydanticAiApprovals(Gate(Approvals(), store, prefix="pai"))
    with pytest.raises(TypeError, match="DeferredToolRequests"):
        await approvals.propose(DeferredToolResults())  # type: ignore[arg-type]
