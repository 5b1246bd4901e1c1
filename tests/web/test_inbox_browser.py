"""The inbox page in headless Chromium: every card waiting for the person, with a countdown to its deadline; a bulk
decision taken with the keyboard alone; a destructive accept that asks for a second yes; cards decided elsewhere
leaving the page without a reload; two people bulk-deciding overlapping cards at once, each card decided once;
deciding paused while offline; no serious accessibility finding, light or dark."""

from __future__ import annotations

import contextlib
import itertools
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from dial_runtime import Conversation, open_store, scripted_human
from dial_runtime.web import create_app, scripted_agents

from ..browser import AXE, open_thread, serious_accessibility_findings, small_targets, watched_page
from ..fakes import Agent, envelope, suggest
from ..web_server import serving
from .test_web_inbox import ACK, REMOVE, SHARE, DeskNotes, _Scripts, note, on_a_thread, propose, stored

_COUNT = itertools.count(1)

#: A time of day as the browser's locale writes it ("23:26", "11:26 PM").
CLOCK = r"\d\d?:\d\d( [AP]M)?"

QUESTION = envelope('<dial-ask id="colour">Which colour should the note be?</dial-ask>')


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:{tmp_path_factory.mktemp('inbox') / 'inbox.db'}"


@pytest.fixture(scope="module")
def base_url(store_url: str) -> Iterator[str]:
    store = open_store(store_url)
    app = create_app(
        store=store,
        domain=DeskNotes(),
        agent=scripted_agents(_Scripts()),
        auth=lambda request: str(request.headers.get("x-user", "ada")),
        roles=lambda who: {"reviewers"} if who.startswith("rev-") else set(),
        deadlines=None,
    )
    try:
        with serving(app) as served:
            yield served
    finally:
        on_a_thread(store.aclose)


def fresh(prefix: str, count: int) -> list[str]:
    """``count`` conversation ids no other test uses."""
    batch = next(_COUNT)
    return [f"{prefix}{batch}-{n}" for n in range(count)]


@contextlib.contextmanager
def person(browser: Browser, who: str, scheme: str = "light") -> Iterator[BrowserContext]:
    """A browser of its own for ``who`` (their sign-in header, ``scheme``), closed when the block ends."""
    context = browser.new_context(extra_http_headers={"x-user": who}, color_scheme=scheme)  # type: ignore[arg-type]
    context.set_default_timeout(10_000)
    try:
        yield context
    finally:
        context.close()


def open_inbox(context: BrowserContext, base_url: str) -> Page:
    page = watched_page(context, f"{base_url}/inbox")
    expect(page.locator("dial-inbox[data-loaded] .dial-inbox-title")).to_be_visible()
    return page


def card(page: Page, thread: str) -> Any:
    return page.locator(f'.dial-inbox-card[data-thread="{thread}"]')


def decisions(store_url: str, thread: str) -> list[tuple[str, str | None, str | None]]:
    return [
        (entry.event.decision, entry.event.by, entry.event.via)
        for entry in stored(store_url, thread)
        if entry.event.type == "decided"
    ]


def decide_all_left(page: Page) -> None:
    """Dismiss whatever the other tests left waiting, so that each test starts from its own cards."""
    if page.locator(".dial-select-all").is_enabled():
        page.locator(".dial-select-all").click()
        page.locator(".dial-dismiss-selected").click()
        expect(page.locator(".dial-inbox-card")).to_have_count(0)


def elsewhere(
    store_url: str, thread: str, act: Callable[[Conversation], Awaitable[object]], replies: Sequence[str] = (ACK,)
) -> None:
    """``act(conversation)`` on ``thread``, through a store object of its own (as another process does), its
    agent replying ``replies``."""

    async def work() -> None:
        store = open_store(store_url)
        try:
            conversation = await Conversation.open(
                store, thread, agent=Agent(replies), domain=DeskNotes(), human=scripted_human([])
            )
            await act(conversation)
        finally:
            await store.aclose()

    on_a_thread(work)


def answer(store_url: str, thread: str) -> None:
    """Answer the question waiting in ``thread`` (another process's store object)."""
    elsewhere(store_url, thread, lambda conversation: conversation.answer("colour", "blue", by="rev-1"))


