"""Decision links: the links that let a person decide one waiting card from a mail or a chat message
(:func:`decision_links`).

A link is ``<public_url>/decide?token=<token>``, its token signed by a
:class:`~dial_runtime.decisions.links.Keyring` (see :mod:`dial_runtime.decisions.links`). The web surface
(``create_app(links=keyring)``) serves ``GET /decide`` (the page: the card, the decisions the token allows;
opening it decides nothing) and ``POST /decide`` (the decision); see :mod:`dial_runtime.web.decide`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol
from urllib.parse import urlsplit

from .links import DEFAULT_VALID_FOR, Keyring, link_url

__all__ = ["DECIDE_PATH", "LINK_VIA", "decide_url", "decision_links"]

#: Where the decision page and its decisions are served, below the server's base URL.
DECIDE_PATH = "/decide"

#: The surface a decision taken through a link is logged as having come through (``DecidedEvent.via``).
LINK_VIA = "link"


class Decidable(Protocol):
    """A waiting card or suggestion: its id and the digest of the payload that waits."""

    @property
    def id(self) -> str: ...

    @property
    def digest(self) -> str: ...


def decide_url(public_url: str) -> str:
    """The decision page's URL on a server reached at ``public_url`` (``https://dial.example/`` or
    ``https://example.org/dial``: the base the panel is served at)."""
    parts = urlsplit(public_url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"a public URL is an http(s) URL with no query or fragment — got {public_url!r}")
    return public_url.rstrip("/") + DECIDE_PATH


def decision_links(
    keyring: Keyring,
    public_url: str,
    conversation_id: str,
    card: Decidable,
    *,
    decider: str | None = None,
    roles: Iterable[str] = (),
    decisions: Iterable[str] = ("accept", "dismiss"),
    open_decisions: Iterable[str] | None = None,
    valid_for: float = DEFAULT_VALID_FOR,
    now: float | None = None,
) -> dict[str, str]:
    """The links that let ``decider`` (or anyone holding one of ``roles``) decide the waiting ``card`` (a
    :class:`~dial_runtime.views.person.Card` or a :class:`~dial_runtime.Suggestion`) of
    ``conversation_id``, on the payload waiting now, for ``valid_for`` seconds: one per decision in ``decisions``
    (``accept``, ``dismiss``, ``edit``), whose page offers that decision only, and ``open``, whose page offers
    them all (or ``open_decisions``: say, the editor too). Each link has a token of its own, used once; the
    first decision made through any of them ends the card, and the others are then refused ``already-decided``.
    Opening a link decides nothing: the person decides on the page it opens, which ``public_url`` (where people
    reach the server) serves."""
    if isinstance(decisions, str) or isinstance(open_decisions, str):
        raise ValueError("decision_links: give the decisions as a collection of strings, not one string")
    chosen = list(dict.fromkeys(decisions))
    opened = chosen if open_decisions is None else list(dict.fromkeys(open_decisions))
    if not chosen or not opened:
        raise ValueError("decision_links: give at least one decision")
    page = decide_url(public_url)
    claims: dict[str, Any] = {
        "conversation_id": conversation_id,
        "suggestion_id": card.id,
        "digest": card.digest,
        "decider": decider,
        "roles": tuple(roles),
        "valid_for": valid_for,
        "now": now,
    }
    links = {decision: link_url(page, keyring.issue(decisions=(decision,), **claims)) for decision in chosen}
    links["open"] = link_url(page, keyring.issue(decisions=opened, **claims))
    return links
