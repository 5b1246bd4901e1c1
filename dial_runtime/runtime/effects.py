"""What the conversation core asks its driver to do (effects), and what the driver hands back (inputs).

The core (:mod:`dial_runtime.runtime.core`) runs a call as a generator: it yields an effect, and the driver
performs it and sends back the input it came to (or throws the exception it raised into the generator). An
effect whose ``durable`` is true has an effect outside the process (a message sent, a wait for the person, an
action run): with a store, the driver writes the log through before performing it. An effect whose ``immediate``
is true is a question the driver answers at once from the domain or the person's plain function, without waiting.
An effect whose ``faces_person`` is true puts what the log holds before the person: a surface must have shown it
first, and a surface is shown only what the store holds, so a watched conversation writes the log first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import msgspec

from ..language.parser import DEFAULT_MAX_REPLY_SIZE
from .events import InformDeltaEvent
from .records import Ask, Issue, ProviderMessage, Suggestion


class Effect(msgspec.Struct, frozen=True, kw_only=True):
    """Something the core needs done; ``durable``: write the log through first; ``immediate``: answered without
    waiting; ``faces_person``: the person acts on what the log shows."""

    durable: ClassVar[bool] = False
    immediate: ClassVar[bool] = False
    faces_person: ClassVar[bool] = False


class GetContext(Effect, frozen=True, kw_only=True):
    """Ask the domain for the text that goes with every turn (``context()``); input: the text, or ``None``."""

    immediate: ClassVar[bool] = True


class Send(Effect, frozen=True, kw_only=True):
    """Send ``message`` to the agent and wait (within the conversation's timeout) for its reply.

    Input: :class:`Replied` (a whole reply), :class:`NoReply` (the deadline passed first) or, for an agent that
    streams, :class:`Streamed` once its first chunk is in (or the stream ended or failed before one); the rest
    of the stream comes as the inputs of :class:`AwaitStream`. An error of the send is thrown into the core.
    ``message_id`` goes to an agent whose ``send`` (or ``stream``) takes a ``message_id`` keyword; the driver
    stops reading a stream past ``stream_limit`` characters, which the core would not read.
    """

    durable: ClassVar[bool] = True
    message: str
    turn: int
    message_id: str | None = None
    stream_limit: int = DEFAULT_MAX_REPLY_SIZE


class AwaitStream(Effect, frozen=True, kw_only=True):
    """Wait until more of the streamed reply has arrived, or it has ended; input: :class:`Streamed`."""


class EndStream(Effect, frozen=True, kw_only=True):
    """The call is done with the streamed reply: stop reading it; input: ``None``."""


class Show(Effect, frozen=True, kw_only=True):
    """Show the person the text of a streamed reply as it arrives (``inform-delta`` notices, not on the log);
    input: ``None``."""

    immediate: ClassVar[bool] = True
    notices: tuple[InformDeltaEvent, ...]


class LookUp(Effect, frozen=True, kw_only=True):
    """The domain's spec of ``action`` (proposed as ``suggestion_id``); input: its
    :class:`~dial_runtime.ActionSpec`, or ``None`` (unknown)."""

    immediate: ClassVar[bool] = True

    action: str
    suggestion_id: str = ""


class Review(Effect, frozen=True, kw_only=True):
    """Check ``payload`` with the domain's ``validate`` and, when it passes and ``preview`` is set, make the short
    text the person sees (the domain's ``preview``): one question, since only a valid payload is previewed, except
    with ``refused_too`` (a refused edit, shown to the person again as edited).

    Input: :class:`Reviewed`.
    """

    immediate: ClassVar[bool] = True

    action: str
    payload: Any
    preview: bool = True
    refused_too: bool = False
    suggestion_id: str = ""


class ConsultRules(Effect, frozen=True, kw_only=True):
    """Ask the application's rules for whether to ask (the domain's ``approval_rules``) about suggestion
    ``suggestion_id``, valid and about to wait for a person: its ``action``, ``payload`` and ``preview``, whose
    words asked for it (``principal``) and the conversation's declared ``facts``.

    Input: the :class:`~dial_runtime.runtime.records.RuleVerdict` of the rule that had an opinion, or ``None``
    when there are no rules or none had one (the person is asked, and nothing is logged of the rules).
    """

    immediate: ClassVar[bool] = True

    suggestion_id: str
    action: str
    payload: Any
    preview: str
    principal: str | None
    facts: Mapping[str, Any]


class CheckPrecondition(Effect, frozen=True, kw_only=True):
    """Ask the domain whether the premise of suggestion ``suggestion_id`` (``action`` with ``payload``) still holds
    (its ``precondition``); input: ``None`` when it does, else the :class:`~dial_runtime.runtime.records.Issue`
    saying why not."""

    immediate: ClassVar[bool] = True

    suggestion_id: str
    action: str
    payload: Any


class Consult(Effect, frozen=True, kw_only=True):
    """Put a suggestion (``decide``) or an ask (``answer``) to the person.

    Input: :class:`Answer` when the person's function answered at once, or :class:`Thinking` when its answer has
    to be awaited: the core then yields :class:`AwaitPerson`.
    """

    immediate: ClassVar[bool] = True
    faces_person: ClassVar[bool] = True

    question: Suggestion | Ask


class AwaitPerson(Effect, frozen=True, kw_only=True):
    """Await the answer of the last :class:`Consult`, for at most ``deadline`` seconds (``None``: no bound).

    Input: :class:`Answer`, or :class:`Expired` when the deadline passed first.
    """

    durable: ClassVar[bool] = True
    deadline: float | None


class RunAction(Effect, frozen=True, kw_only=True):
    """Run the domain's action under the idempotency ``key`` (given to a domain whose ``run`` takes a ``key``
    keyword); input: :class:`Ran`, or :class:`RunFailed` when it raised."""

    durable: ClassVar[bool] = True
    action: str
    payload: Any
    key: str


class Reconcile(Effect, frozen=True, kw_only=True):
    """Ask the domain what became of the run under ``key`` that a dead process started (its ``reconcile``);
    input: :class:`Ran` (it ran, with that result), :class:`RunFailed` (it failed, with that error) or
    :class:`Unreconciled` (the domain cannot tell, or has no ``reconcile``)."""

    action: str
    payload: Any
    key: str
    suggestion_id: str


#: The effects that carry nothing, made once: the core yields the same instance every time.
GET_CONTEXT = GetContext()
AWAIT_STREAM = AwaitStream()
END_STREAM = EndStream()


class Replied(msgspec.Struct, frozen=True):
    """The agent's whole reply, and the model's message a codec read it from (see :class:`ProviderMessage`)."""

    text: str
    provider: ProviderMessage | None = None


class NoReply(msgspec.Struct, frozen=True):
    """The agent did not answer within ``timeout`` seconds; ``call``: the deadline that passed is the call's
    budget of time for the agent (``timeout`` its length), not the wait for this reply; ``cause``: why the
    agent's tries failed meanwhile, when it says (a refused connection, an HTTP status), else ``None``."""

    timeout: float
    call: bool = False
    cause: str | None = None


