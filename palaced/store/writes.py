"""The rows a write job adds: local appends (validated, signed, chained), stored events, artifacts
and redactions.

Owns: this replica's chain as it grows inside a batch (``store._origin_seq``/``_head_hash``; the
origins row itself is written once per batch, by batch.py), the one insert every event goes
through (the memory views follow it in the same transaction, and it is noted for the
committed-signed cache unless it is history), and purging a redacted body with what the views
derived from it. Writer thread only, inside a batch's transaction (batch.py). This is the append
hot path: keep it to these few calls.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from palace_proto.envelope import SignedEvent, seal_event
from palace_proto.errors import ValidationError
from palace_proto.ids import artifact_id_for_sha256
from palace_proto.validation import AppendRequest

from . import memory_views
from .clock import utc_now
from .queries import artifact_record, signed_event_at
from .rows import INSERT_EVENT, insert_params

if TYPE_CHECKING:
    from .store import Store

__all__ = ["append_event", "insert_event", "put_artifact", "redact"]


def append_event(store: Store, req: AppendRequest) -> dict[str, Any]:
    """Sign ``req`` as the next event of our origin and store it; its public object."""
    conn = store._conn
    for artifact_id in req.artifact_ids:
        if conn.execute("SELECT 1 FROM artifacts WHERE id=?", (artifact_id,)).fetchone() is None:
            raise ValidationError(
                f"artifact_ids references unknown artifact {artifact_id!r}", field="artifact_ids"
            )
    seq = store._origin_seq + 1
    event = seal_event(
        store._key, origin=store.origin_id, origin_seq=seq, prev_hash=store._head_hash,
        created_at=utc_now(), type=req.type, stream=req.stream, room=req.room,
        from_agent=req.from_agent, body=req.body, metadata_json=req.metadata_json,
        topic=req.topic, to_agent=req.to_agent, correlation_id=req.correlation_id,
        branch=req.branch, base_commit=req.base_commit, status=req.status, ack_of=req.ack_of,
        artifact_ids=req.artifact_ids,
    )
    local_seq = insert_event(store, event)
    # The origins row (the version vector) is written once per batch, in the same transaction.
    store._origin_seq, store._head_hash = seq, event.event_hash
    return event.to_public(local_seq)


def insert_event(store: Store, ev: SignedEvent, *, history: bool = False) -> int:
    """Store ``ev`` (already verified or signed here); its new local ``seq``."""
    conn = store._conn
    conn.execute(INSERT_EVENT, insert_params(ev))
    # The memory views follow the log in the same transaction (local appends and peer events alike).
    memory_views.materialise(conn, ev)
    if not history:  # imported history is never offered to peers: nothing to keep for them
        store._batch_signed.append(ev)
    return conn.last_insert_rowid()


def put_artifact(store: Store, *, kind: str, created_by: str, content: bytes,
                 metadata_json: str = "{}") -> dict[str, Any]:
    """Store a blob under its sha256 (once: the same content again is the same artifact); its record."""
    if len(content) > store.limits.max_artifact_bytes:
        raise ValidationError(
            f"content is {len(content)} bytes; maximum is {store.limits.max_artifact_bytes} bytes",
            field="content",
        )
    digest = hashlib.sha256(content).hexdigest()
    artifact_id = artifact_id_for_sha256(digest)
    conn = store._conn
    conn.execute(
        "INSERT INTO artifacts (id, sha256, kind, size_bytes, content, created_by, created_at, metadata) "
        "VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(sha256) DO NOTHING",
        (artifact_id, digest, kind, len(content), content, created_by, utc_now(), metadata_json),
    )
    record = artifact_record(conn, artifact_id, with_content=False)
    assert record is not None
    return record


def redact(store: Store, event_id: str, redact_event_id: str) -> None:
    """Purge the body of ``event_id`` (redacted by ``redact_event_id``), and what the views hold of it."""
    conn = store._conn
    conn.execute("INSERT OR IGNORE INTO redactions VALUES (?, ?)", (event_id, redact_event_id))
    changed = conn.execute(
        "UPDATE events SET body=NULL WHERE id=? AND body IS NOT NULL RETURNING seq", (event_id,)
    ).fetchall()
    # After the body is gone: the views derive again what the event shared with others (the
    # same drawer or fact) from the log, which must no longer show this event's body.
    memory_views.unmaterialise(
        conn, event_id, lambda keys: [signed_event_at(conn, origin, seq) for origin, seq in keys])
    if changed:
        store.redactions_pending_checkpoint = True
