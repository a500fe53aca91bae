"""palacectl's file writes against a real daemon (issue 11, finding 11): export, ``artifact get
--out`` and restore go through palacectl.files — content fsynced, renamed, the folder fsynced —
and the restored database's temporary copy is 0600 from its creation, never chmod-ed later.

In-process (``palacectl.cli.main``) so the test can watch the system calls; the daemon is a real
palaced on a real socket."""

from __future__ import annotations

import os
import shutil
import stat

import pytest

from palacectl.cli import main
from tests.fleet import append, ctl_json
from tests.helpers import run_ctl


def _trace(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    order: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        order.append("fsync folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(src: object, dst: object) -> None:
        order.append("rename")
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return order


def test_export_and_artifact_get_fsync_the_folder_after_the_rename(daemon, tmp_path, monkeypatch, capsys):
    append(daemon.home, "exported")
    stored = run_ctl(daemon.home, "artifact", "put", "--kind", "file", "--created-by", "t", "--json",
                     input=b"artifact bytes\n")
    assert stored.returncode == 0, stored
    order = _trace(monkeypatch)
    assert main(["--home", str(daemon.home), "export", "--output", str(tmp_path / "log.ndjson")]) == 0
    assert order[-3:] == ["fsync file", "rename", "fsync folder"]
    order.clear()
    out = tmp_path / "bytes.bin"
    assert main(["--home", str(daemon.home), "artifact", "get", stored.json()["id"], "--out", str(out)]) == 0
    assert order[-3:] == ["fsync file", "rename", "fsync folder"] and out.read_bytes() == b"artifact bytes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bytes.bin", "log.ndjson"]


def test_restore_writes_a_private_copy_from_its_creation(daemon, tmp_path, monkeypatch, capsys):
    """The copy restore edits (the whole log) used to be created with the default mode and
    chmod-ed after the copy; and the folder was fsynced, which must stay so."""
    append(daemon.home, "before the backup")
    backup = tmp_path / "palace.bak"
    ctl_json(daemon.home, "backup", str(backup))
    assert daemon.stop() == 0
    modes: list[int] = []

    def watch(name):
        real = getattr(shutil, name)

        def copying(*args, **kwargs):
            result = real(*args, **kwargs)
            modes.extend(stat.S_IMODE(p.stat().st_mode) for p in daemon.home.iterdir() if p.name.endswith(".restoring"))
            return result
        monkeypatch.setattr(shutil, name, copying)

    watch("copyfile")
    watch("copyfileobj")
    order = _trace(monkeypatch)
    old_umask = os.umask(0o022)
    try:
        assert main(["--home", str(daemon.home), "restore", str(backup), "--force"]) == 0
    finally:
        os.umask(old_umask)
    assert modes and set(modes) == {0o600}
    assert order[-2:] == ["rename", "fsync folder"]
    database = daemon.home / "palace.sqlite3"
    assert stat.S_IMODE(database.stat().st_mode) == 0o600
    assert not [p.name for p in daemon.home.iterdir() if p.name.endswith(".restoring")]
    daemon.start()
    assert ctl_json(daemon.home, "status")["events"] >= 1
