"""Signed decision links (``dial_runtime.decisions.links``): every refusal with each kind of key, rotation and
retirement, a verifier holding only a public key, key files, links in URLs; no altered token and no garbage is
ever accepted, and nothing but ``LinkRefused`` ever comes out of reading one."""

from __future__ import annotations

import base64
import hmac
import json
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dial_runtime.decisions.links import (
    DECISIONS,
    DEFAULT_LEEWAY,
    MAX_LINK_LENGTH,
    MAX_TOKEN_LENGTH,
    REFUSAL_REASONS,
    TOKEN_TYPE,
    Algorithm,
    Ed25519Key,
    HmacKey,
    Keyring,
    LinkClaims,
    LinkKey,
    LinkRefused,
    MemoryUsedTokens,
    generate_key,
    link_url,
    token_from_url,
)
from dial_runtime.errors import DialError
from dial_runtime.runtime.records import Suggestion

KINDS: list[Algorithm] = ["HS256", "Ed25519"]
NOW = 1_700_000_000
VALID_FOR = 600
SHOWN = Suggestion(id="sg-1", action="add-note", payload={"text": "milk"})
EDITED = Suggestion(id="sg-1", action="add-note", payload={"text": "oat milk"})


def keyring(kind: Algorithm, key_id: str = "k1") -> Keyring:
    return Keyring([generate_key(kind, key_id=key_id)])


def issue(ring: Keyring, **changes: Any) -> str:
    """A link for ana to accept or dismiss sg-1 of c-1 as shown, for ten minutes from NOW."""
    arguments: dict[str, Any] = {
        "conversation_id": "c-1",
        "suggestion_id": "sg-1",
        "digest": SHOWN.digest,
        "decider": "ana",
        "decisions": ("accept", "dismiss"),
        "valid_for": VALID_FOR,
        "now": NOW,
    }
    return ring.issue(**{**arguments, **changes})


def verify(ring: Keyring, token: str, **changes: Any) -> LinkClaims:
    """Ana accepting sg-1 of c-1, its payload unchanged, a minute after the link was issued."""
    arguments: dict[str, Any] = {
        "conversation_id": "c-1",
        "suggestion_id": "sg-1",
        "waiting_digest": SHOWN.digest,
        "principal": "ana",
        "decision": "accept",
        "used": MemoryUsedTokens(),
        "now": NOW + 60,
    }
    return ring.verify(token, **{**arguments, **changes})


def fields(token: str) -> list[str]:
    return token.split(".")


def encode64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def decode64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def signed(ring: Keyring, claims: bytes, key_id: str = "k1", **header: Any) -> str:
    """A token with these claims bytes and this header, signed by the ring's key: what only a key holder could
    write."""
    key = ring.keys[key_id]
    headers = {"kid": key_id, "typ": TOKEN_TYPE, **header}
    return jwt.api_jws.encode(claims, key.signing_key(), algorithm=key.jws_algorithm, headers=headers)


def with_header(token: str, **changes: Any) -> str:
    """The token with its header changed (``None`` drops a field) and the rest kept: a tampered token."""
    header, claims, signature = fields(token)
    changed = {**json.loads(decode64(header)), **changes}
    kept = {name: value for name, value in changed.items() if value is not None}
    return ".".join([encode64(json.dumps(kept, separators=(",", ":")).encode()), claims, signature])


def with_claims(token: str, **changes: Any) -> str:
    """The token with its claims changed and its signature kept: a tampered token."""
    header, body, signature = fields(token)
    claims = {**json.loads(decode64(body)), **changes}
    return ".".join([header, encode64(canonical_json(claims)), signature])


def token_claims(token: str) -> dict[str, Any]:
    return json.loads(decode64(fields(token)[1]))  # type: ignore[no-any-return]


