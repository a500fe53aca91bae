"""The event envelope: canonical encoding, hashing, signing, chain links, and the public JSON form.

Owns: the bytes every replica must agree on. Each event is signed by its origin's Ed25519 key and
hash-chained to the previous event of the same origin (proto/PROTOCOL.md, "Canonical event
encoding"). Pure: stdlib, msgpack and cryptography only; no clock, no IO.

Theory of operation
-------------------
The *canonical encoding* is a msgpack array in a fixed field order (never a map, so no key-order
question arises), with ``None`` for absent optional fields::

    [1, origin, origin_seq, prev_hash, created_at, type, stream, room, topic, from_agent,
     to_agent, correlation_id, branch, base_commit, status, ack_of, artifact_ids,
     body_sha256, metadata_json]

The body enters only through its sha256. That is what makes redaction possible: a replica may drop
a body (a secret pasted by mistake) and still verify the hash, the signature and the chain, since
none of them covers the body bytes directly. ``metadata_json`` is the canonical JSON text (sorted
keys, compact separators, non-ASCII kept).

``event_hash = sha256(DOMAIN ‖ canonical)`` and ``signature = Ed25519(event_hash)``. The event id is
derived from ``created_at`` and the hash (ids.event_id_for), so it is the same on every replica.
``prev_hash`` is the previous event hash of the same origin, or 32 zero bytes for ``origin_seq`` 1.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
from types import SimpleNamespace
from typing import Any, Final, final

import msgpack
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .canonical import canonical_json
from .errors import SignatureError
from .ids import EventId, event_id_for

__all__ = [
    "CANONICAL_VERSION",
    "CommittedEvent",
    "GENESIS_HASH",
    "PREVIEW_BODY_CHARS",
    "PUBLIC_KEYS",
    "SignedEvent",
    "body_sha256",
    "canonical_json",
    "preview_event",
    "seal_event",
    "seal_request",
    "verify_chain_link",
    "verify_event",
    "verify_hashes",
]

CANONICAL_VERSION: Final = 1
# Why a domain prefix: an event hash must never collide with a hash of some other palace structure.
_DOMAIN: Final = b"palace/event/v1\n"
GENESIS_HASH: Final = bytes(32)
# MemPalace-compatible preview cut (reference §1.7), counted in Python characters, not bytes.
PREVIEW_BODY_CHARS: Final = 200

#: Keys of the public event object, in output order (MemPalace-compatible envelope).
PUBLIC_KEYS: Final = (
    "id", "seq", "origin", "origin_seq", "type", "stream", "room", "topic", "from_agent", "to_agent",
    "correlation_id", "branch", "base_commit", "status", "ack_of", "artifact_ids", "body", "metadata",
    "created_at",
)


def body_sha256(body: str) -> bytes:
    return hashlib.sha256(body.encode("utf-8")).digest()


@final
@dataclasses.dataclass(frozen=True, slots=True)
class SignedEvent:
    """An event as signed by its origin. ``body`` is None once redacted; ``seq`` is local, unsigned."""

    origin: str
    origin_seq: int
    prev_hash: bytes
    created_at: str
    type: str
    stream: str
    room: str
    topic: str | None
    from_agent: str
    to_agent: str | None
    correlation_id: str | None
    branch: str | None
    base_commit: str | None
    status: str | None
    ack_of: str | None
    artifact_ids: tuple[str, ...]
    body_sha256: bytes
    metadata_json: str
    event_hash: bytes
    signature: bytes
    body: str | None

    @property
    def id(self) -> EventId:
        return event_id_for(self.created_at, self.event_hash)

    def canonical(self) -> bytes:
        return _canonical(self)

    def to_public(self, seq: int) -> dict[str, Any]:
        """The MemPalace-compatible JSON object (signature and chain fields are not shown)."""
        out: dict[str, Any] = {
            "id": self.id, "seq": seq, "origin": self.origin, "origin_seq": self.origin_seq,
            "type": self.type, "stream": self.stream, "room": self.room, "topic": self.topic,
            "from_agent": self.from_agent, "to_agent": self.to_agent,
            "correlation_id": self.correlation_id, "branch": self.branch,
            "base_commit": self.base_commit, "status": self.status, "ack_of": self.ack_of,
            "artifact_ids": list(self.artifact_ids),
            "body": self.body if self.body is not None else "",
            "metadata": json.loads(self.metadata_json) if self.metadata_json != "{}" else {},
            "created_at": self.created_at,
        }
        if self.body is None:
            out["body_redacted"] = True
            out["body_sha256"] = self.body_sha256.hex()
        return out


class CommittedEvent:
    """One committed event as a replica holds it in memory: its local ``seq``, the event as signed,
    and its public view, built on first use and then shared (the writer's reply, the bus, every
    watcher and the push to peers all hold this one record: issue 27).

    ``history``: imported from a file, never offered to peers. ``redact()`` drops the body, as
    the store does: a view handed out before loses its body in place too.
    """

    __slots__ = ("_public", "history", "seq", "signed")

    def __init__(self, seq: int, signed: SignedEvent, *, history: bool = False) -> None:
        self.seq = seq
        self.signed = signed
        self.history = history
        self._public: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"<CommittedEvent seq={self.seq} {self.signed.origin}#{self.signed.origin_seq} {self.signed.type}>"

    @property
    def public(self) -> dict[str, Any]:
        """The MemPalace-compatible JSON object (``SignedEvent.to_public``), built once."""
        view = self._public
        if view is None:
            view = self._public = self.signed.to_public(self.seq)
        return view

    def redact(self) -> None:
        """The body was purged: the record reads as a redacted event from the store does."""
        if self.signed.body is None:
            return
        if self._public is not None:
            self._public["body"] = ""  # a reference someone still holds loses it too
        self.signed = dataclasses.replace(self.signed, body=None)
        self._public = None


#: The signed content of an event, in canonical order: ``SignedEvent``'s first fields (the rest are
#: the hash, the signature and the body, which enters only through ``body_sha256``).
SIGNED_FIELDS: Final = tuple(f.name for f in dataclasses.fields(SignedEvent))[:18]
assert SIGNED_FIELDS[-1] == "metadata_json" and SIGNED_FIELDS[15] == "artifact_ids"
_signed_values: Final = operator.attrgetter(*SIGNED_FIELDS)


def _pack(values: tuple[Any, ...]) -> bytes:
    """The canonical encoding of the signed content ``values`` (in ``SIGNED_FIELDS`` order)."""
    return msgpack.packb([CANONICAL_VERSION, *values[:15], list(values[15]), *values[16:]], use_bin_type=True)


def _canonical(ev: Any) -> bytes:
    return _pack(_signed_values(ev))


def _hash(canonical: bytes) -> bytes:
    return hashlib.sha256(_DOMAIN + canonical).digest()


#: The fields an author writes (a validated append: ``palace_proto.validation.AppendRequest``),
#: in ``SIGNED_FIELDS`` order: the routing, then the artifacts; the body enters through its hash.
_routing_values: Final = operator.attrgetter(*SIGNED_FIELDS[4:15])


def seal_request(private_key: Ed25519PrivateKey, content: Any, *, origin: str, origin_seq: int, prev_hash: bytes,
                 created_at: str) -> SignedEvent:
    """Hash and sign ``content`` (an already validated append: an ``AppendRequest``, or anything
    with its fields) as event ``origin_seq`` of ``origin``; the complete ``SignedEvent``."""
    # In SIGNED_FIELDS order, once: encoded, hashed, and then the event's own fields (issue 27: the
    # request is read as it is, with no draft dict, namespace or keyword unpacking per append).
    body = content.body
    values = (origin, origin_seq, prev_hash, created_at, *_routing_values(content), tuple(content.artifact_ids),
              body_sha256(body), content.metadata_json)
    event_hash = _hash(_pack(values))
    return SignedEvent(*values, event_hash, private_key.sign(event_hash), body)


def seal_event(
    private_key: Ed25519PrivateKey,
    *,
    origin: str,
    origin_seq: int,
    prev_hash: bytes,
    created_at: str,
    type: str,
    stream: str,
    room: str,
    from_agent: str,
    body: str = "",
    metadata_json: str = "{}",
    topic: str | None = None,
    to_agent: str | None = None,
    correlation_id: str | None = None,
    branch: str | None = None,
    base_commit: str | None = None,
    status: str | None = None,
    ack_of: str | None = None,
    artifact_ids: tuple[str, ...] = (),
) -> SignedEvent:
    """``seal_request`` with the fields given one by one (the daemon's own notices, tests)."""
    content = SimpleNamespace(type=type, stream=stream, room=room, topic=topic, from_agent=from_agent,
                              to_agent=to_agent, correlation_id=correlation_id, branch=branch,
                              base_commit=base_commit, status=status, ack_of=ack_of, artifact_ids=artifact_ids,
                              body=body, metadata_json=metadata_json)
    return seal_request(private_key, content, origin=origin, origin_seq=origin_seq, prev_hash=prev_hash,
                        created_at=created_at)


def verify_hashes(event: SignedEvent) -> None:
    """Check an event's hash and (unless redacted) body hash — everything but the signature.

    Raises:
        SignatureError: naming which check failed.
    """
    try:
        body_ok = event.body is None or body_sha256(event.body) == event.body_sha256
        canonical = _canonical(event)
    except (ValueError, TypeError, OverflowError):
        # A string no UTF-8 encoder accepts (a lone surrogate from a hostile peer), or a value
        # msgpack cannot pack: no honest origin can have signed it.
        raise SignatureError(f"event {event.id}: a field cannot be canonically encoded") from None
    if not body_ok:
        raise SignatureError(f"event {event.id}: body does not match its sha256")
    if _hash(canonical) != event.event_hash:
        raise SignatureError(f"event {event.id}: hash does not match the canonical encoding")


def verify_event(event: SignedEvent, public_key: bytes | Ed25519PublicKey) -> None:
    """Check an event's hash, signature and (unless redacted) body hash.

    Raises:
        SignatureError: naming which check failed.
    """
    verify_hashes(event)
    key = public_key if isinstance(public_key, Ed25519PublicKey) else Ed25519PublicKey.from_public_bytes(public_key)
    try:
        key.verify(event.signature, event.event_hash)
    except InvalidSignature:
        raise SignatureError(f"event {event.id}: signature does not verify with the origin's key") from None


def verify_chain_link(previous: SignedEvent | None, event: SignedEvent) -> None:
    """Check that ``event`` directly follows ``previous`` in its origin's chain.

    ``previous`` is None when ``event`` must be the first event of its origin.

    Raises:
        SignatureError: wrong origin, a gap or repeat in ``origin_seq``, or a broken hash link.
    """
    if previous is None:
        if event.origin_seq != 1 or event.prev_hash != GENESIS_HASH:
            raise SignatureError(f"event {event.id}: origin_seq {event.origin_seq} is not the start of its chain")
        return
    if previous.origin != event.origin:
        raise SignatureError(f"event {event.id}: chained to an event of another origin")
    if event.origin_seq != previous.origin_seq + 1:
        raise SignatureError(
            f"event {event.id}: origin_seq {event.origin_seq} does not follow {previous.origin_seq}"
        )
    if event.prev_hash != previous.event_hash:
        raise SignatureError(f"event {event.id}: prev_hash does not match the previous event's hash")


def preview_event(public: dict[str, Any]) -> dict[str, Any]:
    """Cut a public event's body to ``PREVIEW_BODY_CHARS`` characters, with the MemPalace markers."""
    body = public.get("body") or ""
    if len(body) <= PREVIEW_BODY_CHARS:
        return public
    out = dict(public)
    out["body"] = body[:PREVIEW_BODY_CHARS]
    out["body_truncated"] = True
    out["body_length"] = len(body)
    return out
