"""The one mapping between an event and its row of the ``events`` table.

Owns: the events columns, named once in the order every read selects them and every insert
writes them; a row read back as the public object (``SignedEvent.to_public``'s shape, with the
local ``seq``) or as the signed event itself; and a signed event as the parameters of its insert.
The chain columns come last, so a public read selects a prefix of the same list and never pays
for the hashes and signature it does not show.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from palace_proto.envelope import SignedEvent

__all__ = ["INSERT_EVENT", "PUBLIC_COLUMNS", "SIGNED_COLUMNS", "insert_params", "row_to_public", "row_to_signed"]

#: Every column of ``events``, in row order: what the public object shows (``seq`` first: SQLite
#: assigns it, the local arrival order), then the chain (shown by no public object).
_COLUMNS: Final = (
    "seq", "id", "origin", "origin_seq", "type", "stream", "room", "topic", "from_agent", "to_agent",
    "correlation_id", "branch", "base_commit", "status", "ack_of", "artifact_ids", "body", "metadata",
    "created_at", "body_sha256",
    "prev_hash", "event_hash", "signature",
)
# Why 20: the chain's three columns are the last ones.
_PUBLIC_COUNT: Final = len(_COLUMNS) - 3

#: SELECT list of a row for ``row_to_public``
PUBLIC_COLUMNS: Final = ", ".join(_COLUMNS[:_PUBLIC_COUNT])
#: SELECT list of a row for ``row_to_signed`` (and ``row_to_public``: the same prefix)
SIGNED_COLUMNS: Final = ", ".join(_COLUMNS)
#: the insert of one event; its parameters are ``insert_params(event)``
INSERT_EVENT: Final = (f"INSERT INTO events ({', '.join(_COLUMNS[1:])}) "
                       f"VALUES ({','.join('?' * (len(_COLUMNS) - 1))})")


def row_to_public(row: Sequence[Any]) -> dict[str, Any]:
    """The public object of a row selected with ``PUBLIC_COLUMNS`` (or ``SIGNED_COLUMNS``)."""
    (seq, eid, origin, origin_seq, type_, stream, room, topic, from_agent, to_agent, corr, branch,
     base, status, ack_of, artifact_ids, body, metadata, created_at, body_sha) = row[:_PUBLIC_COUNT]
    out = {
        "id": eid, "seq": seq, "origin": origin, "origin_seq": origin_seq, "type": type_,
        "stream": stream, "room": room, "topic": topic, "from_agent": from_agent,
        "to_agent": to_agent, "correlation_id": corr, "branch": branch, "base_commit": base,
        "status": status, "ack_of": ack_of, "artifact_ids": json.loads(artifact_ids),
        "body": body if body is not None else "", "metadata": json.loads(metadata),
        "created_at": created_at,
    }
    if body is None:
        out["body_redacted"] = True
        out["body_sha256"] = bytes(body_sha).hex()
    return out


def row_to_signed(row: Sequence[Any]) -> SignedEvent:
    """The signed event of a row selected with ``SIGNED_COLUMNS`` (its ``seq`` and ``id`` are not
    part of it: the id is derived from the signed fields)."""
    (_seq, _id, origin, origin_seq, type_, stream, room, topic, from_agent, to_agent, corr, branch,
     base, status, ack_of, artifact_ids, body, metadata, created_at, body_sha, prev_hash, event_hash,
     signature) = row
    return SignedEvent(
        origin=origin, origin_seq=origin_seq, prev_hash=bytes(prev_hash), created_at=created_at, type=type_,
        stream=stream, room=room, topic=topic, from_agent=from_agent, to_agent=to_agent, correlation_id=corr,
        branch=branch, base_commit=base, status=status, ack_of=ack_of, artifact_ids=tuple(json.loads(artifact_ids)),
        body_sha256=bytes(body_sha), metadata_json=metadata, event_hash=bytes(event_hash),
        signature=bytes(signature), body=body,
    )


def insert_params(ev: SignedEvent) -> tuple[Any, ...]:
    """The parameters of ``INSERT_EVENT`` for ``ev`` (every column but ``seq``, in row order)."""
    return (ev.id, ev.origin, ev.origin_seq, ev.type, ev.stream, ev.room, ev.topic, ev.from_agent, ev.to_agent,
            ev.correlation_id, ev.branch, ev.base_commit, ev.status, ev.ack_of,
            json.dumps(list(ev.artifact_ids)) if ev.artifact_ids else "[]", ev.body, ev.metadata_json,
            ev.created_at, ev.body_sha256, ev.prev_hash, ev.event_hash, ev.signature)
