"""Signed decision links: a token that lets one person (or anyone in a role) decide one pending suggestion, on
exactly the payload they were shown, from wherever a URL reaches them (a mail, a chat message, a phone).

This module is the token layer only: it issues tokens, checks them and puts them in and out of URLs. It holds no
state and does no I/O except reading and writing a key file; the caller authenticates the person, looks up the
suggestion waiting now, keeps the ids of used tokens (:class:`UsedTokens`) and makes the decision.

A token is a JSON Web Token (RFC 7519) in JWS compact form (RFC 7515), signed and checked by PyJWT, so any
language's JWT library can verify one: ``<header>.<claims>.<signature>``, each unpadded base64url, at most
:data:`MAX_TOKEN_LENGTH` characters. The header is ``{"alg", "kid", "typ"}``: ``kid`` names the :class:`Keyring`
key that signed it (``[A-Za-z0-9_-]``, 1 to 64 characters), ``alg`` is that key's (``HS256``: HMAC-SHA256 with a
shared secret; ``EdDSA``: Ed25519), and ``typ`` is :data:`TOKEN_TYPE`, so a token of another kind signed by the
same key is not taken for a link. The header's ``alg`` is never trusted: the key id selects a key, the key has one
algorithm, and a token whose header names another is refused, so a token cannot choose how it is checked. The
claims (registered names where JWT has one):

====== ======================================================================================
cid    the conversation's id
sid    the suggestion's id
dig    the digest of the payload shown (``payload_digest``: ``sha256:`` and 64 hex digits)
sub    the one person who may use the link (left out: anyone with a role in ``rol``)
rol    the roles whose holders may use it (left out when none)
dec    the decisions it allows: some of ``accept``, ``dismiss``, ``edit``
iat    when it was issued (whole Unix seconds): it is not valid before
exp    when it stops being valid (whole Unix seconds)
jti    the token's unique id, 22 URL-safe characters by default: what single use is kept by
====== ======================================================================================

The claims are signed, not encrypted: anyone holding a link can read them, so they carry ids and digests, never
a payload. Verification refuses, with one :class:`LinkRefused` whose ``reason`` says why, anything this module
would not have written: another header field, another claim, a spelling of a field other than unpadded base64url.
It checks the times itself, against the ``now`` it is given, so a test or a replay can set the verifier's clock.
"""

from __future__ import annotations

import base64
import contextlib
import math
import os
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, get_args
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import jwt
import msgspec

from ..errors import LinkRefused as LinkRefused

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
    from jwt.types import Options

__all__ = [
    "DECISIONS",
    "DEFAULT_LEEWAY",
    "DEFAULT_VALID_FOR",
    "KEYRING_FORMAT",
    "MAX_LINK_LENGTH",
    "MAX_TOKEN_LENGTH",
    "QUERY_PARAMETER",
    "REFUSAL_REASONS",
    "TOKEN_TYPE",
    "Algorithm",
    "Ed25519Key",
    "HmacKey",
    "Keyring",
    "LinkClaims",
    "LinkKey",
    "LinkRefused",
    "MemoryUsedTokens",
    "RefusalReason",
    "UsedTokens",
    "generate_key",
    "link_url",
    "token_from_url",
]

TOKEN_TYPE = "dial-link+jwt"
"""The ``typ`` of every token's header: the format described in this module's docstring."""

MAX_TOKEN_LENGTH = 2048
"""The longest token, in characters: longer input is refused before any parsing, and ``issue`` refuses claims
whose token would be longer (the ids are then too long for a link)."""

MAX_LINK_LENGTH = 4096
"""The longest URL or query string :func:`token_from_url` reads."""

QUERY_PARAMETER = "token"
"""The query parameter that carries the token in a link."""

DECISIONS: tuple[str, ...] = ("accept", "dismiss", "edit")
"""The decisions a link can allow (saying something instead is not a decision a link makes)."""

DEFAULT_LEEWAY = 30.0
"""Seconds of clock difference between issuer and verifier tolerated at both ends of a token's validity."""

DEFAULT_VALID_FOR = 24 * 3600.0
"""Seconds a link stays valid unless ``issue`` is told otherwise."""

