"""Peer protocol messages (daemon ↔ daemon) and their wire codec.

Owns: the nouns two replicas exchange — ``Hello``, ``Vector``, ``Want``, ``Events``, ``Goodbye``,
``Neighbours`` (which daemons the sender hears first-hand), the gossip ``Presence`` and ``Report``
(whose content is fleet.py's) — and the strict ``to_wire``
/ ``from_wire`` translation (Syncthing's *FromWire + consistency checks). Every message is a
msgpack map with a type tag ``"t"``; a message whose tag we do not know is skipped (``from_wire``
returns None) so newer peers can add messages; an unknown protocol *version* fails the hello with
``VersionMismatch``. Malformed known messages raise ``RemoteProtocolError`` before anything
reaches the store. Pure: no IO, no clock.

This is the first piece of the replication issue; the state machine that orders these messages
lives in ``session.py`` and the planning/verification rules in ``sync.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, final

import msgpack

from .bindings import OriginBinding
from .broadcast import IHAVE_MAX, BroadcastMessage, Graft, IHave, Prune
from .envelope import SignedEvent
from .errors import RemoteProtocolError, VersionMismatch
from .event_fields import EVENT_FIELDS, EventField
from .ids import ORIGIN_ID_RE
from .overlay import (
    MAX_SHUFFLE_PEERS,
    Disconnect,
    ForwardJoin,
    Join,
    Neighbor,
    NeighborReply,
    OverlayMessage,
    Shuffle,
    ShuffleReply,
)
from .paths import host_port
from .reports import MAX_REPORT_BYTES
from .workers import MAX_ACTIVITY_CHARS

__all__ = [
    "DEFAULT_PEER_PORT",
    "PEER_PROTOCOL_VERSION",
    "ROLES",
    "Addresses",
    "ArtifactChunk",
    "ArtifactWant",
    "CONTROL_MESSAGES",
    "Enrol",
    "Enrolled",
    "Events",
    "Goodbye",
    "Have",
    "Hello",
    "Members",
    "Neighbours",
    "Presence",
    "PeerMessage",
    "Report",
    "Seen",
    "Vector",
    "VectorEntry",
    "Want",
    "addresses_signing_bytes",
    "bindings_digest",
    "event_from_wire",
    "event_to_wire",
    "format_peer_address",
    "from_wire",
    "gossip_name",
    "is_gossip_name",
    "parse_peer_address",
    "presence_signing_bytes",
    "report_signing_bytes",
    "to_wire",
]

# Version 2: origin bindings carry proofs (hello ``origin_proof``, three-element ``members`` entries).
PEER_PROTOCOL_VERSION: Final = 2
#: the TCP port palaced listens on for peers unless told otherwise (``--listen``, config)
DEFAULT_PEER_PORT: Final = 7437
ROLES: Final = frozenset({"member", "observer"})
# Why 4096: a vector entry is ~80 bytes, so a vector stays far below any frame limit, and no
# honest palace has thousands of origins (one per database ever created).
MAX_VECTOR_ENTRIES: Final = 4096
# Why 256: the bindings a link sends at its start travel in chunks of this many (~300 KiB), so the
# members message can never outgrow a frame however many origins a palace has seen.
MAX_BINDINGS_PER_MESSAGE: Final = 256
# Why 2**62: every integer a peer sends ends up in SQLite (signed 64-bit) or in arithmetic on it;
# anything larger is hostile, and refusing it in the codec keeps OverflowError out of the store.
MAX_WIRE_INT: Final = 2**62
# Why these: protocol-wide sanity bounds on what one event may carry, far above any daemon's
# configured limits. The configured limits (body, metadata) and the data-model rules are checked
# per event by the receiver (validation.check_replicated_event), which refuses that event alone:
# an honest relay forwards events its own, larger, limits allowed, and must not lose its link.
MAX_EVENT_STRING_CHARS: Final = 4096
MAX_EVENT_ARTIFACT_IDS: Final = 4096
# Why 1000: replication batches are bounded by count (and by bytes, see sync.batch_events) so a
# catch-up never becomes one giant message that freezes the receiver (p2p-lessons complaint 9).
MAX_EVENTS_PER_MESSAGE: Final = 1000
# Why 8 KiB: an Ed25519 member certificate is well under 1 KiB in PEM.
MAX_CERTIFICATE_BYTES: Final = 8192
# Why 512: a daemon has at most a few hundred links (256 inbound connections, 256 dial targets);
# a neighbours message names each linked daemon once, ~64 bytes each.
MAX_NEIGHBOURS: Final = 512
# Why 8 of at most 262 characters: a daemon's own addresses (its listen addresses, one per interface
# when it listens on all, and the ones its peers saw it come from) are a handful; a bracketed IPv6
# literal with a zone and a port fits in 262. More is refused whole: its signature covers the list.
MAX_ADDRESSES: Final = 8
MAX_ADDRESS_CHARS: Final = 262
# Why 1 MiB: artifacts move in chunks far below the 16 MiB peer frame limit, so a 64 MiB artifact
# never becomes one frame, and other messages interleave between its chunks.
ARTIFACT_CHUNK_BYTES: Final = 1 << 20
# Why 512 watchers of at most 512 filter characters: a presence record stays below ~450 KiB, and it
# is relayed to every link; a daemon with more watchers announces the first 512.
MAX_WATCHERS_PER_PRESENCE: Final = 512
MAX_PRESENCE_FILTER_CHARS: Final = 512



@final
@dataclasses.dataclass(frozen=True, slots=True)
class Hello:
    """First message each way: who I am and which palace I belong to."""

    version: int
    palace_id: str
    peer_id: str
    name: str
    role: str
    #: the sender's own origin id (the log it writes) and its member certificate (PEM), which
    #: bind that origin to the sender's key for everyone the binding is relayed to, with the proof
    #: that the origin belongs to that key (bindings.py: the nonce, or a legacy signature)
    origin: str = ""
    certificate: bytes = b""
    origin_proof: bytes = b""
    #: a digest of the origins whose bindings the sender holds (``bindings_digest``): a peer
    #: holding the same set sends none at the opening (empty: send them all, as before)
    bindings: bytes = b""


def bindings_digest(origins: Iterable[str]) -> bytes:
    """What a hello says of the bindings its sender holds: 16 bytes of sha256 over the sorted origin ids."""
    return hashlib.sha256("\n".join(sorted(origins)).encode()).digest()[:16]


@final
@dataclasses.dataclass(frozen=True, slots=True)
class VectorEntry:
    """What a replica holds of one origin: the highest contiguous origin_seq and that event's hash."""

    origin: str
    max_seq: int
    head_hash: bytes


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Vector:
    """A replica's version vector (sent on connect and again on the anti-entropy timer).

    ``delta``: only the origins whose entry changed since the last vector sent on this link (the
    first vector of a link is always whole); the receiver merges it into the vector it holds, so
    an idle link's anti-entropy costs a few bytes instead of one entry per origin (issue 45 §2)."""

    entries: tuple[VectorEntry, ...]
    delta: bool = False


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Members:
    """Origin bindings the sender knows, so receivers can verify relayed events of origins they never
    met (each certificate is checked against the palace CA, each proof against its key)."""

    entries: tuple[OriginBinding, ...]


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Want:
    """Pull request: events of ``origin`` after ``after_seq``, in origin_seq order."""

    origin: str
    after_seq: int


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Events:
    """A bounded batch of signed events (one origin or several, each origin in seq order)."""

    events: tuple[SignedEvent, ...]


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Goodbye:
    """Closing the session on purpose, with a stable code (errors.ProtocolError codes)."""

    code: str
    reason: str


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Have:
    """Receipt: after committing (fsync) a batch, the receiver's head for the origins it touched.

    What ``append --replicated K`` counts: a peer holds an event once its ``Have`` or ``Vector``
    says so, never merely because we sent it."""

    entries: tuple[tuple[str, int], ...]


