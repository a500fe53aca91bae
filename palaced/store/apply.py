"""Events from peers: verified, judged against their origin's chain, and stored or set aside.

Owns: applying a peer's batch (duplicates, gaps, forks, rejections, refusals, events held back for
missing artifacts), joining imported history when replication reaches it, the data-model rules an
authentic event from outside must keep (imports.py applies the same ones; who may write what is
not among them: an event the authority table or the agent registry does not allow is stored,
relayed and flagged, never refused), fork evidence, and
whether an ``event.redact`` from outside may purge its target (on its arrival or the target's).
What was refused from peers stays in ``Refusals`` (replication asks it which origins not to ask
again; ``status`` counts the redactions not honoured). Each function takes the job's
``WriteContext``. Writer thread only, inside a batch's transaction (batch.py, through
``WriteContext.apply_remote``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import apsw
import msgpack

from palace_proto.envelope import GENESIS_HASH, CommittedEvent, SignedEvent, verify_hashes
from palace_proto.errors import SignatureError, ValidationError
from palace_proto.features import STORED_CHECKS
from palace_proto.identity import REGISTRY_TYPES
from palace_proto.peer import event_to_wire
from palace_proto.sync import OriginHead, Verdict, classify, verify_incoming
from palace_proto.text import printable
from palace_proto.validation import Limits, check_replicated_event

from ..clock import utc_now
from .origins import head, origin_key
from .queries import hash_at, signed_event_at
from .state import Refusals
from .writes import insert_event, redact

if TYPE_CHECKING:
    from .state import WriteContext

__all__ = ["ApplyReport", "apply_remote", "rule_broken"]

_LOGGER: Final = logging.getLogger("palaced.store")


@dataclass(slots=True)
class ApplyReport:
    """What happened to a batch of events from a peer."""

    applied: list[CommittedEvent] = field(default_factory=list)
    duplicates: list[SignedEvent] = field(default_factory=list)
    gaps: list[SignedEvent] = field(default_factory=list)
    forks: list[SignedEvent] = field(default_factory=list)
    rejected: list[SignedEvent] = field(default_factory=list)
    missing_artifacts: list[SignedEvent] = field(default_factory=list)
    #: authentic events that break a data-model rule, with the reason (refused alone)
    refused: list[tuple[SignedEvent, str]] = field(default_factory=list)
    #: applied ``event.redact`` events whose purge was not honoured (not the target's origin nor the CA)
    redactions_refused: list[tuple[SignedEvent, str]] = field(default_factory=list)
    #: ids of events whose bodies were purged by redactions in this batch
    purged: list[str] = field(default_factory=list)


def apply_remote(ctx: WriteContext, events: Sequence[SignedEvent], key_for: Callable[[str, int], bytes | None],
                 source: str | None = None, on_applied: Callable[[SignedEvent], None] | None = None,
                 verified_keys: Sequence[bytes | None] | None = None,
                 may_redact: Callable[[SignedEvent, str], bool] | None = None) -> ApplyReport:
    """Verify and store events from a peer, in the order given (each origin in seq order).

    Every event is checked against its origin's key and chain before it is stored; duplicates
    are ignored (idempotent), gaps wait for the missing events, forks are recorded and never
    applied; an event of our own origin from outside is an echo (ignored) or a fork. An
    authentic event that breaks a data-model rule is refused on its own (``report.refused``)
    and its origin is not asked for again (``Refusals.next``). Events whose artifacts are
    missing are held back (and, by the chain rule, everything after them in their origin).
    Applied events get a new local ``seq`` in arrival order.

    ``verified_keys`` gives, for each event **by position**, the key its signature was
    already checked with off the writer thread (sync.verify_batch); the hashes are still
    recomputed here, on the exact object stored, so a verification can never be borrowed by an
    event that merely claims another one's hash. ``may_redact(redaction, target_origin)``
    says whether an ``event.redact`` may purge an event of ``target_origin`` (its own origin,
    or signed by the palace CA: members.MemberDirectory.redaction_authorized); without it only
    an origin's own redactions are honoured.
    """
    if verified_keys is not None and len(verified_keys) != len(events):
        raise ValueError("verified_keys must give one key (or None) per event")
    report = ApplyReport()
    conn = ctx.conn
    batch_heads = ctx.batch.heads
    own_origin = ctx.chain.origin
    own_key = ctx.chain.public_key
    heads: dict[str, OriginHead | None] = {}
    bound_keys: dict[str, bytes | None] = {}
    forked: set[str] = set()

    def head_of(origin: str) -> OriginHead | None:
        if origin not in heads:
            heads[origin] = head(conn, origin)
        return heads[origin]

    for index, event in enumerate(events):
        own = event.origin == own_origin
        # key_for answers for this exact event: a revoked member's origin stays valid up to its
        # cutoff only, so the key depends on origin_seq too.
        key = own_key if own else key_for(event.origin, event.origin_seq)
        if own:
            bound = None
        elif event.origin in bound_keys:
            bound = bound_keys[event.origin]
        else:
            bound = bound_keys[event.origin] = origin_key(conn, event.origin)
        if key is None or (bound is not None and bound != key):
            # Unknown origin, or one already bound to another key: an origin never changes keys.
            report.rejected.append(event)
            continue
        if hash_at(conn, event.origin, event.origin_seq) == event.event_hash:
            # We hold this exact event already: nothing of the arriving copy is stored, so nothing
            # of it needs verifying (a catch-up that overlaps what we have costs a lookup per
            # event, not a signature).
            if not own:
                _join_history(ctx, event.origin, event.origin_seq, key, head_of(event.origin), heads)
            report.duplicates.append(event)
            continue
        try:
            if verified_keys is not None and verified_keys[index] == key:
                verify_hashes(event)  # the signature was checked for this very object; its hashes here
            else:
                verify_incoming(event, key)
        except SignatureError:
            report.rejected.append(event)
            continue
        if own:
            # Only we write our origin: a validly signed event we did not write means our key
            # and origin run somewhere else too (a copied home or a restored backup) — a fork.
            _record_fork(conn, event, hash_at(conn, event.origin, event.origin_seq), source)
            report.forks.append(event)
            continue
        origin_head = head_of(event.origin)
        stored = (hash_at(conn, event.origin, event.origin_seq)
                  if origin_head and event.origin_seq <= origin_head.max_seq else None)
        verdict = classify(event, origin_head, stored)
        if verdict is Verdict.DUPLICATE:
            report.duplicates.append(event)
        elif verdict is Verdict.GAP:
            report.gaps.append(event)
        elif verdict is Verdict.FORK:
            if event.origin not in forked:  # one piece of evidence per origin and batch is enough
                _record_fork(conn, event,
                             stored if stored is not None else (origin_head.head_hash if origin_head else None), source)
                forked.add(event.origin)
            report.forks.append(event)
        else:
            # Only the data model refuses an authentic event: who may write what (the authority
            # table, the agent registry) decides what it does, never whether it is stored.
            reason = rule_broken(event, ctx.limits)
            if reason is not None:
                _refuse(ctx.refusals, event, reason, source)
                report.refused.append((event, reason))
                continue
            missing = [a for a in event.artifact_ids
                       if conn.execute("SELECT 1 FROM artifacts WHERE id=?", (a,)).fetchone() is None]
            if missing:
                report.missing_artifacts.append(event)
                continue
            if _redacted_on_arrival(ctx, event):
                event = dataclasses.replace(event, body=None)  # redacted elsewhere first: never store the body
            conn.execute("INSERT OR IGNORE INTO origins (origin, public_key, max_seq, head_hash) VALUES (?, ?, 0, ?)",
                         (event.origin, key, GENESIS_HASH))
            bound_keys[event.origin] = key
            record = insert_event(ctx, event)
            conn.execute("UPDATE origins SET max_seq=?, head_hash=? WHERE origin=?",
                         (event.origin_seq, event.event_hash, event.origin))
            new_head = heads[event.origin] = OriginHead(event.origin_seq, event.event_hash)
            batch_heads.append((event.origin, new_head))
            ctx.refusals.next.pop(event.origin, None)
            if event.type == "event.redact":
                _apply_redaction(ctx, event, may_redact, report, source)
            report.applied.append(record)
            if on_applied is not None:
                on_applied(event)
    ctx.batch.events.extend(report.applied)  # the bus gets them once committed
    return report


def rule_broken(event: SignedEvent, limits: Limits) -> str | None:
    """Why an authentic event from outside breaks the data model (None: it does not)."""
    try:
        check_replicated_event(event, limits)
        check = STORED_CHECKS.get(event.type)
        if check is not None:  # what its feature asks of its content (memory's shapes)
            check(event.type, event.body, event.metadata_json)
    except ValidationError as exc:
        return exc.message
    return None


def _join_history(ctx: WriteContext, origin: str, origin_seq: int, key: bytes, origin_head: OriginHead | None,
                  heads: dict[str, OriginHead | None]) -> None:
    """Replication reached an event we hold as imported history: the head moves on over it —
    but only if the stored event itself is the next link of the chain and verifies with the
    origin's key (the arriving copy only *claims* its hash; what we keep is the stored one)."""
    if origin_seq != (origin_head.max_seq if origin_head else 0) + 1:
        return
    conn = ctx.conn
    stored = signed_event_at(conn, origin, origin_seq)
    if stored.prev_hash != (origin_head.head_hash if origin_head else GENESIS_HASH):
        return
    try:
        verify_incoming(stored, key)
    except SignatureError:
        return
    conn.execute("UPDATE origins SET max_seq=?, head_hash=? WHERE origin=?", (origin_seq, stored.event_hash, origin))
    new_head = heads[origin] = OriginHead(origin_seq, stored.event_hash)
    ctx.batch.heads.append((origin, new_head))
    if stored.type in REGISTRY_TYPES:  # part of the chain now: the registry counts it from here on
        ctx.batch.registry.append(stored)


