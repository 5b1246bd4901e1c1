"""An MCP server as a domain: each of its tools an action, behind the runtime's validation and the person's say.

::

    async with McpDomain.stdio(["mcp-server-git"]) as domain:
        conversation = Conversation(agent=agent, domain=domain, human=human)
        await conversation.say("what changed?")

:class:`McpDomain` connects with the official ``mcp`` SDK (``pip install 'dial-runtime[mcp]'``) over stdio (a
command it starts) or streamable HTTP (a URL), lists the server's tools and makes each an action of the same
name:

- the tool's ``inputSchema`` validates the payload (``jsonschema``), with the ``field``/``hint`` precision of typed
  actions; the system prompt shows the schema, the tool's description and an example;
- ``destructiveHint`` marks the action destructive (the MCP default for a tool that is not read-only), and
  ``idempotentHint`` repeatable (a call repeating one done already is not marked as done before);
  ``readOnlyHint`` lets a tool run without asking only when ``trust_read_only=True``: annotations are hints from a
  server that may not be trusted, so by default every tool waits for the person;
- the person sees the tool's title (else its name in words) and the arguments;
- the result is the outcome's ``result``: the structured content when the server gives one, else the text of its
  content; ``isError`` fails the action with the server's text;
- a tool that cannot be made an action (its ``inputSchema`` is not a valid JSON Schema, or nests deeper than
  :data:`~dial_runtime.domains.payloads.MAX_DEPTH`) is refused alone: it is left out of the actions and
  :attr:`McpDomain.refused` says why, while the server's other tools serve. Over stdio this holds at any depth:
  a line the SDK's JSON parser refuses for nesting too deep (past about 200 levels) is read again without that
  limit, where the SDK alone would drop the whole ``tools/list`` answer.

Every call has a deadline (``deadline`` seconds, 60 by default). A call that runs past it, a server that dies
or closes the connection mid-call, a protocol error: each fails the action with an
:class:`~dial_runtime.ActionError` whose ``code`` says which (``mcp-timeout``, ``mcp-disconnected``,
``mcp-error``, ``mcp-tool-error``), never an outcome lost. The session lives on a task of its own for as long as
the ``async with`` block: a server's failure ends the session, not the program around it. Runs under trio and
asyncio.

A server may ask the user something in the middle of a call (MCP elicitation: an ``elicitation/create`` request
over the handshake versions, an ``input_required`` round over 2026-07-28): with ``elicit`` (an async function of
an :class:`Elicitation`, returning an :class:`Elicited`) each question goes to it, and its answer (accept with the
form's content, decline, cancel) goes back to the server; while a question waits, the call's deadline does not
run. :class:`~dial_runtime.doors.elicitation.Elicitations` makes each question a card a person answers on any
surface, on the log. Without ``elicit`` the domain does not offer elicitation, and a server that asks anyway is
told it is not supported.

Each run's idempotency key (``run(action, payload, key=...)``) goes in the ``tools/call`` request's ``_meta``
under :data:`IDEMPOTENCY_KEY`; a server that deduplicates by it answers a repeated key with its first answer and
no second effect. Nothing in MCP says a server does, so recovery asks again (:meth:`McpDomain.reconcile`) only
for the tools named in ``keyed_tools``: for any other, it cannot tell what became of a run cut short.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import math
import re
import shlex
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any, Literal, Protocol, TextIO, TypeAlias, cast

import anyio
import anyio.abc
import attrs

from ..domains import SchemaPayload, default_preview, example_from_schema, words
from ..domains.payloads import MAX_DEPTH
from ..errors import McpConnectionError
from ..runtime.records import ActionError, ActionSpec, Issue

try:
    import mcp_types
    from mcp import Client, MCPError, StdioServerParameters
    from mcp.client import ClientRequestContext, Transport
    from mcp.client.stdio import stdio_client
    from mcp.shared.message import SessionMessage
    from pydantic import ValidationError
except ImportError as error:  # pragma: no cover - only without the extra
    raise ImportError("dial_runtime.mcp needs the mcp SDK: pip install 'dial-runtime[mcp]'") from error

__all__ = [
    "DEFAULT_DEADLINE",
    "IDEMPOTENCY_KEY",
    "Elicitation",
    "Elicited",
    "Elicitor",
    "McpConnectionError",
    "McpDomain",
    "McpTool",
    "mcp_domain",
    "sdk_log_to",
]

logger = logging.getLogger(__name__)

DEFAULT_DEADLINE = 60.0
"""Seconds a tool call may take before its action fails with code ``mcp-timeout``."""

IDEMPOTENCY_KEY = "dev.dial-runtime/idempotency-key"
"""The ``_meta`` name of a ``tools/call`` request's idempotency key (the value: the run's key, an opaque ASCII
string). MCP has no standard field for one; a ``_meta`` name of one's own takes a prefix of dot-separated labels
and a slash, which MCP asks to be in reverse-DNS order (``com.example/``) and whose second label may not be
``mcp`` or ``modelcontextprotocol`` (reserved): ``dev.dial-runtime/`` puts the package's name in that form, so
the name cannot clash with the protocol's or another client's, and ``idempotency-key`` names the value as HTTP's
``Idempotency-Key`` header does (the one this library's OpenAI-compatible agent sends)."""

# Pages of tools/list read at most, so a server whose cursor never ends cannot hang the connection.
_TOOL_PAGES = 100
_UNKNOWN_EFFECT = "The tool may or may not have had its effect: check before trying it again."


@attrs.frozen(kw_only=True)
class McpTool:
    """One tool of the server as an action: its contract, its schema's validator, what the prompt says of it."""

    name: str
    title: str
    spec: ActionSpec
    description: str
    schema: dict[str, Any]
    payload: SchemaPayload
    example: Any


@attrs.frozen(kw_only=True)
class Elicitation:
    """What an MCP server asks the user in the middle of a tool call.

    ``message`` is the server's question; in form mode ``schema`` is the form (a JSON Schema object of flat
    fields: text, numbers, yes/no, choices), in URL mode ``url`` the page the user is asked to open. ``tool`` is
    the tool whose call asks and ``key`` that run's idempotency key, when the domain can tell (a handshake-era
    server's question names no call: with several calls in flight, neither is known); ``number`` counts the
    questions of that call (1, 2, ...), so ``key`` and ``number`` name a question for good. ``server`` is the
    server's URL or command line."""

    server: str
    message: str
    schema: Mapping[str, Any] | None = None
    url: str | None = None
    tool: str | None = None
    key: str | None = None
    number: int = 1


@attrs.frozen
class Elicited:
    """The user's answer to an :class:`Elicitation`: ``accept`` (with the form's ``content`` in form mode),
    ``decline`` (an explicit no) or ``cancel`` (no choice made: dismissed, timed out, gone)."""

    action: Literal["accept", "decline", "cancel"]
    content: Mapping[str, Any] | None = None


Elicitor: TypeAlias = Callable[[Elicitation], Awaitable[Elicited]]
"""What answers a server's questions for :class:`McpDomain` (its ``elicit``)."""


@attrs.define(eq=False)
class _Call:
    """A tool call in flight: its tool and key, the questions it asked, and its deadline's scope, which stops
    while the call waits for the user (``remaining``: what was left of the deadline when it stopped)."""

    tool: str
    key: str | None
    scope: anyio.CancelScope
    asked: int = 0
    remaining: float | None = None


#: The call of the task that makes it: a 2026-07-28 call's questions are answered in that task's children.
_CURRENT_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("_CURRENT_CALL", default=None)


def _tool(tool: mcp_types.Tool, trust_read_only: bool) -> McpTool:
    """The tool as an action; ``ValueError`` when its ``inputSchema`` cannot validate payloads."""
    hints = tool.annotations
    read_only = bool(hints and hints.read_only_hint)
    # MCP's defaults: destructiveHint is true unless the tool says otherwise, and means nothing when read-only.
    destructive = not read_only and not (hints is not None and hints.destructive_hint is False)
    # idempotentHint: calling it again with the same arguments has no further effect, so a repeat is not marked
    # as done before (it is a hint: the person still decides on each call that changes something).
    repeatable = not read_only and bool(hints is not None and hints.idempotent_hint)
    schema = dict(tool.input_schema or {"type": "object"})
    payload = SchemaPayload(schema)
    example = example_from_schema(schema)
    if payload.issue(example) is not None:
        example = None
    return McpTool(
        name=tool.name,
        title=tool.title or (hints.title if hints and hints.title else None) or words(tool.name),
        spec=ActionSpec(
            mutates=not (read_only and trust_read_only), destructive=destructive, repeatable=repeatable
        ),
        description=(tool.description or "").strip(),
        schema=schema,
        payload=payload,
        example=example,
    )


def _content_text(content: Sequence[Any]) -> str:
    """A tool result's content as text: text blocks as they are, anything else named by its kind."""
    parts = []
    for block in content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        else:
            kind = getattr(block, "type", type(block).__name__)
            mime = getattr(block, "mime_type", None)
            parts.append(f"[{kind}{': ' + mime if mime else ''}]")
    return "\n".join(parts)


class _NoAnswer(Exception):
    """A call that got no answer from the tool (past its deadline, the session gone, a protocol error): ``run``
    fails with ``code`` and ``hint``; ``reconcile`` cannot tell what became of the run."""

    def __init__(self, message: str, *, code: str, hint: str) -> None:
        super().__init__(message)
        self.code = code
        self.hint = hint

    def action_error(self) -> ActionError:
        return ActionError(str(self), code=self.code, hint=self.hint)


class McpDomain:
    """The tools of one MCP server as a domain (see the module docstring); use it as ``async with``.

    Build it with :meth:`stdio` or :meth:`http`. ``trust_read_only`` lets tools the server marks read-only run
    without asking; ``deadline`` bounds each tool call in seconds (``None``: no bound, not advised);
    ``connect_timeout`` bounds starting the connection and listing the tools. ``keyed_tools`` names the tools
    whose server keeps the answer of each idempotency key (``"all"``: every tool), the only ones
    :meth:`reconcile` asks again: say so only of a server that does (``idempotentHint`` does not: it speaks of
    the same arguments, not of a key, and it is a hint). ``elicit`` answers the server's questions (see the
    module); ``protocol`` is ``"auto"`` (the 2026-07-28 protocol when the server speaks it, else the handshake) or
    ``"legacy"`` (the handshake versions only).
    """

    def __init__(
        self,
        server: StdioServerParameters | str,
        *,
        trust_read_only: bool = False,
        deadline: float | None = DEFAULT_DEADLINE,
        connect_timeout: float = 30.0,
        errlog: TextIO = sys.stderr,
        keyed_tools: Collection[str] | Literal["all"] = (),
        elicit: Elicitor | None = None,
        protocol: Literal["auto", "legacy"] = "auto",
    ) -> None:
        if isinstance(keyed_tools, str) and keyed_tools != "all":
            raise ValueError(f'McpDomain: keyed_tools is "all" or a collection of tool names, not {keyed_tools!r}')
        if protocol not in ("auto", "legacy"):
            raise ValueError(f'McpDomain: protocol is "auto" or "legacy", not {protocol!r}')
        self.elicit = elicit
        self.protocol: Literal["auto", "legacy"] = protocol
        self._calls: set[_Call] = set()
        self._questions = 0
        self.server = server
        self.trust_read_only = trust_read_only
        self.keyed_tools: frozenset[str] | Literal["all"] = (
            "all" if keyed_tools == "all" else frozenset(keyed_tools)
        )
        self.deadline = deadline
        self.connect_timeout = connect_timeout
        self.errlog = errlog
        self.description = ""
        self._tools: dict[str, McpTool] = {}
        self._refused: dict[str, str] = {}
        self._specs: dict[str, ActionSpec] = {}
        self.actions: Mapping[str, ActionSpec] = MappingProxyType(self._specs)
        """Tool name -> :class:`~dial_runtime.ActionSpec`, as the server listed them (read-only)."""
        self._client: Client | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self._closing = anyio.Event()
        self._ended: str | None = None
        self._unreadable: str | None = None

    @classmethod
    def stdio(
        cls,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        **options: Any,
    ) -> McpDomain:
        """The server that ``command`` (program and arguments) starts, spoken to over its stdin and stdout;
        ``env`` adds to the few variables the SDK passes on; ``options`` are the constructor's. The server's
        standard error goes to ``errlog`` (default: this process's)."""
        if not command:
            raise ValueError("McpDomain.stdio: the command is empty")
        program, *arguments = command
        parameters = StdioServerParameters(
            command=program, args=list(arguments), env=dict(env) if env else None, cwd=cwd
        )
        return cls(parameters, **options)

    @classmethod
    def http(cls, url: str, **options: Any) -> McpDomain:
        """The server at ``url``, spoken to over streamable HTTP; ``options`` are the constructor's."""
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"McpDomain.http: {url!r} is not an http(s) URL")
        return cls(url, **options)

    @property
    def where(self) -> str:
        """The server's URL, or its command line."""
        server = self.server
        return server if isinstance(server, str) else " ".join([server.command, *server.args])

    def __repr__(self) -> str:
        return f"McpDomain({self.where!r}, tools={list(self._tools)!r})"

    # ------------------------------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> McpDomain:
        if self._group is not None:
            raise RuntimeError("McpDomain: already connected; one async with at a time")
        group = anyio.create_task_group()
        await group.__aenter__()
        try:
            with anyio.fail_after(self.connect_timeout):
                await group.start(self._hold)
        except BaseException as error:
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)
            if isinstance(error, TimeoutError):
                unread = f"; what it wrote last could not be read: {self._unreadable}" if self._unreadable else ""
                raise McpConnectionError(
                    f"MCP server {self.where}: no answer within {self.connect_timeout} s while connecting{unread}"
                ) from None
            raise
        self._group = group
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        group, self._group = self._group, None
        self._closing.set()
        if group is not None:
            # The block's own exception is not the session's: it propagates as it is, not in a group.
            await group.__aexit__(None, None, None)

    async def _hold(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The session's own task: connect, list the tools, then keep the session open until the domain closes
        or the connection fails (which ends the session and is remembered, not raised into the caller)."""
        server = self.server
        transport: Any = (
            server if isinstance(server, str) else _rereading_deep_lines(stdio_client(server, errlog=self.errlog))
        )
        started = False
        try:
            async with Client(
                transport,
                message_handler=self._heard,
                elicitation_callback=None if self.elicit is None else self._elicited,
                mode=self.protocol,
            ) as client:
                await self._list_tools(client)
                self._client = client
                started = True
                task_status.started()
                await self._closing.wait()
        except Exception as error:
            if not started:
                raise McpConnectionError(f"MCP server {self.where}: cannot connect: {_reason(error)}") from error
            self._ended = _reason(error)
        finally:
            self._client = None
            if self._ended is None:
                self._ended = "the domain was closed"

    async def _heard(self, message: Any) -> None:
        """What the SDK hands on besides responses: a line from the server that could not be read comes as an
        exception, kept to say why a connection that waits for an answer got none (the SDK drops the line)."""
        if isinstance(message, Exception):
            self._unreadable = _first_line(message)

    async def _elicited(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        """A question of the server's, put to ``elicit`` while the deadline of the call that asks stops (of every
        call in flight, when the question names none); whatever goes wrong on the way is a ``cancel``."""
        assert self.elicit is not None, "the callback is given only with elicit"
        named = call = _CURRENT_CALL.get()
        if call is None and len(self._calls) == 1:  # a handshake-era question names no call: it is the one
            (call,) = self._calls
        if call is not None:
            call.asked += 1
            number = call.asked
        else:
            self._questions += 1
            number = self._questions
        form = params.requested_schema if isinstance(params, mcp_types.ElicitRequestFormParams) else None
        asked = Elicitation(
            server=self.where,
            message=params.message,
            schema=form,
            url=params.url if isinstance(params, mcp_types.ElicitRequestURLParams) else None,
            tool=call.tool if call is not None else None,
            key=call.key if call is not None else None,
            number=number,
        )
        stopped = [named] if named is not None else list(self._calls)
        try:
            with _deadlines_stopped(stopped):
                answer = await self.elicit(asked)
        except Exception as error:  # the session must not end for it: the server hears no answer was chosen
            logger.error("McpDomain: elicit raised for %r: answered cancel", params.message, exc_info=error)
            return mcp_types.ElicitResult(action="cancel")
        if answer.action != "accept":
            return mcp_types.ElicitResult(action=answer.action)
        if form is None:
            return mcp_types.ElicitResult(action="accept")
        content = dict(answer.content or {})
        issue = SchemaPayload(form).issue(content)
        if issue is not None:  # never send a server a form its own schema refuses
            logger.error("McpDomain: an accepted answer does not fit the form (%s): answered cancel", issue.hint)
            return mcp_types.ElicitResult(action="cancel")
        return mcp_types.ElicitResult(action="accept", content=content)

    async def _list_tools(self, client: Client) -> None:
        instructions = client.instructions
        info = client.server_info
        self.description = (instructions or (info.title or info.name if info else "") or "").strip()
        cursor: str | None = None
        for _ in range(_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            for listed in page.tools:
                try:
                    tool = _tool(listed, self.trust_read_only)
                except Exception as error:  # whatever one tool's listing holds, it refuses that tool alone
                    self._refused[listed.name] = " ".join(str(error).split()) or type(error).__name__
                    continue
                self._tools[tool.name] = tool
                self._specs[tool.name] = tool.spec
            cursor = page.next_cursor
            if cursor is None:
                break

    # ------------------------------------------------------------------------------------------ reading

    @property
    def tools(self) -> Mapping[str, McpTool]:
        """Each tool as listed, by name."""
        return MappingProxyType(self._tools)

    @property
    def refused(self) -> Mapping[str, str]:
        """Each tool the server listed that could not be made an action, by name: why, in one line."""
        return MappingProxyType(self._refused)

    def refusals(self) -> list[str]:
        """A line for each refused tool, naming it and saying why (for a command to show)."""
        return [f"tool {name!r} refused: {why}" for name, why in self._refused.items()]

    @property
    def vocabulary(self) -> dict[str, dict[str, Any]]:
        """What the system prompt says of each tool: ``description``, ``schema`` and ``example``."""
        return {
            name: {"description": tool.description, "schema": tool.schema, "example": tool.example}
            for name, tool in self._tools.items()
        }

    def describe(self, action: str) -> str:
        tool = self._tools.get(action)
        return "" if tool is None else tool.description

    # ------------------------------------------------------------------------------------------ the runtime's

    def validate(self, action: str, payload: Any) -> Issue | None:
        """``None`` when ``payload`` passes the tool's ``inputSchema``, else the issue (``invalid-payload`` with
        the path of the value at fault); an unknown tool is ``unknown-action``."""
        tool = self._tools.get(action)
        if tool is None:
            usable = f"Use one of the server's tools: {', '.join(self._tools)}."
            refused = self._refused.get(action)
            why = f"The server's tool {action!r} was refused: {refused}. " if refused else ""
            return Issue(code="unknown-action", hint=why + usable)
        return tool.payload.issue(payload)

    def preview(self, action: str, payload: Any) -> str:
        """The tool's title and the arguments: ``Commit: repo_path="/src", message="Fix it"``."""
        tool = self._tools.get(action)
        return default_preview(tool.title if tool is not None else words(action), payload)

    def context(self) -> str:
        return ""

    def is_keyed(self, action: str) -> bool:
        """Whether the server keeps the answer of each key for the tool ``action`` (see ``keyed_tools``)."""
        return self.keyed_tools == "all" or action in self.keyed_tools

    async def run(self, action: str, payload: Any, *, key: str | None = None) -> Any:
        """Call the tool within the deadline, with the run's idempotency ``key`` (if any) in the request's
        ``_meta`` under :data:`IDEMPOTENCY_KEY`; its structured content (else its text) is the result, and every
        way a call can go wrong raises :class:`~dial_runtime.ActionError` with a code."""
        try:
            result = await self._call(action, payload, key)
        except _NoAnswer as failure:
            raise failure.action_error() from None
        return _answer(result)

    async def reconcile(self, action: str, payload: Any, *, key: str) -> Any:
        """What became of the run under ``key`` that a dead process left without an outcome: for a tool in
        ``keyed_tools``, the same call sent again with the same key, whose answer the server gives as it gave
        the first (or, if the first never reached it, runs it now, once), and which maps as :meth:`run`'s does:
        the result, or :class:`~dial_runtime.ActionError` ``mcp-tool-error`` for the tool's failure.

        Raises :class:`LookupError` (it cannot tell) for any other tool, since calling it again could have its
        effect twice, and when the call gets no answer the server keeps for the key: past the deadline, the
        session gone (the call may or may not have reached the server), or a protocol error (which speaks of
        this request, not of the first); the run's effect stays unknown, as without ``reconcile``, and asking
        again later is safe."""
        if not self.is_keyed(action):
            raise LookupError(
                f"the MCP tool {action!r} is not in keyed_tools: its server is not known to keep the answer of"
                " each idempotency key, so calling it again could have its effect twice"
            )
        if self._client is not None and action not in self._tools:
            raise LookupError(f"the MCP server does not list the tool {action!r}")
        try:
            result = await self._call(action, payload, key)
        except _NoAnswer as failure:
            raise LookupError(f"the MCP tool {action!r} gave no answer for the key: {failure}") from None
        return _answer(result)

    async def _call(self, action: str, payload: Any, key: str | None) -> mcp_types.CallToolResult:
        """The tool's answer within the deadline (``isError`` included); :class:`_NoAnswer` when none came."""
        client = self._client
        if client is None:
            reason = self._ended or "the domain is not connected (use it as async with)"
            raise _NoAnswer(
                f"the MCP server's session has ended: {reason}", code="mcp-disconnected", hint=_UNKNOWN_EFFECT
            )
        arguments = dict(payload) if isinstance(payload, Mapping) else {}
        # RequestParamsMeta is an open TypedDict (extra_items=Any), which mypy does not read: hence the cast.
        meta = None if key is None else cast("mcp_types.RequestParamsMeta", {IDEMPOTENCY_KEY: key})
        deadline = math.inf if self.deadline is None else self.deadline
        try:
            with anyio.fail_after(deadline) as scope:
                call = _Call(tool=action, key=key, scope=scope)
                self._calls.add(call)
                token = _CURRENT_CALL.set(call)
                try:
                    return await client.call_tool(action, arguments, meta=meta)
                finally:
                    _CURRENT_CALL.reset(token)
                    self._calls.discard(call)
        except TimeoutError:
            raise _NoAnswer(
                f"the tool did not answer within {self.deadline} s", code="mcp-timeout", hint=_UNKNOWN_EFFECT
            ) from None
        except MCPError as error:
            gone = self._client is None or "closed" in str(error).lower()
            raise _NoAnswer(
                f"the MCP server {'went away' if gone else 'refused the call'}: {error}",
                code="mcp-disconnected" if gone else "mcp-error",
                hint=_UNKNOWN_EFFECT if gone else "Check the tool's name and arguments.",
            ) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as error:
            raise _NoAnswer(
                f"the MCP server went away: {_reason(error)}", code="mcp-disconnected", hint=_UNKNOWN_EFFECT
            ) from None


