"""Operations that look after the replica itself: backups and health.

Owns: the local-API handlers an operator uses on a running daemon (mixed into ``Service``):
``backup`` writes a consistent copy of the live database to a path the client names; ``health``
(part of ``status``) judges what needs attention — a WAL that stopped being truncated, forks, an
embedding model that failed, a recent error in the log, a certificate about to expire, no peer
reachable. Restoring is not here: it needs the daemon stopped, so ``palacectl restore`` does it.
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from palace_proto.errors import ValidationError
from palace_proto.validation import clean_required

from .store.backup import backup_database, wal_bytes

if TYPE_CHECKING:
    from .service import Service

__all__ = ["MaintenanceOps", "RecentErrors"]

# Why 256 MiB: with daemon-owned checkpoints the WAL stays under a few MiB; this much means the
# checkpoints have been failing for a long time (a reader pinning it) and the disk is filling.
WAL_ATTENTION_BYTES = 256 << 20
# Why 60 s: a reader may legitimately hold a snapshot for seconds (a backup); a minute is not that.
WAL_BLOCKED_ATTENTION_S = 60.0
# Why 15 min: an error older than that has been seen (or has healed); `palaced` logs keep it.
RECENT_ERROR_S = 15 * 60
CERT_ATTENTION_DAYS = 14


class RecentErrors(logging.Handler):
    """Remembers the newest ERROR record of the daemon's log, for ``status`` (no history kept)."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.last: tuple[float, str] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.last = (record.created, f"{record.name}: {record.getMessage()}")
        except Exception:  # a bad log call must not break logging
            self.handleError(record)

    def recent(self, within_s: float = RECENT_ERROR_S) -> dict[str, Any] | None:
        if self.last is None or time.time() - self.last[0] > within_s:
            return None
        at = datetime.datetime.fromtimestamp(self.last[0], datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"at": at, "message": self.last[1]}


#: installed on the "palaced" logger by the app; module-level so every part of the daemon shares it
RECENT_ERRORS = RecentErrors()


class MaintenanceOps:
    """Mixin for ``Service``: backups and health."""

    async def health(self: Service, status: Mapping[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
        """What needs attention (``problems``: status exits 1) and what is worth knowing (``notes``)."""
        problems: list[str] = []
        notes: list[str] = []
        storage = status["storage"]
        writer = status["writer"]
        if storage["wal_bytes"] > WAL_ATTENTION_BYTES or (writer.get("wal_blocked_s") or 0) > WAL_BLOCKED_ATTENTION_S:
            problems.append(f"the WAL is {storage['wal_bytes'] / (1 << 20):.0f} MiB and checkpoints have been blocked "
                            f"for {writer.get('wal_blocked_s') or 0:.0f} s: a reader is holding a transaction open "
                            "(a stuck client?); restarting palaced releases it")
        network = status.get("network")
        if network and network["forks"]:
            problems.append(f"{network['forks']} fork(s) detected: see `palacectl peers` and `palacectl doctor`")
        embedding = status["memory"]["embedding"]
        if embedding and embedding.get("error"):
            problems.append(f"memory search fell back to keywords: {embedding['error']}")
        elif embedding and embedding.get("pending"):
            notes.append(f"{embedding['pending']:,} drawer(s) await embedding (found by keywords meanwhile)")
        recent = RECENT_ERRORS.recent()
        if recent:
            problems.append(f"error logged at {recent['at']}: {recent['message']}")
        membership = self.membership
        if membership is not None:
            left = (membership.member.not_after - datetime.datetime.now(datetime.UTC)).days
            if left < CERT_ATTENTION_DAYS:
                problems.append(f"this daemon's member certificate expires in {left} day(s)"
                                if left >= 0 else "this daemon's member certificate has expired")
        if network is not None:
            peers = status["peers"]
            if peers["total"] and not peers["live"]:
                notes.append(f"no peer connected (0 of {peers['total']}): working offline; "
                             "`palacectl doctor` says why")
        return {"ok": not problems, "problems": problems, "notes": notes, "last_error": recent}

    def storage_sizes(self: Service) -> dict[str, int]:  # type: ignore[misc]
        path = self.store.path
        try:
            database = path.stat().st_size
        except OSError:
            database = 0
        return {"database_bytes": database, "wal_bytes": wal_bytes(path)}

    async def op_backup(self: Service, args: Mapping[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
        """Copy the database to ``path`` (absolute, on this machine) while writes go on."""
        raw = clean_required("path", args.get("path"))
        overwrite = args.get("overwrite", False)
        if not isinstance(overwrite, bool):
            raise ValidationError("overwrite must be true or false", field="overwrite")
        target = Path(raw)
        if not target.is_absolute():
            raise ValidationError(f"path {raw!r} must be absolute (the daemon does not know your working directory)",
                                  field="path")
        if not target.parent.is_dir():
            raise ValidationError(f"the folder {target.parent} does not exist; create it first", field="path")
        database = self.store.path
        live = {database, database.with_name(database.name + "-wal"), database.with_name(database.name + "-shm")}
        if target.resolve() in {p.resolve() for p in live}:
            raise ValidationError(f"{target} is the live database itself; back up to another file", field="path")
        if target.is_dir():
            raise ValidationError(f"{target} is a folder; name the backup file", field="path")
        if target.exists() and not overwrite:
            raise ValidationError(f"{target} already exists; pass --force to replace it", field="path")
        if not os.access(target.parent, os.W_OK):
            raise ValidationError(f"cannot write to {target.parent} (permission denied)", field="path")
        try:
            return await trio.to_thread.run_sync(backup_database, database, target)
        except OSError as exc:
            raise ValidationError(f"cannot write the backup {target}: {exc.strerror or exc}", field="path") from None
