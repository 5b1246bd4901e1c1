"""Several workers on one PostgreSQL store, as a person and as a client meet them: a decision made through one
worker reaches a page another serves at once (LISTEN/NOTIFY, no poll), a worker killed mid-turn loses nothing and
runs nothing twice, and a page that finds the conversation busy in another worker retries until it is free."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import psycopg
from playwright.sync_api import Browser, Page, expect

from dial_runtime import open_store

from ..browser import say
from ..fakes import envelope, suggest
from ..web_server import changes, decode, free_port, run_input, server_process

COMMAND = [sys.executable, "-m", "dial_runtime.cli", "serve"]
ADD = envelope(suggest("add-note", '{"text":"buy milk"}'))
NOTED = "<dial><dial-inform>Noted.</dial-inform></dial>"
#: Longer than any wait below, shorter than the 5 s the panel once polled at: an update seen within it was pushed.
PUSHED_WITHIN_MS = 3_000


@contextlib.contextmanager
def serve(
    store: str, script: Path, *, domain: str = "tests.web_domains:WebNotes", workers: int = 1
) -> Iterator[str]:
    """``dial-runtime serve`` on ``store`` with a scripted agent; its base URL once it answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    options = ["--agent", f"script:{script}", "--domain", domain, "--store", store, "--workers", str(workers)]
    with server_process([*COMMAND, *options, "--port", str(port)], f"{url}/conversations"):
        yield url


def script(tmp_path: Path, *replies: str) -> Path:
    path = tmp_path / "replies.json"
    path.write_text(json.dumps(list(replies)))
    return path


def panel(browser: Browser, url: str, thread: str) -> Page:
    page = browser.new_page()
    page.set_default_timeout(15_000)
    page.goto(f"{url}/?thread={thread}")
    expect(page.locator("dial-chat .dial-input")).to_be_visible()
    return page


def stored_types(store: str, conversation: str) -> list[str]:
    """The types of the conversation's stored events, read in a thread (Playwright's loop runs in this one)."""

    async def read() -> list[str]:
        opened = open_store(store)
        try:
            return [entry.event.type for entry in await opened.read(conversation)]
        finally:
            await opened.aclose()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, read).result(timeout=30)


def test_a_decision_through_one_worker_reaches_a_stream_another_serves(tmp_path: Path, pg_schema_url: str) -> None:
    replies = script(tmp_path, ADD, "<dial/>")
    with serve(pg_schema_url, replies) as first, serve(pg_schema_url, replies) as second:
        events = decode(httpx.post(f"{first}/agui", json=run_input("w", words="add milk"), timeout=10).text)
        (interrupt,) = events[-1]["outcome"]["interrupts"]
        shown = events[-1]["metadata"]["seq"]
        with changes(second, "w") as stream:
            assert stream.next_seq() == shown
            resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]
            decided = decode(httpx.post(f"{first}/agui", json=run_input("w", resume=resume), timeout=10).text)
            done = decided[-1]["metadata"]["seq"]
            assert stream.until(done) == done  # each read bounded by the stream's 5 s timeout
        snapshot = decode(httpx.post(f"{second}/agui", json=run_input("w"), timeout=10).text)
        results = [json.loads(m["content"]) for m in snapshot[1]["messages"] if m["role"] == "tool"]
        assert [result["status"] for result in results] == ["done"]


def test_a_tab_on_another_worker_updates_without_a_poll(
    tmp_path: Path, pg_schema_url: str, browser: Browser
) -> None:
    replies = script(tmp_path, ADD, '<dial><dial-acknowledge of="sg-1">Added.</dial-acknowledge></dial>')
    with serve(pg_schema_url, replies) as first, serve(pg_schema_url, replies) as second:
        deciding = panel(browser, first, "tabs")
        say(deciding, "add milk")
        expect(deciding.locator(".dial-card.dial-pending")).to_be_visible()
        watching = panel(browser, second, "tabs")
        expect(watching.locator(".dial-card.dial-pending")).to_be_visible()
        runs: list[str] = []
        watching.on("request", lambda request: runs.append(request.url) if request.url.endswith("/agui") else None)
        deciding.locator(".dial-accept").click()
        expect(watching.locator('.dial-card[data-outcome="done"]')).to_be_visible(timeout=PUSHED_WITHIN_MS)
        expect(watching.locator(".dial-accept")).to_have_count(0)
        expect(watching.locator(".dial-assistant").last).to_have_text("Added.", timeout=PUSHED_WITHIN_MS)
        assert 1 <= len(runs) <= 3  # snapshots taken on changes, not on a timer
        deciding.close()
        watching.close()


def test_a_worker_killed_mid_turn_with_the_panel_open(
    tmp_path: Path, pg_schema_url: str, browser: Browser
) -> None:
    """The action runs in one of two workers; it is killed: the panel reloads from the other, which shows the
    action failed (interrupted), carries on with the conversation, and never runs the action again."""
    replies = script(tmp_path, ADD, NOTED)
    running = tmp_path / "running.pid"
    os.environ["DIAL_TEST_RUNNING_PID"] = str(running)
    try:
        with serve(pg_schema_url, replies, domain="tests.web_domains:TellingStuckNotes", workers=2) as url:
            page = panel(browser, url, "killed")
            say(page, "add milk")
            page.locator(".dial-card.dial-pending .dial-accept").click()
            deadline = time.monotonic() + 15
            while not running.exists() or not running.read_text():
                assert time.monotonic() < deadline, "the action did not start"
                page.wait_for_timeout(50)
            os.kill(int(running.read_text()), signal.SIGKILL)
            failed = page.locator('.dial-card[data-outcome="failed"]')
            expect(failed).to_be_visible(timeout=15_000)
            expect(failed).to_have_attribute("data-code", "interrupted")
            expect(failed.locator(".dial-outcome")).to_have_text("Failed: the process stopped")
            expect(page.locator(".dial-status")).to_have_text("Reconnected.")
            expect(page.locator(".dial-working")).to_be_hidden()
            say(page, "and now?")
            expect(page.locator(".dial-assistant").last).to_have_text("Noted.")
            page.close()
    finally:
        del os.environ["DIAL_TEST_RUNNING_PID"]
    types = stored_types(pg_schema_url, "killed")
    assert types.count("action-started") == 1 and types.count("said") == 2


def test_the_panel_retries_while_another_worker_holds_the_conversation(
    tmp_path: Path, pg_schema_url: str, browser: Browser
) -> None:
    replies = script(tmp_path, ADD, NOTED)
    with serve(pg_schema_url, replies) as url:
        page = panel(browser, url, "busy")
        say(page, "add milk")
        expect(page.locator(".dial-card.dial-pending")).to_be_visible()
        resumes: list[Any] = []
        page.on("request", lambda request: resumes.append(1) if "resume" in (request.post_data or "") else None)
        with psycopg.connect(pg_schema_url, autocommit=True) as other_worker:
            other_worker.execute("SELECT pg_advisory_lock(hashtextextended('busy', 0))")
            page.locator(".dial-accept").click()
            deadline = time.monotonic() + 10
            while len(resumes) < 2:  # refused busy once at least, and tried again
                assert time.monotonic() < deadline, "the panel did not try again"
                page.wait_for_timeout(50)
            expect(page.locator(".dial-card.dial-pending")).to_be_visible()
            other_worker.execute("SELECT pg_advisory_unlock(hashtextextended('busy', 0))")
        expect(page.locator('.dial-card[data-outcome="done"]')).to_be_visible()
        assert stored_types(pg_schema_url, "busy").count("action-started") == 1
        page.close()