@contextlib.contextmanager
def _deadlines_stopped(calls: Sequence[_Call]) -> Iterator[None]:
    """The deadlines of ``calls`` stopped for the block's length (a person's time does not count against a
    call), then running again with what was left of each; a call stopped already (by another question at the
    same time) stays stopped until that question ends."""
    stopped = [call for call in calls if call.remaining is None]
    now = anyio.current_time()
    for call in stopped:
        call.remaining = call.scope.deadline - now
        call.scope.deadline = math.inf
    try:
        yield
    finally:
        now = anyio.current_time()
        for call in stopped:
            call.scope.deadline = now + (call.remaining if call.remaining is not None else math.inf)
            call.remaining = None


def _answer(result: mcp_types.CallToolResult) -> Any:
    """A tool's answer as a run's result: its structured content, else its text; ``isError`` fails the run."""
    if result.is_error:
        raise ActionError(_content_text(result.content) or "the tool reported an error", code="mcp-tool-error")
    if result.structured_content is not None:
        return result.structured_content
    return _content_text(result.content)


def mcp_domain(server: str, **options: Any) -> McpDomain:
    """The domain ``server`` names: an http(s) URL (streamable HTTP), else a command line split as a shell
    would (``"mcp-server-git --repository ."``); ``options`` are :class:`McpDomain`'s (``keyed_tools``, ...)."""
    if server.startswith(("http://", "https://")):
        return McpDomain.http(server, **options)
    try:
        command = shlex.split(server)
    except ValueError as error:
        raise ValueError(f"cannot read the command {server!r}: {error}") from None
    return McpDomain.stdio(command, **options)


