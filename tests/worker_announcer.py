"""What ``dial-runtime worker --announce tests.worker_announcer:announcer`` and ``--domain
tests.worker_announcer:RemindingNotes`` load in the worker command's tests: webhooks to the receiver named by
``DIAL_TEST_HOOK``, each card's decider ``ada``."""

from __future__ import annotations

import os
from typing import ClassVar

from dial_runtime import ActionSpec
from dial_runtime.decisions.announce import Announcer
from dial_runtime.decisions.notify import Notifications, WebhookNotifier

from .fakes import Notes


class RemindingNotes(Notes):
    """The notes, whose additions remind their decider 0.3 s after they start waiting."""

    actions: ClassVar[dict[str, ActionSpec]] = {
        **Notes.actions,
        "add-note": ActionSpec(mutates=True, remind_after=0.3),
    }


def announcer() -> Announcer:
    hook = os.environ["DIAL_TEST_HOOK"]
    notifications = Notifications(
        [WebhookNotifier(hook, shape="json")], attempts=2, backoff=0.01, max_backoff=0.02
    )
    return Announcer(notifications, recipients=lambda conversation_id, card: ["ada"])


def not_an_announcer() -> str:
    return "mail"