@final
@dataclasses.dataclass(frozen=True, slots=True)
class ArtifactWant:
    """Send me artifact ``artifact_id`` from byte ``offset`` (chunks follow until the end)."""

    artifact_id: str
    offset: int


@final
@dataclasses.dataclass(frozen=True, slots=True)
class ArtifactChunk:
    """One piece of an artifact (``data`` ≤ ARTIFACT_CHUNK_BYTES). ``size == -1``: not found.

    The descriptive fields (kind, created_by, created_at, metadata_json) travel with every chunk
    so any chunk can start the transfer; only ``sha256`` over the assembled bytes is trusted."""

    artifact_id: str
    offset: int
    size: int
    sha256: str
    kind: str
    created_by: str
    created_at: str
    metadata_json: str
    data: bytes


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Presence:
    """Which watchers are connected to daemon ``peer_id`` (gossiped and relayed, newest wins).

    ``serial`` grows with every change on that daemon; ``signature`` is the daemon's Ed25519
    signature over ``presence_signing_bytes`` so a relay cannot invent or alter it."""

    peer_id: str
    name: str
    serial: int
    #: (agent, filters, since) or, for a worker, (agent, filters, since, activity): see
    #: ``palace_proto.workers`` (a fourth element only where there is an activity)
    watchers: tuple[tuple[str, ...], ...]
    signature: bytes


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Addresses:
    """Where daemon ``peer_id`` says it can be reached (gossiped and relayed, newest wins): at most
    ``MAX_ADDRESSES`` ``HOST:PORT``, its listen addresses and the ones its peers saw it come from.

    ``serial`` grows with every record of that daemon; ``signature`` is the daemon's Ed25519
    signature over ``addresses_signing_bytes``, so no member can say where another daemon is (it
    can only send the others to wrong places for itself: a dial that meets another certificate)."""

    peer_id: str
    serial: int
    addresses: tuple[str, ...]
    signature: bytes


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Seen:
    """Where the peer saw this connection come from (sent once, by the side that accepted it, to
    the side that dialled): the dialler may offer that host in its address record (a NAT's
    outside address, a VPN's), on its own listen port. Only the link's own peer sends it; it is
    not relayed. ``host`` is an IP address as the acceptor saw it."""

    host: str


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Report:
    """What daemon ``peer_id`` says about itself: its links, health and log (gossiped and relayed,
    newest wins), for the fleet view.

    ``report`` is the content as ``fleet.encode_report`` wrote it (at most ``MAX_REPORT_BYTES``; read
    it with ``fleet.decode_report``, only once the signature verified). ``serial`` grows with every
    report of that daemon; ``signature`` is the daemon's Ed25519 signature over
    ``report_signing_bytes``, so a relay can neither invent nor alter one."""

    peer_id: str
    name: str
    serial: int
    report: bytes
    signature: bytes


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Neighbours:
    """The daemons the sender is linked to directly right now (peer ids), sent whenever that set
    changes: their events and gossip reach it from them, so a third daemon need not relay those
    (it pushes only what the sender cannot get first-hand, and still answers every want).

    Relaying is eager push, a best effort; pulling by vectors stays the guarantee (a daemon that
    loses a link sends its new, smaller set, and is answered with a vector to pull from)."""

    peer_ids: tuple[str, ...]


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Enrol:
    """A joiner's first and only message: I hold invite ``invite_id``; certify ``public_key``."""

    invite_id: str
    public_key: bytes
    name: str
    proof: bytes


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Enrolled:
    """The inviter's answer: the palace CA certificate and the joiner's new member certificate."""

    palace_name: str
    ca_certificate: bytes
    certificate: bytes


