"""Make a :class:`~dial_runtime.agents.ChatAgent` from a short URI naming the server and the model.

====================================  ====================================================  ======================
URI                                   endpoint                                              API key from
====================================  ====================================================  ======================
``openai:MODEL``                      ``https://api.openai.com/v1``                         ``OPENAI_API_KEY``
``ollama:MODEL[@HOST[:PORT]]``        ``http://HOST:PORT/v1``, default ``localhost:11434``  none
``vllm:MODEL[@HOST[:PORT]]``          ``http://HOST:PORT/v1``, default ``localhost:8000``   ``DIAL_AGENT_API_KEY``
``llamacpp:MODEL[@HOST[:PORT]]``      ``http://HOST:PORT/v1``, default ``localhost:8080``   ``DIAL_AGENT_API_KEY``
``http[s]://HOST[:PORT]/PATH#MODEL``  the URL without its fragment                          ``DIAL_AGENT_API_KEY``
``script:FILE``                       no server: the replies in FILE, in order              none
====================================  ====================================================  ======================

``script:FILE`` tries a domain without a model: FILE is a JSON list of replies (strings, each a whole reply, DIAL
or prose), or a JSON Lines log as ``dial-runtime export`` writes it (the agent's replies in that conversation).
It makes a :class:`~dial_runtime.agents.ScriptedAgent`; a ``history`` option (a stored conversation taken up)
skips the replies that history holds already, and ``ChatAgent``'s other options do not apply to it.

``OPENAI_API_KEY`` is required; ``DIAL_AGENT_API_KEY`` is sent when it is set.

Model names may hold ``:`` and ``/`` (``ollama:llama3.1:8b``, ``vllm:meta-llama/Llama-3.1-8B-Instruct``); the
host follows the last ``@``. Keys come from the environment only, never from the URI, so a URI can be logged,
shown and put on a command line.
"""

from __future__ import annotations

import os
import urllib.parse
from typing import Any

from .chat import ChatAgent
from .scripted import ScriptedAgent

__all__ = ["agent_from_uri"]

OPENAI_BASE_URL = "https://api.openai.com/v1"

# Local servers: the scheme's default host and port.
_LOCAL_SERVERS = {"ollama": "localhost:11434", "vllm": "localhost:8000", "llamacpp": "localhost:8080"}
# The local servers that may sit behind a key (ollama takes none).
_KEYED = frozenset({"vllm", "llamacpp", "http", "https"})

_FORMS = (
    "openai:MODEL, ollama:MODEL@HOST:PORT, vllm:MODEL@HOST:PORT, llamacpp:MODEL@HOST:PORT, "
    "http(s)://HOST/v1#MODEL or script:FILE"
)


def agent_from_uri(uri: str, *, system_prompt: str = "", **options: Any) -> ChatAgent | ScriptedAgent:
    """The :class:`ChatAgent` that ``uri`` names, with ``system_prompt`` and ``options`` (``ChatAgent``'s keyword
    arguments: ``timeout``, ``max_retries``, ``client``, ...); for ``script:FILE``, the :class:`ScriptedAgent`
    replying with the file's replies.

    Raises ``ValueError`` naming the accepted forms for a malformed URI, and naming the variable when a key the
    URI needs is not in the environment; ``TypeError`` for an ``api_key`` option (keys come from the environment).
    """
    if "api_key" in options:
        raise TypeError("agent_from_uri: the API key comes from the environment, not from an option")
    scheme, colon, rest = uri.partition(":")
    if scheme == "script":
        if not rest:
            raise ValueError(
                f"agent URI {uri!r}: write script:FILE, FILE a JSON list of replies or a JSON Lines log"
            )
        history = options.get("history") or ()
        given = sum(1 for message in history if getattr(message, "role", None) == "assistant")
        return ScriptedAgent.from_file(rest, skip=given)
    if not colon or any(character.isspace() for character in uri):
        raise ValueError(f"agent URI {uri!r} is not one of {_FORMS}")
    if scheme in ("http", "https"):
        base_url, model = _from_url(uri)
    elif scheme == "openai":
        if not rest or "@" in rest:
            raise ValueError(f"agent URI {uri!r}: write openai:MODEL, e.g. openai:gpt-4o-mini")
        base_url, model = OPENAI_BASE_URL, rest
    elif scheme in _LOCAL_SERVERS:
        model, at, host = rest.rpartition("@")
        if not at:
            model, host = rest, _LOCAL_SERVERS[scheme]
        if not model:
            raise ValueError(f"agent URI {uri!r}: write {scheme}:MODEL or {scheme}:MODEL@HOST:PORT")
        base_url = f"http://{_host_port(uri, host, _LOCAL_SERVERS[scheme])}/v1"
    else:
        raise ValueError(f"agent URI {uri!r} has an unknown scheme {scheme!r}; use {_FORMS}")
    return ChatAgent(base_url, model, api_key=_api_key(uri, scheme), system_prompt=system_prompt, **options)


def _from_url(uri: str) -> tuple[str, str]:
    """The base URL and the model (the fragment) of an ``http(s)://HOST/PATH#MODEL`` URI."""
    parts = urllib.parse.urlsplit(uri)
    try:
        parts.port  # noqa: B018  (reading it checks the port)
    except ValueError as error:
        raise ValueError(f"agent URI {uri!r}: {error}") from None
    if not parts.hostname:
        raise ValueError(f"agent URI {uri!r} has no host; write {parts.scheme}://HOST:PORT/v1#MODEL")
    if parts.username is not None or parts.password is not None:
        # The URI is not quoted: it holds a secret.
        shown = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        raise ValueError(f"agent URI for {shown!r}: put no credentials in the URI; set DIAL_AGENT_API_KEY instead")
    if parts.query:
        raise ValueError(f"agent URI {uri!r}: the endpoint takes no query string")
    model = urllib.parse.unquote(parts.fragment)
    if not model:
        raise ValueError(f"agent URI {uri!r} names no model; add it after '#', e.g. {uri.rstrip('#')}#MODEL")
    base_url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
    return base_url, model


def _host_port(uri: str, host: str, default: str) -> str:
    """``HOST:PORT`` from ``host`` (``HOST``, ``HOST:PORT``, ``[IPv6]:PORT``), the port defaulting to
    ``default``'s."""
    parts = urllib.parse.urlsplit(f"//{host}")
    try:
        port = parts.port
    except ValueError as error:
        raise ValueError(f"agent URI {uri!r}: {error}") from None
    if not parts.hostname or parts.path or parts.query or parts.fragment or parts.username is not None:
        raise ValueError(f"agent URI {uri!r}: {host!r} is not HOST or HOST:PORT")
    name = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{name}:{port if port is not None else default.rpartition(':')[2]}"


def _api_key(uri: str, scheme: str) -> str | None:
    if scheme == "openai":
        key = os.environ.get("OPENAI_API_KEY")
        if not key:
            raise ValueError(f"agent URI {uri!r} needs the OPENAI_API_KEY environment variable")
        return key
    if scheme in _KEYED:
        return os.environ.get("DIAL_AGENT_API_KEY") or None
    return None
