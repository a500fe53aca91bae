"""Trio adapter for the synchronous store: group-commit writer and a bounded pool of readers.

Owns: the only way trio code touches SQLite. Writes are queued to one long-lived writer thread
that drains the queue into a batch and runs it as one transaction with one fsync (group commit):
while one batch commits, the next one gathers, so N concurrent clients share an fsync and nobody
is acknowledged before the commit returns. The thread hands a whole committed batch back to trio
with one call (``run_sync_soon``), which answers every write of it and publishes its events: a
write costs one hop into the thread and one back, whatever the batch size. Reads run in worker
threads under a ``CapacityLimiter`` with per-thread connections.

A failing write never stops the writer: a job that raises fails alone (store.write_batch), a batch
that cannot commit fails every job in it, and a full disk is answered ``disk_full`` (logged once
per episode, shown by ``status``) until a write succeeds again, with no restart. WAL checkpoints
that fail (full disk, I/O error) are logged once and retried later; the WAL keeps every committed
page meanwhile, so nothing acknowledged is lost.
"""

from __future__ import annotations

import logging
import queue
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import trio

from palace_proto.errors import ApiError

from .backup import wal_bytes
from .store import DiskFullError, Store, StoreError, WriteContext

__all__ = ["AsyncStore"]

LOGGER: Final = logging.getLogger("palaced.store")
# Why 2048: how many writes may wait for the writer before ``write`` itself waits (backpressure
# on every client at once, instead of an unbounded queue).
MAX_QUEUED: Final = 2048
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
    """One queued write: its job, and (once its batch is committed) its outcome."""

    __slots__ = ("job", "done", "ok", "value")

    def __init__(self, job: Callable[[WriteContext], Any]) -> None:
        self.job = job
        self.done = trio.Event()
        self.ok = False
        self.value: Any = None


class _Maintenance:
    """Work for the writer thread between batches (a checkpoint asked for by trio code)."""

    __slots__ = ("fn", "done")

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        self.done = trio.Event()


#: Put on the writer's queue to stop it once everything queued before it is committed.
_STOP: Final = object()


