"""Operations that look after the replica itself: backups, export and import, and health.

Owns: the local-API handlers an operator uses on a running daemon (mixed into ``Service``):
``backup`` writes a consistent copy of the live database to a path the client names;
``export_page`` / ``import_events`` move signed events in and out as NDJSON lines
(``palace_proto.export``; imported events are history, never replicated); ``health``
(part of ``status``) judges what needs attention — a WAL that stopped being truncated, forks, an
embedding model that failed, a recent error in the log, a certificate about to expire, no peer
reachable. Restoring is not here: it needs the daemon stopped, so ``palacectl restore`` does it.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from palace_proto.errors import ValidationError
from palace_proto.export import ExportError, event_from_export, event_to_export
from palace_proto.validation import clean_required

from .store import StoreError
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


MAX_EXPORT_PAGE = 1000
MAX_IMPORT_EVENTS = 1000


def _streams(args: Mapping[str, Any]) -> list[str] | None:
    streams = args.get("streams")
    if streams is None:
        return None
    if not isinstance(streams, list) or not all(isinstance(x, str) and x for x in streams):
        raise ValidationError("streams must be a list of stream names", field="streams")
    return streams


class MaintenanceOps:
    """Mixin for ``Service``: backups, export and import, and health."""

    async def op_export_page(self: Service, args: Mapping[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
        """One page of ``palacectl export``: signed events after a local seq, with their origins' keys."""
        after = args.get("after_seq", 0)
        if type(after) is not int or after < 0:
            raise ValidationError("after_seq must be a non-negative integer", field="after_seq")
        limit = args.get("limit", 500)
        if type(limit) is not int or not 1 <= limit <= MAX_EXPORT_PAGE:
            raise ValidationError(f"limit must be an integer from 1 to {MAX_EXPORT_PAGE}", field="limit")
        since = args.get("since_event_id")
        if since is not None:
            since_id = clean_required("since_event_id", since)
            after = await self.astore.read(self.store.resolve_seq, "since_event_id", since_id)
        streams = _streams(args)
        events, keys = await self.astore.read(self.store.export_page, after, limit, streams)
        page: dict[str, Any] = {
            "events": [{"seq": seq, **event_to_export(event)} for seq, event in events],
            "origins": {origin: key.hex() for origin, key in keys.items()},
            "next_after_seq": events[-1][0] if events else after, "done": len(events) < limit,
        }
        if args.get("with_total"):
            page["total"] = await self.astore.read(self.store.count_events, after, streams)
        return page

    async def op_import_events(self: Service, args: Mapping[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
        """Verify and store events from an export as history (``palacectl import``)."""
        self.require_writer()
        raw_events, raw_origins = args.get("events"), args.get("origins", {})
        if not isinstance(raw_events, list) or len(raw_events) > MAX_IMPORT_EVENTS:
            raise ValidationError(f"events must be a list of at most {MAX_IMPORT_EVENTS}", field="events")
        if not isinstance(raw_origins, dict):
            raise ValidationError("origins must map origin ids to public keys (hex)", field="origins")
        keys: dict[str, bytes] = {}
        for origin, key in raw_origins.items():
            try:
                keys[str(origin)] = bytes.fromhex(key) if isinstance(key, str) else b""
            except ValueError:
                keys[str(origin)] = b""
        refused: list[dict[str, str]] = []
        events = []
        for index, raw in enumerate(raw_events):
            try:
                events.append(event_from_export(raw))
            except ExportError as exc:
                ident = raw.get("id") if isinstance(raw, dict) else None
                refused.append({"id": str(ident or f"#{index}"), "reason": str(exc)})
        artifacts = args.get("artifacts") or []
        if not isinstance(artifacts, list):
            raise ValidationError("artifacts must be a list", field="artifacts")

        def job(ctx: Any) -> dict[str, Any]:
            stored_artifacts = 0
            for record in artifacts:
                content = record.get("content") if isinstance(record, dict) else None
                if not isinstance(content, bytes) or not isinstance(record.get("sha256"), str):
                    continue
                try:
                    ctx.put_verified_artifact(sha256=record["sha256"], kind=str(record.get("kind", "file")),
                                              created_by=str(record.get("created_by", "import")),
                                              created_at=str(record.get("created_at", "")),
                                              metadata_json=json.dumps(record.get("metadata") or {}, sort_keys=True),
                                              content=content)
                    stored_artifacts += 1
                except StoreError:
                    refused.append({"id": str(record.get("id")),
                                    "reason": "artifact content does not match its sha256"})
            return {**ctx.import_history(events, keys), "artifacts": stored_artifacts}

        result = await self.astore.write(job)
        result["refused"] = refused + result["refused"]
        return result

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