PeerMessage = (Hello | Members | Vector | Want | Events | Goodbye | Have | ArtifactWant | ArtifactChunk | Presence
               | Addresses | Seen
               | Report | Neighbours | OverlayMessage | BroadcastMessage)
#: the messages of the partial views and the broadcast tree (overlay.py, broadcast.py): they
#: travel on a link from its opening on, and what they name is checked by those modules
CONTROL_MESSAGES: Final = (Join, ForwardJoin, Neighbor, NeighborReply, Disconnect, Shuffle, ShuffleReply, IHave,
                           Graft, Prune)
EnrolmentMessage = Enrol | Enrolled


def _str(d: Mapping[str, Any], key: str, *, max_len: int = 256, optional: bool = False) -> Any:
    value = d.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > max_len:
        raise RemoteProtocolError(f"peer message field {key!r} must be a string of at most {max_len} characters")
    return value


def _int(d: Mapping[str, Any], key: str) -> int:
    value = d.get(key)
    if type(value) is not int or not 0 <= value <= MAX_WIRE_INT:
        raise RemoteProtocolError(f"peer message field {key!r} must be an integer from 0 to 2**62")
    return value


def _origin(d: Mapping[str, Any], key: str) -> str:
    value = d.get(key)
    if not isinstance(value, str) or not ORIGIN_ID_RE.match(value):
        raise RemoteProtocolError(f"peer message field {key!r} must be an origin id (ori2_… or ori_…)")
    return value


def _bytes(d: Mapping[str, Any], key: str, size: int) -> bytes:
    value = d.get(key)
    if not isinstance(value, bytes) or len(value) != size:
        raise RemoteProtocolError(f"peer message field {key!r} must be {size} bytes")
    return value