KEYRING_FORMAT = "dial-runtime/link-keys/1"
"""The ``format`` field of a key file (see :meth:`Keyring.to_json`)."""

RefusalReason: TypeAlias = Literal[
    "malformed",
    "unknown-key",
    "bad-signature",
    "not-yet-valid",
    "expired",
    "wrong-conversation",
    "wrong-suggestion",
    "wrong-person",
    "decision-not-allowed",
    "payload-changed",
    "replayed",
]
REFUSAL_REASONS: tuple[RefusalReason, ...] = get_args(RefusalReason)
"""Every :attr:`LinkRefused.reason`, in the order verification checks them."""

Algorithm: TypeAlias = Literal["HS256", "Ed25519"]

_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
_LATEST_TIME = 2**53  # the largest integer a JSON reader in any language holds exactly
_WIRE_REQUIRED = frozenset({"cid", "sid", "dig", "dec", "iat", "exp", "jti"})
_WIRE_OPTIONAL = frozenset({"sub", "rol"})
_HEADER = frozenset({"alg", "kid", "typ"})
#: PyJWT checks the signature and that the claims are a JSON object; this module checks every claim itself.
_SIGNATURE_ONLY: Options = {
    "verify_signature": True,
    "verify_exp": False,
    "verify_nbf": False,
    "verify_iat": False,
    "verify_aud": False,
    "verify_iss": False,
    "verify_sub": False,
    "verify_jti": False,
}


def _shown(value: str, limit: int = 40) -> str:
    """``value`` quoted on one line and cut to ``limit`` characters, for a message that names untrusted input."""
    return repr(value if len(value) <= limit else value[:limit] + "…")


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(timestamp))


def _encode64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _decode64(text: str) -> bytes | None:
    """The bytes of unpadded base64url ``text``, or ``None`` when it is not exactly what :func:`_encode64` writes
    for them (another alphabet, padding, stray bits in the last character: any other spelling of a token is
    refused, so one token has one spelling)."""
    if not _BASE64URL.fullmatch(text) or len(text) % 4 == 1:
        return None
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return data if _encode64(data) == text else None


def _check_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise ValueError(f"a {what} is 1 to 64 characters of A-Z, a-z, 0-9, '-' and '_' — got {value!r}")
    return value


def _check_text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"a link's {what} must be a non-empty string — got {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"a link's {what} must be encodable as UTF-8 — got {value!r}") from None
    return value