@contextlib.contextmanager
def sdk_log_to(errlog: TextIO) -> Iterator[None]:
    """Write what the ``mcp`` SDK logs (a line from the server it cannot read, with its traceback) to ``errlog``
    rather than this process's standard error, for the block's length: for a command whose standard error is the
    person's, where only its own one-line errors belong."""
    sdk = logging.getLogger("mcp")
    handler = logging.StreamHandler(errlog)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
    propagates = sdk.propagate
    sdk.addHandler(handler)
    sdk.propagate = False
    try:
        yield
    finally:
        sdk.removeHandler(handler)
        sdk.propagate = propagates


def _first_line(error: Exception) -> str:
    """A pydantic error's first problem (``Invalid JSON: recursion limit exceeded at line 1 column 4303``), else
    the error's first line."""
    problems = getattr(error, "errors", None)
    if callable(problems):
        with contextlib.suppress(Exception):
            first = problems()[0]
            return f"{first['msg']}" + (f" [{first['type']}]" if first.get("type") else "")
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _reason(error: BaseException) -> str:
    """What went wrong, through exception groups to the first leaf, on one line (pydantic errors take several)."""
    while getattr(error, "exceptions", None):  # an exception group (BaseExceptionGroup needs Python 3.11)
        error = error.exceptions[0]  # type: ignore[attr-defined]
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class _Receiving(Protocol):
    """What a transport reads from the server, as :class:`_DeepLinesReread` needs of it."""

    async def receive(self) -> SessionMessage | Exception: ...

    async def aclose(self) -> None: ...


