"""Headless Chromium for the panel's tests and screenshots (Debian's ``chromium`` driven by Playwright), and what a
person does and sees there."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

CHROMIUM = os.environ.get("DIAL_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """A headless Chromium (``DIAL_TEST_CHROMIUM`` or /usr/bin/chromium), closed after the block."""
    if not os.path.exists(CHROMIUM):
        raise RuntimeError(f"the browser tests need Chromium at {CHROMIUM}: apt-get install chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, timeout=30_000)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One Chromium for a test module."""
    with chromium() as launched:
        yield launched


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    """A fresh browser context (cookies, storage) for each test, its waits bounded at 10 s."""
    made = browser.new_context()
    made.set_default_timeout(10_000)
    yield made
    made.close()


def watched_page(context: BrowserContext, url: str) -> Page:
    """A new page at ``url`` whose errors are kept in ``page.errors`` (a test asserts there are none)."""
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.errors = errors  # type: ignore[attr-defined]
    page.goto(url)
    return page


def open_thread(context: BrowserContext, base_url: str, thread: str) -> Page:
    """A page of the panel on conversation ``thread``, once its input is shown; the page's errors are kept in
    ``page.errors`` (a test asserts there are none)."""
    page = watched_page(context, f"{base_url}/?thread={thread}")
    expect(page.locator("dial-chat .dial-input")).to_be_visible()
    return page


def say(page: Page, words: str) -> None:
    """Type ``words`` into the panel and send them, as a person does."""
    page.locator(".dial-input").fill(words)
    page.locator(".dial-input").press("Enter")


#: Every part of the panel's conversation a person sees, as a list of (kind, data attributes, text, buttons'
#: accessible names): the same list live, after a reload and in a second tab means they show the same thing.
SHOWN_JS = """() => [...document.querySelectorAll('dial-chat .dial-log > :not([hidden])')].map((node) => [
  node.className.replace(/\\s*dial-pending/, ''),
  JSON.stringify(Object.assign({}, node.dataset)),
  node.innerText,
  node.querySelector('.dial-payload') ? node.querySelector('.dial-payload').textContent : null,
  [...node.querySelectorAll('button')].map((b) => b.getAttribute('aria-label') || b.textContent),
])"""


def shown(page: Page) -> list[list[object]]:
    """What the panel shows of the conversation, node by node (see ``SHOWN_JS``)."""
    return list(page.evaluate(SHOWN_JS))


def open_link(context: BrowserContext, url: str) -> Page:
    """A page of the decision link ``url``, once it shows what the link is for; the page's errors are kept in
    ``page.errors``."""
    page = watched_page(context, url)
    expect(page.locator("dial-decision .dial-decision-title")).to_be_visible()
    return page


#: A node and everything below it as [tag, classes, data attributes, hidden, accessible name, children], text
#: nodes as their text: two renderings with the same structure give the same list. ``dial-pending`` is left out
#: (a page's own state), and, given ``false``, the decision controls (``.dial-actions``) a page offers.
STRUCTURE_JS = """([selector, withActions]) => {
  const of = (node) => node.nodeType === Node.TEXT_NODE ? ['#text', node.textContent] : [
    node.tagName,
    node.className.replace(/\\s*dial-pending/, ''),
    JSON.stringify(Object.assign({}, node.dataset)),
    node.hidden,
    node.getAttribute('aria-label'),
    !withActions && node.classList.contains('dial-actions') ? [] : [...node.childNodes].map(of),
  ];
  return of(document.querySelector(selector));
}"""


def structure(page: Page, selector: str, *, with_actions: bool = True) -> list[object]:
    """The structure of the node ``selector`` names (see ``STRUCTURE_JS``)."""
    return list(page.evaluate(STRUCTURE_JS, [selector, with_actions]))


#: axe-core, as npm installed it for the browser tests (tests/browser_node).
AXE = Path(__file__).parent / "browser_node" / "node_modules" / "axe-core" / "axe.min.js"


def serious_accessibility_findings(page: Page) -> list[tuple[str, str, list[Any]]]:
    """What axe-core finds serious or critical on ``page`` as it stands: each rule, its impact, its targets."""
    page.add_script_tag(path=str(AXE))
    found = page.evaluate("async () => (await axe.run(document)).violations")
    return [
        (v["id"], v["impact"], [n["target"] for n in v["nodes"]])
        for v in found
        if v["impact"] in ("serious", "critical")
    ]


def small_targets(page: Page, element: str) -> tuple[int, list[Any]]:
    """How many buttons and summaries inside ``element`` are visible, and those smaller than 44 by 44 pixels
    (class, width, height)."""
    sizes = page.evaluate(
        f"() => [...document.querySelectorAll('{element} button, {element} summary')]"
        ".filter((b) => b.offsetParent).map((b) => [b.className, b.offsetWidth, b.offsetHeight])"
    )
    return len(sizes), [size for size in sizes if size[1] < 44 or size[2] < 44]
