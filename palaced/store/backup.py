"""The database as files: a consistent backup of a live store, and the size of its WAL.

Owns: writing a self-contained copy of the database while the daemon keeps writing. SQLite's
online backup copies every page from one read snapshot (in WAL mode a reader never blocks the
writer, and the writer never disturbs the snapshot), into a file beside the target — created
0600, so the copy of the log is never readable by others — that takes the target's name only
once complete and fsynced (then the folder is fsynced): a crash or a full disk never leaves half
a backup under the name the user asked for. Synchronous apsw, like the rest of the store.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import apsw

from .fetch import one_row

__all__ = ["backup_database", "wal_bytes"]


def wal_bytes(db_path: Path) -> int:
    """Size of the database's write-ahead log (0 if there is none)."""
    try:
        return (db_path.parent / f"{db_path.name}-wal").stat().st_size
    except FileNotFoundError:
        return 0


def _fsync_path(path: Path, *, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def backup_database(db_path: Path, target: Path) -> dict[str, Any]:
    """Copy the database at ``db_path`` to ``target`` (replacing it); returns what was copied."""
    started = time.monotonic()
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)  # a crash's leftover: removed, never reused (it may have another mode)
    # Read-write flags but query_only, like the store's readers: a WAL reader writes read marks
    # into the -shm file, so a read-only open could fail while the daemon runs.
    source = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READWRITE)
    try:
        source.set_busy_timeout(10_000)
        source.execute("PRAGMA query_only=ON")
        # Created here, empty and 0600, before SQLite opens it: the whole log is never readable by
        # others, not even for the moment between a default-mode create and a chmod. SQLite takes
        # an empty file as a new database, and gives its journal the database file's mode.
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        copy = apsw.Connection(str(partial))
        try:
            with copy.backup("main", source, "main") as backup:
                # All pages in one step: one snapshot. Stepping in parts would restart the copy each
                # time the daemon's writer commits, which on a busy palace could be forever.
                backup.step(-1)
            # A self-contained file: rollback journal, not WAL (no -wal file to carry along).
            copy.execute("PRAGMA journal_mode=DELETE")
            (events,) = one_row(copy.execute("SELECT count(*) FROM events"))
            origin = copy.execute("SELECT value FROM meta WHERE key='origin'").fetchone()
        finally:
            copy.close()
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        source.close()
    try:
        _fsync_path(partial)
        digest = hashlib.sha256()
        with open(partial, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    _fsync_path(target.parent, directory=True)  # the rename itself survives a power cut
    return {"path": str(target), "bytes": target.stat().st_size, "sha256": digest.hexdigest(), "events": events,
            "origin": origin[0] if origin else None, "seconds": round(time.monotonic() - started, 3)}
