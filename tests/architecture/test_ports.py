"""The ports are checked by mypy: a user's agent, person, domain and store written the README's way satisfy them,
a wrong signature is an error ``mypy --strict`` reports, and the dict forms the README documents still run."""

from __future__ import annotations

import importlib.util
import re
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import mypy.api
import pytest

from dial_runtime import TurnResult

from ..fakes import envelope, suggest

ROOT = Path(__file__).resolve().parents[2]

#: A user's module written as the README's Concepts describe: plain and ``async`` methods, records and the dict
#: forms mixed.
USER_MODULE = """
from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, ClassVar

from dial_runtime import (
    Accept, ActionError, ActionSpec, Ask, ChatAgent, Conversation, Defer, Issue, RecordedAgent, ScriptedAgent,
    Suggestion, TurnResult, open_store, policy_human, scripted_human,
)
from dial_runtime.demo import NotesDomain
from dial_runtime.ports import (
    AgentPort, DecisionLike, DescribedDomainPort, DomainPort, HumanPort, StorePort, StreamingAgentPort,
)
from dial_runtime.stores import MemoryStore, PostgresStore, SQLiteStore


class Notes:
    actions: ClassVar[dict[str, ActionSpec | dict[str, bool]]] = {
        "add-note": ActionSpec(mutates=True),
        "list-notes": {"mutates": False},
    }
    vocabulary: ClassVar[dict[str, dict[str, Any]]] = {"add-note": {"example": {"text": "buy milk"}}}

    def __init__(self) -> None:
        self.notes: list[str] = []

    def validate(self, action: str, payload: Any) -> dict[str, Any] | Issue | None:
        if action == "add-note" and not payload.get("text"):
            return {"ok": False, "code": "missing-text", "field": "text", "hint": "Give the note's text."}
        return {"ok": True}

    def preview(self, action: str, payload: Any) -> str:
        return f"Add the note '{payload['text']}'" if action == "add-note" else "List the notes"

    async def run(self, action: str, payload: Any) -> dict[str, Any]:
        if action == "add-note":
            self.notes.append(payload["text"])
            return {"count": len(self.notes)}
        if action == "list-notes":
            return {"notes": list(self.notes)}
        raise ActionError("no such action", code="unknown")

    def context(self) -> str:
        return f"<context notes='{len(self.notes)}'/>"

    def describe(self, action: str) -> str:
        return action.replace("-", " ")


class Echo:
    def send(self, message: str) -> str:
        return "<dial><dial-inform>" + str(len(message)) + "</dial-inform></dial>"


class Replies:
    def __init__(self, replies: list[str]) -> None:
        self.replies = replies

    async def send(self, message: str) -> str:
        return self.replies.pop(0)

    async def stream(self, message: str) -> AsyncIterator[str]:
        reply = await self.send(message)
        for start in range(0, len(reply), 5):
            yield reply[start : start + 5]


class Person:
    async def decide(self, suggestion: Suggestion) -> DecisionLike:
        return {"accept": True} if suggestion.action == "add-note" else Accept()

    def answer(self, ask: Ask) -> str | Defer:
        return Defer() if ask.options else "groceries"
"""

#: The user's classes and every shipped implementation, each assigned to its port.
WELL_TYPED = (
    USER_MODULE
    + """
from dial_runtime.terminal.surface import PlainAgent, TerminalSurface
from dial_runtime.terminal.transcript import NarratedHuman, Transcript

domain: DomainPort = Notes()
described: DescribedDomainPort = Notes()
demo_domain: DomainPort = NotesDomain()
chat = ChatAgent(base_url="http://127.0.0.1:8000/v1", model="m")
agents: list[AgentPort] = [Echo(), Replies([]), ScriptedAgent([]), RecordedAgent([]), chat]
streaming: list[StreamingAgentPort] = [Replies([]), chat]
surface = TerminalSurface()
narrated = NarratedHuman(Person(), Transcript(repr))
humans: list[HumanPort] = [Person(), policy_human("accept"), scripted_human(["accept"]), surface, narrated]
wrapped: list[AgentPort] = [PlainAgent(chat), surface.streaming(chat)]
stores: list[StorePort] = [open_store("memory:"), MemoryStore(), SQLiteStore("notes.db"), PostgresStore("postgresql://h/d")]
conversations = [
    Conversation(agent=Echo(), domain=Notes(), human=Person()),
    Conversation(agent=chat, domain=NotesDomain(), human=surface, store=MemoryStore(), conversation_id="c"),
]


async def decide_later(conversation: Conversation) -> TurnResult:
    return await conversation.decide("sg-1", {"edit": {"text": "milk"}}, by="ann")
"""
)

