"""The values a conversation exchanges with its domain and its person.

Each record accepts the plain-dict form the seed contract uses too (``{"accept": True}``, ``{"ok": False, ...}``,
``{"mutates": True}``); the ``as_*`` functions turn either form into the record and raise ``TypeError`` naming
what came when it is neither.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Literal, NewType

import msgspec

from ..errors import ActionError as ActionError  # where it was defined before errors.py held it
from ..language.outcomes import Outcome
from ..language.records import Option

IdempotencyKey = NewType("IdempotencyKey", str)
"""The idempotency key of one run of an action (derived from the log: the conversation, the suggestion, the
attempt). A typed action's parameter annotated with it receives the key instead of a payload field."""


class Issue(msgspec.Struct, frozen=True, kw_only=True):
    """Why the domain refused a payload: a machine-readable ``code``, the ``field`` at fault, a ``hint``."""

    code: str | None = None
    field: str | None = None
    hint: str | None = None


class ApprovalPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """Who must approve an action before it runs: ``approvals`` distinct people, each holding one of ``roles``
    (empty: anyone who may decide); with ``separation``, the person whose words asked for it is never its only
    approver (for a destructive action); with ``dismissal_ends`` (the default) one dismissal ends it, else a
    dismissal is a vote against that leaves it waiting for approvals (or its deadline)."""

    approvals: int = 1
    roles: frozenset[str] = frozenset()
    separation: bool = False
    dismissal_ends: bool = True

    def __post_init__(self) -> None:
        if self.approvals < 1:
            raise ValueError(f"ApprovalPolicy: approvals is at least 1, not {self.approvals!r}")

    def met(self, approvers: tuple[str, ...], asker: str | None) -> bool:
        """Whether ``approvers`` (distinct people, in order) are enough, ``asker`` being whose words asked."""
        if len(approvers) < self.approvals:
            return False
        return not self.separation or any(approver != asker for approver in approvers)


class RuleVerdict(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What an application's rules for whether to ask said of a suggestion: ``approve`` (it runs without asking a
    person), ``deny`` (it ends dismissed, ``reason`` told to the agent) or ``ask``, and the rule that said it
    (``name@version``; ``None``: no rule had an opinion); ``error`` is why the deciding rule's answer could not be
    used (it raised, or answered no verdict), which makes it ``ask``."""

    kind: Literal["approve", "deny", "ask"]
    rule: str | None = None
    reason: str = ""
    error: str | None = None


class ActionSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What the domain says of one action: does it change anything, is it destructive, is it a hand-off, may it
    be done again with the same payload (``repeatable``: a proposal that repeats one done already is not marked
    as done before), and how many seconds the person has to decide on it (``deadline``; ``None``: the
    conversation's ``decide_timeout``); ``policy`` says who must approve it (``None``: one decision of anyone
    who may decide); ``remind_after`` seconds undecided, the deciders are reminded, and ``escalate_after``
    seconds undecided, it escalates to the deciders holding ``escalate_to`` (roles), who may then approve it
    too. With ``precondition``, the domain's ``precondition(action, payload)`` says whether the premise of a
    suggestion still holds: when it is shown, before it runs, and every ``recheck_every`` seconds while it waits
    (``None``: only then); one that no longer holds ends ``invalid`` with the domain's reason."""

    mutates: bool
    destructive: bool = False
    handoff: bool = False
    repeatable: bool = False
    deadline: float | None = None
    policy: ApprovalPolicy | None = None
    remind_after: float | None = None
    escalate_after: float | None = None
    escalate_to: frozenset[str] = frozenset()
    precondition: bool = False
    recheck_every: float | None = None

    def __post_init__(self) -> None:
        for name in ("deadline", "remind_after", "escalate_after", "recheck_every"):
            seconds = getattr(self, name)
            if seconds is not None and not 0 < seconds < float("inf"):
                raise ValueError(f"ActionSpec: a {name} is a positive number of seconds, not {seconds!r}")
        if self.escalate_after is not None and not self.escalate_to:
            raise ValueError("ActionSpec: escalate_after needs escalate_to, the roles it escalates to")
        if self.recheck_every is not None and not self.precondition:
            raise ValueError("ActionSpec: recheck_every needs a precondition to check again")


