"""Words that claim something was done: what the runtime checks an agent's prose against the log for.

A model often says it did what it only proposed ("Sure! I've added 'buy milk' to your notes."), or says so before
the person has decided. The runtime knows what ran, so such words are shown as the agent's claim, not as a
confirmation, when nothing ran in the call (see :meth:`~dial_runtime.runtime.core.ConversationCore`). This module
only reads the words: :func:`claims_done` says whether a text claims a completed effect.

The reading is of English and deliberately plain: the perfect (``I've added``, ``has been cancelled``), a first
person past tense of a verb of effect (``I booked``), and a reply that opens with ``Done``. It errs on the side of
flagging: words that report a proposal in the past tense ("I have created a proposal for you") are flagged as
well, which only marks them unconfirmed; a claim denied just before it ("nothing has changed", "it has not been
sent") is not one; a claim in other words or another language is not caught.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["claims_done"]

#: Verbs of effect in the past participle or past tense, as models use them of what they did.
_DONE_VERBS: Final = (
    r"(?:added|created|deleted|removed|sent|booked|cancel+ed|updated|saved|scheduled|changed|moved|paid|"
    r"made|set|put|written|wrote|submitted|placed|ordered|transferred|refunded|archived|closed|opened|"
    r"posted|published|renamed|replaced|reset|registered|reserved|marked|applied|completed|executed|run|ran)"
)
_CLAIMS: Final = re.compile(
    r"\b(?:"
    rf"(?:i|we)(?:['’]ve| have)\s+(?:just\s+|now\s+|already\s+|successfully\s+)*{_DONE_VERBS}"
    rf"|(?:has|have|had|was|were)\s+(?:just\s+|now\s+|already\s+)?(?:been\s+)?(?:successfully\s+)?{_DONE_VERBS}\b"
    rf"|(?:i|we)\s+(?:just\s+|already\s+|successfully\s+)*{_DONE_VERBS}"
    r")\b"
    r"|^\W*done\b",
    re.IGNORECASE,
)


#: Words just before a claim that deny it ("nothing has changed", "it has not been sent").
_DENIED: Final = re.compile(r"(?:\bnot|n['’]t|\bnever|\bnothing|\bno)\W+(?:\w+\W+)?$", re.IGNORECASE)


def claims_done(text: str) -> bool:
    """Whether ``text`` claims that something was done (see the module docstring)."""
    for claim in _CLAIMS.finditer(text):
        start = claim.start()
        if not _DENIED.search(text[max(0, start - 24) : start]) and not _DENIED.search(claim.group()):
            return True
    return False
