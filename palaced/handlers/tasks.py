"""Tasks: the delegation envelope (``task.request``) and its lifecycle derived from the log.

Owns: the ``task_create``, ``task_show`` and ``task_list`` operations, the rules of ``task create``
(MemPalace-compatible validation, reference §4), the request body an agent receives, and the
derivation of a task's state from the events on its correlation id (open → claimed → ready →
applied / failed / blocked / superseded). ``build_task_request`` and ``derive_task`` are pure
functions over public event dicts; the operations at the bottom do the IO.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from palace_proto.errors import NotFound, ValidationError
from palace_proto.validation import (
    TERMINAL_STATUSES,
    AppendRequest,
    Limits,
    ListQuery,
    clean_optional,
    clean_required,
)

from .context import Context

__all__ = ["OPS", "build_task_request", "delivery_line", "derive_task", "slugify"]

_HEX_COMMIT_RE: Final = re.compile(r"^[0-9a-fA-F]{7,64}$")
TASK_REQUEST_TYPE: Final = "task.request"


def slugify(text: str, *, max_len: int = 40, empty: str = "work") -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:max_len].rstrip("_")
    return slug or empty


def _required_text(label: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"task {label} must not be empty", field=label.replace(" ", "_"))
    return value.strip()


def delivery_line(correlation_id: str) -> str:
    """How the worker closes the loop, in the request's body.

    The requester cannot know whether the worker has the MCP tools (``palacectl mcp``) or a
    shell, so every step names both: the tool MemPalace's template names, then the command.
    """
    return (
        "Close the loop through palace: claim the request (MCP mempalace_event_ack with status claimed, "
        "or palacectl ack <event id> --status claimed), then submit a patch (MCP mempalace_patch_submit "
        f"with correlation_id={correlation_id}, or palacectl patch submit --correlation-id {correlation_id}) "
        "or reply with status blocked/failed and the evidence, verbatim."
    )


def build_task_request(args: Mapping[str, Any], random_hex8: str, limits: Limits) -> tuple[AppendRequest, str]:
    """Validate ``task create`` arguments and build the task.request append and the handoff line.

    Raises:
        ValidationError: a field is missing or the base commit is not a hex object id.
    """
    project = _required_text("project", args.get("project"))
    from_agent = _required_text("requesting agent", args.get("from_agent"))
    to_agent = _required_text("destination agent", args.get("to_agent"))
    goal = args.get("goal")
    if not isinstance(goal, str) or not goal.strip():
        raise ValidationError("task goal must not be empty", field="goal")
    branch = _required_text("branch", args.get("branch"))
    base_commit = _required_text("base commit", args.get("base_commit"))
    done = args.get("done")
    if not isinstance(done, str) or not done.strip():
        raise ValidationError("task definition of done must not be empty", field="done")
    if not _HEX_COMMIT_RE.fullmatch(base_commit):
        raise ValidationError(
            "task base commit must be a hexadecimal Git object id (at least 7 characters), not a branch or tag",
            field="base_commit",
        )
    correlation_id = f"task_{slugify(goal)}_{random_hex8}"
    body = (
        f"Goal:\n{goal.strip()}\n\n"
        f"Branch: {branch}\nBase commit: {base_commit.lower()}\n\n"
        f"Definition of done:\n{done.strip()}\n\n"
        f"Delivery:\n{delivery_line(correlation_id)}"
    )
    req = AppendRequest.from_wire(
        {
            "type": TASK_REQUEST_TYPE, "stream": f"project/{slugify(project, empty='project')}",
            "room": "delegation", "from_agent": from_agent,
            "to_agent": to_agent, "correlation_id": correlation_id, "branch": branch,
            "base_commit": base_commit.lower(), "status": "open", "topic": args.get("topic"), "body": body,
        },
        limits,
    )
    handoff = (
        f"Open palace task {correlation_id} as {to_agent}. Claim it, follow its exact definition of done, "
        f"and deliver through the log (MCP mempalace_task_status with correlation_id={correlation_id}, "
        f"or palacectl task show {correlation_id})."
    )
    return req, handoff


def derive_task(correlation_id: str, events: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The lifecycle view of one task from every event on its correlation id (seq order).

    ``state`` is the status of the latest event carrying one; ``claimed_by`` is the earliest
    claimant (the convention when two agents claim during a partition), ``claims`` lists all.
    """
    request = next((e for e in events if e["type"] == TASK_REQUEST_TYPE), None)
    if request is None:
        return None
    state = "open"
    claims: list[str] = []
    last_activity = request["created_at"]
    for event in events:
        last_activity = max(last_activity, event["created_at"])
        if event.get("status"):
            state = event["status"]
        if event.get("status") == "claimed" and event["from_agent"] not in claims:
            claims.append(event["from_agent"])
    return {
        "correlation_id": correlation_id,
        "request": request,
        "state": state,
        "terminal": state in TERMINAL_STATUSES,
        "requested_by": request["from_agent"],
        "assigned_to": request.get("to_agent"),
        "claimed_by": claims[0] if claims else None,
        "claims": claims,
        "last_activity": last_activity,
        "events": list(events),
    }


# -- the operations ------------------------------------------------------------------------------


async def task_create(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_writer()
    req, handoff = build_task_request(args, os.urandom(4).hex(), ctx.limits)
    event = await ctx.astore.write(lambda w: w.append(req))
    return {"task": event, "handoff": handoff}


async def task_show(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    correlation_id = clean_required("correlation_id", args.get("correlation_id"))
    events = await ctx.astore.read(ctx.store.events_by_correlation, correlation_id)
    view = derive_task(correlation_id, events)
    if view is None:
        raise NotFound(f"task {correlation_id!r} not found")
    return view


async def task_list(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    agent = clean_optional("agent", args.get("agent"))
    open_only = args.get("open", False) is True
    query = ListQuery.from_wire({"types": ["task.request"], "limit": 500, "order": "desc"})
    requests = await ctx.astore.read(ctx.store.list_events, query)
    views = []
    for request in requests:
        if agent and agent not in (request["from_agent"], request.get("to_agent")) and request.get("to_agent") != "*":
            continue
        cid = request["correlation_id"] or request["id"]
        events = await ctx.astore.read(ctx.store.events_by_correlation, cid)
        view = derive_task(cid, events)
        if view is None or (open_only and view["terminal"]):
            continue
        view.pop("events")
        view["role"] = ("requester" if agent == view["requested_by"] else "assignee") if agent else None
        views.append(view)
    return {"tasks": views, "count": len(views)}


OPS: Final = {
    "task_create": task_create,
    "task_show": task_show,
    "task_list": task_list,
}
