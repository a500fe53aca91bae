"""The memory feature's MCP tools: search and file drawers (``core``); the knowledge graph, diaries,
the wings and their tunnels (``memory``).

Each is declared with ``mcp_tools.tool`` in the group this package's declaration lists it in;
``mcp_tools.build_registry`` puts them together with the core's. Must not import trio or typer.
"""

from __future__ import annotations

from ...mcp_tools import Palace, Result, drop_none, tool

__all__ = [
    "mempalace_add_drawer", "mempalace_diary_read", "mempalace_diary_write", "mempalace_find_tunnels",
    "mempalace_kg_add", "mempalace_kg_invalidate", "mempalace_kg_query", "mempalace_list_agents",
    "mempalace_search",
]


@tool("core", extras=("since", "before"), returns={
    "query": "string", "results": "array<object>", "count": "integer", "mode": "string",
    "?pending_embeddings": "integer", "?timings_ms": "object"}, description=(
    "Search the shared memory before you answer. query: keywords (<= 250 chars). Returns verbatim "
    "drawers (wing, room, drawer_id, source, score): quote, do not paraphrase."))
async def mempalace_search(
    palace: Palace, /, query: str, limit: int = 5, wing: str | None = None, room: str | None = None,
    since: str | None = None, before: str | None = None,
) -> Result:
    return await palace.daemon.call("search", **drop_none(
        query=query, limit=limit, wing=wing, room=room, since=since, before=before))


# The same content in the same wing and room is the drawer filed already.
@tool("core", mutating=True, idempotent=True, extras=("source_file", "added_by"), returns={
    "drawer_id": "string", "wing": "string", "room": "string", "duplicate": "boolean", "filed_at": "string",
    "?event_id": "string"}, description=(
    "File lasting knowledge verbatim in a wing and room (decisions, lessons; never secrets); the same "
    "content returns the existing drawer. Returns {success, drawer_id}."))
async def mempalace_add_drawer(
    palace: Palace, /, wing: str, room: str, content: str, source_file: str | None = None,
    added_by: str | None = None,
) -> Result:
    return await palace.daemon.call("memory_add", **drop_none(
        wing=wing, room=room, content=content, source_file=source_file,
        added_by=palace.speaks_as("added_by", added_by)))


@tool("memory", returns={
    "entity": "string", "as_of": "string|null", "active_facts": "array<object>", "historical_facts": "array<object>",
    "future_facts": "array<object>", "facts": "array<object>", "count": "integer"}, description=(
    "Facts about an entity as of a date (default today): active, historical and future facts. "
    "direction: outgoing, incoming or both."))
async def mempalace_kg_query(palace: Palace, /, entity: str, as_of: str | None = None,
                             direction: str = "both") -> Result:
    return await palace.daemon.call("kg_query", **drop_none(entity=entity, as_of=as_of, direction=direction))


@tool("memory", mutating=True, returns={"triple_id": "string", "fact": "string", "event_id": "string"},
      extras=("source_drawer_id", "source_file"), description=(
    "Add a fact subject → predicate → object, optionally valid_from/valid_to (YYYY-MM-DD). When a fact "
    "changes: invalidate the old one, then add the new one. Returns {success, triple_id, fact}."))
async def mempalace_kg_add(
    palace: Palace, /, subject: str, predicate: str, object: str, valid_from: str | None = None,
    valid_to: str | None = None, source_drawer_id: str | None = None, source_file: str | None = None,
) -> Result:
    return await palace.daemon.call("kg_add", **drop_none(
        subject=subject, predicate=predicate, object=object, valid_from=valid_from, valid_to=valid_to,
        source_drawer_id=source_drawer_id, source_file=source_file, added_by=palace.agent))


# Destructive: it ends what everyone reads as true now (the fact stays, as history).
@tool("memory", mutating=True, destructive=True, returns={
    "fact": "string", "ended": "string", "facts_ended": "integer", "event_id": "string"},
      description="End a fact's validity (ended: YYYY-MM-DD, default today); it stays as history.")
async def mempalace_kg_invalidate(palace: Palace, /, subject: str, predicate: str, object: str,
                                  ended: str | None = None) -> Result:
    return await palace.daemon.call("kg_invalidate", **drop_none(
        subject=subject, predicate=predicate, object=object, ended=ended, added_by=palace.agent))


@tool("memory", mutating=True, extras=("agent_name",), returns={
    "entry_id": "string", "agent": "string", "wing": "string", "topic": "string", "timestamp": "string",
    "event_id": "string"},
      description="Write in your own diary (wing_<you>/diary) with a topic. Returns {success, entry_id, timestamp}.")
async def mempalace_diary_write(palace: Palace, /, entry: str, topic: str = "general",
                                agent_name: str | None = None) -> Result:
    return await palace.daemon.call("diary_write", agent_name=palace.speaks_as("agent_name", agent_name),
                                    entry=entry, topic=topic, added_by=palace.agent)


@tool("memory", returns={"agent": "string", "wing": "string", "entries": "array<object>", "total": "integer",
                          "showing": "integer"},
      description="Read an agent's diary, newest first: {agent, entries, total, showing}. last_n <= 100.")
async def mempalace_diary_read(palace: Palace, /, agent_name: str | None = None, last_n: int = 10) -> Result:
    return await palace.daemon.call("diary_read", agent_name=agent_name or palace.agent, last_n=last_n)


@tool("memory", returns={"agents": "array<object>", "count": "integer", "stale_after_s": "number",
                          "daemon": "string|null"},
      description="Every agent the palace has seen: wing, last activity, whether it is watching now.")
async def mempalace_list_agents(palace: Palace, /) -> Result:
    return await palace.daemon.call("agents")


@tool("memory", returns={"wing_a": "string|null", "wing_b": "string|null", "tunnels": "array<object>",
                          "count": "integer"},
      description="Rooms that two wings share (both optional): where their knowledge meets.")
async def mempalace_find_tunnels(palace: Palace, /, wing_a: str | None = None, wing_b: str | None = None) -> Result:
    return await palace.daemon.call("tunnels", **drop_none(wing_a=wing_a, wing_b=wing_b))