#: The fields of a signed event on the wire (every field of the table a ``SignedEvent`` holds), in
#: the order a map carries them: the signed content, then the hash and signature, then the body.
_EVENT_WIRE_FIELDS: Final = tuple(sorted((f for f in EVENT_FIELDS if f.role not in ("derived", "local")),
                                         key=lambda f: (f.canonical is None, f.wire == "body", f.canonical or 0)))
_EVENT_WIRE_NAMES: Final = tuple(f.name for f in _EVENT_WIRE_FIELDS)
#: The bytes each binary wire type holds.
_BINARY_SIZES: Final = {"hash": 32, "signature": 64}


def event_to_wire(event: SignedEvent, *, with_body: bool = True) -> dict[str, Any]:
    """A signed event as sent to peers; ``with_body=False`` (or a redacted event) omits the body."""
    wire: dict[str, Any] = {name: getattr(event, name) for name in _EVENT_WIRE_NAMES}
    wire["artifact_ids"] = list(event.artifact_ids)
    if not with_body or event.body is None:
        wire["body"] = None
    return wire


def _event_field(d: Mapping[str, Any], field: EventField) -> Any:
    """One field of an event from a peer, checked by its wire type (palace_proto.event_fields)."""
    key, wire = field.name, field.wire
    if wire == "text":
        return _str(d, key, max_len=MAX_EVENT_STRING_CHARS, optional=field.optional)
    if wire == "json":
        return _str(d, key, max_len=1 << 62)  # bounded by the frame; its configured limit is a per-event rule
    if wire == "int":
        value = _int(d, key)
        if value < 1:
            raise RemoteProtocolError(f"peer message field {key!r} must be at least 1")
        return value
    if wire in _BINARY_SIZES:
        return _bytes(d, key, _BINARY_SIZES[wire])
    if wire == "ids":
        ids = d.get(key)
        if (not isinstance(ids, list) or len(ids) > MAX_EVENT_ARTIFACT_IDS
                or not all(isinstance(a, str) and len(a) <= MAX_EVENT_STRING_CHARS for a in ids)):
            raise RemoteProtocolError(f"peer message field {key!r} must be a list of at most "
                                      f"{MAX_EVENT_ARTIFACT_IDS} strings")
        return tuple(ids)
    body = d.get(key)  # "body": gone once redacted
    if body is not None and not isinstance(body, str):
        raise RemoteProtocolError(f"peer message field {key!r} must be a string or nil")
    return body


def event_from_wire(d: Any) -> SignedEvent:
    """Rebuild a signed event; shape and types are checked here, signatures by sync.verify_incoming."""
    if not isinstance(d, Mapping):
        raise RemoteProtocolError("an event must be a map")
    return SignedEvent(**{field.name: _event_field(d, field) for field in _EVENT_WIRE_FIELDS})


def to_wire(message: PeerMessage | EnrolmentMessage) -> dict[str, Any]:
    """Encode a message as the map that goes into one frame."""
    if isinstance(message, Hello):
        return {"t": "hello", "version": message.version, "palace_id": message.palace_id,
                "peer_id": message.peer_id, "name": message.name, "role": message.role,
                "origin": message.origin, "certificate": message.certificate, "origin_proof": message.origin_proof,
                **({"bindings": message.bindings} if message.bindings else {})}
    if isinstance(message, Members):
        return {"t": "members", "entries": [[b.origin, b.certificate, b.proof] for b in message.entries]}
    if isinstance(message, Vector):
        return {"t": "vector", "entries": [[e.origin, e.max_seq, e.head_hash] for e in message.entries],
                **({"delta": True} if message.delta else {})}
    if isinstance(message, Want):
        return {"t": "want", "origin": message.origin, "after_seq": message.after_seq}
    if isinstance(message, Events):
        return {"t": "events", "events": [event_to_wire(e) for e in message.events]}
    if isinstance(message, Goodbye):
        return {"t": "goodbye", "code": message.code, "reason": message.reason}
    if isinstance(message, Have):
        return {"t": "have", "entries": [[origin, seq] for origin, seq in message.entries]}
    if isinstance(message, ArtifactWant):
        return {"t": "artifact_want", "artifact_id": message.artifact_id, "offset": message.offset}
    if isinstance(message, ArtifactChunk):
        return {"t": "artifact_chunk", **{f.name: getattr(message, f.name) for f in dataclasses.fields(ArtifactChunk)}}
    if isinstance(message, Presence):
        return {"t": "presence", "peer_id": message.peer_id, "name": message.name, "serial": message.serial,
                "watchers": [list(w) for w in message.watchers], "signature": message.signature}
    if isinstance(message, Report):
        return {"t": "report", "peer_id": message.peer_id, "name": message.name, "serial": message.serial,
                "report": message.report, "signature": message.signature}
    if isinstance(message, Neighbours):
        return {"t": "neighbours", "peer_ids": list(message.peer_ids)}
    if isinstance(message, Seen):
        return {"t": "seen", "host": message.host}
    if isinstance(message, Addresses):
        return {"t": "addresses", "peer_id": message.peer_id, "serial": message.serial,
                "addresses": list(message.addresses), "signature": message.signature}
    if isinstance(message, CONTROL_MESSAGES):
        return _control_to_wire(message)
    if isinstance(message, Enrol):
        return {"t": "enrol", "invite_id": message.invite_id, "public_key": message.public_key,
                "name": message.name, "proof": message.proof}
    if isinstance(message, Enrolled):
        return {"t": "enrolled", "palace_name": message.palace_name, "ca_certificate": message.ca_certificate,
                "certificate": message.certificate}
    raise TypeError(f"not a peer message: {message!r}")