#: A conversation given a collaborator that is not one: mypy reports the argument.
WRONG_CONVERSATION = """\
from __future__ import annotations
from dial_runtime import Conversation, policy_human
from dial_runtime.demo import NotesDomain


class Mute:
    def speak(self, message: str) -> str:
        return ""


conversation = Conversation(agent=Mute(), domain=NotesDomain(), human=policy_human("accept"))
"""

#: A minimal class for each port, member by member (the store is the shipped one, its members overridden).
MEMBERS = {
    "AgentPort": {"send": "def send(self, message: str) -> str: return ''"},
    "StreamingAgentPort": {
        "send": "def send(self, message: str) -> str: return ''",
        "stream": "async def stream(self, message: str) -> AsyncIterator[str]: yield ''",
    },
    "HumanPort": {
        "decide": "def decide(self, suggestion: Suggestion) -> Accept: return Accept()",
        "answer": "def answer(self, ask: Ask) -> str: return ''",
    },
    "DomainPort": {
        "actions": "actions: dict[str, ActionSpec] = {}",
        "validate": "def validate(self, action: str, payload: Any) -> None: return None",
        "preview": "def preview(self, action: str, payload: Any) -> str: return action",
        "run": "async def run(self, action: str, payload: Any) -> None: return None",
        "context": "def context(self) -> str: return ''",
    },
    "StorePort": {},
}

#: Mistakes a user could make: the port, the member and what it is instead (``None``: missing).
ILL_TYPED = {
    "send-takes-a-number": ("AgentPort", "send", "def send(self, message: int) -> str: return ''"),
    "send-returns-a-number": ("AgentPort", "send", "async def send(self, message: str) -> int: return 1"),
    "send-is-missing": ("AgentPort", "send", None),
    "stream-returns-text": ("StreamingAgentPort", "stream", "def stream(self, message: str) -> str: return ''"),
    "decide-returns-a-word": (
        "HumanPort",
        "decide",
        "def decide(self, suggestion: Suggestion) -> str: return 'yes'",
    ),
    "decide-takes-an-ask": ("HumanPort", "decide", "def decide(self, ask: Ask) -> Accept: return Accept()"),
    "answer-returns-a-number": ("HumanPort", "answer", "async def answer(self, ask: Ask) -> int: return 0"),
    "answer-is-missing": ("HumanPort", "answer", None),
    "run-takes-one-argument": ("DomainPort", "run", "def run(self, payload: Any) -> None: return None"),
    "validate-returns-a-bool": (
        "DomainPort",
        "validate",
        "def validate(self, a: str, p: Any) -> bool: return True",
    ),
    "actions-are-names": ("DomainPort", "actions", "actions: list[str] = []"),
    "preview-is-missing": ("DomainPort", "preview", None),
    "store-read-is-plain": (
        "StorePort",
        "read",
        "def read(self, conversation_id: str, *, after_seq: int = 0) -> list[Any]:  # type: ignore[override]\n"
        "        return []",
    ),
}

ILL_TYPED_PRELUDE = """\
from __future__ import annotations
from collections.abc import AsyncIterator
from typing import Any
from dial_runtime import Accept, ActionSpec, Ask, Suggestion
from dial_runtime.ports import AgentPort, DomainPort, HumanPort, StorePort, StreamingAgentPort
from dial_runtime.stores import MemoryStore
"""


