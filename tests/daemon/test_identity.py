"""The identity key on disk (palaced/identity.py): written atomically, never replaced, and an
empty leftover of an older release's crash treated as absent (issue 11, finding 11)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

import palaced.identity
from palaced.identity import IdentityError, load_or_create_identity


def _raw(key) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def test_a_crash_while_the_key_is_written_leaves_no_key_file(tmp_path: Path) -> None:
    """A process that dies in the middle of writing a new key (here: at the write itself) must
    leave either no identity.key or a whole one — never an empty file under the key's name, which
    the next start would refuse. The next start then creates a key as if none had been tried."""
    path = tmp_path / "identity.key"
    crash = textwrap.dedent(f"""
        import os
        from pathlib import Path
        real_fdopen = os.fdopen

        class Dying:
            def __init__(self, fh):
                self.fh = fh
            def __enter__(self):
                return self
            def __exit__(self, *exc):
                return False
            def write(self, data):
                os._exit(9)  # the process dies before a byte of the key reaches the file

        os.fdopen = lambda fd, *a, **k: Dying(real_fdopen(fd, *a, **k))
        from palaced.identity import load_or_create_identity
        load_or_create_identity(Path({str(path)!r}))
    """)
    died = subprocess.run([sys.executable, "-c", crash], capture_output=True, timeout=60)
    assert died.returncode == 9, died.stderr.decode()
    assert not path.exists(), f"a crash left identity.key behind ({path.stat().st_size} bytes)"
    key, created = load_or_create_identity(path)
    again, created_again = load_or_create_identity(path)
    assert created and not created_again and _raw(again) == _raw(key)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["identity.key"]  # the crash's temporary file is gone


def test_an_empty_identity_key_is_treated_as_absent(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An empty identity.key (what an older release left after a crash while creating it) does not
    brick the daemon: nothing can have been signed with an empty key, so a new one is made."""
    path = tmp_path / "identity.key"
    path.touch(mode=0o600)
    key, created = load_or_create_identity(path)
    assert created and path.stat().st_size > 0 and stat.S_IMODE(path.stat().st_mode) == 0o600
    again, created_again = load_or_create_identity(path)
    assert not created_again and _raw(again) == _raw(key)
    assert "is empty" in caplog.text


@pytest.mark.parametrize("content", [b"\n", b"garbage", b"-----BEGIN PRIVATE KEY-----\nAAAA\n"])
def test_a_non_empty_unusable_key_is_refused_and_kept(tmp_path: Path, content: bytes) -> None:
    """Only an empty file counts as absent: any other unreadable key may have signed events, so it
    is refused with the clear message and never replaced."""
    path = tmp_path / "identity.key"
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(IdentityError, match="not a valid key"):
        load_or_create_identity(path)
    assert path.read_bytes() == content


def test_a_key_that_appears_meanwhile_is_never_replaced(tmp_path: Path) -> None:
    """The new key is linked into place, and a link never replaces a file: if a key appears
    between the check and the write, that key stays and is the one used."""
    path = tmp_path / "identity.key"
    _first, _ = load_or_create_identity(tmp_path / "other.key")
    os.link(tmp_path / "other.key", path)
    before = path.read_bytes()
    assert palaced.identity._create(path) is None
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["identity.key", "other.key"]


def test_the_folder_is_fsynced_once_the_key_has_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fsync of the directory after the link: without it a power cut can lose the new name while
    events signed with the key are already on disk."""
    path = tmp_path / "identity.key"
    synced: list[tuple[Path, bool]] = []
    real = palaced.identity.fsync_directory

    def spy(folder: Path) -> None:
        synced.append((folder, path.exists()))
        real(folder)

    monkeypatch.setattr(palaced.identity, "fsync_directory", spy)
    load_or_create_identity(path)
    assert synced == [(tmp_path, True)]
