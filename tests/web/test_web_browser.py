"""The panel as a person uses it: headless Chromium (Playwright) against a real server, a scripted agent."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from dial_runtime.web import create_app, scripted_agents

from ..browser import open_thread, say, shown
from ..fakes import envelope, suggest
from ..web_domains import WebNotes
from ..web_server import serving

ADD = envelope(suggest("add-note", '{"text":"buy milk"}'), prose="Here is the note.")
REMOVE = envelope(suggest("remove-note", '{"text":"old"}'))
ACK = '<dial><dial-acknowledge of="sg-1">Added.</dial-acknowledge></dial>'
CHOICE = envelope(
    '<dial-ask id="which" response-type="choice">Which list?'
    '<dial-option value="home">Home</dial-option><dial-option value="work">Work</dial-option></dial-ask>'
)
XSS = (
    '<script>window.__xss = "script"</script> <img src=x onerror="window.__xss = \'img\'">\n'
    "<dial><dial-inform>&lt;a href=\"javascript:window.__xss='link'\"&gt;click me&lt;/a&gt; "
    "&lt;img src=x onerror=\"window.__xss='inform'\"&gt;</dial-inform></dial>"
)

SCRIPTS: dict[str, list[str]] = {}
_COUNT = itertools.count()


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    store = tmp_path_factory.mktemp("panel") / "conversations.db"
    app = create_app(store=f"sqlite:{store}", domain=WebNotes(), agent=scripted_agents(SCRIPTS))
    with serving(app) as url:
        yield url


def open_panel(context: BrowserContext, base_url: str, *replies: str, thread: str | None = None) -> Page:
    """A page on a new conversation (or ``thread``) whose agent replies with ``replies``; page errors fail."""
    if thread is None:
        thread = f"b{next(_COUNT)}"
        SCRIPTS[thread] = list(replies)
    return open_thread(context, base_url, thread)


def card(page: Page, suggestion: str = "sg-1") -> object:
    return page.locator(f'.dial-card[data-suggestion="{suggestion}"]')


def test_accept_runs_the_suggestion_and_shows_its_outcome(context: BrowserContext, base_url: str) -> None:
    page = open_panel(context, base_url, ADD, ACK)
    say(page, "add milk")
    pending = page.locator(".dial-card.dial-pending")
    expect(pending.locator(".dial-preview")).to_have_text("Add the note 'buy milk'")
    expect(pending.locator(".dial-payload")).to_contain_text('"text": "buy milk"')
    expect(page.locator(".dial-assistant").first).to_have_text("Here is the note.")
    pending.locator(".dial-accept").click()
    expect(page.locator('.dial-card[data-outcome="done"] .dial-outcome')).to_have_text("Done")
    expect(page.locator(".dial-assistant").last).to_have_text("Added.")
    assert page.errors == []  # type: ignore[attr-defined]


def test_an_edit_refused_then_accepted(context: BrowserContext, base_url: str) -> None:
    page = open_panel(context, base_url, ADD, ACK)
    say(page, "add milk")
    page.locator(".dial-card.dial-pending .dial-edit").click()
    page.locator(".dial-json").fill('{"text": ""}')
    page.locator(".dial-save").click()
    expect(page.locator(".dial-issue")).to_have_text(
        "Refused (text): Give the note's text. Your edit: “Add the note ''”."
    )
    # The card keeps its own words: what the agent proposed, not the refused edit's.
    expect(page.locator(".dial-card.dial-pending .dial-preview")).to_have_text("Add the note 'buy milk'")
    page.locator(".dial-json").fill("{not json")
    page.locator(".dial-save").click()
    expect(page.locator(".dial-json-error")).to_contain_text("Not JSON")
    expect(page.locator(".dial-card .dial-accept")).to_have_count(0)  # a refused payload is never offered as is
    page.locator(".dial-json").fill('{"text": "oat milk"}')
    page.locator(".dial-save").click()
    done = page.locator('.dial-card[data-outcome="done"]')
    expect(done.locator(".dial-outcome")).to_have_text("Done")
    # The card shows what ran: the valid edit, its preview, no refusal.
    expect(done.locator(".dial-payload")).to_have_text('{\n  "text": "oat milk"\n}')
    expect(done.locator(".dial-preview")).to_have_text("Add the note 'oat milk'")
    expect(done.locator(".dial-issue")).to_be_hidden()
    live = shown(page)
    page.reload()
    expect(page.locator('.dial-card[data-outcome="done"]')).to_be_visible()
    assert shown(page) == live
    assert page.errors == []  # type: ignore[attr-defined]


def test_dismiss_and_the_destructive_mark(context: BrowserContext, base_url: str) -> None:
    page = open_panel(context, base_url, REMOVE)
    say(page, "remove old")
    expect(page.locator(".dial-card.dial-is-destructive .dial-destructive")).to_be_visible()
    page.locator(".dial-dismiss").click()
    expect(page.locator('.dial-card[data-outcome="dismissed"] .dial-outcome')).to_have_text("Dismissed")
    expect(page.locator(".dial-accept")).to_have_count(0)


def test_typing_instead_of_deciding_says_something_else(context: BrowserContext, base_url: str) -> None:
    page = open_panel(context, base_url, ADD, "<dial><dial-inform>No milk, then.</dial-inform></dial>")
    say(page, "add milk")
    expect(page.locator(".dial-card.dial-pending")).to_be_visible()
    say(page, "actually, no")
    expect(page.locator('.dial-card[data-outcome="superseded"]')).to_be_visible()
    expect(page.locator(".dial-assistant").last).to_have_text("No milk, then.")
    live = shown(page)
    page.reload()
    expect(page.locator(".dial-assistant").last).to_have_text("No milk, then.")
    expect(page.locator(".dial-user")).to_have_text(["add milk", "actually, no"])
    assert shown(page) == live


def test_a_choice_is_answered_with_a_button(context: BrowserContext, base_url: str) -> None:
    page = open_panel(context, base_url, CHOICE, "<dial><dial-inform>Work it is.</dial-inform></dial>")
    say(page, "new list")
    expect(page.locator(".dial-ask .dial-question")).to_have_text("Which list?")
    expect(page.get_by_text("Which list?")).to_have_count(1)  # the question once, not also as agent text
    page.locator(".dial-option", has_text="Work").click()
    expect(page.locator(".dial-assistant").last).to_have_text("Work it is.")
    expect(page.locator(".dial-ask .dial-option")).to_have_count(0)
    expect(page.locator(".dial-user").last).to_have_text("work")  # the answer is the person's words


def test_a_reload_keeps_the_pending_card_and_it_still_works(context: BrowserContext, base_url: str) -> None:
    page = open_panel(context, base_url, ADD, ACK)
    say(page, "add milk")
    expect(page.locator(".dial-card.dial-pending")).to_be_visible()
    page.reload()
    pending = page.locator(".dial-card.dial-pending")
    expect(pending.locator(".dial-preview")).to_have_text("Add the note 'buy milk'")
    expect(page.locator(".dial-user")).to_have_text("add milk")
    pending.locator(".dial-accept").click()
    expect(page.locator('.dial-card[data-outcome="done"]')).to_be_visible()


def test_a_reload_shows_ended_cards_and_answers_as_they_were_shown_live(
    context: BrowserContext, base_url: str
) -> None:
    """A dismissed destructive card keeps its preview and mark, and the person's answer stays theirs."""
    page = open_panel(context, base_url, REMOVE, CHOICE, "<dial><dial-inform>Work it is.</dial-inform></dial>")
    say(page, "remove old")
    page.locator(".dial-dismiss").click()
    expect(page.locator('.dial-card[data-outcome="dismissed"]')).to_be_visible()
    say(page, "new list")
    page.locator(".dial-option", has_text="Work").click()
    expect(page.locator(".dial-assistant").last).to_have_text("Work it is.")
    live = [page.locator(".dial-user").all_inner_texts(), page.locator(".dial-preview").all_inner_texts()]
    assert live[0] == ["remove old", "new list", "work"]
    page.reload()
    ended = page.locator('.dial-card[data-outcome="dismissed"].dial-is-destructive')
    expect(ended.locator(".dial-destructive")).to_be_visible()
    expect(page.locator(".dial-assistant").last).to_have_text("Work it is.")
    assert [page.locator(".dial-user").all_inner_texts(), page.locator(".dial-preview").all_inner_texts()] == live
    assert page.errors == []  # type: ignore[attr-defined]


