"""Operations that look after the daemon and its replica: ping, status and health, backups,
export and import.

Owns: ``ping``; ``status`` (everything ``palacectl status`` shows, gathered from the other parts)
and ``health``, its judgement of what needs attention — a WAL that stopped being truncated, forks,
an embedding model that failed, a recent error in the log, a certificate about to expire, no peer
reachable; ``report_facts``, the same as the rest of the palace sees it (what this daemon's report
says beyond its links, palace_proto.reports); ``backup``, a consistent copy of the live database to a
path the client names; ``export_page`` / ``import_events``, which move signed events in and out as
NDJSON lines (``palace_proto.export``; imported events are history, never replicated). Restoring is
not here: it needs the daemon stopped, so ``palacectl restore`` does it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import trio

from palace_proto import __version__
from palace_proto.control import PROTOCOL_VERSION
from palace_proto.envelope import SignedEvent
from palace_proto.errors import ApiError, ValidationError
from palace_proto.export import (
    ExportError,
    event_to_export,
    verify_export_artifact,
    verify_export_event,
)
from palace_proto.stamps import format_stamp_seconds
from palace_proto.validation import clean_required

from ..clock import utc_datetime
from ..recent_errors import RECENT_ERRORS
from ..store import StoreError, WriteContext, import_history, put_verified_artifact
from ..store.backup import backup_database, wal_bytes
from .context import Context
from .network import network_status, peer_counts

__all__ = ["OPS", "health", "report_facts"]

# Why 256 MiB: with daemon-owned checkpoints the WAL stays under a few MiB; this much means the
# checkpoints have been failing for a long time (a reader pinning it) and the disk is filling.
WAL_ATTENTION_BYTES: Final = 256 << 20
# Why 60 s: a reader may legitimately hold a snapshot for seconds (a backup); a minute is not that.
WAL_BLOCKED_ATTENTION_S: Final = 60.0
# Why 14 days: time to get a new invite and join again before peers start refusing this daemon.
CERT_ATTENTION_DAYS: Final = 14
# Why 1000: bounds the work of one request (an import verifies ~0.1 ms of signature per event, off
# the event loop) and the events one reply holds; clients page through more.
MAX_EXPORT_PAGE: Final = 1000
MAX_IMPORT_EVENTS: Final = 1000


async def ping(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    return {"pong": True}


async def status(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    counts = await ctx.store.counts()
    _, latest_id = await ctx.store.latest()
    config = ctx.config
    result: dict[str, Any] = {
        "version": __version__, "protocol": PROTOCOL_VERSION, "home": str(config.home),
        "socket": str(config.socket_path) if config.api_endpoint.transport == "unix" else None,
        "api": ctx.api_address, "pid": os.getpid(),
        "origin": ctx.store.origin_id, "fingerprint": ctx.fingerprint,
        "events": counts["events"], "artifacts": counts["artifacts"], "latest_event_id": latest_id,
        "started_at": format_stamp_seconds(ctx.started_at),
        "uptime_s": round(time.monotonic() - ctx.started_monotonic, 3),
        "watchers": len(ctx.watchers), "writer": ctx.store.statistics(),
        "storage": await trio.to_thread.run_sync(storage_sizes, ctx),
        "palace": ctx.membership.to_wire() if ctx.membership else None,
        "network": await network_status(ctx),
        # The local API's connections: open, accepted, refused by its limits, failed (set by palaced/api.py)
        "api_connections": ctx.api_statistics() if ctx.api_statistics is not None else None,
        "redactions": {"purge_pending": ctx.store.wal.purge_pending,
                       "refused_from_peers": ctx.store.refusals.redactions},
        # Notifications out ([notify]): people, channels, sent/failed/dropped, last error; null when off
        "notify": ctx.notifier.statistics() if ctx.notifier is not None else None,
    }
    result.update(await ctx.features.status(ctx))  # their parts: memory, tasks...
    result["peers"] = await peer_counts(ctx)
    result["health"] = await health(ctx, result)
    return result


async def report_facts(ctx: Context) -> dict[str, Any]:
    """What this daemon's report (palace_proto.reports) says of it beyond its links, gathered as
    ``status`` gathers it and judged by ``health``: the network calls this for every report it
    announces (every 30 s, and after a link changes state)."""
    result = await status(ctx, {})
    return {"version": result["version"], "started_at": result["started_at"], "events": result["events"],
            "health": {"ok": result["health"]["ok"], "problems": result["health"]["problems"]},
            "forks": result["network"]["forks"] if result["network"] else 0, "watchers": result["watchers"]}


def _streams(args: Mapping[str, Any]) -> list[str] | None:
    streams = args.get("streams")
    if streams is None:
        return None
    if not isinstance(streams, list) or not all(isinstance(x, str) and x for x in streams):
        raise ValidationError("streams must be a list of stream names", field="streams")
    return streams


def _verify_import(raw_events: list[Any], raw_artifacts: list[Any],
                   keys: Mapping[str, bytes]) -> tuple[list[SignedEvent], list[tuple[dict[str, Any], bytes]],
                                                        list[dict[str, Any]]]:
    """Split an ``import_events`` request into what verifies and what fails (``{index, id, kind,
    reason}`` per failure: ``index`` into ``events`` or ``artifacts``, as ``kind`` says)."""
    events: list[SignedEvent] = []
    artifacts: list[tuple[dict[str, Any], bytes]] = []
    failures: list[dict[str, Any]] = []
    for index, raw in enumerate(raw_events):
        try:
            events.append(verify_export_event(raw, keys))
        except ExportError as exc:
            ident = raw.get("id") if isinstance(raw, dict) else None
            failures.append({"kind": "event", "index": index, "id": ident if isinstance(ident, str) else None,
                             "reason": str(exc)})
    for index, raw in enumerate(raw_artifacts):
        content = raw.get("content") if isinstance(raw, dict) else None
        try:
            if not isinstance(content, bytes):
                raise ExportError("an artifact needs its content (bytes)")
            record = {k: v for k, v in raw.items() if k != "content"}
            verify_export_artifact(record, content)
        except ExportError as exc:
            ident = raw.get("id") if isinstance(raw, dict) else None
            failures.append({"kind": "artifact", "index": index, "id": ident if isinstance(ident, str) else None,
                             "reason": str(exc)})
            continue
        artifacts.append((record, content))
    return events, artifacts, failures


async def export_page(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
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
        after = await ctx.store.resolve_seq("since_event_id", since_id)
    streams = _streams(args)
    events, keys = await ctx.store.export_page(after, limit, streams)
    page: dict[str, Any] = {
        "events": [{"seq": seq, **event_to_export(event)} for seq, event in events],
        "origins": {origin: key.hex() for origin, key in keys.items()},
        "next_after_seq": events[-1][0] if events else after, "done": len(events) < limit,
    }
    if args.get("with_total"):
        page["total"] = await ctx.store.count_events(after, streams)
    return page


async def import_events(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Verify and store events from an export as history (``palacectl import``).

    All or nothing by default: every event (shape, id, hashes, signature against the key
    ``origins`` gives its origin) and every artifact (bytes against its sha256) is verified
    before anything is stored, and one failure refuses the whole request (``invalid_argument``,
    ``detail.failures``). With ``partial: true`` what verifies is stored and the failures come
    back under ``failed``. Policy refusals (this replica's own origin, an origin this palace
    replicates, another key or another event already held here) are not failures: the
    events verify, this palace declines them, and they are listed under ``refused`` either way.
    """
    ctx.require_writer()
    raw_events, raw_origins = args.get("events"), args.get("origins", {})
    if not isinstance(raw_events, list) or len(raw_events) > MAX_IMPORT_EVENTS:
        raise ValidationError(f"events must be a list of at most {MAX_IMPORT_EVENTS}", field="events")
    if not isinstance(raw_origins, dict):
        raise ValidationError("origins must map origin ids to public keys (hex)", field="origins")
    partial = args.get("partial", False)
    if not isinstance(partial, bool):
        raise ValidationError("partial must be true or false", field="partial")
    raw_artifacts = args.get("artifacts") or []
    if not isinstance(raw_artifacts, list) or len(raw_artifacts) > MAX_IMPORT_EVENTS:
        raise ValidationError(f"artifacts must be a list of at most {MAX_IMPORT_EVENTS}", field="artifacts")
    keys: dict[str, bytes] = {}
    for origin, key in raw_origins.items():
        try:
            raw_key = bytes.fromhex(key) if isinstance(key, str) else b""
        except ValueError:
            raw_key = b""
        if isinstance(origin, str) and len(raw_key) == 32:
            keys[origin] = raw_key  # a malformed key is left out: its origin's events fail as keyless

    # Signatures cost ~0.1 ms each: a full request is ~100 ms of CPU, off the event loop.
    events, artifacts, failures = await trio.to_thread.run_sync(_verify_import, raw_events, raw_artifacts, keys)
    if failures and not partial:
        raise ApiError(f"{len(failures)} of the {len(raw_events)} event(s) and {len(raw_artifacts)} artifact(s) "
                       "fail verification; nothing was stored (send partial: true to store what verifies)",
                       code="invalid_argument", detail={"field": "events", "failures": failures})
    refused: list[dict[str, str]] = []

    def job(w: WriteContext) -> dict[str, Any]:
        stored_artifacts = 0
        for record, content in artifacts:
            try:
                put_verified_artifact(w, sha256=record["sha256"], kind=record.get("kind", "file"),
                                          created_by=record.get("created_by", "import"),
                                          created_at=record.get("created_at", ""),
                                          metadata_json=json.dumps(record.get("metadata") or {}, sort_keys=True),
                                          content=content)
                stored_artifacts += 1
            except StoreError:  # verified above; the store checks again
                refused.append({"id": str(record.get("id")),
                                "reason": "artifact content does not match its sha256"})
        return {**import_history(w, events, keys), "artifacts": stored_artifacts}

    result = await ctx.store.write(job, heavy=True)
    result["refused"] = refused + result["refused"]
    result["failed"] = failures
    return result