def canonical_json(claims: dict[str, Any]) -> bytes:
    return json.dumps(claims, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


#: How a refusal comes about: from a fresh keyring, the keyring that verifies, the token and what the verify
#: arguments change.
Case = Callable[[Keyring], tuple[Keyring, str, dict[str, Any]]]


def crafted(make: Callable[[Keyring], str], **changes: Any) -> Case:
    """A token ``make`` writes, verified with ``changes``."""
    return lambda ring: (ring, make(ring), changes)


def asked(issued: dict[str, Any] | None = None, **changes: Any) -> Case:
    """A link issued with the changes ``issued``, verified with ``changes``."""
    return lambda ring: (ring, issue(ring, **(issued or {})), changes)


def resigned(change: Callable[[dict[str, Any]], object]) -> Case:
    """A link whose claims ``change`` alters, signed again with the ring's key: claims no issuer writes."""

    def make(ring: Keyring) -> str:
        claims = token_claims(issue(ring))
        changed = change(claims)
        return signed(ring, changed if isinstance(changed, bytes) else canonical_json(claims))

    return crafted(make)


def replayed(*, consume: bool) -> Case:
    """A token used once already, used again (``consume``) or checked again."""

    def case(ring: Keyring) -> tuple[Keyring, str, dict[str, Any]]:
        issued = issue(ring)
        used = MemoryUsedTokens()
        verify(ring, issued, used=used)
        return ring, issued, {"used": used, "consume": consume}

    return case


def cut_signature(issued: str) -> str:
    """The token with its signature's first three bytes cut off (still canonical base64url)."""
    *head, signature = fields(issued)
    return ".".join([*head, signature[4:]])


def confused(ring: Keyring) -> str:
    """A token signed with HMAC-SHA256 keyed by what an attacker may know (an Ed25519 public key), under the
    ring's key id, its header naming HS256: JWT's algorithm confusion, which a key that fixes the algorithm rules
    out."""
    key = ring.keys["k1"]
    known = key.public_bytes if isinstance(key, Ed25519Key) else bytes(32)
    head = ".".join(fields(with_header(issue(ring), alg="HS256"))[:2])
    return f"{head}.{encode64(hmac.new(known, head.encode(), 'sha256').digest())}"


def unsigned(ring: Keyring) -> str:
    """A token whose header says ``"alg": "none"`` under the ring's key id, with no signature."""
    return ".".join(fields(with_header(issue(ring), alg="none"))[:2]) + "."


def to_standard_base64(issued: str) -> str:
    return issued.replace("-", "+").replace("_", "/") + "/+"


def retired_after_rotation(ring: Keyring) -> tuple[Keyring, str, dict[str, Any]]:
    """A token k1 signed, checked once k2 has been rotated in and k1 retired."""
    kind = ring.keys["k1"].algorithm
    return ring.rotate(generate_key(kind, key_id="k2")).retire("k1"), issue(ring), {}


def forged(ring: Keyring) -> tuple[Keyring, str, dict[str, Any]]:
    """A token signed by a key the forger made up, under the ring's key id."""
    return ring, issue(keyring(ring.keys["k1"].algorithm)), {}


def relabelled(ring: Keyring) -> tuple[Keyring, str, dict[str, Any]]:
    """A token k1 signed, renamed as k2's, checked by a ring holding both."""
    rotated = ring.rotate(generate_key(ring.keys["k1"].algorithm, key_id="k2"))
    return rotated, with_header(issue(ring), kid="k2"), {}


REFUSALS: list[tuple[str, str, Case]] = [
    ("malformed", "empty", crafted(lambda ring: "")),
    ("malformed", "two fields", crafted(lambda ring: ".".join(fields(issue(ring))[:2]))),
    ("malformed", "four fields", crafted(lambda ring: issue(ring) + ".AAAA")),
    ("malformed", "the earlier dl1 format", crafted(lambda ring: "dl1.k1.eyJjaWQiOiJjLTEifQ.AAAA")),
    ("malformed", "a JWT of another type", crafted(lambda ring: with_header(issue(ring), typ="JWT"))),
    ("malformed", "a JWT without a type", crafted(lambda ring: with_header(issue(ring), typ=None))),
    ("malformed", "a JWT without a key id", crafted(lambda ring: "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbmEifQ.")),
    ("malformed", "a header field links never have", crafted(lambda ring: with_header(issue(ring), jku="x"))),
    ("malformed", "padded base64", crafted(lambda ring: issue(ring) + "==")),
    ("malformed", "standard base64", crafted(lambda ring: to_standard_base64(issue(ring)))),
    ("malformed", "a key id with a space", crafted(lambda ring: with_header(issue(ring), kid="k 1"))),
    ("malformed", "non-ASCII", crafted(lambda ring: with_header(issue(ring), kid="kı"))),
    ("malformed", "a key id that is not text", crafted(lambda ring: with_header(issue(ring), kid=1))),
    ("malformed", "too long", crafted(lambda ring: issue(ring) + "A" * MAX_TOKEN_LENGTH)),
    ("malformed", "signed, not JSON", resigned(lambda claims: b"not json")),
    ("malformed", "signed, not an object", resigned(lambda claims: b"[1,2]")),
    ("malformed", "signed, an extra claim", resigned(lambda claims: claims.update(alg="none"))),
    ("malformed", "signed, a float time", resigned(lambda claims: claims.update(exp=1.7e9))),
    ("malformed", "signed, a decision twice", resigned(lambda claims: claims.update(dec=["accept", "accept"]))),
    ("malformed", "signed, no decider nor role", resigned(lambda claims: claims.pop("sub"))),
    ("unknown-key", "a key the ring never had", crafted(lambda ring: with_header(issue(ring), kid="k9"))),
    ("unknown-key", "a retired key", retired_after_rotation),
    ("bad-signature", "decider changed", crafted(lambda ring: with_claims(issue(ring), sub="mallory"))),
    ("bad-signature", "expiry pushed back", crafted(lambda ring: with_claims(issue(ring), exp=NOW + 10**6))),
    ("bad-signature", "edit allowed", crafted(lambda ring: with_claims(issue(ring), dec=list(DECISIONS)))),
    ("bad-signature", "no signature", crafted(lambda ring: issue(ring).rsplit(".", 1)[0] + ".")),
    ("bad-signature", "signature cut short", crafted(lambda ring: cut_signature(issue(ring)))),
    ("bad-signature", "HMAC keyed by public material", crafted(confused)),
    ("bad-signature", "no algorithm", crafted(unsigned)),
    ("bad-signature", "another ring's key of the same id", forged),
    ("bad-signature", "signed by another key, named k2", relabelled),
    ("not-yet-valid", "issued later than now", asked(now=NOW - DEFAULT_LEEWAY - 1)),
    ("not-yet-valid", "no leeway", asked(now=NOW - 1, leeway=0)),
    ("expired", "after its time", asked(now=NOW + VALID_FOR + DEFAULT_LEEWAY)),
    ("expired", "no leeway", asked(now=NOW + VALID_FOR, leeway=0)),
    ("wrong-conversation", "another conversation", asked(conversation_id="c-2")),
    ("wrong-suggestion", "another suggestion", asked(suggestion_id="sg-2")),
    ("wrong-person", "another person", asked(principal="bob")),
    (
        "wrong-person",
        "another role",
        asked({"decider": None, "roles": ["ops"]}, principal="bob", principal_roles=["dev"]),
    ),
    ("wrong-person", "the decider's name as a role", asked(principal="bob", principal_roles=["ana"])),
    ("decision-not-allowed", "an edit", asked(decision="edit")),
    ("decision-not-allowed", "a dismissal", asked({"decisions": ["accept"]}, decision="dismiss")),
    ("decision-not-allowed", "saying something", asked(decision="say")),
    ("payload-changed", "edited meanwhile", asked(waiting_digest=EDITED.digest)),
    ("replayed", "used already", replayed(consume=True)),
    ("replayed", "used already, only checked", replayed(consume=False)),
]


def test_every_reason_has_a_case() -> None:
    assert {reason for reason, _, _ in REFUSALS} == set(REFUSAL_REASONS)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("reason", "case"), [(reason, case) for reason, _, case in REFUSALS], ids=[c for _, c, _ in REFUSALS]
)
def test_each_refusal(kind: Algorithm, reason: str, case: Case) -> None:
    ring, token, changes = case(keyring(kind))
    used = changes.setdefault("used", MemoryUsedTokens())
    assert isinstance(used, MemoryUsedTokens)
    marked = len(used)
    with pytest.raises(LinkRefused) as refused:
        verify(ring, token, **changes)
    assert refused.value.reason == reason
    assert isinstance(refused.value, DialError)
    assert "\n" not in str(refused.value) and f"({reason})" in str(refused.value)
    assert len(used) == marked  # a refused token is never marked used


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"decision": "dismiss"},
        {"now": NOW - DEFAULT_LEEWAY},  # the issuer's clock a little ahead
        {"now": NOW + VALID_FOR + DEFAULT_LEEWAY - 1},  # just inside the leeway past expiry
        {"now": NOW + VALID_FOR - 1, "leeway": 0},
        {"principal": "ana", "principal_roles": ["dev"]},
        {"used": None},
    ],
    ids=["as issued", "dismiss", "clock ahead", "leeway after expiry", "no leeway", "with roles", "no single use"],
)
def test_accepted(kind: Algorithm, changes: dict[str, Any]) -> None:
    ring = keyring(kind)
    token = issue(ring)
    claims = verify(ring, token, **changes)
    assert (claims.conversation_id, claims.suggestion_id, claims.digest) == ("c-1", "sg-1", SHOWN.digest)
    assert claims.decider == "ana" and claims.decisions == {"accept", "dismiss"}
    assert (claims.issued_at, claims.expires_at) == (NOW, NOW + VALID_FOR)


