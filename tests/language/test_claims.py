"""Words that claim something was done, as the runtime reads them to keep an agent's claims apart from what ran."""

from __future__ import annotations

import pytest

from dial_runtime.language.claims import claims_done


@pytest.mark.parametrize(
    "text",
    [
        'Sure! I\'ve added "buy milk" to your notes.',
        "I have now cancelled your booking.",
        "Done.",
        "Done! Anything else?",
        "Your note has been added.",
        "The refund was successfully issued and the order was cancelled.",
        "I booked the 9:40 flight.",
        "We’ve sent the invoice.",
        "It has already been saved.",
    ],
)
def test_words_that_say_something_was_done_are_a_claim(text: str) -> None:
    assert claims_done(text)


@pytest.mark.parametrize(
    "text",
    [
        "I can add it for you.",
        "Should I add it?",
        "I will add it once you accept.",
        "Here are your notes.",
        "Nothing has changed.",
        "It has not been sent yet.",
        "I haven't added it.",
        "No note was added.",
        "Added.",
        "Undone",
        "",
    ],
)
def test_words_that_do_not_say_so_are_not(text: str) -> None:
    assert not claims_done(text)
