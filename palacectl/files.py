"""Files palacectl writes: atomically, and private from their first byte unless told otherwise.

Owns: the one way palacectl puts a file in place — watch checkpoints, rules install, ``artifact
get --out``, service install, ``export --output`` and ``restore``; no other palacectl module
renames a temporary file over a target. The new content goes to a temporary file beside the
target, created with ``O_EXCL`` and mode 0600 (nobody else can open it, and a file left by
someone else is never reused) and given its final mode before any byte is written; it is
fsynced, renamed over the target, and the folder is fsynced so the rename itself survives a
power cut. A crash leaves the old file or the new one, never half of one; a failure
removes the temporary file and leaves the target as it was.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from palace_proto.paths import CONFIG_FILENAME

__all__ = ["ConfigUnreadable", "PendingFile", "fsync_directory", "new_file_mode", "read_config", "replacing",
           "write_atomically"]

# Why these: some filesystems (certain FUSE and network mounts) cannot fsync a directory and say
# so; the rename is then as durable as that filesystem makes it, and failing the write would
# gain nothing.
_DIRECTORY_FSYNC_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EBADF})


def fsync_directory(path: Path) -> None:
    """Make a rename (or a new file) in ``path`` durable: fsync the directory itself.

    Windows has no way to open a directory for fsync (NTFS journals renames), so there it does
    nothing.
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


@dataclass(slots=True)
class PendingFile:
    """The temporary file of ``replacing``: write to ``file``; ``path`` is its name (beside the
    target), for tools that must open it themselves (restore edits the copy with SQLite)."""

    file: BinaryIO
    path: Path


@contextlib.contextmanager
def replacing(target: Path, mode: int = 0o600, *, temporary_name: str | None = None) -> Iterator[PendingFile]:
    """Write a new ``target`` through a temporary file; it takes the target's name only if the
    block completes.

    Args:
        target: the file to create or replace (its folder must exist).
        mode: the file's permissions, set before the first byte is written.
        temporary_name: a fixed name for the temporary file, for callers that hold a lock on the
            folder (restore): a leftover from a crash is then removed rather than piling up.
            Without it the name is unique, so two writers of one target never meet.

    Raises:
        OSError: the folder cannot be written, or the disk is full (nothing is left behind).
    """
    folder = target.parent
    if temporary_name is not None:
        tmp = folder / temporary_name
        tmp.unlink(missing_ok=True)  # a crash's leftover: removed, never reused (it may have another mode)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    else:
        fd, name = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".partial")  # O_EXCL, 0600
        tmp = Path(name)
    try:
        if mode != 0o600:
            os.chmod(tmp, mode)  # before any content exists, so no moment with content and the wrong mode
        with os.fdopen(fd, "wb") as fh:
            fd = -1
            yield PendingFile(fh, tmp)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        if fd != -1:
            # (A Ctrl-C landing between fdopen and `fd = -1` leaves the file object owning fd: closing
            # it again must not replace the interrupt with EBADF.)
            with contextlib.suppress(OSError):
                os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(folder)


def write_atomically(target: Path, data: bytes, mode: int = 0o600, *, keep_mode: bool = False,
                     create_folder: bool = False) -> None:
    """Write ``data`` as ``target`` (see ``replacing``).

    Args:
        target: the file to create or replace.
        data: its whole new content.
        mode: the permissions of a new file (and of a replaced one, unless ``keep_mode``).
        keep_mode: a file already at ``target`` keeps its permissions (a file of the user's that
            palacectl rewrites: an agent's instruction file).
        create_folder: create the missing folders above ``target`` first, as ``mkdir -p`` does.

    Raises:
        OSError: as ``replacing``; nothing is left behind.
    """
    if create_folder:
        target.parent.mkdir(parents=True, exist_ok=True)
    if keep_mode:
        try:
            mode = stat.S_IMODE(target.stat().st_mode)
        except FileNotFoundError:
            pass
    with replacing(target, mode) as pending:
        pending.file.write(data)


def new_file_mode() -> int:
    """The mode a plain new file gets here (0666 less the umask): for files the user asked for
    that hold nothing palace must keep private (an artifact's bytes, an instruction file)."""
    # Why set-and-restore: there is no read-only umask call. palacectl is a single-threaded CLI,
    # so the brief window where the umask is 0 cannot affect another thread's file creation.
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


class ConfigUnreadable(ValueError):
    """``config.toml`` exists but cannot be read or parsed; the message names the file and why."""


def read_config(home: Path) -> dict[str, Any]:
    """The home's ``config.toml``, parsed ({} when there is none): what palacectl reads of it
    (runners, the worker's acceptance, ``[permissions]``, ``[budgets]``).

    Raises:
        ConfigUnreadable: it cannot be read, is not UTF-8, or is not TOML.
    """
    path = home / CONFIG_FILENAME
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigUnreadable(f"cannot read {path}: {exc}") from None
