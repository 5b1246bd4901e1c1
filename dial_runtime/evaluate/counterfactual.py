"""Counterfactual replay: a candidate agent answers at every point where a recorded conversation's agent replied,
and its replies are scored against what the person really did.

A *point* is a message the recording sent to its agent that got a reply. At each point a fresh candidate is
given the same history (the messages the recorded run sent and the recorded agent's replies before it, outcomes
and the person's words included, since they travel in the messages) and the point's message; its reply is
handled by the conversation core (:func:`dial_runtime.replay.handle_reply`) against the recorded domain answers,
or the domain's pure ``validate`` and ``preview`` when one is given, with nothing run and no one asked. What the
person saw of each side is read from the log's projection (:mod:`dial_runtime.views.person`).

Scores, each ``1`` for best unless its name says otherwise, and ``None`` at a point where it does not apply:

``parses``
    the reply could be used as DIAL (the runtime refused none of it as a whole);
``valid``
    the share of its proposals that became cards, each judged as the recording judged the same action and payload
    (so a reply identical to the recorded one scores as the recording does); proposals the recording never
    judged are left out: with no domain to ask they count neither way;
``valid_now``
    the share of its proposals the recording never judged that the domain, asked now (``domain=``), let become
    cards: reported apart, since the domain answers as it is now, not as it was then;
``same_action``
    the share of the recorded proposals' actions that the reply proposed too (with none recorded: whether it
    proposed none either);
``accepted_payload``
    for the recorded cards the person accepted as proposed: the share the reply proposed with the same payload;
``edit_distance``
    for the recorded cards the person edited and then accepted: how far the reply's payload for that action is
    from the person's edit (the share of JSON leaves that differ; ``1`` when it did not propose the action), lower
    is better;
``repeats_dismissed``
    for the recorded cards the person dismissed: the share the reply proposed again, same action and payload,
    lower is better;
``asks``
    where the recorded agent asked the person a question: whether the reply asked one too.

Per conversation, ``turns_to_end`` counts the points until a side had proposed every card the person ran in the
end (an accepted card's payload; an edited card's, either as the agent proposed it or as the person edited it, so
no side is credited with the person's edit); ``None`` for a side that never proposed all of them.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias

import msgspec

from ..driver.replay import handle_reply
from ..llm.chat import ChatMessage, history_from_log
from ..llm.uri import agent_from_uri
from ..ports import AgentPort
from ..runtime.events import LogEntry
from ..runtime.records import AgentReply
from ..views.calls import answered_turns
from ..views.person import Card, Notice, Projection, Question, RefusedProposal, project

__all__ = [
    "LOWER_IS_BETTER",
    "SCORES",
    "Candidate",
    "ConversationScore",
    "Point",
    "PointReply",
    "Proposal",
    "Verdict",
    "evaluate_conversation",
    "payload_distance",
    "score",
]

#: The scores of a point, in the order reports show them.
SCORES = (
    "parses",
    "valid",
    "valid_now",
    "same_action",
    "accepted_payload",
    "edit_distance",
    "repeats_dismissed",
    "asks",
)

#: The scores where less is better.
LOWER_IS_BETTER = frozenset({"edit_distance", "repeats_dismissed"})

#: A candidate agent: an agent URI (``script:FILE`` included), or a factory called with the history of each point
#: (the chat messages before it) that returns the agent to answer there.
Candidate: TypeAlias = "str | Callable[[Sequence[ChatMessage]], AgentPort | Awaitable[AgentPort]]"


class Proposal(msgspec.Struct, frozen=True, kw_only=True):
    """A proposal of a reply: its action and payload, and whether it became a card (``None``: unverified, the
    recording never judged that payload and no domain was asked; ``judged_now``: the recording never judged it,
    the domain did now)."""

    action: str
    payload: Any = None
    valid: bool | None = True
    code: str | None = None
    judged_now: bool = False


class PointReply(msgspec.Struct, frozen=True, kw_only=True):
    """What one side's reply at a point came to, as the person would have seen it: the reply's text (``None``
    when the agent gave none, ``error`` saying why), whether the runtime could use it, its proposals, whether it
    asked a question, and the point's lines of the log's trail (``excerpt``)."""

    text: str | None
    error: str | None = None
    parses: bool = True
    proposals: tuple[Proposal, ...] = ()
    asked: bool = False
    excerpt: tuple[str, ...] = ()


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """What the person did with a recorded card: ``accepted`` as proposed, ``edited`` then accepted (``payload``
    is the person's edit, the one that ran), or ``dismissed``."""

    action: str
    proposed: Any
    label: str
    payload: Any = None


class Point(msgspec.Struct, frozen=True, kw_only=True):
    """One point of a conversation: its number (from 1), the seq of the message, the turn, the recorded reply, the
    person's verdicts on the recorded cards, each candidate's reply, and the scores by side (``"recorded"`` and
    each candidate's name)."""

    conversation: str
    number: int
    seq: int
    turn: int
    recorded: PointReply
    verdicts: tuple[Verdict, ...] = ()
    candidates: dict[str, PointReply] = {}
    scores: dict[str, dict[str, float | None]] = {}


class ConversationScore(msgspec.Struct, frozen=True, kw_only=True):
    """A conversation's points, and the points each side took to propose every payload the person ran in the end
    (``turns_to_end``, by side; ``None`` where a side never did)."""

    conversation: str
    points: tuple[Point, ...]
    ends: tuple[Proposal, ...] = ()
    turns_to_end: dict[str, int | None] = {}


def _read(
    items: Sequence[Any],
    trail: Sequence[Any],
    *,
    text: str | None,
    unjudged: Sequence[tuple[str, Any]] = (),
    judged_now: Sequence[tuple[str, Any]] = (),
) -> PointReply:
    """One side's reply from the projection items and trail lines of its turn; ``unjudged`` names the proposals
    that became cards only because nothing could judge them, ``judged_now`` those the domain judged anew."""
    proposals: list[Proposal] = []
    for item in items:
        if isinstance(item, Card):
            valid = None if (item.action, item.proposed) in unjudged else True
            now = (item.action, item.proposed) in judged_now
            proposals.append(Proposal(action=item.action, payload=item.proposed, valid=valid, judged_now=now))
        elif isinstance(item, RefusedProposal) and item.refused:
            now = (item.action, item.payload) in judged_now
            proposals.append(
                Proposal(action=item.action, payload=item.payload, valid=False, code=item.code, judged_now=now)
            )
    refused = any(isinstance(item, Notice) and item.what in ("reply-refused", "reply-repeated") for item in items)
    return PointReply(
        text=text,
        parses=text is not None and not refused,
        proposals=tuple(proposals),
        asked=any(isinstance(item, Question) for item in items),
        excerpt=tuple(f"{moment.seq:>4}  {moment.label:<10} {moment.text}" for moment in trail),
    )


def _turn(projection: Projection, first_seq: int, end_seq: int) -> tuple[list[Any], list[Any]]:
    """The items first shown, and the trail lines, of the entries ``first_seq`` to ``end_seq`` (inclusive)."""
    items = [item for item in projection.items if item.seq is not None and first_seq <= item.seq <= end_seq]
    trail = [
        moment for moment in projection.trail if moment.seq is not None and first_seq <= moment.seq <= end_seq
    ]
    return items, trail


def _verdicts(items: Sequence[Any]) -> tuple[Verdict, ...]:
    """The person's verdicts on the cards among ``items`` (as the projection has them now: at the log's end)."""
    found = []
    for item in items:
        if not isinstance(item, Card) or item.decision is None:
            continue
        if item.decision == "accept":
            found.append(
                Verdict(action=item.action, proposed=item.proposed, label="accepted", payload=item.proposed)
            )
        elif item.decision == "edit":
            found.append(Verdict(action=item.action, proposed=item.proposed, label="edited", payload=item.payload))
        elif item.decision == "dismiss":
            found.append(Verdict(action=item.action, proposed=item.proposed, label="dismissed"))
    return tuple(found)


def _leaves(value: Any, path: str = "") -> dict[str, str]:
    """A JSON value's leaves by path, each as its exact JSON text."""
    if isinstance(value, dict) and value:
        return {k: v for key, item in value.items() for k, v in _leaves(item, f"{path}/{key}").items()}
    if isinstance(value, list) and value:
        return {k: v for index, item in enumerate(value) for k, v in _leaves(item, f"{path}/{index}").items()}
    return {path: json.dumps(value, sort_keys=True)}


def payload_distance(one: Any, other: Any) -> float:
    """How far two payloads are apart: the share of JSON leaves (by path) that one has and the other lacks or
    holds another value at; ``0.0`` for equal payloads, ``1.0`` when no leaf agrees."""
    mine, theirs = _leaves(one), _leaves(other)
    paths = mine.keys() | theirs.keys()
    return sum(1 for path in paths if mine.get(path) != theirs.get(path)) / len(paths)


def _share(hits: Sequence[bool]) -> float | None:
    return sum(hits) / len(hits) if hits else None


def score(reply: PointReply, recorded: PointReply, verdicts: Sequence[Verdict]) -> dict[str, float | None]:
    """The scores of ``reply`` at a point where the recording replied ``recorded`` and the person gave
    ``verdicts`` (see the module's description)."""
    proposed = [(p.action, p.payload) for p in reply.proposals]
    actions = [p.action for p in reply.proposals]
    checked = [p.valid for p in reply.proposals if p.valid is not None and not p.judged_now]
    checked_now = [p.valid for p in reply.proposals if p.valid is not None and p.judged_now]
    recorded_actions = [p.action for p in recorded.proposals]
    if recorded_actions:
        remaining = list(actions)
        matched = []
        for action in recorded_actions:
            matched.append(action in remaining)
            if action in remaining:
                remaining.remove(action)
        same_action = _share(matched)
    else:
        same_action = 1.0 if not actions else 0.0
    accepted = [(v.action, v.payload) in proposed for v in verdicts if v.label == "accepted"]
    edits = [
        min((payload_distance(p.payload, v.payload) for p in reply.proposals if p.action == v.action), default=1.0)
        for v in verdicts
        if v.label == "edited"
    ]
    dismissed = [(v.action, v.proposed) in proposed for v in verdicts if v.label == "dismissed"]
    return {
        "parses": 1.0 if reply.parses else 0.0,
        "valid": _share([bool(valid) for valid in checked]),
        "valid_now": _share([bool(valid) for valid in checked_now]),
        "same_action": same_action,
        "accepted_payload": _share(accepted),
        "edit_distance": sum(edits) / len(edits) if edits else None,
        "repeats_dismissed": _share(dismissed),
        "asks": (1.0 if reply.asked else 0.0) if recorded.asked else None,
    }


async def _candidate_agent(candidate: Candidate, earlier: Sequence[LogEntry], domain: Any) -> AgentPort:
    """The candidate's agent, taking the conversation up at the end of ``earlier``: a URI's, with its codec's
    history of the log, or what a factory makes of the history as the DIAL codec reads it."""
    if isinstance(candidate, str):
        return agent_from_uri(candidate, domain=domain, log=earlier)
    made = candidate(history_from_log(earlier))
    return await made if inspect.isawaitable(made) else made


async def _ask(agent: AgentPort, message: str) -> tuple[str | None, str | None]:
    """The agent's reply to ``message``, or why there is none (one line)."""
    try:
        reply = agent.send(message)
        text = await reply if inspect.isawaitable(reply) else reply
    except Exception as error:  # a candidate that fails is scored as one that gave no reply
        return None, " ".join(f"{type(error).__name__}: {error}".split())
    finally:
        close = getattr(agent, "aclose", None)
        if close is not None:
            await close()
    if isinstance(text, AgentReply):
        return text.text, None
    return (text or ""), None


async def evaluate_conversation(
    conversation: str,
    entries: Sequence[LogEntry],
    candidates: Mapping[str, Candidate],
    *,
    domain: Any = None,
    max_turns: int = 8,
) -> ConversationScore:
    """Score each candidate at every point of one recorded conversation (see the module's description).

    ``domain``, when given, answers for its actions' specs, ``validate`` and ``preview`` (never ``run``), and
    gives a URI candidate its system prompt; its checks should not depend on state the conversation changed.
    """
    entries = list(entries)
    recorded_view = project(entries)
    found = []
    for number, at in enumerate(answered_turns(entries), start=1):
        first, last = entries[at.index].seq, entries[at.end - 1].seq
        items, trail = _turn(recorded_view, first, last)
        recorded = _read(items, trail, text=at.reply)
        verdicts = _verdicts(items)
        replies: dict[str, PointReply] = {}
        for name, candidate in candidates.items():
            agent = await _candidate_agent(candidate, entries[: at.index], domain)
            text, error = await _ask(agent, at.message)
            if text is None:
                replies[name] = PointReply(text=None, error=error, parses=False)
                continue
            handled = handle_reply(entries, at.index, text, domain=domain, max_turns=max_turns)
            view = project(handled.entries)
            own_items, own_trail = _turn(view, first, handled.entries[-1].seq)
            replies[name] = _read(
                own_items, own_trail, text=text, unjudged=handled.unjudged, judged_now=handled.judged_now
            )
        scores = {"recorded": score(recorded, recorded, verdicts)}
        scores.update({name: score(reply, recorded, verdicts) for name, reply in replies.items()})
        found.append(
            Point(
                conversation=conversation,
                number=number,
                seq=first,
                turn=at.turn,
                recorded=recorded,
                verdicts=verdicts,
                candidates=replies,
                scores=scores,
            )
        )
    ran = [v for point in found for v in point.verdicts if v.label in ("accepted", "edited")]
    ends = tuple(Proposal(action=v.action, payload=v.payload) for v in ran)
    sides = ["recorded", *candidates]
    turns_to_end = {side: _turns_to_end(found, ran, side) for side in sides}
    return ConversationScore(conversation=conversation, points=tuple(found), ends=ends, turns_to_end=turns_to_end)


def _key(action: str, payload: Any) -> tuple[str, str]:
    return action, json.dumps(payload, sort_keys=True)


def _turns_to_end(points: Sequence[Point], ran: Sequence[Verdict], side: str) -> int | None:
    """The number of points until ``side`` had proposed every card the person ran (``None``: it never did; ``0``
    when there are none): an accepted card's payload, or an edited card's as proposed or as edited. Every side is
    counted alike, by its own proposals only."""
    wanted = [{_key(v.action, v.proposed), _key(v.action, v.payload)} for v in ran]
    for point in points:
        if not wanted:
            break
        reply = point.recorded if side == "recorded" else point.candidates.get(side)
        reached = {_key(p.action, p.payload) for p in (reply.proposals if reply is not None else ())}
        wanted = [either for either in wanted if either.isdisjoint(reached)]
        if not wanted:
            return point.number
    return None if wanted else 0
