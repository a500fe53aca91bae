"""The toy feature's MCP tool, in its own group (``--tools toys``)."""

from __future__ import annotations

from palacectl.mcp_tools import Palace, Result, tool


@tool("toys", returns={"box": "string", "count": "integer"}, description="How many toys a box holds: {box, count}.")
async def mempalace_toy_count(palace: Palace, /, box: str) -> Result:
    return await palace.daemon.call("toy_count", box=box)