def from_wire(d: Any) -> PeerMessage | EnrolmentMessage | None:
    """Decode a frame's map. Returns None for a message type we do not know (skip it).

    Raises:
        RemoteProtocolError: a known message with a wrong shape.
        VersionMismatch: a hello for another protocol version.
    """
    if not isinstance(d, Mapping) or not isinstance(d.get("t"), str):
        raise RemoteProtocolError("a peer message must be a map with a string type tag 't'")
    tag = d["t"]
    if tag == "hello":
        version = d.get("version")
        if type(version) is not int:
            raise RemoteProtocolError("hello 'version' must be an integer")
        if version != PEER_PROTOCOL_VERSION:
            raise VersionMismatch(
                f"peer speaks protocol version {version}, we speak {PEER_PROTOCOL_VERSION}; "
                "upgrade both daemons to the same release"
            )
        role = _str(d, "role")
        if role not in ROLES:
            raise RemoteProtocolError(f"hello 'role' must be one of {sorted(ROLES)}")
        certificate = d.get("certificate", b"")
        if not isinstance(certificate, bytes) or len(certificate) > MAX_CERTIFICATE_BYTES:
            raise RemoteProtocolError(f"hello 'certificate' must be at most {MAX_CERTIFICATE_BYTES} bytes")
        proof = d.get("origin_proof")
        if not isinstance(proof, bytes) or len(proof) > 64:
            raise RemoteProtocolError("hello 'origin_proof' must be at most 64 bytes")
        bindings = d.get("bindings", b"")
        if not isinstance(bindings, bytes) or len(bindings) > 32:
            raise RemoteProtocolError("hello 'bindings' must be at most 32 bytes")
        return Hello(version=version, palace_id=_str(d, "palace_id"), peer_id=_str(d, "peer_id"),
                     name=_str(d, "name"), role=role, origin=_origin(d, "origin"), certificate=certificate,
                     origin_proof=proof, bindings=bindings)
    if tag == "members":
        raw = d.get("entries")
        if not isinstance(raw, list) or len(raw) > MAX_BINDINGS_PER_MESSAGE:
            raise RemoteProtocolError(f"members 'entries' must be a list of at most {MAX_BINDINGS_PER_MESSAGE} entries")
        members = []
        for item in raw:
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                    and ORIGIN_ID_RE.match(item[0]) and isinstance(item[1], bytes)
                    and len(item[1]) <= MAX_CERTIFICATE_BYTES and isinstance(item[2], bytes) and len(item[2]) <= 64):
                raise RemoteProtocolError("a members entry must be [origin id, certificate, proof of at most 64 bytes]")
            members.append(OriginBinding(item[0], item[1], item[2]))
        return Members(tuple(members))
    if tag == "vector":
        raw = d.get("entries")
        if not isinstance(raw, list) or len(raw) > MAX_VECTOR_ENTRIES:
            raise RemoteProtocolError(f"vector 'entries' must be a list of at most {MAX_VECTOR_ENTRIES} entries")
        entries = []
        for item in raw:
            if not (isinstance(item, list) and len(item) == 3):
                raise RemoteProtocolError("a vector entry must be [origin, max_seq, head_hash]")
            origin, max_seq, head = item
            entry = {"origin": origin, "max_seq": max_seq, "head_hash": head}
            entries.append(VectorEntry(_origin(entry, "origin"), _int(entry, "max_seq"), _bytes(entry, "head_hash", 32)))
        if len({e.origin for e in entries}) != len(entries):
            raise RemoteProtocolError("a vector names an origin twice")
        delta = d.get("delta", False)
        if type(delta) is not bool:
            raise RemoteProtocolError("vector 'delta' must be true or false")
        return Vector(tuple(entries), delta)
    if tag == "want":
        return Want(origin=_origin(d, "origin"), after_seq=_int(d, "after_seq"))
    if tag == "events":
        raw = d.get("events")
        if not isinstance(raw, list) or len(raw) > MAX_EVENTS_PER_MESSAGE:
            raise RemoteProtocolError(f"'events' must be a list of at most {MAX_EVENTS_PER_MESSAGE} events")
        return Events(tuple(event_from_wire(e) for e in raw))
    if tag == "goodbye":
        return Goodbye(code=_str(d, "code"), reason=_str(d, "reason", max_len=4096))
    if tag == "have":
        raw = d.get("entries")
        if not isinstance(raw, list) or len(raw) > MAX_VECTOR_ENTRIES:
            raise RemoteProtocolError(f"have 'entries' must be a list of at most {MAX_VECTOR_ENTRIES} entries")
        held: list[tuple[str, int]] = []
        for item in raw:
            if not (isinstance(item, list) and len(item) == 2):
                raise RemoteProtocolError("a have entry must be [origin, max_seq]")
            pair = {"origin": item[0], "max_seq": item[1]}
            held.append((_origin(pair, "origin"), _int(pair, "max_seq")))
        return Have(tuple(held))
    if tag == "artifact_want":
        return ArtifactWant(artifact_id=_str(d, "artifact_id"), offset=_int(d, "offset"))
    if tag == "artifact_chunk":
        size = d.get("size")
        if type(size) is not int or not -1 <= size <= MAX_WIRE_INT:
            raise RemoteProtocolError("artifact_chunk 'size' must be an integer from -1 to 2**62")
        data = d.get("data")
        if not isinstance(data, bytes) or len(data) > ARTIFACT_CHUNK_BYTES:
            raise RemoteProtocolError(f"artifact_chunk 'data' must be at most {ARTIFACT_CHUNK_BYTES} bytes")
        offset = _int(d, "offset")
        if size >= 0 and offset + len(data) > size:
            raise RemoteProtocolError("artifact_chunk runs past the artifact's size")
        return ArtifactChunk(artifact_id=_str(d, "artifact_id"), offset=offset, size=size, sha256=_str(d, "sha256"),
                             kind=_str(d, "kind"), created_by=_str(d, "created_by"), created_at=_str(d, "created_at"),
                             metadata_json=_str(d, "metadata_json", max_len=65_536), data=data)
    if tag == "presence":
        raw = d.get("watchers")
        if not isinstance(raw, list) or len(raw) > MAX_WATCHERS_PER_PRESENCE:
            raise RemoteProtocolError(f"presence 'watchers' must be a list of at most {MAX_WATCHERS_PER_PRESENCE}")
        watchers = []
        for item in raw:
            # Three elements, or four for a worker (its activity). Up to eight are accepted so a
            # newer peer may add more: they are kept (the signature covers them, and relays pass
            # records on unaltered) and ignored by what reads them.
            if not (isinstance(item, list) and 3 <= len(item) <= 8 and all(isinstance(x, str) for x in item)
                    and len(item[0]) <= 256 and len(item[1]) <= MAX_PRESENCE_FILTER_CHARS and len(item[2]) <= 64
                    and all(len(x) <= MAX_ACTIVITY_CHARS for x in item[3:])):
                raise RemoteProtocolError("a presence watcher must be [agent, filters, since] or "
                                          "[agent, filters, since, activity]")
            watchers.append(tuple(item))
        return Presence(peer_id=_str(d, "peer_id"), name=_str(d, "name"), serial=_int(d, "serial"),
                        watchers=tuple(watchers), signature=_bytes(d, "signature", 64))
    if tag == "report":
        # Only the size here: the content is read (fleet.decode_report) once the signature verified.
        report = d.get("report")
        if not isinstance(report, bytes) or len(report) > MAX_REPORT_BYTES:
            raise RemoteProtocolError(f"report 'report' must be at most {MAX_REPORT_BYTES} bytes")
        return Report(peer_id=_str(d, "peer_id"), name=_str(d, "name"), serial=_int(d, "serial"), report=report,
                      signature=_bytes(d, "signature", 64))
    if tag == "neighbours":
        raw = d.get("peer_ids")
        if (not isinstance(raw, list) or len(raw) > MAX_NEIGHBOURS
                or not all(isinstance(p, str) and 0 < len(p) <= 256 for p in raw)):
            raise RemoteProtocolError(f"neighbours 'peer_ids' must be a list of at most {MAX_NEIGHBOURS} peer ids")
        return Neighbours(tuple(raw))
    if tag == "seen":
        return Seen(host=_str(d, "host", max_len=64))
    if tag == "addresses":
        raw = d.get("addresses")
        if (not isinstance(raw, list) or len(raw) > MAX_ADDRESSES
                or not all(isinstance(a, str) and 0 < len(a) <= MAX_ADDRESS_CHARS for a in raw)):
            raise RemoteProtocolError(f"addresses 'addresses' must be a list of at most {MAX_ADDRESSES} addresses "
                                      f"of at most {MAX_ADDRESS_CHARS} characters")
        return Addresses(peer_id=_str(d, "peer_id"), serial=_int(d, "serial"), addresses=tuple(raw),
                         signature=_bytes(d, "signature", 64))
    if tag in _CONTROL_DECODERS:
        return _CONTROL_DECODERS[tag](d)
    if tag == "enrol":
        return Enrol(invite_id=_str(d, "invite_id"), public_key=_bytes(d, "public_key", 32), name=_str(d, "name"),
                     proof=_bytes(d, "proof", 32))
    if tag == "enrolled":
        ca, cert = d.get("ca_certificate"), d.get("certificate")
        if not (isinstance(ca, bytes) and isinstance(cert, bytes)
                and len(ca) <= MAX_CERTIFICATE_BYTES and len(cert) <= MAX_CERTIFICATE_BYTES):
            raise RemoteProtocolError(f"enrolled certificates must be at most {MAX_CERTIFICATE_BYTES} bytes")
        return Enrolled(palace_name=_str(d, "palace_name"), ca_certificate=ca, certificate=cert)
    return None


