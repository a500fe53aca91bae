"""The operations of the local API: what each request does, independent of sockets and framing.

Owns: append/list/wait/subscribe/ack/redact/artifacts/patches/tasks/who/status semantics
(proto/PROTOCOL.md, "Operations"). Each ``op_*`` method takes the request's ``args`` map and
returns the result map, raising ``ApiError`` subclasses for the client. Writes go through the
group-commit writer (store/aio.py); waits and subscriptions are woken by the event bus, never by
polling, and hold no read transaction while they wait.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto import __version__
from palace_proto.control import PROTOCOL_VERSION
from palace_proto.envelope import preview_event
from palace_proto.errors import ApiError, NotFound, ValidationError
from palace_proto.ids import fingerprint
from palace_proto.memory import DIARY_EVENT, DRAWER_EVENT, KG_ADD_EVENT, KG_INVALIDATE_EVENT
from palace_proto.pki import REVOKE_EVENT_TYPE, sign_redaction
from palace_proto.validation import (
    AppendRequest,
    Limits,
    ListQuery,
    clean_optional,
    clean_required,
    validate_artifact_kind,
    validate_body,
    validate_metadata,
    validate_status,
    validate_timeout_ms,
)

from . import tasks
from .bus import EventBus
from .config import Config
from .fleet import FleetOps, replicated_args
from .maintenance import MaintenanceOps
from .memory_ops import MemoryOps
from .members import MemberDirectory
from .membership import Membership
from .store import WriteContext
from .store import memory_views as views
from .store.aio import AsyncStore

if TYPE_CHECKING:
    from .network import Network
    from .vectors import MemoryIndexer

__all__ = ["Service", "Watcher"]

LOGGER: Final = logging.getLogger("palaced.service")
# Types only the daemon may write, because they change how other events are shown.
RESERVED_TYPES: Final = {
    "event.redact": "use `palacectl redact`",
    REVOKE_EVENT_TYPE: "use `palacectl revoke`",
    DRAWER_EVENT: "use `palacectl remember`",
    DIARY_EVENT: "use `palacectl diary write`",
    KG_ADD_EVENT: "use `palacectl kg add`",
    KG_INVALIDATE_EVENT: "use `palacectl kg invalidate`",
}
# Why 1 s: cursor-only progress (events examined, none matched) matters only for checkpoints; a
# watcher that re-examines up to a second of non-matching events loses nothing.
CURSOR_PUSH_INTERVAL_S: Final = 1.0
# Why 500: the page size for catching up from SQLite after a gap (same cap as list).
CATCH_UP_PAGE: Final = 500

Push = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(slots=True)
class Watcher:
    """A live subscription, as the daemon sees it (reported by ``who``)."""

    conn_id: int
    agent: str | None
    filters: str
    cursor: str | None
    since: str
    pid: int | None

    def to_wire(self) -> dict[str, Any]:
        return {"agent": self.agent, "filters": self.filters, "cursor": self.cursor, "since": self.since,
                "pid": self.pid, "connection": self.conn_id}


def _patch_warnings(content: bytes) -> list[str]:
    """Advisory warnings for patch artifacts (MemPalace wording, reference §2); bytes stay as given."""
    warnings = []
    if not content.endswith(b"\n"):
        warnings.append(
            "patch content does not end with a trailing newline; git apply will reject the final hunk "
            "as corrupt — store the diff byte-exactly including its trailing newline"
        )
    if b"\r" in content:
        warnings.append(
            "patch content contains carriage returns (CRLF line endings); git apply often rejects CRLF "
            "diffs — generate the diff with LF endings"
        )
    return warnings


def _utc_stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class Service(FleetOps, MemoryOps, MaintenanceOps):
    """Handlers for every API operation, over one store and one bus (palace and fleet operations
    come from ``FleetOps``)."""

    def __init__(self, config: Config, astore: AsyncStore, bus: EventBus, *,
                 identity: Ed25519PrivateKey | None = None, membership: Membership | None = None) -> None:
        self.config = config
        self.identity = identity
        self.membership = membership
        self.limits: Limits = config.limits
        self.astore = astore
        self.store = astore.store
        self.bus = bus
        self.watchers: dict[int, Watcher] = {}
        self.started_at = time.time()
        self._started_monotonic = time.monotonic()
        self.fingerprint = fingerprint(self.store.public_key)
        #: set by the app once this daemon belongs to a palace
        self.network: Network | None = None
        self.directory: MemberDirectory | None = None
        self.start_network: Callable[[Membership], Awaitable[None]] | None = None
        #: the memory's vector worker (None when embedding is off)
        self.indexer: MemoryIndexer | None = None
        #: where the local API listens (a socket path or tcp://HOST:PORT), once it does
        self.api_address: str | None = None
        #: while ``memory rebuild`` runs: {"phase", "done", "total"} (updated by the writer thread)
        self.memory_rebuild_progress: dict[str, Any] | None = None
        #: the local API's connection statistics (set by ``api.serve_api`` once it listens)
        self.api_statistics: Callable[[], dict[str, Any]] | None = None

    def __repr__(self) -> str:
        return f"<Service origin={self.store.origin_id} watchers={len(self.watchers)}>"

    # -- small helpers -------------------------------------------------------------------------

    async def _get_event_or_404(self, event_id: Any, field: str = "event_id") -> dict[str, Any]:
        eid = clean_required(field, event_id)
        event = await self.astore.read(self.store.get_event, eid)
        if event is None:
            raise NotFound(f"event {eid!r} not found")
        return event

    def hello_result(self) -> dict[str, Any]:
        return {
            "version": PROTOCOL_VERSION, "daemon": __version__, "origin": self.store.origin_id,
            "limits": {"max_body_bytes": self.limits.max_body_bytes,
                       "max_metadata_bytes": self.limits.max_metadata_bytes,
                       "max_artifact_bytes": self.limits.max_artifact_bytes,
                       "max_frame_bytes": self.config.max_frame_bytes},
        }

    # -- status and presence -------------------------------------------------------------------

    async def op_ping(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return {"pong": True}

    async def op_status(self, args: Mapping[str, Any]) -> dict[str, Any]:
        counts = await self.astore.read(self.store.counts)
        _, latest_id = await self.astore.read(self.store.latest)
        status: dict[str, Any] = {
            "version": __version__, "protocol": PROTOCOL_VERSION, "home": str(self.config.home),
            "socket": str(self.config.socket_path) if self.config.api_endpoint.transport == "unix" else None,
            "api": self.api_address, "pid": os.getpid(),
            "origin": self.store.origin_id, "fingerprint": self.fingerprint,
            "events": counts["events"], "artifacts": counts["artifacts"], "latest_event_id": latest_id,
            "memory": {"drawers": counts["drawers"], "facts": counts["facts"],
                       "embedding": self.indexer.status() if self.indexer else None,
                       "rebuild": dict(self.memory_rebuild_progress) if self.memory_rebuild_progress else None},
            "started_at": _utc_stamp(self.started_at),
            "uptime_s": round(time.monotonic() - self._started_monotonic, 3),
            "watchers": len(self.watchers), "writer": self.astore.statistics(),
            "storage": await trio.to_thread.run_sync(self.storage_sizes),
            "palace": self.membership.to_wire() if self.membership else None,
            "network": await self._network_status(),
            # The local API's connections: open, accepted, refused by its limits, failed (set by palaced/api.py)
            "api_connections": self.api_statistics() if self.api_statistics is not None else None,
            "redactions": {"purge_pending": self.store.redactions_pending_checkpoint,
                           "refused_from_peers": self.store.refused_redactions},
        }
        status["peers"] = await self._peer_counts() if self.network else {"live": 0, "total": 0}
        status["health"] = await self.health(status)
        return status

    async def _peer_counts(self) -> dict[str, int]:
        assert self.network is not None
        heads = await self.astore.read(self.store.version_vector)
        peers = [p for p in self.network.peers_view(heads) if not p["revoked"]]
        return {"live": sum(p["state"] in ("live", "catching up") for p in peers), "total": len(peers)}

    async def _network_status(self) -> dict[str, Any] | None:
        if self.network is None:
            return None
        forks = await self.astore.read(self.store.forks)
        return {"listen": self.network.listen_addresses, "mdns": self.network.mdns_state,
                "connected": self.network.connected_peers(), "forks": len(forks),
                "limits": self.network.limits.statistics(), "link_failures": self.network.link_failures,
                "refused_next": len(self.store.refused_next), "refused_redactions": self.store.refused_redactions}

    async def op_digest(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Per origin: the highest contiguous origin_seq and its event hash, plus one fingerprint of
        the whole vector, so two machines can prove they hold the same log."""
        heads = await self.astore.read(self.store.heads)
        origins = [{"origin": o, "origin_seq": h.max_seq, "head_hash": h.head_hash.hex()} for o, h in sorted(heads.items())]
        overall = hashlib.sha256(b"".join(f"{o['origin']}:{o['origin_seq']}:{o['head_hash']}\n".encode() for o in origins))
        return {"origins": origins, "digest": overall.hexdigest(), "events": sum(o["origin_seq"] for o in origins)}

    async def op_who(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Watchers connected here, and (gossiped) those connected to every other daemon."""
        local = sorted((w.to_wire() for w in self.watchers.values()), key=lambda w: w["since"])
        me = {"peer_id": self.membership.peer_id, "name": self.membership.name} if self.membership else None
        for watcher in local:
            watcher["daemon"] = me
            watcher["local"] = True
        remote = sorted(self.remote_watchers(), key=lambda w: w["since"])
        for watcher in remote:
            watcher["local"] = False
        return {"watchers": local + remote, "count": len(local) + len(remote), "local_count": len(local)}

    def watcher_tuples(self) -> list[tuple[str, str, str]]:
        """Our watchers as presence gossip carries them: (agent, filters, since)."""
        return [(w.agent or "", w.filters, w.since) for w in self.watchers.values()]

    def _watchers_changed(self) -> None:
        if self.network is not None:
            self.network.watchers_changed()

    # -- the log -------------------------------------------------------------------------------

    async def op_append(self, args: Mapping[str, Any]) -> dict[str, Any]:
        self.require_writer()
        replicated, timeout_s = replicated_args(args)
        req = AppendRequest.from_wire(args, self.limits)
        if req.type in RESERVED_TYPES:
            raise ValidationError(f"type {req.type!r} is reserved; {RESERVED_TYPES[req.type]}", field="type")
        if req.ack_of is not None:
            await self._get_event_or_404(req.ack_of, "ack_of")
        event = await self.astore.write(lambda ctx: ctx.append(req))
        if replicated:
            # The event is committed locally whatever happens next; the reply says how far it got.
            return {**event, "replication": await self.wait_replicated(event, replicated, timeout_s)}
        return event

    async def op_get_event(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return await self._get_event_or_404(args.get("event_id"))

    async def op_list(self, args: Mapping[str, Any]) -> dict[str, Any]:
        query = ListQuery.from_wire(args)
        events = await self.astore.read(self.store.list_events, query)
        return {"events": events, "count": len(events)}

    async def _new_events_after(self, seq: int, limit: int) -> list[dict[str, Any]]:
        """Committed events with seq > ``seq`` (oldest first): from the bus ring, else SQLite."""
        events = self.bus.events_after(seq, limit)
        if events is None:
            events = await self.astore.read(self.store.events_after_seq, seq, min(limit, CATCH_UP_PAGE))
        return events

    async def op_wait(self, args: Mapping[str, Any]) -> dict[str, Any]:
        query = ListQuery.from_wire({**args, "order": "asc"})
        timeout_ms = validate_timeout_ms(args.get("timeout_ms"))
        after = None
        if query.since_event_id:
            after = await self.astore.read(self.store.resolve_seq, "since_event_id", query.since_event_id)
        if query.before_event_id:
            await self.astore.read(self.store.resolve_seq, "before_event_id", query.before_event_id)
        # Note the tip *before* querying: anything committed later is seen by the bus loop below.
        mark = self.bus.latest_seq
        events = await self.astore.read(self.store.list_events, query, after_seq=after)
        if events or query.before_event_id:
            return {"timed_out": not events, "events": events, "count": len(events)}
        cursor = max(mark, after or 0)
        with trio.move_on_after(timeout_ms / 1000):
            while True:
                await self.bus.wait_beyond(cursor)
                new = await self._new_events_after(cursor, CATCH_UP_PAGE)
                if not new:
                    continue
                cursor = new[-1]["seq"]
                matches = [e for e in new if query.matches(e)][: query.limit]
                if matches:
                    if query.preview:
                        matches = [preview_event(e) for e in matches]
                    return {"timed_out": False, "events": matches, "count": len(matches)}
        return {"timed_out": True, "events": [], "count": 0}

    async def op_subscribe(self, args: Mapping[str, Any], push: Push, conn_id: int) -> None:
        """Stream matching events to the client until it disconnects (the watch contract).

        The reply names the starting cursor; then ``batch`` pushes carry matches plus the cursor
        (the last event examined, match or not), and ``cursor`` pushes report progress over
        non-matching events at most once per second.
        """
        query = ListQuery.from_wire({**args, "order": "asc"})
        start = args.get("start", "tip")
        if start not in ("tip", "beginning", "cursor"):
            raise ValidationError("start must be 'tip', 'beginning' or 'cursor'", field="start")
        agent = clean_optional("agent", args.get("agent"))
        pid = args.get("pid") if type(args.get("pid")) is int else None  # shown by `who`; optional
        if start == "cursor":
            if not query.since_event_id:
                raise ValidationError("since_event_id is required when start is 'cursor'", field="since_event_id")
            cursor_seq = await self.astore.read(self.store.resolve_seq, "since_event_id", query.since_event_id)
            cursor_id: str | None = query.since_event_id
        elif start == "beginning":
            cursor_seq, cursor_id = 0, None
        else:
            cursor_seq, cursor_id = await self.astore.read(self.store.latest)
        watcher = Watcher(conn_id=conn_id, agent=agent, filters=query.describe(), cursor=cursor_id,
                          since=_utc_stamp(time.time()), pid=pid)
        self.watchers[conn_id] = watcher
        self._watchers_changed()
        LOGGER.info("watch started: agent=%s filters=%s from=%s", agent or "-", watcher.filters, cursor_id or start)
        try:
            await push({"push": "started", "cursor": cursor_id, "start": start})
            reported_id = cursor_id
            last_progress = 0.0
            while True:
                if cursor_id != reported_id:
                    # Progress over non-matching events is rate-limited; flush the last of it once
                    # the interval has passed, so an idle watch checkpoints the true cursor.
                    flush_at = last_progress + CURSOR_PUSH_INTERVAL_S - time.monotonic()
                    with trio.move_on_after(max(0.0, flush_at)) as flush:
                        await self.bus.wait_beyond(cursor_seq)
                    if flush.cancelled_caught:
                        await push({"push": "cursor", "cursor": cursor_id})
                        reported_id, last_progress = cursor_id, time.monotonic()
                        continue
                else:
                    await self.bus.wait_beyond(cursor_seq)
                while True:
                    new = await self._new_events_after(cursor_seq, CATCH_UP_PAGE)
                    if not new:
                        break
                    matches: list[dict[str, Any]] = []
                    for event in new:
                        if query.matches(event):
                            matches.append(preview_event(event) if query.preview else event)
                        cursor_seq, cursor_id = event["seq"], event["id"]
                        if len(matches) >= query.limit:
                            break
                    watcher.cursor = cursor_id
                    if matches:
                        await push({"push": "batch", "events": matches, "count": len(matches), "cursor": cursor_id})
                        reported_id = cursor_id
                    elif cursor_id != reported_id and time.monotonic() - last_progress >= CURSOR_PUSH_INTERVAL_S:
                        await push({"push": "cursor", "cursor": cursor_id})
                        reported_id, last_progress = cursor_id, time.monotonic()
                    if len(new) < CATCH_UP_PAGE and not matches:
                        break
        finally:
            del self.watchers[conn_id]
            self._watchers_changed()
            LOGGER.info("watch ended: agent=%s", agent or "-")

    async def op_ack(self, args: Mapping[str, Any]) -> dict[str, Any]:
        self.require_writer()
        target_id = clean_required("event_id", args.get("event_id"))
        from_agent = clean_required("from_agent", args.get("from_agent"))
        status = validate_status(args.get("status"))
        topic = clean_optional("topic", args.get("topic"))
        body = validate_body(args.get("body"), self.limits)
        metadata = args.get("metadata") or {}
        validate_metadata(metadata, self.limits)  # before queueing: the writer only sees valid jobs

        def job(ctx: WriteContext) -> dict[str, Any]:
            target = ctx.get_event(target_id)
            if target is None:
                raise NotFound(f"event {target_id!r} not found")
            req = AppendRequest.from_wire(
                {"type": "event.ack", "stream": target["stream"], "room": target["room"],
                 "topic": topic or target["topic"], "from_agent": from_agent, "to_agent": target["from_agent"],
                 "correlation_id": target["correlation_id"] or target["id"], "status": status,
                 "ack_of": target["id"], "body": body, "metadata": {**metadata, "ack_of": target["id"]}},
                self.limits,
            )
            return ctx.append(req)

        return await self.astore.write(job)

    async def op_redact(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Purge an event's body everywhere it is kept (proto/PROTOCOL.md, "Who may redact").

        Locally the event's author agent may redact it, or this daemon's operator (``operator``:
        the human at this machine; the local API belongs to one user, so this is a statement of
        intent, not a password). Peers honour the redaction when it comes from the event's own
        origin, or carries the palace CA's signature: so an event written on another daemon can be
        redacted here only by the daemon holding the palace key. A memory fact's other events (its
        invalidations, the same fact filed again) carry the same words and are redacted with it.
        """
        self.require_writer()
        target_id = clean_required("event_id", args.get("event_id"))
        from_agent = clean_required("from_agent", args.get("from_agent"))
        reason = validate_body(args.get("reason"), self.limits)
        operator = args.get("operator", False)
        if not isinstance(operator, bool):
            raise ValidationError("operator must be true or false", field="operator")
        target = await self._get_event_or_404(target_id)
        if target.get("body_redacted"):
            raise ValidationError(f"event {target_id!r} is already redacted", field="event_id")
        if not operator and from_agent != target["from_agent"]:
            raise ApiError(f"only the event's author ({target['from_agent']}) or this daemon's operator may redact "
                           f"{target_id}; if you are the operator, say so: palacectl redact {target_id} "
                           "--from-agent … --operator", code="not_permitted")
        ca_key = self._ca_key() if self.membership is not None and self.membership.can_invite else None
        palace_id = self.membership.palace_id if self.membership is not None else ""
        own_origin = self.store.origin_id

        def signer_for(ctx: WriteContext, event: Mapping[str, Any]) -> tuple[bool, str | None]:
            """(may we redact it on every replica that holds it, the CA signature that makes it so)."""
            if event["origin"] == own_origin:
                return True, None
            row = ctx.conn.execute("SELECT max_seq FROM origins WHERE origin=?", (event["origin"],)).fetchone()
            if row is None or row[0] == 0:
                return True, None  # imported history: it never leaves this replica
            if ca_key is None:
                return False, None
            return True, sign_redaction(ca_key, palace_id, event["id"])

        def job(ctx: WriteContext) -> dict[str, Any]:
            target = ctx.get_event(target_id)
            if target is None:
                raise NotFound(f"event {target_id!r} not found")
            if target.get("body_redacted"):
                raise ValidationError(f"event {target_id!r} is already redacted", field="event_id")
            allowed, _ = signer_for(ctx, target)
            if not allowed:
                raise ApiError(f"event {target_id} was written on another daemon (origin {target['origin']}): only "
                               "that daemon, or the palace owner's (the one that ran `palacectl init`), can redact "
                               "it on every replica — run the redact there", code="not_permitted")
            # In the same transaction as the redactions: what else carries the same words (a fact's
            # invalidations, the same drawer or fact filed again), found before the target's link goes.
            related = views.related_memory_events(ctx.conn, target_id)
            first: dict[str, Any] | None = None
            also: list[str] = []
            for event_id in [target_id, *related]:
                event = ctx.get_event(event_id)
                if event is None or event.get("body_redacted"):
                    continue
                allowed, signature = signer_for(ctx, event)
                if not allowed:
                    continue  # written elsewhere, and we hold no palace key: its own daemon must redact it
                metadata: dict[str, Any] = {"redacts": event_id}
                if signature is not None:
                    metadata["ca_signature"] = signature
                req = AppendRequest.from_wire(
                    {"type": "event.redact", "stream": event["stream"], "room": event["room"],
                     "from_agent": from_agent, "correlation_id": event["correlation_id"] or event["id"],
                     "body": reason, "metadata": metadata},
                    self.limits,
                )
                appended = ctx.append(req)
                ctx.redact(event_id, appended["id"])
                if first is None:
                    first = appended
                else:
                    also.append(event_id)
            if first is None:  # pragma: no cover - the target was checked above, in this transaction
                raise ValidationError(f"event {target_id!r} is already redacted", field="event_id")
            return {**first, "also_redacted": also}

        event = await self.astore.write(job)
        LOGGER.warning("event %s redacted by %s%s", target_id, from_agent, " (operator)" if operator else "")
        # Said only once it is true: a reader holding an old snapshot keeps the WAL (and the old
        # page images in it) until it lets go; the writer retries, and `status` shows it meanwhile.
        pending = self.store.redactions_pending_checkpoint
        return {**event, "purge": "pending" if pending else "done"}

    # -- artifacts and patches -----------------------------------------------------------------

    def _artifact_args(self, args: Mapping[str, Any], *, kind: str | None = None) -> dict[str, Any]:
        content = args.get("content")
        if isinstance(content, str):
            content = content.encode("utf-8", "surrogatepass")
        if not isinstance(content, (bytes, bytearray)):
            raise ValidationError("content must be bytes or a string", field="content")
        if len(content) == 0:
            raise ValidationError("content must not be empty", field="content")
        if len(content) > self.limits.max_artifact_bytes:
            raise ValidationError(
                f"content is {len(content)} bytes; maximum is {self.limits.max_artifact_bytes} bytes", field="content"
            )
        return {
            "kind": validate_artifact_kind(kind or args.get("kind")),
            "created_by": clean_required("created_by", args.get("created_by")),
            "content": bytes(content),
            "metadata_json": validate_metadata(args.get("metadata"), self.limits),
        }

    async def op_artifact_put(self, args: Mapping[str, Any]) -> dict[str, Any]:
        self.require_writer()
        fields = self._artifact_args(args)
        record = await self.astore.write(lambda ctx: ctx.put_artifact(**fields))
        record.pop("metadata", None)
        if fields["kind"] == "patch" and (warnings := _patch_warnings(fields["content"])):
            record["warnings"] = warnings
        return record

    async def op_artifact_get(self, args: Mapping[str, Any]) -> dict[str, Any]:
        key = clean_required("artifact_id", args.get("artifact_id"))
        with_content = args.get("with_content", True) is not False
        return await self.astore.read(self.store.get_artifact, key, with_content=with_content)

    async def op_patch_submit(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Store a patch and append its ``patch.ready`` in one transaction.

        Only ``content`` and ``from_agent`` are required (MemPalace also requires ``stream``;
        routing is optional there too). What is missing is taken from the work being answered,
        so that the patch lands beside its task and wakes its requester:

        * ``stream``: the stream of the first event on ``correlation_id``; with no correlation,
          or none of its events held here, ``stream must be a non-empty string``.
        * ``to_agent``: the ``from_agent`` of the ``task.request`` on ``correlation_id`` (a
          ``watch --agent`` of the requester only sees events addressed to it); without such a
          request the event has no ``to_agent``.
        """
        self.require_writer()
        from_agent = clean_required("from_agent", args.get("from_agent"))
        fields = self._artifact_args({**args, "created_by": from_agent}, kind="patch")
        correlation_id = clean_optional("correlation_id", args.get("correlation_id"))
        stream = clean_optional("stream", args.get("stream"))
        to_agent = clean_optional("to_agent", args.get("to_agent"))
        if stream is None:
            if correlation_id is None:
                raise ValidationError(
                    "stream must be a non-empty string (or pass the correlation_id of the task this patch answers, "
                    "to take its stream)", field="stream")
            # Default to the stream of the work being answered, so the patch lands beside its task.
            related = await self.astore.read(self.store.events_by_correlation, correlation_id, 1)
            if not related:
                raise ValidationError(
                    f"stream must be a non-empty string (no event on correlation {correlation_id!r} to take it from)",
                    field="stream",
                )
            stream = related[0]["stream"]
        if to_agent is None and correlation_id is not None:
            query = ListQuery.from_wire({"types": ["task.request"], "correlation_ids": [correlation_id], "limit": 1})
            requests = await self.astore.read(self.store.list_events, query)
            if requests:
                to_agent = requests[0]["from_agent"]
        wire = {
            "type": "patch.ready", "stream": stream, "room": args.get("room") or "patches",
            "topic": args.get("topic"), "from_agent": from_agent,
            "to_agent": to_agent, "correlation_id": correlation_id,
            "branch": args.get("branch"), "base_commit": args.get("base_commit"), "status": "ready",
            "body": args.get("body"), "metadata": args.get("metadata"),
        }
        AppendRequest.from_wire({**wire, "artifact_ids": []}, self.limits)  # validate before writing

        def job(ctx: WriteContext) -> dict[str, Any]:
            artifact = ctx.put_artifact(**fields)
            event = ctx.append(AppendRequest.from_wire({**wire, "artifact_ids": [artifact["id"]]}, self.limits))
            return {"artifact": artifact, "event": event}

        result = await self.astore.write(job)
        result["artifact"].pop("metadata", None)
        if warnings := _patch_warnings(fields["content"]):
            result["artifact"]["warnings"] = warnings
        return result

    # -- tasks ---------------------------------------------------------------------------------

    async def op_task_create(self, args: Mapping[str, Any]) -> dict[str, Any]:
        self.require_writer()
        req, handoff = tasks.build_task_request(args, os.urandom(4).hex(), self.limits)
        event = await self.astore.write(lambda ctx: ctx.append(req))
        return {"task": event, "handoff": handoff}

    async def op_task_show(self, args: Mapping[str, Any]) -> dict[str, Any]:
        correlation_id = clean_required("correlation_id", args.get("correlation_id"))
        events = await self.astore.read(self.store.events_by_correlation, correlation_id)
        view = tasks.derive_task(correlation_id, events)
        if view is None:
            raise NotFound(f"task {correlation_id!r} not found")
        return view

    async def op_task_list(self, args: Mapping[str, Any]) -> dict[str, Any]:
        agent = clean_optional("agent", args.get("agent"))
        open_only = args.get("open", False) is True
        query = ListQuery.from_wire({"types": ["task.request"], "limit": 500, "order": "desc"})
        requests = await self.astore.read(self.store.list_events, query)
        views = []
        for request in requests:
            if agent and agent not in (request["from_agent"], request.get("to_agent")) and request.get("to_agent") != "*":
                continue
            cid = request["correlation_id"] or request["id"]
            events = await self.astore.read(self.store.events_by_correlation, cid)
            view = tasks.derive_task(cid, events)
            if view is None or (open_only and view["terminal"]):
                continue
            view.pop("events")
            view["role"] = ("requester" if agent == view["requested_by"] else "assignee") if agent else None
            views.append(view)
        return {"tasks": views, "count": len(views)}


def op_table(service: Service) -> dict[str, Callable[[Mapping[str, Any]], Awaitable[Any]]]:
    """Request/reply operations by name (``hello`` and ``subscribe`` are handled by the API layer)."""
    return {
        name.removeprefix("op_"): getattr(service, name)
        for name in dir(service)
        if name.startswith("op_") and name != "op_subscribe"
    }


def api_error_for(exc: BaseException) -> ApiError:
    """Map an unexpected handler exception to an ``internal`` error (the traceback goes to the log)."""
    return exc if isinstance(exc, ApiError) else ApiError(f"internal error: {type(exc).__name__}: {exc}", code="internal")
