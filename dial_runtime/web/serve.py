"""``dial-runtime serve``: the web surface under uvicorn, built from an agent URI, a domain and a store URL.

With ``--workers N`` uvicorn starts N processes, each importing :func:`app_from_environment`, which reads the
settings from the environment (``DIAL_SERVE_AGENT``, ``DIAL_SERVE_DOMAIN``, ``DIAL_SERVE_STORE``): every worker
builds the same application on the same store.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette

from .. import LogEntry
from ..cli import _load_domain as load_domain
from .app import AgentFactory, create_app, scripted_agents

__all__ = ["agent_factory", "app_from_environment", "serve"]

_ENV = {"agent": "DIAL_SERVE_AGENT", "domain": "DIAL_SERVE_DOMAIN", "store": "DIAL_SERVE_STORE"}


def agent_factory(uri: str, domain: Any) -> AgentFactory:
    """The agent of each run: ``script:FILE`` (a JSON list of replies) replies from the file, taken up where the
    conversation's log left it; any other URI is a :class:`ChatAgent` (``agent_from_uri``) whose history is
    rebuilt from the log, sharing one HTTP client. ``ValueError`` for a URI or file that cannot serve."""
    scheme, _, rest = uri.partition(":")
    if scheme == "script":
        try:
            replies = json.loads(Path(rest).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ValueError(f"--agent {uri!r}: cannot read a JSON list of replies: {error}") from None
        if not isinstance(replies, list) or not all(isinstance(reply, str) for reply in replies):
            raise ValueError(f"--agent {uri!r}: the file must hold a JSON list of strings")
        return scripted_agents(replies)
    from ..agents import agent_from_uri, history_from_log, system_prompt

    prompt = system_prompt(domain)
    client = httpx.AsyncClient(timeout=None)
    agent_from_uri(uri, system_prompt=prompt, client=client)  # a bad URI or a missing key fails now, not later

    def build(conversation_id: str, log: Sequence[LogEntry]) -> Any:
        return agent_from_uri(uri, system_prompt=prompt, history=history_from_log(log), client=client)

    return build


def build_app(agent: str, domain: str, store: str) -> Starlette:
    """The application ``serve`` runs; ``ValueError`` naming what is wrong with a setting."""
    served = load_domain(domain)
    return create_app(store=store, domain=served, agent=agent_factory(agent, served))


def app_from_environment() -> Starlette:
    """The application a uvicorn worker builds from the settings ``serve`` put in the environment."""
    return build_app(*(os.environ[_ENV[name]] for name in ("agent", "domain", "store")))


def serve(*, agent: str, domain: str, store: str, host: str, port: int, workers: int) -> None:
    """Run the web surface with uvicorn until interrupted; ``ValueError`` for a bad setting (checked first)."""
    import uvicorn

    from .. import open_store

    open_store(store)
    app = build_app(agent, domain, store)
    if workers == 1:
        uvicorn.run(app, host=host, port=port, log_level="info", ws="none", lifespan="off")
        return
    os.environ.update({_ENV["agent"]: agent, _ENV["domain"]: domain, _ENV["store"]: store})
    uvicorn.run(
        "dial_runtime.web.serve:app_from_environment",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="info",
        ws="none",
        lifespan="off",
    )