def _control_to_wire(message: OverlayMessage | BroadcastMessage) -> dict[str, Any]:
    match message:
        case Join():
            return {"t": "join"}
        case ForwardJoin(peer, ttl):
            return {"t": "forward_join", "peer": peer, "ttl": ttl}
        case Neighbor(high):
            return {"t": "neighbor", "high": high}
        case NeighborReply(accepted):
            return {"t": "neighbor_reply", "accepted": accepted}
        case Disconnect():
            return {"t": "disconnect"}
        case Shuffle(origin, ttl, peers):
            return {"t": "shuffle", "origin": origin, "ttl": ttl, "peers": list(peers)}
        case ShuffleReply(peers):
            return {"t": "shuffle_reply", "peers": list(peers)}
        case IHave(keys):
            return {"t": "ihave", "keys": [[origin, seq] for origin, seq in keys]}
        case Graft(origin, seq):
            return {"t": "graft", "origin": origin, "seq": seq}
        case Prune(gossip):
            return {"t": "prune", **({"gossip": True} if gossip else {})}
    raise TypeError(f"not a control message: {message!r}")  # pragma: no cover


def _bool(d: Mapping[str, Any], key: str) -> bool:
    value = d.get(key)
    if type(value) is not bool:
        raise RemoteProtocolError(f"{d['t']} {key!r} must be true or false")
    return value


