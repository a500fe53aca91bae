"""Operations on the log itself: append, read, wait, watch, acknowledge, redact, and its digest.

Owns: ``append``, ``get_event``, ``list``, ``wait``, ``ack``, ``redact`` and ``digest``
(proto/PROTOCOL.md, "Operations"), plus ``subscribe``, which streams rather than replies and is
called by the API layer directly. Writes go through the group-commit writer (store/aio.py); waits
and subscriptions are woken by the event bus, never by polling, and hold no read transaction
while they wait. Types that change how other events are shown (redactions, revocations, memory)
are written only by the daemon's own operations, never by ``append``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import trio

from palace_proto.appends import RESERVED_TYPES, append_many_requests, append_request, reply_shape
from palace_proto.envelope import CommittedEvent, preview_event
from palace_proto.errors import ApiError, NotFound, NotPermitted, ValidationError
from palace_proto.event_fields import PublicEvent, reply_to, thread
from palace_proto.pki import sign_redaction
from palace_proto.validation import (
    AppendRequest,
    ListQuery,
    clean_optional,
    clean_required,
    validate_body,
    validate_metadata,
    validate_status,
    validate_timeout_ms,
)
from palace_proto.workers import check_activity

from ..clock import utc_now_seconds
from ..feature import Follower, WakeRule
from ..store import WriteContext, append_event, append_record, event_by_id, event_search, follow
from ..store import origins as store_origins
from ..store import writes as store_writes
from .context import Context, Watcher
from .network import replicated_args, require_peers_for, wait_replicated

__all__ = ["OPS", "RESERVED_TYPES", "LogFollower", "Push", "fold_activity", "index_text", "subscribe"]

LOGGER: Final = logging.getLogger("palaced.handlers.log")
# Why 1 s: cursor-only progress (events examined, none matched) matters only for checkpoints; a
# watcher that re-examines up to a second of non-matching events loses nothing.
CURSOR_PUSH_INTERVAL_S: Final = 1.0
# Why 500: the page size for catching up from SQLite after a gap (same cap as list).
CATCH_UP_PAGE: Final = 500

#: how ``subscribe`` sends a push to its client (the API layer adds the request id)
Push = Callable[[dict[str, Any]], Awaitable[None]]


async def append(ctx: Context, args: Mapping[str, Any]) -> Mapping[str, Any]:
    """Append one event; the reply is the whole public event, or with ``reply: "slim"`` its
    ``SLIM_REPLY_FIELDS`` only (whose public object is then never built, unless a watcher reads it)."""
    ctx.require_writer()
    replicated, timeout_s = replicated_args(args)
    require_peers_for(ctx, replicated)
    req = append_request(args, ctx.limits)
    slim = reply_shape(args) == "slim"

    def job(w: WriteContext) -> CommittedEvent:
        # In the writing transaction, as append_many does: no read (and thread hop) ahead of every
        # ack, and the event it names is there when the ack is written (issue 27).
        if req.ack_of is not None and event_by_id(w, req.ack_of) is None:
            raise NotFound(f"event {req.ack_of!r} not found")
        return append_record(w, req)  # judged by the authority table there, as every write is

    record = await ctx.store.write(job)
    event: Mapping[str, Any] = _slim(record) if slim else record.public
    if replicated:
        # The event is committed locally whatever happens next; the reply says how far it got.
        position = {"origin": record.signed.origin, "origin_seq": record.signed.origin_seq}
        return {**event, "replication": await wait_replicated(ctx, position, replicated, timeout_s)}
    return event


def _slim(record: CommittedEvent) -> dict[str, Any]:
    """A stored event's slim reply (``SLIM_REPLY_FIELDS``), read off its record."""
    signed = record.signed
    return {"id": signed.id, "seq": record.seq, "origin_seq": signed.origin_seq, "created_at": signed.created_at}