class AsyncStore:
    """Async facade over ``Store``. Run ``serve_writer`` in a nursery before calling ``write``.

    Threads: ``write``, ``read``, ``statistics`` and ``close_writes`` are called from trio; the
    store's write connection, the checkpoints and the disk-full bookkeeping belong to the writer
    thread (the counters it updates are plain attributes, read by ``statistics``).
    """

    def __init__(self, store: Store, on_committed: Callable[[list[dict[str, Any]]], None],
                 on_purged: Callable[[list[str]], None] | None = None) -> None:
        self.store = store
        self._on_committed = on_committed
        #: told the ids of events whose bodies a committed batch purged (the bus scrubs its ring)
        self._on_purged = on_purged
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._room = trio.Semaphore(MAX_QUEUED)
        self._closed = False
        #: set (by the trio side) when queued writes must be failed instead of committed: shutdown cancelled the writer
        self._abandon = False
        self._token: trio.lowlevel.TrioToken | None = None
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

    def __repr__(self) -> str:
        return f"<AsyncStore {self.store.path} batches={self.batches} writes={self.writes} closed={self._closed}>"

    def statistics(self) -> dict[str, Any]:
        return {"batches": self.batches, "writes": self.writes, "queued": self._queue.qsize(),
                "wal_checkpoints": self.checkpoints,
                "wal_blocked_s": None if self.checkpoint_blocked_since is None
                else round(time.monotonic() - self.checkpoint_blocked_since, 1),
                "checkpoint_error": self.checkpoint_error,
                "disk_full": None if self.disk_full_since is None else {
                    "message": self.disk_full_message, "path": str(self.store.path),
                    "since_s": round(time.monotonic() - self.disk_full_since, 1),
                    "failed_writes": self.disk_full_failures}}

    # -- the trio side -------------------------------------------------------------------------

    async def write(self, job: Callable[[WriteContext], Any]) -> Any:
        """Run ``job(ctx)`` in the next write batch; return its value once committed and fsynced.

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
            if self._closed:
                self._room.release()
                raise ApiError("palaced is shutting down and accepts no new writes", code="shutting_down") from None
        pending = _Pending(job)
        self._queue.put(pending)
        # Not cancellable once queued: the batch commits regardless, and the reply must reflect it.
        with trio.CancelScope(shield=True):
            await pending.done.wait()
        if pending.ok:
            return pending.value
        raise pending.value

    async def checkpoint(self) -> None:
        """Try to truncate the WAL now, in the writer thread between two batches (as the writer
        does by itself when the WAL grows); the outcome shows in ``statistics``."""
        if self._closed:
            raise ApiError("palaced is shutting down", code="shutting_down")
        item = _Maintenance(self._checkpoint)
        self._queue.put(item)
        with trio.CancelScope(shield=True):
            await item.done.wait()

    def _complete(self, batch: list[_Pending], outcomes: list[tuple[bool, Any]],
                  events: list[dict[str, Any]], purged: list[str]) -> None:
        """In trio, once per batch: answer its writes, then publish its events."""
        if purged and self._on_purged is not None:
            self._on_purged(purged)  # before anyone is answered: no ring replays a purged body
        for p, (ok, value) in zip(batch, outcomes, strict=True):
            p.ok, p.value = ok, value
            p.done.set()
            self._room.release()
        if events:
            self._on_committed(events)

    async def serve_writer(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the writer thread until ``close_writes`` is called and the queue is empty.

        Every queued write is answered, whatever happens: if this task is cancelled (shutdown ran
        out of grace) the batch being committed finishes and the writes still queued get
        ``shutting_down``; if the thread itself fails, every write it holds or that is still
        queued gets an error, and the failure is raised here.
        """
        self._token = trio.lowlevel.current_trio_token()
        finished = trio.Event()
        failure: list[BaseException] = []

        def thread_main() -> None:
            try:
                self._writer_loop()
            except BaseException as exc:  # raised in trio by serve_writer, below
                failure.append(exc)
            finally:
                self._run_in_trio(finished.set)

        thread = threading.Thread(target=thread_main, name=f"palaced-writer {self.store.path.name}", daemon=True)
        thread.start()
        task_status.started()
        try:
            await finished.wait()
        except trio.Cancelled:
            self._abandon = self._closed = True
            self._queue.put(_STOP)
            with trio.CancelScope(shield=True):
                await finished.wait()  # a started batch always finishes (clean shutdown)
            raise
        finally:
            self._closed = True
            thread.join()
            self._fail_queued()
            LOGGER.debug("writer stopped")
        if failure:
            raise failure[0]

    def close_writes(self) -> None:
        """Refuse new writes (shutdown); queued ones still commit, then the writer stops."""
        if not self._closed:
            self._closed = True
            self._queue.put(_STOP)

    def _fail_queued(self) -> None:
        """Answer whatever is still queued (in trio, once the thread has stopped)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Maintenance):
                item.done.set()
            elif item is not _STOP:
                item.ok, item.value = False, ApiError("palaced is shutting down", code="shutting_down")
                item.done.set()
                self._room.release()

    def _run_in_trio(self, fn: Callable[..., None], *args: Any) -> None:
        assert self._token is not None
        try:
            self._token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:  # pragma: no cover - the run ended under us; nobody is waiting
            pass

    # -- the writer thread ---------------------------------------------------------------------

    def _writer_loop(self) -> None:
        """Commit queued writes in batches (and run queued maintenance between them) until
        ``_STOP`` comes off the queue."""
        while True:
            try:
                item = self._queue.get(timeout=IDLE_CHECKPOINT_S)
            except queue.Empty:
                self._idle()
                continue
            batch: list[_Pending] = []
            while True:
                if item is _STOP:
                    self._commit(batch)
                    return
                if isinstance(item, _Maintenance):
                    self._commit(batch)  # what was queued before it goes first
                    batch = []
                    self._maintain(item)
                else:
                    batch.append(item)
                if len(batch) >= MAX_BATCH:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            self._commit(batch)
            if self._checkpoint_due(BUSY_WAL_BYTES, CHECKPOINT_RETRY_S):
                self._checkpoint()

    def _maintain(self, item: _Maintenance) -> None:
        try:
            item.fn()
        finally:
            self._run_in_trio(item.done.set)

    def _commit(self, batch: list[_Pending]) -> None:
        if not batch:
            return
        if self._abandon:
            # Shutdown ran out of grace: these are answered "shutting down" by ``_fail_queued``.
            for p in batch:
                self._queue.put(p)
            return
        jobs = [p.job for p in batch]
        try:
            result = self.store.write_batch(jobs)
        except DiskFullError as exc:
            # Nothing of the batch was written; every job is told so, and the next batch tries again.
            self._note_disk_full(exc, len(batch))
            self._run_in_trio(self._complete, batch, [(False, exc)] * len(batch), [], [])
            return
        except StoreError as exc:
            LOGGER.error("write batch of %d failed: %s", len(batch), exc)
            self._run_in_trio(self._complete, batch, [(False, exc)] * len(batch), [], [])
            return
        except BaseException:
            error = ApiError("internal error in the writer; see the palaced log", code="internal")
            self._run_in_trio(self._complete, batch, [(False, error)] * len(batch), [], [])
            raise
        if self.store.redactions_pending_checkpoint:
            # Before anyone is told "redacted": push the old page images out of the WAL.
            self._purge_wal()
        full = [value for ok, value in result.outcomes if not ok and isinstance(value, DiskFullError)]
        if full:
            self._note_disk_full(full[0], len(full))
        elif self.disk_full_since is not None and any(ok for ok, _ in result.outcomes):
            self._disk_has_room("a write succeeded")
        self.batches += 1
        self.writes += len(batch)
        self._run_in_trio(self._complete, batch, result.outcomes, result.events, result.purged)

    def _checkpoint_due(self, wal_limit: int, every_s: float) -> bool:
        now = time.monotonic()
        if self.checkpoint_error is not None and now - self._checkpoint_error_at < CHECKPOINT_ERROR_RETRY_S:
            return False
        return now - self._last_checkpoint_try > every_s and wal_bytes(self.store.path) > wal_limit

    def _checkpoint(self) -> None:
        """Truncate the WAL (in the writer thread: never concurrent with a batch). A failure is
        logged once, shown in ``status`` and retried later: it must never stop the writer."""
        self._last_checkpoint_try = time.monotonic()
        try:
            done = self.store.truncate_wal()
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

    def _purge_wal(self) -> None:
        """Checkpoint and truncate the WAL after a redaction, so no old page image holding the
        redacted bytes survives there. The batch is committed whatever happens here: a reader that
        blocks it (or a failure) leaves the purge pending — redact replies and ``status`` say so —
        retried after the next batch and whenever the writer is idle; it never turns committed
        writes into errors."""
        try:
            if self.store.checkpoint_after_redaction():
                self.checkpoint_error = None
        except StoreError as exc:
            if self.checkpoint_error != str(exc):
                LOGGER.warning("redaction checkpoint failed: %s; retrying", exc)
            self.checkpoint_error, self._checkpoint_error_at = str(exc), time.monotonic()

    def _idle(self) -> None:
        """Between writes: finish a pending redaction purge, checkpoint a WAL worth it, and notice
        that space has returned."""
        if self.store.redactions_pending_checkpoint:
            self._purge_wal()
        if self.disk_full_since is not None:
            free = shutil.disk_usage(self.store.path.parent).free
            if free >= DISK_ROOM_BYTES:
                self._disk_has_room(f"{free >> 20} MiB free")
        if self._checkpoint_due(IDLE_WAL_BYTES, 0.0):
            self._checkpoint()

    async def read(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs), limiter=self._read_limiter)