class _DeepLinesReread(anyio.abc.ObjectReceiveStream[SessionMessage | Exception]):
    """A transport's messages from the server, with each line its JSON parser refused only for nesting too deep
    read again: the SDK would drop that line, and with it a ``tools/list`` answer whole for one deep tool.

    The line is decoded at any depth (:func:`_json_at_any_depth`), each listed tool's ``inputSchema`` is cut to
    :data:`~dial_runtime.domains.payloads.MAX_DEPTH` levels (so one too deep still nests too deep, and the domain
    refuses it alone for that), and the SDK reads the line so cut as any other: one still too deep for it
    elsewhere (a tool's result, say) stays unread, as without this stream."""

    def __init__(self, stream: _Receiving) -> None:
        self._stream = stream

    async def receive(self) -> SessionMessage | Exception:
        received = await self._stream.receive()
        line = _line_too_deep(received)
        if line is None:
            return received
        try:
            message = _json_at_any_depth(line)
            _cut_input_schemas(message)
            return SessionMessage(
                mcp_types.jsonrpc_message_adapter.validate_json(json.dumps(message), by_name=False)
            )
        except ValueError as error:  # not JSON when read in full, or not JSON-RPC: still unreadable
            return error
        except RecursionError:  # too deep for json.dumps even once cut: as unreadable as the SDK found it
            return received

    async def aclose(self) -> None:
        await self._stream.aclose()


