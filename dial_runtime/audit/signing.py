"""Signed chain heads: an Ed25519 signature over where a conversation's hash chain stood, checked with the public
key alone.

A hash chain (:mod:`dial_runtime.stores.chain`) shows an entry edited, removed, inserted or moved, but not a log
rewritten whole with every hash recomputed, nor entries cut from its end. A :class:`SignedHead` kept away from the
database does: it names the conversation, the last seq, the chain's link there (the head), the chain scheme and
when it was signed, and a log that no longer reaches that head at that seq was changed.

The signed bytes are ``b"dial-runtime signed head\\n"`` followed by the canonical JSON (as
:func:`~dial_runtime.stores.chain.canonical` writes it) of ``{"conversation_id", "head", "scheme", "seq",
"signed_at"}``. The document is JSON (:func:`dumps_signed_head`) holding those fields, the signer's key
fingerprint (``key``: ``"ed25519:"`` and the SHA-256 of the raw public key, in hex) and the signature (base64).
Keys are PEM: PKCS #8 for the private key (unencrypted: keep the file to its owner), SubjectPublicKeyInfo for the
public one.

Needs the ``cryptography`` package.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from datetime import datetime, timezone
from typing import Literal

import msgspec

try:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
except ImportError as error:  # pragma: no cover - the package is a dependency of signing only
    raise ImportError("signing chain heads needs cryptography: pip install 'dial-runtime[sign]'") from error

from ..stores.chain import SCHEME, SCHEMES, ChainCheck, canonical, scheme_of, well_formed

__all__ = [
    "FORMAT",
    "HeadMatch",
    "SignedHead",
    "dumps_signed_head",
    "fingerprint",
    "generate_key",
    "load_private_key",
    "load_public_key",
    "loads_signed_head",
    "private_key_pem",
    "public_key_pem",
    "sign_head",
    "verify_head",
]

#: The ``format`` of a signature document.
FORMAT = "dial-runtime-signed-head"

_DOMAIN = b"dial-runtime signed head\n"


class SignedHead(msgspec.Struct, frozen=True, kw_only=True):
    """A conversation's chain head as signed: the conversation, its last seq, the chain's link there, the chain
    scheme, when (ISO 8601, UTC), the signer's key fingerprint and the signature (base64)."""

    format: str = FORMAT
    conversation_id: str
    seq: int
    head: str
    scheme: int
    signed_at: str
    key: str
    signature: str

    def signed_bytes(self) -> bytes:
        """The bytes the signature covers."""
        fields = {
            "conversation_id": self.conversation_id,
            "head": self.head,
            "scheme": self.scheme,
            "seq": self.seq,
            "signed_at": self.signed_at,
        }
        return _DOMAIN + canonical(fields).encode("ascii")


Status = Literal["head", "prefix", "other key", "altered", "missing", "removed", "rewritten", "broken"]


class HeadMatch(msgspec.Struct, frozen=True):
    """How a stored log stands to a signed head: ``head`` (the stored head is the signed one) and ``prefix``
    (the log grew since: the entries after the signed head are not signed, which is not tampering) match; the
    rest do not. ``reason`` says it in words; ``unsigned`` is the number of entries after the signed head."""

    status: Status
    reason: str
    unsigned: int = 0

    @property
    def ok(self) -> bool:
        """Whether the stored log reaches the signed head."""
        return self.status in ("head", "prefix")


def generate_key() -> Ed25519PrivateKey:
    """A new Ed25519 signing key."""
    return Ed25519PrivateKey.generate()


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    """``key`` as unencrypted PKCS #8 PEM."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def public_key_pem(key: Ed25519PrivateKey | Ed25519PublicKey) -> bytes:
    """The public key (of ``key``) as SubjectPublicKeyInfo PEM."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_private_key(pem: bytes) -> Ed25519PrivateKey:
    """The Ed25519 private key in ``pem``; ``ValueError`` saying why when it holds none."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError:
        raise ValueError(
            "the private key is encrypted; give an unencrypted PEM key (what keygen writes)"
        ) from None
    except ValueError:
        raise ValueError(f"not a PEM private key{_what(pem)}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"a {type(key).__name__.removeprefix('_')} key, not an Ed25519 one")
    return key


def load_public_key(pem: bytes) -> Ed25519PublicKey:
    """The Ed25519 public key in ``pem``; ``ValueError`` saying why when it holds none."""
    if b"PRIVATE KEY-----" in pem:
        raise ValueError("a private key: verifying needs only the public key (keygen's PUBLIC_PATH)")
    try:
        key = serialization.load_pem_public_key(pem)
    except ValueError:
        raise ValueError(f"not a PEM public key{_what(pem)}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"a {type(key).__name__.removeprefix('_')} key, not an Ed25519 one")
    return key


def _what(pem: bytes) -> str:
    return " (the file is empty)" if not pem.strip() else ""


def fingerprint(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """The public key's fingerprint: ``"ed25519:"`` and the SHA-256 of its 32 raw bytes, in hex."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()