def _small_int(d: Mapping[str, Any], key: str) -> int:
    value = d.get(key)
    if type(value) is not int or not 0 <= value <= 255:
        raise RemoteProtocolError(f"{d['t']} {key!r} must be an integer from 0 to 255")
    return value


def _peer_ids(d: Mapping[str, Any], key: str, most: int) -> tuple[str, ...]:
    raw = d.get(key)
    if not isinstance(raw, list) or len(raw) > most or not all(isinstance(p, str) and 0 < len(p) <= 256 for p in raw):
        raise RemoteProtocolError(f"{d['t']} {key!r} must be a list of at most {most} peer ids")
    return tuple(raw)


def _event_keys(d: Mapping[str, Any]) -> IHave:
    raw = d.get("keys")
    if not isinstance(raw, list) or len(raw) > IHAVE_MAX:
        raise RemoteProtocolError(f"ihave 'keys' must be a list of at most {IHAVE_MAX} [name, seq] pairs")
    keys = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 2):
            raise RemoteProtocolError("an ihave key must be [origin, seq]")
        keys.append((_tree_name(item[0], "ihave"), _positive({"seq": item[1]}, "seq")))
    return IHave(tuple(keys))


#: a gossip record's name in the broadcast tree: its kind and the first 16 characters of its
#: daemon's fingerprint (80 bits: no member can make a key whose fingerprint starts like another's)
GOSSIP_NAME_RE: Final = re.compile(r"\A[pra]:[A-Z2-7]{16}\Z")


