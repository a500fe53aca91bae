"""History from a file (``palacectl import``): events of other palaces, or of this one's past.

Owns: what an import may store and why each refused event was refused. Imported events are
history, not replication: their origin keeps ``max_seq`` 0 (never in the version vector, never
offered to peers nor asked for), they may have gaps (a filtered export), and they obey the same
data-model rules as a peer's events (apply.rule_broken). Writer thread only, inside a batch's
transaction (``WriteContext.import_history``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from palace_proto.envelope import GENESIS_HASH, CommittedEvent, SignedEvent
from palace_proto.errors import SignatureError
from palace_proto.sync import verify_incoming

from .apply import rule_broken
from .writes import insert_event

if TYPE_CHECKING:
    from .state import WriteContext

__all__ = ["import_history"]


def import_history(ctx: WriteContext, events: Sequence[SignedEvent], keys: Mapping[str, bytes]) -> dict[str, Any]:
    """Verify each event against its origin's key and store it as history.

    Refused: our own origin, and an origin this palace replicates (its events come from peers or
    a backup, never from a file: an import must not be able to put words in a member's mouth that
    the member's chain does not hold). The stored events' records go to the batch (the bus); returns
    how many were imported, duplicates, and the refused ones with their reasons.
    """
    conn = ctx.conn
    stored: list[CommittedEvent] = []
    duplicates = 0
    refused: list[dict[str, str]] = []
    known: dict[str, tuple[bytes, int] | None] = {}
    members = {origin for (origin,) in conn.execute("SELECT origin FROM bindings")}
    for event in events:
        key = keys.get(event.origin)
        if event.origin not in known:
            row = conn.execute("SELECT public_key, max_seq FROM origins WHERE origin=?", (event.origin,)).fetchone()
            known[event.origin] = (bytes(row[0]), row[1]) if row else None
        here = known[event.origin]
        if conn.execute("SELECT 1 FROM events WHERE id=?", (event.id,)).fetchone():
            duplicates += 1
            continue
        if event.origin == ctx.chain.origin:
            refused.append({"id": event.id, "reason": "this replica's own origin (only it writes there)"})
            continue
        if event.origin in members or (here is not None and here[1] > 0):
            refused.append({"id": event.id, "reason": f"origin {event.origin} is replicated in this palace: its "
                            "events come from peers, not from a file"})
            continue
        if key is None:
            refused.append({"id": event.id, "reason": f"no public key for origin {event.origin} in the file"})
            continue
        if here is not None and here[0] != key:
            refused.append({"id": event.id, "reason": f"origin {event.origin} is known here with another key"})
            continue
        try:
            verify_incoming(event, key)
        except SignatureError as exc:
            refused.append({"id": event.id, "reason": f"does not verify: {exc}"})
            continue
        broken = rule_broken(event, ctx.limits)  # a file is as hostile as a peer: the same rules
        if broken is not None:
            refused.append({"id": event.id, "reason": f"breaks a rule: {broken}"})
            continue
        if conn.execute("SELECT 1 FROM events WHERE origin=? AND origin_seq=?",
                        (event.origin, event.origin_seq)).fetchone():
            refused.append({"id": event.id, "reason": f"another event already holds {event.origin} "
                            f"#{event.origin_seq} here (a fork in the imported history)"})
            continue
        if here is None:
            conn.execute("INSERT INTO origins (origin, public_key, max_seq, head_hash) VALUES (?, ?, 0, ?)",
                         (event.origin, key, GENESIS_HASH))
            known[event.origin] = (key, 0)
        # a body redacted before the export stays absent
        stored.append(insert_event(ctx, event, history=True))
    ctx.batch.events.extend(stored)  # the bus gets them once committed
    return {"imported": len(stored), "duplicates": duplicates, "refused": refused}