def _cut_input_schemas(message: Any) -> None:
    """In a ``tools/list`` answer, each tool's ``inputSchema`` cut to :data:`MAX_DEPTH` levels; any other message
    is left as it is."""
    result = message.get("result") if isinstance(message, dict) else None
    tools = result.get("tools") if isinstance(result, dict) else None
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, dict) and "inputSchema" in tool:
            tool["inputSchema"] = _cut_below(tool["inputSchema"], MAX_DEPTH)


def _cut_below(value: Any, levels: int) -> Any:
    """``value`` (JSON data) with its objects and arrays ``levels`` deep emptied: it nests more than ``levels``
    deep if and only if ``value`` does. Recursive, but never more than ``levels`` calls deep."""
    if isinstance(value, dict):
        return {key: _cut_below(item, levels - 1) for key, item in value.items()} if levels else {}
    if isinstance(value, list):
        return [_cut_below(item, levels - 1) for item in value] if levels else []
    return value


@contextlib.asynccontextmanager
async def _rereading_deep_lines(transport: Transport) -> AsyncIterator[tuple[_DeepLinesReread, object]]:
    """``transport``, its messages from the server read by :class:`_DeepLinesReread`."""
    async with transport as (read_stream, write_stream):
        yield _DeepLinesReread(read_stream), write_stream


