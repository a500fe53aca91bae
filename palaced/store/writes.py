"""The rows a write job adds: local appends (validated, signed, chained), stored events, artifacts
and redactions.

Owns: growing this replica's chain inside a batch (``Chain``: sealed here, moved on once stored;
the committed vector takes the head once per batch, batch.py), the one insert every event goes
through (what the features keep beside the log follows it in the same transaction: parts.py; it
makes the event's one ``CommittedEvent`` record, which the batch hands to the bus), and purging a
redacted body with what the features derived from it. Each function takes the job's ``WriteContext`` (its
connection, chain, running batch, agent registry, limits and WAL). Writer thread only, inside a batch's transaction (batch.py).
This is the append hot path: keep it to these few calls.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from palace_proto.authority import written_as_daemon
from palace_proto.canonical import canonical_json
from palace_proto.envelope import CommittedEvent, SignedEvent
from palace_proto.errors import NotPermitted, ValidationError
from palace_proto.event_fields import PublicEvent
from palace_proto.identity import (
    AGENT_EVENT_ROOM,
    AGENT_EVENT_STREAM,
    REGISTER,
    REGISTRY_TYPES,
    SYSTEM_AGENT,
)
from palace_proto.ids import artifact_id_for_sha256
from palace_proto.validation import AppendRequest

from ..clock import utc_now
from . import authority, event_search
from .errors import StoreError
from .fetch import all_rows
from .queries import artifact_record
from .rows import INSERT_EVENT, insert_params

if TYPE_CHECKING:
    from .state import WriteContext

__all__ = ["append_event", "append_record", "append_system", "insert_event", "put_artifact", "redact"]


def append_event(ctx: WriteContext, req: AppendRequest) -> PublicEvent:
    """``append_record``'s event as its public object."""
    return append_record(ctx, req).public


def append_record(ctx: WriteContext, req: AppendRequest) -> CommittedEvent:
    """Sign ``req`` as the next event of our origin and store it; its record (whose public object
    is built only if someone reads it: a slim reply does not). The batch gets the record, after
    that of any event stored before it (a registration).

    The agent it is written as must be ours: an agent nobody holds yet is registered to this
    daemon first, in the same transaction (an ``agent.register`` just before it), and so is one
    of ours that this origin has not registered yet; one another daemon holds, or a retired one,
    is refused (``AgentElsewhere``, ``AgentRetired``). ``palaced`` writes only its notices. Then
    the authority table judges it, in this transaction, the way every replica will
    (``authority.refusal``): a write it would flag is refused (``NotPermitted``), nothing written.
    """
    conn = ctx.conn
    for artifact_id in req.artifact_ids:
        if conn.execute("SELECT 1 FROM artifacts WHERE id=?", (artifact_id,)).fetchone() is None:
            raise ValidationError(
                f"artifact_ids references unknown artifact {artifact_id!r}", field="artifact_ids"
            )
    agent = req.from_agent
    if agent == SYSTEM_AGENT:
        if req.type not in written_as_daemon():
            raise ValidationError(f"from_agent {SYSTEM_AGENT!r} is the daemon's own id; write as your agent id",
                                  field="from_agent")
    elif ctx.agents.needs_registration(ctx, agent):
        ctx.agents.check_room(ctx, agent)
        _store_sealed(ctx, ctx.chain.seal(
            type=REGISTER, stream=AGENT_EVENT_STREAM, room=AGENT_EVENT_ROOM, topic=agent, from_agent=SYSTEM_AGENT,
            body=f"{agent} is registered to this daemon",
            metadata_json=canonical_json(ctx.agents.register_metadata(agent))))
    refused = authority.refusal(ctx, req)
    if refused is not None:
        raise NotPermitted(refused)
    return _store_sealed(ctx, ctx.chain.seal_request(req))


def append_system(ctx: WriteContext, req: AppendRequest) -> PublicEvent:
    """Store a registry event the daemon writes itself (``agent register``, ``transfer``,
    ``retire``): as ``palaced``, checked by the handler that built it, never by a client."""
    if req.type not in REGISTRY_TYPES or req.from_agent != SYSTEM_AGENT:
        raise ValidationError(f"append_system takes registry events written as {SYSTEM_AGENT}", field="type")
    if req.type == REGISTER:
        agent = json.loads(req.metadata_json).get("agent")
        if agent not in ctx.agents.registered_by(ctx, ctx.chain.origin):
            ctx.agents.check_room(ctx, str(agent))
    return _store_sealed(ctx, ctx.chain.seal(type=req.type, stream=req.stream, room=req.room, topic=req.topic,
                                             from_agent=req.from_agent, body=req.body,
                                             metadata_json=req.metadata_json)).public