class LinkClaims(msgspec.Struct, frozen=True, kw_only=True):
    """What a decision link says: who (``decider``, or anyone holding one of ``roles``) may make which
    ``decisions`` on which suggestion of which conversation, on the payload whose digest is ``digest``, between
    ``issued_at`` and ``expires_at`` (Unix seconds); ``token_id`` is unique to the token, for single use.

    Construction checks every field (``ValueError``): a claims record is always one a token can carry.
    """

    conversation_id: str
    suggestion_id: str
    digest: str
    decisions: frozenset[str]
    issued_at: int
    expires_at: int
    token_id: str
    decider: str | None = None
    roles: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        _check_text(self.conversation_id, "conversation id")
        _check_text(self.suggestion_id, "suggestion id")
        if not isinstance(self.digest, str) or not _DIGEST.fullmatch(self.digest):
            raise ValueError(
                f"a link's digest is what payload_digest returns (sha256:<hex>) — got {self.digest!r}"
            )
        if self.decider is not None:
            _check_text(self.decider, "decider")
        if not isinstance(self.roles, frozenset) or not isinstance(self.decisions, frozenset):
            raise ValueError("a link's roles and decisions are frozensets")
        for role in self.roles:
            _check_text(role, "role")
        if self.decider is None and not self.roles:
            raise ValueError("a link names its decider, or the roles that may use it, or both")
        if not self.decisions or not self.decisions <= set(DECISIONS):
            raise ValueError(f"a link allows some of {', '.join(DECISIONS)} — got {sorted(self.decisions)!r}")
        times = (self.issued_at, self.expires_at)
        if any(type(moment) is not int for moment in times) or not 0 <= self.issued_at < self.expires_at:
            raise ValueError(f"a link's times are whole seconds, issued before it expires — got {times!r}")
        if self.expires_at > _LATEST_TIME:
            raise ValueError(f"a link's expiry is at most {_LATEST_TIME} — got {self.expires_at!r}")
        _check_id(self.token_id, "token id")

    def may_be_used_by(self, principal: str, principal_roles: Collection[str] = ()) -> bool:
        """Whether ``principal`` (holding ``principal_roles``) is the decider or holds one of the roles."""
        return principal == self.decider or not self.roles.isdisjoint(principal_roles)

    def to_wire(self) -> dict[str, Any]:
        """The JWT claims a token carries (see the module's docstring)."""
        wire: dict[str, Any] = {
            "cid": self.conversation_id,
            "sid": self.suggestion_id,
            "dig": self.digest,
            "dec": sorted(self.decisions),
            "iat": self.issued_at,
            "exp": self.expires_at,
            "jti": self.token_id,
        }
        if self.decider is not None:
            wire["sub"] = self.decider
        if self.roles:
            wire["rol"] = sorted(self.roles)
        return wire

    @classmethod
    def from_wire(cls, wire: object) -> LinkClaims:
        """The claims of a token's decoded JWT claims as :meth:`to_wire` writes them; ``ValueError`` for anything
        else (a claim it does not write, a time that is not a whole number, a list that is not of strings)."""
        if not isinstance(wire, dict) or not _WIRE_REQUIRED <= wire.keys() <= _WIRE_REQUIRED | _WIRE_OPTIONAL:
            raise ValueError("the claims are not an object of the link's keys")
        lists = [wire["dec"], wire.get("rol", [])]
        if not all(isinstance(items, list) and all(isinstance(item, str) for item in items) for items in lists):
            raise ValueError("the claims' decisions and roles are lists of strings")
        if len(set(wire["dec"])) != len(wire["dec"]) or len(set(wire.get("rol", ()))) != len(wire.get("rol", ())):
            raise ValueError("the claims' decisions and roles name each one once")
        return cls(
            conversation_id=wire["cid"],
            suggestion_id=wire["sid"],
            digest=wire["dig"],
            decisions=frozenset(wire["dec"]),
            issued_at=wire["iat"],
            expires_at=wire["exp"],
            token_id=wire["jti"],
            decider=wire.get("sub"),
            roles=frozenset(wire.get("rol", ())),
        )


class HmacKey:
    """A secret shared by everyone who issues or verifies links with it (HMAC-SHA256): for a server that does
    both. The secret is at least 32 bytes; it never shows in the key's ``repr``."""

    algorithm: Literal["HS256"] = "HS256"
    jws_algorithm = "HS256"
    __slots__ = ("_secret", "key_id")

    def __init__(self, key_id: str, secret: bytes) -> None:
        self.key_id = _check_id(key_id, "key id")
        if not isinstance(secret, bytes) or len(secret) < 32:
            raise ValueError(f"HMAC key {key_id!r}: the secret must be at least 32 bytes")
        self._secret = secret

    @property
    def can_sign(self) -> bool:
        """Always: whoever can verify with a shared secret can also sign."""
        return True

    def signing_key(self) -> bytes:
        """What PyJWT signs with: the secret."""
        return self._secret

    def verifying_key(self) -> bytes:
        """What PyJWT verifies with: the secret."""
        return self._secret

    def __repr__(self) -> str:
        return f"HmacKey({self.key_id!r})"


