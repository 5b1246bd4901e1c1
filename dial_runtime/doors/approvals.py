"""The domain of an agent framework's approvals: the framework runs its tools, and asks first.

pydantic-ai, the OpenAI Agents SDK and LangGraph each stop a run at a tool call that needs approval and leave
the decision to the application; the tool runs in the framework when the run resumes. Through a bridge
(:mod:`dial_runtime.doors.pydantic_ai`, :mod:`dial_runtime.doors.langgraph`), each such call is a card of this
domain: it waits for a person, and running it hands the approval back (the arguments to run with), nothing more.

Each tool the framework asks about is an action that waits for a person. Give the application's own ``domain``
to check the calls (its ``validate`` for the action of the tool's name, or of that name in the domain's spelling:
``append-line`` for the function ``append_line``), preview them, and mark them (its
``ActionSpec``: destructive, an approval policy, a deadline); a tool it does not have is checked only for being
a JSON object of arguments, as the framework validated them already.

The processes that decide build it too (``dial-runtime decide --domain dial_runtime.doors.approvals:Approvals
--agent outside:``, or a factory of yours that gives your domain).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..domains import default_preview, words
from ..domains.toolkit import action_name
from ..runtime.records import ActionSpec, Issue, as_action_spec, as_issue

__all__ = ["APPROVAL", "Approvals", "spelled"]

APPROVAL = ActionSpec(mutates=True)
"""The marks of a tool the application's domain does not describe: it waits for a person."""


def spelled(known: Mapping[str, Any], tool: str) -> str | None:
    """The domain's action for a framework's tool: of the same name, or of the name in the domain's spelling
    (a typed domain's ``append-line`` for the function ``append_line``)."""
    for name in (tool, action_name(tool)):
        if name in known:
            return name
    return None


class _EveryTool(Mapping[str, ActionSpec]):
    """Every tool name is an action: the application's spec for the ones its domain has, else :data:`APPROVAL`."""

    def __init__(self, known: Mapping[str, ActionSpec]) -> None:
        self._known = known

    def __getitem__(self, name: str) -> ActionSpec:
        if not isinstance(name, str) or not name:
            raise KeyError(name)
        named = spelled(self._known, name)
        spec = APPROVAL if named is None else self._known[named]
        # A framework asks about a call only when it needs approval: it waits, whatever the domain says of it.
        return (
            spec if spec.mutates and not spec.handoff else ActionSpec(mutates=True, destructive=spec.destructive)
        )

    def __iter__(self) -> Iterator[str]:
        return iter(self._known)

    def __len__(self) -> int:
        return len(self._known)


class Approvals:
    """The approvals of a framework's tool calls, as a domain (see the module); ``domain`` is the application's,
    which checks, previews and marks the tools it has."""

    def __init__(self, domain: Any = None, *, description: str = "") -> None:
        self.domain = domain
        known = getattr(domain, "actions", None) or {}
        self.actions: Mapping[str, ActionSpec] = _EveryTool(
            {name: as_action_spec(spec) for name, spec in known.items()}
        )
        self.description = description or str(getattr(domain, "description", "") or "")

    def _own(self, tool: str) -> str | None:
        return spelled(getattr(self.domain, "actions", None) or {}, tool)

    def validate(self, action: str, payload: Any) -> Issue | None:
        """The application's domain's check of a tool it has; else only that the arguments are a JSON object."""
        validate = getattr(self.domain, "validate", None)
        named = self._own(action)
        if callable(validate) and named is not None:
            return as_issue(validate(named, payload))
        if not isinstance(payload, Mapping):
            return Issue(code="invalid-payload", hint="A tool's arguments are a JSON object.")
        return None

    def preview(self, action: str, payload: Any) -> str:
        preview = getattr(self.domain, "preview", None)
        named = self._own(action)
        if callable(preview) and named is not None:
            return str(preview(named, payload))
        return default_preview(words(action), payload)

    def context(self) -> str:
        return ""

    def run(self, action: str, payload: Any) -> dict[str, Any]:
        """Hand the approval back: the arguments the framework is to run the tool with. Nothing else happens
        here; the tool runs in the framework when its run resumes."""
        return {"approved": True, "arguments": payload}
