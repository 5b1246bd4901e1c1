"""Words that claim something was done: what the runtime checks an agent's prose against the log for.

A model often says it did what it only proposed ("Sure! I've added 'buy milk' to your notes."), or says so before
the person has decided. The runtime knows what ran, so such words are shown as the agent's claim, not as a
confirmation, when nothing ran in the call (see :meth:`~dial_runtime.runtime.core.ConversationCore`). This module
only reads the words: :func:`claims_done` says whether a text claims a completed effect.

The reading is of English and deliberately plain, word by word: a verb of effect in the past (``added``,
``cancelled``, ``sent``) after ``I`` or ``we`` (``I booked``), after the perfect (``I've added``, ``has been
cancelled``) or a past passive (``was moved``), with adverbs such as ``just`` or ``successfully`` between; and a
reply that opens with ``Done``. A claim denied just before it ("nothing has changed", "it has not been sent",
"no note was added") is not one. It errs on the side of flagging: words that report a proposal in the past
tense ("I have created a proposal for you") are flagged as well, which only marks them unconfirmed; a claim in
other words or another language is not caught.
"""

from __future__ import annotations

import string
from typing import Final

__all__ = ["claims_done"]

#: Verbs of effect in the past participle or past tense, as models use them of what they did.
_DONE_VERBS: Final = frozenset({
    "added", "created", "deleted", "removed", "sent", "booked", "cancelled", "canceled", "updated", "saved",
    "scheduled", "changed", "moved", "paid", "made", "set", "put", "written", "wrote", "submitted", "placed",
    "ordered", "transferred", "refunded", "archived", "closed", "opened", "posted", "published", "renamed",
    "replaced", "reset", "registered", "reserved", "marked", "applied", "completed", "executed", "run", "ran",
    "done", "issued",
})  # fmt: skip
#: Who says they did it, and the auxiliaries of the perfect and the past passive.
_SUBJECTS: Final = frozenset({"i", "we", "i've", "we've"})
_AUXILIARIES: Final = frozenset({"has", "have", "had", "was", "were"})
#: Words that may stand between the subject or auxiliary and the verb.
_BETWEEN: Final = frozenset({"just", "now", "already", "successfully", "also", "been"})
#: Words that deny what follows.
_DENIALS: Final = frozenset({"not", "never", "nothing", "no", "none", "nobody"})
#: Punctuation becomes a space, so that words are what ``split`` gives; a typographic apostrophe a plain one.
_SPACED: Final = str.maketrans({**{mark: " " for mark in string.punctuation if mark != "'"}, "\u2019": "'"})
#: The verbs as ``split`` leaves them in most text (bare, or before the punctuation that ends a sentence or a
#: clause), and ``done`` opening a reply: a text with none of them holds no claim, and most text is read with a
#: split and one set test, not the whole reading (a tenth of the instructions of a short inform).
_LIKELY: Final = frozenset(
    verb + mark for verb in _DONE_VERBS | {"done"} for mark in ("", ".", ",", "!", ";", ":", ")", '"', "'")
)


def claims_done(text: str) -> bool:
    """Whether ``text`` claims that something was done (see the module docstring)."""
    low = text.lower()
    if _LIKELY.isdisjoint(low.split()):
        return False
    words = low.translate(_SPACED).split()
    if words[0] == "done":
        return True
    for index, word in enumerate(words):
        if word not in _DONE_VERBS:
            continue
        head = index - 1
        while head >= 0 and words[head] in _BETWEEN:
            head -= 1
        if head < 0:
            continue
        said_by = words[head] in _SUBJECTS or words[head] in _AUXILIARIES
        if said_by and _DENIALS.isdisjoint(words[max(0, head - 2) : head]):
            return True
    return False
