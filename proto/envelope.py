"""The event envelope: canonical encoding, hashing, signing, chain links, and the public JSON form.

Owns: the bytes every replica must agree on. Each event is signed by its origin's Ed25519 key and
hash-chained to the previous event of the same origin (proto/PROTOCOL.md, "Canonical event
encoding"). Pure: stdlib, msgpack and cryptography only; no clock, no IO.

Theory of operation
-------------------
The *canonical encoding* is a msgpack array: the version (1), then the signed fields in the
order ``event_fields.SIGNED_FIELDS`` gives (the table's signed positions: the origin's chain, the
author's routing, the artifact ids, the body's sha256, the metadata), with ``None`` for absent
optional fields. An array, never a map, so no key-order question arises.

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
from typing import Any, Final, final

import msgpack
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .canonical import canonical_json
from .errors import SignatureError
from .event_content import EventContent, content_of
from .event_fields import EVENT_FIELDS, PUBLIC_KEYS, SIGNED_FIELDS, PublicEvent
from .ids import EventId, event_id_for

__all__ = [
    "CANONICAL_VERSION",
    "CommittedEvent",
    "GENESIS_HASH",
    "PREVIEW_BODY_CHARS",
    "PUBLIC_KEYS",
    "SIGNED_FIELDS",
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

def body_sha256(body: str) -> bytes:
    return hashlib.sha256(body.encode("utf-8")).digest()


@final
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SignedEvent(EventContent):
    """An event as signed by its origin: an author's content (``EventContent``, whose ``body`` is
    None once redacted) placed in its origin's chain, hashed and signed. The fields are the
    table's (``palace_proto.event_fields``); the local ``seq`` is not one of them."""

    origin: str
    origin_seq: int
    prev_hash: bytes
    created_at: str
    body_sha256: bytes
    event_hash: bytes
    signature: bytes

    @property
    def id(self) -> EventId:
        return event_id_for(self.created_at, self.event_hash)

    def canonical(self) -> bytes:
        return _canonical(self)

    def to_public(self, seq: int) -> PublicEvent:
        """The MemPalace-compatible JSON object (signature and chain fields are not shown)."""
        out: dict[str, Any] = dict(zip(PUBLIC_KEYS, (self.id, seq, *_shown_values(self)), strict=True))
        out["artifact_ids"] = list(self.artifact_ids)
        out["metadata"] = json.loads(self.metadata_json) if self.metadata_json != "{}" else {}
        if self.body is None:
            out["body"] = ""
            out["body_redacted"] = True
            out["body_sha256"] = self.body_sha256.hex()
        return out  # type: ignore[return-value]  # PUBLIC_KEYS are PublicEvent's keys (event_fields checks)


#: The attributes behind the public object's keys after ``id`` and ``seq``, in their order.
_shown_values: Final = operator.attrgetter(*(f.name for f in EVENT_FIELDS if f.public is not None
                                             and f.role not in ("derived", "local")))


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
        self._public: PublicEvent | None = None

    def __repr__(self) -> str:
        return f"<CommittedEvent seq={self.seq} {self.signed.origin}#{self.signed.origin_seq} {self.signed.type}>"

    @property
    def public(self) -> PublicEvent:
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


_signed_values: Final = operator.attrgetter(*SIGNED_FIELDS)
# Where the list-valued field sits in the signed content (msgpack packs a list, not a tuple).
_IDS_AT: Final = SIGNED_FIELDS.index("artifact_ids")


def _pack(values: tuple[Any, ...]) -> bytes:
    """The canonical encoding of the signed content ``values`` (in ``SIGNED_FIELDS`` order)."""
    return msgpack.packb([CANONICAL_VERSION, *values[:_IDS_AT], list(values[_IDS_AT]), *values[_IDS_AT + 1:]],
                         use_bin_type=True)


def _canonical(ev: Any) -> bytes:
    return _pack(_signed_values(ev))


def _hash(canonical: bytes) -> bytes:
    return hashlib.sha256(_DOMAIN + canonical).digest()


#: The author's fields in the signed content (``SIGNED_FIELDS`` between the chain's four and the
#: body's hash): what ``seal_request`` reads from a validated append.
_routing_values: Final = operator.attrgetter(*SIGNED_FIELDS[4:_IDS_AT])


def seal_request(private_key: Ed25519PrivateKey, content: EventContent, *, origin: str, origin_seq: int,
                 prev_hash: bytes, created_at: str) -> SignedEvent:
    """Hash and sign ``content`` (an already validated append: an ``AppendRequest``) as event
    ``origin_seq`` of ``origin``; the complete ``SignedEvent``."""
    # In SIGNED_FIELDS order, once: encoded, hashed, and then the event's own fields (issue 27: the
    # request is read as it is, with no draft dict, namespace or keyword unpacking per append).
    body = content.body
    if body is None:
        raise ValueError("an event is sealed with its body")
    body_hash = body_sha256(body)
    values = (origin, origin_seq, prev_hash, created_at, *_routing_values(content), tuple(content.artifact_ids),
              body_hash, content.metadata_json)
    event_hash = _hash(_pack(values))
    return SignedEvent(*content_of(content), origin=origin, origin_seq=origin_seq, prev_hash=prev_hash,
                       created_at=created_at, body_sha256=body_hash, event_hash=event_hash,
                       signature=private_key.sign(event_hash))


def seal_event(private_key: Ed25519PrivateKey, *, origin: str, origin_seq: int, prev_hash: bytes, created_at: str,
               **content: Any) -> SignedEvent:
    """``seal_request`` with the content given as ``EventContent``'s keyword arguments (the
    daemon's own notices, tests); an unknown or missing field is a TypeError."""
    if "artifact_ids" in content:
        content["artifact_ids"] = tuple(content["artifact_ids"])
    return seal_request(private_key, EventContent(**content), origin=origin, origin_seq=origin_seq,
                        prev_hash=prev_hash, created_at=created_at)


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


def preview_event(public: PublicEvent) -> PublicEvent:
    """Cut a public event's body to ``PREVIEW_BODY_CHARS`` characters, with the MemPalace markers."""
    body = public.get("body") or ""
    if len(body) <= PREVIEW_BODY_CHARS:
        return public
    out = public.copy()
    out["body"] = body[:PREVIEW_BODY_CHARS]
    out["body_truncated"] = True
    out["body_length"] = len(body)
    return out