def test_a_second_tab_sees_the_decision_made_in_the_first(context: BrowserContext, base_url: str) -> None:
    first = open_panel(context, base_url, ADD, ACK)
    say(first, "add milk")
    expect(first.locator(".dial-card.dial-pending")).to_be_visible()
    thread = first.url.partition("thread=")[2]
    second = open_panel(context, base_url, thread=thread)
    expect(second.locator(".dial-card.dial-pending")).to_be_visible()
    first.locator(".dial-accept").click()
    expect(second.locator('.dial-card[data-outcome="done"]')).to_be_visible()
    expect(second.locator(".dial-accept")).to_have_count(0)


def test_a_hostile_reply_is_shown_as_text_and_runs_nothing(context: BrowserContext, base_url: str) -> None:
    page = open_panel(context, base_url, XSS)
    say(page, "<img src=x onerror=\"window.__xss='mine'\">")
    expect(page.locator(".dial-assistant")).to_have_count(2)
    expect(page.locator(".dial-assistant").last).to_contain_text("javascript:window.__xss")
    page.reload()
    expect(page.locator(".dial-assistant")).to_have_count(2)
    assert page.evaluate("window.__xss") is None
    assert page.locator(".dial-log img, .dial-log a, .dial-log script").count() == 0
    expect(page.locator(".dial-user")).to_have_text("<img src=x onerror=\"window.__xss='mine'\">")
    assert page.errors == []  # type: ignore[attr-defined]


