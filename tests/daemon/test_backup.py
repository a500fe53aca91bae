"""A backup's file (palaced/store/backup.py) is private from the moment it exists (issue 11,
finding 11): the copy of the whole log is never readable by other users, not even while written."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import apsw
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.validation import AppendRequest, Limits
from palaced.features import STORE_PARTS
from palaced.store import Store, append_event
from palaced.store.backup import backup_database

LIMITS = Limits()


@pytest.fixture
def database(tmp_path: Path) -> Path:
    store = Store(tmp_path / "palace.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    request = AppendRequest.from_wire({"type": "note", "stream": "s", "room": "r", "from_agent": "a",
                                       "body": "in the backup"}, LIMITS)
    assert store.write_batch([lambda ctx: append_event(ctx, request)]).outcomes[0][0]
    store.close()
    return tmp_path / "palace.sqlite3"


def test_the_partial_backup_is_0600_from_its_creation(database: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The partial file used to be created by SQLite with the default mode (0644 under the usual
    umask) and chmod-ed only after the copy: for the whole copy, other users could read the log."""
    target = tmp_path / "backups" / "palace.bak"
    target.parent.mkdir()
    modes: dict[str, int] = {}

    class Spy(apsw.Connection):  # type: ignore[misc]
        def __init__(self, filename: str, *args: object, **kwargs: object) -> None:
            super().__init__(filename, *args, **kwargs)
            if filename.endswith(".partial"):
                modes[Path(filename).name] = stat.S_IMODE(os.stat(filename).st_mode)

    monkeypatch.setattr(apsw, "Connection", Spy)
    old_umask = os.umask(0o022)
    try:
        result = backup_database(database, target)
    finally:
        os.umask(old_umask)
    assert modes == {".palace.bak.partial": 0o600}
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and result["events"] == 1
    assert sorted(p.name for p in target.parent.iterdir()) == ["palace.bak"]


def test_a_failed_backup_leaves_nothing_behind(database: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "backups" / "palace.bak"
    target.parent.mkdir()

    def full(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError):
        backup_database(database, target)
    assert list(target.parent.iterdir()) == []