def _line_too_deep(received: SessionMessage | Exception) -> str | None:
    """The line the SDK's parser refused when ``received`` says it nests too deep for it, else ``None``."""
    if not isinstance(received, ValidationError):
        return None
    (first, *_) = received.errors()
    line = first.get("input")
    too_deep = first["type"] == "json_invalid" and "recursion limit" in first["msg"]
    return line if too_deep and isinstance(line, str) else None


def _refuse_constant(name: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity`` are no JSON, to the SDK's parser as here."""
    raise ValueError(f"{name} is not JSON")


_SCALARS = json.JSONDecoder(parse_constant=_refuse_constant)
_NOT_SPACE = re.compile(r"[^ \t\n\r]")
_CLOSING = {"{": "}", "[": "]"}


def _json_at_any_depth(text: str) -> Any:
    """``text`` decoded as JSON, its open objects and arrays kept on a list rather than the call stack, so that no
    depth is too deep (the SDK's parser gives up past 200 levels, the standard library's past about 1000); the
    standard library reads each string, number and constant. ``ValueError`` (:class:`json.JSONDecodeError`) for
    text that is not JSON."""
    parents: list[tuple[dict[str, Any] | list[Any], str]] = []  # each open container, and its next value's key
    index = _after_space(text, 0)
    while True:
        opening = text[index : index + 1]
        if opening in _CLOSING:
            index = _after_space(text, index + 1)
            value: Any = {} if opening == "{" else []
            if text[index : index + 1] != _CLOSING[opening]:
                index, key = _key(text, index, value)
                parents.append((value, key))
                continue
            index += 1
        else:
            value, index = _SCALARS.raw_decode(text, index)
        while parents:  # the value goes into its container, which may end with it, and so up
            container, key = parents[-1]
            if isinstance(container, dict):
                container[key] = value
            else:
                container.append(value)
            index = _after_space(text, index)
            if text[index : index + 1] == ",":
                index, key = _key(text, _after_space(text, index + 1), container)
                parents[-1] = (container, key)
                break
            if text[index : index + 1] != ("}" if isinstance(container, dict) else "]"):
                raise json.JSONDecodeError("Expecting ',' delimiter", text, index)
            value, index = container, index + 1
            parents.pop()
        else:
            if _after_space(text, index) != len(text):
                raise json.JSONDecodeError("Extra data", text, index)
            return value


def _after_space(text: str, index: int) -> int:
    """Where the white space at ``index`` ends."""
    found = _NOT_SPACE.search(text, index)
    return len(text) if found is None else found.start()


def _key(text: str, index: int, container: dict[str, Any] | list[Any]) -> tuple[int, str]:
    """Where a value in ``container`` starts, read at ``index``, and its key: an object's member name and its
    colon read (``""`` for an array's item)."""
    if isinstance(container, list):
        return index, ""
    if text[index : index + 1] != '"':
        raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, index)
    key, index = _SCALARS.raw_decode(text, index)
    index = _after_space(text, index)
    if text[index : index + 1] != ":":
        raise json.JSONDecodeError("Expecting ':' delimiter", text, index)
    return _after_space(text, index + 1), key
