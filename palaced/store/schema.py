"""Opening the database: its connections and its migrations.

Owns: how a connection is configured (the writer's WAL, ``synchronous=FULL`` and
``secure_delete``; a reader's ``query_only``), the numbered scripts of ``schema/`` applied
in order (each in its own transaction, with the Python step SQL alone cannot do), and refusing a
database written by a newer palace. (What a feature derives again when its derivation changed is
its store part's ``opened``: parts.py.) Runs on the thread that opens the store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Final

import apsw
import msgpack

from ..clock import utc_now
from .errors import StoreError
from .fetch import all_rows

__all__ = ["connect", "migrate"]

_LOGGER: Final = logging.getLogger("palaced.store")
# Why 10 s: a writer's checkpoint or a long rebuild may hold the lock that long; waiting beats failing.
_BUSY_MS: Final = 10_000


def connect(path: Path, *, write: bool) -> apsw.Connection:
    """The writer connection (creates the file) or a read-only one."""
    flags = apsw.SQLITE_OPEN_READWRITE | (apsw.SQLITE_OPEN_CREATE if write else 0)
    try:
        conn = apsw.Connection(str(path), flags=flags)
        conn.set_busy_timeout(_BUSY_MS)
        if write:
            conn.execute("PRAGMA journal_mode=WAL")
            # FULL: a commit returns only after the WAL is fsynced. An acknowledged append is durable.
            conn.execute("PRAGMA synchronous=FULL")
            # Redaction must leave no bytes behind in freed space of the database file.
            conn.execute("PRAGMA secure_delete=ON")
            conn.execute("PRAGMA foreign_keys=ON")
        else:
            conn.execute("PRAGMA query_only=ON")
    except apsw.Error as exc:
        raise StoreError(f"cannot open the database {path}: {exc}") from exc
    return conn


def migrate(conn: apsw.Connection, path: Path) -> None:
    """Apply every script of ``schema/`` not applied yet, in order.

    Raises:
        StoreError: the database was written by a newer palace (a schema this one does not know).
    """
    conn.execute(
        "CREATE TABLE IF NOT EXISTS _migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
        "applied_at TEXT NOT NULL) STRICT"
    )
    done = {v for (v,) in conn.execute("SELECT version FROM _migrations")}
    schema_dir = resources.files("palaced.store") / "schema"
    scripts = sorted(p.name for p in schema_dir.iterdir() if p.name.endswith(".sql"))
    # What SQL alone cannot do: a Python step run after a version's script, in its transaction.
    steps: dict[int, Callable[[apsw.Connection], None]] = {5: _fork_evidence_without_bodies}
    for name in scripts:
        version = int(name.split("-", 1)[0])
        if version in done:
            continue
        sql = (schema_dir / name).read_text(encoding="utf-8")
        with conn:
            conn.execute(sql)
            if version in steps:
                steps[version](conn)
            conn.execute("INSERT INTO _migrations VALUES (?, ?, ?)", (version, name, utc_now()))
    newest = max((int(n.split("-", 1)[0]) for n in scripts), default=0)
    if done and max(done) > newest:
        raise StoreError(
            f"the database {path} was written by a newer palace (schema {max(done)} > {newest}); "
            "upgrade palace before opening it"
        )


def _fork_evidence_without_bodies(conn: apsw.Connection) -> None:
    """Schema 5: fork evidence keeps no body (``apply.record_fork``); rows stored before lose theirs."""
    for rowid, blob in all_rows(conn.execute("SELECT rowid, rejected FROM forks")):
        try:
            wire = msgpack.unpackb(bytes(blob), raw=False)
        except (ValueError, TypeError, msgpack.exceptions.UnpackException):
            wire = None
        if isinstance(wire, dict) and wire.get("body") is None:
            continue
        # Unreadable evidence proves nothing and may hold a body: an empty map replaces it.
        stripped = {**wire, "body": None} if isinstance(wire, dict) else {}
        conn.execute("UPDATE forks SET rejected=? WHERE rowid=?", (msgpack.packb(stripped, use_bin_type=True), rowid))

