"""The terminal surface: a person holds a conversation with an agent in a terminal.

rich renders the events (suggestions as cards, a spinner while the agent thinks); prompt_toolkit reads the person's
words, decisions and answers. It runs on asyncio: ``PromptSession.prompt_async`` is an asyncio coroutine, so a
prompt is cancelled like any other await (by Ctrl-C, by an ask's ``timeout``) and leaves the terminal clean.

What it shows goes, as plain text, to a :class:`~dial_runtime.transcript.Transcript` too (``lines``,
:meth:`TerminalSurface.save`): the lines ``dial-runtime demo`` prints, a card as its one-line form. The surface
holds no rules of its own: the conversation decides what happens, the surface shows it and asks the person.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import shlex
import signal
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any, NoReturn

import anyio
import anyio.lowlevel
from prompt_toolkit import PromptSession
from prompt_toolkit.application import run_in_terminal
from prompt_toolkit.completion import Completer, PathCompleter
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from rich.console import Console, Group, RenderableType
from rich.json import JSON
from rich.panel import Panel
from rich.status import Status
from rich.text import Text

from ..driver import Conversation
from ..driver.conversation import accepts_message_id
from ..errors import AlreadyDecided, ConversationBusy, DialError
from ..ports import StorePort
from ..runtime.events import Event, InformDeltaEvent
from ..runtime.records import Accept, Ask, Decision, Defer, Dismiss, Edit, Say, Suggestion, TurnResult
from ..views.person import AgentText, Card, Item, Notice, Question, RefusedProposal, Told, project
from .transcript import Transcript, approvals_words, done_before_words, elsewhere_words

#: The choices a person has on a suggestion, as typed at the prompt.
CHOICES = "a accept · d dismiss · e edit · s say something else · l later"
CHAT_HELP = "Type a message. Ctrl-C cancels a turn; /quit, or Ctrl-D at an empty prompt, leaves; /help explains."
HELP = """Words you type go to the agent, with whatever it has not been told yet.
At a suggestion: a accepts, d dismisses, e edits the payload, s says something else instead (the reply's
  other suggestions are superseded), l leaves it for later: it stays waiting, in the store with --store.
At a question: answer it; an empty answer leaves it open, /later keeps it waiting.
Ctrl-C cancels the turn running now (what the agent was not told goes with your next message).
/pending     put what waits for you (decisions, questions) to you now
/quit        leave (Ctrl-D too); at a suggestion or a question it stays waiting for you
/help        this text (never sent to the agent)"""
EDIT_HELP = "Edit the payload as JSON; Esc then Enter finishes, an empty payload cancels."

_OUTCOME_STYLES = {"done": "green", "failed": "red", "invalid": "red"}


def _style(item: Item) -> str:
    """How an item of the projection is shown: the agent's text plain, questions bold, notices yellow, outcomes
    by their status, the rest dim."""
    if isinstance(item, AgentText):
        return "yellow" if item.unconfirmed is not None else ""
    if isinstance(item, Question):
        return "bold"
    if isinstance(item, Notice):
        return "yellow"
    if isinstance(item, (Card, RefusedProposal)):
        return _OUTCOME_STYLES.get(item.status, "dim")
    return "dim"


def _words_bindings() -> KeyBindings:
    """Ctrl-C clears a line being typed, and ends the session at an empty prompt."""
    bindings = KeyBindings()

    @bindings.add("c-c")
    def _interrupt(event: KeyPressEvent) -> None:
        buffer = event.app.current_buffer
        if buffer.text:
            buffer.reset()
        else:
            event.app.exit(exception=KeyboardInterrupt(), style="class:aborting")

    return bindings


#: How the log words a turn the person cancelled (Ctrl-C, or Ctrl-D at a prompt inside the turn).
CANCELLED_BY_PERSON = "cancelled by the person"


class _Later(Exception):
    """The person keeps a question waiting (``/later``, ``/quit``, Ctrl-D at its prompt)."""


class StreamingAgent:
    """Streams through ``agent.stream`` (so the runtime handles each element as it arrives) and tells
    ``progress`` how many characters of the reply have arrived."""

    def __init__(self, agent: Any, progress: Callable[[int], object]) -> None:
        self.agent = agent
        self.progress = progress
        self._ids = accepts_message_id(agent.stream)

    @property
    def last_failure(self) -> str | None:
        """Why the agent's tries of the message have failed so far, when it says."""
        return getattr(self.agent, "last_failure", None)

    async def send(self, message: str, *, message_id: str | None = None) -> str:
        """The whole reply, for callers that do not stream."""
        return "".join([piece async for piece in self.stream(message, message_id=message_id)])

    async def stream(self, message: str, *, message_id: str | None = None) -> AsyncIterator[str]:
        """The reply's pieces as they arrive; leaving early (a cancelled turn) closes the stream. The message's
        id goes on to an agent that takes one."""
        arrived = 0
        ids = {"message_id": message_id} if message_id is not None and self._ids else {}
        async with aclosing(self.agent.stream(message, **ids)) as stream:
            async for piece in stream:
                arrived += len(piece)
                self.progress(arrived)
                yield piece


