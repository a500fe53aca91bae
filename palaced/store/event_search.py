"""Full-text search over event bodies: the index (schema 0007) and the queries that use it.

Owns: filling ``events_fts`` from the log in order (``index_pending``: the events after meta
``events_fts_seq``, a chunk per write job; redacted bodies are never indexed), how far it got
(``indexed_seq``), removing a purged body's words (``forget``, called by ``writes.redact``), and a
ranked search combined with the list filters (``search_events``). Indexing runs in write jobs
(writer thread); searching on the caller's reader connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import apsw

from palace_proto.envelope import preview_event
from palace_proto.event_fields import PublicEvent
from palace_proto.validation import ListQuery, text_match_expression

from .fetch import all_rows
from .follow import follow_to, followed_to
from .rows import PUBLIC_COLUMNS, row_to_public

if TYPE_CHECKING:
    from .state import WriteContext

__all__ = ["INDEX_CHUNK", "forget", "index_pending", "indexed_seq", "search_events"]

_META_KEY: Final = "events_fts_seq"
# Why 50: one write job indexes this many events, about a millisecond (FTS5 takes 15-30 us per
# 300-byte body here), so an append queued behind it barely waits (a chunk of 1,000 held every
# append up for 15 ms: issue 27, wake p99); a backlog of a million events catches up in 20,000
# jobs, about half a minute, without an fsync each.
INDEX_CHUNK: Final = 50


def indexed_seq(conn: apsw.Connection) -> int:
    return followed_to(conn, _META_KEY)


def index_pending(ctx: WriteContext, limit: int = INDEX_CHUNK) -> tuple[int, int]:
    """Index the next ``limit`` events after the index's position (a write job's step: writer
    thread). Returns (the new position, how many events it looked at)."""
    conn = ctx.conn
    start = indexed_seq(conn)
    rows = all_rows(conn.execute("SELECT seq, body FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (start, limit)))
    if not rows:
        return start, 0
    conn.executemany("INSERT INTO events_fts (rowid, body) VALUES (?, ?)",
                     [(seq, body) for seq, body in rows if body])
    last = rows[-1][0]
    follow_to(conn, _META_KEY, last)
    return last, len(rows)


def forget(conn: apsw.Connection, seq: int, body: str) -> None:
    """Remove one event's words from the index, before its body is purged: ``body`` is the body as
    it was indexed (an external-content index deletes by the values it indexed), and nothing
    happens if the indexer has not reached it yet (then it finds the body gone)."""
    if seq <= indexed_seq(conn):
        conn.execute("INSERT INTO events_fts (events_fts, rowid, body) VALUES ('delete', ?, ?)", (seq, body))


def search_events(conn: apsw.Connection, query: ListQuery, conds: list[str], params: list[Any]) -> list[PublicEvent]:
    """Events whose body has every word of ``query.text``, passing ``conds`` (the list filters as
    SQL over ``events``), best match first (bm25), then newest; on ``conn`` (a reader's)."""
    assert query.text is not None
    if query.to_agents:
        targets = sorted(query.to_agents | {"*"})
        conds = [*conds, f"to_agent IN ({','.join('?' * len(targets))})"]
        params = [*params, *targets]
    where = f"AND {' AND '.join(conds)}" if conds else ""
    rows = conn.execute(
        f"SELECT {PUBLIC_COLUMNS} FROM events JOIN (SELECT rowid AS hit, rank AS score FROM events_fts "
        f"WHERE events_fts MATCH ?) ON hit = seq WHERE 1 {where} ORDER BY score, seq DESC LIMIT ?",
        [text_match_expression(query.text), *params, query.limit]).fetchall()
    events = [row_to_public(r) for r in rows]
    return [preview_event(e) for e in events] if query.preview else events
