"""Trio adapter for the synchronous store: group-commit writes and a bounded pool of readers.

Owns: the only way trio code touches SQLite. Writes are group-committed: the first write to
arrive while no commit runs becomes the batch's *leader*; it lets every task that is runnable at
that moment queue its write too (one scheduler pass), then commits the whole queue as one
transaction with one fsync and answers every write of it; writes that arrive meanwhile wait for
the next batch. Once the leader's own write is committed it hands the lead to the task of the
next write still queued, so no caller waits on writes that came after its own. Nobody is
acknowledged before the commit returns. A short batch (the usual
appends) commits in the event loop itself: no thread hop on the way in or out, which is most of a
lone append's latency; while it commits, new requests gather in their sockets and form the next
batch. Heavy writes (imports, memory rebuilds, big artifacts, catch-up batches from peers) and
WAL checkpoints run on a worker thread, so the loop keeps serving meanwhile; so does every batch
for a while once commits keep taking longer than ``SLOW_COMMIT_S`` (a slow disk; one slow commit,
a hiccup of a virtual disk, is not one). The WAL is copied back into the database file in the
background while commits go on (``_copy_back``), never inside a commit. Reads run in worker
threads under a ``CapacityLimiter`` with per-thread connections.

A failing write never stops the writer: a job that raises fails alone (store.write_batch), a batch
that cannot commit fails every job in it, and a full disk is answered ``disk_full`` (logged once
per episode, shown by ``status``) until a write succeeds again, with no restart. WAL checkpoints
that fail (full disk, I/O error) are logged once and retried later; the WAL keeps every committed
page meanwhile, so nothing acknowledged is lost.
"""

from __future__ import annotations

import collections
import functools
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import trio

from palace_proto.envelope import CommittedEvent, SignedEvent
from palace_proto.errors import ApiError
from palace_proto.validation import ListQuery

from . import inbox, task_threads
from .backup import wal_bytes
from .store import DiskFullError, Store, StoreError, WriteBatchResult, WriteContext
from .wal import COPY_BACK_PAGES

__all__ = ["HEAVY_ARTIFACT_BYTES", "AsyncStore"]

LOGGER: Final = logging.getLogger("palaced.store")
# Why 2048: how many writes may wait for a commit before ``write`` itself waits (backpressure on
# every client at once, instead of an unbounded queue).
MAX_QUEUED: Final = 2048
# Why 512: bounds a batch's transaction time (a few ms) so a burst cannot delay the first writer
# of the next batch by more than one batch.
MAX_BATCH: Final = 512
# Why 1 MiB: writing a bigger blob takes milliseconds; such writes commit on a thread (``heavy``).
HEAVY_ARTIFACT_BYTES: Final = 1 << 20
# Why 20 ms: a commit on a healthy disk takes about half a millisecond (an SSD's fsync, even a
# virtual disk's; a busy moment may take a few); one that takes 20 ms is a slow disk (an SD card, a
# spinning disk under load), and would hold the event loop (every connection, every peer) for as
# long each time, so batches go to a thread...
SLOW_COMMIT_S: Final = 0.02
# ...once this many commits within SLOW_WINDOW_S were that slow. Why 3 in 2 s: a virtual disk
# stalls a single fsync now and then (seen here: 20-40 ms, every few seconds under load), which
# says nothing about the next one, and a lone slow commit used to send every batch to a thread
# for seconds (a thread hop per batch: a lone append's latency doubled). A disk that is slow
# takes three slow commits in well under a second...
SLOW_COMMITS: Final = 3
SLOW_WINDOW_S: Final = 2.0
# ...for this long (then the loop tries again: the disk may have been busy).
SLOW_DISK_BACKOFF_S: Final = 10.0
# Why 4: reads are short index lookups; more threads than cores only add contention on 2 cores.
READ_THREADS: Final = 4
# The WAL is the daemon's to keep small. SQLite's own automatic checkpoints copy it back into the
# database but never shrink the file, and a reader that stays inside a transaction stops them
# from wrapping around, so the file can only grow (p2p-lessons, "WAL pinning"). The writer
# therefore truncates it itself: when idle this long and the WAL holds more than IDLE_WAL_BYTES,
# and after a commit that leaves more than BUSY_WAL_BYTES (at most every CHECKPOINT_RETRY_S
# while a reader keeps blocking it).
IDLE_CHECKPOINT_S: Final = 5.0
IDLE_WAL_BYTES: Final = 1 << 20
BUSY_WAL_BYTES: Final = 64 << 20
CHECKPOINT_RETRY_S: Final = 5.0
# Why 0.5 s: how often a busy writer looks at the WAL's size (64 MiB take seconds to fill).
WAL_CHECK_S: Final = 0.5
# Why 30 s: a checkpoint that failed on a full disk or an I/O error rewrites database pages at each
# try; retrying at the pace of a blocked one (5 s) would only wear the disk until space returns.
CHECKPOINT_ERROR_RETRY_S: Final = 30.0
# Why 1 MiB: after a full disk, this much free space (seen while idle) ends the "disk full" state
# in ``status`` even if nobody writes; a write that still fails starts it again.
DISK_ROOM_BYTES: Final = 1 << 20


