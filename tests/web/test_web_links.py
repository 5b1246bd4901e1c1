"""Decision links on the web surface over HTTP (a real uvicorn server, httpx): the page a link opens decides
nothing, a good link decides once and is logged ``via: "link"`` by its decider, and every refusal has its status,
leaves the card waiting, runs nothing and leaves the token as it was."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.to_thread
import httpx
import pytest

from dial_runtime import ActionSpec, ApprovalPolicy, open_store
from dial_runtime.decisions.links import REFUSAL_REASONS, Keyring, MemoryUsedTokens, generate_key, token_from_url
from dial_runtime.errors import StoreError
from dial_runtime.web import create_app, scripted_agents
from dial_runtime.web.decide import REFUSAL_STATUS, decision_links, decision_page

from ..web_domains import WebNotes
from ..web_links_setup import ACK, ADD, digest_of, events, issue, links_app, new_keyring, start, waiting
from ..web_server import accept, run_input, serving

KEYRING = new_keyring()
USED = MemoryUsedTokens()
SCRIPTS: dict[str, list[str]] = {}


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("links") / "conversations.db"


@pytest.fixture(scope="module")
def base_url(store_path: Path) -> Iterator[str]:
    with serving(links_app(store_path, SCRIPTS, KEYRING, USED)) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=10.0) as http:
        yield http


def page_data(response: httpx.Response) -> dict[str, Any]:
    """What a decision page shows, read from its JSON script element."""
    found = re.search(r'<script type="application/json" id="dial-decision-data">(.*?)</script>', response.text)
    assert found is not None, response.text
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def post(client: httpx.Client, token: str, decision: str, user: str = "ada", **extra: Any) -> httpx.Response:
    return client.post("/decide", json={"token": token, "decision": decision, **extra}, headers={"x-user": user})


def still_waiting(client: httpx.Client, store_path: Path, thread: str) -> None:
    """The card waits as it did, and nothing was decided or run."""
    assert [each["toolCallId"] for each in waiting(client, thread)] == ["sg-1"]
    assert events(store_path, thread, "decided") == []
    assert events(store_path, thread, "action-started") == []


def test_a_good_link_decides_once_logged_via_link_by_its_decider(client: httpx.Client, store_path: Path) -> None:
    thread = start(client, SCRIPTS, ADD, ACK)
    token = issue(KEYRING, thread, digest_of(client, thread))
    for _ in range(2):  # a mail scanner opens it first: opening decides nothing and uses nothing
        page = client.get("/decide", params={"token": token})
        assert page.status_code == 200
        assert page.headers["cache-control"] == "no-store"
        assert page.headers["referrer-policy"] == "no-referrer"
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        shown = page_data(page)
        assert shown["decisions"] == ["accept", "dismiss"]
        assert shown["card"]["id"] == "sg-1" and shown["card"]["preview"] == "Add the note 'buy milk'"
        assert shown["open"] == f"./?thread={thread}"
    still_waiting(client, store_path, thread)

    decided = post(client, token, "accept")
    assert decided.status_code == 200, decided.text
    body = decided.json()
    assert body["decision"] == "accept" and body["card"]["status"] == "done" and body["card"]["outcome"] == "Done"
    assert "token" not in body
    [logged] = events(store_path, thread, "decided")
    assert (logged.decision, logged.by, logged.via) == ("accept", "ada", "link")
    assert len(events(store_path, thread, "action-started")) == 1

    again = post(client, token, "accept")
    assert again.status_code == 410 and again.json()["reason"] == "replayed"
    assert again.json()["card"]["status"] == "done"
    reopened = client.get("/decide", params={"token": token})
    assert reopened.status_code == 410 and page_data(reopened)["reason"] == "replayed"
    assert len(events(store_path, thread, "decided")) == 1


def forged(token: str) -> str:
    """``token`` signed by another key under the same key id."""
    other = Keyring([generate_key("HS256", key_id="web-links")])
    claims = KEYRING.authenticate(token)
    return other.sign(claims)


def tampered(token: str) -> str:
    """``token`` with its claims swapped for another's, its signature kept."""
    header, _, signature = token.split(".")
    other = KEYRING.issue(conversation_id="x", suggestion_id="sg-1", digest="sha256:" + "0" * 64, decider="ada")
    return ".".join([header, other.split(".")[1], signature])


