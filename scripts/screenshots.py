"""Write the README's screenshots of the ``<dial-chat>`` panel into docs/: pending cards, a refused edit, a choice.

Runs the web surface on 127.0.0.1 with a scripted agent and drives Debian's headless Chromium (Playwright):
``python scripts/screenshots.py [--out docs]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dial_runtime.web import create_app, scripted_agents
from tests.browser import chromium
from tests.web_domains import WebNotes
from tests.web_server import serving

SCRIPTS = {
    "pending": [
        "I can add that for you.\n<dial>"
        '<dial-suggest action="add-note">Add a shopping reminder'
        '<dial-payload>{"text":"buy oat milk"}</dial-payload></dial-suggest>'
        '<dial-suggest action="remove-note">Remove the old one<dial-payload>{"text":"buy milk"}</dial-payload>'
        "</dial-suggest></dial>",
    ],
    "refused": [
        '<dial><dial-suggest action="add-note"><dial-payload>{"text":"call the dentist"}</dial-payload>'
        "</dial-suggest></dial>",
    ],
    "choice": [
        '<dial><dial-ask id="which" response-type="choice">Which list should it go on?'
        '<dial-option value="home">Home</dial-option><dial-option value="work">Work</dial-option>'
        "</dial-ask></dial>",
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="docs", help="the folder to write the PNGs into (default: docs)")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        app = create_app(store=f"sqlite:{folder}/c.db", domain=WebNotes(), agent=scripted_agents(SCRIPTS))
        with serving(app) as url, chromium() as browser:
            page = browser.new_page(viewport={"width": 820, "height": 900}, device_scale_factor=1)
            page.set_default_timeout(10_000)
            for name, words in [
                ("pending", "swap milk for oat milk"),
                ("refused", ""),
                ("choice", "note: dentist"),
            ]:
                page.goto(f"{url}/?thread={name}")
                page.locator(".dial-input").fill(words or "remind me to call the dentist")
                page.locator(".dial-input").press("Enter")
                page.locator(".dial-pending, .dial-ask").first.wait_for()
                if name == "refused":
                    page.locator(".dial-edit").click()
                    page.locator(".dial-json").fill('{"text": ""}')
                    page.locator(".dial-save").click()
                    page.locator(".dial-issue").wait_for()
                page.screenshot(path=str(out / f"panel-{name}.png"))
                print(out / f"panel-{name}.png")


if __name__ == "__main__":
    main()
