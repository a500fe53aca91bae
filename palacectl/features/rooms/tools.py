"""The rooms feature's MCP tools (``rooms``): a discussion among agents (MemPalace RFC 006, docs/rooms.md).

Each is declared with ``mcp_tools.tool`` in the group this package's declaration lists it in;
``mcp_tools.build_registry`` puts them together with the core's. Must not import trio or typer.
"""

from __future__ import annotations

from ...mcp_tools import Palace, Result, drop_none, tool

__all__ = [
    "mempalace_room_close", "mempalace_room_list", "mempalace_room_open", "mempalace_room_read",
    "mempalace_room_say",
]


@tool("rooms", mutating=True, returns={"room": "object", "event": "object", "handoff": "string"},
      extras=("members", "wing", "room", "from_agent"), description=(
    "Open a discussion room in a project (name: a few words; agenda: what to settle). Others join with the "
    "room id in handoff. Returns {success, room, event, handoff}."))
async def mempalace_room_open(
    palace: Palace, /, project: str, name: str, agenda: str = "", from_agent: str | None = None,
    members: list[str] | None = None, wing: str | None = None, room: str | None = None,
) -> Result:
    return await palace.daemon.call("room_open", **drop_none(
        project=project, name=name, agenda=agenda, members=members, wing=wing, room=room,
        from_agent=palace.speaks_as("from_agent", from_agent)))


@tool("rooms", extras=("agent",), returns={"room": "object", "events": "array<object>", "more": "boolean",
                                           "count": "integer"}, description=(
    "What you have not read in a room yet, oldest first; your read position is kept for you (later reads "
    "leave your own turns out). Returns {room, events, more, count}."))
async def mempalace_room_read(palace: Palace, /, room_id: str, limit: int = 50, agent: str | None = None) -> Result:
    return await palace.daemon.call("room_read", room_id=room_id, limit=limit,
                                    agent=palace.speaks_as("agent", agent))


@tool("rooms", mutating=True, returns={"event": "object", "unread": "integer"}, extras=("to_agent", "from_agent"),
      description=(
    "Say something in an open room (to everyone, or to_agent). Returns {success, event, unread}: unread "
    "counts others' turns since your last read."))
async def mempalace_room_say(palace: Palace, /, room_id: str, body: str, to_agent: str | None = None,
                             from_agent: str | None = None) -> Result:
    return await palace.daemon.call("room_say", **drop_none(
        room_id=room_id, body=body, to_agent=to_agent, from_agent=palace.speaks_as("from_agent", from_agent)))


# Destructive: it ends the room for every member; a second close changes nothing.
@tool("rooms", mutating=True, destructive=True, idempotent=True, returns={
    "room": "object", "event": "object|null", "already_closed": "boolean", "filed": "integer",
    "already_filed": "integer", "wing": "string|null", "palace_room": "string|null"}, extras=("from_agent",),
      description=(
    "Close a room with its outcome; its transcript is filed as drawers (wing and room it names), found by "
    "mempalace_search. A second close changes nothing. Returns {success, room, event, already_closed, filed, "
    "already_filed, wing, palace_room}."))
async def mempalace_room_close(palace: Palace, /, room_id: str, outcome: str = "",
                               from_agent: str | None = None) -> Result:
    return await palace.daemon.call("room_close", room_id=room_id, outcome=outcome,
                                    from_agent=palace.speaks_as("from_agent", from_agent))


@tool("rooms", extras=("project", "agent"), returns={"rooms": "array<object>", "count": "integer",
                                                     "capped": "boolean"}, description=(
    "Rooms, newest first: status open or closed; project; agent (rooms it is a member of). Returns {rooms, "
    "count}."))
async def mempalace_room_list(palace: Palace, /, status: str | None = None, project: str | None = None,
                              agent: str | None = None, limit: int | None = None) -> Result:
    return await palace.daemon.call("room_list", **drop_none(status=status, project=project, agent=agent,
                                                              limit=limit))
