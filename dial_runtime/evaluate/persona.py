"""Self-play: a simulated person (any agent given a persona and a goal) holds conversations with an agent.

:class:`PersonaHuman` plays the person through the human port: it answers asks, decides on cards (accept, edit,
dismiss, or say something else) and says its next words. Its model is any agent (a ``ChatAgent`` from an agent URI,
or a scripted one) and is shown only what a person would see, read from the log's projection: the agent's words,
each card's preview, the agent's text for it, its payload and whether it is destructive, and how cards ended;
never an event type, an id or a digest. Each request to the model begins with one line, ``REQUEST: words``,
``REQUEST: card`` or ``REQUEST: ask``, and the model answers with one JSON object (see :func:`persona_prompt`).

:func:`self_play` holds one conversation through the public :class:`~dial_runtime.Conversation`, into a store when
given: the log is the record, and the counterfactual replay scores it like any recorded conversation.
:func:`plan_selfplay` writes down a run of N conversations (:class:`SelfPlayManifest`: the agent and the persona's
model with their generation settings, the persona file's content and its sha256, each conversation's id and
seeds, the runtime's version, the date) and :func:`selfplay` holds them; holding the same manifest again holds the
same conversations (``dial-runtime eval selfplay --repeat MANIFEST``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import inspect
import json
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
import msgspec

from .. import __version__
from .._command import _CommandError, _described, _usage
from ..domains.loading import DomainPerConversation, load_domain
from ..driver.conversation import Conversation
from ..errors import AgentError, DialError
from ..llm.chat import ChatAgent
from ..llm.uri import agent_from_uri
from ..ports import AgentPort, AnswerLike, DecisionLike, StorePort
from ..runtime.events import Event, InformDeltaEvent, LogEntry
from ..runtime.records import Accept, AgentReply, Ask, Decision, Dismiss, Edit, Say, Suggestion
from ..stores import open_store
from ..views.person import (
    AgentText,
    Aside,
    Card,
    Item,
    Notice,
    PersonWords,
    Projection,
    Question,
    Told,
    project,
)

__all__ = [
    "ModelRecord",
    "Persona",
    "PersonaHuman",
    "PlannedConversation",
    "RulePersonaModel",
    "SelfPlayManifest",
    "SelfPlayRun",
    "persona_prompt",
    "plan_selfplay",
    "run_selfplay_command",
    "self_play",
    "selfplay",
]

#: What the person answers an ask with when the model's reply holds no answer and no text.
NO_ANSWER = "I don't know"

_SCRIPT = "script:"


class Persona(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A simulated person: who they are, what they want, what they know.

    ``goal`` is what they want from the conversation; ``persona`` who they are and how they speak; ``known`` the
    facts they may give when asked (ids, names); ``rules`` how they behave; ``opening`` their first words
    (``None``: their model writes them); ``max_turns`` how many things they say at most (their words and the
    words they give instead of deciding) before the run ends ``turn-limit``.
    """

    goal: str
    persona: str = ""
    known: str = ""
    rules: str = ""
    opening: str | None = None
    max_turns: int = 12

    def __post_init__(self) -> None:
        if not self.goal.strip():
            raise ValueError("a persona needs a goal: what the person wants from the conversation")
        if self.opening is not None and not self.opening.strip():
            raise ValueError("a persona's opening, when given, is words: leave it out to let the model write them")
        if self.max_turns < 1:
            raise ValueError(f"a persona's max_turns is at least 1, not {self.max_turns}")

    @classmethod
    def from_file(cls, path: str | Path) -> Persona:
        """The persona a JSON file holds (YAML for a ``.yaml`` or ``.yml`` file, with the ``yaml`` extra);
        ``ValueError`` in one line naming the file and what is wrong."""
        return _read_persona(path)[0]


def _read_persona(path: str | Path) -> tuple[Persona, str]:
    """The persona a file holds, and the file's text (its bytes as they are, newlines included)."""
    try:
        text = Path(path).read_bytes().decode()
    except OSError as error:
        raise ValueError(f"persona {str(path)!r}: cannot read it ({error.strerror or error})") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"persona {str(path)!r}: not UTF-8 text (byte {error.start})") from None
    return _persona_from_text(text, path), text


