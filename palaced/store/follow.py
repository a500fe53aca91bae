"""Followers of the log in the store: how far each got, and the agent activity count.

Owns: a follower's position (meta ``key``: ``followed_to``/``follow_to``, the text index's and the
activity count's), and ``agent_activity`` (schema 0008: events, first and last time per agent and
origin), folded after the commits (schema 0011, ``fold_activity``: a write job of the log
follower, in chunks, after the events up to meta ``agent_activity_seq``); a read adds what is not
folded yet (``queries.agent_activity``), so it reads as if counted at each insert. (What a stored
event moves in its own transaction is its features' business: parts.py.) Writer thread only,
inside a batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import apsw

from .fetch import all_rows

if TYPE_CHECKING:
    from .state import WriteContext

__all__ = ["ACTIVITY_CHUNK", "ACTIVITY_SEQ_KEY", "fold_activity", "followed_to", "follow_to"]

#: the meta key of the last event counted in ``agent_activity``
ACTIVITY_SEQ_KEY: Final = "agent_activity_seq"
# Why 1,000: a fold of this many events is one grouped scan, about a millisecond.
ACTIVITY_CHUNK: Final = 1000
_FOLD_ACTIVITY: Final = (
    "INSERT INTO agent_activity (from_agent, origin, events, first_at, last_at) VALUES (?1, ?2, ?3, ?4, ?5) "
    "ON CONFLICT (from_agent, origin) DO UPDATE SET events = events + excluded.events, "
    "first_at = min(first_at, excluded.first_at), last_at = max(last_at, excluded.last_at)")


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
    groups = all_rows(conn.execute(
        "SELECT from_agent, origin, count(*), min(created_at), max(created_at), max(seq) FROM "
        "(SELECT seq, from_agent, origin, created_at FROM events WHERE seq > ? ORDER BY seq LIMIT ?) "
        "GROUP BY from_agent, origin", (start, limit)))
    if not groups:
        return start, 0
    conn.executemany(_FOLD_ACTIVITY, [g[:5] for g in groups])
    last = max(g[5] for g in groups)
    follow_to(conn, ACTIVITY_SEQ_KEY, last)
    return last, sum(g[2] for g in groups)