def test_a_bulk_decision_with_the_keyboard_alone(browser: Browser, base_url: str, store_url: str) -> None:
    with person(browser, "ada") as context:
        page = open_inbox(context, base_url)
        decide_all_left(page)
        threads = fresh("k", 3)
        propose(store_url, {thread: note(f"note {n}") for n, thread in enumerate(threads)})
        expect(page.locator(".dial-inbox-card")).to_have_count(3)  # the change stream brought them
        expect(card(page, threads[0]).locator(".dial-due")).to_have_text(re.compile(r"due in (9|10):\d\d"))
        expect(card(page, threads[0]).locator(".dial-age")).to_have_text("waiting under a minute")
        expect(card(page, threads[0]).locator(".dial-asked-by")).to_have_text("asked by carl")
        page.locator(".dial-keys").click()
        page.keyboard.press("j")
        expect(card(page, threads[0])).to_be_focused()
        page.keyboard.press("x")
        page.keyboard.press("j")
        page.keyboard.press("x")
        expect(page.locator(".dial-accept-selected")).to_have_text("Accept 2 cards")
        page.keyboard.press("a")
        expect(page.locator("dial-inbox .dial-status")).to_have_text("2 cards accepted.")
        expect(page.locator(".dial-inbox-card")).to_have_count(1)
        assert decisions(store_url, threads[0]) == decisions(store_url, threads[1]) == [("accept", "ada", "inbox")]
        expect(card(page, threads[2])).to_be_visible()
        card(page, threads[2]).focus()
        page.keyboard.press("d")
        expect(page.locator(".dial-inbox-card")).to_have_count(0)
        expect(page.locator(".dial-inbox-empty")).to_have_text("Nothing waits for you.")
        assert decisions(store_url, threads[2]) == [("dismiss", "ada", "inbox")]
        assert page.errors == []  # type: ignore[attr-defined]
        panel = open_thread(context, base_url, threads[0])  # the card in its conversation says who, and how
        decided = panel.locator('.dial-card[data-suggestion="sg-1"] .dial-decided-by')
        expect(decided).to_have_text(re.compile(r"^Accepted by ada through the inbox at \d\d:\d\d"))
        returned = panel.locator('.dial-card[data-suggestion="sg-1"] .dial-result-fields')
        expect(returned).to_have_text(re.compile(r"^count\s*\d+$"))  # what it returned, field by field


def test_a_destructive_accept_asks_for_a_second_yes(browser: Browser, base_url: str, store_url: str) -> None:
    with person(browser, "ada") as context:
        page = open_inbox(context, base_url)
        decide_all_left(page)
        (thread,) = fresh("d", 1)
        propose(store_url, {thread: REMOVE})
        removal = card(page, thread)
        expect(removal.locator(".dial-destructive")).to_have_text("destructive")
        removal.get_by_role("button", name="Accept: Remove the note 'old'").click()
        expect(page.locator(".dial-confirm-text")).to_have_text(
            "Accept “Remove the note 'old'”? It is destructive."
        )
        assert decisions(store_url, thread) == []
        page.get_by_role("button", name="Yes, accept it").click()
        expect(removal).to_have_count(0)
        assert decisions(store_url, thread) == [("accept", "ada", "inbox")]


def test_a_card_decided_elsewhere_leaves_the_page_without_a_reload(
    browser: Browser, base_url: str, store_url: str
) -> None:
    with person(browser, "ada") as context:
        page = open_inbox(context, base_url)
        decide_all_left(page)
        threads = fresh("e", 2)
        propose(store_url, {thread: note("x") for thread in threads})
        expect(page.locator(".dial-inbox-card")).to_have_count(2)
        card(page, threads[0]).locator(".dial-select").check()

        elsewhere(
            store_url, threads[0], lambda conversation: conversation.decide("sg-1", {"dismiss": True}, by="bea")
        )
        expect(card(page, threads[0])).to_have_count(0)
        expect(page.locator(".dial-accept-selected")).to_have_text("Accept selected")  # its selection went with it
        expect(page.locator(".dial-accept-selected")).to_be_disabled()
        panel = open_thread(context, base_url, threads[0])  # decided by the program's own code: no door named
        decided = panel.locator('.dial-card[data-suggestion="sg-1"] .dial-decided-by')
        expect(decided).to_have_text(re.compile(r"^Dismissed by bea at \d\d:\d\d"))


