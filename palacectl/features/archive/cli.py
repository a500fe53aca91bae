"""palacectl backup and restore: a consistent copy of the log, and putting one back safely.

Owns: ``backup FILE`` (the running daemon writes a consistent copy of its database: SQLite online
backup) and ``restore FILE`` (into a home whose daemon is stopped). A restored replica must never
write under its old origin again: the fleet already holds that origin's events up to a later
sequence number than the backup, and a second, different event at one (origin, seq) is a fork
(p2p-lessons, SSB). So restore retires the old origin: its events stay, signed, as history (peers
send back the ones written after the backup), and palaced mints a new origin at its next start.
Nothing is half-written: the copy takes the database's name only once complete and fsynced, and a
replaced database is kept beside it, never deleted. The root registers what ``COMMANDS`` names (this
module's, and ``export``'s)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Final

import typer

from palace_proto.paths import DATABASE_FILENAME as DATABASE_FILE
from palace_proto.paths import LOCK_FILENAME as LOCK_FILE

from ...cli.common import JsonOpt, call_daemon, current_home
from ...client import Client, DaemonUnreachable
from ...output import STAMP_UTC, emit, fail, utc_now, write_stdout
from . import export

__all__ = ["COMMANDS", "GROUPS", "backup", "restore"]

# What tells a palace database apart from any SQLite file.
REQUIRED_TABLES = frozenset({"_migrations", "meta", "origins", "events", "artifacts"})

ForceOpt = Annotated[bool, typer.Option("--force", help="Replace what is there (a replaced database is kept).")]


def backup(
    file: Annotated[Path, typer.Argument(help="Where to write the copy (a file; its folder must exist).")],
    force: ForceOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Write a consistent copy of the running daemon's database (writes go on meanwhile)."""
    result: dict[str, Any] = call_daemon("backup", path=str(file.expanduser().absolute()), overwrite=force or None)
    if emit(result, json_):
        return
    write_stdout(f"Backed up {result['events']:,} events ({result['bytes']:,} bytes) to {result['path']}\n"
                 f"  sha256 {result['sha256']}\n")


@contextlib.contextmanager
def _stopped_home(home: Path) -> Iterator[None]:
    """Hold the home's daemon lock, so no palaced runs (or starts) while we work on its files."""
    try:
        with Client(home) as client:
            client.call("ping")
        running = True
    except DaemonUnreachable:
        running = False
    if running:
        fail(f"palaced is running on {home}; stop it first (`palacectl service uninstall` leaves the data, or "
             "SIGTERM / Ctrl-C), then restore", code="daemon_running")
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        import fcntl
    except ImportError:  # Windows: no flock; the ping above is the check
        yield
        return
    fd = os.open(home / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fail(f"palaced is starting or running on {home} (its lock is held); stop it first", code="daemon_running")
        yield
    finally:
        os.close(fd)


def _describe(path: Path) -> dict[str, Any]:
    """Check ``path`` is a sound palace database; returns its event count and origin."""
    import apsw

    if not path.is_file():
        fail(f"{path} is not a file; name a backup made by `palacectl backup`", code="invalid_argument")
    try:
        conn = apsw.Connection(f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    except apsw.Error as exc:
        fail(f"cannot open {path}: {exc}", code="invalid_argument")
    try:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not REQUIRED_TABLES <= tables:
            fail(f"{path} is not a palace database (no {', '.join(sorted(REQUIRED_TABLES - tables))} table); "
                 "name a backup made by `palacectl backup`", code="invalid_argument")
        # (the first row of each: quick_check and count(*) always answer, so next() never runs dry)
        (check,) = next(conn.execute("PRAGMA quick_check"))
        if check != "ok":
            fail(f"{path} is damaged ({check}); use another backup", code="invalid_argument")
        (events,) = next(conn.execute("SELECT count(*) FROM events"))
        origin = conn.execute("SELECT value FROM meta WHERE key='origin'").fetchone()
    except apsw.Error as exc:
        fail(f"{path} is not a readable palace database ({exc}); name a backup made by `palacectl backup`",
             code="invalid_argument")
    finally:
        conn.close()
    return {"events": events, "origin": origin[0] if origin else None}


def restore(
    file: Annotated[Path, typer.Argument(help="A backup made by `palacectl backup`.")],
    force: ForceOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Put a backup back into a stopped home; the replica then writes as a new origin (no fork)."""
    import apsw  # here, not at the top: every other palacectl command starts without it

    from ...files import replacing

    home = current_home()
    source = file.expanduser().absolute()
    backup_info = _describe(source)
    database = home / DATABASE_FILE
    with _stopped_home(home):
        kept: str | None = None
        if database.exists() and not force:
            # Not opened: even a read-only open of a WAL database creates files beside it.
            fail(f"{home} already holds a log ({database.stat().st_size / (1 << 20):.1f} MiB); pass --force to "
                 "replace it (the current database is kept beside it)", code="exists")
        try:
            # 0600 from the first byte (the whole log), fsynced, renamed, the folder fsynced: palacectl.files.
            # A fixed temporary name: we hold the home's lock, and a crash's leftover is removed next time.
            with replacing(database, 0o600, temporary_name=f".{DATABASE_FILE}.restoring") as pending:
                with open(source, "rb") as copy_from:
                    shutil.copyfileobj(copy_from, pending.file, 1 << 20)
                pending.file.flush()
                conn = apsw.Connection(str(pending.path))
                try:
                    # No origin recorded: palaced mints a fresh one at start (store._ensure_origin). The
                    # old origin row, its key and its events stay: signed history, verifiable forever.
                    conn.execute("DELETE FROM meta WHERE key='origin'")
                finally:
                    conn.close()
                os.fsync(pending.file.fileno())  # the copy is durable before the current database moves aside
                if database.exists():
                    kept = f"{DATABASE_FILE}.replaced-{utc_now(STAMP_UTC)}"
                    # The database and its WAL move together: the WAL may hold its latest commits.
                    for suffix in ("", "-wal", "-shm"):
                        old = home / f"{DATABASE_FILE}{suffix}"
                        if old.exists():
                            old.rename(home / f"{kept}{suffix}")
        except (OSError, apsw.Error) as exc:
            fail(f"cannot restore into {home}: {getattr(exc, 'strerror', None) or exc}"
                 + (f" (the database it would have replaced is kept as {home / kept})" if kept else ""))
    result = {"home": str(home), "restored_from": str(source), "events": backup_info["events"],
              "retired_origin": backup_info["origin"], "kept_previous": str(home / kept) if kept else None}
    if emit(result, json_):
        return
    write_stdout(f"Restored {result['events']:,} events into {home}.\n"
                 f"The backup's origin {result['retired_origin']} is retired: its events stay as signed history, "
                 "and palaced writes as a new origin from its next start (peers send back what was written "
                 "after the backup; no fork).\n")
    if kept:
        write_stdout(f"The database it replaced is kept as {home / kept}.\n")


COMMANDS: Final = {"backup": backup, "restore": restore, "export": export.export, "import": export.import_}
GROUPS: Final[dict[str, typer.Typer]] = {}
