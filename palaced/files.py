"""Small files the daemon writes in its home (membership files, api.json): atomically, with a mode.

Owns: the one way such a file is written — a temporary file in the same folder created with its
final mode (no moment where another user could read it), fsynced, then renamed over the target
(no half-written file a reader could trip over, before or after a crash).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["write_atomically"]


def write_atomically(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` with ``mode``: temporary file, fsync, rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    # A leftover from a crash is removed, not reused: an existing file would keep its old mode.
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
