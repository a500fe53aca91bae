"""The integrate feature's MCP tool: a reviewer's verdict on a task's delivered patch (``log``).

Declared with ``mcp_tools.tool`` in the group this package's declaration lists it in;
``mcp_tools.build_registry`` puts it together with the others. Must not import trio or typer.
"""

from __future__ import annotations

from palace_proto.errors import ApiError

from ...mcp_tools import Palace, Result, tool
from .review import VERDICTS, NothingToReview, review_append

__all__ = ["mempalace_task_review"]


@tool("log", mutating=True, returns={"event": "object"}, description=(
    "Review the patch delivered on a task you were asked to review (its review_by): verdict approve "
    "(it may land) or changes_requested (it goes back to its author; say what to change in message)."))
async def mempalace_task_review(palace: Palace, /, correlation_id: str, verdict: str, message: str | None = None
                                ) -> Result:
    if verdict not in VERDICTS:
        raise ApiError(f"verdict must be {' or '.join(VERDICTS)}", code="invalid_argument")
    said = (message or "").strip()
    if verdict == "changes_requested" and not said:
        raise ApiError("say what to change in message: its author redoes the work from it", code="invalid_argument")
    view = await palace.daemon.call("task_show", correlation_id=correlation_id)
    try:
        args = review_append(view, palace.agent, verdict, said, via="mcp")
    except NothingToReview as exc:
        raise ApiError(str(exc), code="conflict") from None
    return {"event": await palace.daemon.call("append", **args)}
