"""How the store fails: its exceptions, and database errors translated for the client and the log.

Owns: ``StoreError`` (the database failed; nothing of the batch was committed), ``DiskFullError``
(answered ``disk_full``: not a bug and not lasting), recognising a full disk behind an apsw or OS
error, and the one-line messages a failed batch, job or checkpoint is answered with. A rule a job
breaks (``ValidationError``, ``NotFound``, any ``ApiError``) is a deliberate answer and passes
through unchanged.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import Final

import apsw

from palace_proto.errors import ApiError, DiskFull

__all__ = ["NOTHING_WRITTEN", "DiskFullError", "StoreError", "TransactionLost", "checkpoint_error",
           "disk_full_error", "is_disk_full", "job_failure", "write_error"]

_LOGGER: Final = logging.getLogger("palaced.store")

NOTHING_WRITTEN: Final = "nothing was written; free some space and retry — palaced resumes by itself"
# Why these two: what the OS answers when a write finds no room (ENOSPC) or the user's quota spent (EDQUOT).
_NO_SPACE_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT})


class StoreError(Exception):
    """The database failed (disk full, I/O error, corruption); the batch was not committed."""


class DiskFullError(StoreError, DiskFull):
    """The disk holding the database is full. Answered to clients as ``disk_full`` (an ``ApiError``);
    not a bug and not lasting: reads go on, and the next write is tried as usual."""


class TransactionLost(Exception):
    """SQLite rolled the batch's whole transaction back (it does after some errors, e.g. SQLITE_FULL
    while spilling pages mid-statement) while job ``index`` ran: nothing of the batch exists."""

    def __init__(self, index: int, cause: Exception | None) -> None:
        super().__init__(str(cause) if cause else "the transaction was rolled back by SQLite")
        self.index = index
        self.cause = cause


def is_disk_full(exc: BaseException, conn: apsw.Connection | None = None) -> bool:
    """Whether ``exc`` says the disk is full: SQLITE_FULL, or an OS error (raised, or the one behind
    an SQLite I/O error, e.g. growing the -shm file) of no space left."""
    if isinstance(exc, apsw.FullError):
        return True
    if isinstance(exc, OSError):
        return exc.errno in _NO_SPACE_ERRNOS
    return isinstance(exc, apsw.IOError) and conn is not None and conn.system_errno in _NO_SPACE_ERRNOS


def disk_full_error(path: Path, what: str, exc: BaseException) -> DiskFullError:
    filename = getattr(exc, "filename", None)  # an OSError may name another file than the database
    where = filename if isinstance(filename, str) and filename else str(path)
    return DiskFullError(f"the disk holding {where} is full: {what}")


def write_error(path: Path, conn: apsw.Connection, exc: BaseException) -> StoreError:
    """What every job of a batch that could not be committed is told."""
    if is_disk_full(exc, conn):
        return disk_full_error(path, NOTHING_WRITTEN, exc)
    return StoreError(f"could not commit to {path}: {exc}")


def checkpoint_error(path: Path, conn: apsw.Connection, exc: BaseException) -> StoreError:
    if is_disk_full(exc, conn):
        return disk_full_error(path, "the WAL cannot be copied back into the database (nothing is lost); "
                                     "free some space — palaced retries by itself", exc)
    return StoreError(f"could not checkpoint the WAL of {path}: {exc}")


def job_failure(path: Path, conn: apsw.Connection, exc: Exception) -> ApiError:
    """The outcome of one job that raised (its savepoint already rolled back)."""
    if isinstance(exc, ApiError):  # ValidationError, NotFound, a refusal: a deliberate answer
        return exc
    if is_disk_full(exc, conn):
        return disk_full_error(path, NOTHING_WRITTEN, exc)
    if isinstance(exc, apsw.BusyError):
        # Another process holds the database's write lock (a backup tool, a manual checkpoint):
        # contention, not a bug; this job wrote nothing and may simply be tried again.
        _LOGGER.warning("a write waited too long for %s: another process holds its lock (%s)", path, exc)
        return ApiError(f"the database {path} is locked by another process; nothing was written, try again",
                        code="daemon_busy")
    # A bug in one job (or a constraint it broke) must not take the others, or the writer, down.
    _LOGGER.error("write job failed", exc_info=exc)
    return ApiError(f"internal error: {type(exc).__name__}: {exc}", code="internal")
