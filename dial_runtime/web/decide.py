"""The decision page a decision link opens on the web surface (:func:`decision_page`), and the HTTP status each
refusal of a link is answered with (:data:`REFUSAL_STATUS`). The links themselves are made by
:mod:`dial_runtime.decisions.linking`, whose names this module also gives, as ``dial_runtime.web.linking`` did.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from ..decisions.linking import DECIDE_PATH, LINK_VIA, decide_url, decision_links

__all__ = ["DECIDE_PATH", "LINK_VIA", "REFUSAL_STATUS", "decide_url", "decision_links", "decision_page"]

#: The HTTP status of each refusal of a decision link: every :data:`dial_runtime.links.REFUSAL_REASONS`, and the
#: web surface's own (who may see or decide, the card's state now, a busy conversation, a body that is not one).
REFUSAL_STATUS: Mapping[str, int] = {
    "malformed": 400,
    "unknown-key": 403,
    "bad-signature": 403,
    "not-yet-valid": 403,
    "expired": 410,
    "wrong-conversation": 403,
    "wrong-suggestion": 403,
    "wrong-person": 403,
    "decision-not-allowed": 403,
    "payload-changed": 409,
    "replayed": 410,
    "already-decided": 410,
    "not-signed-in": 401,
    "forbidden": 403,
    "unknown-suggestion": 404,
    "busy": 409,
    "not-waiting": 409,
    "too-large": 413,
    "not-json": 415,
}

_PAGE = resources.files("dial_runtime.web") / "static" / "decide.html"
_MARKER = "__DIAL_DECISION__"
#: What JSON may hold that a script element may not: markup's characters and the line separators JavaScript reads
#: as line ends, each written as its escape.
_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def decision_page(data: Mapping[str, Any]) -> str:
    """The decision page, ``data`` (what ``<dial-decision>`` shows) in its JSON script element, escaped so that
    no text in it can end the element or be read as markup."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    for raw, escaped in _ESCAPES:
        text = text.replace(raw, escaped)
    return _PAGE.read_text(encoding="utf-8").replace(_MARKER, text)