def test_two_people_bulk_deciding_overlapping_cards_decide_each_once(
    browser: Browser, base_url: str, store_url: str
) -> None:
    with person(browser, "ada") as first, person(browser, "bea") as second:
        ada, bea = open_inbox(first, base_url), open_inbox(second, base_url)
        decide_all_left(ada)
        threads = fresh("o", 6)
        propose(store_url, {thread: note(f"n{n}") for n, thread in enumerate(threads)})
        for page, mine in ((ada, threads[:4]), (bea, threads[2:])):
            expect(page.locator(".dial-inbox-card")).to_have_count(6)
            for thread in mine:
                card(page, thread).locator(".dial-select").check()
            expect(page.locator(".dial-accept-selected")).to_have_text("Accept 4 cards")
        ada.locator(".dial-accept-selected").click()
        bea.locator(".dial-accept-selected").click()
        for page in (ada, bea):
            expect(page.locator(".dial-inbox-card")).to_have_count(0)
        deciders = [decisions(store_url, thread) for thread in threads]
        assert all(len(each) == 1 for each in deciders), deciders
        assert [each[0][1] for each in deciders[:2]] == ["ada", "ada"]
        assert [each[0][1] for each in deciders[4:]] == ["bea", "bea"]
        said = [page.locator("dial-inbox .dial-status").inner_text() for page in (ada, bea)]
        taken = sum(
            int(re.match(r"(\d+) cards? accepted", words).group(1)) for words in said if "accepted" in words
        )  # type: ignore[union-attr]
        assert taken == 6, said


def test_deciding_is_paused_while_offline(browser: Browser, base_url: str, store_url: str) -> None:
    with person(browser, "ada") as context:
        page = open_inbox(context, base_url)
        decide_all_left(page)
        (thread,) = fresh("f", 1)
        propose(store_url, {thread: note("y")})
        accept = card(page, thread).locator(".dial-accept")
        expect(accept).to_be_enabled()
        context.set_offline(True)
        expect(page.locator("dial-inbox .dial-status")).to_have_text(re.compile("^Offline"))
        expect(accept).to_be_disabled()
        context.set_offline(False)
        expect(card(page, thread).locator(".dial-accept")).to_be_enabled()
        assert decisions(store_url, thread) == []


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_no_serious_accessibility_finding_and_targets_a_finger_can_hit(
    browser: Browser, base_url: str, store_url: str, scheme: str
) -> None:
    if not AXE.is_file():
        pytest.fail("the accessibility test needs `npm ci --prefix tests/browser_node` (.ci/run does it)")
    with person(browser, "rev-1", scheme) as context:
        page = open_inbox(context, base_url)
        decide_all_left(page)
        threads = fresh("a", 3)
        propose(store_url, {threads[0]: note("z"), threads[1]: REMOVE, threads[2]: QUESTION})
        expect(page.locator(".dial-inbox-card")).to_have_count(3)
        question = card(page, threads[2])  # answered in words, in its conversation: never selected here
        expect(question.locator(".dial-preview")).to_have_text("Question: Which colour should the note be?")
        expect(question.locator(".dial-select")).to_have_count(0)
        expect(question.get_by_role("link", name="Answer in the conversation")).to_have_attribute(
            "href", f"./?thread={threads[2]}"
        )
        page.locator(".dial-select-all").click()
        expect(page.locator(".dial-accept-selected")).to_have_text("Accept 2 cards")
        page.locator(".dial-select-all").click()
        card(page, threads[0]).locator(".dial-summary").click()
        card(page, threads[0]).locator(".dial-claim").click()  # a claim shown, the form to assign it open
        expect(card(page, threads[0]).locator(".dial-holding")).to_have_text(re.compile("^claimed by you"))
        card(page, threads[0]).locator(".dial-assign-summary").click()
        assert serious_accessibility_findings(page) == []
        measured, small = small_targets(page, "dial-inbox")
        assert measured and small == []
        page.keyboard.press("j")  # from the first card's details to the next card, which shows the focus
        expect(card(page, threads[1])).to_be_focused()
        ring = page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle")
        assert ring == "solid"
        answer(store_url, threads[2])
        expect(question).to_have_count(0)


