"""The web surface on a network (a real uvicorn server, httpx as the client): only the hosts it serves, only the
origins it allows (with CORS for them), and JSON for every refusal and error, never a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from dial_runtime.web import create_app, scripted_agents

from ..web_domains import WebNotes
from ..web_server import run_input, serving

ALLOWED = "https://app.example"

#: Every route, the panel and its files included.
ROUTES = [
    ("POST", "/agui"),
    ("GET", "/conversations"),
    ("GET", "/conversations/t/changes"),
    ("GET", "/"),
    ("GET", "/static/dial-chat.js"),
]


def may_view(who: str, conversation: str) -> bool:
    if conversation == "broken":
        raise RuntimeError("postgresql://app:hunter2@db/app is down")
    return True


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    app = create_app(
        store="memory:",
        domain=WebNotes(),
        agent=scripted_agents(["<dial><dial-inform>Hi.</dial-inform></dial>"] * 50),
        can_view=may_view,
        allowed_origins=[ALLOWED],
        heartbeat=0.05,
    )
    with serving(app) as url:
        yield url


@pytest.fixture
def http(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=10.0) as client:
        yield client


def call(http: httpx.Client, method: str, path: str, **headers: str) -> httpx.Response:
    """One request to ``path``, read whole (a change stream only up to its first event)."""
    body: dict[str, Any] = {"json": run_input("t")} if method == "POST" else {}
    with http.stream(method, path, headers=headers, **body) as response:
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            next(response.iter_raw())
        else:
            response.read()
        return response


def port_of(url: str) -> int:
    return httpx.URL(url).port or 80


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_a_page_on_another_domain_resolving_here_is_refused_on_every_route(
    http: httpx.Client, base_url: str, method: str, path: str
) -> None:
    """DNS rebinding: the attacker's page is same-origin with its own Host, so the Host itself is checked."""
    evil = f"evil.example:{port_of(base_url)}"
    response = call(http, method, path, host=evil, origin=f"http://{evil}")
    assert response.status_code == 400
    assert response.json() == {"error": f"the host {evil!r} is not served here (create_app's allowed_hosts)"}


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]", "LOCALHOST"])
@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_the_loopback_names_are_served_on_any_port(
    http: httpx.Client, base_url: str, host: str, method: str, path: str
) -> None:
    named = f"{host}:{port_of(base_url)}"
    response = call(http, method, path, host=named, origin=f"http://{named}")
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("allowed", "hosts"),
    [
        (["chat.example"], {"chat.example:8443": True, "chat.example": True, "localhost:8000": False}),
        (["chat.example:443"], {"chat.example:443": True, "chat.example:8443": False, "chat.example": False}),
        (["*.example.com"], {"eu.chat.example.com:1": True, "example.com": False, "evilexample.com": False}),
        (["*"], {"anything.example": True}),
        (["localhost", "[::1]"], {"localhost:80:80": False, "localhost:http": False, "[::1": False, "": False}),
    ],
)
def test_allowed_hosts_names_the_hosts_served(allowed: list[str], hosts: dict[str, bool]) -> None:
    app = create_app(store="memory:", domain=WebNotes(), agent=scripted_agents([]), allowed_hosts=allowed)
    with serving(app) as url, httpx.Client(base_url=url, timeout=10.0) as client:
        statuses = {host: client.get("/conversations", headers={"host": host}).status_code for host in hosts}
    assert statuses == {host: 200 if served else 400 for host, served in hosts.items()}


@pytest.mark.parametrize("allowed", [["http://chat.example"], ["chat.example/"], "localhost"])
def test_an_allowed_hosts_entry_that_is_not_a_host_is_refused_when_the_app_is_made(allowed: Any) -> None:
    with pytest.raises((ValueError, TypeError), match="allowed_hosts"):
        create_app(store="memory:", domain=WebNotes(), agent=scripted_agents([]), allowed_hosts=allowed)


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_an_origin_neither_its_own_nor_allowed_is_refused_on_every_route(
    http: httpx.Client, method: str, path: str
) -> None:
    response = call(http, method, path, origin="https://evil.example")
    assert response.status_code == 403
    assert response.json() == {"error": "origin 'https://evil.example' may not call here"}


def test_an_allowed_origin_s_preflight_is_answered_and_its_responses_carry_cors(http: httpx.Client) -> None:
    asked = {
        "origin": ALLOWED,
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type, authorization",
    }
    preflight = http.options("/agui", headers=asked)
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == ALLOWED
    assert preflight.headers["access-control-allow-credentials"] == "true"
    assert preflight.headers["access-control-allow-methods"] == "GET, POST"
    assert preflight.headers["access-control-allow-headers"] == "content-type, authorization"
    assert "Origin" in preflight.headers["vary"]
    response = call(http, "POST", "/agui", origin=ALLOWED)
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == ALLOWED
    assert response.headers["access-control-allow-credentials"] == "true"
    assert "Origin" in response.headers["vary"]


@pytest.mark.parametrize(
    ("headers", "status", "error"),
    [
        (
            {"origin": "https://evil.example", "access-control-request-method": "POST"},
            403,
            "origin 'https://evil.example' may not call here",
        ),
        (
            {"origin": ALLOWED, "access-control-request-method": "DELETE"},
            403,
            "'DELETE' is not a method this server takes",
        ),
    ],
)
def test_a_preflight_that_may_not_is_refused_in_json(
    http: httpx.Client, headers: dict[str, str], status: int, error: str
) -> None:
    response = http.options("/agui", headers=headers)
    assert response.status_code == status
    assert response.json() == {"error": error}
    assert "access-control-allow-origin" not in response.headers


def test_the_server_s_own_origin_gets_no_cors_headers(http: httpx.Client, base_url: str) -> None:
    response = call(http, "GET", "/conversations", origin=base_url)
    assert response.status_code == 200 and "access-control-allow-origin" not in response.headers


@pytest.mark.parametrize(
    ("method", "path", "status", "error"),
    [
        ("GET", "/nowhere", 404, "nothing at '/nowhere'"),
        ("GET", "/static/missing.js", 404, "nothing at '/static/missing.js'"),
        ("GET", "/agui", 405, "GET is not allowed here"),
        ("DELETE", "/conversations", 405, "DELETE is not allowed here"),
        ("POST", "/static/dial-chat.js", 405, "POST is not allowed here"),
        (
            "GET",
            "/conversations/broken/changes",
            500,
            "the server failed on this request; its log has the details",
        ),
    ],
)
def test_errors_are_json_and_name_nothing_of_an_exception(
    http: httpx.Client, method: str, path: str, status: int, error: str
) -> None:
    response = http.request(method, path)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"error": error}
