"""Make a :class:`~dial_runtime.agents.ChatAgent` from a short URI naming the server and the model.

====================================  ====================================================  ======================
URI                                   endpoint                                              API key from
====================================  ====================================================  ======================
``openai:MODEL``                      ``https://api.openai.com/v1``                         ``OPENAI_API_KEY``
``anthropic:MODEL``                   ``https://api.anthropic.com`` (Messages API)          ``ANTHROPIC_API_KEY``
``anthropic:MODEL@HOST[:PORT]``       ``http://HOST:PORT`` (a server of the same API)       ``ANTHROPIC_API_KEY``
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

``OPENAI_API_KEY`` is required, and ``ANTHROPIC_API_KEY`` for Anthropic's own API (a local server of the API gets
it when it is set); ``DIAL_AGENT_API_KEY`` is sent when it is set. ``anthropic:`` makes an
:class:`~dial_runtime.llm.anthropic.AnthropicAgent`, every other model scheme a :class:`ChatAgent`.

**The codec** (:mod:`dial_runtime.llm.codecs`) says how the model is spoken to: ``?codec=tools`` (each action a
native tool call), ``?codec=json`` (each reply one JSON object the server's structured output constrains) or
``?codec=dial`` (the model writes DIAL). Hosted models are trained for tool calls, small local ones write DIAL
under a grammar better than they call tools, so the default depends on the scheme: ``tools`` for ``openai:``
and ``anthropic:``, ``dial`` for the others (and without a domain), and for ``llamacpp:`` the domain's grammar
too (``constrain``), unless a grammar is given or ``constrain=False``. The tools and json codecs need the
``domain``; so does the default system prompt (:func:`~dial_runtime.agents.system_prompt` for DIAL,
:func:`~dial_runtime.agents.prompt.tools_prompt` for tools, :func:`~dial_runtime.agents.prompt.json_prompt`
for JSON), which ``system_prompt`` replaces. ``log`` (a stored conversation taken up) gives the agent its
history as the codec spoke it.

**The API**: the OpenAI-compatible schemes speak the Chat Completions API, or with ``?api=responses`` the
Responses API (``{base}/responses``, a :class:`~dial_runtime.llm.responses.ResponsesAgent`: OpenAI's, and
llama.cpp's server has it too) with the same codecs; ``anthropic:`` speaks the Messages API.

A query string sets generation settings: ``llamacpp:smollm2@localhost:8080?temperature=0&seed=1&max_tokens=256``.
The settings are ``max_tokens`` and ``seed`` (whole numbers), ``temperature`` and ``top_p`` (numbers) and ``stop``
(text; repeat it for several). A server-specific body field is written ``extra.NAME=VALUE``: the value is read as
JSON when it is JSON (``extra.top_k=40``, ``extra.cache_prompt=true``), else kept as text. Any other parameter, a
repeated one other than ``stop``, or a value of the wrong type is refused with a ``ValueError`` naming the allowed
parameters. Keyword arguments given with the URI take precedence over its query.

Model names may hold ``:`` and ``/`` (``ollama:llama3.1:8b``, ``vllm:meta-llama/Llama-3.1-8B-Instruct``); the
host follows the last ``@``. Keys come from the environment only, never from the URI, so a URI can be logged,
shown and put on a command line.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from ..agents.outside import OutsideAgent
from ..agents.scripted import ScriptedAgent
from ..runtime.events import LogEntry
from .anthropic import ANTHROPIC_BASE_URL, AnthropicAgent
from .chat import ChatAgent, history_from_log
from .codecs import CODECS, codec_for
from .responses import ResponsesAgent

__all__ = ["agent_from_uri"]

OPENAI_BASE_URL = "https://api.openai.com/v1"
#: The OpenAI-compatible APIs a URI may name (``?api=``): the agent that speaks each.
_OPENAI_APIS: dict[str, type[ChatAgent]] = {"chat": ChatAgent, "responses": ResponsesAgent}

# Local servers: the scheme's default host and port.
_LOCAL_SERVERS = {"ollama": "localhost:11434", "vllm": "localhost:8000", "llamacpp": "localhost:8080"}
# The local servers that may sit behind a key (ollama takes none).
_KEYED = frozenset({"vllm", "llamacpp", "http", "https"})

# The query parameters of a URI and how each value is read.
_SETTINGS: dict[str, Callable[[str], Any]] = {
    "max_tokens": int,
    "seed": int,
    "temperature": float,
    "top_p": float,
    "stop": str,
}
_EXTRA = "extra."
_ALLOWED = f"{', '.join(_SETTINGS)}, codec, api or {_EXTRA}NAME"

#: The codec each scheme speaks unless told (see the module docstring).
DEFAULT_CODECS = {
    "openai": "tools",
    "anthropic": "tools",
    "ollama": "dial",
    "vllm": "dial",
    "llamacpp": "dial",
    "http": "dial",
}


_FORMS = (
    "openai:MODEL, anthropic:MODEL[@HOST:PORT], ollama:MODEL@HOST:PORT, vllm:MODEL@HOST:PORT, "
    "llamacpp:MODEL@HOST:PORT, "
    "http(s)://HOST/v1#MODEL, script:FILE or outside:"
)


def agent_from_uri(
    uri: str,
    *,
    system_prompt: str | None = None,
    domain: Any = None,
    log: Iterable[LogEntry] | None = None,
    **options: Any,
) -> ChatAgent | ScriptedAgent | OutsideAgent:
    """The :class:`ChatAgent` that ``uri`` names, for ``domain``, with ``options`` (``ChatAgent``'s keyword
    arguments: ``timeout``, ``max_retries``, ``client``, ``codec`` (a name), ``constrain``, ...); for
    ``script:FILE``, the :class:`ScriptedAgent` replying with the file's replies; for ``outside:``, the
    :class:`~dial_runtime.agents.outside.OutsideAgent` of a door's conversation (it says nothing: the agent is
    elsewhere, behind ``dial-runtime mcp`` or a framework's bridge). ``log``: the stored
    conversation it takes up (see the module docstring for the codec, the prompt and the grammar).

    Raises ``ValueError`` naming the accepted forms for a malformed URI, naming the variable when a key the URI
    needs is not in the environment, and for a codec that needs the domain without one; ``TypeError`` for an
    ``api_key`` option (keys come from the environment).
    """
    if "api_key" in options:
        raise TypeError("agent_from_uri: the API key comes from the environment, not from an option")
    scheme, colon, rest = uri.partition(":")
    if scheme == "outside":
        if rest:
            raise ValueError(f"agent URI {uri!r}: outside: takes nothing after the colon")
        return OutsideAgent()
    if scheme == "script":
        if not rest:
            raise ValueError(
                f"agent URI {uri!r}: write script:FILE, FILE a JSON list of replies or a JSON Lines log"
            )
        history = history_from_log(log) if log is not None else options.get("history") or ()
        given = sum(1 for message in history if getattr(message, "role", None) == "assistant")
        return ScriptedAgent.from_file(rest, skip=given)
    if not colon or any(character.isspace() for character in uri):
        raise ValueError(f"agent URI {uri!r} is not one of {_FORMS}")
    query = ""
    if scheme not in ("http", "https"):
        rest, _, query = rest.partition("?")
    if scheme in ("http", "https"):
        base_url, model, query = _from_url(uri)
    elif scheme == "openai":
        if not rest or "@" in rest:
            raise ValueError(f"agent URI {uri!r}: write openai:MODEL, e.g. openai:gpt-4o-mini")
        base_url, model = OPENAI_BASE_URL, rest
    elif scheme == "anthropic":
        model, at, host = rest.rpartition("@")
        if not at:
            model, host = rest, ""
        if not model:
            raise ValueError(f"agent URI {uri!r}: write anthropic:MODEL, e.g. anthropic:claude-sonnet-4-5")
        base_url = f"http://{_host_port(uri, host, 'localhost:8080')}" if host else ANTHROPIC_BASE_URL
    elif scheme in _LOCAL_SERVERS:
        model, at, host = rest.rpartition("@")
        if not at:
            model, host = rest, _LOCAL_SERVERS[scheme]
        if not model:
            raise ValueError(f"agent URI {uri!r}: write {scheme}:MODEL or {scheme}:MODEL@HOST:PORT")
        base_url = f"http://{_host_port(uri, host, _LOCAL_SERVERS[scheme])}/v1"
    else:
        raise ValueError(f"agent URI {uri!r} has an unknown scheme {scheme!r}; use {_FORMS}")
    settings = query_settings(uri, query)
    extra_body = {**settings.pop("extra_body", {}), **(options.pop("extra_body", None) or {})}
    if extra_body:
        options["extra_body"] = extra_body
    options = {**settings, **options}
    options.setdefault("server", scheme if scheme in _LOCAL_SERVERS else "openai")
    key = _api_key(uri, scheme, hosted=base_url == ANTHROPIC_BASE_URL)
    api = options.pop("api", "chat")
    if scheme == "anthropic" and api != "chat":
        raise ValueError(f"agent URI {uri!r}: api={api} is an OpenAI API; anthropic: speaks the Messages API")
    if api not in _OPENAI_APIS:
        raise ValueError(f"agent URI {uri!r}: unknown api {api!r}; use one of {', '.join(_OPENAI_APIS)}")
    kind = AnthropicAgent if scheme == "anthropic" else _OPENAI_APIS[api]
    speaking = _spoken(uri, scheme, kind.api, domain, system_prompt, options)
    if log is not None:
        options["history"] = history_from_log(log, options["codec"])
    return kind(base_url, model, api_key=key, system_prompt=speaking, **options)


def _spoken(
    uri: str, scheme: str, api: str, domain: Any, system_prompt: str | None, options: dict[str, Any]
) -> str:
    """Set ``options``' codec (and grammar) as the module docstring says; return the system prompt."""
    from ..agents.prompt import codec_prompt
    from .grammar import domain_grammar

    # Without a domain there are no tools: a model spoken to plainly (a simulated person) gets the DIAL codec.
    name = options.pop("codec", None) or (DEFAULT_CODECS.get(scheme, "dial") if domain is not None else "dial")
    constrain = options.pop("constrain", None)
    if name not in CODECS:
        raise ValueError(f"agent URI {uri!r}: unknown codec {name!r}; use one of {', '.join(CODECS)}")
    if name != "dial":
        if domain is None:
            raise ValueError(f"agent URI {uri!r}: the {name} codec needs the domain, whose actions it names")
        if constrain or options.get("grammar") is not None:
            raise ValueError(f"agent URI {uri!r}: a grammar constrains DIAL replies; the {name} codec has none")
        try:
            options["codec"] = codec_for(name, domain, api=api)
        except ValueError as refused:
            raise ValueError(f"agent URI {uri!r}: {refused}") from None
        return codec_prompt(name, domain) if system_prompt is None else system_prompt
    options["codec"] = codec_for("dial", api=api)
    if constrain is None:
        constrain = (
            scheme == "llamacpp" and api == "openai-chat" and domain is not None and options.get("grammar") is None
        )
    if constrain and api != "openai-chat":
        raise ValueError(f"agent URI {uri!r}: the {api} API takes no grammar")
    if constrain:
        if domain is None:
            raise ValueError(f"agent URI {uri!r}: constrain writes the domain's grammar; give the domain")
        options["grammar"] = domain_grammar(domain)
    if system_prompt is not None:
        return system_prompt
    return codec_prompt("dial", domain) if domain is not None else ""


