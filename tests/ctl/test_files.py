"""palacectl's one atomic writer (palacectl/files.py), used by watch checkpoints, rules install,
artifact get, service install, export and restore (issue 11, finding 11): the temporary file has
its mode before its first byte, the target changes only when the content is complete, and the
folder is fsynced after the rename. Since issue 13 it also creates missing folders and keeps an
existing file's mode, which callers did in copies of their own."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from palacectl.files import new_file_mode, replacing, write_atomically


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


@pytest.mark.parametrize("mode", [0o600, 0o644, 0o640])
def test_the_temporary_file_has_its_mode_before_the_first_byte(tmp_path: Path, mode: int) -> None:
    """Never a moment where content sits in a file with another mode (the old export wrote the
    whole log into a default-mode file and chmod-ed it at the end)."""
    target = tmp_path / "log.ndjson"
    with replacing(target, mode) as pending:
        assert stat.S_IMODE(os.fstat(pending.file.fileno()).st_mode) == mode
        assert pending.path.parent == tmp_path and pending.path.name.startswith(".log.ndjson.")
        pending.file.write(b"line\n")
        assert not target.exists()
    assert target.read_bytes() == b"line\n" and stat.S_IMODE(target.stat().st_mode) == mode


def test_rename_then_folder_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The folder is fsynced after the rename, or a power cut can bring back the old file."""
    order = _trace(monkeypatch)
    write_atomically(tmp_path / "state.json", b"{}\n")
    assert order == ["fsync file", "rename", "fsync folder"]


@pytest.mark.parametrize("failure", ["in the block", "at the rename"])
def test_a_failure_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              failure: str) -> None:
    target = tmp_path / "CLAUDE.md"
    target.write_bytes(b"old")
    if failure == "at the rename":
        def full(src: object, dst: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError), replacing(target) as pending:
        pending.file.write(b"new, half")
        if failure == "in the block":
            raise OSError(28, "No space left on device")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["CLAUDE.md"]


def test_a_fixed_temporary_name_removes_a_crash_leftover(tmp_path: Path) -> None:
    """Restore (which holds the home's lock) uses a fixed name: a leftover from a crash, whatever
    its mode, is removed and a fresh 0600 file created, never reused."""
    leftover = tmp_path / ".palace.sqlite3.restoring"
    leftover.write_bytes(b"half a database")
    leftover.chmod(0o644)
    with replacing(tmp_path / "palace.sqlite3", temporary_name=leftover.name) as pending:
        assert pending.path == leftover and stat.S_IMODE(os.fstat(pending.file.fileno()).st_mode) == 0o600
        assert os.fstat(pending.file.fileno()).st_size == 0
        pending.file.write(b"whole")
    assert (tmp_path / "palace.sqlite3").read_bytes() == b"whole" and not leftover.exists()


def test_keep_mode_keeps_an_existing_files_permissions(tmp_path: Path) -> None:
    """A file of the user's that palacectl rewrites (rules install) keeps the mode the user gave
    it; a new one gets ``mode``."""
    target = tmp_path / "AGENTS.md"
    write_atomically(target, b"first", 0o640, keep_mode=True)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    target.chmod(0o604)
    write_atomically(target, b"second", 0o640, keep_mode=True)
    assert target.read_bytes() == b"second" and stat.S_IMODE(target.stat().st_mode) == 0o604
    write_atomically(target, b"third", 0o640)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_create_folder_makes_the_missing_folders(tmp_path: Path) -> None:
    target = tmp_path / "watch" / "deep" / "bob.json"
    with pytest.raises(FileNotFoundError):
        write_atomically(target, b"{}\n")
    write_atomically(target, b"{}\n", create_folder=True)
    assert target.read_bytes() == b"{}\n"


def test_new_file_mode_follows_the_umask() -> None:
    old = os.umask(0o027)
    try:
        assert new_file_mode() == 0o640
    finally:
        os.umask(old)


def _watch_state(path: Path) -> None:
    from palacectl.watch import write_state

    write_state(path, "evt_1", "bob")


def _rules(path: Path) -> None:
    from palacectl.rules import install_rules, render_rules

    install_rules(path, render_rules("mac-claude"))


def _service_unit(path: Path) -> None:
    from palacectl.service.cli import write_service_file

    write_service_file(path, "[Unit]\nDescription=palace\n")


@pytest.mark.parametrize("writer", [_watch_state, _rules, _service_unit], ids=["watch-state", "rules", "service"])
def test_every_writer_fsyncs_the_folder_after_its_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         writer) -> None:
    """Each of palacectl's writers goes through palacectl.files: content fsynced, renamed, then the
    folder fsynced (each had its own copy, and none fsynced the folder)."""
    target = tmp_path / "target"
    order = _trace(monkeypatch)
    writer(target)
    assert order[-3:] == ["fsync file", "rename", "fsync folder"] and target.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["target"]


def test_no_other_palacectl_module_puts_a_file_in_place_itself() -> None:
    """Guards the one writer: palacectl once had six copies of "temporary file, fsync, os.replace"
    (issue 13), each missing a step; only palacectl/files.py may rename a temporary file over a
    target or create one."""
    import ast

    package = Path(__file__).resolve().parents[2] / "palacectl"
    for path in sorted(package.rglob("*.py")):
        if path == package / "files.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in {"replace", "mkstemp", "NamedTemporaryFile"}:
                owner = node.value.id if isinstance(node.value, ast.Name) else None
                assert owner not in {"os", "tempfile"}, (
                    f"{path.relative_to(package.parent)}:{node.lineno} uses {owner}.{node.attr}: "
                    "write through palacectl.files instead")