def _persona_from_text(text: str, path: str | Path) -> Persona:
    """The persona ``text`` holds, read as the file ``path`` names would be (JSON, or YAML by its suffix)."""
    shown = str(path)
    if Path(path).suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ValueError(
                f"persona {shown!r}: reading YAML needs the yaml extra (pip install 'dial-runtime[yaml]')"
            ) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ValueError(f"persona {shown!r}: not YAML ({' '.join(str(error).split())})") from None
    else:
        try:
            data = json.loads(text)  # json's errors name the line and column of a hand-written file
        except ValueError as error:
            raise ValueError(f"persona {shown!r}: not JSON ({error})") from None
    if not isinstance(data, dict):
        raise ValueError(f"persona {shown!r}: expected an object with a goal, got {type(data).__name__}")
    try:
        return msgspec.convert(data, Persona)
    except msgspec.ValidationError as error:
        raise ValueError(f"persona {shown!r}: {error}") from None


def persona_prompt(persona: Persona) -> str:
    """The system prompt of a persona's model: who they are, their goal, what they know, how they behave, and
    how to answer each request."""
    parts = [
        "You play a person talking with an AI assistant in an app, to test the assistant. Stay in character: "
        "write as this person would, and never say that you are simulated. The assistant cannot see these "
        "instructions.",
        f"What you want: {persona.goal}",
    ]
    if persona.persona:
        parts.append(f"Who you are: {persona.persona}")
    if persona.known:
        parts.append(f"What you know (give these facts when you are asked for them): {persona.known}")
    if persona.rules:
        parts.append(f"How you behave: {persona.rules}")
    if persona.opening is not None:
        parts.append(f"You opened the conversation by saying: {json.dumps(persona.opening, ensure_ascii=False)}")
    parts.append(
        "You see what a person sees in the app: the assistant's words, each action it proposes (a short "
        "description, its details as JSON, and whether it is destructive) and how each action ended.\n\n"
        "Each message to you begins with one line saying what is asked of you, then what you saw since your last "
        "reply. Answer every message with exactly one JSON object:\n"
        '- REQUEST: words: say what you say next, {"say": "your words"}, or {"done": true} once you have what '
        "you wanted, or see that you will not get it.\n"
        '- REQUEST: card: decide on a proposed action: {"decision": "accept"} to let it run as shown, '
        '{"decision": "dismiss"} to refuse it, {"decision": "edit", "payload": {...}} to run it with corrected '
        'details (give the whole JSON), or {"decision": "say", "text": "your words"} to decide nothing and say '
        "this instead.\n"
        '- REQUEST: ask: answer the assistant\'s question, {"answer": "your answer"} (for a choice, the value '
        "of the option you pick)."
    )
    return "\n\n".join(parts)