async def append_many(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Append a list of events in one commit, all or none (bulk writers, ``palacectl append
    --ndjson``). Each event is what ``append`` takes; the reply is slim — per event its id, seq,
    origin_seq and created_at, in order — since the caller sent the rest."""
    ctx.require_writer()
    requests = append_many_requests(args.get("events"), ctx.limits)

    def job(w: WriteContext) -> list[CommittedEvent]:
        appended = []
        for index, req in enumerate(requests):
            try:
                if req.ack_of is not None and event_by_id(w, req.ack_of) is None:
                    raise NotFound(f"ack_of names an unknown event {req.ack_of!r}")
                appended.append(append_record(w, req))
            except (ValidationError, NotFound, NotPermitted) as exc:
                # The job fails as a whole: nothing of this request is written.
                raise type(exc)(f"events[{index}]: {exc.message}; nothing was appended") from None
        return appended

    records = await ctx.store.write(job)
    return {"events": [_slim(record) for record in records], "count": len(records), "origin": ctx.store.origin_id}


async def get_event(ctx: Context, args: Mapping[str, Any]) -> PublicEvent:
    return ctx.store.agents.annotate([await ctx.event_or_404(args.get("event_id"))])[0]


async def list_events(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    query = ListQuery.from_wire(args)
    if query.text is not None:
        await index_text(ctx)  # a search never misses a committed event the indexer has not reached
    events = ctx.store.agents.annotate(await ctx.store.list_events(query))
    return {"events": events, "count": len(events)}


async def _catch_up(ctx: Context, job: Callable[[WriteContext], tuple[int, int]]) -> int:
    """Run a job of derived data (``job(ctx)`` -> its new position, the events it took) chunk after
    chunk until it reaches the newest committed event; returns its position. Committed without
    waiting for their fsync, a short chunk at a time, so it never holds an append up for long
    (issue 27)."""
    target = ctx.bus.latest_seq
    while True:
        position, taken = await ctx.store.write(job, durable=False, derived=True)
        if taken == 0 or position >= target:
            return position


async def index_text(ctx: Context) -> int:
    """Index event bodies for text search up to the newest committed event
    (``store/event_search.py``); returns the index's position."""
    return await _catch_up(ctx, event_search.index_pending)


async def fold_activity(ctx: Context) -> int:
    """Fold the events committed so far into the agent activity counts (``store/follow.py``);
    returns the fold's position."""
    return await _catch_up(ctx, follow.fold_activity)


class LogFollower(Follower):
    """Keeps what is derived from the log after its commits up to date in the background (the
    full-text index of event bodies, the agent activity counts): once the writer has been idle
    for ``IDLE_S``, or ``BACKLOG`` events wait, whichever comes first (never inside an append's
    own transaction, and not between the appends of a busy moment, where its chunks would hold
    appends up: issue 27, wake p99). Nothing waits for it: ``list`` with text indexes what is
    left first, and the activity read adds what is not folded yet."""

    #: Why 0.05 s: how often it looks (and the shortest pause it takes as the writer being idle).
    SETTLE_S: Final = 0.05
    #: Why 0.05 s: a pause this long is a gap between an agent's steps, not a burst going on.
    IDLE_S: Final = 0.05
    #: Why 5,000: never idle means a steady stream; a search then catches up at most this many
    #: events itself (about 0.1 s), and the indexer does it in chunks between the appends.
    BACKLOG: Final = 5_000
    doing = "bring the text index and the activity counts up to date"
    wait_first = True

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.position = 0

    def __repr__(self) -> str:
        return f"<LogFollower at={self.position}>"

    async def catch_up(self) -> int:
        try:
            self.position = min(await index_text(self.ctx), await fold_activity(self.ctx))
        except ApiError:
            self.position = self.ctx.bus.latest_seq  # tried again after the next commit
            raise
        return self.position

    async def wait_next(self) -> None:
        ctx = self.ctx
        await ctx.bus.wait_beyond(self.position, background=True)
        while True:
            await trio.sleep(self.SETTLE_S)
            if ctx.store.idle_s >= self.IDLE_S or ctx.bus.latest_seq - self.position >= self.BACKLOG:
                return


def _no_text(query: ListQuery, op: str) -> None:
    if query.text is not None:
        raise ValidationError(f"text searches the log as it is (list); {op} takes the exact filters only",
                              field="text")


async def wait(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    query = ListQuery.from_wire({**args, "order": "asc"})
    _no_text(query, "wait")
    timeout_ms = validate_timeout_ms(args.get("timeout_ms"))
    after = None
    if query.since_event_id:
        after = await ctx.store.resolve_seq("since_event_id", query.since_event_id)
    if query.before_event_id:
        await ctx.store.resolve_seq("before_event_id", query.before_event_id)
    # Note the tip *before* querying: anything committed later is seen by the bus loop below.
    mark = ctx.bus.latest_seq
    events = ctx.store.agents.annotate(await ctx.store.list_events(query, after_seq=after))
    if events or query.before_event_id:
        return {"timed_out": not events, "events": events, "count": len(events)}
    cursor = max(mark, after or 0)
    with trio.move_on_after(timeout_ms / 1000):
        while True:
            await ctx.bus.wait_beyond(cursor)
            new = await ctx.committed_after(cursor, CATCH_UP_PAGE)
            if not new:
                continue
            cursor = new[-1]["seq"]
            matches = ctx.store.agents.annotate([e for e in new if query.matches(e)][: query.limit])
            if matches:
                if query.preview:
                    matches = [preview_event(e) for e in matches]
                return {"timed_out": False, "events": matches, "count": len(matches)}
    return {"timed_out": True, "events": [], "count": 0}


async def subscribe(ctx: Context, args: Mapping[str, Any], push: Push, conn_id: int) -> None:
    """Stream matching events to the client until it disconnects (the watch contract).

    The reply names the starting cursor; then ``batch`` pushes carry matches plus the cursor
    (the last event examined, match or not), and ``cursor`` pushes report progress over
    non-matching events at most once per second. The watcher is registered in ``ctx.watchers``
    for as long as this runs, and released however it ends.
    """
    query = ListQuery.from_wire({**args, "order": "asc"})
    _no_text(query, "subscribe")
    start = args.get("start", "tip")
    if start not in ("tip", "beginning", "cursor"):
        raise ValidationError("start must be 'tip', 'beginning' or 'cursor'", field="start")
    agent = clean_optional("agent", args.get("agent"))
    pid = args.get("pid") if type(args.get("pid")) is int else None  # shown by `who`; optional
    worker = check_activity(args["worker"]) if args.get("worker") is not None else None
    if start == "cursor":
        if not query.since_event_id:
            raise ValidationError("since_event_id is required when start is 'cursor'", field="since_event_id")
        cursor_seq = await ctx.store.resolve_seq("since_event_id", query.since_event_id)
        cursor_id: str | None = query.since_event_id
    elif start == "beginning":
        cursor_seq, cursor_id = 0, None
    else:
        cursor_seq, cursor_id = await ctx.store.latest()
    if worker is not None and agent is None:
        raise ValidationError("a worker's watch needs its agent", field="agent")
    # A feature may keep an agent's watch asleep on some of its events (a room event to everyone
    # wakes only the room's members: features/rooms.py); naming a correlation id asks for it anyway.
    wake_rules = ctx.features.wake_rules(ctx, agent) if agent is not None and query.correlation_ids is None else []
    watcher = Watcher(conn_id=conn_id, agent=agent, filters=query.describe(), cursor=cursor_id,
                      since=utc_now_seconds(), pid=pid, worker=worker, token=secrets.token_hex(16))
    ctx.watchers[conn_id] = watcher
    ctx.watchers_changed()
    LOGGER.info("watch started: agent=%s filters=%s from=%s%s", agent or "-", watcher.filters, cursor_id or start,
                f" (worker, runner {worker['runner']})" if worker else "")
    try:
        await push({"push": "started", "cursor": cursor_id, "start": start, "watch_token": watcher.token})
        reported_id = cursor_id
        last_progress = 0.0
        while True:
            if cursor_id != reported_id:
                # Progress over non-matching events is rate-limited; flush the last of it once
                # the interval has passed, so an idle watch checkpoints the true cursor.
                flush_at = last_progress + CURSOR_PUSH_INTERVAL_S - time.monotonic()
                with trio.move_on_after(max(0.0, flush_at)) as flush:
                    await ctx.bus.wait_beyond(cursor_seq)
                if flush.cancelled_caught:
                    await push({"push": "cursor", "cursor": cursor_id})
                    reported_id, last_progress = cursor_id, time.monotonic()
                    continue
            else:
                await ctx.bus.wait_beyond(cursor_seq)
            while True:
                new = await ctx.committed_after(cursor_seq, CATCH_UP_PAGE)
                if not new:
                    break
                matches: list[PublicEvent] = []
                for event in new:
                    if query.matches(event) and await _wakes(wake_rules, event):
                        matches.append(preview_event(event) if query.preview else event)
                    cursor_seq, cursor_id = event["seq"], event["id"]
                    if len(matches) >= query.limit:
                        break
                watcher.cursor = cursor_id
                if matches:
                    matches = ctx.store.agents.annotate(matches)
                    await push({"push": "batch", "events": matches, "count": len(matches), "cursor": cursor_id})
                    reported_id = cursor_id
                elif cursor_id != reported_id and time.monotonic() - last_progress >= CURSOR_PUSH_INTERVAL_S:
                    await push({"push": "cursor", "cursor": cursor_id})
                    reported_id, last_progress = cursor_id, time.monotonic()
                if len(new) < CATCH_UP_PAGE and not matches:
                    break
                # A catch-up of many pages lets others run between them (a push that fits in the
                # socket buffer does not yield: api.Connection.send).
                await trio.lowlevel.checkpoint()
    finally:
        del ctx.watchers[conn_id]
        ctx.watchers_changed()
        LOGGER.info("watch ended: agent=%s", agent or "-")


async def _wakes(rules: list[WakeRule], event: PublicEvent) -> bool:
    for rule in rules:
        if not await rule.wakes(event):
            return False
    return True


async def watch_update(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """A worker says what it runs now: its watch (named by the secret ``watch_token`` its
    ``started`` push carried, so only its own client can change it) takes the new activity,
    and the peers hear of it with the next presence record."""
    token = args.get("watch_token")
    if not isinstance(token, str) or not 0 < len(token) <= 64:
        raise ValidationError("watch_token must be the token of the watch's started push", field="watch_token")
    worker = check_activity(args.get("worker"))
    for watcher in ctx.watchers.values():
        if hmac.compare_digest(watcher.token, token):
            if watcher.worker is None:
                raise ValidationError("this watch is not a worker's (subscribe with worker first)", field="watch_token")
            watcher.worker = worker
            ctx.watchers_changed()
            return {"updated": True, "worker": worker}
    raise NotFound("no live watch has this watch_token (it ended: subscribe again)")


async def ack(ctx: Context, args: Mapping[str, Any]) -> PublicEvent:
    ctx.require_writer()
    target_id = clean_required("event_id", args.get("event_id"))
    from_agent = clean_required("from_agent", args.get("from_agent"))
    status = validate_status(args.get("status"))
    topic = clean_optional("topic", args.get("topic"))
    body = validate_body(args.get("body"), ctx.limits)
    metadata = args.get("metadata") or {}
    validate_metadata(metadata, ctx.limits)  # before queueing: the writer only sees valid jobs

    def job(w: WriteContext) -> PublicEvent:
        target = event_by_id(w, target_id)
        if target is None:
            raise NotFound(f"event {target_id!r} not found")
        # A feature's own rule on what an ack may be (a claim by ack is a claim: the queue's rules hold).
        ctx.features.check_ack(ctx, w, target, from_agent, status)
        # On the target's thread (or a thread of its own: the ack's correlation is then the target).
        routing = reply_to(target)
        routing["correlation_id"] = routing["correlation_id"] or routing["ack_of"]
        routing["topic"] = topic or routing["topic"]
        req = AppendRequest.from_wire(
            {**routing, "type": "event.ack", "from_agent": from_agent, "status": status, "body": body,
             "metadata": {**metadata, "ack_of": routing["ack_of"]}},
            ctx.limits,
        )
        return append_event(w, req)

    return await ctx.store.write(job)


async def redact(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Purge an event's body everywhere it is kept (proto/PROTOCOL.md, "Who may redact").

    Locally the event's author agent may redact it, or this daemon's operator (``operator``:
    the human at this machine; the local API belongs to one user, so this is a statement of
    intent, not a password). Peers honour the redaction when it comes from the event's own
    origin, or carries the palace CA's signature: so an event written on another daemon can be
    redacted here only by the daemon holding the palace key. A memory fact's other events (its
    invalidations, the same fact filed again) carry the same words and are redacted with it.
    """
    ctx.require_writer()
    target_id = clean_required("event_id", args.get("event_id"))
    from_agent = clean_required("from_agent", args.get("from_agent"))
    reason = validate_body(args.get("reason"), ctx.limits)
    operator = args.get("operator", False)
    if not isinstance(operator, bool):
        raise ValidationError("operator must be true or false", field="operator")
    ca_key = ctx.ca_key() if ctx.membership is not None and ctx.membership.can_invite else None
    palace_id = ctx.membership.palace_id if ctx.membership is not None else ""
    own_origin = ctx.store.origin_id

    def signer_for(w: WriteContext, event: Mapping[str, Any]) -> tuple[bool, str | None]:
        """(may we redact it on every replica that holds it, the CA signature that makes it so)."""
        if event["origin"] == own_origin:
            return True, None
        if store_origins.head_in(w, event["origin"]) is None:
            return True, None  # imported history: it never leaves this replica
        if ca_key is None:
            return False, None
        return True, sign_redaction(ca_key, palace_id, event["id"])

    def job(w: WriteContext) -> dict[str, Any]:
        target = event_by_id(w, target_id)
        if target is None:
            raise NotFound(f"event {target_id!r} not found")
        if target.get("body_redacted"):
            raise ValidationError(f"event {target_id!r} is already redacted", field="event_id")
        # Checked once, here in the writing transaction (issue 27: it was read and checked before too).
        if not operator and from_agent != target["from_agent"]:
            raise ApiError(f"only the event's author ({target['from_agent']}) or this daemon's operator may redact "
                           f"{target_id}; if you are the operator, say so: palacectl redact {target_id} "
                           "--from-agent … --operator", code="not_permitted")
        allowed, _ = signer_for(w, target)
        if not allowed:
            raise ApiError(f"event {target_id} was written on another daemon (origin {target['origin']}): only "
                           "that daemon, or the palace owner's (the one that ran `palacectl init`), can redact "
                           "it on every replica — run the redact there", code="not_permitted")
        # In the same transaction as the redactions: what else carries the same words (a fact's
        # invalidations, the same drawer or fact filed again), found before the target's link goes.
        related = ctx.features.redaction_related(w, target_id)
        first: PublicEvent | None = None
        also: list[str] = []
        for event_id in [target_id, *related]:
            event = event_by_id(w, event_id)
            if event is None or event.get("body_redacted"):
                continue
            allowed, signature = signer_for(w, event)
            if not allowed:
                continue  # written elsewhere, and we hold no palace key: its own daemon must redact it
            metadata: dict[str, Any] = {"redacts": event_id}
            if signature is not None:
                metadata["ca_signature"] = signature
            routing = thread(event["stream"], event["room"], event["correlation_id"] or event["id"])
            req = AppendRequest.from_wire(
                {**routing, "type": "event.redact", "from_agent": from_agent, "body": reason, "metadata": metadata},
                ctx.limits)
            appended = append_event(w, req)
            store_writes.redact(w, event_id, appended["id"])
            if first is None:
                first = appended
            else:
                also.append(event_id)
        if first is None:  # pragma: no cover - the target was checked above, in this transaction
            raise ValidationError(f"event {target_id!r} is already redacted", field="event_id")
        return {**first, "also_redacted": also}

    event = await ctx.store.write(job)
    LOGGER.warning("event %s redacted by %s%s", target_id, from_agent, " (operator)" if operator else "")
    # Said only once it is true: a reader holding an old snapshot keeps the WAL (and the old
    # page images in it) until it lets go; the writer retries, and `status` shows it meanwhile.
    pending = ctx.store.wal.purge_pending
    return {**event, "purge": "pending" if pending else "done"}


async def digest(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Per origin: the highest contiguous origin_seq and its event hash, plus one fingerprint of
    the whole vector, so two machines can prove they hold the same log."""
    heads = ctx.store.heads()  # kept in memory: no read
    origins = [{"origin": o, "origin_seq": h.max_seq, "head_hash": h.head_hash.hex()} for o, h in sorted(heads.items())]
    overall = hashlib.sha256(b"".join(f"{o['origin']}:{o['origin_seq']}:{o['head_hash']}\n".encode() for o in origins))
    return {"origins": origins, "digest": overall.hexdigest(), "events": sum(o["origin_seq"] for o in origins)}


OPS: Final = {
    "append": append,
    "append_many": append_many,
    "get_event": get_event,
    "list": list_events,
    "wait": wait,
    "ack": ack,
    "watch_update": watch_update,
    "redact": redact,
    "digest": digest,
}
