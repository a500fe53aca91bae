"""The leases' reads of the store: the lease events a ledger is built from, and those after it.

Owns: ``LeaseReads`` — ``window`` (the newest seq of the lease types, then their newest events
since the window's start: what a ledger is built from, in one reader's view) and ``events_after``
(the lease events committed after a ledger's seq: what feeds it). The leases themselves are
palace_proto.leases's derivation, kept by the leases feature (palaced/features/leases.py). Reads
on the calling thread's reader connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from palace_proto.event_fields import PublicEvent

from .queries import events_of_types_after_seq, events_of_types_since, latest_seq_of_types
from .reads import ReadSet, StoreRead

if TYPE_CHECKING:
    from .queries import Reads

__all__ = ["LeaseReads", "events_after", "window"]


def window(reads: Reads, types: Sequence[str], since_created_at: str, limit: int) -> tuple[int, list[PublicEvent]]:
    """The newest seq of ``types``, then their newest ``limit`` events since ``since_created_at``:
    every such event committed after the first read has a higher seq than it."""
    conn = reads.db.reader()
    return latest_seq_of_types(conn, types), events_of_types_since(conn, types, since_created_at, None, limit)


def events_after(reads: Reads, types: Sequence[str], after_seq: int, limit: int) -> list[PublicEvent]:
    """The first ``limit`` events of ``types`` after local ``after_seq``."""
    return events_of_types_after_seq(reads.db.reader(), types, after_seq, limit)


class LeaseReads(ReadSet):
    """The leases' reads on the async store (``store.reads(LeaseReads)``), each on a reader thread."""

    window = StoreRead(window)
    events_after = StoreRead(events_after)
