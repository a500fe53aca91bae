"""Replication rules, as pure functions: what to ask a peer for, and what to do with what arrives.

Owns: the decisions of version-vector sync (proto/PROTOCOL.md §5.4), kept free of IO so they can be tested exhaustively:

* ``plan_wants`` — for every origin where the peer is ahead, ask for the events after ours.
* ``classify`` — for one arriving event, given what we hold of its origin: apply it (the next in
  the chain), ignore it (a duplicate), wait (a gap: an earlier event is missing), or refuse it (a
  fork: a different event at a sequence number we already hold, or a chain that does not link).
  Forks are kept out, never overwrite the first event, and are reported (p2p-lessons complaint 6).
* ``vector_forks`` — forks visible from the vectors alone (same seq, different head hash).
* ``verify_incoming`` — signature and hash checks with every failure as ``SignatureError``.
* ``verify_batch`` — authenticate a batch with one signature per chained run (sign the head,
  hash-chain the rest: what makes a 100k-event catch-up affordable).
* ``batch_events`` — bounded batches by count and bytes (complaint 9: no giant messages).

Pure: no clock, no IO.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import Final, final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .envelope import GENESIS_HASH, SignedEvent, verify_event, verify_hashes
from .errors import SignatureError
from .peer import Vector, Want

__all__ = ["OriginHead", "Verdict", "batch_events", "classify", "plan_wants", "vector_forks", "verify_batch",
           "verify_incoming"]

# Why 1 MiB: far below the frame limit, large enough that per-message overhead is negligible.
DEFAULT_BATCH_BYTES: Final = 1 << 20
DEFAULT_BATCH_COUNT: Final = 500


@final
@dataclasses.dataclass(frozen=True, slots=True)
class OriginHead:
    """What we hold of one origin: the highest contiguous origin_seq and its event hash."""

    max_seq: int
    head_hash: bytes


class Verdict(enum.Enum):
    APPLY = "apply"
    DUPLICATE = "duplicate"
    GAP = "gap"
    FORK = "fork"


def plan_wants(local: Mapping[str, OriginHead], remote: Vector, skip: Container[str] = ()) -> list[Want]:
    """Wants for every origin where ``remote`` holds more than we do, in a stable order.

    ``skip``: origins not to ask for (we could not accept what would come: no binding for the
    origin, or its next event was already refused — asking again would only repeat the refusal).
    """
    wants = []
    for entry in sorted(remote.entries, key=lambda e: e.origin):
        if entry.origin in skip:
            continue
        have = local.get(entry.origin)
        have_seq = have.max_seq if have else 0
        if entry.max_seq > have_seq:
            wants.append(Want(origin=entry.origin, after_seq=have_seq))
    return wants


def vector_forks(
    local: Mapping[str, OriginHead], remote: Vector, hash_at: Callable[[str, int], bytes | None]
) -> list[str]:
    """Origins where the peer's head, at a seq we also hold, has a different hash than ours.

    ``hash_at(origin, seq)`` returns our stored event hash at that position (None if absent).
    """
    forks = []
    for entry in remote.entries:
        have = local.get(entry.origin)
        if have is None or entry.max_seq == 0 or entry.max_seq > have.max_seq:
            continue
        ours = have.head_hash if entry.max_seq == have.max_seq else hash_at(entry.origin, entry.max_seq)
        if ours is not None and ours != entry.head_hash:
            forks.append(entry.origin)
    return sorted(forks)


def classify(event: SignedEvent, head: OriginHead | None, stored_hash: bytes | None = None) -> Verdict:
    """Decide what to do with an arriving event (already signature-verified).

    Args:
        head: what we hold of the event's origin (None: nothing yet).
        stored_hash: our event hash at ``event.origin_seq`` when we hold that position.
    """
    have_seq = head.max_seq if head else 0
    if event.origin_seq <= have_seq:
        return Verdict.DUPLICATE if stored_hash == event.event_hash else Verdict.FORK
    if event.origin_seq > have_seq + 1:
        return Verdict.GAP
    expected_prev = head.head_hash if head else GENESIS_HASH
    return Verdict.APPLY if event.prev_hash == expected_prev else Verdict.FORK


def verify_incoming(event: SignedEvent, public_key: bytes) -> None:
    """Verify an event from a peer against its origin's public key.

    Raises:
        SignatureError: bad key, hash, signature or body hash (never another exception type).
    """
    try:
        key = Ed25519PublicKey.from_public_bytes(public_key)
    except ValueError:
        raise SignatureError(f"event {event.id}: the origin's public key is malformed") from None
    verify_event(event, key)


def _signature_ok(event: SignedEvent, key: Ed25519PublicKey) -> bool:
    try:
        key.verify(event.signature, event.event_hash)
    except InvalidSignature:
        return False
    return True


def verify_batch(events: Sequence[SignedEvent], key_for: Callable[[str, int], bytes | None]) -> list[bytes | None]:
    """Authenticate a batch with one signature check per run of chained events.

    A run is consecutive events of one origin under one key, each naming the previous one's hash
    as its ``prev_hash``. Every event's hashes are recomputed, but only the run's last signature
    is checked: it covers that event's hash, which covers its ``prev_hash``, which is the
    previous event's (recomputed) hash, and so on — so one signature vouches for the whole run
    (forging an earlier event would take a sha256 collision). If the last signature fails, each
    event is checked on its own, so a valid prefix is still recognised.

    Returns:
        For each event **by position**, the key it was verified with, or None (no key, bad hash,
        bad signature). The answer is bound to the event objects given, never to a value they
        claim: an event that *claims* another event's ``event_hash`` and ``signature`` is not
        authenticated by the other one's verification. Whoever applies the events must still
        recompute their hashes (``envelope.verify_hashes``) where it applies them.
    """
    verified: list[bytes | None] = [None] * len(events)
    run: list[int] = []
    run_key = b""

    def close_run() -> None:
        if not run:
            return
        try:
            key = Ed25519PublicKey.from_public_bytes(run_key)
        except ValueError:
            return
        authentic = run if _signature_ok(events[run[-1]], key) else [i for i in run if _signature_ok(events[i], key)]
        for index in authentic:
            verified[index] = run_key

    for index, event in enumerate(events):
        key = key_for(event.origin, event.origin_seq)
        try:
            verify_hashes(event)
        except SignatureError:
            key = None
        if key is None:
            close_run()
            run = []
            continue
        if run:
            last = events[run[-1]]
            if not (event.origin == last.origin and event.origin_seq == last.origin_seq + 1
                    and event.prev_hash == last.event_hash and key == run_key):
                close_run()
                run = []
        run.append(index)
        run_key = key
    close_run()
    return verified


def batch_events(
    events: Iterable[SignedEvent], size_of: Callable[[SignedEvent], int], *,
    max_count: int = DEFAULT_BATCH_COUNT, max_bytes: int = DEFAULT_BATCH_BYTES,
) -> list[list[SignedEvent]]:
    """Split events (order kept) into batches of at most ``max_count`` events and ``max_bytes``
    (an event larger than ``max_bytes`` travels alone)."""
    batches: list[list[SignedEvent]] = []
    current: list[SignedEvent] = []
    current_bytes = 0
    for event in events:
        size = size_of(event)
        if current and (len(current) >= max_count or current_bytes + size > max_bytes):
            batches.append(current)
            current, current_bytes = [], 0
        current.append(event)
        current_bytes += size
    if current:
        batches.append(current)
    return batches
