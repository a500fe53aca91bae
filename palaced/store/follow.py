"""What stored events update besides their own rows: the task threads, and the agent activity count.

Owns: the statements that keep ``task_threads`` (schema 0009: one row per task; a finished task
unsettled when anything new happens on it) in step with ``events``, and ``agent_activity``
(schema 0008: events, first and last time per agent and origin). Triggers did this until schema
0010; they cost every insert a trigger sub-program whether or not it concerned the event (issue
27), so the one insert path (``writes.insert_event``: local appends, peers' events, imports) calls
``event_stored`` instead, in the same transaction, with the triggers' own statements and
conditions. The activity count is folded later (schema 0011, ``fold_activity``: a write job of the
log follower, in chunks, after the events up to meta ``agent_activity_seq``); a read adds what is
not folded yet (``queries.agent_activity``), so it reads exactly as before. Writer thread only,
inside a batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import apsw

from palace_proto.agents import REGISTRY_TYPES
from palace_proto.envelope import SignedEvent

if TYPE_CHECKING:
    from .batch import WriteContext

__all__ = ["ACTIVITY_CHUNK", "ACTIVITY_SEQ_KEY", "event_stored", "fold_activity", "followed_to", "follow_to"]

#: the meta key of the last event counted in ``agent_activity``
ACTIVITY_SEQ_KEY: Final = "agent_activity_seq"
# Why 1,000: a fold of this many events is one grouped scan, about a millisecond.
ACTIVITY_CHUNK: Final = 1000
_FOLD_ACTIVITY: Final = (
    "INSERT INTO agent_activity (from_agent, origin, events, first_at, last_at) VALUES (?1, ?2, ?3, ?4, ?5) "
    "ON CONFLICT (from_agent, origin) DO UPDATE SET events = events + excluded.events, "
    "first_at = min(first_at, excluded.first_at), last_at = max(last_at, excluded.last_at)")
# A request adds its task, or unsettles it (a second request on one correlation).
_FOLLOW_REQUEST: Final = (
    "INSERT INTO task_threads (correlation_id, request_seq) VALUES (coalesce(?1, ?2), ?3) "
    "ON CONFLICT (correlation_id) DO UPDATE SET settled_seq = NULL WHERE settled_seq IS NOT NULL")
# Any other event on a settled task unsettles it (a reply can reopen a finished task).
_FOLLOW_THREAD: Final = (
    "UPDATE task_threads SET settled_seq = NULL WHERE correlation_id = ?1 AND settled_seq IS NOT NULL")
# A registry event unsettles every task its agent wrote on (its impersonation verdicts may change).
_UNSETTLE_AGENT: Final = (
    "UPDATE task_threads SET settled_seq = NULL WHERE json_valid(?1) AND settled_seq IS NOT NULL "
    "AND correlation_id IN (SELECT correlation_id FROM events WHERE from_agent = json_extract(?1, '$.agent') "
    "AND correlation_id IS NOT NULL)")


def event_stored(conn: apsw.Connection, ev: SignedEvent, seq: int) -> None:
    """``ev`` was just inserted as local ``seq``: follow its task (if any)."""
    if ev.type == "task.request":
        conn.execute(_FOLLOW_REQUEST, (ev.correlation_id, ev.id, seq))
    elif ev.correlation_id is not None:
        conn.execute(_FOLLOW_THREAD, (ev.correlation_id,))
    if ev.type in REGISTRY_TYPES:
        conn.execute(_UNSETTLE_AGENT, (ev.metadata_json,))


def followed_to(conn: apsw.Connection, key: str) -> int:
    """How far a follower of the log got: the last local seq it took (meta ``key``; 0 before any)."""
    row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return int(row[0]) if row else 0


def follow_to(conn: apsw.Connection, key: str, seq: int) -> None:
    """A follower of the log took every event up to local ``seq`` (in its write job's transaction)."""
    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                 (key, str(seq)))


def fold_activity(ctx: WriteContext, limit: int = ACTIVITY_CHUNK) -> tuple[int, int]:
    """Count the next ``limit`` events after meta ``agent_activity_seq`` into ``agent_activity``
    (a write job; derived data: ``durable=False`` is fine). Returns (the new position, how many
    events it counted)."""
    conn = ctx.conn
    start = followed_to(conn, ACTIVITY_SEQ_KEY)
    groups = conn.execute(
        "SELECT from_agent, origin, count(*), min(created_at), max(created_at), max(seq) FROM "
        "(SELECT seq, from_agent, origin, created_at FROM events WHERE seq > ? ORDER BY seq LIMIT ?) "
        "GROUP BY from_agent, origin", (start, limit)).fetchall()
    if not groups:
        return start, 0
    conn.executemany(_FOLD_ACTIVITY, [g[:5] for g in groups])
    last = max(g[5] for g in groups)
    follow_to(conn, ACTIVITY_SEQ_KEY, last)
    return last, sum(g[2] for g in groups)
