"""Each agent's inbox, kept by the daemon: its cursor, what it lists, and how the cursor moves.

Owns: the ``inbox_cursors`` table (schema 0007): reading an agent's cursor, the page of its inbox
after it (events addressed to the agent or to ``*``, not written by it, oldest first, through
``Reads.list_events``), remembering how far a page listed (``note_listed``), and moving the
cursor (``mark_read``: never backwards, never past what was listed). The reads take the store's
``Reads`` (the caller's reader connection); the two writes are steps of a write job (they take
its ``WriteContext``: writer thread, inside a batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import apsw

from palace_proto.errors import ApiError, NotFound, ValidationError
from palace_proto.event_fields import PublicEvent
from palace_proto.validation import ListQuery

from ..clock import utc_now
from .fetch import one_row

if TYPE_CHECKING:
    from .queries import Reads
    from .state import WriteContext

__all__ = ["MAX_INBOX_CURSORS", "Cursor", "InboxFull", "InboxScope", "cursor_of", "inbox_page", "mark_read",
           "note_listed", "unread_count"]

# Why 10,000: one row per agent whose inbox was read here; a client inventing ids without end
# must not grow the table without end (a fleet has tens of agents, a busy one hundreds).
MAX_INBOX_CURSORS: Final = 10_000
# Why 1,000: how far ``unread_count`` counts (beyond that, "at least 1,000" is all anyone needs).
UNREAD_COUNT_CAP: Final = 1_000


class InboxFull(ApiError):
    code = "limit_reached"


@dataclass(frozen=True, slots=True)
class InboxScope:
    """What an agent's inbox holds besides the events to it (the features' say: ``Features.inbox_scope``)."""

    #: other addressees whose events it holds too (a person's: the questions to anyone, ``human:*``)
    also_to: tuple[str, ...] = ()
    #: the types that stay out, read where they belong (a room's turns, in their room: in the
    #: inbox, every room's talk would reach every agent)
    excluded: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Cursor:
    read_seq: int = 0
    read_event_id: str | None = None
    listed_seq: int = 0

    def to_wire(self) -> dict[str, Any]:
        return {"read_event_id": self.read_event_id, "read_seq": self.read_seq, "listed_seq": self.listed_seq}


def _cursor(conn: apsw.Connection, agent: str) -> Cursor:
    row = conn.execute("SELECT read_seq, read_event_id, listed_seq FROM inbox_cursors WHERE agent=?",
                       (agent,)).fetchone()
    return Cursor(*row) if row else Cursor()


def cursor_of(reads: Reads, agent: str) -> Cursor:
    return _cursor(reads.db.reader(), agent)


def _query(agent: str, limit: int, preview: bool, scope: InboxScope) -> ListQuery:
    to = [agent, *(a for a in scope.also_to if a != agent)]
    return ListQuery.from_wire({"to_agents": to, "exclude_from_agents": [agent], "exclude_types": sorted(scope.excluded),
                                "order": "asc", "limit": limit, "preview": preview})


def inbox_page(reads: Reads, agent: str, limit: int, preview: bool,
               scope: InboxScope = InboxScope()) -> tuple[Cursor, list[PublicEvent]]:
    """The agent's cursor and the first ``limit`` events of its inbox after it (as ``scope`` says)."""
    cursor = cursor_of(reads, agent)
    return cursor, reads.list_events(_query(agent, limit, preview, scope), after_seq=cursor.read_seq)


def unread_count(reads: Reads, agent: str, after_seq: int, scope: InboxScope = InboxScope()) -> int:
    """How many inbox events follow ``after_seq`` (counted up to ``UNREAD_COUNT_CAP``)."""
    return len(reads.list_events(_query(agent, UNREAD_COUNT_CAP, True, scope), after_seq=after_seq))


def _ensure_row(conn: apsw.Connection, agent: str) -> None:
    if conn.execute("SELECT 1 FROM inbox_cursors WHERE agent=?", (agent,)).fetchone():
        return
    (count,) = one_row(conn.execute("SELECT count(*) FROM inbox_cursors"))
    if count >= MAX_INBOX_CURSORS:
        raise InboxFull(f"this daemon keeps inbox cursors for {MAX_INBOX_CURSORS} agents already; retire unused "
                        "agents (`palacectl agents` lists them) before reading a new agent's inbox")
    conn.execute("INSERT INTO inbox_cursors (agent, updated_at) VALUES (?, ?)", (agent, utc_now()))


def note_listed(ctx: WriteContext, agent: str, seq: int) -> None:
    """A page of the inbox showed events up to ``seq`` (a write job's step)."""
    conn = ctx.conn
    _ensure_row(conn, agent)
    conn.execute("UPDATE inbox_cursors SET listed_seq=?, updated_at=? WHERE agent=? AND listed_seq < ?",
                 (seq, utc_now(), agent, seq))


def mark_read(ctx: WriteContext, agent: str, event_id: str) -> tuple[Cursor, bool]:
    """Move the agent's cursor to ``event_id`` (a write job's step): the new cursor, and whether it
    moved.

    Raises:
        NotFound: no such event.
        ValidationError: it lies beyond what the inbox listed.
    """
    conn = ctx.conn
    row = conn.execute("SELECT seq FROM events WHERE id=?", (event_id,)).fetchone()
    if row is None:
        raise NotFound(f"upto names an unknown event {event_id!r}")
    (seq,) = row
    cursor = _cursor(conn, agent)
    if seq > cursor.listed_seq:
        raise ValidationError(f"event {event_id} has not been listed in {agent}'s inbox yet: list it first "
                              f"(`palacectl inbox --agent {agent}`), so nothing unread is marked read",
                              field="upto_event_id")
    if seq <= cursor.read_seq:
        return cursor, False  # never backwards: already read up to there or further
    conn.execute("UPDATE inbox_cursors SET read_seq=?, read_event_id=?, updated_at=? WHERE agent=?",
                 (seq, event_id, utc_now(), agent))
    return Cursor(seq, event_id, cursor.listed_seq), True
