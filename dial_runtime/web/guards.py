"""What every request to the web surface passes before any route: the ``Host`` it names and the ``Origin`` it
comes from (:class:`HostAndOriginGuard`), CORS for the allowed origins (:class:`Cors`, Starlette's), and a body
read no further than its limit (:func:`read_body`); every refusal is JSON."""

from __future__ import annotations

import re
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

#: The names a server on this machine is reached by, which ``create_app``'s ``allowed_hosts`` defaults to.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


def _host_and_port(value: str) -> tuple[str, str | None] | None:
    """A ``Host`` header's name (lower case) and port (``None`` when it names none); ``None`` when malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]") + 1
        if end == 0:
            return None
        name, rest = value[:end], value[end:]
    else:
        name, colon, port = value.partition(":")
        rest = colon + port
    port_ok = rest[1:].isascii() and rest[1:].isdigit()
    if not _HOST_NAME.fullmatch(name) or (rest and not (rest.startswith(":") and port_ok)):
        return None
    return name, rest[1:] or None


#: A host's name as a ``Host`` header writes it: a DNS name or IPv4 address, or an IPv6 address in brackets.
_HOST_NAME = re.compile(r"[a-z0-9_.-]+|\[[0-9a-f:.]+\]")


class Hosts:
    """The hosts a server answers to (``create_app``'s ``allowed_hosts``)."""

    def __init__(self, allowed: Iterable[str]) -> None:
        if isinstance(allowed, str):
            raise TypeError("create_app: allowed_hosts is a list of hosts, not one string")
        self.any = False
        self._exact: set[tuple[str, str | None]] = set()
        self._domains: set[tuple[str, str | None]] = set()
        for entry in allowed:
            if entry.strip() == "*":
                self.any = True
                continue
            wildcard = entry.strip().startswith("*.")
            parsed = _host_and_port(entry.strip()[1:] if wildcard else entry)
            if parsed is None:
                raise ValueError(f"create_app: allowed_hosts entry {entry!r} is not a host, host:port or *.domain")
            (self._domains if wildcard else self._exact).add(parsed)

    def allow(self, host: str) -> bool:
        """Whether a request whose ``Host`` header is ``host`` is for this server."""
        if self.any:
            return True
        parsed = _host_and_port(host)
        if parsed is None:
            return False
        name, port = parsed
        if (name, port) in self._exact or (name, None) in self._exact:
            return True
        return any(
            name.endswith(domain) and (wanted is None or wanted == port) for domain, wanted in self._domains
        )


class HostAndOriginGuard:
    """What every request passes before any route, the panel's included: a ``Host`` the server does not serve is
    refused (400), and an ``Origin`` that is neither the server's own nor allowed is refused (403), both in JSON.
    Kept by hand: Starlette's ``TrustedHostMiddleware`` matches no port (``allowed_hosts`` takes ``host:port``) and
    answers in plain text, and refusing a foreign origin outright (not only leaving its response unreadable, as
    CORS does) keeps another site's page from making a decision with the person's cookies."""

    def __init__(self, app: ASGIApp, *, hosts: Hosts, origins: frozenset[str]) -> None:
        self._app = app
        self._hosts = hosts
        self._origins = origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host")
        if host is None or not self._hosts.allow(host):
            named = "no Host header" if host is None else f"the host {host[:200]!r} is not served here"
            await json_error(400, f"{named} (create_app's allowed_hosts)")(scope, receive, send)
            return
        origin = headers.get("origin")
        own = origin is None or origin.rstrip("/") == f"{scope['scheme']}://{host}"
        if not own and origin is not None and origin.rstrip("/") not in self._origins:
            await json_error(403, f"origin {origin[:200]!r} may not call here")(scope, receive, send)
            return
        await self._app(scope, receive, send)


#: The methods the routes take, which a preflight may ask for.
CORS_METHODS = ("GET", "POST")


class Cors(CORSMiddleware):
    """Starlette's CORS for the allowed origins (their preflights answered with any header they ask for and
    credentials, their responses marked), refusing a preflight in JSON, as every other refusal is."""

    def __init__(self, app: ASGIApp, *, origins: frozenset[str]) -> None:
        super().__init__(
            app,
            allow_origins=sorted(origins),
            allow_methods=CORS_METHODS,
            allow_headers=["*"],
            allow_credentials=True,
            max_age=600,
        )

    def preflight_response(self, request_headers: Headers) -> Response:
        method = request_headers["access-control-request-method"]
        if method not in self.allow_methods:
            return json_error(403, f"{method[:20]!r} is not a method this server takes")
        return super().preflight_response(request_headers)


#: The principal of every caller of a surface served without ``auth`` (one person, on the machine it runs on).
LOCAL_PRINCIPAL = "local"

#: What a conversation id the web surface serves looks like (in a URL, a run's ``threadId``, a decision).
THREAD_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")


def json_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def read_body(request: Request, limit: int) -> bytes | None:
    """The request's body, or ``None`` once it passes ``limit`` bytes (read no further)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