class _Pending:
    """One queued write: its job, and (once its batch is committed) its outcome — or, while still
    queued, the lead handed to its task (``lead``)."""

    __slots__ = ("job", "done", "ok", "value", "heavy", "lead")

    def __init__(self, job: Callable[[WriteContext], Any], heavy: bool) -> None:
        self.job = job
        self.heavy = heavy
        self.done = trio.Event()
        self.ok = False
        self.value: Any = None
        self.lead = False


class AsyncStore:
    """Async facade over ``Store``. Run ``serve_writer`` in a nursery (idle maintenance, and the
    drain at shutdown) before calling ``write``."""

    def __init__(self, store: Store, on_committed: Callable[[list[CommittedEvent]], None],
                 on_purged: Callable[[list[str]], None] | None = None) -> None:
        self.store = store
        self._on_committed = on_committed
        #: told the ids of events whose bodies a committed batch purged (the bus scrubs its ring)
        self._on_purged = on_purged
        self._queue: collections.deque[_Pending] = collections.deque()
        self._room = trio.Semaphore(MAX_QUEUED)
        #: whether a task leads: commits what is queued (or runs maintenance, then commits); one at a time
        self._leading = False
        self._not_leading = trio.Event()
        self._closed = False
        #: until when batches commit on a thread because the disk was slow (monotonic seconds)
        self._slow_until = 0.0
        #: when the last few slow commits ended (monotonic seconds)
        self._slow_commits: collections.deque[float] = collections.deque(maxlen=SLOW_COMMITS)
        #: set when the WAL has grown enough to be copied back (``_copy_back`` waits for it)
        self._copy_wanted = trio.Event()
        #: a copy is under way: its bulk on a thread, or its tail still due (``_copy_tail_due``)
        self._copying = False
        self._copy_tail_due = False
        self.wal_copies = 0
        self._last_write = time.monotonic()
        self._read_limiter = trio.CapacityLimiter(READ_THREADS)
        self.batches = 0
        self.writes = 0
        self.checkpoints = 0
        #: when a WAL truncation was last refused by a reader that stayed in a transaction (None: not now)
        self.checkpoint_blocked_since: float | None = None
        self._last_checkpoint_try = 0.0
        #: why the last WAL checkpoint failed (full disk, I/O error), until one succeeds (None: fine)
        self.checkpoint_error: str | None = None
        self._checkpoint_error_at = 0.0
        self._wal_checked_at = 0.0
        #: since when writes fail because the disk is full, and what they are told (None: they do not)
        self.disk_full_since: float | None = None
        self.disk_full_message: str | None = None
        self.disk_full_failures = 0

    def __repr__(self) -> str:
        return f"<AsyncStore {self.store.path} batches={self.batches} writes={self.writes} closed={self._closed}>"

    def statistics(self) -> dict[str, Any]:
        return {"batches": self.batches, "writes": self.writes, "queued": len(self._queue),
                "wal_checkpoints": self.checkpoints, "wal_copies": self.wal_copies,
                "wal_blocked_s": None if self.checkpoint_blocked_since is None
                else round(time.monotonic() - self.checkpoint_blocked_since, 1),
                "checkpoint_error": self.checkpoint_error,
                "slow_disk": time.monotonic() < self._slow_until,
                "disk_full": None if self.disk_full_since is None else {
                    "message": self.disk_full_message, "path": str(self.store.path),
                    "since_s": round(time.monotonic() - self.disk_full_since, 1),
                    "failed_writes": self.disk_full_failures}}

    # -- writing -------------------------------------------------------------------------------

    async def write(self, job: Callable[[WriteContext], Any], *, heavy: bool = False) -> Any:
        """Run ``job(ctx)`` in the next write batch; return its value once committed and fsynced.

        ``heavy``: the job may take long (many rows, big blobs): it is committed on a worker
        thread, in a batch of its own, so the event loop keeps serving meanwhile.

        Raises:
            ValidationError, NotFound, ApiError: raised by the job (nothing it did was written).
            DiskFullError: the disk is full (``disk_full``); nothing of this write was written.
            StoreError: the batch could not be committed.
        """
        if self._closed:
            raise ApiError("palaced is shutting down and accepts no new writes", code="shutting_down")
        try:
            self._room.acquire_nowait()  # the usual case: no scheduler pass on the way in
        except trio.WouldBlock:
            await self._room.acquire()
            if self._closed:  # shutdown began while this write waited for room
                self._room.release()
                raise ApiError("palaced is shutting down and accepts no new writes", code="shutting_down") from None
        pending = _Pending(job, heavy)
        self._queue.append(pending)
        # Not cancellable once queued: the batch commits regardless, and the reply must reflect it.
        with trio.CancelScope(shield=True):
            if not self._leading:
                await self._lead(pending)
            else:
                await pending.done.wait()  # committed, or handed the lead while still queued
                if pending.lead:
                    pending.lead = False
                    await self._lead(pending, handed=True)
        if pending.ok:
            return pending.value
        raise pending.value

    async def _lead(self, mine: _Pending | None = None, *, first: Callable[[], Any] | None = None,
                    handed: bool = False) -> None:
        """Lead: run ``first`` (maintenance, awaited), then commit what is queued, batch after
        batch, until ``mine`` is committed; then hand the lead to the task of the next write still
        queued (a leader that drained the queue for everyone would keep its own caller waiting for
        as long as others keep writing: a peer's catch-up held an append for seconds), or stop
        leading when the queue is empty. Only when nobody leads (the caller checks), or when the
        lead was ``handed`` to ``mine``'s task."""
        if not handed:
            assert not self._leading
            self._leading = True
            self._not_leading = trio.Event()
        handed_on = False
        try:
            if first is not None:
                await first()
            # One scheduler pass: every task runnable now (requests read in this loop iteration)
            # queues its write before the batch is taken.
            await trio.lowlevel.cancel_shielded_checkpoint()
            while self._queue:
                await self._commit(self._take_batch())
                if self._copy_tail_due:
                    await self._copy_tail()
                if self._checkpoint_due(BUSY_WAL_BYTES, CHECKPOINT_RETRY_S):
                    await self._checkpoint()
                if self._queue and (mine is None or mine.done.is_set()):
                    self._hand_lead(self._queue[0])
                    handed_on = True
                    return
        finally:
            if not handed_on:
                self._leading = False
                self._not_leading.set()
                # Only after a failure (a bug): nobody else would ever answer what is still queued.
                self._fail_queued(ApiError("internal error in the writer; see the palaced log", code="internal"))

    @staticmethod
    def _hand_lead(successor: _Pending) -> None:
        """Wake the task of a write still queued as the next leader (its ``done`` starts anew)."""
        successor.lead = True
        woken, successor.done = successor.done, trio.Event()
        woken.set()

    async def _maintain(self, work: Callable[[], Any]) -> None:
        """Run maintenance between batches: as the leader, once the current one has finished."""
        while self._leading:
            await self._not_leading.wait()
        await self._lead(first=work)

    def _fail_queued(self, error: ApiError) -> None:
        while self._queue:
            pending = self._queue.popleft()
            pending.ok, pending.value = False, error
            pending.done.set()
            self._room.release()

    def _take_batch(self) -> list[_Pending]:
        """The next batch: a heavy write alone, else the light writes at the front (up to MAX_BATCH)."""
        first = self._queue.popleft()
        batch = [first]
        if first.heavy:
            return batch
        while self._queue and len(batch) < MAX_BATCH and not self._queue[0].heavy:
            batch.append(self._queue.popleft())
        return batch

    async def _commit(self, batch: list[_Pending]) -> None:
        jobs = [p.job for p in batch]
        on_thread = batch[0].heavy or time.monotonic() < self._slow_until
        try:
            if on_thread:
                # Never abandoned on cancel: a started batch always finishes (clean shutdown).
                result = await trio.to_thread.run_sync(self.store.write_batch, jobs)
            else:
                started = time.perf_counter()
                result = self.store.write_batch(jobs)
                took = time.perf_counter() - started
                if took > SLOW_COMMIT_S:
                    self._note_slow_commit(took)
        except DiskFullError as exc:
            # Nothing of the batch was written; every job is told so, and the next batch tries again.
            self._note_disk_full(exc, len(batch))
            self._answer(batch, [(False, exc)] * len(batch))
            return
        except StoreError as exc:
            LOGGER.error("write batch of %d failed: %s", len(batch), exc)
            self._answer(batch, [(False, exc)] * len(batch))
            return
        except BaseException:
            error = ApiError("internal error in the writer; see the palaced log", code="internal")
            self._answer(batch, [(False, error)] * len(batch))
            raise
        await self._committed(batch, result)

    def _note_slow_commit(self, took: float) -> None:
        now = time.monotonic()
        self._slow_commits.append(now)
        if len(self._slow_commits) < SLOW_COMMITS or now - self._slow_commits[0] > SLOW_WINDOW_S:
            return
        self._slow_commits.clear()
        if now >= self._slow_until:
            LOGGER.info("%d commits within %.0f s took over %.0f ms, the last %.0f ms (a slow or busy disk): "
                        "writes commit on a thread for %.0f s", SLOW_COMMITS, SLOW_WINDOW_S, SLOW_COMMIT_S * 1000,
                        took * 1000, SLOW_DISK_BACKOFF_S)
        self._slow_until = now + SLOW_DISK_BACKOFF_S

    async def _committed(self, batch: list[_Pending], result: WriteBatchResult) -> None:
        if result.purged and self._on_purged is not None:
            self._on_purged(result.purged)  # before anyone is answered: no ring replays a purged body
        if self.store.wal.purge_pending:
            # Before anyone is told "redacted": push the old page images out of the WAL.
            await self._purge_wal()
        full = [value for ok, value in result.outcomes if not ok and isinstance(value, DiskFullError)]
        if full:
            self._note_disk_full(full[0], len(full))
        elif self.disk_full_since is not None and any(ok for ok, _ in result.outcomes):
            self._disk_has_room("a write succeeded")
        self.batches += 1
        self.writes += len(batch)
        self._last_write = time.monotonic()
        self._answer(batch, result.outcomes)
        if result.events:
            self._on_committed(result.events)
        if self.store.wal.pages >= COPY_BACK_PAGES and not self._copying:
            self._copy_wanted.set()

    def _answer(self, batch: list[_Pending], outcomes: list[tuple[bool, Any]]) -> None:
        for p, (ok, value) in zip(batch, outcomes, strict=True):
            p.ok, p.value = ok, value
            p.done.set()
            self._room.release()

    async def checkpoint(self) -> None:
        """Try to truncate the WAL now, between two batches (as the writer does by itself when
        the WAL grows); the outcome shows in ``statistics``."""
        await self._maintain(self._checkpoint)

    async def serve_writer(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Idle maintenance (a pending redaction purge, WAL truncation, noticing that a full disk
        has room again) until ``close_writes``; then wait until every queued write is answered.

        If cancelled (shutdown ran out of grace), the batch being committed finishes and the
        writes still queued get ``shutting_down``.
        """
        task_status.started()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._copy_back)
                while not self._closed:
                    await trio.sleep(IDLE_CHECKPOINT_S / 5)
                    if not self._leading and time.monotonic() - self._last_write >= IDLE_CHECKPOINT_S:
                        await self._maintain(self._idle)
                while self._leading:  # the last leader answers what it took
                    await self._not_leading.wait()
                nursery.cancel_scope.cancel()  # a copy under way finishes first (its thread is waited for)
        finally:
            self._closed = True
            self._fail_queued(ApiError("palaced is shutting down", code="shutting_down"))
            LOGGER.debug("writer stopped")

    def close_writes(self) -> None:
        """Refuse new writes (shutdown); queued ones still commit, then ``serve_writer`` returns."""
        self._closed = True

    # -- maintenance (under the writer lock) -----------------------------------------------------

    async def _copy_back(self) -> None:
        """Whenever a commit left COPY_BACK_PAGES in the WAL: copy them back into the database
        file on a worker thread, while batches go on committing in the loop (no writer lock).
        What the batches committed meanwhile is copied by the leader between two batches
        (``_copy_tail``): only then has every page been copied with no commit in between, which
        is what lets the next commit start the WAL over instead of growing it."""
        while True:
            await self._copy_wanted.wait()
            self._copy_wanted = trio.Event()
            self._copying = True
            if await self._run_copy():
                self._copy_tail_due = True
            else:
                self._copying = False

    async def _copy_tail(self) -> None:
        """The leader, between two batches: copy what the WAL gained during the bulk copy."""
        self._copy_tail_due = False
        try:
            if await self._run_copy():
                self.wal_copies += 1
        finally:
            self._copying = False

    async def _run_copy(self) -> bool:
        try:
            await trio.to_thread.run_sync(self.store.wal.copy_back)
        except StoreError as exc:
            # Nothing is lost (the WAL keeps every page); the next big WAL tries again, and the
            # writer's own truncation (``_checkpoint``) reports a lasting failure in ``status``.
            LOGGER.warning("copying the WAL back into the database failed: %s", exc)
            return False
        return True

    def _checkpoint_due(self, wal_limit: int, every_s: float) -> bool:
        now = time.monotonic()
        if self._copying:  # a copy is under way (it would only make this one wait): later
            return False
        if self.checkpoint_error is not None and now - self._checkpoint_error_at < CHECKPOINT_ERROR_RETRY_S:
            return False
        if now - self._last_checkpoint_try <= every_s or now - self._wal_checked_at < WAL_CHECK_S:
            return False
        self._wal_checked_at = now  # a stat per batch would cost every append; the WAL grows slowly
        return wal_bytes(self.store.path) > wal_limit

    async def _checkpoint(self) -> None:
        """Truncate the WAL (on a thread, under the writer lock: never concurrent with a batch).
        A failure is logged once, shown in ``status`` and retried later: it must never stop the
        writer."""
        self._last_checkpoint_try = time.monotonic()
        try:
            done = await trio.to_thread.run_sync(self.store.wal.truncate)
        except StoreError as exc:
            if self.checkpoint_error != str(exc):
                LOGGER.warning("WAL checkpoint failed (retried every %.0f s): %s", CHECKPOINT_ERROR_RETRY_S, exc)
            self.checkpoint_error, self._checkpoint_error_at = str(exc), time.monotonic()
            return
        if self.checkpoint_error is not None:
            LOGGER.info("WAL checkpoint succeeded again")
            self.checkpoint_error = None
        if done:
            self.checkpoints += 1
            self.checkpoint_blocked_since = None
        elif self.checkpoint_blocked_since is None:
            self.checkpoint_blocked_since = time.monotonic()
            LOGGER.warning("WAL checkpoint blocked by a reader still inside a transaction; retrying")

    def _note_disk_full(self, exc: DiskFullError, writes: int) -> None:
        self.disk_full_failures += writes
        if self.disk_full_since is None:
            # Once per episode, not per write: a client retrying in a loop must not flood the log.
            LOGGER.warning("%s (writes fail until then; reads go on)", exc)
            self.disk_full_since = time.monotonic()
        self.disk_full_message = str(exc)

    def _disk_has_room(self, why: str) -> None:
        if self.disk_full_since is not None:
            LOGGER.info("the disk holding %s has room again (%s); writes go on", self.store.path, why)
            self.disk_full_since = self.disk_full_message = None
            self.disk_full_failures = 0
            self._checkpoint_error_at = 0.0  # a checkpoint that failed for want of space: retry it now

    async def _purge_wal(self) -> None:
        """Checkpoint and truncate the WAL after a redaction, so no old page image holding the
        redacted bytes survives there. The batch is committed whatever happens here: a reader that
        blocks it (or a failure) leaves the purge pending — redact replies and ``status`` say so —
        retried after the next batch and whenever the writer is idle; it never turns committed
        writes into errors."""
        try:
            if await trio.to_thread.run_sync(self.store.wal.checkpoint_after_redaction):
                self.checkpoint_error = None
        except StoreError as exc:
            if self.checkpoint_error != str(exc):
                LOGGER.warning("redaction checkpoint failed: %s; retrying", exc)
            self.checkpoint_error, self._checkpoint_error_at = str(exc), time.monotonic()

    async def _idle(self) -> None:
        """Between writes: finish a pending redaction purge, checkpoint a WAL worth it, and notice
        that space has returned."""
        if self.store.wal.purge_pending:
            await self._purge_wal()
        if self._copy_tail_due:
            await self._copy_tail()
        if self.disk_full_since is not None:
            free = await trio.to_thread.run_sync(lambda: shutil.disk_usage(self.store.path.parent).free)
            if free >= DISK_ROOM_BYTES:
                self._disk_has_room(f"{free >> 20} MiB free")
        if self._checkpoint_due(IDLE_WAL_BYTES, 0.0):
            await self._checkpoint()

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

    async def inbox_page(self, agent: str, limit: int, preview: bool) -> tuple[inbox.Cursor, list[dict[str, Any]]]:
        """``inbox.inbox_page``: the agent's cursor and the first ``limit`` events after it."""
        return await self._hop(inbox.inbox_page, self.store, agent, limit, preview)

    async def unread_count(self, agent: str, after_seq: int) -> int:
        """``inbox.unread_count``: the inbox events after ``after_seq`` (up to its cap)."""
        return await self._hop(inbox.unread_count, self.store, agent, after_seq)

    async def tasks_to_derive(self, newest: int, unsettled: int) -> tuple[list[task_threads.TaskThread], bool]:
        """``task_threads.tasks_to_derive``: the tasks worth deriving, with their events."""
        return await self._hop(task_threads.tasks_to_derive, self.store, newest, unsettled)
