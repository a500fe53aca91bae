"""Identifiers: event, artifact and origin ids, and human-comparable key fingerprints.

Owns: how ids are derived, so that every replica computes the same id for the same event.

- An **event id** is ``evt_<YYYYMMDDTHHMMSS>_<20 hex>``: the timestamp (UTC, from ``created_at``)
  is for readability only, the hex is the first 80 bits of the event hash. The id is therefore
  identical on every replica and self-verifying (recompute the hash, compare).
- An **artifact id** is ``art_<32 hex>``: the first 128 bits of the content's sha256, so identical
  bytes get the identical id everywhere (content addressing).
- An **origin id** names one hash chain of events, minted once per database; a wiped, re-created or
  restored database never reuses one (p2p-lessons: SSB forks). Since protocol 2 it is
  ``ori2_<26 base32>``: 128 bits of sha256 over the daemon's public key and 16 random bytes (the
  *nonce*), so whoever knows the nonce can check which key an origin belongs to and nobody can
  claim another daemon's origin for their own key (proto/PROTOCOL.md §5.5, "Origin bindings").
  Origins minted before that are ``ori_<26 base32>`` from 128 random bits (*legacy*): they stay
  valid as history, bound by a signature of their key instead.
- A **fingerprint** names an Ed25519 public key for humans, Syncthing style: base32 of the
  sha256, with a Luhn mod-32 check character per 13-character group, in dash-separated groups of
  seven, so a mistyped character is caught.

Pure: the caller supplies the random bytes; no clock, no IO.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Final, NewType

__all__ = [
    "ARTIFACT_ID_RE",
    "EVENT_ID_RE",
    "ArtifactId",
    "EventId",
    "OriginId",
    "Seq",
    "artifact_id_for_sha256",
    "event_id_for",
    "fingerprint",
    "fingerprint_is_valid",
    "is_key_derived_origin",
    "origin_id_for_key",
    "origin_id_from_random",
]

EventId = NewType("EventId", str)
ArtifactId = NewType("ArtifactId", str)
OriginId = NewType("OriginId", str)
Seq = NewType("Seq", int)

EVENT_ID_RE: Final = re.compile(r"^evt_\d{8}T\d{6}_[0-9a-f]{20}$")
ARTIFACT_ID_RE: Final = re.compile(r"^art_[0-9a-f]{32}$")
SHA256_HEX_RE: Final = re.compile(r"^[0-9a-f]{64}$")
#: an origin id of either form: key-derived (``ori2_``) or legacy (``ori_``, random)
ORIGIN_ID_RE: Final = re.compile(r"^ori2?_[a-z2-7]{26}$")
KEY_DERIVED_ORIGIN_PREFIX: Final = "ori2_"
#: bytes of the random nonce a key-derived origin id is computed from
ORIGIN_NONCE_BYTES: Final = 16

_B32: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


def event_id_for(created_at: str, event_hash: bytes) -> EventId:
    """Derive the event id from its ``created_at`` (``YYYY-MM-DDTHH:MM:SS[.ffffff]Z``) and hash."""
    stamp = created_at[0:4] + created_at[5:7] + created_at[8:10] + "T" + created_at[11:13] + created_at[14:16] + created_at[17:19]
    return EventId(f"evt_{stamp}_{event_hash[:10].hex()}")


def artifact_id_for_sha256(sha256_hex: str) -> ArtifactId:
    """Derive the artifact id from the hex sha256 of its bytes."""
    return ArtifactId(f"art_{sha256_hex[:32]}")


def origin_id_for_key(public_key: bytes, nonce: bytes) -> OriginId:
    """The key-derived origin id of ``public_key`` (raw Ed25519, 32 bytes) with ``nonce`` (16 random
    bytes the caller draws from ``os.urandom``): ``ori2_`` + base32 of sha256's first 128 bits.

    Raises:
        ValueError: a key that is not 32 bytes or a nonce that is not 16.
    """
    if len(public_key) != 32 or len(nonce) != ORIGIN_NONCE_BYTES:
        raise ValueError("an origin id derives from a 32-byte public key and a 16-byte nonce")
    digest = hashlib.sha256(b"palace/origin/v2\n" + public_key + nonce).digest()[:16]
    return OriginId(KEY_DERIVED_ORIGIN_PREFIX + base64.b32encode(digest).decode("ascii").rstrip("=").lower())


def is_key_derived_origin(origin: str) -> bool:
    """True for an ``ori2_`` origin id (bound by derivation), False for a legacy ``ori_`` one."""
    return origin.startswith(KEY_DERIVED_ORIGIN_PREFIX)


def origin_id_from_random(random16: bytes) -> OriginId:
    """A legacy origin id from 16 random bytes (minted before protocol 2; tests and history only)."""
    if len(random16) != 16:
        raise ValueError("an origin id needs exactly 16 random bytes")
    return OriginId("ori_" + base64.b32encode(random16).decode("ascii").rstrip("=").lower())


def _luhn32(group: str) -> str:
    # Syncthing's variant (lib/protocol/luhn.go): factors alternate 1, 2 from the left.
    factor, total = 1, 0
    for ch in group:
        addend = factor * _B32.index(ch)
        factor = 1 if factor == 2 else 2
        total += addend // 32 + addend % 32
    return _B32[(32 - total % 32) % 32]


def fingerprint(public_key: bytes) -> str:
    """Human-comparable id of a public key, e.g. ``MFZWI3D-BONSGYC-...`` (8 groups of 7)."""
    raw = base64.b32encode(hashlib.sha256(public_key).digest()).decode("ascii").rstrip("=")  # 52 chars
    with_checks = "".join(raw[i : i + 13] + _luhn32(raw[i : i + 13]) for i in range(0, 52, 13))
    return "-".join(with_checks[i : i + 7] for i in range(0, 56, 7))


def fingerprint_is_valid(text: str) -> bool:
    """True when ``text`` is a well-formed fingerprint whose check characters all match."""
    compact = text.replace("-", "").upper()
    if len(compact) != 56 or any(ch not in _B32 for ch in compact):
        return False
    return all(_luhn32(compact[i : i + 13]) == compact[i + 13] for i in range(0, 56, 14))
