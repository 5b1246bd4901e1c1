"""What the plain-text transcript (``dial-runtime demo``, ``chat``'s screen and ``--transcript``) says of a
suggestion: a valid one is a proposal the person decides on; one the runtime refused before showing it is a
one-line note that the agent's proposal was refused, never something to decide."""

from __future__ import annotations

import pytest

from dial_runtime.runtime.events import Event, OutcomeEvent, SuggestionEvent
from dial_runtime.terminal.transcript import Transcript

SHOWN = SuggestionEvent(
    id="sg-1", action="add-note", text="", payload={"text": "x"}, preview="Add the note 'x'", destructive=False,
    mutates=True,
)  # fmt: skip


@pytest.mark.parametrize(
    ("events", "lines"),
    [
        (
            [OutcomeEvent(id="sg-1", action="fly", status="invalid", code="unknown-action", hint="No 'fly'.")],
            ["   (the agent's proposal fly was refused and not shown to you: No 'fly'.)"],
        ),
        (
            [OutcomeEvent(id="sg-2", action="add-note", status="invalid", code="invalid-payload")],
            ["   (the agent's proposal add-note was refused and not shown to you: invalid-payload)"],
        ),
        (
            [SHOWN, OutcomeEvent(id="sg-1", action="add-note", status="invalid", preview="Add the note 'x'",
                                 code="invalid-payload", hint="Too long.")],
            ["agent proposes sg-1: Add the note 'x'", "   ✗ invalid: Add the note 'x' (Too long.)"],
        ),
        (
            [SHOWN, OutcomeEvent(id="sg-1", action="add-note", status="done", preview="Add the note 'x'")],
            ["agent proposes sg-1: Add the note 'x'", "   ✓ done: Add the note 'x'"],
        ),
    ],
)  # fmt: skip
def test_a_refused_proposal_is_a_note_and_a_shown_one_a_proposal(events: list[Event], lines: list[str]) -> None:
    written: list[str] = []
    transcript = Transcript(written.append)
    for event in events:
        transcript.show(event)
    assert written == lines
    assert not any(line.startswith("agent proposes") for line in written if "refused and not shown" in line)


def test_suggestions_shown_earlier_count_as_shown() -> None:
    """A reopened conversation's recap shows outcomes of suggestions the person saw in an earlier session."""
    written: list[str] = []
    transcript = Transcript(written.append)
    transcript.shown.add("sg-1")
    transcript.show(OutcomeEvent(id="sg-1", action="add-note", status="invalid", preview="Add it", hint="No."))
    assert written == ["   ✗ invalid: Add it (No.)"]