#: Each refusal: how the token is made (from the conversation and the digest waiting), who posts what, and the
#: reason and status expected.
REFUSALS: list[tuple[str, Any, str, str, str, int]] = [
    ("garbage", lambda t, d: "not-a-token", "ada", "accept", "malformed", 400),
    ("forged", lambda t, d: forged(issue(KEYRING, t, d)), "ada", "accept", "bad-signature", 403),
    ("tampered", lambda t, d: tampered(issue(KEYRING, t, d)), "ada", "accept", "bad-signature", 403),
    (
        "unknown key",
        lambda t, d: issue(Keyring([generate_key("HS256", key_id="elsewhere")]), t, d),
        "ada",
        "accept",
        "unknown-key",
        403,
    ),
    ("expired", lambda t, d: issue(KEYRING, t, d, valid_for=60, now=1_000_000), "ada", "accept", "expired", 410),
    (
        "not yet valid",
        lambda t, d: issue(KEYRING, t, d, now=4_000_000_000),
        "ada",
        "accept",
        "not-yet-valid",
        403,
    ),
    ("another's", lambda t, d: issue(KEYRING, t, d, decider="bob"), "ada", "accept", "wrong-person", 403),
    (
        "another role's",
        lambda t, d: issue(KEYRING, t, d, decider=None, roles=["reviewers"]),
        "ada",
        "accept",
        "wrong-person",
        403,
    ),
    (
        "not that decision",
        lambda t, d: issue(KEYRING, t, d, decisions=["dismiss"]),
        "ada",
        "accept",
        "decision-not-allowed",
        403,
    ),
    ("not signed in", lambda t, d: issue(KEYRING, t, d), "nobody", "accept", "not-signed-in", 401),
    (
        "a viewer's",
        lambda t, d: issue(KEYRING, t, d, decider="viewer"),
        "viewer",
        "accept",
        "forbidden",
        403,
    ),
    (
        "no such card",
        lambda t, d: issue(KEYRING, t, d, suggestion="sg-9"),
        "ada",
        "accept",
        "unknown-suggestion",
        404,
    ),
    (
        "a payload not shown",
        lambda t, d: issue(KEYRING, t, "sha256:" + "1" * 64),
        "ada",
        "accept",
        "payload-changed",
        409,
    ),
]


@pytest.mark.parametrize(
    ("make", "user", "decision", "reason", "status"),
    [pytest.param(*case[1:], id=case[0]) for case in REFUSALS],
)
def test_every_refusal_has_its_status_and_leaves_the_card_waiting(
    client: httpx.Client, store_path: Path, make: Any, user: str, decision: str, reason: str, status: int
) -> None:
    thread = start(client, SCRIPTS, ADD, ACK)
    token = make(thread, digest_of(client, thread))
    refused = post(client, token, decision, user=user)
    assert (refused.status_code, refused.json()["reason"]) == (status, reason), refused.text
    assert refused.json()["error"]
    assert refused.headers["cache-control"] == "no-store"
    page = client.get("/decide", params={"token": token}, headers={"x-user": user})
    if reason == "decision-not-allowed":  # the page offers what the link allows
        assert page.status_code == 200 and page_data(page)["decisions"] == ["dismiss"]
    else:
        assert page.status_code == status and page_data(page)["reason"] == reason
        assert page_data(page)["decisions"] == []
    still_waiting(client, store_path, thread)


def test_the_card_is_shown_only_to_the_links_own_person(client: httpx.Client) -> None:
    thread = start(client, SCRIPTS, ADD, ACK)
    digest = digest_of(client, thread)
    for token, user in (
        (issue(KEYRING, thread, digest, decider="bob"), "ada"),
        (tampered(issue(KEYRING, thread, digest)), "ada"),
    ):
        refused = post(client, token, "accept", user=user)
        assert "card" not in refused.json()
        assert page_data(client.get("/decide", params={"token": token}))["card"] is None
    changed = post(client, issue(KEYRING, thread, "sha256:" + "1" * 64), "accept")
    assert changed.json()["card"]["id"] == "sg-1"  # the right person, told what waits now


