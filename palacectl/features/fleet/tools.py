"""The fleet feature's MCP tools: who watches, the other daemons (``log``); its resource: who.

Each is declared with ``mcp_tools.tool`` in the group this package's declaration lists it in;
``mcp_tools.build_registry`` puts them together with the core's. Must not import trio or typer.
"""

from __future__ import annotations

from ...mcp_tools import Palace, Result, read_resource, resource, tool

__all__ = ["mempalace_peers", "mempalace_who", "who_resource"]


@tool("log", returns={"watchers": "array<object>", "count": "integer", "local_count": "integer"},
      description="Watchers connected now on every daemon of the palace: who is really listening.")
async def mempalace_who(palace: Palace, /) -> Result:
    return await palace.daemon.call("who")


@tool("log", returns={"peer_id": "string", "listen": "array<string>", "mdns": "string", "peers": "array<object>",
                      "forks": "array<object>"},
      description="The other daemons of the palace: state, last contact and error, what each side lacks.")
async def mempalace_peers(palace: Palace, /) -> Result:
    return await palace.daemon.call("peers")


@resource("palace://who", name="who", mime_type="application/json",
                description="Watchers connected now on every daemon of the palace.")
async def who_resource(palace: Palace, /) -> str:
    return await read_resource(palace, "who")