def _refuse(refusals: Refusals, event: SignedEvent, reason: str, source: str | None) -> None:
    """Remember (once per origin and sequence) that this origin's next event breaks a rule, so
    nobody asks for it again until something changes (a restart, or the chain moving on)."""
    known = refusals.next.get(event.origin)
    if known is not None and known[0] == event.origin_seq:
        return
    refusals.next[event.origin] = (event.origin_seq, event.event_hash, reason)
    _LOGGER.warning("refused event %s (origin %s #%d, from %s): %s; that origin stops here on this replica",
                    event.id, event.origin, event.origin_seq, printable(source or "?"), printable(reason, 200))


def _redacted_on_arrival(ctx: WriteContext, event: SignedEvent) -> bool:
    """Whether an arriving event was already redacted here (an authorised redaction came first)."""
    conn = ctx.conn
    if conn.execute("SELECT 1 FROM redactions WHERE target_id=?", (event.id,)).fetchone():
        return True
    for redact_event, redact_origin, by_ca in conn.execute(
            "SELECT redact_event, redact_origin, by_ca FROM redaction_claims WHERE target_id=?",
            (event.id,)).fetchall():
        if by_ca or redact_origin == event.origin:
            conn.execute("INSERT OR IGNORE INTO redactions VALUES (?, ?)", (event.id, redact_event))
            ctx.wal.purge_pending = True
            return True
    return False