class PlainAgent:
    """Hides an agent's ``stream``, so each reply is handled once it is complete."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self._ids = accepts_message_id(agent.send)

    @property
    def last_failure(self) -> str | None:
        """Why the agent's tries of the message have failed so far, when it says."""
        return getattr(self.agent, "last_failure", None)

    async def send(self, message: str, *, message_id: str | None = None) -> str:
        ids = {"message_id": message_id} if message_id is not None and self._ids else {}
        reply = self.agent.send(message, **ids)  # a coroutine (ChatAgent) or the reply itself (ScriptedAgent)
        return str(await reply if inspect.isawaitable(reply) else reply)


class TerminalSurface:
    """Renders a conversation's events in a terminal and plays its person: pass it as ``human`` and its
    :meth:`on_event` as ``on_event``; :meth:`chat` then holds the conversation until the person leaves.

    ``editor`` is the command that edits payloads (default: ``$EDITOR``; empty: edit inline). ``by`` names the
    person: it is recorded with every decision and answer taken through :meth:`take_up` (``Conversation.decide``
    and ``answer`` record who), and is there for the runtime to record with those taken during a turn.
    ``roles`` are the person's, which an action's approval policy may require of whoever ends its card (by a
    decision, or by new words over it).
    """

    def __init__(
        self,
        console: Console | None = None,
        *,
        editor: str | None = None,
        by: str | None = None,
        roles: Iterable[str] = (),
    ) -> None:
        self.console = console or Console(highlight=False)
        self.editor = os.environ.get("EDITOR", "") if editor is None else editor
        self.by = by
        self.roles = tuple(roles)
        self.via = "terminal"  # the surface a decision taken here came through, for the log
        self.leaving = False
        self.lines: list[str] = []
        self.transcript = Transcript(self.lines.append)
        self._status: Status | None = None
        self._live: tuple[int, list[str]] | None = None  # the element whose text is arriving, what was printed
        self._carded: set[str] = set()  # the suggestions shown as cards
        self._turn: anyio.CancelScope | None = None
        self._turning: Conversation | None = None  # the conversation whose call ``_turn`` holds
        self._sessions: dict[str, PromptSession[str]] = {}

    # Rendering -----------------------------------------------------------------------------------------------

    def on_event(self, event: Event | InformDeltaEvent) -> None:
        """Show what one event adds to the conversation's projection (the conversation's ``on_event`` callback); a
        spinner runs while the agent thinks.

        Text still arriving (``inform-delta``) is printed as it comes; its complete text then adds only what the
        deltas had not carried (or, should the two disagree, prints the complete text on its own line).
        """
        if isinstance(event, InformDeltaEvent):
            self._delta(event)
            return
        items = self.transcript.projection.feed(event)
        if not items:
            self._stop_spinner()
        for item in items:
            self._item(item)

    def _item(self, item: Item) -> None:
        """Show one item added or changed: a card newly shown as a card, the rest as the transcript's lines."""
        if isinstance(item, AgentText) and self._live is not None and self._live[0] == item.element:
            printed = "".join(self._live[1])
            self._live = None
            start = len(self.lines)
            self.transcript.render(item)
            if item.text.startswith(printed) and item.unconfirmed is None:
                self.console.print(Text(item.text[len(printed) :]), soft_wrap=True)
                return
            self.console.print()
            for line in self.lines[start:]:
                self.console.print(Text(line))
            return
        self._stop_spinner()
        if isinstance(item, Card) and not item.outcome and item.id not in self._carded:
            self._carded.add(item.id)
            self.transcript.render(item)
            if item.handoff or not item.mutates:
                note = "hand-off: runs at once" if item.handoff else "read-only: runs at once"
            elif item.ruled_words:  # a rule decided it: nobody is asked
                note = item.ruled_words[0].lower() + item.ruled_words[1:]
            else:
                note = "waits for your decision"
            card = self._card(
                item.id,
                item.action,
                item.preview,
                item.text,
                item.payload,
                item.destructive,
                note,
                repeated=done_before_words(item),
                approvals=approvals_words(item),
                why=item.why_asked,
            )
            self.console.print(card)
            return
        self._show(_style(item), self.transcript.render, item)
        if isinstance(item, Told):
            self._status = self.console.status("the agent is thinking…")
            self._status.start()

    def _delta(self, event: InformDeltaEvent) -> None:
        """Print text as it arrives, after the transcript's ``agent:`` when it begins an element's text."""
        if self._live is None or self._live[0] != event.element:
            self._stop_spinner()
            self.console.print(Text("agent: "), end="", soft_wrap=True)
            self._live = (event.element, [])
        self.console.print(Text(event.text), end="", soft_wrap=True)
        self._live[1].append(event.text)

    def _end_live(self) -> None:
        """End the line of text that was arriving when something else is shown (a reply cut off mid-text)."""
        if self._live is not None:
            self._live = None
            self.console.print()

    def person(self, words: str, *, echo: bool = True) -> None:
        """Record the person's words; ``echo`` shows them too (typed words are on screen already)."""
        if echo:
            self._show("bold", self.transcript.person, words)
        else:
            self.transcript.person(words)

    def note(self, text: str, style: str = "dim") -> None:
        """Show a line of the surface's own and keep it in the transcript."""
        self._show(style, self.transcript.write, text)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the transcript, as plain text, to ``path``."""
        Path(path).write_text("\n".join(self.lines) + "\n", encoding="utf-8")

    def _show(self, style: str, write: Callable[..., object], *args: Any) -> None:
        """Run a transcript writer and show the lines it wrote."""
        self._end_live()
        start = len(self.lines)
        write(*args)
        for line in self.lines[start:]:
            self.console.print(Text(line, style=style))

    def _card(
        self,
        ident: str,
        action: str,
        preview: str,
        text: str,
        payload: Any,
        destructive: bool,
        note: str,
        refused: str | None = None,
        repeated: str | None = None,
        approvals: str | None = None,
        why: str = "",
    ) -> Panel:
        """A suggestion as a card: the preview, the agent's wording, the payload; destructive ones in red, one
        that repeats a suggestion done already (``repeated``) marked in yellow, where its approval policy stands
        (``approvals``) in cyan, and why it needs approval (``why``) dimmed."""
        title = Text(f" {ident} · {action} ")
        if destructive:
            title.append("· DESTRUCTIVE ", style="bold red")
        body: list[RenderableType] = [Text(preview, style="bold")]
        if repeated:
            body.append(Text(repeated, style="bold yellow"))
        if approvals:
            body.append(Text(approvals, style="cyan"))
        if why:
            body.append(Text(f"why this needs approval: {why}", style="dim"))
        if text:
            body.append(Text(f"in the agent's words: {text}", style="italic"))
        if refused:
            body.append(Text(refused, style="red"))
        body.append(JSON.from_data(payload, default=str))
        content = Group(*body)
        subtitle = Text(f" {note} ")
        # Wide enough for the title and the note, which a panel would otherwise cut short.
        width = max(self.console.measure(content).maximum + 4, title.cell_len + 6, subtitle.cell_len + 6)
        return Panel(
            content,
            title=title,
            title_align="left",
            subtitle=subtitle,
            subtitle_align="right",
            border_style="red" if destructive else "cyan",
            width=min(width, self.console.width),
        )

    def streaming(self, agent: Any) -> StreamingAgent:
        """``agent`` (one with ``stream(message)``, as :class:`~dial_runtime.agents.ChatAgent` has) with its
        replies streamed: the spinner counts the characters as they arrive."""
        return StreamingAgent(agent, self._arrived)

    def _arrived(self, characters: int) -> None:
        if self._status is not None:
            self._status.update(f"the agent is writing… {characters} characters")

    def _stop_spinner(self) -> None:
        """Stop the spinner and end a line of text that was arriving: something else is shown now."""
        self._end_live()
        if self._status is not None:
            self._status.stop()
            self._status = None

    # The person ----------------------------------------------------------------------------------------------

    async def decide(self, suggestion: Suggestion) -> Decision | Defer:
        """Ask the person to accept, dismiss, edit the payload of, or say something instead of ``suggestion``; or
        to leave it for later (``l``, and ``/quit`` or Ctrl-D, which leave the session too): :class:`Defer`."""
        self._stop_spinner()
        issue = suggestion.issue
        if issue is not None:
            self._show("red", self.transcript.refused, suggestion)
            where = ", ".join(
                f"{name} {value}" for name, value in (("field", issue.field), ("code", issue.code)) if value
            )
            reason = f"refused: {issue.hint or issue.code or 'no reason given'}" + (f" ({where})" if where else "")
            self.console.print(
                self._card(
                    suggestion.id,
                    suggestion.action,
                    suggestion.preview,
                    suggestion.text,
                    suggestion.payload,
                    suggestion.destructive,
                    "waits for your decision",
                    refused=reason,
                )
            )
        decision: Decision | None = None
        while decision is None:
            choice = (await self._prompt("menu", f"{suggestion.id} › {CHOICES}: ", leave=True)).strip().lower()
            if choice in ("a", "accept"):
                decision = Accept()
            elif choice in ("d", "dismiss"):
                decision = Dismiss()
            elif choice in ("e", "edit"):
                decision = await self._edit(suggestion.payload)
            elif choice in ("s", "say"):
                words = (await self._prompt("menu", "say: ")).strip()
                decision = Say(words) if words else None
            elif choice in ("l", "later", "/later", "/quit"):
                self.leaving = self.leaving or choice == "/quit"
                self.note(f"   {suggestion.id} waits for your decision", "yellow")
                return Defer()
            elif choice in ("/help", "?", "h"):
                self.console.print(Text(HELP, style="dim"))
            else:
                self.console.print(Text("Type a, d, e, s or l (/help explains).", style="yellow"))
        self._show("dim", self.transcript.decided, suggestion, decision)
        return decision

    async def answer(self, ask: Ask) -> str | Defer:
        """Put an ask to the person: a numbered choice, yes/no, a number, a path or text; empty leaves it open,
        ``/later`` (and ``/quit`` or Ctrl-D, which leave the session too) keeps it waiting: :class:`Defer`."""
        self._stop_spinner()
        try:
            given = await self._answer(ask)
        except anyio.get_cancelled_exc_class():
            if self._turn is None or not self._turn.cancel_called:
                self.note("   (no answer in time: the question stays open)", "yellow")
            raise
        except _Later:
            self.note(f"   the question {ask.id} waits for your answer", "yellow")
            return Defer()
        self._show("dim", self.transcript.answered, ask, given)
        return given

    async def _answer(self, ask: Ask) -> str:
        within = f" within {ask.timeout:g}s" if ask.timeout is not None else ""
        if ask.response_type == "choice" and any(not option.disabled for option in ask.options):
            default = next((number for number, option in enumerate(ask.options, 1) if option.default), None)
            hint = f"Enter for {default}" if default else "Enter leaves it open"
            while True:
                given = (await self._ask_prompt(f"choose 1-{len(ask.options)}{within} ({hint}): ")).strip()
                if not given:
                    return ask.options[default - 1].value if default else ""
                for number, option in enumerate(ask.options, 1):
                    if given in (str(number), option.value, option.label) and not option.disabled:
                        return option.value
                self.console.print(Text(f"Type a number from 1 to {len(ask.options)}.", style="yellow"))
        if ask.response_type == "confirm":
            while True:
                given = (await self._ask_prompt(f"yes or no{within}: ")).strip().lower()
                if given in ("", "yes", "no"):
                    return given
                if given in ("y", "n"):
                    return {"y": "yes", "n": "no"}[given]
                self.console.print(Text("Type yes or no.", style="yellow"))
        if ask.response_type == "number":
            while True:
                given = (await self._ask_prompt(f"a number{within}: ")).strip()
                try:
                    float(given or "0")
                except ValueError:
                    self.console.print(Text("That is not a number.", style="yellow"))
                    continue
                return given
        completer = PathCompleter(expanduser=True) if ask.response_type == "file" else None
        label = "a path" if completer else "your answer"
        return (await self._ask_prompt(f"{label}{within}: ", completer=completer)).strip()

    async def _ask_prompt(self, message: str, *, completer: Completer | None = None) -> str:
        """An answer typed at an ask's prompt; ``/later``, ``/quit`` and Ctrl-D raise :class:`_Later`."""
        given = await self._prompt("menu", message, completer=completer, leave=True)
        if given.strip() in ("/later", "/quit"):
            self.leaving = self.leaving or given.strip() == "/quit"
            raise _Later
        return given

    async def _edit(self, payload: Any) -> Edit | None:
        """The person's edit of ``payload`` as JSON, re-asked while it is not JSON; ``None`` when they give up."""
        text = json.dumps(payload, indent=2, ensure_ascii=False, default=str)
        while True:
            if self.editor:
                edited = await self._edit_in_editor(text)
                if edited is None:
                    return None
            else:
                self.console.print(Text(EDIT_HELP, style="dim"))
                edited = await self._prompt("edit", "", default=text, multiline=True)
            if not edited.strip():
                return None
            try:
                value = json.loads(edited)
            except ValueError as error:
                self.console.print(Text(f"That is not JSON ({error}); edit it again.", style="red"))
                text = edited
                continue
            if value == payload:
                self.console.print(Text("(no change)", style="dim"))
                return None
            return Edit(value)

    async def _edit_in_editor(self, text: str) -> str | None:
        """``text`` as edited in the person's editor (a temporary file), or ``None`` when the editor failed."""
        with tempfile.TemporaryDirectory(prefix="dial-runtime-") as folder:
            path = Path(folder) / "payload.json"
            path.write_text(text + "\n", encoding="utf-8")
            try:
                done = await anyio.run_process(
                    [*shlex.split(self.editor), str(path)], stdout=None, stderr=None, check=False
                )
            except OSError as error:
                self.console.print(Text(f"The editor {self.editor!r} could not start: {error}", style="red"))
                return None
            if done.returncode != 0:
                self.console.print(Text(f"The editor {self.editor!r} exited with {done.returncode}.", style="red"))
                return None
            return path.read_text(encoding="utf-8")

    async def _prompt(
        self,
        purpose: str,
        message: str,
        *,
        default: str = "",
        multiline: bool = False,
        completer: Completer | None = None,
        leave: bool = False,
    ) -> str:
        """One line (or block) from the person; Ctrl-C cancels the turn, and so does Ctrl-D (the end of the input)
        unless ``leave``: then it reads as ``/quit``."""
        self._stop_spinner()
        try:
            return await self._session(purpose).prompt_async(
                message, default=default, multiline=multiline, completer=completer, handle_sigint=False
            )
        except EOFError:
            if leave:
                return "/quit"
            await self._cancel_turn()
        except KeyboardInterrupt:
            await self._cancel_turn()

    def _session(self, purpose: str) -> PromptSession[str]:
        """The prompt session for words (with history and Ctrl-C bindings), menus, or edits."""
        session = self._sessions.get(purpose)
        if session is None:
            if purpose == "words":
                session = PromptSession(history=InMemoryHistory(), key_bindings=_words_bindings())
            else:
                session = PromptSession()
            self._sessions[purpose] = session
        return session

    # Driving -------------------------------------------------------------------------------------------------

    async def chat(self, conversation: Conversation, *, store: StorePort | None = None) -> None:
        """Hold the conversation: read the person's words and say them, until ``/quit``, Ctrl-C or Ctrl-D at an
        empty prompt (or ``/quit`` or Ctrl-D at a decision or a question, which then stays waiting), or the end of
        the conversation. ``/help`` and ``/pending`` are answered here and never sent to the agent.

        With the ``store`` the conversation is kept in, what others do to its cards while the person is at the
        prompt (another surface or process approving, deciding, a deadline reminding, escalating or expiring) is
        shown as it is stored, above the prompt."""
        self.console.print(Text(CHAT_HELP, style="dim"))
        async with self.interruptible():
            while not conversation.ended and not self.leaving:
                try:
                    words = await self._words(conversation, store)
                except (KeyboardInterrupt, EOFError):
                    break
                command = words.strip()
                if command == "/quit":
                    break
                if command == "/help":
                    self.console.print(Text(HELP, style="dim"))
                elif command == "/pending":
                    await self._take_up_now(conversation)
                elif command.startswith("/") and " " not in command:
                    self.note(f"   ({command} is not a command: /help lists them; nothing was sent)", "yellow")
                elif command:
                    self.person(words, echo=False)
                    await self.turn(conversation, words)
                    self._waiting(conversation)
        self._left_waiting(conversation)

    async def _words(self, conversation: Conversation, store: StorePort | None) -> str:
        """The person's next words, read at the prompt; meanwhile, with a ``store``, what others store on the
        conversation's cards is shown."""
        prompt = self._session("words").prompt_async("you: ", handle_sigint=False)
        if store is None or conversation.id is None:
            return await prompt
        words = ""
        left: KeyboardInterrupt | EOFError | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(self._hear_others, conversation, store)
            try:
                words = await prompt
            except (KeyboardInterrupt, EOFError) as leaving:  # raised here, not wrapped in the group's exceptions
                left = leaving
            finally:
                group.cancel_scope.cancel()
        if left is not None:
            raise left
        return words

    async def _hear_others(self, conversation: Conversation, store: StorePort) -> None:
        """Show what others append to the conversation while the person is at the prompt: each card they change,
        in the transcript's words (:func:`~dial_runtime.transcript.elsewhere_words`)."""
        assert conversation.id is not None
        known = len(conversation.log)  # this session has shown everything up to here
        watched = project(conversation.log)
        async with store.watch(conversation.id) as changes:
            async for _ in changes:
                appended = await store.read(conversation.id, after_seq=known)
                if not appended:
                    continue
                known = appended[-1].seq
                before = {item.id: item for item in watched.items if isinstance(item, Card)}
                changed = [
                    (before.get(item.id), item) for item in watched.feed_all(appended) if isinstance(item, Card)
                ]
                if changed:
                    with anyio.CancelScope(shield=True):  # the prompt ending meanwhile waits for the lines
                        await run_in_terminal(functools.partial(self._show_elsewhere, changed))

    def _show_elsewhere(self, changed: list[tuple[Card | None, Card]]) -> None:
        """Each card someone else changed: what changed, in words, then (a card that ended) its outcome line."""
        for was, card in changed:
            words = elsewhere_words(was, card)
            if words is not None:
                self.note(f"   ({words})", "yellow")
            if card.outcome and was is not None and not was.outcome:
                self._show(_style(card), self.transcript.render, card)

    def _waiting(self, conversation: Conversation) -> None:
        """Say what waits for the person, if anything, and what a new message does to it."""
        if conversation.pending and not self.leaving and not conversation.ended:
            ids = ", ".join(item.id for item in conversation.pending)
            self.note(f"   ({ids} waiting for you: /pending to decide now; a new message supersedes it)", "yellow")

    def _left_waiting(self, conversation: Conversation) -> None:
        if not conversation.pending or conversation.ended:
            return
        ids = ", ".join(item.id for item in conversation.pending)
        if conversation.id is None:
            self.note(f"   ({ids} left undecided; this conversation is not stored, so it ends here)", "yellow")
        else:
            self.note(f"   ({ids} waiting for you: chat --id {conversation.id} takes it up)", "yellow")

    def recap(self, conversation: Conversation, ident: str, where: str) -> None:
        """What a stored conversation holds when it is opened: new, or its size, its last outcomes, and what
        waits for the person (shown as cards by :meth:`take_up`)."""
        log = conversation.log
        if not log:
            self.note(f"conversation {ident} (new) in {where}", "bold")
            return
        seen = project(log)
        turns = sum(1 for item in seen.items if isinstance(item, Told))
        self.note(f"conversation {ident} in {where}: {len(log)} events, {turns} message(s) to the agent", "bold")
        self.transcript.shown.update(seen.shown)
        for item in _last_ended(seen.items, 3):
            self._show(_style(item), self.transcript.render, item)
        if conversation.ended:
            self.note(_ended(conversation))
        elif conversation.pending:
            self.note(f"   waiting for you: {', '.join(item.id for item in conversation.pending)}", "yellow")

    async def take_up(self, conversation: Conversation) -> bool:
        """Put to the person what a stored conversation was waiting for (suggestions and asks left undecided
        when it was last held), then carry on with the rest of its reply; ``False`` when the person left.

        A decision someone else took meanwhile (another session on the same conversation) is shown as theirs,
        and the session carries on."""
        async with self.interruptible():
            await self._take_up_now(conversation)
        return not self.leaving and not conversation.ended

    async def _take_up_now(self, conversation: Conversation) -> None:
        later: set[str] = set()
        while not self.leaving:
            waiting = [item for item in conversation.pending if item.id not in later]
            if not waiting:
                break
            item = waiting[0]
            chosen: Decision | Defer | str
            if isinstance(item, Suggestion):
                if item.issue is None:
                    shown = project(conversation.log).card(item.id)
                    self.console.print(
                        self._card(
                            item.id,
                            item.action,
                            item.preview,
                            item.text,
                            item.payload,
                            item.destructive,
                            "waited for your decision",
                            repeated=None if shown is None else done_before_words(shown),
                            approvals=None if shown is None else approvals_words(shown),
                            why="" if shown is None else shown.why_asked,
                        )
                    )
                chosen = await self.decide(item)
            else:
                self._show(
                    "bold",
                    self.transcript.render,
                    Question(id=item.id, text=item.text, response_type=item.response_type, options=item.options),
                )
                chosen = await self.answer(item)
            if isinstance(chosen, Defer):
                later.add(item.id)
                continue
            await self._settle(conversation, item, chosen)
        if not conversation.pending and not self.leaving:
            await self._settle(conversation, None, None)

    async def _settle(self, conversation: Conversation, item: Suggestion | Ask | None, chosen: Any) -> None:
        """Give the conversation the person's decision or answer on ``item`` (``None``: carry on with the reply a
        stop cut short), as a turn Ctrl-C cancels; say so when another session got there first."""
        with anyio.CancelScope() as scope:
            self._turn, self._turning = scope, conversation
            try:
                if isinstance(item, Suggestion):
                    result = await conversation.decide(item.id, chosen, by=self.by, via=self.via, roles=self.roles)
                elif isinstance(item, Ask):
                    result = await conversation.answer(item.id, chosen, by=self.by)
                else:
                    result = await conversation.resume()
            except ConversationBusy:
                self.note("   (another session is driving this conversation right now; try again later)", "red")
                return
            except AlreadyDecided as error:
                self.note(f"   ({error.subject_id} {self._elsewhere(conversation, error)})", "yellow")
                return
            except DialError as error:
                if item is None:
                    raise
                self.note(f"   ({item.id} {error})", "yellow")
                return
            finally:
                self._turn = self._turning = None
                self._stop_spinner()
        if scope.cancelled_caught:
            self.note("   (cancelled: what the agent was not told goes with your next message)", "yellow")
            return
        if item is not None or result.turns:
            self._show("dim", self.transcript.result, result)

    @staticmethod
    def _elsewhere(conversation: Conversation, error: AlreadyDecided) -> str:
        """How another session settled a suggestion (or an ask): who decided, how, and what came of it."""
        by = f" by {error.by}" if error.by else ""
        if error.how == "answered":
            return f"was answered elsewhere{by}"
        card = project(conversation.log).card(error.subject_id)
        status = None if card is None or card.reported is None else card.reported.status
        if status is not None and status == error.how:
            return f"was settled elsewhere: {status}"
        came = f" ({status})" if status is not None else ""
        return f"was decided elsewhere{by}: {error.how}{came}"

    async def turn(self, conversation: Conversation, words: str) -> TurnResult | None:
        """``say`` the words in a cancel scope Ctrl-C cancels; show how it went. ``None`` when it did not finish:
        cancelled (what the agent was not told stays owed), or it raised (a failed send: the agent's error)."""
        result: TurnResult | None = None
        with anyio.CancelScope() as scope:
            self._turn, self._turning = scope, conversation
            try:
                result = await conversation.say(words, by=self.by, roles=self.roles)
            except Exception as error:
                self.note(f"   (the turn stopped: {type(error).__name__}: {error})", "red")
            finally:
                self._turn = self._turning = None
                self._stop_spinner()
        if scope.cancelled_caught:
            self.note("   (turn cancelled: what the agent was not told goes with your next message)", "yellow")
        if result is not None:
            self._show("dim", self.transcript.result, result)
            if result.status == "ended":
                self.note(_ended(conversation))
        return result

    @asynccontextmanager
    async def interruptible(self) -> AsyncIterator[None]:
        """While open, SIGINT (Ctrl-C while no prompt is up) cancels the running turn, or the session between
        turns. At a prompt the terminal is raw and Ctrl-C arrives as a key instead."""
        async with anyio.create_task_group() as group:
            group.start_soon(self._listen, group.cancel_scope)
            yield
            group.cancel_scope.cancel()

    async def _listen(self, session: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                if self._turn is None:
                    session.cancel()
                else:
                    self._stop_turn()

    async def _cancel_turn(self) -> NoReturn:
        """Cancel the running turn from inside it; outside a turn, interrupt the caller."""
        if self._turn is not None:
            self._stop_turn()
            await anyio.lowlevel.checkpoint()
        raise KeyboardInterrupt

    def _stop_turn(self) -> None:
        """Cancel the running turn, and have the log say the person did."""
        assert self._turn is not None
        if self._turning is not None:
            self._turning.cancelling(CANCELLED_BY_PERSON)
        self._turn.cancel()


def _last_ended(items: tuple[Item, ...], count: int) -> list[Card | RefusedProposal]:
    """The last ``count`` suggestions to end, in the order they ended (cards and proposals never shown)."""
    ended = [
        item
        for item in items
        if (isinstance(item, Card) and item.reported is not None) or isinstance(item, RefusedProposal)
    ]
    ended.sort(key=lambda item: (item.ended_seq if isinstance(item, Card) else item.seq) or 0)
    return ended[-count:]


def _ended(conversation: Conversation) -> str:
    """The note that the conversation has ended, with the final state its domain's flow reached, if any."""
    result = conversation.result
    return "   (the conversation has ended)" if result is None else f"   (the conversation has ended: {result})"