def query_settings(uri: str, query: str) -> dict[str, Any]:
    """``ChatAgent``'s keyword arguments from a URI's query string (see the module docstring)."""
    settings: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=False):
        if name.startswith(_EXTRA) and len(name) > len(_EXTRA):
            field = name[len(_EXTRA) :]
            if field in extra:
                raise ValueError(f"agent URI {uri!r}: {name} is given twice")
            try:
                extra[field] = msgspec.json.decode(value)
            except ValueError:
                extra[field] = value
            continue
        if name in ("codec", "api"):
            if name in settings:
                raise ValueError(f"agent URI {uri!r}: {name} is given twice")
            known = CODECS if name == "codec" else tuple(_OPENAI_APIS)
            if value not in known:
                raise ValueError(f"agent URI {uri!r}: unknown {name} {value!r}; use one of {', '.join(known)}")
            settings[name] = value
            continue
        read = _SETTINGS.get(name)
        if read is None:
            raise ValueError(f"agent URI {uri!r}: unknown parameter {name!r}; use {_ALLOWED}")
        try:
            parsed = read(value)
        except ValueError:
            kind = "a whole number" if read is int else "a number"
            raise ValueError(f"agent URI {uri!r}: {name} must be {kind}, got {value!r}") from None
        if name == "stop":
            settings["stop"] = [*settings.get("stop", []), parsed]
        elif name in settings:
            raise ValueError(f"agent URI {uri!r}: {name} is given twice")
        else:
            settings[name] = parsed
    if extra:
        settings["extra_body"] = extra
    return settings


def _from_url(uri: str) -> tuple[str, str, str]:
    """The base URL, the model (the fragment) and the query of an ``http(s)://HOST/PATH?QUERY#MODEL`` URI."""
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
    model = urllib.parse.unquote(parts.fragment)
    if not model:
        raise ValueError(f"agent URI {uri!r} names no model; add it after '#', e.g. {uri.rstrip('#')}#MODEL")
    base_url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
    return base_url, model, parts.query


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


def _api_key(uri: str, scheme: str, *, hosted: bool = False) -> str | None:
    if scheme == "anthropic":
        key = os.environ.get("ANTHROPIC_API_KEY") or None
        if hosted and not key:
            raise ValueError(f"agent URI {uri!r} needs the ANTHROPIC_API_KEY environment variable")
        return key
    if scheme == "openai":
        key = os.environ.get("OPENAI_API_KEY")
        if not key:
            raise ValueError(f"agent URI {uri!r} needs the OPENAI_API_KEY environment variable")
        return key
    if scheme in _KEYED:
        return os.environ.get("DIAL_AGENT_API_KEY") or None
    return None
