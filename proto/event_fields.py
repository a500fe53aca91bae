"""The event's fields, once: the table every other form of an event is derived from.

Owns: ``EVENT_FIELDS`` — each field's name, wire type, whether it may be absent, its place in the
signed encoding, its key in the public object, its column of the ``events`` table, and whether an
author writes it (and so whether an append, the CLI's ``append`` and the MCP ``append`` tool take
it). From it come the signed event's order (``envelope``), the public object and the row mapping
(``palaced.store.rows``), the peer codec (``peer``), the append's validation order
(``validation.AppendRequest``) and the clients' options (``palacectl``): adding a field is a row
here, and an import-time check below fails while any of those forms disagrees with it.

Also owns the public object's type, ``PublicEvent`` (what every derivation reads: tasks, leases,
rooms, questions), and the routing of an event on a thread (``thread``, ``reply_to``). What an
author writes, ``EventContent``, is ``event_content``'s. Pure, and light: a client's quick path
loads it (through ``filters``), so it imports no dataclasses (tests/e2e/test_cli_quick.py).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any, Final, Literal, NamedTuple, TypedDict

__all__ = [
    "AUTHOR_FIELDS",
    "BRIEF_KEYS",
    "COLUMNS",
    "EVENT_FIELDS",
    "EventField",
    "FILTERED_FIELDS",
    "PUBLIC_KEYS",
    "PublicEvent",
    "SIGNED_FIELDS",
    "THREAD_KEYS",
    "Role",
    "Wire",
    "author_args",
    "author_field",
    "blank_public",
    "git_base",
    "reply_to",
    "thread",
    "thread_of",
]

#: What a field holds on the wire (msgpack to peers, JSON to clients):
#: ``text`` a string; ``int`` a positive integer; ``hash`` 32 bytes; ``signature`` 64 bytes;
#: ``ids`` artifact ids (a tuple in memory, a list on the wire and in the public object, JSON text
#: in its column); ``json`` a JSON object (canonical JSON text in memory, on the wire and in its
#: column; the object itself in the public view and in an append); ``body`` text that a redaction
#: removes (None in memory and on the wire, NULL in its column, "" in the public view).
Wire = Literal["text", "int", "hash", "signature", "ids", "json", "body"]

#: Who sets a field: ``author`` the writer of an append; ``chain`` the writing daemon, placing the
#: event in its origin's chain; ``seal`` the hashes and signature over the rest; ``derived`` a
#: function of signed fields (the id); ``local`` the replica alone (its arrival order, unsigned).
Role = Literal["author", "chain", "seal", "derived", "local"]


class EventField(NamedTuple):
    """One field of an event, and how each form of an event carries it."""

    name: str
    """the attribute of ``SignedEvent`` (``derived`` and ``local`` fields: of the public object only)"""
    role: Role
    wire: Wire
    optional: bool
    """may be left out by an author (and then is None, or empty: ``ids``, ``json``, ``body``)"""
    canonical: int | None
    """its position in the signed encoding, after the version number (None: not signed directly;
    the body is signed through ``body_sha256``)"""
    public: str | None
    """its key in the public object (None: shown by none)"""
    column: str
    """its column of the ``events`` table"""
    option: str
    """its name among an append's arguments ("": an author does not write it)"""
    filter: str | None
    """its list/wait/watch filter (plural: each a list meaning OR; None: not filterable)"""
    brief: bool
    """shown in an event's brief form (an inbox item: who wrote what to whom, when, on which thread)"""
    help: str = ""
    """what a client's option says of it (CLI ``append``, MCP ``append``)"""


def _field(name: str, role: Role, wire: Wire, *, optional: bool = False, canonical: int | None = None,
           public: str | None = "", column: str = "", option: str | None = None, filter: str | None = None,
           brief: bool = False, help: str = "") -> EventField:
    """A row of the table: the public key, the column and the option default to the name (an
    option only for an author's field)."""
    return EventField(name, role, wire, optional, canonical, name if public == "" else public,
                      column or name, (name if role == "author" else "") if option is None else option, filter,
                      brief, help)


#: Every field of an event, in the order of its public object (the fields no public object shows
#: come last). The positions in the signed encoding are the protocol: they never change.
EVENT_FIELDS: Final[tuple[EventField, ...]] = (
    _field("id", "derived", "text", brief=True),
    _field("seq", "local", "int"),
    _field("origin", "chain", "text", canonical=0),
    _field("origin_seq", "chain", "int", canonical=1),
    _field("type", "author", "text", canonical=4, filter="types", brief=True, help="Event type, e.g. task.reply."),
    _field("stream", "author", "text", canonical=5, filter="streams", help="Stream, e.g. project/palace."),
    _field("room", "author", "text", canonical=6, filter="rooms", help="Room, e.g. delegation."),
    _field("topic", "author", "text", optional=True, canonical=7, filter="topics", help="Topic within the room."),
    _field("from_agent", "author", "text", canonical=8, filter="from_agents", brief=True, help="Your agent id."),
    _field("to_agent", "author", "text", optional=True, canonical=9, filter="to_agents", brief=True,
           help="Addressee, or * to broadcast."),
    _field("correlation_id", "author", "text", optional=True, canonical=10, filter="correlation_ids",
           brief=True, help="The thread it belongs to (a task's id)."),
    _field("branch", "author", "text", optional=True, canonical=11, help="Git branch."),
    _field("base_commit", "author", "text", optional=True, canonical=12, help="Git commit the work is based on."),
    _field("status", "author", "text", optional=True, canonical=13, filter="statuses", brief=True,
           help="open, claimed, ready, applied, blocked, failed or superseded."),
    _field("ack_of", "author", "text", optional=True, canonical=14, help="The event id this acknowledges."),
    _field("artifact_ids", "author", "ids", optional=True, canonical=15, help="Attached artifact ids."),
    _field("body", "author", "body", optional=True, brief=True, help="Body text (verbatim)."),
    _field("metadata_json", "author", "json", optional=True, canonical=17, public="metadata", column="metadata",
           option="metadata", help="A JSON object."),
    _field("created_at", "chain", "text", canonical=3, brief=True),
    _field("body_sha256", "seal", "hash", canonical=16, public=None),
    _field("prev_hash", "chain", "hash", canonical=2, public=None),
    _field("event_hash", "seal", "hash", public=None),
    _field("signature", "seal", "signature", public=None),
)


