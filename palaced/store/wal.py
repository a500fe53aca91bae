"""The write-ahead log's upkeep on the writer connection: SQLite's automatic checkpoint interval,
the checkpoint that follows a redaction, and the writer's own truncation between batches.

Owns: when the WAL is copied back into the database file and truncated. Writer thread only
(store/aio.py decides when; these do it). A checkpoint that fails loses nothing: the WAL keeps
every committed page, and a later checkpoint copies them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

import apsw

from .errors import checkpoint_error

if TYPE_CHECKING:
    from .store import Store

__all__ = ["AUTO_CHECKPOINT_PAGES", "checkpoint_after_redaction", "truncate_wal"]

_LOGGER: Final = logging.getLogger("palaced.store")

# SQLite checkpoints inside the commit that takes the WAL past this many pages: two more fsyncs
# and a copy of every page changed since the last one. Why 10,000 (40 MiB, about 1,200 appends)
# rather than SQLite's 1,000: a tenth as many such commits (one append in a thousand, not one in a
# hundred, outside an append's p99), and a page written again meanwhile is copied once, not ten
# times. The writer's own truncation (store/aio.py) still keeps the file from growing beyond it.
AUTO_CHECKPOINT_PAGES: Final = 10_000
# Why 250 ms (not the usual 10 s busy timeout): the writer must not stall waiting for readers.
_TRUNCATE_BUSY_MS: Final = 250
_BUSY_MS: Final = 10_000


def checkpoint_after_redaction(store: Store) -> bool:
    """Copy the WAL into the database file and truncate it, so no old page image holding
    redacted bytes survives in the WAL. Returns False (and stays pending, to be retried after
    the next batch) if a reader kept the checkpoint from completing.

    Raises:
        DiskFullError, StoreError: the checkpoint failed (it stays pending, as above).
    """
    try:
        store._conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
    except apsw.BusyError:
        _LOGGER.warning("redaction checkpoint blocked by a reader; retrying after the next write")
        return False
    except apsw.Error as exc:
        raise checkpoint_error(store.path, store._conn, exc) from exc
    store.redactions_pending_checkpoint = False
    return True


def truncate_wal(store: Store) -> bool:
    """Writer thread, between batches: copy the WAL into the database file and truncate it.
    Waits at most 250 ms for readers (not the usual 10 s: the writer must not stall); False
    if a reader kept it from completing.

    Raises:
        DiskFullError, StoreError: the checkpoint failed. Nothing is lost (the WAL keeps every
            committed page and a later checkpoint copies them); the caller retries later.
    """
    conn = store._conn
    conn.set_busy_timeout(_TRUNCATE_BUSY_MS)
    try:
        conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
    except apsw.BusyError:
        return False
    except apsw.Error as exc:
        raise checkpoint_error(store.path, conn, exc) from exc
    finally:
        conn.set_busy_timeout(_BUSY_MS)
    return True
