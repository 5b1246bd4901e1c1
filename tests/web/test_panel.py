"""The panel as a product, in headless Chromium against a real server: one conversation live, after a reload and
in a second tab; payloads exact to the digit; refused proposals, notices and failures shown; the working state and
Stop; markdown rendered safely; a destructive accept confirmed; the empty state, the favicon, and no serious
accessibility finding (axe-core) in light and dark."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect
from starlette.applications import Starlette

from dial_runtime import LogEntry, ScriptedAgent, open_store
from dial_runtime.web import create_app, scripted_agents

from ..browser import AXE, open_thread, say, serious_accessibility_findings, shown, small_targets
from ..fakes import envelope, suggest
from ..web_domains import WebNotes
from ..web_server import free_port, serving

STATIC = Path(__file__).parents[2] / "dial_runtime" / "web" / "static"
BROWSER_NODE = Path(__file__).parents[1] / "browser_node" / "node_modules"

CHOICE = envelope(
    '<dial-ask id="which" response-type="choice">Which list?'
    '<dial-option value="home">Home</dial-option><dial-option value="work">Work</dial-option></dial-ask>'
)
#: A conversation holding every kind of item: markdown prose, a proposal refused beside a card, an edit refused
#: then a valid one, a destructive accept, a choice, words given instead of deciding.
RICH = [
    envelope(
        suggest("add-note", '{"text":"milk"}'),
        suggest("add-note", '{"text":""}'),
        prose="Two proposals, **one** refused.",
    ),
    envelope(suggest("remove-note", '{"text":"oat milk"}')),
    CHOICE,
    envelope(suggest("add-note", '{"text":"tea"}')),
    "<dial><dial-inform>Fine, no tea.</dial-inform></dial>",
]
BIG = 9007199254740993
LISTING = envelope(suggest("list-notes", "{}"))

SCRIPTS: dict[str, list[str]] = {}
#: Threads whose agent waits this long (seconds) before each reply.
SLOW: dict[str, float] = {}
#: Threads whose agent streams each reply in pieces, this long (seconds) before each.
TRICKLING: dict[str, float] = {}
TRICKLE_PIECES = 12
_COUNT = itertools.count()
MAX_TURNS = 8
REPLY_WITHIN = 3.0  # seconds: a slower agent is one that never answered


class SlowAgent:
    """A scripted agent that waits before each reply (never answering in time, when the wait is long)."""

    def __init__(self, agent: ScriptedAgent, wait: float) -> None:
        self._agent = agent
        self._wait = wait

    async def send(self, message: str) -> Any:
        await anyio.sleep(self._wait)
        return self._agent.send(message)


class TricklingAgent:
    """A scripted agent that streams each reply in ``TRICKLE_PIECES`` pieces, pausing before each."""

    def __init__(self, agent: ScriptedAgent, pause: float) -> None:
        self._agent = agent
        self._pause = pause

    def send(self, message: str) -> str:
        return self._agent.send(message)

    async def stream(self, message: str) -> AsyncIterator[str]:
        reply = self._agent.send(message)
        size = -(-len(reply) // TRICKLE_PIECES)
        for start in range(0, len(reply), size):
            await anyio.sleep(self._pause)
            yield reply[start : start + size]


def agents(conversation_id: str, log: Sequence[LogEntry]) -> Any:
    scripted = scripted_agents(SCRIPTS)(conversation_id, log)
    if conversation_id in TRICKLING:
        return TricklingAgent(scripted, TRICKLING[conversation_id])
    wait = SLOW.get(conversation_id)
    return scripted if wait is None else SlowAgent(scripted, wait)


class DescribedNotes(WebNotes):
    """The notes domain, each action described (as the agent's system prompt and the panel's empty state read)."""

    def describe(self, action: str) -> str:
        return f"the `{action}` action"


def domain_app(store: str) -> Starlette:
    """The web surface on the described notes domain."""
    return create_app(
        store=store, domain=DescribedNotes(), agent=agents, timeout=REPLY_WITHIN, max_turns=MAX_TURNS
    )


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:{tmp_path_factory.mktemp('panel') / 'conversations.db'}"


@pytest.fixture(scope="module")
def base_url(store_url: str) -> Iterator[str]:
    with serving(domain_app(store_url)) as url:
        yield url


def new_thread(*replies: str, wait: float | None = None) -> str:
    thread = f"p{next(_COUNT)}"
    SCRIPTS[thread] = list(replies)
    if wait is not None:
        SLOW[thread] = wait
    return thread


def open_page(context: BrowserContext, base_url: str, thread: str) -> Page:
    """A page on ``thread``; page errors are kept in ``page.errors``."""
    return open_thread(context, base_url, thread)


def card(page: Page, suggestion: str) -> Any:
    return page.locator(f'.dial-card[data-suggestion="{suggestion}"]')


def rich_conversation(page: Page) -> None:
    """Drive ``RICH`` as a person does."""
    say(page, "add milk")
    first = card(page, "sg-1")
    first.locator(".dial-edit").click()
    page.locator(".dial-json").fill('{"text": ""}')
    page.locator(".dial-save").click()
    expect(first.locator(".dial-issue")).to_have_text(
        "Refused (text): Give the note's text. Your edit: “Add the note ''”."
    )
    page.locator(".dial-json").fill('{"text": "oat milk"}')
    page.locator(".dial-save").click()
    removal = card(page, "sg-3")
    removal.locator(".dial-accept").click()
    removal.locator(".dial-confirm").click()
    expect(removal.locator(".dial-outcome")).to_have_text("Done")
    page.locator(".dial-option", has_text="Work").click()
    expect(card(page, "sg-4")).to_have_attribute("data-status", "pending")
    say(page, "no tea")
    expect(page.locator(".dial-assistant").last).to_have_text("Fine, no tea.")


def test_live_a_reload_and_a_second_tab_show_the_same_conversation(context: BrowserContext, base_url: str) -> None:
    thread = new_thread(*RICH)
    page = open_page(context, base_url, thread)
    rich_conversation(page)
    live = shown(page)
    kinds = [str(node[0]).split()[0] for node in live]
    assert kinds.count("dial-card") == 3 and kinds.count("dial-refused") == 1
    assert [text for kind, _, text, *_ in live if "dial-user" in kind] == ["add milk", "work", "no tea"]
    page.reload()
    expect(page.locator(".dial-assistant").last).to_have_text("Fine, no tea.")
    assert shown(page) == live
    second = open_page(context, base_url, thread)
    expect(second.locator(".dial-assistant").last).to_have_text("Fine, no tea.")
    assert shown(second) == live
    assert page.errors == [] and second.errors == []  # type: ignore[attr-defined]


def test_a_card_shows_the_domain_and_the_outcome_in_words_never_raw_json(
    context: BrowserContext, base_url: str
) -> None:
    """The domain's preview says what would run; the agent's words are shown apart, marked as the agent's, never
    in its place; each field shows, the whole JSON is folded away."""
    thread = new_thread(envelope(suggest("add-note", '{"text":"milk"}', text="I, the agent, say: add it")))
    page = open_page(context, base_url, thread)
    say(page, "add milk")
    pending = card(page, "sg-1")
    expect(pending.locator("code.dial-action")).to_have_text("add-note")
    expect(pending.locator(".dial-preview")).to_have_text("Add the note 'milk'")
    expect(pending.locator(".dial-words")).to_have_text("The agent's words: “I, the agent, say: add it”")
    expect(pending.locator(".dial-field-value")).to_have_text('"milk"')
    expect(pending.locator(".dial-payload")).to_be_hidden()
    pending.locator(".dial-details .dial-summary").click()
    expect(pending.locator(".dial-payload")).to_have_text('{\n  "text": "milk"\n}')
    pending.locator(".dial-accept").click()
    expect(pending.locator(".dial-outcome")).to_have_text("Done")
    expect(pending).not_to_contain_text('"result"')


def test_a_proposal_done_already_is_marked_live_and_after_a_reload(context: BrowserContext, base_url: str) -> None:
    again = envelope(suggest("add-note", '{"text":"milk"}'))
    thread = new_thread(again, again)
    page = open_page(context, base_url, thread)
    say(page, "add milk")
    card(page, "sg-1").locator(".dial-accept").click()
    for seen in (page, open_page(context, base_url, thread)):
        expect(card(seen, "sg-1").locator(".dial-done-before")).to_be_hidden()
        repeat = card(seen, "sg-2").locator(".dial-done-before")
        expect(repeat).to_be_visible()
        expect(repeat).to_contain_text("Already done at ")
        expect(repeat).to_contain_text(" as sg-1")


def test_a_refused_proposal_is_a_muted_line_with_its_reason_never_a_card(
    context: BrowserContext, base_url: str
) -> None:
    thread = new_thread(RICH[0])
    page = open_page(context, base_url, thread)
    say(page, "add milk")
    expect(page.locator(".dial-card")).to_have_count(1)
    refused = page.locator(".dial-refused")
    expect(refused).to_have_text("A proposal was refused and not shown: add-note — Give the note's text.")
    expect(refused.locator("button")).to_have_count(0)
    page.reload()
    expect(page.locator(".dial-refused")).to_have_count(1)


def test_payloads_are_shown_and_edited_to_the_digit(
    context: BrowserContext, base_url: str, store_url: str
) -> None:
    """Past 2**53 a browser's numbers round: the panel shows the payload's JSON text and sends an edit as the
    text the person wrote, so what runs is what they saw."""
    thread = new_thread(
        envelope(suggest("add-note", f'{{"text":"pay","amount_cents":{BIG}}}')),
        envelope(suggest("add-note", f'{{"text":"pay","amount_cents":{BIG}}}')),
        "<dial><dial-inform>Paid.</dial-inform></dial>",
    )
    page = open_page(context, base_url, thread)
    say(page, "pay")
    first = card(page, "sg-1")
    expect(first.locator(".dial-payload")).to_contain_text(f'"amount_cents": {BIG}')
    first.locator(".dial-accept").click()
    expect(first.locator(".dial-outcome")).to_have_text("Done")  # the digest matched: no number was rounded
    second = card(page, "sg-2")
    second.locator(".dial-edit").click()
    expect(page.locator(".dial-json")).to_have_value(f'{{\n  "text": "pay",\n  "amount_cents": {BIG}\n}}')
    page.locator(".dial-json").fill(f'{{"text": "pay", "amount_cents": {BIG + 2}}}')
    page.locator(".dial-save").click()
    expect(page.locator(".dial-assistant").last).to_have_text("Paid.")
    ran = in_a_thread(started_payloads, store_url, thread)
    assert [payload["amount_cents"] for payload in ran] == [BIG, BIG + 2]
    page.reload()
    expect(card(page, "sg-2").locator(".dial-payload")).to_contain_text(f'"amount_cents": {BIG + 2}')


def in_a_thread(function: Any, *args: Any) -> Any:
    """Run an async function to its end on a thread of its own (Playwright's sync API holds this one's loop)."""
    box: list[Any] = []
    worker = threading.Thread(target=lambda: box.append(anyio.run(function, *args)))
    worker.start()
    worker.join(timeout=10)
    return box[0]


async def stored_types(store_url: str, thread: str) -> list[str]:
    store = open_store(store_url)
    try:
        return [entry.event.type for entry in await store.read(thread)]
    finally:
        await store.aclose()


async def started_payloads(store_url: str, thread: str) -> list[Any]:
    store = open_store(store_url)
    try:
        return [entry.event.payload for entry in await store.read(thread) if entry.event.type == "action-started"]
    finally:
        await store.aclose()


def test_a_destructive_accept_asks_for_a_second_yes(context: BrowserContext, base_url: str) -> None:
    thread = new_thread(
        envelope(suggest("remove-note", '{"text":"old"}')), "<dial><dial-inform>Ok.</dial-inform></dial>"
    )
    page = open_page(context, base_url, thread)
    say(page, "remove old")
    removal = card(page, "sg-1")
    removal.get_by_role("button", name="Accept: Remove the note 'old'").click()
    expect(removal.locator(".dial-confirm")).to_be_visible()
    expect(removal).not_to_have_attribute("data-outcome", "done")
    removal.locator(".dial-cancel").click()
    expect(removal.locator(".dial-confirm")).to_have_count(0)
    removal.locator(".dial-accept").click()
    removal.locator(".dial-confirm").click()
    expect(removal.locator(".dial-outcome")).to_have_text("Failed: no such note")


def test_an_agent_that_never_answers_is_said_each_time_and_after_a_reload(
    context: BrowserContext, base_url: str
) -> None:
    thread = new_thread("<dial><dial-inform>late</dial-inform></dial>", "late", wait=30)
    page = open_page(context, base_url, thread)
    say(page, "hello")
    expect(page.locator('.dial-notice[data-what="no-reply"]')).to_have_count(1, timeout=15_000)
    say(page, "hello again")
    expect(page.locator('.dial-notice[data-what="no-reply"]')).to_have_count(2, timeout=15_000)
    expect(page.locator('.dial-notice[data-what="no-reply"]').first).to_contain_text("The agent did not answer")
    page.reload()
    expect(page.locator('.dial-notice[data-what="no-reply"]')).to_have_count(2)


def test_the_turn_limit_offers_a_way_on(context: BrowserContext, base_url: str) -> None:
    thread = new_thread(*[LISTING] * MAX_TURNS, "<dial><dial-inform>All listed.</dial-inform></dial>")
    page = open_page(context, base_url, thread)
    say(page, "list them again and again")
    limit = page.locator('.dial-notice[data-what="turn-limit"]')
    expect(limit).to_contain_text(f"stopped after {MAX_TURNS} turns")
    limit.locator(".dial-continue").click()
    expect(page.locator(".dial-assistant").last).to_have_text("All listed.")
    expect(page.locator(".dial-continue")).to_have_count(0)


def test_between_send_and_the_reply_the_panel_is_working_and_stop_ends_it(
    context: BrowserContext, base_url: str
) -> None:
    thread = new_thread("<dial><dial-inform>Done thinking.</dial-inform></dial>", wait=0.8)
    page = open_page(context, base_url, thread)
    say(page, "think")
    expect(page.locator(".dial-working")).to_be_visible()
    expect(page.locator(".dial-send")).to_be_disabled()
    expect(page.locator(".dial-stop")).to_be_visible()
    expect(page.locator(".dial-assistant")).to_have_text("Done thinking.")
    expect(page.locator(".dial-working")).to_be_hidden()
    expect(page.locator(".dial-stop")).to_be_hidden()
    expect(page.locator(".dial-send")).to_be_enabled()
    SLOW[thread] = 30
    say(page, "think longer")
    page.locator(".dial-stop").click()
    expect(page.locator(".dial-status")).to_have_text("You stopped the agent.")
    expect(page.locator(".dial-stop")).to_be_hidden()
    expect(page.locator(".dial-send")).to_be_enabled()


def test_a_tab_opened_during_a_turn_shows_it_working_not_stopped(context: BrowserContext, base_url: str) -> None:
    """A snapshot taken mid-turn holds what the server would record were the turn's worker dead (the turn
    stopped): the panel shows the turn working instead, until the change stream says it ended."""
    thread = new_thread("<dial><dial-inform>Here I am.</dial-inform></dial>", wait=2.2)
    page = open_page(context, base_url, thread)
    say(page, "take your time")
    expect(page.locator(".dial-working")).to_be_visible()
    second = open_page(context, base_url, thread)
    expect(second.locator(".dial-user")).to_have_text("take your time")
    expect(second.locator(".dial-working")).to_be_visible()
    expect(second.locator(".dial-notice")).to_have_count(0)
    expect(second.locator(".dial-assistant")).to_have_text("Here I am.", timeout=15_000)
    expect(second.locator(".dial-working")).to_be_hidden()


def test_a_reload_during_a_turn_shows_it_working_then_as_it_ended(
    context: BrowserContext, base_url: str, store_url: str
) -> None:
    """A page that goes away mid-turn tells the server its run goes on without it: the reloaded page shows the
    turn working, then the turn as it ended, and the log holds no interruption."""
    told = "Here is a long answer, told slowly, piece by piece."
    thread = new_thread(f"<dial><dial-inform>{told}</dial-inform></dial>")
    TRICKLING[thread] = 0.3
    page = open_page(context, base_url, thread)
    say(page, "take your time")
    expect(page.locator(".dial-assistant")).not_to_have_text("")  # the reply has begun to stream in
    page.reload()
    expect(page.locator(".dial-user")).to_have_text("take your time")
    expect(page.locator(".dial-working")).to_be_visible()
    expect(page.locator(".dial-notice")).to_have_count(0)
    expect(page.locator(".dial-assistant")).to_have_text(told, timeout=15_000)
    expect(page.locator(".dial-working")).to_be_hidden()
    expect(page.locator(".dial-notice")).to_have_count(0)
    assert "interrupted" not in in_a_thread(stored_types, store_url, thread)
    assert page.errors == []  # type: ignore[attr-defined]


def test_a_click_while_the_server_restarts_is_sent_when_it_is_back(
    context: BrowserContext, store_url: str, browser: Browser
) -> None:
    port = free_port()
    thread = new_thread(
        envelope(suggest("add-note", '{"text":"milk"}')), "<dial><dial-inform>Added.</dial-inform></dial>"
    )
    with serving(domain_app(store_url), port) as url:
        page = open_page(context, url, thread)
        say(page, "add milk")
        expect(card(page, "sg-1").locator(".dial-accept")).to_be_visible()
    card(page, "sg-1").locator(".dial-accept").click()
    status = page.locator(".dial-status")
    expect(status).to_contain_text(
        "cannot be reached: your Accept of “Add the note 'milk'” will be sent when it is back"
    )
    page.wait_for_timeout(600)  # past a retry's wait: the decision queued, nothing else can be decided meanwhile
    expect(card(page, "sg-1").locator(".dial-dismiss")).to_be_disabled()
    expect(page.locator(".dial-send")).to_be_disabled()
    with serving(domain_app(store_url), port):
        expect(status).to_have_text("Reconnected: your Accept of “Add the note 'milk'” was sent.", timeout=15_000)
        expect(card(page, "sg-1").locator(".dial-outcome")).to_have_text("Done")
        expect(page.locator(".dial-assistant")).to_have_text("Added.")


def test_agent_text_is_markdown_rendered_safely(context: BrowserContext, base_url: str) -> None:
    text = (
        "**bold**, `code`, a [link](https://example.org/) and a [trap](javascript:window.__xss=1)\n\n"
        "- one\n- two\n\n&lt;img src=x onerror=&quot;window.__xss=2&quot;&gt; ![pixel](https://example.org/p.png)"
    )
    thread = new_thread(f"<dial><dial-inform>{text}</dial-inform></dial>")
    page = open_page(context, base_url, thread)
    say(page, "format")
    bubble = page.locator(".dial-assistant")
    expect(bubble.locator("strong")).to_have_text("bold")
    expect(bubble.locator("code")).to_have_text("code")
    expect(bubble.locator("li")).to_have_count(2)
    link = bubble.locator("a", has_text="link")
    expect(link).to_have_attribute("href", "https://example.org/")
    expect(link).to_have_attribute("rel", "noopener noreferrer nofollow")
    expect(link).to_have_attribute("target", "_blank")
    # An image is at most a link to it (nothing loads), a javascript: link is text.
    assert [a.get_attribute("href") for a in bubble.locator("a").all()] == [
        "https://example.org/",
        "https://example.org/p.png",
    ]
    expect(bubble).to_contain_text("[trap](javascript:window.__xss=1)")
    expect(bubble).to_contain_text('<img src=x onerror="window.__xss=2">')
    assert bubble.locator("img, script").count() == 0
    assert page.evaluate("window.__xss") is None


def test_an_acknowledgement_the_log_contradicts_is_the_agents_claim_live_and_after_a_reload(
    context: BrowserContext, base_url: str
) -> None:
    invented = envelope('<dial-acknowledge of="sg-9" yield="sg-9:done">Done: I paid the bill.</dial-acknowledge>')
    thread = new_thread(invented, "<dial><dial-acknowledge>Sorry.</dial-acknowledge></dial>")
    page = open_page(context, base_url, thread)
    say(page, "pay it")
    for seen in (page, open_page(context, base_url, thread)):
        claim = seen.locator(".dial-assistant.dial-unconfirmed")
        expect(claim).to_have_text("Done: I paid the bill.")
        expect(seen.locator(".dial-unconfirmed-note")).to_have_count(1)
        expect(seen.locator(".dial-unconfirmed-note")).to_contain_text("Not confirmed by the runtime")
        expect(seen.locator(".dial-card")).to_have_count(0)


def test_an_empty_conversation_says_what_the_domain_can_do(context: BrowserContext, base_url: str) -> None:
    page = open_page(context, base_url, new_thread())
    empty = page.locator(".dial-empty")
    expect(empty).to_contain_text("Ask the agent to do something.")
    expect(empty.locator(".dial-capability")).to_have_count(len(WebNotes.actions))
    expect(empty.locator(".dial-capability").nth(1)).to_contain_text(
        "remove-note the remove-note action destructive"
    )
    say(page, "hello")
    expect(empty).to_be_hidden()


def test_the_page_has_a_favicon(context: BrowserContext, base_url: str) -> None:
    page = open_page(context, base_url, new_thread())
    href = page.locator('link[rel="icon"]').get_attribute("href")
    response = page.request.get(f"{base_url}/{href}")
    assert response.ok and response.headers["content-type"].startswith("image/svg+xml")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_no_serious_accessibility_finding_and_targets_a_finger_can_hit(
    browser: Browser, base_url: str, scheme: str
) -> None:
    if not AXE.is_file():
        pytest.fail("the accessibility test needs `npm ci --prefix tests/browser_node` (.ci/run does it)")
    context = browser.new_context(color_scheme=scheme)  # type: ignore[arg-type]
    context.set_default_timeout(10_000)
    try:
        thread = new_thread(RICH[0], CHOICE)
        page = open_page(context, base_url, thread)
        say(page, "add milk")
        expect(card(page, "sg-1").locator(".dial-accept")).to_be_visible()
        page.locator(".dial-summary").click()
        assert serious_accessibility_findings(page) == []
        measured, small = small_targets(page, "dial-chat")
        assert measured and small == []
        accept = page.get_by_role("button", name="Accept: Add the note 'milk'")
        expect(accept).to_have_count(1)
        accept.focus()
        page.keyboard.press("Tab")
        ring = page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle")
        assert ring == "solid"
    finally:
        context.close()


def test_the_vendored_markdown_renderer_is_the_npm_package_unchanged() -> None:
    built = BROWSER_NODE / "markdown-it" / "dist" / "browser" / "markdown-it.esm.min.mjs"
    if not built.is_file():
        pytest.fail("this test needs `npm ci --prefix tests/browser_node` (.ci/run does it)")
    assert (STATIC / "markdown-it.min.js").read_bytes() == built.read_bytes()
    version = json.loads((BROWSER_NODE / "markdown-it" / "package.json").read_text())["version"]
    assert f"markdown-it {version}" in (STATIC / "markdown-it.LICENSE.txt").read_text()
