"""Write the web surface page's screenshots of the ``<dial-chat>`` panel into docs/images/.

Runs the web surface on 127.0.0.1 with a scripted agent and drives Debian's headless Chromium (Playwright):
``python scripts/screenshots.py [--out docs/images]``. Each PNG is one conversation, as a person sees it:

- ``panel-pending.png``: a card waiting, a proposal the domain refused beside it (light theme);
- ``panel-dark.png``: the same in the dark theme;
- ``panel-choice.png``: a choice asked;
- ``panel-mobile.png``: the choice at a phone's width;
- ``panel-destructive.png``: a destructive card asking for the second yes;
- ``panel-refused.png``: an edit the domain refused, with its reason;
- ``panel-error.png``: an agent that did not answer, and a server that cannot be reached;
- ``inbox-light.png``, ``inbox-dark.png``: the inbox (``/inbox``) of a reviewer, four cards waiting in four
  conversations (a deadline's countdown, a destructive one, one two reviewers approve and another reviewer has
  claimed), two of them selected;
- ``inbox-mobile.png``, ``inbox-mobile-dark.png``: the same at a phone's width.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playwright.sync_api import Browser, Page

from dial_runtime import Conversation, ScriptedAgent, open_store, scripted_human
from dial_runtime.web import create_app, scripted_agents
from tests.browser import chromium, say
from tests.web.test_web_inbox import REMOVE, SHARE, DeskNotes, _Scripts, note, on_a_thread, propose
from tests.web_domains import WebNotes
from tests.web_server import serving

PENDING = (
    "I can add that. Note that **one** of my proposals was not valid:\n<dial>"
    '<dial-suggest action="add-note"><dial-payload>{"text":"buy oat milk"}</dial-payload></dial-suggest>'
    '<dial-suggest action="add-note"><dial-payload>{"text":""}</dial-payload></dial-suggest></dial>'
)
CHOICE = (
    '<dial><dial-ask id="which" response-type="choice">Which list should it go on?'
    '<dial-option value="home">Home</dial-option><dial-option value="work">Work</dial-option>'
    "</dial-ask></dial>"
)
SCRIPTS = {
    "pending": [PENDING],
    "dark": [PENDING],
    "choice": [CHOICE],
    "mobile": [CHOICE],
    "destructive": [
        '<dial><dial-inform>The old note is a duplicate.</dial-inform><dial-suggest action="remove-note">'
        '<dial-payload>{"text":"buy milk"}</dial-payload></dial-suggest></dial>',
    ],
    "refused": [
        '<dial><dial-suggest action="add-note"><dial-payload>{"text":"call the dentist"}</dial-payload>'
        "</dial-suggest></dial>",
    ],
    "error": [],  # no reply: the run fails, and the log's notice says so
}


def pending(page: Page) -> None:
    say(page, "swap milk for oat milk")
    page.locator(".dial-card.dial-pending").wait_for()


def choice(page: Page) -> None:
    say(page, "note: dentist")
    page.locator(".dial-option").first.wait_for()


def destructive(page: Page) -> None:
    say(page, "tidy my notes")
    page.locator(".dial-accept").click()
    page.locator(".dial-confirm").wait_for()


def refused(page: Page) -> None:
    say(page, "remind me to call the dentist")
    page.locator(".dial-edit").click()
    page.locator(".dial-json").fill('{"text": ""}')
    page.locator(".dial-save").click()
    page.locator(".dial-issue").wait_for()


def error(page: Page) -> None:
    say(page, "hello?")
    page.locator(".dial-status.dial-error").wait_for()


#: A phone's screen.
PHONE: dict[str, Any] = {"viewport": {"width": 390, "height": 760}, "device_scale_factor": 2, "is_mobile": True}

SHOTS: list[tuple[str, Callable[[Page], None], dict[str, Any]]] = [
    ("pending", pending, {}),
    ("dark", pending, {"color_scheme": "dark"}),
    ("choice", choice, {}),
    ("mobile", choice, PHONE),
    ("destructive", destructive, {}),
    ("refused", refused, {}),
    ("error", error, {}),
]


def shoot(browser: Browser, url: str, out: Path) -> None:
    for name, act, options in SHOTS:
        context = browser.new_context(**{"viewport": {"width": 820, "height": 720}, **options})
        context.set_default_timeout(10_000)
        page = context.new_page()
        page.goto(f"{url}/?thread={name}")
        page.locator(".dial-empty").wait_for()
        act(page)
        page.wait_for_timeout(300)  # the working indicator's pulse settles
        path = out / f"panel-{name}.png"
        page.screenshot(path=str(path))
        print(path)
        context.close()


INBOX_SHOTS: list[tuple[str, dict[str, Any]]] = [
    ("light", {"viewport": {"width": 1000, "height": 900}}),
    ("dark", {"viewport": {"width": 1000, "height": 900}, "color_scheme": "dark"}),
    ("mobile", PHONE),
    ("mobile-dark", {**PHONE, "color_scheme": "dark"}),
]


async def _claimed(url: str, conversation_id: str, by: str) -> None:
    """``by`` claims the card waiting in ``conversation_id`` (for an hour)."""
    store = open_store(url)
    try:
        conversation = await Conversation.open(
            store, conversation_id, agent=ScriptedAgent([]), domain=DeskNotes(), human=scripted_human([])
        )
        await conversation.claim("sg-1", by=by, roles=["reviewers"], seconds=3600)
    finally:
        await store.aclose()


def shoot_inbox(browser: Browser, folder: str, out: Path) -> None:
    """The inbox of a reviewer, with four cards waiting."""
    store = f"sqlite:{folder}/inbox.db"
    propose(
        store,
        {
            "groceries": note("buy oat milk"),
            "budget-review": SHARE,
            "cleanup": REMOVE,
            "weekly-plan": note("call the dentist"),
        },
    )
    on_a_thread(_claimed, store, "budget-review", "rev-2")
    app = create_app(
        store=store,
        domain=DeskNotes(),
        agent=scripted_agents(_Scripts()),
        auth=lambda request: "rev-1",
        roles=lambda who: {"reviewers"},
        deadlines=None,
    )
    with serving(app) as url:
        for name, options in INBOX_SHOTS:
            context = browser.new_context(**options)
            context.set_default_timeout(10_000)
            page = context.new_page()
            page.goto(f"{url}/inbox")
            page.locator("dial-inbox[data-loaded]").wait_for()
            for number in (0, 2):
                page.locator(".dial-select").nth(number).check()
            path = out / f"inbox-{name}.png"
            page.screenshot(path=str(path), full_page=True)
            print(path)
            context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--out", default="docs/images", help="the folder to write the PNGs into (default: docs/images)"
    )
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        app = create_app(store=f"sqlite:{folder}/c.db", domain=WebNotes(), agent=scripted_agents(SCRIPTS))
        with serving(app) as url, chromium() as browser:
            shoot(browser, url, out)
            shoot_inbox(browser, folder, out)


if __name__ == "__main__":
    main()