def _ill_typed(port: str, member: str, instead: str | None) -> str:
    """A module that assigns an instance of the port's minimal class, with ``member`` changed, to the port."""
    members = {**MEMBERS[port], member: instead}
    body = [f"    {code}" for code in members.values() if code is not None] or ["    pass"]
    base = "(MemoryStore)" if port == "StorePort" else ""
    return ILL_TYPED_PRELUDE + f"class Sample{base}:\n" + "\n".join(body) + f"\nsample: {port} = Sample()\n"


@pytest.fixture(scope="module")
def mypy_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """mypy --strict's findings on every sample, by sample name (one run for all of them)."""
    folder = tmp_path_factory.mktemp("samples")
    samples = {"well_typed": textwrap.dedent(WELL_TYPED), "wrong_conversation": WRONG_CONVERSATION} | {
        name.replace("-", "_"): _ill_typed(*case) for name, case in ILL_TYPED.items()
    }
    for name, code in samples.items():
        (folder / f"{name}.py").write_text(code)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MYPYPATH", str(ROOT))  # the package as it is in the source tree, however it is installed
        stdout, stderr, _ = mypy.api.run(
            [
                "--strict",
                "--config-file",
                str(ROOT / "setup.cfg"),
                "--cache-dir",
                str(ROOT / ".mypy_cache" / "test_ports"),  # its own: other options than the package check's
                "--follow-imports=silent",
                "--show-error-codes",
                "--no-error-summary",
                *(str(folder / f"{name}.py") for name in samples),
            ]
        )
    assert not stderr, stderr
    findings = dict.fromkeys(samples, "")
    for line in stdout.splitlines():
        match = re.match(r"(?:.*[/\\])?(\w+)\.py:", line)
        assert match and match.group(1) in findings, line
        findings[match.group(1)] += line + "\n"
    return findings


def test_the_readme_way_satisfies_every_port(mypy_report: dict[str, str]) -> None:
    assert mypy_report["well_typed"] == ""


def test_a_conversation_given_what_is_not_an_agent_is_a_mypy_error(mypy_report: dict[str, str]) -> None:
    found = mypy_report["wrong_conversation"]
    assert 'Argument "agent" to "Conversation" has incompatible type "Mute"; expected "AgentPort"' in found, found


@pytest.mark.parametrize(
    ("name", "port", "member", "instead"), [(name, *case) for name, case in ILL_TYPED.items()]
)
def test_a_wrong_collaborator_is_a_mypy_error(
    mypy_report: dict[str, str], name: str, port: str, member: str, instead: str | None
) -> None:
    found = mypy_report[name.replace("-", "_")]
    assert f'variable has type "{port}")  [assignment]' in found, found
    if instead is not None:  # mypy names a member that conflicts, not always one that is missing
        assert re.search(rf"note: .*\b{member}\b", found), found


def _load(code: str, folder: Path) -> ModuleType:
    path = folder / "user_module.py"
    path.write_text(textwrap.dedent(code))
    spec = importlib.util.spec_from_file_location("user_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["user_module"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["user_module"]
    return module


@pytest.mark.anyio
async def test_the_typed_sample_runs_with_its_dict_forms(tmp_path: Path) -> None:
    """The well-typed sample (dict action specs, validate's dicts, a decision given as a dict) runs as typed."""
    from dial_runtime import Conversation

    user = _load(USER_MODULE, tmp_path)
    replies = [
        envelope(suggest("add-note", '{"text": "buy milk"}'), suggest("add-note", '{"text": ""}')),
        envelope(suggest("list-notes", "{}")),
        envelope("<dial-inform>Done.</dial-inform>"),
    ]
    conversation = Conversation(agent=user.Replies(replies), domain=user.Notes(), human=user.Person())
    result = await conversation.say("add a note")
    assert isinstance(result, TurnResult)
    assert [(outcome.id, outcome.status, outcome.code) for outcome in result.outcomes] == [
        ("sg-1", "done", None),
        ("sg-2", "invalid", "missing-text"),
        ("sg-3", "done", None),
    ]
    assert conversation.domain.notes == ["buy milk"]