def test_the_panel_page_leads_to_the_inbox_a_new_conversation_and_every_conversation(
    browser: Browser, base_url: str, store_url: str
) -> None:
    with person(browser, "ada") as context:
        decide_all_left(open_inbox(context, base_url))
        threads = fresh("n", 2)
        propose(store_url, {thread: note(f"nav {n}") for n, thread in enumerate(threads)})
        page = open_thread(context, base_url, threads[0])
        due = page.locator('.dial-card[data-suggestion="sg-1"] .dial-due')  # the card's own countdown
        expect(due).to_have_text(re.compile(r"^due in (9|10):\d\d$"))
        inbox = page.locator("dial-nav .dial-nav-inbox")
        expect(inbox).to_have_text("Inbox (2 waiting for you)")
        page.locator("dial-nav summary").click()
        current = page.locator('dial-nav a[aria-current="page"]')
        expect(current).to_have_text(threads[0])
        expect(current.locator("xpath=..")).to_contain_text("1 waiting")
        expect(page.locator("dial-nav .dial-nav-item", has_text=threads[1])).to_have_count(1)
        page.get_by_role("button", name="Accept: Add the note 'nav 0'").click()
        expect(inbox).to_have_text("Inbox (1 waiting for you)")  # told by the inbox's change stream
        expect(due).to_be_hidden()  # decided: nothing is due
        page.locator("dial-nav .dial-nav-new").click()
        expect(page.locator("dial-chat .dial-empty")).to_be_visible()
        assert f"thread={threads[0]}" not in page.url and "thread=" in page.url
        inbox.click()
        expect(page.locator("dial-inbox[data-loaded] .dial-inbox-card")).to_have_count(1)
        assert page.errors == []  # type: ignore[attr-defined]


def test_the_panels_keys_move_between_cards_and_decide_them(
    browser: Browser, base_url: str, store_url: str
) -> None:
    with person(browser, "ada") as context:
        (thread,) = fresh("p", 1)
        both = envelope(suggest("add-note", '{"text": "first"}'), suggest("add-note", '{"text": "second"}'))
        propose(store_url, {thread: both})
        page = open_thread(context, base_url, thread)
        first, second = (page.locator(f'.dial-card[data-suggestion="sg-{n}"]') for n in (1, 2))
        expect(second.locator(".dial-accept")).to_have_attribute("aria-keyshortcuts", "A")
        page.locator(".dial-input").focus()
        page.keyboard.press("j")  # in the message box, a letter is a letter
        assert page.locator(".dial-input").input_value() == "j"
        page.locator(".dial-input").fill("")
        page.keyboard.press("Escape")  # out of the message box, to the nearest waiting card
        expect(second).to_be_focused()
        page.keyboard.press("k")
        expect(first).to_be_focused()
        page.keyboard.press("j")
        expect(second).to_be_focused()
        page.keyboard.press("a")
        expect(second).to_have_attribute("data-outcome", "done")
        page.keyboard.press("k")
        expect(first).to_be_focused()
        page.keyboard.press("d")
        expect(first).to_have_attribute("data-outcome", "dismissed")
        assert decisions(store_url, thread) == [("accept", "ada", "web"), ("dismiss", "ada", "web")]
        assert page.errors == []  # type: ignore[attr-defined]


def test_a_claim_and_an_assignment_show_on_every_open_inbox_and_in_the_panel(
    browser: Browser, base_url: str, store_url: str
) -> None:
    with person(browser, "rev-1") as first, person(browser, "rev-2") as second:
        one, two = open_inbox(first, base_url), open_inbox(second, base_url)
        decide_all_left(one)
        (thread,) = fresh("c", 1)
        propose(store_url, {thread: SHARE})
        mine, theirs = card(one, thread), card(two, thread)
        mine.get_by_role("button", name="Claim: Share the note 'plans'").click()
        expect(one.locator("dial-inbox .dial-status")).to_have_text("You claimed “Share the note 'plans'”.")
        expect(mine.locator(".dial-holding")).to_have_text(re.compile(rf"^claimed by you until {CLOCK}$"))
        expect(mine.locator(".dial-release")).to_be_visible()
        # The other reviewer's open inbox is told by the change stream: who has it, and no claim to make.
        expect(theirs.locator(".dial-holding")).to_have_text(re.compile(rf"^claimed by rev-1 until {CLOCK}$"))
        expect(theirs.locator(".dial-claim")).to_have_count(0)
        expect(theirs.locator(".dial-release")).to_have_count(0)
        mine.locator(".dial-assign-summary").click()
        mine.locator(".dial-assign-person").fill("rev-2")
        mine.locator(".dial-assign-person").press("Enter")
        expect(theirs.locator(".dial-holding")).to_have_text("assigned to you")  # rev-1's claim ended with it
        expect(theirs.locator(".dial-claim")).to_be_visible()
        expect(mine.locator(".dial-holding")).to_have_text("assigned to rev-2")
        mine.locator(".dial-assign-summary").click()
        mine.locator(".dial-assign-person").fill("ada")  # ada holds no reviewers role: refused on the card
        mine.get_by_role("button", name="Assign", exact=True).click()
        expect(mine.locator(".dial-inbox-note")).to_have_text("Not done: ada may not decide it.")
        theirs.locator(".dial-claim").click()
        panel = open_thread(first, base_url, thread)
        holding = panel.locator('.dial-card[data-suggestion="sg-1"] .dial-holding')
        expect(holding).to_have_text(re.compile(rf"^claimed by rev-2 until {CLOCK} · assigned to rev-2$"))
        kinds = [entry.event.type for entry in stored(store_url, thread)]
        assert [kind for kind in kinds if kind in ("claimed", "assigned")] == ["claimed", "assigned", "claimed"]
        assert one.errors == two.errors == []  # type: ignore[attr-defined]