def payload_digest(action: str, payload: Any) -> str:
    """The digest of an action and its payload (``sha256:`` and the hex digest of their canonical JSON): what a
    surface records as shown to the person, and ``decide(..., shown=)`` compares with what would run."""
    text = json.dumps([action, payload], sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


class Suggestion(msgspec.Struct, frozen=True, kw_only=True):
    """A valid proposal as the person sees it; ``issue`` is set after a refused edit, and ``preview`` then reads
    the refused payload (``payload``), so what the person is shown is what they would decide on. ``mutates``
    and ``destructive`` are the action's marks; ``done_before`` names the suggestion of this conversation that
    already ran the same action with the same payload (as the card says), and ``deadline`` is when the time to
    decide ends (seconds since the epoch), when it does."""

    id: str
    action: str
    text: str = ""
    payload: Any = None
    preview: str = ""
    destructive: bool = False
    mutates: bool = False
    issue: Issue | None = None
    done_before: str | None = None
    deadline: float | None = None

    @property
    def digest(self) -> str:
        """:func:`payload_digest` of the action and payload: pass it as ``decide(..., shown=)`` to decide on
        exactly this payload."""
        return payload_digest(self.action, self.payload)


class Ask(msgspec.Struct, frozen=True, kw_only=True):
    """A question put to the person; ``timeout`` (seconds) bounds the wait for an answer."""

    id: str
    text: str = ""
    response_type: str = "text"
    options: tuple[Option, ...] = ()
    timeout: float | None = None


class ProviderMessage(msgspec.Struct, frozen=True, kw_only=True):
    """An agent's reply as its model's API gave it, before a codec read it as DIAL: ``api`` names the wire
    (``openai-chat``, ``anthropic-messages``, ...), ``message`` is the message as JSON data and ``codec`` the codec
    that read it (``tools``, ``json``). The log keeps it beside the DIAL text the runtime handled, so an audit can
    show what the model said in its own words, and a model taking the conversation up reads its own messages."""

    api: str
    message: Any
    codec: str = ""


class AgentReply(msgspec.Struct, frozen=True, kw_only=True):
    """What an agent's ``send`` may return instead of text: the reply as DIAL (``text``) and, when a codec made
    it from a model's native message, that message (``provider``)."""

    text: str
    provider: ProviderMessage | None = None


class Accept(msgspec.Struct, frozen=True):
    """Run the suggestion as shown (its payload is validated once more first)."""


class Dismiss(msgspec.Struct, frozen=True):
    """Do not run the suggestion."""


class Edit(msgspec.Struct, frozen=True):
    """Run the suggestion with this payload instead, once the domain has validated it."""

    payload: Any


class Say(msgspec.Struct, frozen=True):
    """Decide nothing and say this instead: this suggestion and the reply's remaining ones are superseded."""

    text: str


class Defer(msgspec.Struct, frozen=True):
    """Decide (or answer) later: the call returns ``awaiting`` and the conversation waits, persisted, for
    ``Conversation.decide`` or ``Conversation.answer`` (in any process, when the conversation has a store)."""


Decision = Accept | Dismiss | Edit | Say


class TurnResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one call came to: ``status`` (idle, no-reply, turn-limit, ended or awaiting), the turns it ran, its
    outcomes, and (``awaiting``) the suggestions and asks waiting for the person."""

    status: str
    turns: int
    outcomes: tuple[Outcome, ...] = ()
    pending: tuple[Suggestion | Ask, ...] = ()


def as_decision(value: object) -> Decision | Defer:
    """A decision record from a record or the seed's dict form; ``TypeError`` naming anything else."""
    if isinstance(value, (Accept, Dismiss, Edit, Say, Defer)):
        return value
    if isinstance(value, (dict, Mapping)) and len(value) == 1:
        if value.get("accept") is True:
            return Accept()
        if value.get("dismiss") is True:
            return Dismiss()
        if value.get("defer") is True:
            return Defer()
        if "edit" in value:
            return Edit(value["edit"])
        if isinstance(value.get("say"), str):
            return Say(value["say"])
    raise TypeError(f"Conversation: the human's decision must be accept, dismiss, edit or say — got {value!r}")


def as_issue(value: object) -> Issue | None:
    """``None`` when ``domain.validate`` accepted the payload, else the :class:`Issue` it reported."""
    if value is None or isinstance(value, Issue):
        return value
    if isinstance(value, (dict, Mapping)) and "ok" in value:
        if value["ok"]:
            return None
        return Issue(code=value.get("code"), field=value.get("field"), hint=value.get("hint"))
    raise TypeError(
        "Conversation: domain.validate must return {'ok': True}, None, {'ok': False, ...} or an Issue — "
        f"got {value!r}"
    )


def _seconds(value: object) -> float | None:
    """A deadline in seconds from an action's dict form: ``None``, or a positive finite number."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"Conversation: an action's deadline is a number of seconds — got {value!r}")
    return float(value)


def _policy(value: object) -> ApprovalPolicy | None:
    """An approval policy from an action's dict form: ``None``, the record, or its dict form."""
    if value is None or isinstance(value, ApprovalPolicy):
        return value
    if isinstance(value, Mapping):
        try:
            return msgspec.convert(dict(value), ApprovalPolicy)
        except msgspec.ValidationError as error:
            raise TypeError(f"Conversation: an action's policy is not an ApprovalPolicy: {error}") from None
    raise TypeError(f"Conversation: an action's policy must be an ApprovalPolicy — got {value!r}")


def as_action_spec(value: object) -> ActionSpec:
    """An :class:`ActionSpec` from a record or the dict form ``{"mutates": ..., "destructive": ...}``
    (``handoff`` and ``repeatable`` too)."""
    if isinstance(value, ActionSpec):
        return value
    if isinstance(value, (dict, Mapping)) and "mutates" in value:
        return ActionSpec(
            mutates=bool(value["mutates"]),
            destructive=bool(value.get("destructive", False)),
            handoff=bool(value.get("handoff", False)),
            repeatable=bool(value.get("repeatable", False)),
            deadline=_seconds(value.get("deadline")),
            policy=_policy(value.get("policy")),
            remind_after=_seconds(value.get("remind_after")),
            escalate_after=_seconds(value.get("escalate_after")),
            escalate_to=frozenset(value.get("escalate_to", ())),
            precondition=bool(value.get("precondition", False)),
            recheck_every=_seconds(value.get("recheck_every")),
        )
    raise TypeError(f"Conversation: an action must be an ActionSpec or {{'mutates': ...}} — got {value!r}")
