"""Agent rooms in the store: each room's events, the read positions kept here, and who belongs.

Owns: the ``room_cursors`` table (schema 0012): an agent's read position in a room (a local
seq), read (``cursor_of``), moved on by a read (``read_page``: the page and the move in one write
job, never backwards) and bounded (``MAX_ROOM_CURSORS``); the room queries the handlers derive
rooms from (``room_events``, ``room_openings``, ``room_activity``, ``unread_count``), and whether an
agent is one of a room's members (``is_member``: what wakes its watch). The rules of a room
(order, close, transcript) are palace_proto.rooms; this module fetches, and derives rooms from what
it fetched (``whole_room``, ``rooms_matching``, ``open_rooms_of``, ``late_turns_to_file``), offered to
the event loop in ``RoomReads``; and ``judge``, the authority table on a local write to a room
(``derive_room`` over its events, the new one appended as a draft), which ``PART`` declares to the
store (parts.py). The reads take a ``Source``: the store (on the calling thread's reader
connection) or a write job's ``WriteContext`` (inside its transaction); ``read_page`` is a write
job's step.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import apsw

from palace_proto.authority import Rule
from palace_proto.errors import ApiError, ValidationError
from palace_proto.event_fields import PublicEvent
from palace_proto.memory import Drawer
from palace_proto.rooms import (
    ROOM_CLOSE,
    ROOM_MESSAGE,
    ROOM_OPEN,
    ROOM_TYPES,
    ROOMS_ROOM,
    Room,
    check_room_id,
    derive_room,
    drawer_text,
    listed_members,
    transcript,
)
from palace_proto.validation import AppendRequest

from ..clock import utc_now
from .fetch import all_rows, one_row
from .parts import StorePart
from .reads import ReadSet, StoreRead
from .rows import PUBLIC_COLUMNS, row_to_public

if TYPE_CHECKING:
    from .state import WriteContext

__all__ = ["MAX_ROOM_CURSORS", "PART", "RoomReads", "judge", "MAX_ROOM_EVENTS", "UNREAD_COUNT_CAP", "RoomsFull",
           "cursor_of", "existing_drawers", "is_member",
           "message_count", "read_page", "readers", "room_activity", "room_events", "room_openings", "room_skeleton",
           "rooms_touched_after", "room_state", "unread_count", "whole_room", "rooms_matching", "open_rooms_of",
           "late_turns_to_file"]

# Why 100,000: one row per (room, agent) that read here; a client inventing room or agent ids
# without end must not grow the table without end (a fleet of tens of agents in thousands of rooms
# stays far below).
MAX_ROOM_CURSORS: Final = 100_000
# Why 10,000: the most events of one room a derivation reads. A room takes at most
# features.rooms.MAX_ROOM_TURNS turns from this daemon; two sides of a partition can each add
# that many, and only a broken or hostile peer writes more (beyond it, this replica derives the
# room from the first 10,000 events it received).
MAX_ROOM_EVENTS: Final = 10_000
# Why 1,000: how far ``unread_count`` counts (beyond that, "at least 1,000" is all anyone needs).
UNREAD_COUNT_CAP: Final = 1_000
# Why 100: the readers of one room shown as members (the rest still read, and are still woken).
MAX_READERS_SHOWN: Final = 100

_TYPES: Final = tuple(sorted(ROOM_TYPES))
_IN_TYPES: Final = f"type IN ({','.join('?' * len(_TYPES))})"


#: where a read runs: the store (``Reads``: on a reader connection of the calling thread's own), a
#: write job's ``WriteContext`` (inside its transaction), or a connection this module already holds
Source = Any


def _connection(on: Source) -> apsw.Connection:
    if isinstance(on, apsw.Connection):
        return on
    conn = getattr(on, "conn", None)  # a WriteContext
    return conn if isinstance(conn, apsw.Connection) else on.db.reader()


class RoomsFull(ApiError):
    code = "limit_reached"


def room_events(on: Source, room_id: str, limit: int = MAX_ROOM_EVENTS) -> list[PublicEvent]:
    """Every event of the room (its three types, in the log room ``rooms``), in local order."""
    conn = _connection(on)
    rows = conn.execute(f"SELECT {PUBLIC_COLUMNS} FROM events WHERE correlation_id=? AND {_IN_TYPES} AND room=? "
                        "ORDER BY seq LIMIT ?", (room_id, *_TYPES, ROOMS_ROOM, limit)).fetchall()
    return [row_to_public(r) for r in rows]


def room_skeleton(on: Source, room_id: str) -> list[PublicEvent]:
    """The room's openings and closes (at most 100 of them: one of each, unless both sides of a
    partition closed, or a peer is broken): what its state is derived from without its messages."""
    conn = _connection(on)
    rows = conn.execute(f"SELECT {PUBLIC_COLUMNS} FROM events WHERE correlation_id=? AND type IN (?, ?) AND room=? "
                        "ORDER BY seq LIMIT 100", (room_id, ROOM_OPEN, ROOM_CLOSE, ROOMS_ROOM)).fetchall()
    return [row_to_public(r) for r in rows]


def message_count(on: Source, room_id: str, cap: int = MAX_ROOM_EVENTS) -> int:
    """How many messages the room holds (counted up to ``cap``)."""
    conn = _connection(on)
    return one_row(conn.execute("SELECT count(*) FROM (SELECT 1 FROM events WHERE correlation_id=? AND type=? AND room=? "
                                "LIMIT ?)", (room_id, ROOM_MESSAGE, ROOMS_ROOM, cap)))[0]


def rooms_touched_after(on: Source, after_seq: int, limit: int) -> tuple[list[str], int]:
    """The rooms with an event committed here after ``after_seq`` (at most ``limit``, those touched
    earliest first) and the newest seq among them (``after_seq`` if none): what the filer looks at."""
    conn = _connection(on)
    rows = all_rows(conn.execute(f"SELECT correlation_id, max(seq) FROM events WHERE {_IN_TYPES} AND room=? AND seq > ? "
                                 "GROUP BY correlation_id ORDER BY max(seq) LIMIT ?", (*_TYPES, ROOMS_ROOM, after_seq, limit)
                                 ))
    return [r[0] for r in rows], max((r[1] for r in rows), default=after_seq)


def room_openings(on: Source, limit: int, stream: str | None = None) -> list[PublicEvent]:
    """The newest ``limit`` room openings (of one project's stream, if given), newest first."""
    conn = _connection(on)
    where, params = "type=? AND room=?", [ROOM_OPEN, ROOMS_ROOM]
    if stream is not None:
        where += " AND stream=?"
        params.append(stream)
    rows = conn.execute(f"SELECT {PUBLIC_COLUMNS} FROM events WHERE {where} ORDER BY seq DESC LIMIT ?",
                        [*params, limit]).fetchall()
    return [row_to_public(r) for r in rows]


def room_activity(on: Source, room_id: str) -> tuple[list[PublicEvent], int, str | None, list[str],
                                                     dict[str, str]]:
    """What a listing shows of a room without reading its messages: its openings and closes, how
    many messages it holds, the newest ``created_at`` among its events, who spoke (messages and
    closes; first speaker first, at most 64), and when each of the first 64 speakers first spoke
    (a close counts from a member: palace_proto.rooms)."""
    conn = _connection(on)
    skeleton = room_skeleton(conn, room_id)
    (last,) = one_row(conn.execute(f"SELECT max(created_at) FROM events WHERE correlation_id=? AND {_IN_TYPES} AND room=?",
                                   (room_id, *_TYPES, ROOMS_ROOM)))
    speakers = [agent for (agent,) in conn.execute(
        "SELECT from_agent FROM events WHERE correlation_id=? AND type IN (?, ?) AND room=? GROUP BY from_agent "
        "ORDER BY min(seq) LIMIT 64", (room_id, ROOM_MESSAGE, ROOM_CLOSE, ROOMS_ROOM))]
    first_spoke = dict(conn.execute(
        "SELECT from_agent, min(created_at) FROM events WHERE correlation_id=? AND type=? AND room=? GROUP BY from_agent "
        "ORDER BY min(seq) LIMIT 64", (room_id, ROOM_MESSAGE, ROOMS_ROOM)))
    return skeleton, message_count(conn, room_id), last, speakers, first_spoke


def cursor_of(on: Source, room_id: str, agent: str) -> int | None:
    """The agent's read position in the room (a local seq), or None: it has never read it here."""
    conn = _connection(on)
    row = conn.execute("SELECT read_seq FROM room_cursors WHERE room_id=? AND agent=?", (room_id, agent)).fetchone()
    return row[0] if row else None


def readers(on: Source, room_id: str) -> list[str]:
    """The agents that read the room through this daemon (first reader first, at most 100)."""
    conn = _connection(on)
    return [a for (a,) in conn.execute("SELECT agent FROM room_cursors WHERE room_id=? ORDER BY updated_at LIMIT ?",
                                       (room_id, MAX_READERS_SHOWN))]


def _page(conn: apsw.Connection, room_id: str, agent: str, after_seq: int, own_too: bool,
          limit: int) -> list[PublicEvent]:
    also, params = "", [room_id, *_TYPES, ROOMS_ROOM, after_seq]
    if not own_too:
        also = " AND from_agent != ?"
        params.append(agent)
    rows = conn.execute(f"SELECT {PUBLIC_COLUMNS} FROM events WHERE correlation_id=? AND {_IN_TYPES} AND room=? "
                        f"AND seq > ?{also} ORDER BY seq LIMIT ?", [*params, limit]).fetchall()
    return [row_to_public(r) for r in rows]


def read_page(ctx: WriteContext, room_id: str, agent: str, limit: int) -> list[PublicEvent]:
    """The agent's next page of the room, and its position moved to the page's last event (a write
    job's step: the page and the move are one transaction, so two reads never return the same
    events). A first read returns everything, the agent's own turns too; later ones leave its own
    out. Local arrival order (seq): a turn that replicated late is after the position, never
    skipped.

    Raises:
        RoomsFull: a first read here when ``MAX_ROOM_CURSORS`` positions are kept already.
    """
    conn = ctx.conn
    position = cursor_of(conn, room_id, agent)
    page = _page(conn, room_id, agent, position or 0, position is None, limit)
    now = utc_now()
    if position is None:
        (count,) = one_row(conn.execute("SELECT count(*) FROM room_cursors"))
        if count >= MAX_ROOM_CURSORS:
            raise RoomsFull(f"this daemon keeps {MAX_ROOM_CURSORS} room read positions already; it reads no new "
                            "(room, agent) pair until some are gone")
        conn.execute("INSERT INTO room_cursors (room_id, agent, read_seq, updated_at) VALUES (?, ?, ?, ?)",
                     (room_id, agent, page[-1]["seq"] if page else 0, now))
    elif page:
        # max(): never backwards, whatever raced this read.
        conn.execute("UPDATE room_cursors SET read_seq=max(read_seq, ?), updated_at=? WHERE room_id=? AND agent=?",
                     (page[-1]["seq"], now, room_id, agent))
    return page


def unread_count(on: Source, room_id: str, agent: str) -> int:
    """How many of the room's events by others follow the agent's read position (all of them if it
    never read here), counted up to ``UNREAD_COUNT_CAP``."""
    conn = _connection(on)
    position = cursor_of(conn, room_id, agent) or 0
    return len(_page(conn, room_id, agent, position, False, UNREAD_COUNT_CAP))


def is_member(on: Source, room_id: str, agent: str) -> bool:
    """Whether ``agent`` belongs to the room: it opened it or spoke there, the opening lists it, or
    it read the room through this daemon."""
    conn = _connection(on)
    if conn.execute(f"SELECT 1 FROM events WHERE correlation_id=? AND from_agent=? AND {_IN_TYPES} AND room=? LIMIT 1",
                    (room_id, agent, *_TYPES, ROOMS_ROOM)).fetchone():
        return True
    if cursor_of(conn, room_id, agent) is not None:
        return True
    for (metadata,) in conn.execute("SELECT metadata FROM events WHERE correlation_id=? AND type=? AND room=? LIMIT 4",
                                    (room_id, ROOM_OPEN, ROOMS_ROOM)):
        try:
            if agent in listed_members(json.loads(metadata)):
                return True
        except ValueError:
            continue
    return False


def existing_drawers(on: Source, ids: Sequence[str]) -> set[str]:
    """Which of the drawer ``ids`` exist (500 a query)."""
    conn = _connection(on)
    found: set[str] = set()
    for start in range(0, len(ids), 500):
        chunk = list(ids[start:start + 500])
        found.update(d for (d,) in conn.execute(f"SELECT id FROM drawers WHERE id IN ({','.join('?' * len(chunk))})",
                                                chunk))
    return found


# -- rooms derived from what this replica holds (the rules are palace_proto.rooms) ---------------


def _annotated(on: Source, events: list[PublicEvent]) -> list[PublicEvent]:
    """The events with the agent registry's verdicts (an impersonation holds no role in a room),
    where ``on`` knows the registry (the store, a write job's context)."""
    agents = getattr(on, "agents", None)
    return agents.annotate(events) if agents is not None else events


def room_state(on: Source, room_id: str) -> Room | None:
    """The room's state without reading its messages (None: no opening of it here): its openings
    and closes, judged with when each speaker first spoke (a close counts from a member)."""
    conn = _connection(on)
    skeleton, messages, last, speakers, first_spoke = room_activity(conn, room_id)
    return derive_room(room_id, _annotated(on, skeleton), messages=messages, last_activity=last, speakers=speakers,
                       first_spoke=first_spoke, now=utc_now())


def whole_room(on: Source, room_id: str) -> tuple[Room | None, list[PublicEvent]]:
    """The room (None: no opening of it here) and all its events (with the registry's verdicts),
    with this replica's readers among its members."""
    conn = _connection(on)
    events = _annotated(on, room_events(conn, room_id))
    return derive_room(room_id, events, readers=readers(conn, room_id), now=utc_now()), events


def rooms_matching(on: Source, stream: str | None, status: str | None, agent: str | None, limit: int,
                   scanned: int) -> tuple[list[Room], bool]:
    """The newest rooms that pass the filters (at most ``limit``; of a project's ``stream``, open
    or closed, with ``agent`` among the members), and whether the look stopped at ``scanned``
    openings before the list was full. Openings whose id no command could name (a broken or
    hostile peer's) are left out."""
    conn = _connection(on)
    found: list[Room] = []
    seen: set[str] = set()
    openings = room_openings(conn, scanned, stream)
    for opening in openings:
        room_id = opening["correlation_id"]
        if room_id is None or room_id in seen:
            continue
        seen.add(room_id)
        try:
            check_room_id(room_id)
        except ValidationError:
            continue
        skeleton, messages, last, speakers, first_spoke = room_activity(conn, room_id)
        room = derive_room(room_id, _annotated(on, skeleton), readers=readers(conn, room_id), messages=messages,
                           last_activity=last, speakers=speakers, first_spoke=first_spoke, now=utc_now())
        if room is None:  # pragma: no cover - a valid opening was just read
            continue
        if status is not None and room.closed != (status == "closed"):
            continue
        if agent is not None and agent not in room.members:
            continue
        found.append(room)
        if len(found) >= limit:
            return found, False
    return found, len(openings) >= scanned


def open_rooms_of(on: Source, agent: str, limit: int, scanned: int) -> list[dict[str, Any]]:
    """The open rooms ``agent`` belongs to, newest first (at most ``limit``), each with how many
    turns by others it has not read: what session start names."""
    conn = _connection(on)
    rooms, _ = rooms_matching(conn, None, "open", agent, limit, scanned)
    return [{"room_id": r.room_id, "name": r.name, "project": r.project, "last_activity": r.last_activity,
             "unread": unread_count(conn, r.room_id, agent)} for r in rooms]


def late_turns_to_file(on: Source, room_id: str, own_origins: set[str]) -> bool:
    """Whether the room is closed by a close of one of ``own_origins`` (this daemon's) and a turn
    of its transcript has no drawer here yet: what the late-turn filer files."""
    conn = _connection(on)
    events = _annotated(on, room_events(conn, room_id))
    room = derive_room(room_id, events, now=utc_now())
    if room is None or not room.closed:
        return False
    close = next(e for e in events if e["id"] == room.close_event_id)
    if close["origin"] not in own_origins:
        return False  # its own daemon files what reaches it late
    wanted = [Drawer(wing=room.wing, room=room.palace_room, content=text, added_by="-").id
              for text in map(drawer_text, transcript(room, events)) if text is not None]
    return len(existing_drawers(conn, wanted)) < len(set(wanted))


class RoomReads(ReadSet):
    """The rooms' reads on the async store (``store.rooms``), each on a reader thread."""

    whole_room = StoreRead(whole_room)
    room_state = StoreRead(room_state)
    unread_count = StoreRead(unread_count)
    rooms_matching = StoreRead(rooms_matching)
    open_rooms_of = StoreRead(open_rooms_of)
    rooms_touched_after = StoreRead(rooms_touched_after)
    late_turns_to_file = StoreRead(late_turns_to_file)
    is_member = StoreRead(is_member)


def judge(ctx: WriteContext, req: AppendRequest, rule: Rule, draft: PublicEvent) -> str | None:
    """Why this daemon may not write ``req`` to its room (None: it may), in the words
    ``palace_proto.rooms.derive_room`` flags it with on every replica."""
    room_id = req.correlation_id
    if not room_id or req.type not in ROOM_TYPES:
        return None
    events = ctx.agents.annotate(room_events(ctx, room_id))
    room = derive_room(room_id, [*events, draft], now=str(draft["created_at"]))
    if room is None:
        return None  # no such room here: its operation says so
    for flag in room.flagged:
        if flag["event_id"] == draft["id"]:
            return str(flag["why"])
    return None


#: the rooms' part of the store (parts.py)
PART: Final = StorePart("rooms", judges={"room": judge})
