"""A simulated person (dial_runtime.evaluate.persona): a persona's model, answering each REQUEST kind from a
script, plays the person of a real conversation with a scripted agent on the demo notes domain; what it is shown
is exactly what a person would see."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dial_runtime.agents import ScriptedAgent
from dial_runtime.demo import NotesDomain
from dial_runtime.errors import AgentError
from dial_runtime.evaluate.persona import Persona, PersonaHuman, SelfPlayRun, persona_prompt, self_play
from dial_runtime.stores import MemoryStore
from dial_runtime.views.person import Card, PersonWords, Question, project

from ..fakes import envelope, suggest

pytestmark = pytest.mark.anyio

EXAMPLE = Path(__file__).parents[2] / "examples" / "persona-notes.json"

ADD_MILK = envelope(
    "<dial-inform>I can add that for you.</dial-inform>",
    suggest("add-note", '{"text": "buy milk"}', text="Add it"),
    prose="Hello!",
)
REMOVE_MILK = envelope(suggest("remove-note", '{"text": "buy milk"}', text="Tidy up"))
ADDED = envelope("<dial-inform>Added.</dial-inform>")
OK = envelope("<dial-inform>Fine.</dial-inform>")
WHICH = envelope(
    '<dial-ask id="which" response-type="choice">Which list?'
    '<dial-option value="home">Home</dial-option><dial-option value="work" default="true">Work</dial-option>'
    '<dial-option value="old" disabled="true">Old</dial-option></dial-ask>'
)


class PersonaModel:
    """A persona's model answering each request from the queue of its kind (``words``, ``card``, ``ask``), and
    recording every request it was sent."""

    def __init__(self, **answers: list[Any]) -> None:
        self.answers = {kind: list(replies) for kind, replies in answers.items()}
        self.requests: list[str] = []

    def send(self, message: str) -> str:
        self.requests.append(message)
        kind = message.partition("\n")[0].removeprefix("REQUEST: ")
        answer = self.answers[kind].pop(0)
        return answer if isinstance(answer, str) else json.dumps(answer)

    def kinds(self) -> list[str]:
        return [request.partition("\n")[0] for request in self.requests]


MILK = Persona(goal="have a note saying buy milk", opening="add a note: buy milk")


async def play(
    replies: list[str],
    model: PersonaModel,
    persona: Persona = MILK,
    domain: NotesDomain | None = None,
    **options: Any,
) -> tuple[SelfPlayRun, ScriptedAgent, NotesDomain]:
    agent = ScriptedAgent(replies)
    notes = NotesDomain() if domain is None else domain
    run = await self_play(agent=agent, domain=notes, person=PersonaHuman(model, persona), **options)
    return run, agent, notes


def cards(run: SelfPlayRun) -> list[Card]:
    return [item for item in project(run.entries).items if isinstance(item, Card)]


async def test_an_accepted_card_runs_and_the_person_hears_how_it_ended() -> None:
    model = PersonaModel(card=[{"decision": "accept"}], words=[{"done": True}])
    run, agent, notes = await play([ADD_MILK, ADDED], model)
    assert (run.ended, run.said, run.unclear) == ("done", 1, 0)
    assert notes.notes == ["buy milk"] and [card.status for card in cards(run)] == ["done"]
    assert agent.sent[0].endswith("add a note: buy milk")
    card, words = model.requests
    assert card == "\n".join(
        [
            "REQUEST: card",
            "What you saw since your last reply:",
            "The assistant: Hello!",
            "The assistant: I can add that for you.",
            "The assistant proposes: Add the note 'buy milk'",
            "In the assistant's words: Add it",
            'Its details (JSON): {"text": "buy milk"}',
            "Destructive: no",
            'Reply {"decision": "accept"}, {"decision": "dismiss"}, {"decision": "edit", "payload": {...}} '
            'or {"decision": "say", "text": "..."}.',
        ]
    )
    assert words == "\n".join(
        [
            "REQUEST: words",
            "What you saw since your last reply:",
            "Add the note 'buy milk': Done (result: {\"count\": 1})",
            "The assistant: Added.",
            'Reply {"say": "..."} or {"done": true}.',
        ]
    )
    assert run.conversation_id.startswith("selfplay-")


async def test_a_dismissed_destructive_card_does_not_run() -> None:
    model = PersonaModel(card=[{"decision": "dismiss"}], words=[{"say": "keep it"}, {"done": True}])
    run, agent, notes = await play([REMOVE_MILK, OK], model, domain=NotesDomain(["buy milk"]))
    assert notes.notes == ["buy milk"] and [card.status for card in cards(run)] == ["dismissed"]
    assert "Destructive: yes" in model.requests[0]
    assert "Remove the note 'buy milk': Dismissed" in model.requests[1]
    assert 'yield="sg-1:dismissed"' in agent.sent[1] and agent.sent[1].endswith("keep it")


async def test_an_edit_runs_the_persons_payload() -> None:
    model = PersonaModel(card=[{"decision": "edit", "payload": {"text": "buy oat milk"}}], words=[{"done": True}])
    run, _, notes = await play([ADD_MILK, ADDED], model)
    assert notes.notes == ["buy oat milk"]
    assert [(card.status, card.payload) for card in cards(run)] == [("done", {"text": "buy oat milk"})]
    assert "Add the note 'buy oat milk': Done" in model.requests[1]


async def test_a_refused_edit_is_shown_back_with_why_and_decided_again() -> None:
    long = "buy milk " * 8
    model = PersonaModel(
        card=[{"decision": "edit", "payload": {"text": long}}, {"decision": "edit", "payload": {"text": "milk"}}],
        words=[{"done": True}],
    )
    run, _, notes = await play([ADD_MILK, ADDED], model)
    assert notes.notes == ["milk"] and run.ended == "done"
    again = model.requests[1]
    assert again.startswith("REQUEST: card\nThe assistant said nothing since your last reply.\n")
    assert f"Its details (JSON): {json.dumps({'text': long})}" in again
    assert "The details you gave were refused (in text): Expected `str` of length <= 60." in again
    assert [len(card.refusals) for card in cards(run)] == [1]


async def test_words_instead_of_deciding_supersede_the_card_and_go_to_the_agent() -> None:
    model = PersonaModel(card=[{"decision": "say", "text": " no, bread "}], words=[{"done": True}])
    run, agent, notes = await play([ADD_MILK, OK], model)
    assert notes.notes == [] and [card.status for card in cards(run)] == ["superseded"]
    assert agent.sent[1].endswith("no, bread")
    assert run.said == 2  # the opening, and the words given instead of deciding


async def test_an_ask_is_answered_with_the_options_shown() -> None:
    model = PersonaModel(ask=['Sure: {"answer": "home"} is it.'], words=[{"done": True}])
    run, agent, _ = await play([WHICH, OK], model)
    assert model.requests[0] == "\n".join(
        [
            "REQUEST: ask",
            "The assistant asks: Which list?",
            'Options: "home" (Home); "work" (Work), the default',
            'Reply {"answer": "..."}.',
        ]
    )
    questions = [item for item in project(run.entries).items if isinstance(item, Question)]
    assert [(question.status, question.answer) for question in questions] == [("answered", "home")]
    assert agent.sent[1].endswith("home") and run.said == 1


@pytest.mark.parametrize(
    ("replies", "expected"),
    [
        pytest.param({"card": ["I think so."]}, "dismissed", id="card-prose"),
        pytest.param({"card": [{"decision": "maybe"}]}, "dismissed", id="card-unknown"),
        pytest.param({"card": [{"decision": "edit"}]}, "dismissed", id="edit-without-payload"),
        pytest.param({"card": [{"decision": "say", "text": "  "}]}, "dismissed", id="say-nothing"),
        pytest.param({"card": ['{not json} then {"decision": "accept"}']}, "done", id="first-object-that-parses"),
        pytest.param({"card": ['```json\n{"decision": "accept"}\n```']}, "done", id="code-fence"),
    ],
)
async def test_a_card_reply_without_a_clear_decision_is_a_dismissal(replies: Any, expected: str) -> None:
    model = PersonaModel(words=[{"done": True}], **replies)
    run, _, _ = await play([ADD_MILK, OK], model)
    assert [card.status for card in cards(run)] == [expected]
    assert run.unclear == (0 if expected == "done" else 1)


@pytest.mark.parametrize(
    ("reply", "answer", "unclear"),
    [
        ("home, I guess", "home, I guess", 1),
        ("   ", "I don't know", 1),
        ('{"answer": 3}', '{"answer": 3}', 1),
        ('{"answer": "  "}', "I don't know", 0),
    ],
)
async def test_an_unclear_answer_is_the_replys_text(reply: str, answer: str, unclear: int) -> None:
    model = PersonaModel(ask=[reply], words=[{"done": True}])
    run, _, _ = await play([WHICH, OK], model)
    questions = [item for item in project(run.entries).items if isinstance(item, Question)]
    assert [question.answer for question in questions] == [answer] and run.unclear == unclear


@pytest.mark.parametrize("reply", ["I'm done", '{"say": ""}', '{"done": false}', ""])
async def test_unclear_words_end_the_run_as_done(reply: str) -> None:
    model = PersonaModel(words=[reply])
    run, agent, _ = await play([OK], model)
    assert (run.ended, run.said, run.unclear, len(agent.sent)) == ("done", 1, 1, 1)


async def test_the_model_writes_the_opening_when_the_persona_has_none() -> None:
    model = PersonaModel(words=[{"say": "hi there"}, {"done": True}])
    run, agent, _ = await play([OK], model, persona=Persona(goal="chat"))
    assert model.requests[0] == "\n".join(
        [
            "REQUEST: words",
            "The conversation has not started: say your first words.",
            'Reply {"say": "..."} or {"done": true}.',
        ]
    )
    assert agent.sent[0].endswith("hi there") and run.said == 1
    assert model.requests[1].startswith(
        "REQUEST: words\nWhat you saw since your last reply:\nThe assistant: Fine."
    )


async def test_a_persona_that_says_done_before_opening_holds_no_conversation() -> None:
    model = PersonaModel(words=[{"done": True}])
    run, agent, _ = await play([OK], model, persona=Persona(goal="nothing"))
    assert (run.ended, run.said, run.entries, agent.sent) == ("done", 0, (), [])


async def test_the_person_says_at_most_max_turns_things() -> None:
    model = PersonaModel(words=[{"say": "and another"}, {"say": "never said"}])
    persona = Persona(goal="keep talking", opening="hello", max_turns=2)
    run, agent, _ = await play([OK, OK, OK], model, persona=persona)
    assert (run.ended, run.said) == ("turn-limit", 2)
    assert model.kinds() == ["REQUEST: words"]  # not asked once the limit is reached
    assert [sent.rpartition("\n")[2] for sent in agent.sent] == ["hello", "and another"]
    said = [item.text for item in project(run.entries).items if isinstance(item, PersonWords)]
    assert said == ["hello", "and another"]


async def test_the_agent_failing_ends_the_run_in_one_line() -> None:
    model = PersonaModel(words=[{"say": "more"}])
    run, _, _ = await play([OK], model)
    assert run.ended == "agent-failed: LookupError: ScriptedAgent: no reply left for message 2"
    assert run.said == 2


async def test_the_agent_giving_no_reply_ends_the_run() -> None:
    class Silent:
        def send(self, message: str) -> str:
            raise TimeoutError

    model = PersonaModel()
    run = await self_play(agent=Silent(), domain=NotesDomain(), person=PersonaHuman(model, MILK), timeout=1)
    assert run.ended.startswith("agent-failed: ")
    assert model.requests == []


async def test_the_agent_ending_the_conversation_ends_the_run() -> None:
    model = PersonaModel()
    ending = envelope("<dial-inform>Bye.</dial-inform>", '<dial-phatic signal="session-complete"/>')
    run, _, _ = await play([ending], model)
    assert (run.ended, run.said, model.requests) == ("ended", 1, [])


async def test_the_persona_model_failing_raises_naming_the_conversation() -> None:
    model = PersonaModel(card=[])
    with pytest.raises(AgentError, match=r"^milk-1: the persona's model failed: IndexError"):
        await play([ADD_MILK], model, conversation_id="milk-1")


async def test_the_person_never_sees_what_a_person_would_not() -> None:
    """Ids, digests, event types, the messages to the agent, the domain's context and proposals the runtime
    refused never reach the persona's model; the agent's words, previews, payloads and outcomes do."""
    replies = [
        envelope(
            "<dial-inform>Let me see.</dial-inform>",
            suggest("fly", "{}"),
            suggest("list-notes", "{}"),
            suggest("add-note", '{"text": "buy milk"}', ident="mine"),
        ),
        envelope(
            '<dial-declare context-key="mood">"calm"</dial-declare>',
            '<dial-ask id="q-7">Anything else?</dial-ask>',
        ),
        envelope('<dial-acknowledge of="mine">Added.</dial-acknowledge>'),
    ]
    model = PersonaModel(card=[{"decision": "accept"}], ask=[{"answer": "no"}], words=[{"done": True}])
    run, agent, _ = await play(replies, model)
    seen = "\n".join(model.requests)
    for hidden in ("sg-", "mine", "q-7", "sha256", "<dial", "<context", "fly", "yield", "outcome", "suggestion"):
        assert hidden not in seen, hidden
    assert "<context" in agent.sent[0] and "fly" in agent.sent[1]  # what only the agent is told
    assert 'List the notes: Done (result: {"notes": []})' in seen
    assert "The assistant: Let me see." in seen and "The assistant: Added." in seen
    assert '(the agent notes mood = "calm")' in seen
    assert [card.status for card in cards(run)] == ["done", "done"]


async def test_a_stored_conversation_is_refused_a_second_self_play() -> None:
    store = MemoryStore()
    model = PersonaModel(card=[{"decision": "accept"}], words=[{"done": True}])
    run, _, _ = await play([ADD_MILK, ADDED], model, store=store, conversation_id="c-1")
    assert list(run.entries) == await store.read("c-1")
    with pytest.raises(ValueError, match="the store holds a conversation 'c-1' already"):
        await play([ADD_MILK, ADDED], PersonaModel(), store=store, conversation_id="c-1")


def test_the_persona_prompt_states_the_persona_and_the_answers() -> None:
    persona = Persona(goal="G1", persona="P1", known="K1", rules="R1", opening="O1")
    prompt = persona_prompt(persona)
    for text in (
        "What you want: G1",
        "Who you are: P1",
        "asked for them): K1",
        "How you behave: R1",
        'saying: "O1"',
    ):
        assert text in prompt
    for form in (
        "REQUEST: words",
        "REQUEST: card",
        "REQUEST: ask",
        '{"say"',
        '{"done": true}',
        '"decision": "edit"',
    ):
        assert form in prompt
    assert "Who you are" not in persona_prompt(Persona(goal="G"))


def test_the_example_persona_loads() -> None:
    persona = Persona.from_file(EXAMPLE)
    assert persona.opening == "add a note: buy milk" and persona.max_turns == 4


def test_a_persona_reads_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("goal: buy milk\nknown: |\n  the shop is open\n", encoding="utf-8")
    assert Persona.from_file(path) == Persona(goal="buy milk", known="the shop is open\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, r"cannot read it \(No such file or directory\)$"),
        (b"\xff", r"not UTF-8 text \(byte 0\)$"),
        ("{", r"not JSON \(Expecting property name"),
        ("[1]", r"expected an object with a goal, got list$"),
        ("{}", r"Object missing required field `goal`$"),
        ('{"goal": " "}', r"a persona needs a goal"),
        ('{"goal": "g", "gaol": "x"}', r"Object contains unknown field `gaol`$"),
        ('{"goal": "g", "max_turns": 0}', r"a persona.s max_turns is at least 1, not 0$"),
        ('{"goal": "g", "max_turns": "3"}', r"Expected `int`, got `str` - at `\$.max_turns`$"),
        ('{"goal": "g", "opening": ""}', r"a persona.s opening, when given, is words"),
    ],
)
def test_a_bad_persona_file_is_one_line(tmp_path: Path, text: str | bytes | None, message: str) -> None:
    path = tmp_path / "p.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=r"^persona '.*p\.json': " + message) as raised:
        Persona.from_file(path)
    assert "\n" not in str(raised.value)