@pytest.mark.parametrize(
    ("body", "reason", "status"),
    [
        pytest.param(b"{not json", "malformed", 400, id="not JSON"),
        pytest.param(b'["accept"]', "malformed", 400, id="not an object"),
        pytest.param(b'{"token": "t", "decision": "say"}', "malformed", 400, id="not a link's decision"),
        pytest.param(b'{"token": 1, "decision": "accept"}', "malformed", 400, id="no token"),
        pytest.param(
            b'{"token": "t", "decision": "accept", "payload": {}}', "malformed", 400, id="accept+payload"
        ),
        pytest.param(b'{"token": "t", "decision": "edit"}', "malformed", 400, id="edit without payload"),
        pytest.param(b'{"token": "t", "decision": "accept", "by": "root"}', "malformed", 400, id="a key more"),
    ],
)
def test_a_body_that_is_not_a_decision_is_refused(
    client: httpx.Client, store_path: Path, body: bytes, reason: str, status: int
) -> None:
    thread = start(client, SCRIPTS, ADD, ACK)
    token = issue(KEYRING, thread, digest_of(client, thread))
    refused = client.post(
        "/decide",
        content=body.replace(b'"t"', json.dumps(token).encode()),
        headers={"content-type": "application/json"},
    )
    assert (refused.status_code, refused.json()["reason"]) == (status, reason)
    still_waiting(client, store_path, thread)
    assert post(client, token, "accept").status_code == 200  # the refusals used nothing


def test_a_decision_is_json_or_refused_415(client: httpx.Client, store_path: Path) -> None:
    thread = start(client, SCRIPTS, ADD, ACK)
    token = issue(KEYRING, thread, digest_of(client, thread))
    form = client.post("/decide", data={"token": token, "decision": "accept"})
    assert (form.status_code, form.json()["reason"]) == (415, "not-json")
    still_waiting(client, store_path, thread)


def test_a_page_without_a_token_says_so(client: httpx.Client) -> None:
    for query in ({}, {"token": ""}, {"thread": "x"}):
        page = client.get("/decide", params=query)
        assert page.status_code == 400 and page_data(page)["reason"] == "malformed"
    twice = client.get("/decide?token=a&token=b")
    assert twice.status_code == 400


def test_refused_attempts_never_use_the_token(client: httpx.Client, store_path: Path) -> None:
    thread = start(client, SCRIPTS, ADD, ACK)
    token = issue(KEYRING, thread, digest_of(client, thread), decisions=["dismiss"])
    assert post(client, token, "accept").json()["reason"] == "decision-not-allowed"
    assert post(client, token, "dismiss", user="bob").json()["reason"] == "wrong-person"
    assert post(client, token, "dismiss", user="nobody").status_code == 401
    done = post(client, token, "dismiss")
    assert done.status_code == 200 and done.json()["card"]["status"] == "dismissed"
    [logged] = events(store_path, thread, "decided")
    assert (logged.decision, logged.by, logged.via) == ("dismiss", "ada", "link")


def test_a_link_for_a_payload_edited_meanwhile_is_refused_payload_changed(
    client: httpx.Client, store_path: Path
) -> None:
    thread = start(client, SCRIPTS, ADD, ACK)
    [shown] = waiting(client, thread)
    token = issue(KEYRING, thread, shown["metadata"]["digest"])
    # In the panel, an edit the domain refuses: the refused payload waits now, under another digest.
    edit = {"approved": True, "editedArgs": {"text": ""}, "digest": shown["metadata"]["digest"]}
    client.post(
        "/agui",
        json=run_input(thread, resume=[{"interruptId": shown["id"], "status": "resolved", "payload": edit}]),
    )
    refused = post(client, token, "accept")
    assert (refused.status_code, refused.json()["reason"]) == (409, "payload-changed")
    assert refused.json()["card"]["payload"] == {"text": ""}
    page = client.get("/decide", params={"token": token})
    assert page.status_code == 409 and page_data(page)["reason"] == "payload-changed"
    assert [entry.decision for entry in events(store_path, thread, "decided")] == ["edit"]  # the panel's only
    assert events(store_path, thread, "action-started") == []