async def health(ctx: Context, status: Mapping[str, Any]) -> dict[str, Any]:
    """What needs attention (``problems``: status exits 1) and what is worth knowing (``notes``)."""
    problems: list[str] = []
    notes: list[str] = []
    storage = status["storage"]
    writer = status["writer"]
    if storage["wal_bytes"] > WAL_ATTENTION_BYTES or (writer.get("wal_blocked_s") or 0) > WAL_BLOCKED_ATTENTION_S:
        problems.append(f"the WAL is {storage['wal_bytes'] / (1 << 20):.0f} MiB and checkpoints have been blocked "
                        f"for {writer.get('wal_blocked_s') or 0:.0f} s: a reader is holding a transaction open "
                        "(a stuck client?); restarting palaced releases it")
    if full := writer.get("disk_full"):
        problems.append(f"writes are failing: the disk holding {full['path']} is full ({full['failed_writes']} "
                        f"refused in the last {full['since_s']:.0f} s); free some space: palaced resumes by itself")
    if writer.get("checkpoint_error") and not full:
        problems.append(f"WAL checkpoints are failing: {writer['checkpoint_error']}")
    network = status.get("network")
    for stalled in (network or {}).get("stalled_links", ()):
        problems.append(f"the link with {stalled['name'] or stalled['peer_id']} ({stalled['peer_id'][:7]}) makes no "
                        f"progress: {stalled['reason']} (`palacectl peers`; a link silent or blocked for 30 s is "
                        "ended and dialled again)")
    if network and network["forks"]:
        problems.append(f"{network['forks']} fork(s) detected: see `palacectl peers` and `palacectl doctor`")
    for problem, note in ctx.features.health(status):  # what the features see in their parts
        problems.extend(problem)
        notes.extend(note)
    if status.get("redactions", {}).get("purge_pending"):
        notes.append("a redaction's purge is pending: old database pages keep the redacted bytes until a reader "
                     "lets go of the WAL (palaced retries by itself)")
    if network is not None and network.get("refused_next"):
        problems.append(f"{network['refused_next']} origin(s) stopped here: a peer sent an authentic event that "
                        "breaks a rule (see the log: 'refused event'); check that every daemon runs the same "
                        "palace release and limits")
    recent = RECENT_ERRORS.recent()
    if recent:
        problems.append(f"error logged at {recent['at']}: {recent['message']}")
    membership = ctx.membership
    if membership is not None:
        left = (membership.member.not_after - utc_datetime()).days
        if left < CERT_ATTENTION_DAYS:
            problems.append(f"this daemon's member certificate expires in {left} day(s)"
                            if left >= 0 else "this daemon's member certificate has expired")
    if network is not None:
        peers = status["peers"]
        if peers["total"] and not peers["live"]:
            notes.append(f"no peer connected (0 of {peers['total']}): working offline; "
                         "`palacectl doctor` says why")
    return {"ok": not problems, "problems": problems, "notes": notes, "last_error": recent}


