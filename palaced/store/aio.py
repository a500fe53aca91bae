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

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final

import trio

from palace_proto.envelope import CommittedEvent, SignedEvent
from palace_proto.sync import OriginHead
from palace_proto.validation import ListQuery

from . import inbox, task_threads
from . import usage as store_usage
from .store import Store
from .wal_keeper import WalKeeper
from .writer import HEAVY_ARTIFACT_BYTES, Writer

__all__ = ["HEAVY_ARTIFACT_BYTES", "AsyncStore"]

LOGGER: Final = logging.getLogger("palaced.store")
# Why 4: reads are short index lookups; more threads than cores only add contention on 2 cores.
READ_THREADS: Final = 4


class AsyncStore:
    """Async facade over ``Store``. Run ``serve_writer`` in a nursery (idle maintenance, and the
    drain at shutdown) before calling ``write``."""

    def __init__(self, store: Store, on_committed: Callable[[list[CommittedEvent]], bool | None],
                 on_purged: Callable[[list[str]], None] | None = None) -> None:
        self.store = store
        #: keeps the WAL small; the writer's ``Upkeep``
        self.keeper = WalKeeper(store)
        #: the group-commit writer
        self.writer = Writer(store, self.keeper, on_committed, on_purged)
        #: ``write(job, *, heavy=False)``: ``Writer.write`` itself (no call layer of its own on the
        #: append path): ``job(ctx)`` runs in the next write batch; its value once committed and fsynced
        self.write: Callable[..., Awaitable[Any]] = self.writer.write
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

    # -- reading (each on a reader thread, under the readers' limiter) ---------------------------
    # The store's reads (queries.Reads, inbox, task_threads) as the event loop calls them: each
    # does its own thread hop, so a caller holds this one object and never picks the hop itself.

    async def read(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn``, reads of the store that belong together (one hop for all), on a reader thread."""
        return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs), limiter=self._read_limiter)

    async def _hop(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await trio.to_thread.run_sync(fn, *args, limiter=self._read_limiter)

    async def get_event(self, event_id: str) -> dict[str, Any] | None:
        return await self._hop(self.store.get_event, event_id)

    async def resolve_seq(self, field_name: str, event_id: str) -> int:
        """Raises ``NotFound`` (naming ``field_name``) for an unknown id."""
        return await self._hop(self.store.resolve_seq, field_name, event_id)

    async def latest(self) -> tuple[int, str | None]:
        return await self._hop(self.store.latest)

    async def list_events(self, query: ListQuery, *, after_seq: int | None = None) -> list[dict[str, Any]]:
        return await self._hop(functools.partial(self.store.list_events, query, after_seq=after_seq))

    async def events_after_seq(self, after_seq: int, limit: int) -> list[dict[str, Any]]:
        return await self._hop(self.store.events_after_seq, after_seq, limit)

    async def person_answers(self, question_ids: Sequence[str], per_origin: int) -> list[dict[str, Any]]:
        return await self._hop(self.store.person_answers, question_ids, per_origin)

    async def events_of_types(self, types: Sequence[str], since_created_at: str, limit: int) -> list[dict[str, Any]]:
        return await self._hop(self.store.events_of_types, types, since_created_at, limit)

    async def events_by_correlation(self, correlation_id: str, limit: int = 10_000) -> list[dict[str, Any]]:
        return await self._hop(self.store.events_by_correlation, correlation_id, limit)

    async def correlations_present(self, correlation_ids: Sequence[str], types: Sequence[str] = (),
                                   origin: str | None = None) -> set[str]:
        return await self._hop(self.store.correlations_present, correlation_ids, types, origin)

    async def signed_events_of_origin(self, origin: str, after_origin_seq: int, limit: int) -> list[SignedEvent]:
        return await self._hop(self.store.signed_events_of_origin, origin, after_origin_seq, limit)

    async def signed_events_of_type(self, event_type: str) -> list[SignedEvent]:
        return await self._hop(self.store.signed_events_of_type, event_type)

    async def export_page(self, after_seq: int, limit: int, streams: Sequence[str] | None = None,
                          ) -> tuple[list[tuple[int, SignedEvent]], dict[str, bytes]]:
        return await self._hop(self.store.export_page, after_seq, limit, streams)

    async def count_events(self, after_seq: int = 0, streams: Sequence[str] | None = None) -> int:
        return await self._hop(self.store.count_events, after_seq, streams)

    async def counts(self) -> dict[str, int]:
        return await self._hop(self.store.counts)

    async def forks(self) -> list[dict[str, Any]]:
        return await self._hop(self.store.forks)

    async def get_artifact(self, id_or_sha256: str, *, with_content: bool = True) -> dict[str, Any]:
        """Raises ``NotFound``: no such artifact on this replica."""
        return await self._hop(functools.partial(self.store.get_artifact, id_or_sha256, with_content=with_content))

    async def own_origins(self) -> list[tuple[str, bytes | None]]:
        return await self._hop(self.store.own_origins)

    async def origins_of_key(self, public_key: bytes) -> dict[str, int]:
        return await self._hop(self.store.origins_of_key, public_key)

    async def bindings(self) -> list[tuple[str, bytes, bytes | None]]:
        return await self._hop(self.store.bindings)

    async def static_peers(self) -> list[str]:
        return await self._hop(self.store.static_peers)

    async def peer_addresses(self) -> list[tuple[str, str, str, str]]:
        return await self._hop(self.store.peer_addresses)

    async def invite(self, invite_id: str) -> tuple[bytes, str, int, str | None] | None:
        return await self._hop(self.store.invite, invite_id)

    async def pending_invites(self, now_unix: int) -> int:
        return await self._hop(self.store.pending_invites, now_unix)

    async def memory_read(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A memory_views query (``fn``, given the reader connection first) on a reader thread."""
        return await self._hop(functools.partial(self.store.memory_read, fn, *args, **kwargs))

    async def drawer(self, drawer_id: str) -> dict[str, Any] | None:
        return await self._hop(self.store.drawer, drawer_id)

    async def agent_activity(self) -> list[tuple[str, str, int, str, str]]:
        return await self._hop(self.store.agent_activity)

    async def events_written_as(self, agent: str, origins: Sequence[str], limit: int) -> list[dict[str, Any]]:
        return await self._hop(self.store.events_written_as, agent, origins, limit)

    async def inbox_page(self, agent: str, limit: int, preview: bool,
                         excluded: Iterable[str] = ()) -> tuple[inbox.Cursor, list[dict[str, Any]]]:
        """``inbox.inbox_page``: the agent's cursor and the first ``limit`` events after it."""
        return await self._hop(inbox.inbox_page, self.store, agent, limit, preview, excluded)

    async def unread_count(self, agent: str, after_seq: int, excluded: Iterable[str] = ()) -> int:
        """``inbox.unread_count``: the inbox events after ``after_seq`` (up to its cap)."""
        return await self._hop(inbox.unread_count, self.store, agent, after_seq, excluded)

    async def usage(self, by: str, since: str = "", now: str | None = None, *,
                    tasks: bool = True) -> store_usage.UsageFigures:
        """``store/usage.read_usage``: totals of the reports that count, the flagged count, the spending."""
        return await self._hop(functools.partial(store_usage.read_usage, self.store, by, since, now, tasks=tasks))

    async def tasks_to_derive(self, newest: int, unsettled: int) -> tuple[list[task_threads.TaskThread], bool]:
        """``task_threads.tasks_to_derive``: the tasks worth deriving, with their events."""
        return await self._hop(task_threads.tasks_to_derive, self.store, newest, unsettled)
