"""Trio adapter for the synchronous store: the only way trio code touches SQLite.

Owns: ``AsyncStore``, what the daemon holds of its store: the group-commit writer (writer.py:
every write, batched, committed in the loop or on a thread, answered once fsynced), the WAL keeper
(wal_keeper.py: copies back, truncations, a redaction's purge, the disk-full state), run together
by ``serve_writer``, and the reads, each on a worker thread under a ``CapacityLimiter`` with the
store's per-thread connections (typed: ``list_events``, ``get_event``, ...; a caller never picks
the thread hop itself).

A failing write never stops the writer: a job that raises fails alone (store.write_batch), a batch
that cannot commit fails every job in it, and a full disk is answered ``disk_full`` (logged once
per episode, shown by ``status``) until a write succeeds again, with no restart. WAL checkpoints
that fail (full disk, I/O error) are logged once and retried later; the WAL keeps every committed
page meanwhile, so nothing acknowledged is lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import trio

from palace_proto.envelope import CommittedEvent
from palace_proto.sync import OriginHead
from palace_proto.validation import Limits

from . import inbox
from .identity import AgentRegistry
from .queries import Reads
from .reads import ReadSet, StoreRead
from .state import Refusals
from .store import Store
from .wal import Wal
from .wal_keeper import WalKeeper
from .writer import HEAVY_ARTIFACT_BYTES, Writer

__all__ = ["HEAVY_ARTIFACT_BYTES", "AsyncStore"]

LOGGER: Final = logging.getLogger("palaced.store")
# Why 4: reads are short index lookups; more threads than cores only add contention on 2 cores.
READ_THREADS: Final = 4

R = TypeVar("R")
S = TypeVar("S", bound=ReadSet)


class AsyncStore(ReadSet):
    """Async facade over ``Store``. Run ``serve_writer`` in a nursery (idle maintenance, and the
    drain at shutdown) before calling ``write``."""

    def __init__(self, store: Store, on_committed: Callable[[list[CommittedEvent]], bool | None],
                 on_purged: Callable[[list[str]], None] | None = None) -> None:
        super().__init__(store, self._hop)
        self.store = store
        self._sets: dict[type[ReadSet], ReadSet] = {}
        #: keeps the WAL small; the writer's ``Upkeep``
        self.keeper = WalKeeper(store)
        #: the group-commit writer
        self.writer = Writer(store, self.keeper, on_committed, on_purged)
        #: ``write(job, *, heavy=False)``: ``Writer.write`` itself (no call layer of its own on the
        #: append path): ``job(ctx)`` runs in the next write batch; its value once committed and fsynced
        self.write = self.writer.write  # (typed as Writer.write: a job's value type is the write's)
        #: ``sync()``: every write so far on disk, those made with ``durable=False`` too (``Writer.sync``)
        self.sync: Callable[..., Awaitable[None]] = self.writer.sync
        self._read_limiter = trio.CapacityLimiter(READ_THREADS)

    def __repr__(self) -> str:
        writer = self.writer
        return f"<AsyncStore {self.store.path} batches={writer.batches} writes={writer.writes} closed={writer.closed}>"

    @property
    def idle_s(self) -> float:
        """How long since the writer answered its last batch (seconds)."""
        return time.monotonic() - self.writer.last_write

    def statistics(self) -> dict[str, Any]:
        writer = self.writer
        return {"batches": writer.batches, "writes": writer.writes, "queued": writer.queued,
                **self.keeper.statistics(), "slow_disk": writer.slow_disk, "disk_full": self.keeper.disk_full()}

    # -- writing -------------------------------------------------------------------------------

    def committed_heads(self) -> dict[str, OriginHead]:
        """Our version vector as of the last batch the writer counted: what ``sync`` called now
        covers, so what a receipt recorded now may name once that sync is over (``Writer``)."""
        return dict(self.writer.committed_heads)

    def durable_heads(self) -> dict[str, OriginHead]:
        """Our version vector as known to be on disk: all a vector sent to a peer may name
        (``Writer``). Kept in memory: no read, no thread hop."""
        return dict(self.writer.durable_heads)

    async def checkpoint(self) -> None:
        """Try to truncate the WAL now, between two batches (as the keeper does by itself when
        the WAL grows); the outcome shows in ``statistics``."""
        await self.writer.maintain(self.keeper.checkpoint)

    async def serve_writer(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Idle maintenance (a pending redaction purge, WAL truncation, noticing that a full disk
        has room again) until ``close_writes``; then wait until every queued write is answered.

        If cancelled (shutdown ran out of grace), the batch being committed finishes and the
        writes still queued get ``shutting_down``.
        """
        task_status.started()
        try:
            await self.keeper.serve(self.writer)
        finally:
            self.writer.stop()
            LOGGER.debug("writer stopped")

    def close_writes(self) -> None:
        """Refuse new writes (shutdown); queued ones still commit, then ``serve_writer`` returns."""
        self.writer.close()

    # -- the store's state kept in memory (no read, no thread hop) --------------------------------

    @property
    def origin_id(self) -> str:
        """This daemon's own origin (its Ed25519 public key, hex)."""
        return self.store.origin_id

    @property
    def public_key(self) -> bytes:
        return self.store.public_key

    @property
    def agents(self) -> AgentRegistry:
        """The agent registry as of the last commit (agents.py), read in the event loop."""
        return self.store.agents

    @property
    def refusals(self) -> Refusals:
        """The arrivals this replica refused, counted (for ``status``)."""
        return self.store.refusals

    @property
    def limits(self) -> Limits:
        return self.store.limits

    @property
    def wal(self) -> Wal:
        return self.store.wal

    @property
    def path(self) -> Path:
        return self.store.path

    def version_vector(self) -> dict[str, int]:
        return self.store.version_vector()

    def heads(self) -> dict[str, OriginHead]:
        return self.store.heads()

    # -- reading (each on a reader thread, under the readers' limiter) ---------------------------
    # The store's reads (queries.Reads, inbox, task_threads, usage) as the event loop calls them,
    # each declared once where it is written and offered here as a typed coroutine (reads.py); a
    # feature's own reads are a set of their own, declared in its store module (``reads``). A
    # caller never passes a function nor picks the thread hop.

    async def _hop(self, fn: Callable[[], R]) -> R:
        return await trio.to_thread.run_sync(fn, limiter=self._read_limiter)

    def reads(self, kind: type[S]) -> S:
        """A feature's reads — the ``ReadSet`` its store module declares (``RoomReads``, ...) — on
        this store: ``await store.reads(RoomReads).whole_room(room_id)``."""
        found = self._sets.get(kind)
        if found is None:
            found = self._sets[kind] = kind(self.store, self._hop)
        return found  # type: ignore[return-value]

    get_event = StoreRead(Reads.get_event)
    #: raises ``NotFound`` (naming the field) for an unknown id
    resolve_seq = StoreRead(Reads.resolve_seq)
    latest = StoreRead(Reads.latest)
    list_events = StoreRead(Reads.list_events)
    events_after_seq = StoreRead(Reads.events_after_seq)
    events_of_types = StoreRead(Reads.events_of_types)
    events_by_correlation = StoreRead(Reads.events_by_correlation)
    events_of_correlations = StoreRead(Reads.events_of_correlations)
    correlations_present = StoreRead(Reads.correlations_present)
    signed_events_of_origin = StoreRead(Reads.signed_events_of_origin)
    signed_events_of_type = StoreRead(Reads.signed_events_of_type)
    export_page = StoreRead(Reads.export_page)
    vector_forks = StoreRead(Reads.vector_forks)
    absent_artifacts = StoreRead(Reads.absent_artifacts)
    count_events = StoreRead(Reads.count_events)
    counts = StoreRead(Reads.counts)
    forks = StoreRead(Reads.forks)
    #: raises ``NotFound``: no such artifact on this replica
    get_artifact = StoreRead(Reads.get_artifact)
    own_origins = StoreRead(Reads.own_origins)
    origins_of_key = StoreRead(Reads.origins_of_key)
    bindings = StoreRead(Reads.bindings)
    static_peers = StoreRead(Reads.static_peers)
    peer_addresses = StoreRead(Reads.peer_addresses)
    invite = StoreRead(Reads.invite)
    pending_invites = StoreRead(Reads.pending_invites)
    agent_activity = StoreRead(Reads.agent_activity)
    events_written_as = StoreRead(Reads.events_written_as)
    #: the agent's inbox cursor and the first ``limit`` events after it (inbox.py)
    inbox_page = StoreRead(inbox.inbox_page)
    #: the inbox events after ``after_seq`` (up to its cap)
    unread_count = StoreRead(inbox.unread_count)