def test_a_card_decided_elsewhere_first_is_refused_already_decided(client: httpx.Client, store_path: Path) -> None:
    thread = start(client, SCRIPTS, ADD, ACK)
    [shown] = waiting(client, thread)
    token = issue(KEYRING, thread, shown["metadata"]["digest"])
    client.post("/agui", json=run_input(thread, resume=[accept(shown)]), headers={"x-user": "bob"})
    refused = post(client, token, "accept")
    assert (refused.status_code, refused.json()["reason"]) == (410, "already-decided")
    assert "by bob" in refused.json()["error"] and refused.json()["card"]["outcome"] == "Done"
    assert client.get("/decide", params={"token": token}).status_code == 410
    assert [entry.via for entry in events(store_path, thread, "decided")] == ["web"]


def test_a_link_for_a_role_is_anyone_holding_it(client: httpx.Client, store_path: Path) -> None:
    thread = start(client, SCRIPTS, ADD, ACK)
    token = issue(KEYRING, thread, digest_of(client, thread), decider=None, roles=["reviewers"])
    assert post(client, token, "accept", user="ada").json()["reason"] == "wrong-person"
    assert post(client, token, "accept", user="rita").status_code == 200
    [logged] = events(store_path, thread, "decided")
    assert (logged.by, logged.via) == ("rita", "link")


class ReviewedNotes(WebNotes):
    """The notebook, whose notes are added once two reviewers approve."""

    actions: ClassVar[dict[str, ActionSpec]] = {
        **WebNotes.actions,
        "add-note": ActionSpec(mutates=True, policy=ApprovalPolicy(approvals=2, roles=frozenset({"reviewers"}))),
    }


def test_an_approval_policy_counts_each_links_approval_with_its_roles(tmp_path: Path) -> None:
    scripts: dict[str, list[str]] = {}
    keyring = new_keyring()
    app = links_app(tmp_path / "reviewed.db", scripts, keyring, MemoryUsedTokens(), domain=ReviewedNotes())
    with serving(app) as url, httpx.Client(base_url=url, timeout=10.0) as http:
        thread = start(http, scripts, ADD, ACK)
        digest = digest_of(http, thread)
        rita, rex = (issue(keyring, thread, digest, decider=who) for who in ("rita", "rex"))
        first = post(http, rita, "accept", user="rita")
        assert first.status_code == 200, first.text
        assert first.json()["status"] == "awaiting" and "token" not in first.json()
        assert first.json()["card"]["approvers"] == ["rita"] and not first.json()["card"]["outcome"]
        assert post(http, rita, "accept", user="rita").json()["reason"] == "replayed"
        second = post(http, rex, "accept", user="rex")
        assert second.status_code == 200 and second.json()["card"]["outcome"] == "Done"
        logged = events(tmp_path / "reviewed.db", thread, "decided")
        assert [(each.by, each.via, each.roles) for each in logged] == [
            ("rita", "link", ("reviewers",)),
            ("rex", "link", ("reviewers",)),
        ]


def test_a_link_used_on_one_worker_is_refused_replayed_on_another_and_after_a_restart(tmp_path: Path) -> None:
    """Two workers serving one SQLite store (two apps, as ``serve --workers 2`` runs them), the used tokens kept
    where they are by default: the store's database. A link used on one, while its card still waits for a second
    approval, is refused ``replayed`` on the other, and by a worker started afterwards."""
    scripts: dict[str, list[str]] = {}
    keyring = new_keyring()
    path = tmp_path / "shared.db"
    first = links_app(path, scripts, keyring, None, domain=ReviewedNotes())
    second = links_app(path, scripts, keyring, None, domain=ReviewedNotes())
    with (
        serving(first) as one,
        serving(second) as two,
        httpx.Client(base_url=one, timeout=10.0) as http,
        httpx.Client(base_url=two, timeout=10.0) as other,
    ):
        thread = start(http, scripts, ADD, ACK)
        rita = issue(keyring, thread, digest_of(http, thread), decider="rita")
        assert post(http, rita, "accept", user="rita").json()["status"] == "awaiting"
        replayed = post(other, rita, "accept", user="rita")
        assert replayed.status_code == 410 and replayed.json()["reason"] == "replayed"
    restarted = links_app(path, scripts, keyring, None, domain=ReviewedNotes())
    with serving(restarted) as url, httpx.Client(base_url=url, timeout=10.0) as http:
        assert post(http, rita, "accept", user="rita").json()["reason"] == "replayed"
    assert len(events(path, thread, "decided")) == 1


class ForgetfulTokens(MemoryUsedTokens):
    """Used tokens kept in a database that went away once the check was made."""

    def mark_used(self, token_id: str, expires_at: int) -> bool:
        raise StoreError("the database went away")