class DeadlinePassed(msgspec.Struct, frozen=True, kw_only=True):
    """A streamed reply's deadline passed while it was still arriving: ``deadline`` is ``"reply"`` (``seconds``
    since the message was sent), ``"idle"`` (``seconds`` without a chunk) or ``"call"`` (the call's budget of
    ``seconds`` waiting for the agent, over all its turns). The driver only measures the time;
    what the reply then comes to is the core's to decide."""

    deadline: Literal["reply", "idle", "call"]
    seconds: float


class Streamed(msgspec.Struct, frozen=True, kw_only=True):
    """What arrived of the agent's streamed reply since the last input: its ``chunks``, in order, and, once the
    stream is over, ``ended``, with why it ended early (``failure``: it broke off; ``passed``: a deadline
    passed) and the model's message a codec read the reply from (``provider``), when the agent gave one."""

    chunks: tuple[str, ...] = ()
    ended: bool = False
    failure: Exception | None = None
    passed: DeadlinePassed | None = None
    provider: ProviderMessage | None = None


class Answer(msgspec.Struct, frozen=True):
    """What the person's ``decide`` or ``answer`` returned, who gave it (``by``), through which surface (``via``)
    and holding which roles (``roles``, for an approval policy), when the human says."""

    value: Any
    by: str | None = None
    via: str | None = None
    roles: tuple[str, ...] = ()


class Thinking(msgspec.Struct, frozen=True):
    """The person's answer has to be awaited."""


class Expired(msgspec.Struct, frozen=True):
    """The deadline for the person's answer passed."""


class Reviewed(msgspec.Struct, frozen=True):
    """What the domain found of a payload: its ``issue`` (``None``: valid) and, for a valid one whose preview
    was asked for (or a refused one, with ``refused_too``), the ``preview`` (else ``""``)."""

    issue: Issue | None = None
    preview: str = ""


class Ran(msgspec.Struct, frozen=True):
    """The action returned ``result``."""

    result: Any


class RunFailed(msgspec.Struct, frozen=True):
    """The action raised ``error``."""

    error: Exception


class Unreconciled(msgspec.Struct, frozen=True):
    """The domain cannot tell what became of a run (``why``, for the operator's log): its effect stays unknown."""

    why: str


__all__ = [
    "AWAIT_STREAM",
    "END_STREAM",
    "GET_CONTEXT",
    "Answer",
    "AwaitPerson",
    "AwaitStream",
    "CheckPrecondition",
    "Consult",
    "ConsultRules",
    "DeadlinePassed",
    "Effect",
    "EndStream",
    "Expired",
    "GetContext",
    "LookUp",
    "NoReply",
    "Ran",
    "Reconcile",
    "Replied",
    "Review",
    "Reviewed",
    "RunAction",
    "RunFailed",
    "Send",
    "Show",
    "Streamed",
    "Thinking",
    "Unreconciled",
]
