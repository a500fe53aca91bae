"""Agent rooms (MemPalace RFC 006, the palace way): a discussion among agents as signed events.

Owns: the room vocabulary (``room.open``, ``room.message``, ``room.close`` on ``project/<slug>``,
log room ``rooms``, correlation id = the room id), the room id grammar, the checks on what an
agent says in a room (MemPalace's wording), the append requests the daemon writes, and the pure
derivations every replica runs the same way: a room's state from its events (``derive_room``),
its transcript, which turns came after the close, the compact form a reader gets, and the text of
the drawer each turn is filed as. Pure: stdlib only, no clock, no randomness (the daemon supplies
the room id's hex), no IO.

Theory of operation
-------------------

A room is nothing but events on one correlation id, replicated like every other, so a
discussion spans machines and goes on through a partition: both sides may say, and even close.
Every replica orders a room's events by ``(created_at, event id)`` (``palace_proto.identity.
order_key``: the order palace uses everywhere; there is no hybrid clock), never by local arrival
order, so the same events give the same room on every replica whatever order they came in:

* a room *is* its opening: its id is bound to the opening that made it (``keyed_room_id``: a hash
  of the opener's origin, its agent and a nonce the opening carries), so no other ``room.open``
  — however it is dated — can be the room's; one is flagged and changes nothing (issue 43,
  finding 6). Rooms opened before keyed ids (8 hex digits) are opened by their earliest opening;
* who may speak and close is the authority table's (``palace_proto.authority``, rules ``room.*``):
  anyone with the room's id speaks (as in MemPalace); only its opener or a member — one its
  opening lists, or one who spoke there before — closes it. What the table does not allow is
  flagged (``Room.flagged``) and is no turn;
* the room is closed by its earliest allowed ``room.close``: that close is *the* close. A close
  written on the other side of a partition, later in that order, is not a turn of the transcript;
  an event dated too far ahead of the judging replica's clock takes no part until it has caught up
  (``authority.counts_in_order``);
* the transcript is the opening, every message, and the close, at or before the close in that
  order. A message written on a side that had not yet heard of the close, but stamped after it,
  is outside the transcript: a reader sees it flagged ``after_close``;
* each turn with a body is filed as one drawer whose text names the turn
  (``[<type> <event id> from=<a>[ to=<b>] at=<ts>]``, a newline, the body verbatim). The event
  id in the header makes two identical sentences two drawers, and makes the drawer the same
  whoever files it: palace drawers are content-addressed, so filing is idempotent everywhere.

Read positions are not here: they are local state of the reader's daemon (palaced.store.rooms).

What a peer wrote is read defensively: metadata of the wrong type or shape falls back to what
the room id and stream say, member lists are cut to ``MAX_MEMBERS``, and nothing here raises on
an event it did not write itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, final

from .authority import (
    ANY_AGENT,
    MAX_CLOCK_SKEW_S,
    OPENER,
    ROOM_MEMBER,
    Rule,
    Verdict,
    counts_in_order,
    flag_of,
    judge,
    rule_named,
)
from .errors import ValidationError
from .event_fields import PublicEvent, thread
from .identity import check_agent_id, order_key
from .projects import project_stream, slugify
from .validation import Limits, clean_optional

__all__ = [
    "DRAWER_HEADER_BYTES", "MAX_MEMBERS", "MAX_MEMBERS_SHOWN", "MAX_NAME_CHARS", "MAX_ROOM_BODY_CHARS", "ROOMS_ROOM",
    "ROOM_CLOSE", "ROOM_MESSAGE", "ROOM_OPEN", "ROOM_TYPES", "Room", "after_close", "check_body", "check_members",
    "check_place", "check_project", "check_room_id", "close_request", "compact", "derive_room", "drawer_text",
    "handoff", "is_room_event", "ID_HEX_CHARS", "NONCE_HEX_CHARS", "is_keyed", "is_turn", "keyed_room_id",
    "listed_members", "message_request", "needs_membership", "new_room_id", "open_request", "opens_room", "ordered",
    "room_slug", "transcript",
]

ROOM_OPEN: Final = "room.open"
ROOM_MESSAGE: Final = "room.message"
ROOM_CLOSE: Final = "room.close"
ROOM_TYPES: Final = frozenset({ROOM_OPEN, ROOM_MESSAGE, ROOM_CLOSE})
#: the log room every room event is written in (the stream is the project's)
ROOMS_ROOM: Final = "rooms"
# Why 40: MemPalace's room name length; short enough to read in an id, long enough to say what about.
MAX_NAME_CHARS: Final = 40
# Why 99,000: MemPalace's drawer holds 100,000 characters; a turn becomes one drawer whose header
# (type, event id, two agent ids of up to 256 characters, a time) must fit beside the body.
MAX_ROOM_BODY_CHARS: Final = 99_000
# Why 4 KiB: the header of a turn's drawer in UTF-8 at its longest (two 256-character agent ids at
# up to 4 bytes a character, plus type, id and time): the body leaves that much of the daemon's
# body limit so its drawer fits too.
DRAWER_HEADER_BYTES: Final = 4096
# Why 32: a room is a discussion, not an announcement to a fleet; the listed ids stay far below
# the metadata limit (32 × 256 characters).
MAX_MEMBERS: Final = 32
# Why 64: the members a room shows (listed, speakers, readers); the opener and the listed come first.
MAX_MEMBERS_SHOWN: Final = 64
# Why 8: 32 bits of the daemon's randomness made two rooms of one name a 1-in-4-billion clash (ids
# before keyed rooms; still read).
LEGACY_ID_HEX_CHARS: Final = 8
# Why 20: a keyed id's 80 bits of hash cannot be ground to name another opening (32 bits could,
# in minutes): the id binds the room to the one opening that made it.
ID_HEX_CHARS: Final = 20
# Why 32: the opening's nonce (128 bits of the daemon's randomness, in hex).
NONCE_HEX_CHARS: Final = 32
_NAME_RE: Final = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_ROOM_ID_RE: Final = re.compile(r"^room_([a-z0-9]+(?:-[a-z0-9]+)*)_([0-9a-f]{8}|[0-9a-f]{20})$")
_HEX_RE: Final = re.compile(r"^[0-9a-f]{8}$")
_NONCE_RE: Final = re.compile(r"^[0-9a-f]{32}$")
# Why 128: the memory's limit on a wing or room name (palace_proto.memory.MAX_NAME_CHARS).
_MAX_PLACE_CHARS: Final = 128


# -- names and ids ---------------------------------------------------------------------------------

def room_slug(name: Any) -> str:
    """A room's name as it appears in its id and as the palace room it is filed in: lower-case
    kebab, at most ``MAX_NAME_CHARS`` (``"API: v2 design"`` → ``api-v2-design``).

    Raises:
        ValidationError: empty (MemPalace: "room name must not be empty").
    """
    if not isinstance(name, str) or not name.strip():
        raise ValidationError("room name must not be empty", field="name")
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug[:MAX_NAME_CHARS].rstrip("-") or "room"


def new_room_id(slug: str, hex8: str) -> str:
    """``room_<slug>_<hex8>``: a room id as releases before keyed rooms drew it (tests, and the
    grammar they are read with)."""
    if not _NAME_RE.match(slug) or len(slug) > MAX_NAME_CHARS or not _HEX_RE.match(hex8):
        raise ValueError(f"not a room slug and 8 hex digits: {slug!r}, {hex8!r}")
    return f"room_{slug}_{hex8}"


def _binding(origin: str, opener: str, nonce: str) -> str:
    text = f"palace/room/v2\n{origin}\n{opener}\n{nonce}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(text).hexdigest()[:ID_HEX_CHARS]


def keyed_room_id(slug: str, *, origin: str, opener: str, nonce: str) -> str:
    """``room_<slug>_<20 hex>``, the hex bound to the opening that makes the room: the origin that
    writes it, its opener and its nonce (32 lower-case hex digits of the daemon's randomness, which
    the opening carries in its metadata).

    Raises:
        ValueError: not a slug, or not a nonce.
    """
    if not _NAME_RE.match(slug) or len(slug) > MAX_NAME_CHARS or not _NONCE_RE.match(nonce):
        raise ValueError(f"not a room slug and a 32-hex nonce: {slug!r}, {nonce!r}")
    return f"room_{slug}_{_binding(origin, opener, nonce)}"


def is_keyed(room_id: str) -> bool:
    """Whether ``room_id`` is bound to its opening (``keyed_room_id``), not a legacy random id."""
    match = _ROOM_ID_RE.match(room_id)
    return match is not None and len(match.group(2)) == ID_HEX_CHARS


def opens_room(room_id: str, event: PublicEvent) -> bool:
    """Whether ``event`` is the opening ``room_id`` is bound to (any opening, for a legacy id)."""
    if event.get("type") != ROOM_OPEN:
        return False
    match = _ROOM_ID_RE.match(room_id)
    if match is None:
        return False
    if len(match.group(2)) != ID_HEX_CHARS:
        return True
    metadata = event.get("metadata")
    nonce = metadata.get("nonce") if isinstance(metadata, Mapping) else None
    origin, opener = event.get("origin"), event.get("from_agent")
    return (isinstance(nonce, str) and bool(_NONCE_RE.match(nonce)) and isinstance(origin, str)
            and isinstance(opener, str) and _binding(origin, opener, nonce) == match.group(2))


def check_room_id(value: Any) -> str:
    """A room id as a request names it (surrounding blanks dropped).

    Raises:
        ValidationError: not ``room_<name>_<hex>`` (MemPalace's wording).
    """
    text = value.strip() if isinstance(value, str) else value
    match = _ROOM_ID_RE.match(text) if isinstance(text, str) else None
    if match is None or len(match.group(1)) > MAX_NAME_CHARS:
        raise ValidationError(f"room_id={value!r} is not a room id (expected room_<name>_<hex>)", field="room_id")
    return text


def _name_of(room_id: str) -> str:
    match = _ROOM_ID_RE.match(room_id)
    return match.group(1) if match else "room"


def check_body(value: Any, what: str, *, required: bool, limits: Limits) -> str:
    """An agenda, a message or an outcome, kept verbatim (never stripped).

    Raises:
        ValidationError: not a string, empty when ``required`` (MemPalace: "room message body must
            not be empty"), over ``MAX_ROOM_BODY_CHARS`` characters, or too many bytes for its
            drawer to fit the daemon's body limit.
    """
    field = what.split()[-1]
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise ValidationError(f"room {what} must be a string", field=field)
    if required and not value.strip():
        raise ValidationError(f"room {what} must not be empty", field=field)
    if len(value) > MAX_ROOM_BODY_CHARS:
        raise ValidationError(f"room {what} is {len(value)} characters; a room turn holds at most "
                              f"{MAX_ROOM_BODY_CHARS} so it can be filed as one drawer", field=field)
    if "\x00" in value:
        raise ValidationError(f"room {what} contains null bytes", field=field)
    size = len(value.encode("utf-8", "surrogatepass"))
    room = limits.max_body_bytes - DRAWER_HEADER_BYTES
    if size > room:
        raise ValidationError(f"room {what} is {size} bytes; this daemon files a room turn of at most {room} bytes "
                              "as one drawer (its body limit less the drawer's header)", field=field)
    return value


def check_members(value: Any) -> tuple[str, ...]:
    """The agents a room is opened for (besides its opener), in order, without repeats.

    Raises:
        ValidationError: not a list of agent ids, or more than ``MAX_MEMBERS``.
    """
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValidationError("members must be a list of agent ids", field="members")
    members = tuple(dict.fromkeys(check_agent_id(v, field="members") for v in value))
    if len(members) > MAX_MEMBERS:
        raise ValidationError(f"members lists {len(members)} agents; a room is opened for at most {MAX_MEMBERS}",
                              field="members")
    return members


def check_place(field: str, value: Any) -> str | None:
    """A wing or palace room a transcript is filed in (None: the default), by the memory's rules.

    Raises:
        ValidationError: a control character, or longer than the memory allows.
    """
    cleaned = clean_optional(field, value)
    if cleaned is not None and len(cleaned) > _MAX_PLACE_CHARS:
        raise ValidationError(f"{field} must be at most {_MAX_PLACE_CHARS} characters", field=field)
    return cleaned


# -- the events the daemon writes ------------------------------------------------------------------

def check_project(value: Any) -> str:
    """The project a room belongs to (its stream is ``project/<slug>``, its wing the slug).

    Raises:
        ValidationError: empty (MemPalace: "room project must not be empty").
    """
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("room project must not be empty", field="project")
    return value


def open_request(*, room_id: str, project: Any, from_agent: str, agenda: str, members: Sequence[str] = (),
                 wing: str | None = None, palace_room: str | None = None, nonce: str | None = None) -> dict[str, Any]:
    """The append request (wire form) that opens ``room_id`` (``nonce``: the one its keyed id was
    made with, ``keyed_room_id``).

    Raises:
        ValidationError: an empty project (``check_project``).
    """
    slug = slugify(check_project(project), empty="project")
    name = _name_of(room_id)
    metadata: dict[str, Any] = {"name": name, "project": slug, "wing": wing or slug, "palace_room": palace_room or name}
    if nonce is not None:
        metadata["nonce"] = nonce
    if members:
        metadata["members"] = list(members)
    return {**thread(project_stream(project), ROOMS_ROOM, room_id), "type": ROOM_OPEN, "from_agent": from_agent,
            "to_agent": "*", "body": agenda, "metadata": metadata}


def message_request(room: Room, *, from_agent: str, body: str, to_agent: str | None = None) -> dict[str, Any]:
    """The append request of one turn in ``room`` (to everyone unless ``to_agent`` names one)."""
    return {"type": ROOM_MESSAGE, "stream": room.stream, "room": ROOMS_ROOM, "from_agent": from_agent,
            "to_agent": to_agent or "*", "correlation_id": room.room_id, "body": body}


def close_request(room: Room, *, from_agent: str, outcome: str) -> dict[str, Any]:
    """The append request that closes ``room`` (the outcome is its body)."""
    return {"type": ROOM_CLOSE, "stream": room.stream, "room": ROOMS_ROOM, "from_agent": from_agent,
            "to_agent": "*", "correlation_id": room.room_id, "body": outcome}


def handoff(room_id: str) -> str:
    """What the opener passes on so another agent joins: the id, and how to read and speak."""
    return (f"Join palace room {room_id}: read it as your own agent id (MCP mempalace_room_read, or "
            f"`palacectl room read {room_id} --agent YOU`), then speak only if you add something new "
            f"(mempalace_room_say, or `palacectl room say {room_id} --from-agent YOU --body …`). Once you have "
            f"read it, `palacectl watch --agent YOU` wakes you when someone speaks there.")


# -- reading a room from its events ----------------------------------------------------------------

def is_room_event(event: PublicEvent, room_id: str | None = None) -> bool:
    """Whether ``event`` is a room's (of ``room_id``, if given): its type and log room say so."""
    return (event.get("type") in ROOM_TYPES and event.get("room") == ROOMS_ROOM
            and isinstance(event.get("correlation_id"), str)
            and (room_id is None or event.get("correlation_id") == room_id))


def _key(event: PublicEvent) -> tuple[str, str]:
    return order_key(event.get("created_at"), event.get("id"))


def _place(value: Any, fallback: str) -> str:
    """A wing or palace room from another daemon's metadata, or ``fallback`` when it is unusable."""
    try:
        return check_place("place", value) or fallback
    except ValidationError:
        return fallback


def listed_members(metadata: Any) -> tuple[str, ...]:
    """The members an opening's metadata lists, as far as they are agent ids (a peer's words: a
    value of the wrong type is no list, and the list is cut at ``MAX_MEMBERS``)."""
    values = metadata.get("members") if isinstance(metadata, Mapping) else None
    if isinstance(values, str) or not isinstance(values, Sequence):
        return ()
    out: list[str] = []
    for value in values[:MAX_MEMBERS]:
        try:
            out.append(check_agent_id(value, field="members"))
        except ValidationError:
            continue
    return tuple(dict.fromkeys(out))


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Room:
    """A room as its events say, the same on every replica holding the same events."""

    room_id: str
    name: str
    project: str
    wing: str
    palace_room: str
    stream: str
    agenda: str
    opened_by: str
    opened_at: str
    open_event_id: str
    #: the opener, the listed members, then whoever spoke (first turn first), then local readers
    members: tuple[str, ...]
    #: ``room.message`` events (those after the close included)
    messages: int
    #: the newest ``created_at`` among the room's events
    last_activity: str
    closed: bool = False
    closed_by: str | None = None
    closed_at: str | None = None
    close_event_id: str | None = None
    outcome: str | None = None
    #: how many closes exist (more than one when both sides of a partition closed)
    closes: int = 0
    #: the events the authority table did not allow (``authority.flag_of``): no turns, they move nothing
    flagged: tuple[Mapping[str, Any], ...] = ()

    @property
    def flagged_ids(self) -> frozenset[Any]:
        return frozenset(f["event_id"] for f in self.flagged)

    @property
    def close_key(self) -> tuple[str, str] | None:
        return order_key(self.closed_at, self.close_event_id) if self.closed else None  # type: ignore[arg-type]

    def to_wire(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["members"] = list(self.members)
        out["flagged"] = [dict(f) for f in self.flagged]
        return out


def derive_room(room_id: str, events: Iterable[PublicEvent], *, readers: Sequence[str] = (),
                messages: int | None = None, last_activity: str | None = None,
                speakers: Sequence[str] | None = None, first_spoke: Mapping[str, str] | None = None,
                now: str | None = None) -> Room | None:
    """The room ``room_id`` from its events (any order; others are ignored), or None without the
    opening it is bound to. ``readers`` are the agents whose read position this daemon keeps. A
    listing that counts messages in SQL passes ``messages``, ``last_activity``, ``speakers`` and
    ``first_spoke`` (each speaker's earliest message's ``created_at``) with only the opening and
    closing events. ``now``, the judging replica's clock: events dated too far ahead of it take no
    part yet (``authority.counts_in_order``). Who may open, speak and close is the authority
    table's; see the module docstring."""
    every = sorted((e for e in events if is_room_event(e, room_id)), key=_key)
    flagged: list[dict[str, Any]] = []
    mine = []
    for event in every:
        if event.get("impersonation"):
            continue  # written as an agent its daemon does not hold: it holds no role, and is no turn
        if not counts_in_order(event.get("created_at"), now):
            flagged.append(flag_of(event, Verdict(False, "clock", f"dated more than {MAX_CLOCK_SKEW_S // 60} minutes "
                                                  "ahead of this replica's clock: it counts once that clock reaches it")))
            continue
        mine.append(event)
    opens = [e for e in mine if e.get("type") == ROOM_OPEN and opens_room(room_id, e)]
    if not opens:
        return None
    opening = opens[0]
    meta = opening.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    opener = str(opening.get("from_agent"))
    listed = listed_members(meta)
    open_rule, say_rule, close_rule = rule_named("room.open"), rule_named("room.message"), rule_named("room.close")
    spoke: dict[str, str] = dict(first_spoke or {})
    turns_by_origin: dict[Any, int] = {}
    close: PublicEvent | None = None
    closes = 0
    for event in mine:
        kind, who = event.get("type"), str(event.get("from_agent"))
        if kind == ROOM_OPEN:
            if event is not opening:
                why = ("not this room's opening: the room id is bound to the opening that made it"
                       if is_keyed(room_id) else "a second opening of the room")
                flagged.append(flag_of(event, judge(open_rule, (), refers=False, refers_why=f"room.open: {why}")))
            continue
        if kind == ROOM_MESSAGE:
            verdict = judge(say_rule, {ANY_AGENT}, agent=who, origin_count=turns_by_origin.get(event.get("origin"), 0))
            if not verdict.ok:
                flagged.append(flag_of(event, verdict))
                continue
            turns_by_origin[event.get("origin")] = turns_by_origin.get(event.get("origin"), 0) + 1
            if first_spoke is None:
                spoke.setdefault(who, str(event.get("created_at")))
            continue
        # a close
        roles = {ANY_AGENT}
        if who == opener:
            roles.add(OPENER)
        if who in listed or (who in spoke and _normal(spoke[who]) <= _normal(event.get("created_at"))):
            roles.add(ROOM_MEMBER)
        verdict = judge(close_rule, roles, agent=who, names={OPENER: opener})
        if not verdict.ok:
            flagged.append(flag_of(event, verdict))
            continue
        closes += 1
        if close is None:
            close = event
    stream = opening.get("stream") if isinstance(opening.get("stream"), str) else ""
    stream_slug = stream[len("project/"):] if stream.startswith("project/") else ""
    name = str(meta["name"]) if isinstance(meta.get("name"), str) and _NAME_RE.match(meta["name"]) \
        and len(meta["name"]) <= MAX_NAME_CHARS else _name_of(room_id)
    project = _place(meta.get("project"), stream_slug or "project")
    flagged_ids = {f["event_id"] for f in flagged}
    if speakers is None:
        speakers = [str(e.get("from_agent")) for e in mine
                    if e.get("type") in (ROOM_MESSAGE, ROOM_CLOSE) and e.get("id") not in flagged_ids]
    if messages is None:
        messages = sum(1 for e in mine if e.get("type") == ROOM_MESSAGE and e.get("id") not in flagged_ids)
    if last_activity is None:
        last_activity = str(every[-1].get("created_at"))
    members = tuple(dict.fromkeys([opener, *listed, *speakers, *readers]))
    return Room(
        room_id=room_id, name=name, project=project, wing=_place(meta.get("wing"), project),
        palace_room=_place(meta.get("palace_room"), name), stream=stream,
        agenda=str(opening.get("body") or ""), opened_by=opener,
        opened_at=str(opening.get("created_at")), open_event_id=str(opening.get("id")),
        members=members[:MAX_MEMBERS_SHOWN], messages=messages, last_activity=last_activity,
        closed=close is not None,
        closed_by=str(close.get("from_agent")) if close else None,
        closed_at=str(close.get("created_at")) if close else None,
        close_event_id=str(close.get("id")) if close else None,
        outcome=str(close.get("body") or "") if close else None,
        closes=closes,
        flagged=tuple(sorted(flagged, key=lambda f: order_key(str(f["created_at"]), str(f["event_id"])))),
    )


def _normal(stamp: Any) -> str:
    return order_key(str(stamp), "")[0]


def is_turn(room: Room, event: PublicEvent) -> bool:
    """Whether ``event`` is one of ``room``'s turns: its opening, a message the table allows, or
    its close (not another opening, a flagged event, nor a close that lost to an earlier one)."""
    kind = event.get("type")
    if event.get("id") in room.flagged_ids or event.get("impersonation"):
        return False
    if kind == ROOM_MESSAGE:
        return True
    if kind == ROOM_OPEN:
        return event.get("id") == room.open_event_id
    return kind == ROOM_CLOSE and event.get("id") == room.close_event_id


def after_close(room: Room, event: PublicEvent) -> bool:
    """Whether ``event`` comes after the room's close (by ``(created_at, id)``): written on a side
    of a partition that had not heard of the close yet, or a close that lost."""
    key = room.close_key
    return key is not None and _key(event) > key


def transcript(room: Room, events: Iterable[PublicEvent]) -> list[PublicEvent]:
    """The room's turns in order; once it is closed, those at or before the close (the rest are
    ``after_close``). The same list on every replica holding the same events."""
    turns = sorted((e for e in events if is_room_event(e, room.room_id) and is_turn(room, e)), key=_key)
    return [e for e in turns if not after_close(room, e)]


def ordered(room: Room, events: Iterable[PublicEvent]) -> list[PublicEvent]:
    """Every event of the room in the order every replica agrees on (what a full view shows)."""
    return sorted((e for e in events if is_room_event(e, room.room_id)), key=_key)


def compact(event: PublicEvent, room: Room | None = None) -> dict[str, Any]:
    """The fields a participant reads (MemPalace's compact event), plus ``after_close`` when the
    turn lies after the close, ``body_redacted`` and ``impersonation`` when the log says so."""
    out: dict[str, Any] = {"id": event.get("id"), "type": event.get("type"), "from_agent": event.get("from_agent"),
           "to_agent": event.get("to_agent"), "body": event.get("body") or "", "created_at": event.get("created_at")}
    if room is not None and after_close(room, event):
        out["after_close"] = True
    for flag in ("body_redacted", "impersonation"):
        if event.get(flag):
            out[flag] = event[flag]
    return out


def drawer_text(event: PublicEvent) -> str | None:
    """The drawer a turn is filed as: ``[<type> <id> from=<a>[ to=<b>] at=<ts>]``, a newline, and
    the body verbatim; None for a turn without words (an empty agenda or outcome, a redacted body)."""
    body = event.get("body")
    if event.get("body_redacted") or not isinstance(body, str) or not body.strip():
        return None
    header = f"[{event.get('type')} {event.get('id')} from={event.get('from_agent')}"
    to = event.get("to_agent")
    if to and to != "*":
        header += f" to={to}"
    return f"{header} at={event.get('created_at')}]\n{body}"


def needs_membership(event: PublicEvent, agent: str) -> bool:
    """Whether a watch of ``agent`` should wake on ``event`` only if the agent is one of the room's
    members: a room event to everyone (``*``) by someone else. One addressed to the agent wakes it
    like any other message; events that are not a room's are none of this."""
    return is_room_event(event) and event.get("to_agent") == "*" and event.get("from_agent") != agent


# -- the feature's declaration (palace_proto.features puts every feature's together) ----------------

#: the local API's operations of rooms
OPS: Final = frozenset({"room_open", "room_read", "room_say", "room_close", "room_list", "room_show"})
NAMESPACE: Final = "room."
# Why 5,000: the turns one daemon lets one room take (palaced's room_say refuses more).
MAX_ROOM_TURNS_PER_ORIGIN: Final = 5_000
RULES: Final[tuple[Rule, ...]] = (
    Rule("room.open", ("room.open",), (), "room", frozenset({ANY_AGENT}),
         "a room id bound to this very opening (its opener, origin and nonce)",
         "a room is its opening: no later event, however dated, replaces it",
         written_by="room_open (palacectl room open)",
         test="tests/proto/test_rooms.py::test_a_keyed_room_is_its_opening_and_a_backdated_second_opening_changes_nothing"),
    Rule("room.message", ("room.message",), (), "room", frozenset({ANY_AGENT}),
         "an open room (anyone with its id joins, as in MemPalace)",
         "turns in (created_at, event id) order; those after the close are after_close",
         written_by="room_say (palacectl room say)", per_origin=MAX_ROOM_TURNS_PER_ORIGIN,
         test="tests/proto/test_rooms.py::test_one_daemons_turns_beyond_the_bound_are_no_turns"),
    Rule("room.close", ("room.close",), (), "room", frozenset({OPENER, ROOM_MEMBER}),
         "an open room",
         "the earliest close by the opener or a member closes the room",
         written_by="room_close (palacectl room close)",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
)