def test_a_decision_stands_when_its_token_cannot_be_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The token's store failing after the decision is on the log: the answer is the decision's (200, the card
    done), the failure is logged for the operator, and a replay is refused as the ended card says."""
    scripts: dict[str, list[str]] = {}
    keyring = new_keyring()
    app = links_app(tmp_path / "forgetful.db", scripts, keyring, ForgetfulTokens())
    with serving(app) as url, httpx.Client(base_url=url, timeout=10.0) as http:
        thread = start(http, scripts, ADD, ACK)
        token = issue(keyring, thread, digest_of(http, thread), decider="ada")
        with caplog.at_level(logging.ERROR, logger="dial_runtime"):
            decided = post(http, token, "accept")
        assert decided.status_code == 200 and decided.json()["card"]["outcome"] == "Done", decided.text
        assert "could not be kept" in caplog.text
        assert post(http, token, "accept").json()["reason"] == "already-decided"


def test_the_panel_passes_the_principals_roles_too(tmp_path: Path) -> None:
    scripts: dict[str, list[str]] = {}
    app = links_app(tmp_path / "panel.db", scripts, new_keyring(), MemoryUsedTokens(), domain=ReviewedNotes())
    with serving(app) as url, httpx.Client(base_url=url, timeout=10.0) as http:
        thread = start(http, scripts, ADD, ACK)
        for who in ("rita", "rex"):
            [shown] = waiting(http, thread)
            http.post("/agui", json=run_input(thread, resume=[accept(shown)]), headers={"x-user": who})
        logged = events(tmp_path / "panel.db", thread, "decided")
        assert [(each.by, each.via, each.roles) for each in logged] == [
            ("rita", "web", ("reviewers",)),
            ("rex", "web", ("reviewers",)),
        ]
        assert len(events(tmp_path / "panel.db", thread, "action-started")) == 1


def test_an_edit_the_domain_refuses_waits_with_a_link_for_the_refused_payload(
    client: httpx.Client, store_path: Path
) -> None:
    thread = start(client, SCRIPTS, ADD, ACK)
    token = issue(KEYRING, thread, digest_of(client, thread), decisions=["accept", "edit"])
    refused = post(client, token, "edit", payload={"text": ""})
    assert refused.status_code == 200, refused.text
    body = refused.json()
    assert body["status"] == "awaiting" and body["card"]["issue"]["field"] == "text"
    follow = body["token"]
    claims, first = KEYRING.authenticate(follow), KEYRING.authenticate(token)
    assert (claims.decider, claims.decisions, claims.expires_at) == (
        first.decider,
        first.decisions,
        first.expires_at,
    )
    assert claims.digest == body["card"]["digest"] != first.digest
    assert post(client, token, "edit", payload={"text": "oat milk"}).json()["reason"] == "payload-changed"
    ran = post(client, follow, "edit", payload={"text": "oat milk"})
    assert ran.status_code == 200 and ran.json()["card"]["status"] == "done"
    assert ran.json()["card"]["payload"] == {"text": "oat milk"}
    assert [(each.decision, each.via) for each in events(store_path, thread, "decided")] == [
        ("edit", "link"),
        ("edit", "link"),
    ]


def test_an_edit_goes_to_the_digit(client: httpx.Client, store_path: Path) -> None:
    thread = start(client, SCRIPTS, ADD, ACK)
    token = issue(KEYRING, thread, digest_of(client, thread), decisions=["edit"])
    big = 9007199254740993
    body = f'{{"token": "{token}", "decision": "edit", "payload": {{"text": "pay", "amount_cents": {big}}}}}'
    ran = client.post("/decide", content=body, headers={"content-type": "application/json"})
    assert ran.status_code == 200, ran.text
    [started] = events(store_path, thread, "action-started")
    assert started.payload["amount_cents"] == big


def test_a_busy_conversation_is_refused_409_and_the_link_works_after(
    client: httpx.Client, store_path: Path
) -> None:
    thread = start(client, SCRIPTS, ADD, ACK)
    token = issue(KEYRING, thread, digest_of(client, thread))

    async def held() -> httpx.Response:
        store = open_store(f"sqlite:{store_path}")
        try:
            async with store.lock(thread):
                return await anyio.to_thread.run_sync(lambda: post(client, token, "accept"))
        finally:
            await store.aclose()

    busy = anyio.run(held)
    assert (busy.status_code, busy.json()["reason"]) == (409, "busy")
    assert busy.headers["retry-after"] == "1"
    still_waiting(client, store_path, thread)
    assert post(client, token, "accept").status_code == 200


def test_every_refusal_reason_has_a_status() -> None:
    assert set(REFUSAL_REASONS) <= REFUSAL_STATUS.keys()
    assert {REFUSAL_STATUS[each] for each in ("bad-signature", "wrong-person", "unknown-key")} == {403}
    assert {REFUSAL_STATUS[each] for each in ("expired", "replayed", "already-decided")} == {410}
    assert (REFUSAL_STATUS["payload-changed"], REFUSAL_STATUS["malformed"]) == (409, 400)


def test_decision_links_give_one_link_per_decision_and_one_to_open(client: httpx.Client, store_path: Path) -> None:
    thread = start(client, SCRIPTS, ADD, ACK)
    [shown] = waiting(client, thread)
    links = decision_links(
        KEYRING, "https://dial.example/team/", thread, _Waiting("sg-1", shown["metadata"]["digest"]), decider="ada"
    )
    assert list(links) == ["accept", "dismiss", "open"]
    assert all(url.startswith("https://dial.example/team/decide?token=eyJ") for url in links.values())
    allowed = {name: KEYRING.authenticate(token_from_url(url)).decisions for name, url in links.items()}
    assert allowed == {"accept": {"accept"}, "dismiss": {"dismiss"}, "open": {"accept", "dismiss"}}
    assert len({token_from_url(url) for url in links.values()}) == 3
    for name, offered in (("accept", ["accept"]), ("open", ["accept", "dismiss"])):
        page = client.get(links[name].removeprefix("https://dial.example/team"))
        assert page_data(page)["decisions"] == offered
    assert post(client, token_from_url(links["dismiss"]), "dismiss").status_code == 200
    late = post(client, token_from_url(links["accept"]), "accept")
    assert (late.status_code, late.json()["reason"]) == (410, "already-decided")
    with_edit = decision_links(
        KEYRING,
        "http://127.0.0.1:8000",
        thread,
        _Waiting("sg-1", "sha256:" + "0" * 64),
        roles=["reviewers"],
        decisions=["accept", "edit"],
    )
    assert list(with_edit) == ["accept", "edit", "open"]
    for bad in ("ftp://dial.example", "dial.example", "https://dial.example/?x=1"):
        with pytest.raises(ValueError):
            decision_links(KEYRING, bad, thread, _Waiting("sg-1", "sha256:" + "0" * 64), decider="ada")


class _Waiting:
    def __init__(self, ident: str, digest: str) -> None:
        self.id = ident
        self.digest = digest


def test_what_the_page_carries_cannot_end_its_script_element(client: httpx.Client) -> None:
    hostile = "</script><script>window.__xss=1</script><!-- "
    thread = start(
        client, SCRIPTS, ADD.replace("buy milk", hostile.replace("<", "&lt;").replace(">", "&gt;")), ACK
    )
    token = issue(KEYRING, thread, digest_of(client, thread))
    page = client.get("/decide", params={"token": token})
    assert page.status_code == 200
    assert page.text.count("</script>") == 2 and "<!--" not in page.text
    assert page_data(page)["card"]["payload"] == {"text": hostile}
    separators = decision_page({"text": "a\u2028b\u2029c & d"})
    assert "\u2028" not in separators and "\u2029" not in separators and " & " not in separators
    assert "a\\u2028b\\u2029c \\u0026 d" in separators


def test_without_auth_a_link_is_for_local_or_a_role_roles_gives_it(tmp_path: Path) -> None:
    keyring = new_keyring()
    scripts: dict[str, list[str]] = {}
    app = create_app(
        store=f"sqlite:{tmp_path / 'local.db'}",
        domain=WebNotes(),
        agent=scripted_agents(scripts),
        links=keyring,
        roles=lambda who: ["owner"] if who == "local" else [],
        deadlines=None,
    )
    with serving(app) as url, httpx.Client(base_url=url, timeout=10.0) as http:
        thread = start(http, scripts, ADD, ACK)
        digest = digest_of(http, thread)
        assert (
            post(http, issue(keyring, thread, digest, decider="ada"), "accept").json()["reason"] == "wrong-person"
        )
        assert (
            post(http, issue(keyring, thread, digest, decider=None, roles=["owner"]), "accept").status_code == 200
        )
        [logged] = events(tmp_path / "local.db", thread, "decided")
        assert (logged.by, logged.via) == ("local", "link")
        second = start(http, scripts, ADD, ACK)
        assert (
            post(http, issue(keyring, second, digest_of(http, second), decider="local"), "dismiss").status_code
            == 200
        )


def test_links_are_served_only_with_a_keyring(client: httpx.Client, tmp_path: Path) -> None:
    app = create_app(store="memory:", domain=WebNotes(), agent=scripted_agents([]), deadlines=None)
    with serving(app) as url, httpx.Client(base_url=url, timeout=10.0) as http:
        assert http.get("/decide", params={"token": "x"}).status_code == 404
        assert http.post("/decide", json={}).status_code == 404
    for wrong in ({"public_url": "https://dial.example"}, {"used_tokens": MemoryUsedTokens()}):
        with pytest.raises(ValueError, match="go with links"):
            create_app(store="memory:", domain=WebNotes(), agent=scripted_agents([]), **wrong)
    with pytest.raises(ValueError, match="public URL"):
        create_app(store="memory:", domain=WebNotes(), agent=scripted_agents([]), links=KEYRING, public_url="x")
    scripts: dict[str, list[str]] = {}
    bare = create_app(
        store="memory:",
        domain=WebNotes(),
        agent=scripted_agents(scripts),
        links=KEYRING,
        panel=False,
        deadlines=None,
    )
    with serving(bare) as url, httpx.Client(base_url=url, timeout=10.0) as http:
        assert http.get("/static/dial-card.js").status_code == 200  # the page's files, without the panel
        assert http.get("/").status_code == 404
        thread = start(http, scripts, ADD, ACK)
        token = issue(KEYRING, thread, digest_of(http, thread), decider="local")
        shown = page_data(http.get("/decide", params={"token": token}))
        assert shown["card"]["id"] == "sg-1" and shown["open"] is None


class OpsOnlyNotes(WebNotes):
    """The notebook, whose notes are added only on the word of a reviewer."""

    actions: ClassVar[dict[str, ActionSpec]] = {
        **WebNotes.actions,
        "add-note": ActionSpec(mutates=True, policy=ApprovalPolicy(roles=frozenset({"reviewers"}))),
    }


def test_the_panel_refuses_an_outsiders_dismissal_and_words_as_the_library_does(tmp_path: Path) -> None:
    """ada (staff, not a reviewer) may decide in the app, but the card's policy reserves it for reviewers: her
    dismissal and her new words over it are refused by the fold and logged, and the card waits for a reviewer."""
    scripts: dict[str, list[str]] = {}
    path = tmp_path / "ops.db"
    app = links_app(path, scripts, new_keyring(), MemoryUsedTokens(), domain=OpsOnlyNotes())
    with serving(app) as url, httpx.Client(base_url=url, timeout=10.0) as http:
        thread = start(http, scripts, ADD, ACK)
        (shown,) = waiting(http, thread)
        entry = {"interruptId": shown["id"], "status": "resolved", "payload": {"approved": False}}
        refused = http.post("/agui", json=run_input(thread, resume=[entry]), headers={"x-user": "ada"})
        assert refused.status_code == 200, refused.text
        http.post("/agui", json=run_input(thread, words="never mind"), headers={"x-user": "ada"})
        assert [each["toolCallId"] for each in waiting(http, thread)] == ["sg-1"]
        assert [(e.by, e.code, e.decision) for e in events(path, thread, "approval-refused")] == [
            ("ada", "not-a-decider", "dismiss"),
            ("ada", "not-a-decider", "say"),
        ]
        assert events(path, thread, "decided") == [] and events(path, thread, "said")[-1].text == "add milk"
        (shown,) = waiting(http, thread)
        entry = {"interruptId": shown["id"], "status": "resolved", "payload": {"approved": False}}
        http.post("/agui", json=run_input(thread, resume=[entry]), headers={"x-user": "rita"})
        assert [(e.by, e.decision) for e in events(path, thread, "decided")] == [("rita", "dismiss")]