def _store_sealed(ctx: WriteContext, event: SignedEvent) -> CommittedEvent:
    """Store ``event``, just sealed as the next of our chain, and move the chain on to it; its
    record (the batch gets it too)."""
    record = insert_event(ctx, event)
    ctx.batch.events.append(record)
    # The committed vector takes the head once per batch (batch.py); our origins row, when the store opens.
    chain = ctx.chain
    chain.seq, chain.head_hash = event.origin_seq, event.event_hash
    return record


def insert_event(ctx: WriteContext, ev: SignedEvent, *, history: bool = False) -> CommittedEvent:
    """Store ``ev`` (already verified or signed here); its record, with its new local ``seq``."""
    conn = ctx.conn
    conn.execute(INSERT_EVENT, insert_params(ev))
    # Taken before the store parts write rows of their own: last_insert_rowid() would then be a
    # drawer's or a fact's, and the event would be published with that for its seq (issue 26: the
    # bus never moved past it, so no link pushed memory events and no local wait woke on them).
    seq = conn.last_insert_rowid()
    # What the features keep beside the log follows it in the same transaction, local appends and
    # peers' events alike (the task threads, the usage reports, the memory views: parts.py).
    for stored in ctx.parts.stored:
        stored(ctx, ev, seq)
    if not history and ev.type in REGISTRY_TYPES:  # history's registry is another palace's: never counts here
        ctx.batch.registry.append(ev)
    return CommittedEvent(seq, ev, history=history)


def put_artifact(ctx: WriteContext, *, kind: str, created_by: str, content: bytes,
                 metadata_json: str = "{}") -> dict[str, Any]:
    """Store a blob under its sha256 (once: the same content again is the same artifact); its record."""
    if len(content) > ctx.limits.max_artifact_bytes:
        raise ValidationError(
            f"content is {len(content)} bytes; maximum is {ctx.limits.max_artifact_bytes} bytes",
            field="content",
        )
    digest = hashlib.sha256(content).hexdigest()
    artifact_id = artifact_id_for_sha256(digest)
    conn = ctx.conn
    conn.execute(
        "INSERT INTO artifacts (id, sha256, kind, size_bytes, content, created_by, created_at, metadata) "
        "VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(sha256) DO NOTHING",
        (artifact_id, digest, kind, len(content), content, created_by, utc_now(), metadata_json),
    )
    record = artifact_record(conn, artifact_id, with_content=False)
    assert record is not None
    return record


def redact(ctx: WriteContext, event_id: str, redact_event_id: str) -> None:
    """Purge the body of ``event_id`` (redacted by ``redact_event_id``), and what the views hold of it."""
    conn = ctx.conn
    conn.execute("INSERT OR IGNORE INTO redactions VALUES (?, ?)", (event_id, redact_event_id))
    for seq, body in all_rows(conn.execute("SELECT seq, body FROM events WHERE id=? AND body IS NOT NULL",
                                           (event_id,))):
        event_search.forget(conn, seq, body)  # its words leave the full-text index with it
    changed = conn.execute(
        "UPDATE events SET body=NULL WHERE id=? AND body IS NOT NULL RETURNING seq", (event_id,)
    ).fetchall()
    # After the body is gone: the features forget what they derived from it (parts.py).
    for redacted in ctx.parts.redacted:
        redacted(ctx, event_id)
    if changed:
        ctx.wal.purge_pending = True
    ctx.batch.purged.append(event_id)  # the bus scrubs it from its ring once committed


def put_verified_artifact(ctx: WriteContext, *, sha256: str, kind: str, created_by: str, created_at: str,
                          metadata_json: str, content: bytes) -> None:
    """Store an artifact that arrived from a peer or a file (the caller checked the sha256; the
    store checks again)."""
    if hashlib.sha256(content).hexdigest() != sha256:
        raise StoreError("artifact content does not match its sha256")
    ctx.conn.execute(
        "INSERT INTO artifacts (id, sha256, kind, size_bytes, content, created_by, created_at, metadata) "
        "VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(sha256) DO NOTHING",
        (artifact_id_for_sha256(sha256), sha256, kind, len(content), content, created_by, created_at, metadata_json),
    )