@pytest.mark.parametrize("kind", KINDS)
def test_a_surface_reads_the_claims_then_verifies(kind: Algorithm) -> None:
    """A link that carries only its token: the claims, once authenticated, say which conversation to open and
    which suggestion to compare; the binding is checked by ``verify`` against what waits there."""
    ring = keyring(kind)
    token = issue(ring, conversation_id="c-7", suggestion_id="sg-3")
    claims = ring.authenticate(token, now=NOW + 1)
    assert (claims.conversation_id, claims.suggestion_id, claims.decider) == ("c-7", "sg-3", "ana")
    assert claims.may_be_used_by("ana") and not claims.may_be_used_by("bob", ["ana"])
    third = Suggestion(id="sg-3", action="add-note", payload={"text": "milk"})
    waiting = {"c-7": {"sg-3": third}}[claims.conversation_id][claims.suggestion_id]
    verified = verify(
        ring,
        token,
        conversation_id=claims.conversation_id,
        suggestion_id=waiting.id,
        waiting_digest=waiting.digest,
        now=NOW + 2,
    )
    assert verified == claims
    with pytest.raises(LinkRefused, match="bad-signature"):
        ring.authenticate(with_claims(token, cid="c-8"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_role_link_is_for_whoever_holds_the_role(kind: Algorithm) -> None:
    ring = keyring(kind)
    token = issue(ring, decider=None, roles=["ops", "oncall"])
    claims = verify(ring, token, principal="bob", principal_roles=["dev", "oncall"])
    assert claims.decider is None and claims.roles == {"ops", "oncall"}
    both = issue(ring, roles=["ops"])
    assert verify(ring, both, principal="ana").decider == "ana"
    assert verify(ring, both, principal="carol", principal_roles={"ops"}).roles == {"ops"}


@pytest.mark.parametrize("kind", KINDS)
def test_single_use(kind: Algorithm) -> None:
    """Checking (a confirmation page) marks nothing; deciding marks the token, once, and only when accepted."""
    ring = keyring(kind)
    token = issue(ring)
    used = MemoryUsedTokens()
    claims = verify(ring, token, used=used, consume=False)
    assert not used.is_used(claims.token_id)
    with pytest.raises(LinkRefused):
        verify(ring, token, used=used, principal="bob")
    assert not used.is_used(claims.token_id)
    verify(ring, token, used=used)
    assert used.is_used(claims.token_id)
    for consume in (True, False):
        with pytest.raises(LinkRefused, match="replayed"):
            verify(ring, token, used=used, consume=consume)
    other = issue(ring)
    assert verify(ring, other, used=used).token_id != claims.token_id


def test_marking_used_is_atomic_across_threads() -> None:
    used = MemoryUsedTokens()
    barrier = threading.Barrier(8)
    firsts: list[bool] = []

    def mark() -> None:
        barrier.wait()
        firsts.append(used.mark_used("t-1", NOW))

    threads = [threading.Thread(target=mark) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(firsts) == [False] * 7 + [True]


def test_used_ids_are_forgotten_once_their_tokens_expired() -> None:
    used = MemoryUsedTokens()
    used.mark_used("old", NOW)
    used.mark_used("new", NOW + 100)
    used.forget_expired(NOW + 1)
    assert not used.is_used("old") and used.is_used("new") and len(used) == 1


@pytest.mark.parametrize(("old", "new"), [(a, b) for a in KINDS for b in KINDS])
def test_rotation(old: Algorithm, new: Algorithm) -> None:
    """After rotation new links use the new key and the old key's links still verify, until it is retired."""
    first = keyring(old, "k1")
    before = issue(first)
    second = first.rotate(generate_key(new, key_id="k2"))
    after = issue(second)
    assert jwt.get_unverified_header(before)["kid"] == "k1" and jwt.get_unverified_header(after)["kid"] == "k2"
    assert second.current is second.keys["k2"] and list(second.keys) == ["k1", "k2"]
    assert first.current is first.keys["k1"] and list(first.keys) == ["k1"]  # a keyring never changes
    verify(second, before)
    verify(second, after)
    with pytest.raises(LinkRefused, match="unknown-key"):
        verify(first, after)
    third = second.retire("k1")
    assert third.retired == {"k1"} and list(third.keys) == ["k2"]
    with pytest.raises(LinkRefused, match="was retired") as refused:
        verify(third, before)
    assert refused.value.reason == "unknown-key"
    verify(third, after)


def test_rotation_refuses_what_would_muddle_key_ids() -> None:
    ring = keyring("HS256", "k1").rotate(generate_key("HS256", key_id="k2")).retire("k1")
    with pytest.raises(ValueError, match="current key"):
        ring.retire("k2")
    with pytest.raises(ValueError, match="no key"):
        ring.retire("k1")
    for reused in ("k1", "k2"):
        with pytest.raises(ValueError, match="taken"):
            ring.rotate(generate_key("Ed25519", key_id=reused))
    with pytest.raises(ValueError, match="two keys"):
        Keyring([generate_key("HS256", key_id="k1"), generate_key("Ed25519", key_id="k1")])
    with pytest.raises(ValueError, match="retired"):
        Keyring([generate_key("HS256", key_id="k1")], retired=["k1"])
    with pytest.raises(ValueError, match="not in the keyring"):
        Keyring([generate_key("HS256", key_id="k1")], current="k2")


def test_a_verifier_with_only_the_public_key() -> None:
    issuer = Keyring([generate_key("HS256", key_id="shared"), generate_key("Ed25519", key_id="pair")])
    assert issuer.current is issuer.keys["pair"]
    token = issue(issuer)
    verifier = Keyring.from_json(issuer.public().to_json())
    assert verifier.current is None and list(verifier.keys) == ["pair"]  # the HMAC secret is not handed out
    assert '"private"' not in verifier.to_json() and '"secret"' not in verifier.to_json()
    assert verify(verifier, token).decider == "ana"
    with pytest.raises(ValueError, match="only verifies"):
        issue(verifier)
    with pytest.raises(ValueError, match="cannot sign"):
        verifier.keys["pair"].signing_key()
    with pytest.raises(ValueError, match="cannot sign"):
        Keyring(verifier.keys.values(), current="pair")
    with pytest.raises(LinkRefused, match="bad-signature"):
        verify(verifier, with_claims(token, sub="mallory"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_key_file_round_trip(kind: Algorithm, tmp_path: Path) -> None:
    ring = (
        keyring(kind, "k1").rotate(generate_key("Ed25519", key_id="k2")).rotate(generate_key("HS256", key_id="k3"))
    )
    ring = ring.retire("k2")
    old = issue(Keyring(ring.keys.values(), current="k1"))
    path = tmp_path / "link-keys.json"
    ring.dump(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.listdir(tmp_path) == ["link-keys.json"]
    loaded = Keyring.load(path)
    assert loaded.to_json() == ring.to_json() == path.read_text()
    assert repr(loaded) == "Keyring(current='k3', keys=['k1', 'k3'], retired=['k2'])"
    verify(loaded, old)
    verify(ring, issue(loaded))
    ring.retire("k1").dump(path)  # replaces the file
    with pytest.raises(LinkRefused, match="unknown-key"):
        verify(Keyring.load(path), old)


def test_keys_never_show_their_secrets() -> None:
    for key in (generate_key("HS256", key_id="k1"), generate_key("Ed25519", key_id="k2")):
        material = json.loads(Keyring([key]).to_json())["keys"][0]
        secret = material.get("secret") or material["private"]
        assert secret not in repr(key) and secret not in repr(Keyring([key]))
    pair = generate_key("Ed25519", key_id="k2")
    assert isinstance(pair, Ed25519Key) and repr(pair) == "Ed25519Key('k2')"
    assert repr(pair.public_key()) == "Ed25519Key('k2', public only)"


def key_file(**changes: Any) -> str:
    document: dict[str, Any] = {
        "format": "dial-runtime/link-keys/1",
        "current": "k1",
        "keys": [{"id": "k1", "algorithm": "HS256", "secret": encode64(b"s" * 32)}],
        "retired": [],
    }
    return json.dumps({**document, **changes})


PAIR = json.loads(Keyring([generate_key("Ed25519", key_id="k1")]).to_json())["keys"][0]
OTHER_PAIR = json.loads(Keyring([generate_key("Ed25519", key_id="k1")]).to_json())["keys"][0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "is JSON"),
        ("[]", "not a link key file"),
        (key_file(format="dial-runtime/link-keys/2"), "not a link key file"),
        (key_file(keys={}), "are lists"),
        (key_file(current=1), "key id or null"),
        (key_file(keys=[{"id": "k1", "algorithm": "RS256", "secret": "AAAA"}]), "no such algorithm"),
        (key_file(keys=[{"id": "k1", "algorithm": "none"}]), "no such algorithm"),
        (key_file(keys=[{"id": "k1", "algorithm": "HS256", "secret": encode64(b"s" * 16)}]), "at least 32 bytes"),
        (key_file(keys=[{"id": "k1", "algorithm": "HS256", "secret": "not base64!"}]), "base64url"),
        (key_file(keys=[{"id": "k1", "algorithm": "HS256"}]), "has the fields"),
        (
            key_file(keys=[{"id": "k1", "algorithm": "HS256", "secret": encode64(b"s" * 32), "public": "x"}]),
            "fields",
        ),
        (key_file(keys=[{"id": "k 1", "algorithm": "HS256", "secret": encode64(b"s" * 32)}]), "key id is"),
        (key_file(keys=[{"id": "k1", "algorithm": "HS256", "secret": 5}]), "object of strings"),
        (key_file(keys=[{**PAIR, "public": OTHER_PAIR["public"]}]), "not the private key's"),
        (key_file(keys=[{**PAIR, "public": encode64(b"p" * 31)}]), "32 bytes"),
        (key_file(retired=["k1"]), "cannot be held"),
        (key_file(current="k2"), "not in the keyring"),
    ],
)
def test_a_bad_key_file_is_refused_saying_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Keyring.from_json(text)


def test_a_verify_only_key_file() -> None:
    public = {key: value for key, value in PAIR.items() if key != "private"}
    ring = Keyring.from_json(key_file(current=None, keys=[public]))
    assert ring.current is None and not ring.keys["k1"].can_sign


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"decider": None}, "decider, or the roles"),
        ({"decider": ""}, "non-empty"),
        ({"conversation_id": ""}, "non-empty"),
        ({"suggestion_id": "sg-\ud800"}, "UTF-8"),
        ({"digest": "abc"}, "payload_digest"),
        ({"digest": SHOWN.digest.upper()}, "payload_digest"),
        ({"decisions": []}, "allows some of"),
        ({"decisions": ["accept", "say"]}, "allows some of"),
        ({"roles": [""]}, "non-empty"),
        ({"valid_for": 0}, "positive"),
        ({"valid_for": float("inf")}, "positive"),
        ({"conversation_id": "c" * MAX_TOKEN_LENGTH}, "over the limit"),
    ],
)
def test_issue_refuses_a_link_it_could_not_verify(changes: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        issue(keyring("HS256"), **changes)


def test_a_single_string_is_not_taken_for_a_collection() -> None:
    ring = keyring("HS256")
    with pytest.raises(TypeError):
        issue(ring, roles="ops")
    with pytest.raises(TypeError):
        verify(ring, issue(ring), principal="bob", principal_roles="ops")


def test_a_clock_that_is_not_a_time_is_the_caller_s_error() -> None:
    ring = keyring("HS256")
    for changes in ({"now": float("nan")}, {"leeway": -1}, {"leeway": float("inf")}):
        with pytest.raises(ValueError, match="leeway"):
            verify(ring, issue(ring), **changes)


def test_the_token_format() -> None:
    """A JWT in JWS compact form: the header names the key and its algorithm, the claims are the documented ones,
    and any JWT library verifies it with the key (here PyJWT's own, and HMAC by hand)."""
    secret = b"s" * 32
    ring = Keyring([HmacKey("k1", secret)])
    token = issue(ring, roles=["ops"])
    header, body, signature = fields(token)
    assert json.loads(decode64(header)) == {"alg": "HS256", "kid": "k1", "typ": TOKEN_TYPE}
    claims = token_claims(token)
    assert set(claims) == {"cid", "sid", "dig", "sub", "rol", "dec", "iat", "exp", "jti"}
    assert claims["dig"] == SHOWN.digest and claims["dec"] == ["accept", "dismiss"] and claims["rol"] == ["ops"]
    assert (claims["iat"], claims["exp"]) == (NOW, NOW + VALID_FOR)
    expected = hmac.new(secret, f"{header}.{body}".encode(), "sha256").digest()
    assert decode64(signature) == expected
    assert jwt.decode(token, secret, algorithms=["HS256"], options={"verify_exp": False}) == claims
    assert "=" not in token and len(token) < 450
    assert "rol" not in token_claims(issue(ring))  # an absent optional claim is left out


def test_claims_another_jwt_library_spells_otherwise_are_accepted() -> None:
    """Spaced JSON, keys in another order, lists unsorted, another header order: what any issuer may write."""
    ring = keyring("HS256")
    claims = token_claims(issue(ring))
    claims["dec"] = list(reversed(claims["dec"]))
    spelt = json.dumps(dict(reversed(list(claims.items()))), indent=1).encode()
    accepted = verify(ring, signed(ring, spelt))
    assert accepted.decisions == {"accept", "dismiss"}


def test_a_link_carries_its_token_in_the_query() -> None:
    ring = keyring("Ed25519")
    token = issue(ring)
    assert link_url("https://dial.example/decide", token) == f"https://dial.example/decide?token={token}"
    kept = link_url("https://dial.example/d?lang=fr#top", token)
    assert kept == f"https://dial.example/d?lang=fr&token={token}#top"
    for text in (
        kept,
        f"?token={token}",
        f"token={token}&lang=fr",
        token,
        f"  {kept}\n",
        f"https://dial.example/d?token={token.replace('.', '%2E')}",
    ):
        assert token_from_url(text) == token
    with pytest.raises(ValueError, match="already"):
        link_url(kept, token)
    with pytest.raises(ValueError, match="takes a token"):
        link_url("https://dial.example/d", "not a token")


@pytest.mark.parametrize(
    "text",
    [
        "https://dial.example/d",
        "https://dial.example/d?lang=fr",
        "https://dial.example/d?token=",
        "https://dial.example/d?token=abc",
        "https://dial.example/d?token=ab.cd.ef&token=ab.cd.ef",
        "https://dial.example/d#token=ab.cd.ef",
        "&" * 200 + "token=ab.cd.ef",
        "https://dial.example/d?token=" + "A" * MAX_LINK_LENGTH,
    ],
)
def test_a_link_without_one_token_is_refused(text: str) -> None:
    with pytest.raises(LinkRefused) as refused:
        token_from_url(text)
    assert refused.value.reason == "malformed"


def test_overlong_input_is_refused_before_it_is_read() -> None:
    """Refused on its length alone: a megabyte of query string is never parsed."""
    with pytest.raises(LinkRefused, match=f"over {MAX_LINK_LENGTH}"):
        token_from_url("token=" + "&a=b" * 250_000)
    with pytest.raises(LinkRefused, match=f"over {MAX_TOKEN_LENGTH}"):
        keyring("HS256").authenticate("." * 1_000_000)


# Hypothesis: altered tokens, garbage, and the claims' round trip.

RINGS = {kind: keyring(kind) for kind in KINDS}
TOKENS = {kind: issue(RINGS[kind]) for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=400)
@given(data=st.data())
def test_any_byte_flip_is_refused(kind: Algorithm, data: st.DataObject) -> None:
    ring = RINGS[kind]
    token = TOKENS[kind].encode("ascii")
    at = data.draw(st.integers(0, len(token) - 1), label="at")
    mask = data.draw(st.integers(1, 255), label="mask")
    flipped = bytearray(token)
    flipped[at] ^= mask
    with pytest.raises(LinkRefused):
        verify(ring, flipped.decode("latin-1"), now=NOW + 60)


@pytest.mark.parametrize("kind", KINDS)
def test_every_one_bit_flip_is_refused(kind: Algorithm) -> None:
    """Each bit of the token flipped alone, at every position (the test above tries any change of one byte)."""
    ring = RINGS[kind]
    token = TOKENS[kind].encode("ascii")
    reasons = set()
    for at in range(len(token)):
        for bit in range(8):
            flipped = bytearray(token)
            flipped[at] ^= 1 << bit
            with pytest.raises(LinkRefused) as refused:
                verify(ring, flipped.decode("latin-1"))
            reasons.add(refused.value.reason)
    assert reasons == {"malformed", "unknown-key", "bad-signature"}


@pytest.mark.parametrize("kind", KINDS)
@given(
    garbage=st.one_of(
        st.text(),
        st.text(alphabet="eyJ.kAZaz09_-=+/", max_size=120),
        st.from_regex(r"eyJ[A-Za-z0-9_-]{0,80}\.[A-Za-z0-9_-]{0,300}\.[A-Za-z0-9_-]{0,90}", fullmatch=True),
        st.binary().map(lambda raw: raw.decode("latin-1")),
    )
)
def test_garbage_is_refused_with_link_refused_only(kind: Algorithm, garbage: str) -> None:
    ring = RINGS[kind]
    with pytest.raises(LinkRefused):
        verify(ring, garbage)
    with pytest.raises(LinkRefused):
        verify(ring, token_from_url(garbage))
    with pytest.raises(LinkRefused):
        verify(ring, token_from_url(f"https://dial.example/d?token={garbage}"))
    with pytest.raises(LinkRefused):
        ring.authenticate(garbage)


@pytest.mark.parametrize("value", [None, b"ab.cd.ef", 42, ["ab"]])
def test_a_token_that_is_not_a_string_is_malformed(value: Any) -> None:
    with pytest.raises(LinkRefused, match="malformed"):
        keyring("HS256").authenticate(value)
    with pytest.raises(LinkRefused, match="malformed"):
        token_from_url(value)


ids = st.text(min_size=1, max_size=24)


@pytest.mark.parametrize("kind", KINDS)
@given(
    conversation_id=ids,
    suggestion_id=ids,
    decider=st.none() | ids,
    roles=st.frozensets(ids, max_size=3),
    decisions=st.frozensets(st.sampled_from(DECISIONS), min_size=1),
    payload=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    now=st.integers(0, 2**40),
    valid_for=st.integers(1, 10**8),
)
def test_claims_round_trip(
    kind: Algorithm,
    conversation_id: str,
    suggestion_id: str,
    decider: str | None,
    roles: frozenset[str],
    decisions: frozenset[str],
    payload: dict[str, str],
    now: int,
    valid_for: int,
) -> None:
    if decider is None and not roles:
        decider = "ana"
    ring = RINGS[kind]
    suggestion = Suggestion(id=suggestion_id, action="add-note", payload=payload)
    token = ring.issue(
        conversation_id=conversation_id,
        suggestion_id=suggestion.id,
        digest=suggestion.digest,
        decider=decider,
        roles=roles,
        decisions=decisions,
        valid_for=valid_for,
        now=now,
    )
    token = token_from_url(link_url("https://dial.example/décider?x=ü", token))
    claims = ring.verify(
        token,
        conversation_id=conversation_id,
        suggestion_id=suggestion.id,
        waiting_digest=suggestion.digest,
        principal=decider if decider is not None else "someone",
        principal_roles=roles,
        decision=min(decisions),
        used=MemoryUsedTokens(),
        now=now,
        leeway=0,
    )
    assert (claims.conversation_id, claims.suggestion_id, claims.digest) == (
        conversation_id,
        suggestion_id,
        suggestion.digest,
    )
    assert (claims.decider, claims.roles, claims.decisions) == (decider, roles, decisions)
    assert (claims.issued_at, claims.expires_at) == (now, now + valid_for)
    assert LinkClaims.from_wire(claims.to_wire()) == claims
    assert ring.sign(claims) == token  # one claims record, one token: both algorithms sign deterministically


def test_keys_kinds_are_the_documented_ones() -> None:
    key: LinkKey = generate_key("HS256")
    assert isinstance(key, HmacKey) and key.key_id.count("-") == 3
    with pytest.raises(ValueError, match="no such link key algorithm"):
        generate_key("RS256")  # type: ignore[arg-type]
