"""LangGraph's interrupts through the gate, with a real graph and LangGraph's in-memory checkpointer: a node
interrupts with the Agent Inbox's HumanInterrupt, the request becomes a card, a person decides in another
conversation object (as another process would), and the graph resumes with the decision as a HumanResponse; the
node runs the action, once, with what the person approved."""

from __future__ import annotations

from typing import Any, TypedDict

import anyio
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Interrupt, interrupt

from dial_runtime import Accept, Dismiss, Edit, Say
from dial_runtime.doors.approvals import Approvals
from dial_runtime.doors.gate import Gate, StillWaiting, Waits
from dial_runtime.doors.langgraph import LangGraphApprovals
from dial_runtime.stores import StorePort

from .desk import decide

pytestmark = pytest.mark.anyio

EVERYTHING = {"allow_accept": True, "allow_edit": True, "allow_respond": True, "allow_ignore": True}


class State(TypedDict, total=False):
    text: str
    note: str


def ledger_graph(lines: list[str], config: dict[str, bool], *, listed: bool = True) -> Any:
    """A graph of one node that asks before it appends ``text`` to ``lines``, as the Agent Inbox asks."""

    def append(state: State) -> State:
        request = {
            "action_request": {"action": "append_line", "args": {"text": state["text"]}},
            "config": config,
            "description": "Append a line to the ledger",
        }
        response = interrupt([request])[0] if listed else interrupt(request)
        if response["type"] == "accept":
            lines.append(state["text"])
        elif response["type"] == "edit":
            lines.append(response["args"]["args"]["text"])
        return {"note": f"{response['type']}: {response['args']}"}

    graph = StateGraph(State)
    graph.add_node("append", append)
    graph.add_edge(START, "append")
    graph.add_edge("append", END)
    return graph.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("listed", [True, False], ids=["list", "single"])
@pytest.mark.parametrize(
    ("config", "decision", "ran", "note"),
    [
        pytest.param(EVERYTHING, Accept(), ["milk"], "accept: None", id="accepted"),
        pytest.param(EVERYTHING, Edit({"text": "oat milk"}), ["oat milk"], "edit: ", id="edited"),
        pytest.param(EVERYTHING, Dismiss(), [], "response: The person (ann) dismissed", id="dismissed"),
        pytest.param(
            {**EVERYTHING, "allow_respond": False}, Dismiss(), [], "ignore: None", id="dismissed-no-response"
        ),
        pytest.param(
            {**EVERYTHING, "allow_edit": False},
            Edit({"text": "oat milk"}),
            [],
            "response: The person approved it only changed",
            id="edit-not-allowed",
        ),
        pytest.param({**EVERYTHING, "allow_accept": False}, Accept(), ["milk"], "edit: ", id="accept-as-edit"),
    ],
)
async def test_an_interrupt_is_a_card_and_the_decision_resumes_the_graph(
    store: StorePort, config: dict[str, bool], decision: Any, ran: list[str], note: str, listed: bool
) -> None:
    lines: list[str] = []
    graph = ledger_graph(lines, config, listed=listed)
    thread = {"configurable": {"thread_id": "t1"}}
    state = graph.invoke({"text": "milk"}, thread)
    interrupts = state["__interrupt__"]
    assert lines == [] and len(interrupts) == 1
    approvals = LangGraphApprovals(Gate(Approvals(), store, prefix="lg"))
    ((waits,),) = (await approvals.propose(interrupts)).values()
    assert isinstance(waits, Waits) and waits.card.action == "append_line"
    with pytest.raises(StillWaiting):
        await approvals.resume(interrupts, within=0.2)
    await decide(store, waits, decision)
    with anyio.fail_after(30):
        command = await approvals.resume(interrupts, within=30)
    state = graph.invoke(command, thread)
    assert lines == ran, "the node ran the action, once, as the person approved it"
    assert state["note"].startswith(note)
    assert (await approvals.resume(interrupts, within=1)).resume == command.resume, "asked again: the same"


async def test_the_person_s_words_go_back_as_the_response(store: StorePort) -> None:
    lines: list[str] = []
    graph = ledger_graph(lines, EVERYTHING)
    thread = {"configurable": {"thread_id": "t2"}}
    interrupts = graph.invoke({"text": "milk"}, thread)["__interrupt__"]
    approvals = LangGraphApprovals(Gate(Approvals(), store, prefix="lg"))
    ((waits,),) = (await approvals.propose(interrupts)).values()
    assert isinstance(waits, Waits)
    await decide(store, waits, Say("not today"))
    state = graph.invoke(await approvals.resume(interrupts, within=30), thread)
    assert "not today" in state["note"] and lines == []


@pytest.mark.parametrize(
    ("value", "says"),
    [
        pytest.param("approve?", "HumanInterrupt shape", id="text"),
        pytest.param([], "empty list", id="empty"),
        pytest.param({"action_request": {"action": "x"}}, "HumanInterrupt shape", id="no-args"),
        pytest.param(
            {"action_request": {"action": "x", "args": {}}, "config": {"allow_accept": "yes"}},
            "true or false",
            id="config",
        ),
        pytest.param(
            {"action_request": {"action": "x", "args": {}}, "config": {"allow_respond": True}},
            "no approval",
            id="a-question",
        ),
    ],
)
async def test_an_interrupt_not_in_the_agent_inbox_shape_is_refused(
    store: StorePort, value: Any, says: str
) -> None:
    approvals = LangGraphApprovals(Gate(Approvals(), store, prefix="lg"))
    with pytest.raises(ValueError, match=says):
        await approvals.propose([Interrupt(value=value, id="i-1")])
    assert await store.conversations() == [], "nothing recorded"
