"""The WAL keeper: keeps the write-ahead log small, and knows when the disk is full.

Owns: when the WAL is copied back and truncated (the checkpoints themselves are wal.py's), and
the "disk full" state ``status`` shows. SQLite's own automatic checkpoints copy the WAL back into
the database but never shrink the file, and a reader that stays inside a transaction stops them
from wrapping around, so the file can only grow (p2p-lessons, "WAL pinning"); no commit
checkpoints either (wal.py). So the keeper does it all, around the group-commit writer
(writer.py), whose ``Upkeep`` it is:

- once a commit leaves ``COPY_BACK_PAGES`` in the WAL, the WAL is copied back into the database
  file on a worker thread while batches go on committing (``_copy_back``: no writer lock); what
  the batches committed meanwhile is copied in the slot between two batches (``_copy_tail``):
  only then has every page been copied with no commit in between, which lets the next commit
  start the WAL over instead of growing it;
- the WAL file is written to its working size (``wal.KEEP_BYTES``) in the first slot the writer
  gives, and again after each truncation, so commits overwrite the file instead of growing it
  (wal.py says why);
- the WAL is truncated in the slot between two batches once it holds more than
  ``BUSY_WAL_BYTES`` (at most every ``CHECKPOINT_RETRY_S`` while a reader keeps blocking it), and
  in a maintenance slot of its own when the writer has been idle for ``IDLE_CHECKPOINT_S`` and it
  has grown past its working size (a reader that pinned it, a burst faster than the copies);
  otherwise that idle slot copies back what the WAL holds, without truncating it;
- after a batch that redacted a body, before anyone is answered, the WAL is truncated so no old
  page image holding the redacted bytes survives there (``purge``: pending until it succeeds);
- a full disk (a write failed for want of space) is logged once per episode and shown by
  ``status`` until a write succeeds again or, while idle, ``DISK_ROOM_BYTES`` are free.

Checkpoints run on a worker thread; the truncations only in a slot the writer gives (never
concurrently with a batch). Checkpoints that fail (full disk, I/O error) are logged once and
retried later; the WAL keeps every committed page meanwhile, so nothing acknowledged is lost.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import trio

from .backup import wal_bytes
from .store import DiskFullError, Store, StoreError
from .wal import COPY_BACK_PAGES, KEEP_BYTES

if TYPE_CHECKING:
    from .writer import Writer

__all__ = ["WalKeeper"]

LOGGER: Final = logging.getLogger("palaced.store")
# The keeper truncates the WAL when the writer is idle this long and it has grown past its working
# size (IDLE_WAL_BYTES), and after a commit that leaves more than BUSY_WAL_BYTES (at most every
# CHECKPOINT_RETRY_S while a reader keeps blocking it).
IDLE_CHECKPOINT_S: Final = 5.0
# Why a MiB over: SQLite's own writes can take the file a few frames past KEEP_BYTES before a copy.
IDLE_WAL_BYTES: Final = KEEP_BYTES + (1 << 20)
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


class WalKeeper:
    """Keeps the WAL of ``store`` small (see the module docstring). Run ``serve`` with the writer."""

    def __init__(self, store: Store) -> None:
        self.path = store.path
        self.wal = store.wal
        #: set when the WAL has grown enough to be copied back (``_copy_back`` waits for it)
        self._copy_wanted = trio.Event()
        #: a copy is under way: its bulk on a thread, or its tail still due (``_copy_tail_due``)
        self._copying = False
        self._copy_tail_due = False
        #: a truncation is due in the slot after this batch (``between_batches_due`` found it so)
        self._busy_checkpoint_due = False
        self.wal_copies = 0
        self.checkpoints = 0
        #: when a WAL truncation was last refused by a reader that stayed in a transaction (None: not now)
        self.checkpoint_blocked_since: float | None = None
        self._last_checkpoint_try = 0.0
        #: why the last WAL checkpoint failed (full disk, I/O error), until one succeeds (None: fine)
        self.checkpoint_error: str | None = None
        self._checkpoint_error_at = 0.0
        self._wal_checked_at = 0.0
        #: a commit wrote to the WAL since it was last copied back whole (the idle copy's due)
        self._uncopied = False
        #: since when writes fail because the disk is full, and what they are told (None: they do not)
        self.disk_full_since: float | None = None
        self.disk_full_message: str | None = None
        self.disk_full_failures = 0

    def __repr__(self) -> str:
        return (f"<WalKeeper {self.path} checkpoints={self.checkpoints} copies={self.wal_copies} "
                f"disk_full={self.disk_full_since is not None}>")

    def statistics(self) -> dict[str, Any]:
        """The WAL's figures and the disk-full state, as ``status`` shows them."""
        return {"wal_checkpoints": self.checkpoints, "wal_copies": self.wal_copies,
                "wal_blocked_s": None if self.checkpoint_blocked_since is None
                else round(time.monotonic() - self.checkpoint_blocked_since, 1),
                "checkpoint_error": self.checkpoint_error}

    def disk_full(self) -> dict[str, Any] | None:
        if self.disk_full_since is None:
            return None
        return {"message": self.disk_full_message, "path": str(self.path),
                "since_s": round(time.monotonic() - self.disk_full_since, 1),
                "failed_writes": self.disk_full_failures}

    async def serve(self, writer: Writer) -> None:
        """Idle upkeep (a pending redaction purge, WAL truncation, noticing that a full disk has
        room again) and background copies, until ``writer`` is closed and has answered what it
        took (a copy under way finishes first: its thread is waited for)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._copy_back)
            await writer.maintain(lambda: trio.to_thread.run_sync(self.wal.keep_written))
            while not writer.closed:
                await trio.sleep(IDLE_CHECKPOINT_S / 5)
                if not writer.leading and time.monotonic() - writer.last_write >= IDLE_CHECKPOINT_S:
                    await writer.maintain(self._idle)
            await writer.drained()  # the last leader answers what it took
            nursery.cancel_scope.cancel()

    async def checkpoint(self) -> None:
        """Truncate the WAL (on a thread; only in a slot the writer gives: never concurrent with a
        batch). A failure is logged once, shown in ``status`` and retried later: it must never
        stop the writer."""
        done = await self._run_checkpoint(self.wal.truncate)
        if done is None:
            return
        if done:
            self.checkpoints += 1
            self.checkpoint_blocked_since = None
        elif self.checkpoint_blocked_since is None:
            self.checkpoint_blocked_since = time.monotonic()
            LOGGER.warning("WAL checkpoint blocked by a reader still inside a transaction; retrying")

    async def _idle_copy(self) -> None:
        """Copy what the WAL holds back into the database file while the writer is idle, without
        truncating it (the file stays written to its working size; the next commit starts it
        over). A failure is reported as a checkpoint's is."""
        await self._run_checkpoint(self.wal.copy_back)

    async def _run_checkpoint(self, checkpoint: Callable[[], bool]) -> bool | None:
        """Run ``checkpoint`` on a thread: whether it copied every page (then the WAL holds nothing
        uncopied), or None when it failed (logged once, shown in ``status``, retried later)."""
        self._last_checkpoint_try = time.monotonic()
        try:
            done = await trio.to_thread.run_sync(checkpoint)
        except StoreError as exc:
            if self.checkpoint_error != str(exc):
                LOGGER.warning("WAL checkpoint failed (retried every %.0f s): %s", CHECKPOINT_ERROR_RETRY_S, exc)
            self.checkpoint_error, self._checkpoint_error_at = str(exc), time.monotonic()
            return None
        if self.checkpoint_error is not None:
            LOGGER.info("WAL checkpoint succeeded again")
            self.checkpoint_error = None
        if done:
            self._uncopied = False
        return done

    # -- the writer's Upkeep (writer.py) ----------------------------------------------------------

    async def purge(self) -> None:
        """Checkpoint and truncate the WAL after a redaction, so no old page image holding the
        redacted bytes survives there. The batch is committed whatever happens here: a reader that
        blocks it (or a failure) leaves the purge pending — redact replies and ``status`` say so —
        retried after the next batch and whenever the writer is idle; it never turns committed
        writes into errors."""
        try:
            if await trio.to_thread.run_sync(self.wal.checkpoint_after_redaction):
                self.checkpoint_error = None
        except StoreError as exc:
            if self.checkpoint_error != str(exc):
                LOGGER.warning("redaction checkpoint failed: %s; retrying", exc)
            self.checkpoint_error, self._checkpoint_error_at = str(exc), time.monotonic()

    def committed(self, outcomes: list[tuple[bool, Any]], *, derived: bool = False) -> None:
        full = [value for ok, value in outcomes if not ok and isinstance(value, DiskFullError)]
        if full:
            self.batch_failed(full[0], len(full))
        elif self.disk_full_since is not None and not derived and any(ok for ok, _ in outcomes):
            # A client's write or a peer's events prove room; a background chunk of derived data (a
            # few rows of the text index) fits in pages a full disk still has, while appends fail.
            self._disk_has_room("a write succeeded")
        if any(ok for ok, _ in outcomes):
            self._uncopied = True
        if self.wal.pages >= COPY_BACK_PAGES and not self._copying:
            self._copy_wanted.set()

    def batch_failed(self, error: DiskFullError, writes: int) -> None:
        self.disk_full_failures += writes
        if self.disk_full_since is None:
            # Once per episode, not per write: a client retrying in a loop must not flood the log.
            LOGGER.warning("%s (writes fail until then; reads go on)", error)
            self.disk_full_since = time.monotonic()
        self.disk_full_message = str(error)

    def between_batches_due(self) -> bool:
        if self._copy_tail_due:
            return True
        self._busy_checkpoint_due = self._checkpoint_due(BUSY_WAL_BYTES, CHECKPOINT_RETRY_S)
        return self._busy_checkpoint_due

    async def between_batches(self) -> None:
        """The tail of a copy, then a truncation of a WAL grown past ``BUSY_WAL_BYTES``."""
        if self._copy_tail_due:
            await self._copy_tail()
            self._busy_checkpoint_due = self._checkpoint_due(BUSY_WAL_BYTES, CHECKPOINT_RETRY_S)
        if self._busy_checkpoint_due:
            self._busy_checkpoint_due = False
            await self.checkpoint()

    # -- copies and checks -------------------------------------------------------------------------

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
            await trio.to_thread.run_sync(self.wal.copy_back)
        except StoreError as exc:
            # Nothing is lost (the WAL keeps every page); the next big WAL tries again, and the
            # keeper's own truncation (``checkpoint``) reports a lasting failure in ``status``.
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
        return wal_bytes(self.path) > wal_limit

    def _disk_has_room(self, why: str) -> None:
        if self.disk_full_since is not None:
            LOGGER.info("the disk holding %s has room again (%s); writes go on", self.path, why)
            self.disk_full_since = self.disk_full_message = None
            self.disk_full_failures = 0
            self._checkpoint_error_at = 0.0  # a checkpoint that failed for want of space: retry it now

    async def _idle(self) -> None:
        """Between writes: finish a pending redaction purge, truncate a WAL grown past its working
        size or else copy back what it holds, and notice that space has returned."""
        if self.wal.purge_pending:
            await self.purge()
        if self._copy_tail_due:
            await self._copy_tail()
        if self.disk_full_since is not None:
            free = await trio.to_thread.run_sync(lambda: shutil.disk_usage(self.path.parent).free)
            if free >= DISK_ROOM_BYTES:
                self._disk_has_room(f"{free >> 20} MiB free")
        if self._checkpoint_due(IDLE_WAL_BYTES, 0.0):
            await self.checkpoint()
        elif self._uncopied and not self._copying and (
                self.checkpoint_error is None
                or time.monotonic() - self._checkpoint_error_at >= CHECKPOINT_ERROR_RETRY_S):
            await self._idle_copy()