def test_a_card_whose_edit_was_refused_is_edited_again_in_its_conversation_not_accepted(
    browser: Browser, base_url: str, store_url: str
) -> None:
    with person(browser, "ada") as context:
        page = open_inbox(context, base_url)
        decide_all_left(page)
        (thread,) = fresh("r", 1)
        propose(store_url, {thread: note("milk")})

        elsewhere(
            store_url, thread, lambda conversation: conversation.decide("sg-1", {"edit": {"text": ""}}, by="bea")
        )
        refused = card(page, thread)
        expect(refused.locator(".dial-issue")).to_have_text(
            "Refused (text): Give the note's text. The edit: “Add the note ''”."
        )
        expect(refused.locator(".dial-preview")).to_have_text("Add the note 'milk'")  # its own words
        expect(refused.locator(".dial-accept")).to_have_count(0)
        expect(refused.locator(".dial-select")).to_have_count(0)  # never in a bulk
        expect(refused.get_by_role("link", name="Edit it in the conversation")).to_have_attribute(
            "href", f"./?thread={thread}"
        )
        expect(page.locator(".dial-select-all")).to_be_disabled()
        refused.get_by_role("button", name="Dismiss: Add the note 'milk'").click()
        expect(refused).to_have_count(0)
        assert decisions(store_url, thread)[-1] == ("dismiss", "ada", "inbox")


@pytest.mark.parametrize("hours", [-3, 3])
def test_a_countdown_runs_on_the_servers_clock_whatever_the_browsers_says(
    browser: Browser, base_url: str, store_url: str, hours: int
) -> None:
    """A browser whose clock is hours off still counts a card's ten minutes down from the server's time: a slow
    clock cannot make an overdue card look on time, nor a fast one a card on time look overdue."""
    with person(browser, "ada") as context:
        (thread,) = fresh("t", 1)
        propose(store_url, {thread: note("clock")})
        page = context.new_page()
        page.clock.install(time=time.time() + hours * 3600)
        page.goto(f"{base_url}/?thread={thread}")
        expect(page.locator('.dial-card[data-suggestion="sg-1"] .dial-due')).to_have_text(
            re.compile(r"^due in (9|10):\d\d$")
        )
        inbox = context.new_page()
        inbox.clock.install(time=time.time() + hours * 3600)
        inbox.goto(f"{base_url}/inbox")
        expect(card(inbox, thread).locator(".dial-due")).to_have_text(re.compile(r"^due in (9|10):\d\d$"))


def test_what_a_rule_decided_and_why_a_person_is_asked_show_on_the_cards(
    browser: Browser, base_url: str, store_url: str
) -> None:
    with person(browser, "ada") as context:
        page = open_inbox(context, base_url)
        decide_all_left(page)
        ruled, asked = fresh("rule", 2)
        # A note that tidies up runs without asking anyone; the agent acknowledges its outcome.
        tidy = (note("tidy the desk"), ACK)
        elsewhere(store_url, ruled, lambda conversation: conversation.say("tidy", by="carl"), replies=tidy)
        propose(store_url, {asked: note("check the figures")})
        why = "Why this needs approval: rule tidy-notes@1 asks a person"
        expect(card(page, asked).locator(".dial-why")).to_have_text(why)
        expect(card(page, ruled)).to_have_count(0)
        panel = open_thread(context, base_url, ruled)
        done = panel.locator('.dial-card[data-suggestion="sg-1"]')
        expect(done).to_have_attribute("data-outcome", "done")
        expect(done.locator(".dial-decided-by")).to_have_text("Approved by rule tidy-notes@1")
        expect(done.locator(".dial-why")).to_be_hidden()
        waiting = open_thread(context, base_url, asked).locator('.dial-card[data-suggestion="sg-1"]')
        expect(waiting.locator(".dial-why")).to_have_text(why)
        assert page.errors == panel.errors == []  # type: ignore[attr-defined]
