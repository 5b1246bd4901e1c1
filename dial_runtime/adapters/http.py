"""Actions that are calls to an HTTP service, each sent with the run's idempotency key as ``Idempotency-Key``.

An :class:`HttpDomain` is a domain whose actions are :class:`HttpEndpoint` s of one service: the payload is the
JSON body (a ``GET``'s query), checked against the endpoint's JSON Schema (with ``jsonschema``: the ``schema``
extra), the response's JSON (else its text) is the result, and a response that is not 2xx
fails the action with the code ``http-<status>``. Every request that may change something carries the run's key
(:class:`~dial_runtime.ports.ReconcilingDomainPort`) in the ``Idempotency-Key`` header, the header of the IETF
draft "The Idempotency-Key HTTP Header Field" (``draft-ietf-httpapi-idempotency-key-header``) that Stripe,
Adyen, PayPal and many gateways honour: the service keeps the answer it gave each key and gives it again to a
request that repeats the key, and runs the effect at most once.

That is what makes two things safe here that are not safe for any HTTP call:

- **Retries.** A request that fails on the way (the connection refused or reset, no answer in time) is sent again
  with the same key, up to ``retries`` times: a service that honours the key runs the effect once whichever of the
  attempts reached it.
- **Reconcile.** After a process died mid-run, :meth:`HttpDomain.reconcile` sends the same request again with the
  same key: the service answers as it answered the first (or, if the first never reached it, runs it now, once).
  So it is offered only for a service declared to honour the key (``keyed=True``); for any other it raises
  ``LookupError`` (the effect stays unknown, the outcome ``interrupted``), since a repeat could run it twice.

What the draft leaves to the service is read as it specifies: ``409 Conflict`` (the first request with the key
is still being processed) and ``422`` (the key was used for another payload) say nothing of the run, and are
``LookupError`` in :meth:`~HttpDomain.reconcile`; so are a ``429`` or a ``5xx``, or no answer at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Literal

import anyio
import attrs
import httpx

from ..domains import SchemaPayload, default_preview, example_from_schema, words
from ..runtime.records import ActionError, ActionSpec, Issue

__all__ = ["IDEMPOTENCY_HEADER", "HttpDomain", "HttpEndpoint"]

#: The request header that carries the run's idempotency key.
IDEMPOTENCY_HEADER = "Idempotency-Key"

#: The longest piece of a response body that an error message quotes.
QUOTED = 300

#: Statuses that say nothing of what became of the run a key names (see the module's docstring).
_UNTOLD = frozenset({409, 422, 425, 429})

Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]


@attrs.frozen(kw_only=True)
class HttpEndpoint:
    """One action: the request it sends (``method`` and ``path``, joined to the domain's base URL), the JSON
    Schema its payload must pass, and what the person and the agent are told of it.

    A ``GET`` is read-only (it runs without asking, and sends no key); any other method waits for the person,
    and ``destructive`` marks one that cannot be undone. ``preview`` gives the card's words for a payload (by
    default the action's title and its values)."""

    method: Method = "POST"
    path: str = ""
    schema: Mapping[str, Any] = attrs.field(factory=lambda: {"type": "object"})
    description: str = ""
    title: str | None = None
    destructive: bool = False
    preview: Callable[[Any], str] | None = None

    @property
    def read_only(self) -> bool:
        return self.method == "GET"


class HttpDomain:
    """A domain whose actions are the :class:`HttpEndpoint` s of one HTTP service (see the module's docstring).

    ``base_url``: the service; ``endpoints``: each action's endpoint, by name; ``keyed``: whether the service
    keeps each ``Idempotency-Key``'s answer (what :meth:`reconcile` needs); ``headers``: sent with every request
    (an ``Authorization``, say; never logged); ``timeout``: seconds for each attempt; ``retries``: how many more
    times a request that got no answer is sent with the same key (only to a ``keyed`` service, or a ``GET``);
    ``client``: an ``httpx.AsyncClient`` of the application's (its transport, proxies, TLS), else the domain makes
    one on first use and closes it in :meth:`aclose`."""

    def __init__(
        self,
        base_url: str,
        endpoints: Mapping[str, HttpEndpoint],
        *,
        keyed: bool = False,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        retries: int = 2,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("an HttpDomain needs at least one endpoint")
        self.base_url = base_url.rstrip("/")
        self.endpoints = dict(endpoints)
        self.keyed = keyed
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.retries = retries
        self._client = client
        self._owned = client is None
        self._payloads = {name: SchemaPayload(endpoint.schema) for name, endpoint in self.endpoints.items()}
        self._actions = {
            name: ActionSpec(
                mutates=not endpoint.read_only, destructive=endpoint.destructive and not endpoint.read_only
            )
            for name, endpoint in self.endpoints.items()
        }

    # ------------------------------------------------------------------------------------------- the domain

    @property
    def actions(self) -> Mapping[str, ActionSpec]:
        return self._actions

    @property
    def vocabulary(self) -> dict[str, dict[str, Any]]:
        """What the system prompt says of each action: its description, its schema and an example payload."""
        return {
            name: {
                "description": endpoint.description,
                "schema": dict(endpoint.schema),
                "example": example_from_schema(dict(endpoint.schema)),
            }
            for name, endpoint in self.endpoints.items()
        }

    def describe(self, action: str) -> str:
        endpoint = self.endpoints.get(action)
        return "" if endpoint is None else endpoint.description

    def validate(self, action: str, payload: Any) -> Issue | None:
        """``None`` when ``payload`` passes the endpoint's schema, else the issue; an unknown action is
        ``unknown-action``."""
        checker = self._payloads.get(action)
        if checker is None:
            return Issue(code="unknown-action", hint=f"Use one of: {', '.join(self.endpoints)}.")
        return checker.issue(payload)

    def preview(self, action: str, payload: Any) -> str:
        endpoint = self.endpoints.get(action)
        if endpoint is not None and endpoint.preview is not None:
            return str(endpoint.preview(payload))
        title = endpoint.title if endpoint is not None and endpoint.title else words(action)
        return default_preview(title, payload)

    def context(self) -> str:
        return ""

    async def run(self, action: str, payload: Any, *, key: str | None = None) -> Any:
        """Send the endpoint's request with ``payload`` (and ``key`` as ``Idempotency-Key``); the response's JSON,
        else its text, is the result. :class:`~dial_runtime.ActionError` for a response that is not 2xx
        (``http-<status>``, quoting the body's start) and for no answer after the retries (``http-unreachable``:
        the service may or may not have run it)."""
        response = await self._send(action, payload, key)
        if response is None:
            raise ActionError(
                f"the service did not answer {self._what(action)} after {self._attempts(action, key)} attempt(s)",
                code="http-unreachable",
                hint="The service may or may not have done it: check before proposing it again.",
            )
        return _result(response)

    async def reconcile(self, action: str, payload: Any, *, key: str) -> Any:
        """What became of the run under ``key`` that a dead process left without an outcome: the same request sent
        again with the same key, answered by a ``keyed`` service as it answered the first (or, if the first never
        reached it, run now, once); mapped as :meth:`run` maps it (a ``GET``, read-only, is simply sent again).
        ``LookupError`` (it cannot tell) for a service not declared ``keyed``, and for an answer that says nothing
        of the first request (409, 422, 425, 429, 5xx) or none at all."""
        endpoint = self.endpoints.get(action)
        if endpoint is None:
            raise LookupError(f"the HTTP domain has no action {action!r}")
        if not self.keyed:
            raise LookupError(
                "the HTTP service is not declared keyed (it is not known to keep the answer of each "
                "Idempotency-Key), so sending the request again could have its effect twice"
            )
        response = await self._send(action, payload, key)
        if response is None:
            raise LookupError(f"the service did not answer {self._what(action)} for the key")
        if response.status_code in _UNTOLD or response.status_code >= 500:
            raise LookupError(
                f"the service answered {response.status_code} for the key, which does not say what became of the "
                "first request"
            )
        return _result(response)

    async def aclose(self) -> None:
        """Close the client the domain made (one the application gave stays open)."""
        if self._client is not None and self._owned:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> HttpDomain:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------------------------------ the requests

    def _what(self, action: str) -> str:
        endpoint = self.endpoints[action]
        return f"{endpoint.method} {endpoint.path or '/'}"

    def _attempts(self, action: str, key: str | None) -> int:
        """How many times a request may be sent: once, or more when repeating it is safe (a ``GET``, or a key
        the service honours)."""
        repeatable = self.endpoints[action].read_only or (self.keyed and key is not None)
        return 1 + (self.retries if repeatable else 0)

    async def _send(self, action: str, payload: Any, key: str | None) -> httpx.Response | None:
        """The service's response to the action's request, or ``None`` when no attempt got one."""
        endpoint = self.endpoints.get(action)
        if endpoint is None:
            raise ActionError(f"the HTTP domain has no action {action!r}", code="unknown-action")
        client = self._client
        if client is None:
            client = self._client = httpx.AsyncClient()
        headers = dict(self.headers)
        if key is not None and not endpoint.read_only:
            headers[IDEMPOTENCY_HEADER] = key
        url = self.base_url + endpoint.path
        sent: dict[str, Any] = {"params": _query(payload)} if endpoint.read_only else {"json": payload}
        for attempt in range(self._attempts(action, key)):
            if attempt:
                await anyio.sleep(min(0.2 * 2**attempt, 2.0))
            try:
                return await client.request(endpoint.method, url, headers=headers, timeout=self.timeout, **sent)
            except httpx.TransportError:  # refused, reset, timed out: no answer came
                continue
        return None


def _query(payload: Any) -> dict[str, str]:
    """A ``GET``'s payload as query parameters: strings as they are, anything else as JSON."""
    if not isinstance(payload, Mapping):
        return {}
    return {str(name): value if isinstance(value, str) else json.dumps(value) for name, value in payload.items()}


def _result(response: httpx.Response) -> Any:
    """A response as the action's result: its JSON (else its text) when 2xx, else ``http-<status>``."""
    if not response.is_success:
        quoted = response.text[:QUOTED].strip()
        raise ActionError(
            f"the service answered {response.status_code} {response.reason_phrase}"
            + (f": {quoted}" if quoted else ""),
            code=f"http-{response.status_code}",
        )
    try:
        return response.json()
    except ValueError:
        return response.text
