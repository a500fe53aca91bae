"""Trio adapter for the synchronous store: group-commit writer and a bounded pool of readers.

Owns: the only way trio code touches SQLite. Writes are queued to one writer task that drains
the queue into a batch and runs it in a worker thread as one transaction with one fsync (group
commit): while one batch commits, the next one gathers, so N concurrent clients share an fsync
and nobody is acknowledged before the commit returns. Reads run in worker threads under a
``CapacityLimiter`` with per-thread connections.

A failing write never stops the writer: a job that raises fails alone (store.write_batch), a batch
that cannot commit fails every job in it, and a full disk is answered ``disk_full`` (logged once
per episode, shown by ``status``) until a write succeeds again, with no restart. WAL checkpoints
that fail (full disk, I/O error) are logged once and retried later; the WAL keeps every committed
page meanwhile, so nothing acknowledged is lost.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from typing import Any, Final

import trio

from palace_proto.errors import ApiError

from .backup import wal_bytes
from .store import DiskFullError, Store, StoreError, WriteContext

__all__ = ["AsyncStore"]

LOGGER: Final = logging.getLogger("palaced.store")
# Why 512: bounds a batch's transaction time (a few ms) so a burst cannot delay the first writer
# of the next batch by more than one batch.
MAX_BATCH: Final = 512
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
# Why 30 s: a checkpoint that failed on a full disk or an I/O error rewrites database pages at each
# try; retrying at the pace of a blocked one (5 s) would only wear the disk until space returns.
CHECKPOINT_ERROR_RETRY_S: Final = 30.0
# Why 1 MiB: after a full disk, this much free space (seen while idle) ends the "disk full" state
# in ``status`` even if nobody writes; a write that still fails starts it again.
DISK_ROOM_BYTES: Final = 1 << 20


class _Pending:
    __slots__ = ("job", "done", "ok", "value")

    def __init__(self, job: Callable[[WriteContext], Any]) -> None:
        self.job = job
        self.done = trio.Event()
        self.ok = False
        self.value: Any = None

    def fail(self, error: BaseException) -> None:
        self.ok, self.value = False, error
        self.done.set()


class AsyncStore:
    """Async facade over ``Store``. Run ``serve_writer`` in a nursery before calling ``write``."""

    def __init__(self, store: Store, on_committed: Callable[[list[dict[str, Any]]], None],
                 on_purged: Callable[[list[str]], None] | None = None) -> None:
        self.store = store
        self._on_committed = on_committed
        #: told the ids of events whose bodies a committed batch purged (the bus scrubs its ring)
        self._on_purged = on_purged
        self._send, self._recv = trio.open_memory_channel[_Pending](MAX_BATCH * 4)
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
        #: since when writes fail because the disk is full, and what they are told (None: they do not)
        self.disk_full_since: float | None = None
        self.disk_full_message: str | None = None
        self.disk_full_failures = 0

    def statistics(self) -> dict[str, Any]:
        return {"batches": self.batches, "writes": self.writes, "queued": self._recv.statistics().current_buffer_used,
                "wal_checkpoints": self.checkpoints,
                "wal_blocked_s": None if self.checkpoint_blocked_since is None
                else round(time.monotonic() - self.checkpoint_blocked_since, 1),
                "checkpoint_error": self.checkpoint_error,
                "disk_full": None if self.disk_full_since is None else {
                    "message": self.disk_full_message, "path": str(self.store.path),
                    "since_s": round(time.monotonic() - self.disk_full_since, 1),
                    "failed_writes": self.disk_full_failures}}

    def _checkpoint_due(self, wal_limit: int, every_s: float) -> bool:
        now = time.monotonic()
        if self.checkpoint_error is not None and now - self._checkpoint_error_at < CHECKPOINT_ERROR_RETRY_S:
            return False
        return now - self._last_checkpoint_try > every_s and wal_bytes(self.store.path) > wal_limit

    async def _checkpoint(self) -> None:
        """Truncate the WAL (in the writer's thread slot: never concurrent with a batch). A failure
        is logged once, shown in ``status`` and retried later: it must never stop the writer."""
        self._last_checkpoint_try = time.monotonic()
        try:
            done = await trio.to_thread.run_sync(self.store.truncate_wal)
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
            if await trio.to_thread.run_sync(self.store.checkpoint_after_redaction):
                self.checkpoint_error = None
        except StoreError as exc:
            if self.checkpoint_error != str(exc):
                LOGGER.warning("redaction checkpoint failed: %s; retrying", exc)
            self.checkpoint_error, self._checkpoint_error_at = str(exc), time.monotonic()

    async def _idle(self) -> None:
        """Between writes: finish a pending redaction purge, checkpoint a WAL worth it, and notice
        that space has returned."""
        if self.store.redactions_pending_checkpoint:
            await self._purge_wal()
        if self.disk_full_since is not None:
            free = await trio.to_thread.run_sync(lambda: shutil.disk_usage(self.store.path.parent).free)
            if free >= DISK_ROOM_BYTES:
                self._disk_has_room(f"{free >> 20} MiB free")
        if self._checkpoint_due(IDLE_WAL_BYTES, 0.0):
            await self._checkpoint()

    async def write(self, job: Callable[[WriteContext], Any]) -> Any:
        """Run ``job(ctx)`` in the next write batch; return its value once committed and fsynced.

        Raises:
            ValidationError, NotFound, ApiError: raised by the job (nothing it did was written).
            DiskFullError: the disk is full (``disk_full``); nothing of this write was written.
            StoreError: the batch could not be committed.
        """
        pending = _Pending(job)
        try:
            try:
                self._send.send_nowait(pending)
            except trio.WouldBlock:
                await self._send.send(pending)
        except trio.ClosedResourceError:
            raise ApiError("palaced is shutting down and accepts no new writes", code="shutting_down") from None
        # Not cancellable once queued: the batch commits regardless, and the reply must reflect it.
        with trio.CancelScope(shield=True):
            await pending.done.wait()
        if pending.ok:
            return pending.value
        raise pending.value

    async def read(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs), limiter=self._read_limiter)

    async def serve_writer(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Commit queued writes in batches until ``close_writes`` is called and the queue is empty.

        Every queued write is answered, whatever happens: if the writer itself fails, the writes
        it holds or that are still queued get an error instead of a reply that never comes.
        """
        task_status.started()
        try:
            while True:
                with trio.move_on_after(IDLE_CHECKPOINT_S) as idle:
                    try:
                        first = await self._recv.receive()
                    except trio.EndOfChannel:
                        break
                if idle.cancelled_caught:
                    await self._idle()
                    continue
                batch = [first]
                while len(batch) < MAX_BATCH:
                    try:
                        batch.append(self._recv.receive_nowait())
                    except trio.WouldBlock:
                        break
                await self._commit(batch)
                if self._checkpoint_due(BUSY_WAL_BYTES, CHECKPOINT_RETRY_S):
                    await self._checkpoint()
        finally:
            self._send.close()
            while True:
                try:
                    self._recv.receive_nowait().fail(ApiError("palaced is shutting down", code="shutting_down"))
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            LOGGER.debug("writer stopped")

    async def _commit(self, batch: list[_Pending]) -> None:
        jobs = [p.job for p in batch]
        try:
            # Never abandoned on cancel: a started batch always finishes (clean shutdown).
            result = await trio.to_thread.run_sync(self.store.write_batch, jobs)
        except DiskFullError as exc:
            # Nothing of the batch was written; every job is told so, and the next batch tries again.
            self._note_disk_full(exc, len(batch))
            for p in batch:
                p.fail(exc)
            return
        except StoreError as exc:
            LOGGER.error("write batch of %d failed: %s", len(batch), exc)
            for p in batch:
                p.fail(exc)
            return
        except BaseException:
            for p in batch:
                p.fail(ApiError("internal error in the writer; see the palaced log", code="internal"))
            raise
        if result.purged and self._on_purged is not None:
            self._on_purged(result.purged)  # before anyone is answered: no ring replays a purged body
        if self.store.redactions_pending_checkpoint:
            # Before anyone is told "redacted": push the old page images out of the WAL.
            await self._purge_wal()
        full = [value for ok, value in result.outcomes if not ok and isinstance(value, DiskFullError)]
        if full:
            self._note_disk_full(full[0], len(full))
        elif any(ok for ok, _ in result.outcomes):
            self._disk_has_room("a write succeeded")
        self.batches += 1
        self.writes += len(batch)
        for p, (ok, value) in zip(batch, result.outcomes, strict=True):
            p.ok, p.value = ok, value
            p.done.set()
        if result.events:
            self._on_committed(result.events)

    def close_writes(self) -> None:
        """Refuse new writes (shutdown); queued ones still commit."""
        self._send.close()