def sign_head(check: ChainCheck, key: Ed25519PrivateKey, *, signed_at: datetime | None = None) -> SignedHead:
    """Sign the head of a verified chain; ``ValueError`` for a chain that does not match (its break is what
    would be signed) or a conversation with no entries."""
    if check.broken is not None:
        raise ValueError(f"conversation {check.conversation_id!r}: will not sign a broken chain: {check.broken}")
    if check.entries == 0:
        raise ValueError(f"conversation {check.conversation_id!r} has no entries to sign")
    when = (signed_at or datetime.now(timezone.utc)).astimezone(timezone.utc)
    unsigned = SignedHead(
        conversation_id=check.conversation_id,
        seq=check.head_seq,
        head=check.head,
        scheme=scheme_of(check.head) or SCHEME,  # the scheme of the hash signed
        signed_at=when.isoformat(timespec="seconds").replace("+00:00", "Z"),
        key=fingerprint(key),
        signature="",
    )
    signature = base64.b64encode(key.sign(unsigned.signed_bytes())).decode("ascii")
    return msgspec.structs.replace(unsigned, signature=signature)


def dumps_signed_head(signed: SignedHead) -> str:
    """The signature document as JSON text (one object, its fields in a fixed order, a newline at the end)."""
    return msgspec.json.format(msgspec.json.encode(signed), indent=2).decode() + "\n"


def loads_signed_head(text: str) -> SignedHead:
    """The signature document :func:`dumps_signed_head` wrote; ``ValueError`` saying what is wrong with it."""
    try:
        data = msgspec.json.decode(text)
    except ValueError as error:
        raise ValueError(f"not a signature document: not JSON ({error})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a signature document (its format is not {FORMAT!r})")
    try:
        signed = msgspec.convert(data, SignedHead)
    except msgspec.ValidationError as error:
        raise ValueError(f"not a signature document: {error}") from None
    if signed.scheme not in SCHEMES:
        known = " and ".join(str(scheme) for scheme in SCHEMES)
        raise ValueError(f"the signature is of chain scheme {signed.scheme}; this version knows schemes {known}")
    if signed.seq < 1 or not well_formed(signed.head):
        raise ValueError("not a signature document: its seq or head is not one a chain has")
    return signed


def verify_head(signed: SignedHead, public_key: Ed25519PublicKey, check: ChainCheck | None) -> HeadMatch:
    """Whether ``signed`` is signed by ``public_key``, and how the stored chain ``check`` stands to it (``None``:
    the store holds no such conversation). ``check`` must have been made asking for the link at the signed seq
    (``verify_log(..., heads_at=[signed.seq])``)."""
    name = f"conversation {signed.conversation_id!r}"
    given = fingerprint(public_key)
    if signed.key != given:
        return HeadMatch(
            "other key",
            f"{name}: the head was signed by key {signed.key[:24]}…, not by the key given ({given[:24]}…)",
        )
    try:
        public_key.verify(base64.b64decode(signed.signature, validate=True), signed.signed_bytes())
    except (InvalidSignature, binascii.Error):
        return HeadMatch(
            "altered",
            f"{name}: the signature does not cover what the document says (its conversation, seq, head or time "
            "was altered, or its signature)",
        )
    at = f"signed head #{signed.seq} (signed {signed.signed_at})"
    if check is None or check.entries == 0:
        return HeadMatch("missing", f"{name}: the store holds no such conversation, but its {at} says it did")
    if check.entries < signed.seq:
        first = check.entries + 1
        cut = f"entry {first} was" if first == signed.seq else f"entries {first}–{signed.seq} were"
        return HeadMatch(
            "removed", f"{name}: the log ends at entry {check.entries}, before its {at}: {cut} removed"
        )
    link = check.heads.get(signed.seq)
    if link is None:
        return HeadMatch(
            "broken", f"{name}: the chain breaks before its {at} ({check.broken}), so the head cannot be reached"
        )
    if link != signed.head:
        return HeadMatch(
            "rewritten",
            f"{name}: entries 1–{signed.seq} no longer lead to its {at}: the log was rewritten, its hashes "
            "recomputed, since it was signed",
        )
    if signed.seq == check.entries:
        return HeadMatch("head", f"{name}: the stored head is the {at}")
    unsigned = check.entries - signed.seq
    later = f"entry {check.entries} came" if unsigned == 1 else f"entries {signed.seq + 1}–{check.entries} came"
    return HeadMatch(
        "prefix",
        f"{name}: the {at} is a prefix of the stored log: {later} after it, unsigned (not tampering: the log "
        "grew since it was signed; sign again to cover them)",
        unsigned,
    )