#: The public object's keys, in output order (MemPalace-compatible envelope); a redacted event
#: adds ``body_redacted`` and ``body_sha256``.
PUBLIC_KEYS: Final = tuple(f.public for f in EVENT_FIELDS if f.public is not None)
#: The signed content, in canonical order.
SIGNED_FIELDS: Final = tuple(f.name for f in sorted((f for f in EVENT_FIELDS if f.canonical is not None),
                                                       key=operator.attrgetter("canonical")))
#: The columns of ``events`` in row order: ``seq`` first (SQLite assigns it), then the table's order.
COLUMNS: Final = ("seq", *(f.column for f in EVENT_FIELDS if f.role != "local"))
#: What an author writes, in the order an append is checked: the required fields first (the first
#: broken rule is the one reported, in MemPalace's order), then the rest in the table's order.
AUTHOR_FIELDS: Final = tuple(sorted((f for f in EVENT_FIELDS if f.role == "author"), key=lambda f: f.optional))


#: The keys of an event's brief form, in the public object's order.
BRIEF_KEYS: Final = tuple(f.public for f in EVENT_FIELDS if f.brief and f.public is not None)
#: Each list/wait/watch filter (plural wire name) and the field it matches.
FILTERED_FIELDS: Final = {f.filter: f.name for f in EVENT_FIELDS if f.filter is not None}
#: Where a thread lives: the fields every event of one thread (a task, a lease, a room, a
#: question and its answer) shares, and a reply copies from what it answers.
THREAD_KEYS: Final = ("stream", "room", "topic", "correlation_id")


def author_field(option: str) -> EventField | None:
    """The author's field an append argument names (``metadata``, ``artifact_ids``, ``topic``…)."""
    for field in AUTHOR_FIELDS:
        if field.option == option:
            return field
    return None


class _Shown(TypedDict):
    """The keys every public object has."""

    id: str
    seq: int
    origin: str
    origin_seq: int
    type: str
    stream: str
    room: str
    topic: str | None
    from_agent: str
    to_agent: str | None
    correlation_id: str | None
    branch: str | None
    base_commit: str | None
    status: str | None
    ack_of: str | None
    artifact_ids: list[str]
    body: str
    metadata: dict[str, Any]
    created_at: str


class PublicEvent(_Shown, total=False):
    """The public object of an event (``SignedEvent.to_public``, a row read back, a draft), as the
    derivations read it: ``_Shown``'s keys, the body's hash once the body was redacted, and a
    replica's own annotation."""

    body_redacted: bool
    body_sha256: str
    impersonation: dict[str, Any]
    """set by a replica on an event whose daemon may not speak for its author (``identity.judge``)"""
    body_truncated: bool
    """a preview's (``envelope.preview_event``): the body was cut, from ``body_length`` characters"""
    body_length: int


def author_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """The append's arguments among ``args``: each author field's, where given."""
    return {field.option: args[field.option] for field in AUTHOR_FIELDS if field.option in args}


def thread(stream: str, room: str, correlation_id: str | None, topic: str | None = None) -> dict[str, Any]:
    """The routing of an event on a thread (an append's arguments: add its type, author, body…);
    the topic only when there is one."""
    routing = dict(zip(THREAD_KEYS, (stream, room, topic, correlation_id), strict=True))
    if topic is None:
        del routing["topic"]
    return routing


def thread_of(event: Mapping[str, Any]) -> dict[str, Any]:
    """The routing of ``event``'s thread (its public object), for another event on it."""
    return {key: event.get(key) for key in THREAD_KEYS}


def reply_to(event: Mapping[str, Any]) -> dict[str, Any]:
    """The routing of a reply to ``event`` (its public object): on its thread, addressed to its
    author, acknowledging it (``ack_of``)."""
    reply = thread_of(event)
    reply["to_agent"] = event.get("from_agent")
    reply["ack_of"] = event.get("id")
    return reply


def git_base(event: Mapping[str, Any]) -> tuple[Any, Any]:
    """(branch, base commit) an event names (a task's request, a patch's announcement)."""
    return event.get("branch"), event.get("base_commit")


def blank_public() -> PublicEvent:
    """A public object with every key, each None but the lists and objects, which are empty: the
    start of an event a derivation is shown that is not (yet) a row (a draft, a report)."""
    view: dict[str, Any] = dict.fromkeys(PUBLIC_KEYS)
    view["artifact_ids"] = []
    view["metadata"] = {}
    view["body"] = ""
    return view  # type: ignore[return-value]  # PUBLIC_KEYS are PublicEvent's keys (checked below)


def _check_table() -> None:
    """The typed shapes agree with the table (raises at import when a field is added to one only)."""
    public = tuple(key for key in PublicEvent.__annotations__ if key in PublicEvent.__required_keys__)
    if public != PUBLIC_KEYS:
        raise AssertionError(f"PublicEvent's keys {public} are not the table's public keys {PUBLIC_KEYS}")
    positions = sorted(f.canonical for f in EVENT_FIELDS if f.canonical is not None)
    if positions != list(range(len(positions))):
        raise AssertionError("the signed positions must be 0..n-1, each once")


_check_table()