def test_the_panel_ships_as_package_data() -> None:
    static = Path(__import__("dial_runtime.web", fromlist=["_"]).__file__).parent / "static"
    assert {path.name for path in static.iterdir()} >= {"index.html", "dial-chat.js", "dial-chat.css"}


PRECISE = envelope(
    '<dial-suggest action="add-note">Put milk on the list'
    '<dial-payload>{"text": "buy milk", "amount_cents": 9007199254740993, "tags": ["home", "food"]}'
    "</dial-payload></dial-suggest>"
)
LIST = envelope(suggest("list-notes", "{}"), prose="Here is what your notebook holds now.")


def test_a_waiting_card_shows_the_agents_words_and_every_field_that_would_run(
    context: BrowserContext, base_url: str
) -> None:
    """Live and after a reload: the preview, the agent's words marked as its own, and each field of the payload
    with its exact value, without opening anything; the done card folds them away."""
    page = open_panel(context, base_url, PRECISE, ACK)
    say(page, "add milk")
    for shown_page in (page, open_thread(context, base_url, page.url.split("thread=")[1])):
        pending = shown_page.locator(".dial-card.dial-pending")
        expect(pending.locator(".dial-words")).to_have_text("The agent's words: “Put milk on the list”")
        fields = pending.locator(".dial-fields")
        expect(fields).to_be_visible()
        expect(fields.locator(".dial-field-name")).to_have_text(["text", "amount_cents", "tags"])
        expect(fields.locator(".dial-field-value")).to_have_text(
            ['"buy milk"', "9007199254740993", '["home", "food"]']
        )
    page.locator(".dial-card.dial-pending .dial-accept").click()
    done = page.locator('.dial-card[data-outcome="done"]')
    expect(done.locator(".dial-outcome")).to_have_text("Done")
    expect(done.locator(".dial-fields")).to_be_hidden()
    assert page.errors == []  # type: ignore[attr-defined]


def test_what_a_done_read_only_action_returned_is_shown(context: BrowserContext, base_url: str) -> None:
    page = open_panel(context, base_url, ADD, LIST, ACK)
    say(page, "add a note: buy milk")
    page.locator(".dial-card.dial-pending .dial-accept").click()
    listed = page.locator('.dial-card[data-suggestion="sg-2"]')
    expect(listed.locator(".dial-outcome")).to_have_text("Done")
    returned = listed.locator(".dial-result-fields")  # an object returned reads field by field
    expect(returned).to_be_visible()
    expect(returned.locator(".dial-field-name")).to_have_text(["notes"])
    expect(returned.locator(".dial-field-value")).to_contain_text('"buy milk"')
    expect(listed.locator(".dial-result")).to_be_hidden()  # its JSON, folded beneath
    listed.locator(".dial-result-summary").click()
    expect(listed.locator(".dial-result")).to_contain_text('"buy milk"')
    page.reload()
    expect(page.locator('.dial-card[data-suggestion="sg-2"] .dial-result-fields')).to_contain_text('"buy milk"')
    assert page.errors == []  # type: ignore[attr-defined]