def gossip_name(kind: str, peer_id: str) -> str:
    """The broadcast tree's name for daemon ``peer_id``'s gossip of ``kind`` (``p``, ``r``, ``a``)."""
    return f"{kind}:{peer_id.replace('-', '')[:16]}"


def is_gossip_name(name: str) -> bool:
    """Does a broadcast tree key name a gossip record (``gossip_name``) rather than an origin?"""
    return name[:2] in ("p:", "r:", "a:")


def _tree_name(name: object, tag: str) -> str:
    """What a broadcast tree key names: an origin id, or a gossip record (``gossip_name``)."""
    if not (isinstance(name, str) and (ORIGIN_ID_RE.match(name) or GOSSIP_NAME_RE.match(name))):
        raise RemoteProtocolError(f"a {tag} key must name an origin id, or a gossip record as p:, r: or a: and "
                                  "16 characters of a peer id")
    return name


def _positive(d: Mapping[str, Any], key: str) -> int:
    value = _int(d, key)
    if value < 1:
        raise RemoteProtocolError(f"{key!r} must be at least 1")
    return value


_CONTROL_DECODERS: Final[dict[str, Any]] = {
    "join": lambda d: Join(),
    "forward_join": lambda d: ForwardJoin(_str(d, "peer"), _small_int(d, "ttl")),
    "neighbor": lambda d: Neighbor(_bool(d, "high")),
    "neighbor_reply": lambda d: NeighborReply(_bool(d, "accepted")),
    "disconnect": lambda d: Disconnect(),
    "shuffle": lambda d: Shuffle(_str(d, "origin"), _small_int(d, "ttl"), _peer_ids(d, "peers", MAX_SHUFFLE_PEERS)),
    "shuffle_reply": lambda d: ShuffleReply(_peer_ids(d, "peers", MAX_SHUFFLE_PEERS)),
    "ihave": _event_keys,
    "graft": lambda d: Graft(_tree_name(d.get("origin"), "graft"), _positive(d, "seq")),
    "prune": lambda d: Prune(_bool(d, "gossip") if "gossip" in d else False),
}


def presence_signing_bytes(peer_id: str, name: str, serial: int, watchers: tuple[tuple[str, ...], ...]) -> bytes:
    """What a ``Presence`` signature covers (deterministic msgpack of the fields)."""
    return b"palace/presence/v1\n" + msgpack.packb([peer_id, name, serial, [list(w) for w in watchers]],
                                                   use_bin_type=True)


def report_signing_bytes(peer_id: str, name: str, serial: int, report: bytes) -> bytes:
    """What a ``Report`` signature covers (deterministic msgpack of the fields)."""
    return b"palace/report/v1\n" + msgpack.packb([peer_id, name, serial, report], use_bin_type=True)


def addresses_signing_bytes(peer_id: str, serial: int, addresses: tuple[str, ...]) -> bytes:
    """What an ``Addresses`` signature covers (deterministic msgpack of the fields)."""
    return b"palace/addresses/v1\n" + msgpack.packb([peer_id, serial, list(addresses)], use_bin_type=True)


def parse_peer_address(text: str, *, default_port: int | None = None) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) → (host, port).

    Raises:
        ValueError: naming what is wrong ("expected HOST:PORT, e.g. 192.168.1.20:7437").
    """
    text = text.strip()
    example = f"expected HOST:PORT, e.g. 192.168.1.20:{DEFAULT_PEER_PORT}"
    if not text:
        raise ValueError(f"empty address; {example}")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r} is not an address; {example}")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise ValueError(f"{text!r}: write IPv6 addresses in brackets, e.g. [fd00::1]:{DEFAULT_PEER_PORT}")
    else:
        host, port_text = text, ""
    if not host or any(c.isspace() for c in host):
        raise ValueError(f"{text!r} has no host; {example}")
    if not port_text:
        if default_port is None:
            raise ValueError(f"{text!r} has no port; {example}")
        return host, default_port
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r}: the port must be a number from 0 to 65535")
    return host, int(port_text)


def format_peer_address(host: str, port: int) -> str:
    return host_port(host, port)
