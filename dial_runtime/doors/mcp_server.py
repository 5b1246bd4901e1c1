"""dial-runtime as an MCP server that gates writes: an agent in any MCP client calls its tools, and each call
that would change something waits for a person.

::

    dial-runtime mcp --upstream "mcp-server-git --repository ." --store sqlite:approvals.db
    dial-runtime mcp --domain dial_runtime.demo:NotesDomain --store sqlite:approvals.db --http 127.0.0.1:8765

The tools are a domain's actions, or an upstream MCP server's tools proxied (:class:`~dial_runtime.adapters.mcp.
McpDomain`, which sends each run's idempotency key in the upstream call's ``_meta``). Every call goes through the
:class:`~dial_runtime.doors.gate.Gate`:

- an unknown tool, or arguments the domain refuses: a tool error at once, whose structured content carries
  ``code``, ``field`` and ``hint``;
- a read-only tool (the domain's mark; an upstream tool's ``readOnlyHint``, which ``ask`` overrides since
  annotations are only hints): it runs at once, and its result is the call's;
- any other: a card waits for a person on every surface of the store (the panel, links and notifications,
  ``dial-runtime decide``, deadlines and approval policies), and the call's result is the outcome: done, the
  result (and, when the person edited the call, what ran); dismissed, expired or failed, a tool error in words.

How a call waits depends on what the client speaks. On the 2026-07-28 protocol, the server holds the call for
``round_seconds`` and then answers ``input_required`` with a sealed ``requestState`` naming the card; the client
asks again with it (the SDKs do so by themselves) and the wait goes on, so no request stays open for long. On
earlier versions, the call stays open, with a progress notification every ``progress_seconds`` to a client that
asked for progress, until the decision or ``wait`` seconds; then it ends in a tool error that says the
proposal still waits and that calling the tool again with the same arguments waits on the same card (never a
false success, never a second card). A client that lost a call (the server restarted, the connection dropped)
finds its outcome the same way: see :mod:`~dial_runtime.doors.gate`. A call that carries an idempotency key in
its ``_meta`` (:data:`IDEMPOTENCY_KEY`, as ``McpDomain`` sends one) is named by it: the same key always gets that
call's card, and a key reused for another call is refused.

Needs the ``mcp`` extra: ``pip install 'dial-runtime[mcp]'``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

import msgspec

from ..adapters.mcp import IDEMPOTENCY_KEY
from ..domains import words
from ..errors import DialError
from ..runtime.records import as_action_spec
from ..views.person import Card
from .gate import Ended, Gate, Refused, Waits, not_run

#: A call's idempotency key: printable ASCII, as HTTP's ``Idempotency-Key`` and the runtime's own run keys are.
_KEY = re.compile(r"[\x21-\x7e]{1,200}")

try:
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
    from mcp.server.stdio import stdio_server
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS
    from starlette.applications import Starlette
except ImportError as error:  # pragma: no cover - only without the extra
    raise ImportError(
        "dial_runtime.doors.mcp_server needs the mcp SDK: pip install 'dial-runtime[mcp]'"
    ) from error

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_ROUND",
    "DEFAULT_WAIT",
    "OUTCOME_KEY",
    "PROGRESS_EVERY",
    "GatedServer",
    "asking",
    "gated_domain",
]

DEFAULT_WAIT = 600.0
"""Seconds a call of an earlier protocol version stays open waiting for a person, by default."""

DEFAULT_ROUND = 20.0
"""Seconds each round of a 2026-07-28 call waits before answering ``input_required``, by default."""

PROGRESS_EVERY = 10.0
"""Seconds between two progress notifications of a call that waits (for a client that asked for progress)."""

OUTCOME_KEY = "dev.dial-runtime/proposal"
"""The ``_meta`` name, on each result of a gated call, of where its proposal is: ``conversation``, ``suggestion``
and ``status`` (``waiting``, or the outcome's)."""


class GatedServer:
    """The MCP server over ``gate``: its tools are the gate's domain's actions (see the module). ``name`` is the
    server's name to clients; ``wait`` and ``round_seconds`` are how long a call waits (see the module),
    ``progress_seconds`` the time between two progress notifications; ``state_keys`` seal the 2026-07-28
    ``requestState`` (the first seals, every one opens; by default a key of this process, so a call in flight when
    the server restarts is asked again from scratch, which finds its card by its arguments all the same)."""

    def __init__(
        self,
        gate: Gate,
        *,
        name: str = "dial-runtime",
        wait: float = DEFAULT_WAIT,
        round_seconds: float = DEFAULT_ROUND,
        progress_seconds: float = PROGRESS_EVERY,
        state_keys: Sequence[bytes] = (),
    ) -> None:
        timed = (("wait", wait), ("round_seconds", round_seconds), ("progress_seconds", progress_seconds))
        for option, seconds in timed:
            if not (seconds > 0 and math.isfinite(seconds)):
                raise ValueError(f"GatedServer: {option} is a positive number of seconds, not {seconds!r}")
        self.gate = gate
        self.name = name
        self.wait = wait
        self.round_seconds = round_seconds
        self.progress_seconds = progress_seconds
        self.tools = _tools(gate.domain)
        security = RequestStateSecurity(keys=list(state_keys)) if state_keys else RequestStateSecurity.ephemeral()
        self.server: Server[Any] = Server(
            name,
            version=_version(),
            instructions=_instructions(gate.domain),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.server.middleware.append(RequestStateBoundary(security, default_audience=name))

    # ------------------------------------------------------------------------------------------ serving

    async def run_stdio(self) -> None:
        """Serve one client over this process's standard input and output until it closes them."""
        async with stdio_server() as (read_stream, write_stream):
            await self.server.run(read_stream, write_stream, self.server.create_initialization_options())

    def http_app(self, *, path: str = "/mcp", host: str = "127.0.0.1") -> Starlette:
        """The streamable HTTP application (at ``path``); it answers to the loopback names when ``host`` is
        one, as the SDK's DNS-rebinding protection does."""
        return self.server.streamable_http_app(streamable_http_path=path, host=host)

    # ------------------------------------------------------------------------------------------ handlers

    async def _list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(self.tools.values()))

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        arguments: dict[str, Any] = dict(params.arguments or {})
        by = _caller(ctx, params)
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        key = dict(params.meta or {}).get(IDEMPOTENCY_KEY)
        if key is not None and not (isinstance(key, str) and _KEY.fullmatch(key)):
            hint = f"The _meta {IDEMPOTENCY_KEY} is 1 to 200 printable ASCII characters, or left out."
            return _refused(Refused(code="invalid-key", field=f"_meta.{IDEMPOTENCY_KEY}", hint=hint))
        named = self._named(params, arguments, key)
        answer: Refused | Waits | Ended
        try:
            if named is not None:  # a 2026-07-28 round asking again: the card its state names
                answer = await self.gate.settle_card(*named, by=by, within=self.round_seconds)
            else:
                answer = await self.gate.propose(params.name, arguments, by=by, key=key)
            if isinstance(answer, Refused):
                return _refused(answer)
            if isinstance(answer, Waits):
                answer = await self._wait(ctx, answer, by, modern)
        except DialError as error:  # a conversation held past the gate's patience, a log that cannot be read
            return _error(f"{error} Call the tool again.", {"status": "error", "code": type(error).__name__})
        except Exception as error:  # the domain's check raised, the store failed: the server's fault
            logger.exception("dial-runtime mcp: the call of %r failed", params.name)
            message = f"The server could not take the call ({type(error).__name__}); call the tool again."
            return _error(message, {"status": "error", "code": "server-error"})
        if isinstance(answer, Ended):
            return _ended(answer)
        if modern:
            state = json.dumps({"conversation": answer.conversation_id, "suggestion": answer.card.id})
            return types.InputRequiredResult(request_state=state)
        return _still_waiting(answer, self.wait)

    def _named(
        self, params: types.CallToolRequestParams, arguments: dict[str, Any], key: str | None
    ) -> tuple[str, str] | None:
        """The conversation and card a round's ``requestState`` names (the SDK opened and checked its seal),
        when it is this call's; ``None`` for a first round, or a state of another call (asked from scratch)."""
        try:
            state = json.loads(params.request_state or "null")
        except ValueError:
            return None
        if not isinstance(state, dict):
            return None
        conversation, suggestion = state.get("conversation"), state.get("suggestion")
        if conversation != self.gate.conversation_id(params.name, arguments, key) or not isinstance(
            suggestion, str
        ):
            return None
        return conversation, suggestion

    async def _wait(self, ctx: Any, waits: Waits, by: str, modern: bool) -> Waits | Ended:
        """Wait for the card: one round (2026-07-28), or until ``wait`` with progress notifications."""
        if modern:
            return await self.gate.settle(waits, by=by, within=self.round_seconds)
        started = time.monotonic()
        answer: Waits | Ended = waits
        while isinstance(answer, Waits):
            waited = time.monotonic() - started
            if waited >= self.wait:
                break
            await ctx.session.report_progress(
                waited, None, f"waiting for a person to decide on {answer.card.preview or answer.card.action}"
            )
            answer = await self.gate.settle(answer, by=by, within=min(self.progress_seconds, self.wait - waited))
        return answer


# ---------------------------------------------------------------------------------------------- the tools


def _tools(domain: Any) -> dict[str, types.Tool]:
    """The domain's actions as MCP tools: name, title, description, input schema and the marks as annotations."""
    vocabulary: Mapping[str, Mapping[str, Any]] = getattr(domain, "vocabulary", {}) or {}
    listed: Mapping[str, Any] = getattr(domain, "tools", {}) or {}  # an upstream server's, with their titles
    tools = {}
    for name, declared in getattr(domain, "actions", {}).items():
        spec = as_action_spec(declared)
        entry = vocabulary.get(name, {})
        schema = entry.get("schema") or {"type": "object"}
        if schema.get("type") != "object":  # MCP's tools take an object; a payload of another kind cannot be one
            continue
        upstream = listed.get(name)
        title = getattr(upstream, "title", None) or words(name)
        read_only = not spec.mutates
        tools[name] = types.Tool(
            name=name,
            title=title,
            description=entry.get("description") or None,
            input_schema=dict(schema),
            annotations=types.ToolAnnotations(
                read_only_hint=read_only,
                destructive_hint=None if read_only else bool(spec.destructive),
                idempotent_hint=None if read_only else bool(spec.repeatable),
            ),
        )
    return tools


def _instructions(domain: Any) -> str:
    about = str(getattr(domain, "description", "") or "").strip()
    gate = (
        "Each tool that changes something waits for a person's approval before it runs; a tool error says what "
        "they decided. A call that returns saying it still waits is not lost: call the tool again with the same "
        "arguments to wait on the same proposal."
    )
    return f"{about}\n\n{gate}" if about else gate


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dial-runtime")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree without metadata
        return "0"


def _caller(ctx: Any, params: types.CallToolRequestParams) -> str:
    """Who calls, for the log: ``mcp:`` and the client's name (from ``initialize``, or the request's ``_meta``
    on 2026-07-28), else ``mcp:client``."""
    client = getattr(ctx.session.client_params, "client_info", None)
    name = getattr(client, "name", None)
    if not name and params.meta:
        info = dict(params.meta).get(types.CLIENT_INFO_META_KEY)
        name = info.get("name") if isinstance(info, Mapping) else None
    return f"mcp:{name}" if isinstance(name, str) and name.strip() else "mcp:client"


# ---------------------------------------------------------------------------------------------- the results


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def _error(message: str, detail: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[_text(message)], structured_content=detail, is_error=True)


def _refused(refused: Refused) -> types.CallToolResult:
    at = f" (at {refused.field})" if refused.field else ""
    detail = {"status": "refused", "code": refused.code, "field": refused.field, "hint": refused.hint}
    return _error(f"Refused, {refused.code}{at}: {refused.hint}", detail)


def _where(conversation_id: str, card: Card, status: str) -> dict[str, Any]:
    return {OUTCOME_KEY: {"conversation": conversation_id, "suggestion": card.id, "status": status}}


def _still_waiting(waits: Waits, waited: float) -> types.CallToolResult:
    card = waits.card
    text = (
        f"Still waiting for a person to decide on this call ({card.preview or card.action}); it has not run. "
        f"Nobody decided within {waited:g} s. Call the tool again with the same arguments to wait on the same "
        "proposal: it will not be proposed or run twice."
    )
    result = _error(text, {"status": "waiting", "conversation": waits.conversation_id, "suggestion": card.id})
    result.meta = _where(waits.conversation_id, card, "waiting")
    return result


def _ended(ended: Ended) -> types.CallToolResult:
    """The outcome as the call's result: done, its result; anything else, a tool error in words."""
    card = ended.card
    outcome = card.reported
    assert outcome is not None, "an ended card has its outcome"
    meta = _where(ended.conversation_id, card, outcome.status)
    if outcome.status == "done":
        result = outcome.result
        content = [_text(result if isinstance(result, str) else json.dumps(result, ensure_ascii=False))]
        if outcome.edited:
            content.append(
                _text(
                    "The person changed the call before it ran: it ran with "
                    f"{json.dumps(card.payload, ensure_ascii=False)} instead of "
                    f"{json.dumps(card.proposed, ensure_ascii=False)}."
                )
            )
            meta[OUTCOME_KEY]["ran_with"] = card.payload
        done = types.CallToolResult(
            content=list(content), structured_content=result if isinstance(result, dict) else None
        )
        done.meta = meta
        return done
    if outcome.status == "handed-off":
        handed = types.CallToolResult(content=[_text(f"Handed to the person to finish: {card.preview}.")])
        handed.meta = meta
        return handed
    text, said = not_run(card)
    detail = {"status": outcome.status, **{key: value for key, value in outcome.fact().items() if key != "action"}}
    if said:
        detail["said"] = said
    error = _error(text, detail)
    error.meta = meta
    return error


@contextlib.asynccontextmanager
async def gated_domain(
    domain: str | None,
    upstream: str | None,
    *,
    ask: Collection[str] | str = (),
    errlog: Any = None,
    elicit: Any = None,
) -> AsyncIterator[Any]:
    """The domain ``dial-runtime mcp`` serves: ``domain`` (``module:factory``) or the ``upstream`` MCP server
    (a command line or an http(s) URL, connected for the block's length, its ``readOnlyHint`` trusted, its
    questions to the user answered by ``elicit``), with the tools ``ask`` names (``"all"``: every one) waiting
    for a person whatever their marks."""
    if upstream is not None:
        from ..adapters.mcp import mcp_domain

        async with mcp_domain(upstream, trust_read_only=True, errlog=errlog, elicit=elicit) as connected:
            yield asking(connected, ask)
        return
    from ..domains.loading import load_domain

    assert domain is not None
    yield asking(load_domain(domain), ask)


def asking(domain: Any, ask: Collection[str] | str) -> Any:
    """``domain`` with the actions ``ask`` names (``"all"``: every one) marked as changing something, so that
    each call waits for a person; ``ValueError`` naming an action the domain does not have."""
    if not ask:
        return domain
    actions: Mapping[str, Any] = getattr(domain, "actions", {})
    named = set(actions) if ask == "all" else set(ask)
    unknown = sorted(named - set(actions))
    if unknown:
        raise ValueError(
            f"--ask names no tool of the domain: {', '.join(unknown)} (its tools: {', '.join(actions)})"
        )
    return _Asking(domain, named)


class _Asking:
    """A domain whose named actions wait for a person (``mutates``) whatever the domain says of them."""

    def __init__(self, domain: Any, named: set[str]) -> None:
        self._domain = domain
        specs = {name: as_action_spec(declared) for name, declared in domain.actions.items()}
        for name in named:
            specs[name] = msgspec.structs.replace(specs[name], mutates=True)
        self.actions = specs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._domain, name)
