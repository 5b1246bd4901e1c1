"""The decision link page as a person uses it, in headless Chromium against a real server: the card rendered by
the panel's own renderer, only the decisions the link allows, the outcome shown once decided, a used link said to
be used, and no serious accessibility finding (axe-core) in light and dark."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, expect

from dial_runtime.decisions.links import MemoryUsedTokens

from ..browser import AXE, open_link, open_thread, serious_accessibility_findings, small_targets, structure
from ..web_links_setup import ACK, ADD, REMOVE, digest_of, events, issue, links_app, new_keyring, start
from ..web_server import serving
from .test_web_links import ReviewedNotes

KEYRING = new_keyring()
SCRIPTS: dict[str, list[str]] = {}
CARD = '.dial-card[data-suggestion="sg-1"]'


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("link-pages") / "conversations.db"


@pytest.fixture(scope="module")
def base_url(store_path: Path) -> Iterator[str]:
    with serving(links_app(store_path, SCRIPTS, KEYRING, MemoryUsedTokens())) as url:
        yield url


@pytest.fixture
def http(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=10.0) as client:
        yield client


def link(base_url: str, http: httpx.Client, *replies: str, **claims: object) -> tuple[str, str]:
    """A new conversation with a card waiting, and the URL of a link to decide it (ada's, by default)."""
    thread = start(http, SCRIPTS, *replies)
    token = issue(KEYRING, thread, digest_of(http, thread), **claims)  # type: ignore[arg-type]
    return thread, f"{base_url}/decide?token={token}"


def test_the_link_page_renders_the_card_as_the_panel_does_and_accept_decides_it(
    context: BrowserContext, base_url: str, http: httpx.Client, store_path: Path
) -> None:
    thread, url = link(base_url, http, ADD, ACK)
    panel = open_thread(context, base_url, thread)
    expect(panel.locator(f"{CARD}.dial-pending .dial-accept")).to_be_visible()
    page = open_link(context, url)
    card = page.locator(CARD)
    expect(card.locator(".dial-preview")).to_have_text("Add the note 'buy milk'")
    expect(card.locator("code.dial-action")).to_have_text("add-note")
    expect(card.locator(".dial-payload")).to_have_text('{\n  "text": "buy milk"\n}')
    expect(page.locator(".dial-decision-intro")).to_contain_text(
        "This link lets you accept or dismiss this proposal"
    )
    assert [name.get_attribute("aria-label") for name in card.locator("button").all()] == [
        "Accept: Add the note 'buy milk'",
        "Dismiss: Add the note 'buy milk'",
    ]
    expect(page.locator(".dial-input, .dial-edit, .dial-instead, .dial-log")).to_have_count(0)  # no chat
    # One renderer: the card is built alike on both pages, but for the decisions each offers.
    assert structure(page, CARD, with_actions=False) == structure(panel, CARD, with_actions=False)
    assert events(store_path, thread, "decided") == []  # opening the page decided nothing

    page.get_by_role("button", name="Accept: Add the note 'buy milk'").click()
    expect(card.locator(".dial-outcome")).to_have_text("Done")
    expect(card).to_have_attribute("data-outcome", "done")
    expect(page.locator(".dial-status")).to_have_text("You accepted this proposal.")
    expect(page.locator(".dial-decision-title")).to_have_text("Decided")
    expect(card.locator("button")).to_have_count(0)
    # The panel, told by its change stream, shows the same card, ended, as the link page does.
    expect(panel.locator(f"{CARD} .dial-outcome")).to_have_text("Done")
    expect(panel.locator(".dial-assistant").last).to_have_text("Added.")
    assert structure(page, CARD) == structure(panel, CARD)
    [logged] = events(store_path, thread, "decided")
    assert (logged.decision, logged.by, logged.via) == ("accept", "ada", "link")
    assert page.errors == [] and panel.errors == []  # type: ignore[attr-defined]


def test_a_used_link_says_so_and_shows_how_the_card_ended(
    context: BrowserContext, base_url: str, http: httpx.Client
) -> None:
    _, url = link(base_url, http, ADD, ACK, decisions=["dismiss"])
    page = open_link(context, url)
    expect(page.locator(".dial-accept")).to_have_count(0)
    page.locator(".dial-dismiss").click()
    expect(page.locator(f"{CARD} .dial-outcome")).to_have_text("Dismissed")
    page.reload()
    expect(page.locator(".dial-decision-title")).to_have_text("This link cannot be used")
    expect(page.locator(".dial-status")).to_contain_text("This link has been used already")
    expect(page.locator(".dial-status")).to_have_attribute("role", "alert")
    expect(page.locator(f"{CARD} .dial-outcome")).to_have_text("Dismissed")
    expect(page.locator("dial-decision button")).to_have_count(0)
    assert page.errors == []  # type: ignore[attr-defined]


def test_a_destructive_accept_through_a_link_asks_for_a_second_yes(
    context: BrowserContext, base_url: str, http: httpx.Client
) -> None:
    _, url = link(base_url, http, REMOVE, ACK)
    page = open_link(context, url)
    expect(page.locator(f"{CARD}.dial-is-destructive .dial-destructive")).to_be_visible()
    page.locator(".dial-accept").click()
    expect(page.locator(".dial-confirm")).to_be_visible()
    expect(page.locator(CARD)).not_to_have_attribute("data-outcome", "failed")
    page.get_by_role("button", name="Yes, run it: Remove the note 'old'").click()
    expect(page.locator(f"{CARD} .dial-outcome")).to_have_text("Failed: no such note")


def test_an_edit_through_a_link_refused_then_run(
    context: BrowserContext, base_url: str, http: httpx.Client, store_path: Path
) -> None:
    thread, url = link(base_url, http, ADD, ACK, decisions=["accept", "edit"])
    page = open_link(context, url)
    page.locator(".dial-edit").click()
    expect(page.locator(".dial-json")).to_have_value('{\n  "text": "buy milk"\n}')
    page.locator(".dial-json").fill("{not json")
    page.locator(".dial-save").click()
    expect(page.locator(".dial-json-error")).to_contain_text("Not JSON")
    page.locator(".dial-json").fill('{"text": ""}')
    page.locator(".dial-save").click()
    expect(page.locator(".dial-issue")).to_have_text(
        "Refused (text): Give the note's text. Your edit: “Add the note ''”."
    )
    expect(page.locator(".dial-status")).to_contain_text("The edit was refused")
    expect(page.locator(".dial-accept")).to_have_count(0)  # a refused payload is never offered as it is
    page.locator(".dial-json").fill('{"text": "oat milk"}')
    page.locator(".dial-save").click()
    done = page.locator(f'{CARD}[data-outcome="done"]')
    expect(done.locator(".dial-outcome")).to_have_text("Done")
    expect(done.locator(".dial-preview")).to_have_text("Add the note 'oat milk'")
    assert [(each.decision, each.via) for each in events(store_path, thread, "decided")] == [
        ("edit", "link"),
        ("edit", "link"),
    ]
    assert page.errors == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_no_serious_accessibility_finding_on_the_link_pages(
    browser: Browser, base_url: str, http: httpx.Client, scheme: str
) -> None:
    if not AXE.is_file():
        pytest.fail("the accessibility test needs `npm ci --prefix tests/browser_node` (.ci/run does it)")
    # axe is injected as a script of the test's own, which the page's policy would refuse.
    context = browser.new_context(color_scheme=scheme, bypass_csp=True)  # type: ignore[arg-type]
    context.set_default_timeout(10_000)
    try:
        _, url = link(base_url, http, REMOVE, decisions=["accept", "edit", "dismiss"])
        _, expired = link(base_url, http, ADD, valid_for=60, now=1_000_000)
        for address, opened in ((url, True), (expired, False)):
            page = open_link(context, address)
            if opened:
                page.locator(".dial-summary").click()
                page.locator(".dial-accept").click()  # the destructive confirmation, open
                expect(page.locator(".dial-confirm")).to_be_visible()
            else:
                expect(page.locator(".dial-status")).to_contain_text("This link has expired")
            assert serious_accessibility_findings(page) == []
            assert small_targets(page, "dial-decision")[1] == []
            assert page.errors == []  # type: ignore[attr-defined]
    finally:
        context.close()


def test_a_card_under_an_approval_policy_says_how_many_approvals_it_has(
    context: BrowserContext, tmp_path: Path
) -> None:
    scripts: dict[str, list[str]] = {}
    keyring = new_keyring()
    app = links_app(tmp_path / "reviewed.db", scripts, keyring, MemoryUsedTokens(), domain=ReviewedNotes())
    with serving(app) as url, httpx.Client(base_url=url, timeout=10.0) as client:
        thread = start(client, scripts, ADD, ACK)
        digest = digest_of(client, thread)
        rita, ada = (issue(keyring, thread, digest, decider=who) for who in ("rita", "ada"))
        page = open_link(context, f"{url}/decide?token={ada}")  # the browser is ada's
        expect(page.locator(f"{CARD} .dial-approvals")).to_have_text("0 of 2 approvals")
        first = client.post("/decide", json={"token": rita, "decision": "accept"}, headers={"x-user": "rita"})
        assert first.status_code == 200, first.text
        page = open_link(context, f"{url}/decide?token={ada}")
        expect(page.locator(f"{CARD} .dial-approvals")).to_have_text("1 of 2 approvals: rita")
        panel = open_thread(context, url, thread)
        expect(panel.locator(f"{CARD} .dial-approvals")).to_have_text("1 of 2 approvals: rita")
