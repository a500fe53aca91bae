"""The write-ahead log's checkpoints: copying it back into the database file off the commit path,
the checkpoint that follows a redaction, and the writer's own truncation between batches.

Owns: how the WAL is copied back into the database file and truncated. No commit ever
checkpoints (SQLite's automatic checkpoint is off: it ran inside the commit that crossed its
threshold, two more fsyncs and a copy of the WAL, tens of milliseconds for one unlucky append).
Instead a commit only counts the WAL's pages (``Wal.pages``, from SQLite's WAL hook), and the
WAL keeper (store/wal_keeper.py) decides when: ``copy_back`` on a connection of its own,
concurrently with commits (SQLite's passive checkpoint takes no writer lock), and the truncations
on the writer connection between batches. A checkpoint that fails loses nothing: the WAL keeps
every committed page, and a later checkpoint copies them. ``Wal`` also remembers that a
redaction still owes the WAL its truncation (``purge_pending``: writes.py and apply.py set it).

The WAL file is kept written to its working size (``keep_written``, ``KEEP_BYTES``), so that a
commit only overwrites blocks the file already has: a commit that grows the file also makes the
filesystem journal its new size before the fdatasync returns (issue 27: measured here, a lone
append's commit took ~250 µs longer while the WAL grew, a third of its latency). SQLite reads
no further than the WAL's last valid frame, so the zeros past it are never read as frames.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Final

import apsw

from .errors import checkpoint_error

if TYPE_CHECKING:
    from .db import Db

__all__ = ["COPY_BACK_PAGES", "KEEP_BYTES", "Wal"]

_LOGGER: Final = logging.getLogger("palaced.store")

# Why 2,000 pages (8 MiB, a few hundred appends): once the WAL holds this many, a background copy
# starts. Small enough that the copy takes milliseconds and, once it has caught up with every
# reader, the next commit starts the WAL over from its beginning (the file stays this size);
# large enough that a page written again meanwhile is copied once, not at every commit.
COPY_BACK_PAGES: Final = 2_000
# Why 8 MiB: COPY_BACK_PAGES frames, the size the WAL reaches before a copy lets it start over (the
# file SQLite leaves behind is this big anyway once it has filled once).
KEEP_BYTES: Final = 8 << 20
_ZEROS: Final = bytes(1 << 20)
# Why 250 ms (not the usual 10 s busy timeout): the writer must not stall waiting for readers.
_TRUNCATE_BUSY_MS: Final = 250
_BUSY_MS: Final = 10_000
# macOS has no fdatasync (its fsync flushes the file's data alike).
_datasync: Final = getattr(os, "fdatasync", os.fsync)


class Wal:
    """The write-ahead log of ``db``: its size after the last commit, whether a redaction still
    owes it a truncation, and the three checkpoints (each on a thread: the keeper's)."""

    def __init__(self, db: Db) -> None:
        self.db = db
        #: pages in the WAL after the last commit (the writer's WAL hook counts them)
        self.pages = 0
        #: a redaction purged a body since the WAL was last truncated: old page images holding its
        #: bytes may remain there (``checkpoint_after_redaction`` clears it; writer thread sets it)
        self.purge_pending = False
        db.writer.set_wal_hook(self._note_pages)

    def __repr__(self) -> str:
        return f"<Wal {self.db.path} pages={self.pages} purge_pending={self.purge_pending}>"

    @property
    def path(self) -> str:
        return f"{self.db.path}-wal"

    def keep_written(self) -> None:
        """Extend the WAL file with zeros to ``KEEP_BYTES`` (see the module docstring), and sync
        them. Only where no commit can run meanwhile (a slot the writer gives): a commit growing
        the file at the same time would have its frames overwritten. A failure (a full
        disk) is harmless: the WAL then grows as it would have anyway."""
        try:
            fd = os.open(self.path, os.O_WRONLY)  # never created here: SQLite owns its existence
        except OSError:
            return
        try:
            size = was = os.fstat(fd).st_size
            if size >= KEEP_BYTES:
                return
            try:
                while size < KEEP_BYTES:
                    size += os.pwrite(fd, _ZEROS[:KEEP_BYTES - size], size)
                _datasync(fd)
            except OSError as exc:
                # A nearly full disk: the zeros must not take the last free space from the database.
                _LOGGER.debug("could not extend the WAL of %s to %d bytes: %s", self.db.path, KEEP_BYTES, exc)
                os.ftruncate(fd, was)
        except OSError as exc:
            _LOGGER.debug("could not extend the WAL of %s: %s", self.db.path, exc)
        finally:
            os.close(fd)

    def sync(self) -> None:
        """Put every commit so far on disk: those made with ``synchronous=NORMAL`` (a write with
        ``durable=False``) wrote their frames to the WAL without syncing it. SQLite syncs the WAL
        as a whole, in order, so one sync of the file covers them all; a checkpoint that copied
        frames back meanwhile synced the database file before it let the WAL start over.

        Raises:
            OSError: the file could not be opened or synced (nothing is known to be on disk).
        """
        fd = os.open(self.path, os.O_RDONLY)
        try:
            _datasync(fd)
        finally:
            os.close(fd)

    def _note_pages(self, conn: apsw.Connection, name: str, pages: int) -> int:
        """SQLite's WAL hook on the writer connection, after each commit: how many pages the WAL
        holds now. Installing a hook also turns SQLite's automatic checkpoint off (one replaces
        the other), which is the point."""
        self.pages = pages
        return apsw.SQLITE_OK

    def copy_back(self) -> bool:
        """A worker thread, while commits go on: copy what the WAL holds into the database file (a
        passive checkpoint, on the checkpointer connection: it waits for no lock and blocks no
        writer). True if it copied every page, so the next commit starts the WAL over; False if a
        reader still needs some, or another checkpoint was running (the next one copies them).

        Raises:
            DiskFullError, StoreError: the copy failed; the WAL still holds every page.
        """
        conn = self.db.checkpointer()
        try:
            in_wal, copied = conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
        except apsw.BusyError:
            return False
        except apsw.Error as exc:
            raise checkpoint_error(self.db.path, conn, exc) from exc
        return copied >= in_wal

    def checkpoint_after_redaction(self) -> bool:
        """Copy the WAL into the database file and truncate it, so no old page image holding
        redacted bytes survives in the WAL. Returns False (and stays pending, to be retried after
        the next batch) if a reader kept the checkpoint from completing.

        Raises:
            DiskFullError, StoreError: the checkpoint failed (it stays pending, as above).
        """
        conn = self.db.writer
        try:
            conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
        except apsw.BusyError:
            _LOGGER.warning("redaction checkpoint blocked by a reader; retrying after the next write")
            return False
        except apsw.Error as exc:
            raise checkpoint_error(self.db.path, conn, exc) from exc
        self.purge_pending = False
        self.keep_written()  # zeros over nothing: the redacted bytes went with the truncation
        return True

    def truncate(self) -> bool:
        """Writer thread, between batches: copy the WAL into the database file and truncate it (to
        ``KEEP_BYTES``: it is written to that size again).
        Waits at most 250 ms for readers (not the usual 10 s: the writer must not stall); False
        if a reader kept it from completing.

        Raises:
            DiskFullError, StoreError: the checkpoint failed. Nothing is lost (the WAL keeps every
                committed page and a later checkpoint copies them); the caller retries later.
        """
        conn = self.db.writer
        conn.set_busy_timeout(_TRUNCATE_BUSY_MS)
        try:
            conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
        except apsw.BusyError:
            return False
        except apsw.Error as exc:
            raise checkpoint_error(self.db.path, conn, exc) from exc
        finally:
            conn.set_busy_timeout(_BUSY_MS)
        self.keep_written()
        return True
