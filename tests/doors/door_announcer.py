"""What ``dial-runtime mcp --announce tests.doors.door_announcer:announcer`` loads in the door's tests: webhooks to
the receiver ``DIAL_TEST_HOOK`` names, each card's decider ``ada``, with decision links signed by the keyring in
the file ``DIAL_TEST_KEYS`` for the web surface at ``DIAL_TEST_PUBLIC``."""

from __future__ import annotations

import os
from pathlib import Path

from dial_runtime.decisions.announce import Announcer
from dial_runtime.decisions.links import Keyring
from dial_runtime.decisions.notify import Notifications, WebhookNotifier


def announcer() -> Announcer:
    keyring = Keyring.from_json(Path(os.environ["DIAL_TEST_KEYS"]).read_text(encoding="utf-8"))
    notifications = Notifications(
        [WebhookNotifier(os.environ["DIAL_TEST_HOOK"], shape="json")], attempts=2, backoff=0.01, max_backoff=0.02
    )
    return Announcer(
        notifications,
        recipients=lambda conversation_id, card: ["ada"],
        links=keyring,
        public_url=os.environ["DIAL_TEST_PUBLIC"],
    )
