"""Atomic writes in the daemon's home (palaced/files.py): private from creation, and the rename made
durable by an fsync of the folder (issue 11, finding 11)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import palaced.files
from palaced.files import write_atomically


def test_the_folder_is_fsynced_after_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the folder's fsync a power cut can undo the rename: api.json or a membership file
    would come back as the old one (or not at all) although the write returned."""
    target = tmp_path / "palace.json"
    target.write_bytes(b"old")
    order: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (order.append(
        "fsync folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (order.append("rename"), real_replace(a, b))[1])
    write_atomically(target, b"new", 0o600)
    assert order == ["fsync file", "rename", "fsync folder"]
    assert target.read_bytes() == b"new" and stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "api.json"
    target.write_bytes(b"old")

    def full(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError):
        write_atomically(target, b"new", 0o600)
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["api.json"]


def test_a_folder_fsync_the_filesystem_cannot_do_is_not_an_error(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Some mounts answer EINVAL to a directory fsync; the write still succeeds there."""
    real = os.fsync

    def picky(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(22, "Invalid argument")
        real(fd)

    monkeypatch.setattr(os, "fsync", picky)
    palaced.files.fsync_directory(tmp_path)
    write_atomically(tmp_path / "x", b"data", 0o600)
    assert (tmp_path / "x").read_bytes() == b"data"
