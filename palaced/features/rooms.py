"""Agent rooms (MemPalace RFC 006, docs/rooms.md): open, read, say, close, list and show a
discussion among agents; file a closed room's transcript as drawers; wake a room's members.

Owns: the operations ``room_open``, ``room_read``, ``room_say``, ``room_close``, ``room_list`` and
``room_show`` (their arguments and results are MemPalace's tools' where MemPalace has them:
``{success, room, event, handoff}``, ``{room, events, more, count}``, ``{success, event, unread}``,
``{success, room, event, already_closed, filed, already_filed, wing, palace_room}``), the
``RoomFiler`` (a background follower of the bus that files late transcript turns) and
``RoomWake`` (what ``log.subscribe`` asks before a watch wakes on a room event). The rules of a
room are palace_proto.rooms; the read positions and room queries are palaced.store.rooms.

Filing, and why it converges after a partition. Drawers are content-addressed (the same text in
the same wing and room is one drawer, palace_proto.memory.drawer_id) and a turn's drawer text names
its event, so whoever files a turn files the same drawer, and filing twice is harmless. Two
writers file:

* ``room_close`` files, in the transaction that appends the close, every transcript turn this
  replica holds (as the closing agent). Closing a closed room appends nothing and files what is
  missing (MemPalace's retry).
* The daemon that wrote *the* close (the earliest, palace_proto.rooms) files the turns that reach
  it later: a ``room.message`` written on the other side of a partition before the close, which
  arrives after it. ``RoomFiler`` watches room events, and for a closed room whose close is one of
  this replica's own files each transcript turn without a drawer, as the close's author.

Only the close's own daemon files late turns, so replicas do not race each other to file the same
turn; the drawers it writes replicate like every memory write, so every replica ends up holding
the whole transcript. What a side that closed *second* filed before it heard of the first close
(its own close, and its turns stamped after the first close) stays filed: drawers are never taken
back, and the room's reads flag those turns ``after_close``.

Must not import: ``palaced.api`` or ``palaced.app``; nor ``handlers.log`` (it imports this module).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

from palace_proto.errors import ApiError, NotFound, ValidationError
from palace_proto.event_fields import PublicEvent
from palace_proto.memory import Drawer
from palace_proto.projects import project_stream
from palace_proto.rooms import (
    ROOM_OPEN,
    ROOM_TYPES,
    Room,
    check_body,
    check_members,
    check_place,
    check_project,
    check_room_id,
    close_request,
    compact,
    derive_room,
    drawer_text,
    handoff,
    keyed_room_id,
    message_request,
    needs_membership,
    open_request,
    ordered,
    room_slug,
    transcript,
)
from palace_proto.validation import AppendRequest, clean_optional, clean_required, validate_page_limit

from ..feature import Feature, Follower
from ..handlers.context import Context
from ..store import WriteContext, append_event
from ..store import rooms as store_rooms
from ..store.rooms import RoomReads

__all__ = ["FEATURE", "OPS", "RoomFiler", "RoomWake", "rooms_of"]

LOGGER: Final = logging.getLogger("palaced.features.rooms")
T = TypeVar("T")

DEFAULT_READ_LIMIT: Final = 50
# Why 500: the list operation's own page cap.
MAX_READ_LIMIT: Final = 500
# Why 5,000: the turns this daemon lets one room take. Closing files every turn as a drawer in
# one transaction: 5,000 drawers are a few seconds of the writer's worker thread.
MAX_ROOM_TURNS: Final = 5_000
DEFAULT_LIST_LIMIT: Final = 50
# Why 200: the rooms one listing returns (each derived from a few index probes).
MAX_ROOMS_LISTED: Final = 200
# Why 1,000: the newest openings a filtered listing looks through before it stops.
MAX_ROOMS_SCANNED: Final = 1_000
# Why 300: a listing shows the start of each agenda and outcome (a turn may hold 99,000
# characters; 200 of them would make a listing of tens of megabytes).
LISTED_TEXT_CHARS: Final = 300
DEFAULT_SHOW_LIMIT: Final = 200
MAX_SHOW_LIMIT: Final = 500


def _reads(ctx: Context) -> RoomReads:
    """The rooms' reads on the daemon's store (store/rooms.py)."""
    return ctx.store.reads(RoomReads)


def _not_found(room_id: str) -> NotFound:
    return NotFound(f"room {room_id!r} not found")


def _whole_room(on: Any, room_id: str) -> tuple[Room, list[PublicEvent]]:
    """The room and all its events, in a write job (``store_rooms.whole_room``).

    Raises:
        NotFound: no opening of ``room_id`` here.
    """
    return _found(room_id, store_rooms.whole_room(on, room_id))


async def _read_room(ctx: Context, room_id: str) -> tuple[Room, list[PublicEvent]]:
    """The room and all its events, read on a reader thread.

    Raises:
        NotFound: no opening of ``room_id`` here.
    """
    return _found(room_id, await _reads(ctx).whole_room(room_id))


def _found(room_id: str, found: tuple[Room | None, list[PublicEvent]]) -> tuple[Room, list[PublicEvent]]:
    room, events = found
    if room is None:
        raise _not_found(room_id)
    return room, events


def _file(ctx: Context, w: WriteContext, room: Room, events: Sequence[PublicEvent],
          filer: str) -> tuple[int, int, list[str]]:
    """File the transcript turns that have no drawer yet, as ``filer`` (a write job's step): how
    many were filed, how many were there already, and why any could not be (a turn a peer wrote
    that is too big for this daemon's drawer)."""
    drawers: dict[str, Drawer] = {}
    for turn in transcript(room, events):
        text = drawer_text(turn)
        if text is not None:
            drawer = Drawer(wing=room.wing, room=room.palace_room, content=text, added_by=filer,
                            source_file=room.room_id)
            drawers.setdefault(drawer.id, drawer)
    there = store_rooms.existing_drawers(w, list(drawers))
    filed, errors = 0, []
    for drawer_id, drawer in drawers.items():
        if drawer_id in there:
            continue
        try:
            request = AppendRequest.from_wire(drawer.event(), ctx.limits)
        except ValidationError as exc:
            errors.append(f"{drawer.content.split(chr(10), 1)[0]}: {exc.message}")
            continue
        append_event(w, request)
        filed += 1
    return filed, len(there), errors


# -- the operations --------------------------------------------------------------------------------

async def room_open(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Open a room (``room.open``, to everyone); the room, its opening and the handoff line."""
    ctx.require_writer()
    project = check_project(args.get("project"))
    from_agent = clean_required("from_agent", args.get("from_agent"))
    slug = room_slug(args.get("name"))
    agenda = check_body(args.get("agenda"), "agenda", required=False, limits=ctx.limits)
    members = check_members(args.get("members"))
    wing, palace_room = check_place("wing", args.get("wing")), check_place("room", args.get("room"))
    # The id is bound to this very opening (our origin, the opener, a nonce it carries): no other
    # room.open, however dated, can take the room over (palace_proto.rooms, issue 43 finding 6).
    nonce = secrets.token_hex(16)
    room_id = keyed_room_id(slug, origin=ctx.store.origin_id, opener=from_agent, nonce=nonce)
    request = AppendRequest.from_wire(open_request(room_id=room_id, project=project, from_agent=from_agent,
                                                   agenda=agenda, members=members, wing=wing,
                                                   palace_room=palace_room, nonce=nonce), ctx.limits)
    event = await ctx.store.write(lambda w: append_event(w, request))
    room = derive_room(room_id, [event])
    assert room is not None  # its own opening
    return {"success": True, "room": room.to_wire(), "event": compact(event, room), "handoff": handoff(room_id)}


async def room_read(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """What ``agent`` has not read yet in the room, oldest first (local arrival order); its read
    position moves to the last event returned. Allowed on an observer: the position is this
    daemon's own state, not an event."""
    room_id = check_room_id(args.get("room_id"))
    agent = clean_required("agent", args.get("agent"))
    limit = validate_page_limit(args.get("limit"), DEFAULT_READ_LIMIT, MAX_READ_LIMIT)

    def job(w: WriteContext) -> list[PublicEvent]:
        if not any(e["type"] == ROOM_OPEN for e in store_rooms.room_skeleton(w, room_id)):
            raise _not_found(room_id)  # before a read position is kept for it
        return store_rooms.read_page(w, room_id, agent, limit)

    page = await ctx.store.write(job)
    room, _ = await _read_room(ctx, room_id)
    events = [compact(e, room) for e in ctx.store.agents.annotate(page)]
    return {"room": room.to_wire(), "events": events, "more": len(page) == limit, "count": len(events)}


async def room_say(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """One turn in an open room (to everyone, or to ``to_agent``); how much from others the
    speaker has not read yet."""
    ctx.require_writer()
    room_id = check_room_id(args.get("room_id"))
    from_agent = clean_required("from_agent", args.get("from_agent"))
    body = check_body(args.get("body"), "message body", required=True, limits=ctx.limits)
    to_agent = clean_optional("to_agent", args.get("to_agent"))

    def job(w: WriteContext) -> PublicEvent:
        # Checked in the writing transaction: a close committed before this turn refuses it.
        room = store_rooms.room_state(w, room_id)
        if room is None:
            raise _not_found(room_id)
        if room.closed:
            raise ApiError(f"room {room_id!r} is closed", code="conflict")
        if store_rooms.message_count(w, room_id, MAX_ROOM_TURNS) >= MAX_ROOM_TURNS:
            raise ApiError(f"room {room_id!r} holds {MAX_ROOM_TURNS} turns, as many as one room takes; close it "
                           "and open another", code="limit_reached")
        request = AppendRequest.from_wire(message_request(room, from_agent=from_agent, body=body, to_agent=to_agent),
                                          ctx.limits)
        return append_event(w, request)

    event = await ctx.store.write(job)
    unread = await _reads(ctx).unread_count(room_id, event["from_agent"])
    return {"success": True, "event": compact(event), "unread": unread}


async def room_close(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Close the room (once: a second close appends nothing) and file its transcript, one drawer
    per turn with words, in the transaction of the close."""
    ctx.require_writer()
    room_id = check_room_id(args.get("room_id"))
    from_agent = clean_required("from_agent", args.get("from_agent"))
    outcome = check_body(args.get("outcome"), "outcome", required=False, limits=ctx.limits)

    def job(w: WriteContext) -> tuple[Room, PublicEvent, bool, tuple[int, int, list[str]]]:
        room, events = _whole_room(w, room_id)
        already_closed = room.closed
        if not already_closed:
            request = AppendRequest.from_wire(close_request(room, from_agent=from_agent, outcome=outcome), ctx.limits)
            events.append(append_event(w, request))
            closed = derive_room(room_id, events)
            assert closed is not None  # it was open a line ago
            room = closed
        close = next(e for e in events if e["id"] == room.close_event_id)
        return room, close, already_closed, _file(ctx, w, room, events, from_agent)

    room, close, already_closed, (filed, already_filed, errors) = await ctx.store.write(job, heavy=True)
    room, _ = await _read_room(ctx, room_id)  # with this replica's readers among the members
    result: dict[str, Any] = {
        "success": not errors, "room": room.to_wire(), "event": compact(close, room), "already_closed": already_closed,
        "filed": filed, "already_filed": already_filed, "wing": room.wing, "palace_room": room.palace_room,
    }
    if errors:
        result["errors"] = errors
        result["error"] = (f"room closed, but {len(errors)} transcript turn(s) could not be filed as drawers on this "
                           "daemon (too big for its body limit)")
    return result


def _listed(room: Room) -> dict[str, Any]:
    wire = room.to_wire()
    for key in ("agenda", "outcome"):
        if isinstance(wire[key], str) and len(wire[key]) > LISTED_TEXT_CHARS:
            wire[key] = wire[key][:LISTED_TEXT_CHARS] + "…"
    return wire


async def room_list(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Rooms, newest first: of a project, open or closed, with an agent among the members."""
    project = clean_optional("project", args.get("project"))
    status = args.get("status")
    if status not in (None, "open", "closed"):
        raise ValidationError("status must be 'open' or 'closed'", field="status")
    agent = clean_optional("agent", args.get("agent"))
    limit = validate_page_limit(args.get("limit"), DEFAULT_LIST_LIMIT, MAX_ROOMS_LISTED)
    rooms, capped = await _reads(ctx).rooms_matching(project_stream(project) if project else None, status,
                                agent, limit, MAX_ROOMS_SCANNED)
    return {"rooms": [_listed(r) for r in rooms], "count": len(rooms), "capped": capped}


# Why 10: the open rooms session start names (each a line for the agent to act on).
SESSION_ROOMS_SHOWN: Final = 10


async def rooms_of(ctx: Context, agent: str) -> list[dict[str, Any]]:
    """The open rooms ``agent`` belongs to, newest first, each with how many turns by others it
    has not read (what session start shows: room turns stay out of the inbox)."""
    return await _reads(ctx).open_rooms_of(agent, SESSION_ROOMS_SHOWN, MAX_ROOMS_SCANNED)


async def room_show(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """The room and its events in the order every replica agrees on, a page at a time, moving
    nobody's read position (the dashboard, `palacectl room show`)."""
    room_id = check_room_id(args.get("room_id"))
    limit = validate_page_limit(args.get("limit"), DEFAULT_SHOW_LIMIT, MAX_SHOW_LIMIT)
    offset = args.get("offset", 0) or 0
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValidationError("offset must be a non-negative integer", field="offset")
    room, events = await _read_room(ctx, room_id)
    everything = ordered(room, ctx.store.agents.annotate(events))
    page = everything[offset:offset + limit]
    in_transcript = {e["id"] for e in transcript(room, everything)}
    return {"room": room.to_wire(),
            "events": [{**compact(e, room), "turn": e["id"] in in_transcript} for e in page],
            "count": len(page), "total": len(everything), "offset": offset,
            "more": offset + len(page) < len(everything)}


OPS: Final = {
    "room_open": room_open,
    "room_read": room_read,
    "room_say": room_say,
    "room_close": room_close,
    "room_list": room_list,
    "room_show": room_show,
}


# -- filing what arrives late ---------------------------------------------------------------------

class RoomFiler(Follower):
    """Files the transcript turns of closed rooms that this daemon closed and that reached it
    after the close (see the module docstring); runs in app.py's nursery."""

    types = ROOM_TYPES
    #: Why 0.5 s: a close and the drawers its daemon filed with it travel together; a short pause
    #: lets both arrive before anything is judged missing (and batches a burst of turns).
    settle_s = 0.5
    doing = "file late room turns"
    #: Why 500: the rooms looked at per read (a start-up looks at every room once).
    PAGE: Final = 500

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        #: the newest seq whose room has been looked at
        self.position = 0
        self.filed = 0
        self._failed: set[str] = set()

    def __repr__(self) -> str:
        return f"<RoomFiler at={self.position} filed={self.filed}>"

    async def catch_up(self) -> int:
        """Look at every room with an event since the last look; the drawers filed."""
        ctx = self.ctx
        if ctx.membership is not None and ctx.membership.role == "observer":
            return 0  # writes nothing; the members' daemons file
        own = {origin for origin, _ in await ctx.store.own_origins()} | {ctx.store.origin_id}
        written = 0
        while True:
            rooms, top = await _reads(ctx).rooms_touched_after(self.position, self.PAGE)
            for room_id in rooms:
                written += await self.file_room(room_id, own)
            self.position = top
            if len(rooms) < self.PAGE:
                return written

    async def file_room(self, room_id: str, own: set[str]) -> int:
        ctx = self.ctx

        if not await _reads(ctx).late_turns_to_file(room_id, own):
            return 0

        def job(w: WriteContext) -> int:
            room, events = _whole_room(w, room_id)
            filed, _, errors = _file(ctx, w, room, events, room.closed_by or "")
            if errors and room_id not in self._failed:
                LOGGER.warning("room %s: %d transcript turn(s) cannot be filed here: %s", room_id, len(errors),
                               "; ".join(errors)[:500])
            return filed

        try:
            filed = await ctx.store.write(job, heavy=True)
        except ApiError as exc:
            # The closing agent has moved to another daemon or retired since: a member files the
            # rest by closing again (room_close on a closed room files what is missing, as itself).
            if room_id not in self._failed:
                LOGGER.warning("room %s: could not file its late turns: %s", room_id, exc.message)
            self._failed.add(room_id)
            return 0
        if filed:
            LOGGER.info("room %s: filed %d turn(s) that arrived after its close", room_id, filed)
        self.filed += filed
        return filed


# -- who a room event wakes ------------------------------------------------------------------------

class RoomWake:
    """Whether one agent's watch wakes on a room event: only in rooms it belongs to (it opened,
    spoke, was listed, or read there; palaced.store.rooms.is_member) — a room event to everyone
    would otherwise wake every agent of the palace. Asked by ``log.subscribe`` for a watch with
    an agent and no correlation id (naming the room asks for it, member or not)."""

    #: Why 1,024: the rooms this watch is known to belong to (membership never ends, so a yes is
    #: kept; a no is asked again, since reading or being named makes a member).
    MAX_KNOWN: Final = 1024

    def __init__(self, ctx: Context, agent: str) -> None:
        self.ctx = ctx
        self.agent = agent
        self.member_of: set[str] = set()

    def __repr__(self) -> str:
        return f"<RoomWake {self.agent} rooms={len(self.member_of)}>"

    async def wakes(self, event: PublicEvent) -> bool:
        if not needs_membership(event, self.agent):
            return True
        room_id = event["correlation_id"]
        if room_id is None:  # not a room's event after all: nothing to belong to
            return True
        if room_id in self.member_of:
            return True
        member = await _reads(self.ctx).is_member(room_id, self.agent)
        if member and len(self.member_of) < self.MAX_KNOWN:
            self.member_of.add(room_id)
        return member


# -- the feature's declaration --------------------------------------------------------------------


async def session_part(ctx: Context, agent: str) -> dict[str, Any]:
    """Session start's open rooms of the agent, with their unread turns (room turns stay out of the inbox)."""
    return {"rooms": await rooms_of(ctx, agent)}


FEATURE: Final = Feature(name="rooms", ops=OPS, builds_on=("memory",), services=(RoomFiler,), wake=RoomWake,
                         inbox_excludes=frozenset(ROOM_TYPES), session=session_part, store=store_rooms.PART)
