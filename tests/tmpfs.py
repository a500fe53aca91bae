"""A real full disk for tests: a small tmpfs the test mounts, fills, grows and unmounts.

Mounting needs root (CI runs as root) and util-linux's mount; without them the tests that need a
full disk skip with the reason. ``small_tmpfs`` mounts one under a short /tmp folder (a daemon's
home and its Unix socket may live there) and unmounts it afterwards, whatever happened; ``Tmpfs.fill`` takes
every free byte, ``Tmpfs.resize`` gives space back (``mount -o remount,size=…``, contents kept).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def why_no_tmpfs() -> str | None:
    if os.geteuid() != 0:
        return "a real full disk is a small tmpfs the test mounts, which needs root (CI runs as root)"
    missing = [tool for tool in ("mount", "umount") if shutil.which(tool) is None]
    if missing:
        return f"a real full disk is a small tmpfs the test mounts; {' and '.join(missing)} not installed (util-linux)"
    return None


WHY_NOT = why_no_tmpfs()
needs_tmpfs = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


class Tmpfs:
    def __init__(self, path: Path) -> None:
        self.path = path

    def resize(self, size: str) -> None:
        """Grow (or shrink) the file system; its files stay."""
        subprocess.run(["mount", "-o", f"remount,size={size}", str(self.path)], check=True, capture_output=True)

    def free_bytes(self) -> int:
        return shutil.disk_usage(self.path).free

    def fill(self, name: str = "filler") -> Path:
        """A file taking every free byte (written until ENOSPC); delete it to give the space back."""
        filler = self.path / name
        chunk = b"\0" * (64 << 10)
        with open(filler, "ab", buffering=0) as fh:
            while True:
                try:
                    fh.write(chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    if len(chunk) == 1:
                        return filler
                    chunk = chunk[: len(chunk) // 2]


@contextlib.contextmanager
def small_tmpfs(size: str) -> Iterator[Tmpfs]:
    """A tmpfs of ``size`` (e.g. ``"8m"``) mounted on ``/tmp/pfull…/fs``: short enough for a Unix
    socket inside, and with room beside it (``…/fs.log``, say) for what must not fill it."""
    base = Path(tempfile.mkdtemp(prefix="pfull", dir="/tmp"))
    path = base / "fs"
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"cannot mount a tmpfs here (a real full disk needs one): {done.stderr.strip()}")
    try:
        yield Tmpfs(path)
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)  # still busy: detach it
        if not os.path.ismount(path):
            shutil.rmtree(base, ignore_errors=True)