class Ed25519Key:
    """An Ed25519 key pair, or its public half alone (``private`` left out): the issuer signs with the private
    key, and a verifier elsewhere needs only the public one. Keys are the raw 32 bytes of each half; the private
    half never shows in the key's ``repr``. Needs the ``cryptography`` package."""

    algorithm: Literal["Ed25519"] = "Ed25519"
    jws_algorithm = "EdDSA"
    __slots__ = ("_private", "_public", "key_id", "public_bytes")

    def __init__(self, key_id: str, *, private: bytes | None = None, public: bytes | None = None) -> None:
        self.key_id = _check_id(key_id, "key id")
        try:
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
        except ImportError as error:  # pragma: no cover - the test environment has it
            raise ImportError(
                "Ed25519 link keys need the 'cryptography' package: pip install cryptography"
            ) from error
        for half, value in (("private", private), ("public", public)):
            if value is not None and (not isinstance(value, bytes) or len(value) != 32):
                raise ValueError(f"Ed25519 key {key_id!r}: the {half} key is 32 bytes")
        self._private: Ed25519PrivateKey | None = None
        if private is not None:
            self._private = Ed25519PrivateKey.from_private_bytes(private)
            derived = _raw_public(self._private.public_key())
            if public is not None and public != derived:
                raise ValueError(f"Ed25519 key {key_id!r}: the public key is not the private key's")
            public = derived
        if public is None:
            raise ValueError(f"Ed25519 key {key_id!r}: give the private key, the public key, or both")
        self._public: Ed25519PublicKey = Ed25519PublicKey.from_public_bytes(public)
        self.public_bytes = public

    @property
    def can_sign(self) -> bool:
        """Whether this key holds its private half."""
        return self._private is not None

    @property
    def private_bytes(self) -> bytes | None:
        """The raw private key (its 32-byte seed), or ``None`` for a public key."""
        if self._private is None:
            return None
        from cryptography.hazmat.primitives import serialization

        return self._private.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )

    def public_key(self) -> Ed25519Key:
        """This key's public half alone, under the same key id: what a verifier is given."""
        return Ed25519Key(self.key_id, public=self.public_bytes)

    def signing_key(self) -> Ed25519PrivateKey:
        """What PyJWT signs with: the private half."""
        if self._private is None:
            raise ValueError(f"Ed25519 key {self.key_id!r} is a public key: it verifies, it cannot sign")
        return self._private

    def verifying_key(self) -> Ed25519PublicKey:
        """What PyJWT verifies with: the public half."""
        return self._public

    def __repr__(self) -> str:
        half = "" if self.can_sign else ", public only"
        return f"Ed25519Key({self.key_id!r}{half})"


