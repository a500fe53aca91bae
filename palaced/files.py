"""Small files the daemon writes in its home (membership files, api.json): atomically, with a mode.

Owns: the one way such a file is written — a temporary file in the same folder created with its
final mode (no moment where another user could read it), fsynced, then renamed over the target
(no half-written file a reader could trip over, before or after a crash), and the folder fsynced
so the rename itself survives a power cut. ``fsync_directory`` is that last step on its own, for
the other writers of the home (identity.key, backups).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

__all__ = ["fsync_directory", "write_atomically"]

# Why these: some filesystems (certain FUSE and network mounts) cannot fsync a directory and say
# so; the rename is then as durable as that filesystem makes it, and failing the write would
# gain nothing.
_DIRECTORY_FSYNC_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EBADF})


def fsync_directory(path: Path) -> None:
    """Make a rename (or a new name) in ``path`` durable: fsync the directory itself.

    Windows cannot open a directory for fsync (NTFS journals renames), so there it does nothing.
    """
    if os.name == "nt":
        return
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _DIRECTORY_FSYNC_UNSUPPORTED:
            raise
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` with ``mode``: temporary file, fsync, rename, fsync the folder."""
    tmp = path.with_name(f".{path.name}.tmp")
    # A leftover from a crash is removed, not reused: an existing file would keep its old mode.
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)