def storage_sizes(ctx: Context) -> dict[str, int]:
    path = ctx.store.path
    try:
        database = path.stat().st_size
    except OSError:
        database = 0
    return {"database_bytes": database, "wal_bytes": wal_bytes(path)}


async def backup(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
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
    database = ctx.store.path
    live = {database, database.with_name(database.name + "-wal"), database.with_name(database.name + "-shm")}
    # The stat calls below block the loop for microseconds on a local disk, once per backup request.
    if target.resolve() in {p.resolve() for p in live}:  # noqa: ASYNC240
        raise ValidationError(f"{target} is the live database itself; back up to another file", field="path")
    if target.is_dir():  # noqa: ASYNC240
        raise ValidationError(f"{target} is a folder; name the backup file", field="path")
    if target.exists() and not overwrite:  # noqa: ASYNC240
        raise ValidationError(f"{target} already exists; pass --force to replace it", field="path")
    if not os.access(target.parent, os.W_OK):
        raise ValidationError(f"cannot write to {target.parent} (permission denied)", field="path")
    try:
        return await trio.to_thread.run_sync(backup_database, database, target)
    except OSError as exc:
        raise ValidationError(f"cannot write the backup {target}: {exc.strerror or exc}", field="path") from None


OPS: Final = {
    "ping": ping,
    "status": status,
    "backup": backup,
    "export_page": export_page,
    "import_events": import_events,
}