def _raw_public(key: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


LinkKey: TypeAlias = HmacKey | Ed25519Key


def generate_key(algorithm: Algorithm, *, key_id: str | None = None) -> LinkKey:
    """A new random key: ``HS256`` (a 32-byte secret) or ``Ed25519`` (a key pair). Its id defaults to today's
    date and a random suffix (``2025-06-01-3fa9c2``), so a key file shows how old each key is."""
    chosen = key_id if key_id is not None else time.strftime("%Y-%m-%d-", time.gmtime()) + secrets.token_hex(3)
    if algorithm == "HS256":
        return HmacKey(chosen, secrets.token_bytes(32))
    if algorithm == "Ed25519":
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        seed = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        return Ed25519Key(chosen, private=seed)
    raise ValueError(f"no such link key algorithm: {algorithm!r} (HS256 or Ed25519)")


class UsedTokens(Protocol):
    """Where the ids of used tokens are kept, so each link is used once; a store-backed one serves several
    workers. ``expires_at`` lets it forget an id once its token has expired (it is then refused anyway)."""

    def is_used(self, token_id: str) -> bool:
        """Whether the token with this id has been used."""
        ...

    def mark_used(self, token_id: str, expires_at: int) -> bool:
        """Mark the token used, atomically: ``True`` when this call marked it, ``False`` when it already was (a
        unique insert that may conflict, in a database)."""
        ...


class MemoryUsedTokens:
    """The ids of used tokens in this process's memory (safe across threads): for tests, and a single server."""

    def __init__(self) -> None:
        self._expiries: dict[str, int] = {}
        self._lock = threading.Lock()

    def is_used(self, token_id: str) -> bool:
        with self._lock:
            return token_id in self._expiries

    def mark_used(self, token_id: str, expires_at: int) -> bool:
        with self._lock:
            if token_id in self._expiries:
                return False
            self._expiries[token_id] = expires_at
            return True

    def forget_expired(self, before: float) -> None:
        """Forget the ids of tokens that expired before ``before`` (pass now less the verifier's leeway)."""
        with self._lock:
            self._expiries = {token: expiry for token, expiry in self._expiries.items() if expiry >= before}

    def __len__(self) -> int:
        return len(self._expiries)


class Keyring:
    """The keys that sign and verify decision links, by key id: the ``current`` key signs new links, every key
    verifies. Rotate by adding a new current key (:meth:`rotate`): links signed by the old one still verify until
    it is retired (:meth:`retire`), after which they are refused; a retired key id is remembered so it is never
    given to another key. A keyring never changes: :meth:`rotate` and :meth:`retire` return a new one.

    ``current`` defaults to the last key given that can sign (``None``: this keyring only verifies).
    """

    __slots__ = ("_current", "_keys", "_retired")

    def __init__(
        self, keys: Iterable[LinkKey], *, current: str | None = None, retired: Iterable[str] = ()
    ) -> None:
        held: dict[str, LinkKey] = {}
        for key in keys:
            if not isinstance(key, (HmacKey, Ed25519Key)):
                raise TypeError(f"a keyring holds HmacKey and Ed25519Key keys — got {key!r}")
            if key.key_id in held:
                raise ValueError(f"two keys with the id {key.key_id!r}")
            held[key.key_id] = key
        self._retired = frozenset(_check_id(key_id, "key id") for key_id in retired)
        if self._retired & held.keys():
            raise ValueError(f"retired key ids cannot be held: {sorted(self._retired & held.keys())!r}")
        if current is None:
            current = next((key.key_id for key in reversed(held.values()) if key.can_sign), None)
        elif current not in held:
            raise ValueError(f"the current key {current!r} is not in the keyring")
        elif not held[current].can_sign:
            raise ValueError(f"the current key {current!r} is a public key: it cannot sign")
        self._keys = held
        self._current = current

    @property
    def current(self) -> LinkKey | None:
        """The key that signs new links (``None``: this keyring only verifies)."""
        return None if self._current is None else self._keys[self._current]

    @property
    def keys(self) -> Mapping[str, LinkKey]:
        """Every key that verifies, by id, in the order they were added."""
        return MappingProxyType(self._keys)

    @property
    def retired(self) -> frozenset[str]:
        """The ids of retired keys: links they signed are refused."""
        return self._retired

    def rotate(self, key: LinkKey) -> Keyring:
        """This keyring with ``key`` added as the current key; the others still verify."""
        if key.key_id in self._keys or key.key_id in self._retired:
            raise ValueError(f"the key id {key.key_id!r} is taken: give the new key another id")
        return Keyring([*self._keys.values(), key], current=key.key_id, retired=self._retired)

    def retire(self, key_id: str) -> Keyring:
        """This keyring without the key ``key_id``: links it signed are refused from now on. The current key is
        retired only once another has been rotated in."""
        if key_id not in self._keys:
            raise ValueError(f"no key {key_id!r} in the keyring")
        if key_id == self._current:
            raise ValueError(f"{key_id!r} is the current key: rotate in a new one before retiring it")
        kept = [key for key in self._keys.values() if key.key_id != key_id]
        return Keyring(kept, current=self._current, retired=self._retired | {key_id})

    def public(self) -> Keyring:
        """The keyring a verifier elsewhere is given: the public halves of the Ed25519 keys, and the retired ids.
        HMAC keys are left out, their secret being the signing key."""
        halves = [key.public_key() for key in self._keys.values() if isinstance(key, Ed25519Key)]
        return Keyring(halves, retired=self._retired)

    def sign(self, claims: LinkClaims) -> str:
        """The token of ``claims``, signed with the current key."""
        key = self.current
        if key is None:
            raise ValueError("this keyring has no key that can sign: it only verifies")
        headers = {"kid": key.key_id, "typ": TOKEN_TYPE}
        token = jwt.encode(claims.to_wire(), key.signing_key(), algorithm=key.jws_algorithm, headers=headers)
        if len(token) > MAX_TOKEN_LENGTH:
            raise ValueError(
                f"the link's token would be {len(token)} characters, over the limit of {MAX_TOKEN_LENGTH}: "
                "its ids are too long for a link"
            )
        return token

    def issue(
        self,
        *,
        conversation_id: str,
        suggestion_id: str,
        digest: str,
        decider: str | None = None,
        roles: Iterable[str] = (),
        decisions: Iterable[str] = DECISIONS,
        valid_for: float = DEFAULT_VALID_FOR,
        now: float | None = None,
    ) -> str:
        """A token that lets ``decider`` (or anyone with one of ``roles``) make one of ``decisions`` on the
        suggestion ``suggestion_id`` of ``conversation_id`` while its payload's digest is ``digest``
        (``Suggestion.digest``), for ``valid_for`` seconds from ``now`` (default: the clock's time)."""
        if not math.isfinite(valid_for) or valid_for <= 0:
            raise ValueError(f"a link is valid for a positive number of seconds — got {valid_for!r}")
        if isinstance(roles, str) or isinstance(decisions, str):
            raise TypeError("issue takes roles and decisions as collections of strings, not one string")
        start = time.time() if now is None else now
        claims = LinkClaims(
            conversation_id=conversation_id,
            suggestion_id=suggestion_id,
            digest=digest,
            decider=decider,
            roles=frozenset(roles),
            decisions=frozenset(decisions),
            issued_at=math.floor(start),
            expires_at=math.ceil(start + valid_for),
            token_id=secrets.token_urlsafe(16),
        )
        return self.sign(claims)

    def authenticate(self, token: str, *, now: float | None = None, leeway: float = DEFAULT_LEEWAY) -> LinkClaims:
        """The claims of ``token`` once it is known to be well formed, signed by a key of this keyring and valid
        now (give or take ``leeway`` seconds): what a surface reads to find the conversation and suggestion
        before it calls :meth:`verify`. Raises :class:`LinkRefused` (``malformed``, ``unknown-key``,
        ``bad-signature``, ``expired``, ``not-yet-valid``); checks nothing the token is bound to."""
        if not isinstance(token, str):
            raise LinkRefused("malformed", f"a token is a string, not {type(token).__name__}")
        if len(token) > MAX_TOKEN_LENGTH:
            raise LinkRefused("malformed", f"the token is {len(token)} characters, over {MAX_TOKEN_LENGTH}")
        if not _TOKEN_SHAPE.fullmatch(token) or any(_decode64(part) is None for part in token.split(".")):
            raise LinkRefused("malformed", "not a decision link token (a JWT: <header>.<claims>.<signature>)")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise LinkRefused("malformed", "the token's header is not a JWT header") from None
        key_id = str(header.get("kid"))
        if header.keys() != _HEADER or header.get("typ") != TOKEN_TYPE or not _ID.fullmatch(key_id):
            raise LinkRefused("malformed", f"the token's header is not a decision link's ({TOKEN_TYPE})")
        key = self._keys.get(key_id)
        if key is None:
            why = "was retired" if key_id in self._retired else "is not in this keyring"
            raise LinkRefused("unknown-key", f"the token's key {key_id!r} {why}")
        try:
            # The key's own algorithm, never the header's; the times are checked below, against ``now``.
            wire = jwt.decode(token, key.verifying_key(), algorithms=[key.jws_algorithm], options=_SIGNATURE_ONLY)
        except (jwt.InvalidSignatureError, jwt.InvalidAlgorithmError):
            raise LinkRefused("bad-signature", f"the token was altered, or not signed by key {key_id!r}") from None
        except jwt.InvalidTokenError as error:
            raise LinkRefused("malformed", f"the token's claims are not a link's: {error}") from None
        try:
            claims = LinkClaims.from_wire(wire)
        except ValueError as error:
            raise LinkRefused("malformed", f"the token's claims are not a link's: {error}") from None
        moment = time.time() if now is None else now
        if not math.isfinite(moment) or not math.isfinite(leeway) or leeway < 0:
            raise ValueError(
                f"now is a time and leeway a number of seconds (at least 0) — got {now!r}, {leeway!r}"
            )
        if moment + leeway < claims.issued_at:
            raise LinkRefused("not-yet-valid", f"the link is valid from {_when(claims.issued_at)} (clocks apart?)")
        if moment - leeway >= claims.expires_at:
            raise LinkRefused("expired", f"the link expired at {_when(claims.expires_at)}")
        return claims

    def verify(
        self,
        token: str,
        *,
        conversation_id: str,
        suggestion_id: str,
        waiting_digest: str,
        principal: str,
        principal_roles: Collection[str] = (),
        decision: str,
        used: UsedTokens | None,
        consume: bool = True,
        now: float | None = None,
        leeway: float = DEFAULT_LEEWAY,
    ) -> LinkClaims:
        """The claims of ``token`` when it lets ``principal`` (the caller's authenticated person, holding
        ``principal_roles``) make ``decision`` (``accept``, ``dismiss`` or ``edit``) on the suggestion
        ``suggestion_id`` of ``conversation_id``, whose payload waiting now has the digest ``waiting_digest``.

        ``used`` keeps single use: with ``consume`` (the decision is about to be made) the token is marked used,
        atomically, once every other check has passed; without (a page that asks the person to confirm) it is only
        checked. ``used=None`` skips single use, for a caller that keeps it itself.

        Raises :class:`LinkRefused`, its ``reason`` being the first of :data:`REFUSAL_REASONS` that applies; a
        refused token is never marked used. Pass ``claims.digest`` on as ``decide(..., shown=)``: the conversation
        checks it again under its lock, against a payload edited after this check.
        """
        if isinstance(principal_roles, str):
            raise TypeError("verify takes principal_roles as a collection of strings, not one string")
        claims = self.authenticate(token, now=now, leeway=leeway)
        if conversation_id != claims.conversation_id:
            raise LinkRefused("wrong-conversation", "the link is for another conversation")
        if suggestion_id != claims.suggestion_id:
            raise LinkRefused(
                "wrong-suggestion",
                f"the link is for suggestion {_shown(claims.suggestion_id)}, not {_shown(suggestion_id)}",
            )
        if not claims.may_be_used_by(principal, principal_roles):
            raise LinkRefused("wrong-person", f"the link is not for {_shown(principal)}")
        if decision not in claims.decisions:
            allowed = ", ".join(sorted(claims.decisions))
            raise LinkRefused("decision-not-allowed", f"the link allows {allowed}, not {_shown(decision)}")
        if waiting_digest != claims.digest:
            raise LinkRefused("payload-changed", "the payload changed after the link was made: show it again")
        if used is not None:
            fresh = (
                used.mark_used(claims.token_id, claims.expires_at)
                if consume
                else not used.is_used(claims.token_id)
            )
            if not fresh:
                raise LinkRefused("replayed", "the link has been used already")
        return claims

    def to_json(self) -> str:
        """The keyring as a key file: a JSON object whose ``format`` is :data:`KEYRING_FORMAT`, ``current`` the
        signing key's id (or ``null``), ``keys`` a list of ``{"id", "algorithm", ...}`` with ``"secret"`` (HS256)
        or ``"public"`` and, for a key pair, ``"private"`` (Ed25519), each the unpadded base64url of the raw
        bytes, and ``retired`` the retired key ids. It holds secrets: keep it as you keep passwords."""
        entries: list[dict[str, str]] = []
        for key in self._keys.values():
            entry = {"id": key.key_id, "algorithm": key.algorithm}
            if isinstance(key, HmacKey):
                entry["secret"] = _encode64(key._secret)
            else:
                entry["public"] = _encode64(key.public_bytes)
                if key.private_bytes is not None:
                    entry["private"] = _encode64(key.private_bytes)
            entries.append(entry)
        document = {
            "format": KEYRING_FORMAT,
            "current": self._current,
            "keys": entries,
            "retired": sorted(self._retired),
        }
        return msgspec.json.format(msgspec.json.encode(document), indent=2).decode() + "\n"

    @classmethod
    def from_json(cls, text: str) -> Keyring:
        """The keyring of a key file as :meth:`to_json` writes it; ``ValueError`` saying what is wrong with it."""
        try:
            document = msgspec.json.decode(text)
        except ValueError as error:
            raise ValueError(f"a link key file is JSON: {error}") from None
        if not isinstance(document, dict) or document.get("format") != KEYRING_FORMAT:
            raise ValueError(f"not a link key file: its format is not {KEYRING_FORMAT!r}")
        entries, retired, current = document.get("keys"), document.get("retired", []), document.get("current")
        if not isinstance(entries, list) or not isinstance(retired, list):
            raise ValueError("a link key file's keys and retired are lists")
        if current is not None and not isinstance(current, str):
            raise ValueError("a link key file's current is a key id or null")
        return cls([_key_from_entry(entry) for entry in entries], current=current, retired=retired)

    def dump(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_json` to ``path``, readable by its owner only, replacing any file there at once (a
        reader sees the old keyring or the new one, never part of one)."""
        target = Path(path)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                file.write(self.to_json())
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Keyring:
        """The keyring in the key file at ``path``."""
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    def __repr__(self) -> str:
        return f"Keyring(current={self._current!r}, keys={list(self._keys)!r}, retired={sorted(self._retired)!r})"


def _key_from_entry(entry: object) -> LinkKey:
    """One key of a key file."""
    if not isinstance(entry, dict) or not all(isinstance(value, str) for value in entry.values()):
        raise ValueError(f"a link key is an object of strings — got {entry!r}")
    key_id, algorithm = entry.get("id"), entry.get("algorithm")
    fields = {"HS256": ({"secret"}, set()), "Ed25519": ({"public"}, {"private"})}.get(str(algorithm))
    if fields is None:
        raise ValueError(f"link key {key_id!r}: no such algorithm {algorithm!r} (HS256 or Ed25519)")
    required, optional = fields
    if not {"id", "algorithm"} | required <= entry.keys() <= {"id", "algorithm"} | required | optional:
        raise ValueError(
            f"link key {key_id!r} ({algorithm}) has the fields {sorted({'id', 'algorithm'} | required)}"
        )
    raw = {name: _decode64(value) for name, value in entry.items() if name not in ("id", "algorithm")}
    if any(value is None for value in raw.values()):
        raise ValueError(f"link key {key_id!r}: its key material is unpadded base64url")
    if algorithm == "HS256":
        return HmacKey(str(key_id), raw["secret"] or b"")
    return Ed25519Key(str(key_id), public=raw["public"], private=raw.get("private"))


def link_url(base_url: str, token: str) -> str:
    """``base_url`` with the token as its :data:`QUERY_PARAMETER` query parameter, after any it has already (a
    token is URL-safe as it is, so it is written unescaped)."""
    if len(token) > MAX_TOKEN_LENGTH or not _TOKEN_SHAPE.fullmatch(token):
        raise ValueError("link_url takes a token as Keyring.issue returns it")
    parts = urlsplit(base_url)
    if any(name == QUERY_PARAMETER for name, _ in parse_qsl(parts.query, keep_blank_values=True)):
        raise ValueError(f"the base URL has a {QUERY_PARAMETER!r} parameter already: {base_url!r}")
    query = f"{parts.query}&" if parts.query else ""
    return urlunsplit(parts._replace(query=f"{query}{QUERY_PARAMETER}={token}"))


def token_from_url(text: str) -> str:
    """The token in a link, its query string (with or without the ``?``), or a token as it is (whitespace around
    it is dropped, as a pasted link often has). Raises :class:`LinkRefused` (``malformed``) for input longer than
    :data:`MAX_LINK_LENGTH`, before reading any of it, and for a link with no token, or more than one; the token
    is not verified (:meth:`Keyring.verify` does that)."""
    if not isinstance(text, str):
        raise LinkRefused("malformed", f"a link is a string, not {type(text).__name__}")
    if len(text) > MAX_LINK_LENGTH:
        raise LinkRefused("malformed", f"the link is {len(text)} characters, over {MAX_LINK_LENGTH}")
    text = text.strip()
    if "?" not in text and "=" not in text:
        token = text
    else:
        query = text.split("#", 1)[0].split("?", 1)[-1]
        try:
            pairs = parse_qsl(query, keep_blank_values=True, max_num_fields=64)
        except ValueError:
            raise LinkRefused("malformed", "the link's query string has too many parameters") from None
        tokens = [value for name, value in pairs if name == QUERY_PARAMETER]
        if len(tokens) != 1:
            how = "no" if not tokens else "more than one"
            raise LinkRefused("malformed", f"the link has {how} {QUERY_PARAMETER!r} parameter")
        token = tokens[0]
    if len(token) > MAX_TOKEN_LENGTH or not _TOKEN_SHAPE.fullmatch(token):
        raise LinkRefused("malformed", "the link carries no decision link token")
    return token