def _apply_redaction(ctx: WriteContext, redaction: SignedEvent, may_redact: Callable[[SignedEvent, str], bool] | None,
                     report: ApplyReport, source: str | None) -> None:
    """An ``event.redact`` from a peer purges its target only if its author may (its own origin's
    event, or with the palace CA's signature); otherwise it stays in the log, unhonoured."""
    target_id = json.loads(redaction.metadata_json).get("redacts")
    if not isinstance(target_id, str):
        return
    authorised = may_redact if may_redact is not None else (lambda r, origin: r.origin == origin)
    conn = ctx.conn
    row = conn.execute("SELECT origin FROM events WHERE id=?", (target_id,)).fetchone()
    if row is None:
        # The target has not arrived yet: keep the claim, judged when it does.
        conn.execute("INSERT OR IGNORE INTO redaction_claims VALUES (?, ?, ?, ?)",
                     (target_id, redaction.id, redaction.origin, int(authorised(redaction, ""))))
        return
    if authorised(redaction, row[0]):
        redact(ctx, target_id, redaction.id)  # the batch notes the purge
        report.purged.append(target_id)
        return
    ctx.refusals.redactions += 1
    report.redactions_refused.append((redaction, target_id))
    _LOGGER.warning("did not honour redaction %s of %s (from %s): written by origin %s, not by the event's own "
                    "origin %s nor signed by the palace CA", redaction.id, printable(target_id),
                    printable(source or "?"), redaction.origin, row[0])


def _record_fork(conn: apsw.Connection, event: SignedEvent, kept_hash: bytes | None, source: str | None) -> None:
    _LOGGER.error("fork: origin %s seq %d has two different events (kept %s, rejected %s from %s)",
                  event.origin, event.origin_seq, kept_hash.hex()[:16] if kept_hash else "-",
                  event.event_hash.hex()[:16], source or "?")
    conn.execute(
        "INSERT OR IGNORE INTO forks VALUES (?,?,?,?,?,?,?)",
        # Without the body: the signed part holds its sha256, so the evidence still proves the
        # fork, and a body kept here would outlive its redaction (a fork is never applied).
        (event.origin, event.origin_seq, kept_hash, event.event_hash,
         msgpack.packb(event_to_wire(event, with_body=False), use_bin_type=True), utc_now(), source),
    )
