"""Origin bindings: which key an origin (one hash chain of events) belongs to, and the proof of it.

Owns: the rule that decides whether "origin X is written with key K" may be believed
(proto/PROTOCOL.md §5.5, "Origin bindings"). A receiver verifies every event of an origin with
the key that origin is bound to, and an origin never changes keys, so whoever binds an origin
first decides whose events of it are accepted. A binding must therefore be *proven by the key
it binds*, never merely asserted by whoever relays it:

* a **key-derived** origin (``ori2_…``, every origin minted since protocol 2) is
  ``sha256(key ‖ nonce)``: the binding carries the 16-byte nonce and anyone recomputes the id.
  Nobody can bind such an origin to another key (that would take a sha256 second preimage), and
  anyone may relay the proof;
* a **legacy** origin (``ori_…``, random, minted before protocol 2) carries a 64-byte Ed25519
  signature of its key over ``"palace/origin-binding/v1\\n" ‖ palace_id ‖ "\\n" ‖ origin``. Only
  the key's holder can make it. It cannot stop a member from claiming, with its *own* key, a
  legacy origin a receiver has never seen (first binding wins) — which is why no new legacy
  origin is ever minted, and why a daemon retires its legacy origin when it upgrades.

The certificate that carries the key is checked against the palace CA elsewhere (pki.py); this
module checks only that the proof fits the key. Pure: stdlib and cryptography; no clock, no IO.
"""

from __future__ import annotations

import dataclasses
from typing import Final, final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .ids import ORIGIN_ID_RE, ORIGIN_NONCE_BYTES, is_key_derived_origin, origin_id_for_key

__all__ = ["BindingProofError", "OriginBinding", "check_binding_proof", "legacy_binding_signature",
           "LEGACY_PROOF_BYTES"]

#: a legacy origin's proof is an Ed25519 signature
LEGACY_PROOF_BYTES: Final = 64
_LEGACY_DOMAIN: Final = b"palace/origin-binding/v1\n"


class BindingProofError(Exception):
    """A binding's proof does not show that the origin belongs to the key."""


@final
@dataclasses.dataclass(frozen=True, slots=True)
class OriginBinding:
    """Origin ``origin`` is written with the key of member certificate ``certificate`` (PEM);
    ``proof`` is the nonce (key-derived origin) or the key's signature (legacy origin)."""

    origin: str
    certificate: bytes
    proof: bytes


def _legacy_message(palace_id: str, origin: str) -> bytes:
    return _LEGACY_DOMAIN + palace_id.encode("utf-8") + b"\n" + origin.encode("utf-8")


def legacy_binding_signature(key: Ed25519PrivateKey, palace_id: str, origin: str) -> bytes:
    """The proof a daemon gives for one of its own legacy origins."""
    return key.sign(_legacy_message(palace_id, origin))


def check_binding_proof(origin: str, public_key: bytes, proof: bytes, palace_id: str) -> None:
    """Check that ``proof`` shows ``origin`` belongs to ``public_key`` (raw Ed25519, 32 bytes).

    Raises:
        BindingProofError: naming what does not fit (never another exception type).
    """
    if not isinstance(origin, str) or not ORIGIN_ID_RE.match(origin):
        raise BindingProofError(f"{origin!r} is not an origin id")
    if is_key_derived_origin(origin):
        if len(proof) != ORIGIN_NONCE_BYTES:
            raise BindingProofError(f"origin {origin} is key-derived: its proof must be its {ORIGIN_NONCE_BYTES}-byte "
                                    "nonce")
        try:
            derived = origin_id_for_key(public_key, proof)
        except ValueError as exc:
            raise BindingProofError(f"origin {origin}: {exc}") from None
        if derived != origin:
            raise BindingProofError(f"origin {origin} is not derived from that key")
        return
    if len(proof) != LEGACY_PROOF_BYTES:
        raise BindingProofError(f"origin {origin} is a legacy origin: its proof must be a {LEGACY_PROOF_BYTES}-byte "
                                "signature of its key")
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(proof, _legacy_message(palace_id, origin))
    except (InvalidSignature, ValueError):
        raise BindingProofError(f"origin {origin}: the binding is not signed by the key it binds") from None
