"""Trio adapter for the synchronous store: group-commit writer and a bounded pool of readers.

Owns: the only way trio code touches SQLite. Writes are queued to one writer task that drains
the queue into a batch and runs it in a worker thread as one transaction with one fsync (group
commit): while one batch commits, the next one gathers, so N concurrent clients share an fsync
and nobody is acknowledged before the commit returns. Reads run in worker threads under a
``CapacityLimiter`` with per-thread connections.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Final

import trio

from palace_proto.errors import ApiError

from .backup import wal_bytes
from .store import Store, StoreError, WriteContext

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

    def __init__(self, store: Store, on_committed: Callable[[list[dict[str, Any]]], None]) -> None:
        self.store = store
        self._on_committed = on_committed
        self._send, self._recv = trio.open_memory_channel[_Pending](MAX_BATCH * 4)
        self._read_limiter = trio.CapacityLimiter(READ_THREADS)
        self.batches = 0
        self.writes = 0
        self.checkpoints = 0
        #: when a WAL truncation was last refused by a reader that stayed in a transaction (None: not now)
        self.checkpoint_blocked_since: float | None = None
        self._last_checkpoint_try = 0.0

    def statistics(self) -> dict[str, Any]:
        return {"batches": self.batches, "writes": self.writes, "queued": self._recv.statistics().current_buffer_used,
                "wal_checkpoints": self.checkpoints,
                "wal_blocked_s": None if self.checkpoint_blocked_since is None
                else round(time.monotonic() - self.checkpoint_blocked_since, 1)}

    async def _checkpoint(self) -> None:
        """Truncate the WAL (in the writer's thread slot: never concurrent with a batch)."""
        self._last_checkpoint_try = time.monotonic()
        if await trio.to_thread.run_sync(self.store.truncate_wal):
            self.checkpoints += 1
            self.checkpoint_blocked_since = None
        elif self.checkpoint_blocked_since is None:
            self.checkpoint_blocked_since = time.monotonic()
            LOGGER.warning("WAL checkpoint blocked by a reader still inside a transaction; retrying")

    async def write(self, job: Callable[[WriteContext], Any]) -> Any:
        """Run ``job(ctx)`` in the next write batch; return its value once committed and fsynced.

        Raises:
            ValidationError, NotFound: raised by the job (nothing it did was written).
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
                    if wal_bytes(self.store.path) > IDLE_WAL_BYTES:
                        await self._checkpoint()
                    continue
                batch = [first]
                while len(batch) < MAX_BATCH:
                    try:
                        batch.append(self._recv.receive_nowait())
                    except trio.WouldBlock:
                        break
                await self._commit(batch)
                if (time.monotonic() - self._last_checkpoint_try > CHECKPOINT_RETRY_S
                        and wal_bytes(self.store.path) > BUSY_WAL_BYTES):
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
            if self.store.redactions_pending_checkpoint:
                # Before anyone is told "redacted": push the old page images out of the WAL.
                await trio.to_thread.run_sync(self.store.checkpoint_after_redaction)
        except StoreError as exc:
            LOGGER.error("write batch of %d failed: %s", len(batch), exc)
            for p in batch:
                p.fail(exc)
            return
        except BaseException:
            for p in batch:
                p.fail(ApiError("internal error in the writer; see the palaced log", code="internal"))
            raise
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

