"""The leases feature's MCP tools (``leases``): acquire, renew, release, list, check; its resource: the active leases.

Each is declared with ``mcp_tools.tool`` in the group this package's declaration lists it in;
``mcp_tools.build_registry`` puts them together with the core's. Must not import trio or typer.
"""

from __future__ import annotations

from palace_proto.errors import ApiError

from ...mcp_tools import Palace, Result, drop_none, read_resource, resource, tool

__all__ = [
    "leases_resource", "mempalace_lease_acquire", "mempalace_lease_check", "mempalace_lease_list",
    "mempalace_lease_release", "mempalace_lease_renew",
]


# Destructive: force=true takes another agent's lease from under it.
@tool("leases", mutating=True, destructive=True, returns={
    "lease": "object|null", "event": "object", "forced": "array<object>"}, extras=("agent",), description=(
    "Lease paths before editing shared files: globs from the repository root (src/api/**) or res:NAME. "
    "Exclusive unless shared; ttl 90s/30m/2h/7d (default 1h). Refused, naming the holder, if it overlaps "
    "another agent's lease; force=true takes it (they are told)."))
async def mempalace_lease_acquire(
    palace: Palace, /, patterns: list[str], project: str, ttl: str | None = None, shared: bool = False,
    reason: str | None = None, force: bool = False, agent: str | None = None,
) -> Result:
    return await palace.daemon.call("lease_acquire", **drop_none(
        patterns=patterns, project=project, ttl_s=ttl, shared=shared or None, reason=reason,
        force=force or None, agent=palace.speaks_as("agent", agent)))


@tool("leases", mutating=True, returns={"lease": "object", "event": "object"},
      description="Extend your lease (by ttl, or as long as it was taken for). Returns {success, lease}.")
async def mempalace_lease_renew(palace: Palace, /, lease_id: str, ttl: str | None = None) -> Result:
    return await palace.daemon.call("lease_renew", **drop_none(lease_id=lease_id, ttl_s=ttl, agent=palace.agent))


# Only the caller's own leases; a lease released is released: again changes nothing.
@tool("leases", mutating=True, idempotent=True, returns={"released": "array<string>", "count": "integer"},
      description="Release your lease by id, or all=true for every lease you hold (optionally in one project).")
async def mempalace_lease_release(palace: Palace, /, lease_id: str | None = None, all: bool = False,
                                  project: str | None = None) -> Result:
    if all == (lease_id is not None):
        raise ApiError("pass a lease_id, or all=true", code="invalid_argument")
    return await palace.daemon.call("lease_release", **drop_none(
        lease_id=lease_id, all=all or None, project=project, agent=palace.agent))


@tool("leases", returns={"leases": "array<object>", "count": "integer", "now": "string",
                          "flagged": "array<object>", "flagged_count": "integer"}, description=(
    "Active leases (all=true: also ended ones), optionally of one project, one agent, or covering a path."))
async def mempalace_lease_list(palace: Palace, /, project: str | None = None, agent: str | None = None,
                               path: str | None = None, all: bool = False) -> Result:
    return await palace.daemon.call("lease_list", **drop_none(project=project, agent=agent, path=path,
                                                               all=all or None))


@tool("leases", returns={"ok": "boolean", "blocked": "array<object>", "checked": "integer"}, description=(
    "Before editing: are these paths under another agent's exclusive lease? Returns {ok, blocked: "
    "[{path, leases}]}; ok=false means do not edit them (ask the holder or wait)."))
async def mempalace_lease_check(palace: Palace, /, paths: list[str], project: str | None = None) -> Result:
    return await palace.daemon.call("lease_check", **drop_none(paths=paths, project=project, agent=palace.agent))


@resource("palace://leases", name="leases", mime_type="application/json",
                description="Active leases: who holds which paths, exclusive or shared, until when.")
async def leases_resource(palace: Palace, /) -> str:
    return await read_resource(palace, "lease_list")
