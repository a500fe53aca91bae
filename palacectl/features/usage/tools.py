"""The usage feature's MCP tool (``people``): what runs cost.

Each is declared with ``mcp_tools.tool`` in the group this package's declaration lists it in;
``mcp_tools.build_registry`` puts them together with the core's. Must not import trio or typer.
"""

from __future__ import annotations

from ...mcp_tools import Palace, Result, drop_none, tool

__all__ = ["mempalace_usage"]


@tool("people", returns={"by": "string", "since": "string|null", "reports": "integer", "capped": "boolean",
                        "flagged": "integer", "totals": "array<object>"}, description=(
    "What runs cost: usage reports summed by task, agent, machine, day or model (by), since a date; "
    "{totals: [{key, runs, tokens_in, tokens_out, cost_usd}]}."))
async def mempalace_usage(palace: Palace, /, by: str = "task", since: str | None = None) -> Result:
    return await palace.daemon.call("usage", **drop_none(by=by, since=since))