def _first_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` (prose and code fences around it ignored), or ``None``."""
    decoder = json.JSONDecoder()
    at = text.find("{")
    while at != -1:
        try:
            value, _ = decoder.raw_decode(text, at)
        except ValueError:
            pass
        else:
            if isinstance(value, dict):
                return value
        at = text.find("{", at + 1)
    return None


def _words(value: object) -> str | None:
    """Non-empty words, stripped; ``None`` for anything else."""
    return (value.strip() or None) if isinstance(value, str) else None


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


class RulePersonaModel:
    """A persona's model that follows a rule instead of a language model, for a first run without one: it opens
    with ``opening``, answers every card with ``decision`` (``accept`` or ``dismiss``) and every question with
    ``answer``, and asks the agent to go on until the agent's words hold ``closing``, then it is done (``None``:
    done once the agent has answered its opening with words alone). ``opened``: the person's opening was said
    without it (a persona's own ``opening``). ``dial-runtime eval selfplay`` and ``eval tau2`` name them
    ``builtin:accept`` and ``builtin:dismiss``."""

    def __init__(
        self,
        opening: str,
        *,
        decision: str = "accept",
        answer: str = "I don't know.",
        closing: str | None = None,
        opened: bool = False,
    ) -> None:
        if decision not in ("accept", "dismiss"):
            raise ValueError(f"RulePersonaModel: the decision is accept or dismiss, not {decision!r}")
        self.opening = opening
        self.decision = decision
        self.answer = answer
        self.closing = closing
        self._opened = opened

    def send(self, message: str) -> str:
        request = message.partition("\n")[0].strip()
        if request == "REQUEST: card":
            return msgspec.json.encode({"decision": self.decision}).decode()
        if request == "REQUEST: ask":
            return msgspec.json.encode({"answer": self.answer}).decode()
        if not self._opened:
            self._opened = True
            return msgspec.json.encode({"say": self.opening}).decode()
        if self.closing is None or self.closing in message:
            return msgspec.json.encode({"done": True}).decode()
        return msgspec.json.encode({"say": "Please go on."}).decode()


#: The persona models ``--persona-model builtin:RULE`` names: a :class:`RulePersonaModel` deciding every card so.
BUILTIN_PERSONAS = ("accept", "dismiss")
_BUILTIN = "builtin:"


class PersonaHuman:
    """The person of a self-play conversation: ``model`` (any agent) plays ``persona``.

    It satisfies :class:`~dial_runtime.ports.HumanPort` (``decide``, ``answer``) and says its next words
    (:meth:`next_words`); :meth:`hear` gives it the projection's items as the conversation shows them, from which
    it tells its model what a person would have seen. A reply that holds no answer of the request's form is
    counted in :attr:`unclear` and taken as: words, done; a card, dismissed (a person who does not clearly say
    yes has not said yes); an ask, the reply's text. :attr:`failure` is what the model raised, once it failed.
    """

    def __init__(self, model: AgentPort, persona: Persona) -> None:
        self.model = model
        self.persona = persona
        self.unclear = 0
        self.failure: BaseException | None = None
        self._seen: list[str] = []
        self._ended: set[str] = set()
        self._shown_questions: set[str] = set()
        self._requests = 0

    def hear(self, items: Iterable[Item]) -> None:
        """Take the projection items the person has seen (added or changed): the agent's words, the questions
        shown without being put, the cards that ended, the notices; the person's own words and what only the
        runtime reads (the messages to the agent, proposals never shown) are left out."""
        for item in items:
            line = self._heard(item)
            if line is not None:
                self._seen.append(line)

    def _heard(self, item: Item) -> str | None:
        match item:
            case AgentText(text=text, unconfirmed=unconfirmed) if text.strip():
                said = "The assistant (not confirmed by the app)" if unconfirmed else "The assistant"
                return f"{said}: {text.strip()}"
            case Question(status="shown") if item.id not in self._shown_questions:
                self._shown_questions.add(item.id)
                return f"The assistant also asked (not put to you): {item.text}"
            case Card(outcome=outcome) if outcome and item.id not in self._ended:
                self._ended.add(item.id)
                result = "" if item.result is None else f" (result: {item.result})"
                return f"{item.preview or item.action}: {outcome}{result}"
            case Notice(text=text) | Aside(text=text) if text:
                return f"({text})"
        return None

    async def next_words(self) -> str | None:
        """What the person says next, from the model (``{"say": ...}``); ``None`` once they are done."""
        if self._requests == 0 and not self._seen and self.persona.opening is None:
            where = "The conversation has not started: say your first words."
        else:
            where = ""
        reply = _first_object(await self._request("words", where, 'Reply {"say": "..."} or {"done": true}.'))
        if reply is not None and reply.get("done") is True:
            return None
        words = None if reply is None else _words(reply.get("say"))
        if words is None:
            self.unclear += 1
        return words

    async def decide(self, suggestion: Suggestion) -> DecisionLike:
        """The person's decision on a card, from the model: accept, dismiss, edit or say."""
        lines = [f"The assistant proposes: {suggestion.preview or suggestion.action}"]
        if suggestion.text:
            lines.append(f"In the assistant's words: {suggestion.text}")
        lines.append(f"Its details (JSON): {_json(suggestion.payload)}")
        lines.append(f"Destructive: {'yes' if suggestion.destructive else 'no'}")
        issue = suggestion.issue
        if issue is not None:
            field = f" (in {issue.field})" if issue.field else ""
            lines.append(
                f"The details you gave were refused{field}: {issue.hint or issue.code or 'no reason given'}"
            )
        lines.append(
            'Reply {"decision": "accept"}, {"decision": "dismiss"}, {"decision": "edit", "payload": {...}} '
            'or {"decision": "say", "text": "..."}.'
        )
        reply = _first_object(await self._request("card", *lines))
        decision = None if reply is None else _decision(reply)
        if decision is None:
            self.unclear += 1
            return Dismiss()
        return decision

    async def answer(self, ask: Ask) -> AnswerLike:
        """The person's answer to the agent's question, from the model (``{"answer": ...}``)."""
        lines = [f"The assistant asks: {ask.text}"]
        options = [option for option in ask.options if not option.disabled]
        if options:
            shown = []
            for option in options:
                label = f" ({option.label})" if option.label and option.label != option.value else ""
                default = ", the default" if option.default else ""
                shown.append(f"{_json(option.value)}{label}{default}")
            lines.append(f"Options: {'; '.join(shown)}")
        lines.append('Reply {"answer": "..."}.')
        text = await self._request("ask", *lines)
        reply = _first_object(text)
        given = None if reply is None else reply.get("answer")
        if isinstance(given, str):
            return given.strip() or NO_ANSWER
        self.unclear += 1
        return text.strip() or NO_ANSWER

    async def _request(self, kind: str, *lines: str) -> str:
        """Send the model one request (what the person saw since the last one, then ``lines``); its reply."""
        seen, self._seen = self._seen, []
        parts = [f"REQUEST: {kind}"]
        if seen:
            parts += ["What you saw since your last reply:", *seen]
        elif self._requests:
            parts.append("The assistant said nothing since your last reply.")
        parts += [line for line in lines if line]
        self._requests += 1
        try:
            reply = self.model.send("\n".join(parts))
            if inspect.isawaitable(reply):
                reply = await reply
        except Exception as error:
            self.failure = error
            raise
        if isinstance(reply, AgentReply):
            return reply.text
        return reply or ""


def _decision(reply: dict[str, Any]) -> Decision | None:
    """The decision a card's reply states, or ``None`` when it states none."""
    match reply.get("decision"):
        case "accept":
            return Accept()
        case "dismiss":
            return Dismiss()
        case "edit" if "payload" in reply:
            return Edit(reply["payload"])
        case "say":
            text = _words(reply.get("text"))
            return None if text is None else Say(text)
    return None


class SelfPlayRun(msgspec.Struct, frozen=True, kw_only=True):
    """One self-play conversation: how it ended (``done``: the person said they are done; ``turn-limit``: the
    person said ``max_turns`` things; ``ended``: the conversation ended, the agent having signalled
    session-complete or the domain's flow its end; ``agent-failed: <one line>``: the agent gave no reply or its
    send failed), how many things the person said, how many of the model's replies were unclear, and the log."""

    conversation_id: str
    ended: str
    said: int
    entries: tuple[LogEntry, ...]
    unclear: int = 0


async def self_play(
    *,
    agent: AgentPort,
    domain: Any,
    person: PersonaHuman,
    store: StorePort | None = None,
    conversation_id: str | None = None,
    **conversation_options: Any,
) -> SelfPlayRun:
    """Hold one conversation between ``agent`` and ``person`` on ``domain`` through :class:`Conversation`
    (``conversation_options`` are its own; an ``on_event`` given is called too), into ``store`` when given.

    The person opens with their persona's ``opening`` (or their model's words); after each call they hear what
    the projection shows since and say their next words, until they are done, the conversation ends, the agent
    fails, or they have said ``max_turns`` things. The persona's model failing raises ``AgentError`` naming the
    conversation. ``ValueError`` for a conversation the store holds already."""
    ident = conversation_id or f"selfplay-{uuid.uuid4().hex[:12]}"
    given = conversation_options.pop("on_event", None)
    projection = Projection()

    def shown(event: Event | InformDeltaEvent) -> None:
        person.hear(projection.feed(event))
        if given is not None:
            given(event)

    if store is None:
        conversation = Conversation(agent=agent, domain=domain, human=person, **conversation_options)
    else:
        if await store.read(ident):
            raise ValueError(f"the store holds a conversation {ident!r} already")
        conversation = await Conversation.open(
            store, ident, agent=agent, domain=domain, human=person, **conversation_options
        )
    conversation.on_event = shown
    limit = person.persona.max_turns

    def said() -> int:  # the person's words, said or given instead of deciding, as the log has them
        seen = project(conversation.log).items
        return sum(1 for item in seen if isinstance(item, PersonWords) and item.how != "answer")

    try:
        words = person.persona.opening if person.persona.opening is not None else await person.next_words()
        ended = "done"
        while words is not None:
            try:
                result = await conversation.say(words)
            except Exception as error:
                if error is person.failure:
                    raise
                ended = f"agent-failed: {_described(error)}"
                break
            if result.status == "no-reply":
                notices = [item.text for item in projection.items if isinstance(item, Notice)]
                ended = f"agent-failed: {notices[-1] if notices else 'no reply'}"
                break
            if result.status == "ended":
                ended = "ended"
                break
            if said() >= limit:
                ended = "turn-limit"
                break
            words = await person.next_words()
    except Exception as error:
        if error is not person.failure:
            raise
        raise AgentError(f"{ident}: the persona's model failed: {_described(error)}") from error
    return SelfPlayRun(
        conversation_id=ident, ended=ended, said=said(), entries=conversation.log, unclear=person.unclear
    )


# --- runs of N conversations -------------------------------------------------------------------------------------


class ModelRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A model as a self-play run used it: its agent URI, the generation settings the URI sets (none for a
    ``script:`` URI), and ``seed``, the seed of conversation 0 (conversation ``i`` gets ``seed + i``; ``None``:
    no seed is sent)."""

    uri: str
    settings: dict[str, Any] = {}
    seed: int | None = None

    def seed_of(self, index: int) -> int | None:
        """The seed conversation ``index`` sends, or ``None``."""
        return None if self.seed is None else self.seed + index


class PlannedConversation(msgspec.Struct, frozen=True, kw_only=True):
    """One conversation of a run: its id (``selfplay-<run id>-<i>``) and the seeds its agent and its persona's
    model send (``None``: none)."""

    id: str
    agent_seed: int | None = None
    persona_seed: int | None = None


class SelfPlayManifest(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a self-play run needs to be held again: the agent and the persona's model, the persona file
    (its path, content and sha256), the domain (``module:factory``), each conversation, the runtime's version and
    the date (UTC, ISO 8601)."""

    run_id: str
    agent: ModelRecord
    persona_model: ModelRecord
    persona_file: str
    persona_content: str
    persona_sha256: str
    domain: str
    conversations: tuple[PlannedConversation, ...]
    runtime_version: str
    date: str

    @property
    def persona(self) -> Persona:
        """The persona the manifest's file content holds."""
        return _persona_from_text(self.persona_content, self.persona_file)

    def to_json(self) -> bytes:
        """The manifest as indented JSON."""
        return msgspec.json.format(msgspec.json.encode(self), indent=2) + b"\n"

    @classmethod
    def from_file(cls, path: str | Path) -> SelfPlayManifest:
        """The manifest a JSON file holds; ``ValueError`` in one line when it cannot be read, is not a manifest,
        or its persona's content does not match its sha256."""
        try:
            manifest = msgspec.json.decode(Path(path).read_bytes(), type=cls)
        except OSError as error:
            raise ValueError(f"manifest {str(path)!r}: cannot read it ({error.strerror or error})") from None
        except msgspec.DecodeError as error:
            raise ValueError(f"manifest {str(path)!r}: not a self-play manifest ({error})") from None
        if _sha256(manifest.persona_content) != manifest.persona_sha256:
            raise ValueError(f"manifest {str(path)!r}: the persona's content does not match its sha256")
        manifest.persona  # noqa: B018  (reading it checks the persona)
        return manifest


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _model_record(uri: str, seed: int | None) -> ModelRecord:
    """The record of the model ``uri`` names (``ValueError`` for a URI that names none): its settings, and its
    first seed, ``seed`` when given, else the URI's own; a ``script:`` agent sends none, and is recorded by its
    file's absolute path, so that the manifest holds again from any directory; a built-in persona model
    (``builtin:accept``, ``builtin:dismiss``) sends none either."""
    if uri.startswith(_BUILTIN):
        if uri.removeprefix(_BUILTIN) not in BUILTIN_PERSONAS:
            names = " and ".join(_BUILTIN + rule for rule in BUILTIN_PERSONAS)
            raise ValueError(f"{uri!r}: the built-in persona models are {names}")
        return ModelRecord(uri=uri)
    if uri.startswith(_SCRIPT):
        agent_from_uri(uri)  # reads the file: a script that cannot be read is refused now
        return ModelRecord(uri=_SCRIPT + str(Path(uri.removeprefix(_SCRIPT)).resolve()))
    made = agent_from_uri(uri, codec="dial")  # the settings, whatever the codec (which needs a domain)
    assert isinstance(made, ChatAgent)
    settings = {name: value for name, value in msgspec.to_builtins(made.settings).items() if value is not None}
    own = settings.pop("seed", None)
    return ModelRecord(uri=uri, settings=settings, seed=own if seed is None else seed)


def plan_selfplay(
    *,
    agent: str,
    persona_model: str,
    persona: str | Path,
    domain: str,
    n: int,
    seed: int | None = None,
    run_id: str | None = None,
) -> SelfPlayManifest:
    """The manifest of a run of ``n`` conversations of ``agent`` (an agent URI) with the person of the
    ``persona`` file, played by ``persona_model`` (an agent URI), on ``domain`` (``module:factory``).

    Each model that generates sends a seed: conversation ``i`` sends ``seed + i``, ``seed`` being the one given,
    else the seed in the model's URI (``?seed=7``), else none. ``ValueError`` in one line for a persona file
    that cannot be read, a URI that names no agent, or ``n`` below 1."""
    if n < 1:
        raise ValueError(f"a self-play run holds at least 1 conversation, not {n}")
    _, content = _read_persona(persona)
    agent_record = _model_record(agent, seed)
    persona_record = _model_record(persona_model, seed)
    ident = run_id or uuid.uuid4().hex[:8]
    return SelfPlayManifest(
        run_id=ident,
        agent=agent_record,
        persona_model=persona_record,
        persona_file=str(persona),
        persona_content=content,
        persona_sha256=_sha256(content),
        domain=domain,
        conversations=tuple(
            PlannedConversation(
                id=f"selfplay-{ident}-{index}",
                agent_seed=agent_record.seed_of(index),
                persona_seed=persona_record.seed_of(index),
            )
            for index in range(n)
        ),
        runtime_version=__version__,
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )


def _domain(spec: str, conversation_id: str) -> Any:
    """A fresh domain for one conversation, from ``module:factory``; ``ValueError`` for one that cannot load."""
    try:
        loaded = load_domain(spec)
    except _CommandError as error:
        raise ValueError(str(error)) from None
    return loaded(conversation_id, []) if isinstance(loaded, DomainPerConversation) else loaded


def _model(
    uri: str, seed: int | None, prompt: str | None, persona: Persona | None = None, domain: Any = None
) -> AgentPort:
    """The model ``uri`` names, sending ``seed`` (a built-in persona model plays ``persona`` by its rule); the
    agent under test gets the ``domain``, whose actions its codec names and whose prompt its codec writes."""
    if uri.startswith(_BUILTIN) and persona is not None:
        rule = uri.removeprefix(_BUILTIN)
        return RulePersonaModel(persona.opening or persona.goal, decision=rule, opened=persona.opening is not None)
    if seed is None:
        return agent_from_uri(uri, system_prompt=prompt, domain=domain)
    return agent_from_uri(uri, system_prompt=prompt, domain=domain, seed=seed)


async def selfplay(
    manifest: SelfPlayManifest,
    *,
    store: StorePort,
    on_run: Callable[[SelfPlayRun], object] | None = None,
    **conversation_options: Any,
) -> list[SelfPlayRun]:
    """Hold the manifest's conversations in order, into ``store``: each with a fresh domain, a fresh agent (the
    prompt its codec needs for the domain) and a fresh persona model (:func:`persona_prompt`), each sending its
    seed; ``on_run`` is called with each run as it ends. ``ValueError`` for a domain that cannot be loaded or a
    conversation the store holds already (nothing is held then); ``AgentError`` when the persona's model fails."""
    persona = manifest.persona
    for planned in manifest.conversations:
        if await store.read(planned.id):
            raise ValueError(
                f"the store holds a conversation {planned.id!r} already: hold the run again in another store"
            )
    runs: list[SelfPlayRun] = []
    for planned in manifest.conversations:
        domain = _domain(manifest.domain, planned.id)
        async with contextlib.AsyncExitStack() as stack:
            agent = _model(manifest.agent.uri, planned.agent_seed, None, domain=domain)
            model = _model(manifest.persona_model.uri, planned.persona_seed, persona_prompt(persona), persona)
            for made in (agent, model):
                close = getattr(made, "aclose", None)
                if callable(close):
                    stack.push_async_callback(close)
            run = await self_play(
                agent=agent,
                domain=domain,
                person=PersonaHuman(model, persona),
                store=store,
                conversation_id=planned.id,
                **conversation_options,
            )
        runs.append(run)
        if on_run is not None:
            on_run(run)
    return runs


# --- the command -------------------------------------------------------------------------------------------------


def _manifest(args: argparse.Namespace) -> SelfPlayManifest:
    """The manifest the command line asks for: read from --repeat, or planned from the other arguments."""
    planned = {
        "--agent": args.agent,
        "--persona": args.persona,
        "--persona-model": args.persona_model,
        "--domain": args.domain,
    }
    if args.repeat is not None:
        given = [
            name for name, value in {**planned, "-n": args.n, "--seed": args.seed}.items() if value is not None
        ]
        if given:
            _usage(f"--repeat holds the manifest's run: drop {', '.join(given)}")
        try:
            return SelfPlayManifest.from_file(args.repeat)
        except ValueError as error:
            raise _CommandError(f"--repeat: {error}") from None
    missing = [name for name, value in planned.items() if value is None]
    if missing:
        _usage(f"selfplay needs {', '.join(missing)} (or --repeat MANIFEST)")
    load_domain(args.domain)
    try:
        return plan_selfplay(
            agent=args.agent,
            persona_model=args.persona_model,
            persona=args.persona,
            domain=args.domain,
            n=1 if args.n is None else args.n,
            seed=args.seed,
        )
    except ValueError as error:
        raise _CommandError(str(error)) from None


def _line(run: SelfPlayRun) -> str:
    turns = sum(1 for item in Projection().feed_all(run.entries) if isinstance(item, Told))
    unclear = f", {run.unclear} unclear" if run.unclear else ""
    return f"{run.conversation_id}  {run.ended}  (said {run.said}, {turns} turn(s){unclear})"


def run_selfplay_command(args: argparse.Namespace) -> int:
    """``dial-runtime eval selfplay``: hold the run, print a line per conversation (its id, how it ended, its
    turns) and where the manifest is."""
    if args.store is None:
        _usage("selfplay needs --store URL: the conversations go there")
    manifest = _manifest(args)
    try:
        store = open_store(args.store)
    except ValueError as error:
        _usage(f"--store: {error}")

    async def hold() -> list[SelfPlayRun]:
        try:
            return await selfplay(manifest, store=store, on_run=lambda run: print(_line(run), flush=True))
        finally:
            await store.aclose()

    try:
        anyio.run(hold)
    except (DialError, ValueError) as error:
        raise _CommandError(" ".join(str(error).split()) or _described(error)) from None
    except OSError as error:
        raise _CommandError(_described(error)) from None
    if args.repeat is not None and args.manifest is None:
        print(f"manifest: {args.repeat} (held again)")
        return 0
    path = Path(args.manifest or f"selfplay-{manifest.run_id}.json")
    try:
        path.write_bytes(manifest.to_json())
    except OSError as error:
        raise _CommandError(f"cannot write the manifest {str(path)!r}: {error.strerror or error}") from None
    print(f"manifest: {path}")
    return 0
