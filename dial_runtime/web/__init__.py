"""The web surface: :func:`create_app` (an ASGI application speaking AG-UI over server-sent events, with the
``<dial-chat>`` panel at ``/``). Needs the ``web`` extra: ``pip install 'dial-runtime[web]'``."""

from __future__ import annotations

from ..decisions.announce import Announcer
from ..decisions.linking import decision_links
from .app import AgentFactory, DomainFactory, create_app, scripted_agents
from .mapping import EventMapper, interrupt_for, messages_from_log, messages_of, payload_digest

__all__ = [
    "AgentFactory",
    "Announcer",
    "DomainFactory",
    "EventMapper",
    "create_app",
    "decision_links",
    "interrupt_for",
    "messages_from_log",
    "messages_of",
    "payload_digest",
    "scripted_agents",
]
