"""The tasks feature's MCP tools: delegate, take and claim work (``core``), follow and hand it back
(``log``); its resources: the open tasks, one task.

Each is declared with ``mcp_tools.tool`` in the group this package's declaration lists it in;
``mcp_tools.build_registry`` puts them together with the core's. Must not import trio or typer.
"""

from __future__ import annotations

import inspect
from typing import Any, get_origin

from ...mcp_tools import Palace, Result, drop_none, offering, read_resource, resource, tool
from .request import ARGUMENTS, DESCRIPTION

__all__ = [
    "mempalace_task_claim", "mempalace_task_create", "mempalace_task_list", "mempalace_task_ready",
    "mempalace_task_reassign", "mempalace_task_release", "mempalace_task_status", "open_tasks_resource",
    "task_resource",
]


def _create_parameters() -> list[inspect.Parameter]:
    """``mempalace_task_create``'s parameters: ``request.ARGUMENTS``, the caller (``from_agent``,
    optional: the agent this server speaks as) after the required ones."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    required = [inspect.Parameter(a.name, keyword, annotation=a.type) for a in ARGUMENTS if a.required]
    optional = [inspect.Parameter(a.name, keyword, default=None, annotation=a.type | None)
                for a in ARGUMENTS if not a.required]
    return [*required, inspect.Parameter("from_agent", keyword, default=None, annotation=str | None), *optional]


@tool("core", mutating=True, returns={"task": "object", "handoff": "string"},
      extras=("from_agent", *(a.name for a in ARGUMENTS if not a.required)), description=DESCRIPTION)
@offering(_create_parameters())
async def mempalace_task_create(palace: Palace, /, **args: Any) -> Result:
    for arg in ARGUMENTS:
        if get_origin(arg.type) is list:
            args[arg.name] = args[arg.name] or None  # an empty list is none (the daemon's default)
    return await palace.daemon.call("task_create", **drop_none(
        **{**args, "from_agent": palace.speaks_as("from_agent", args["from_agent"])}))


@tool("core", returns={"tasks": "array<object>", "count": "integer"}, description=(
    "Tasks you can take now (for you or *, open, unclaimed, blockers applied), urgent and oldest first. "
    "Claim one with mempalace_task_claim."))
async def mempalace_task_ready(palace: Palace, /) -> Result:
    return await palace.daemon.call("task_ready", agent=palace.agent)


# A second claim by the claimant is the claim it holds (already: true), no new event.
@tool("core", mutating=True, idempotent=True, returns={
    "task": "object|null", "event": "object|null", "already": "boolean"}, description=(
    "Claim a task by correlation id; refused if another holds it, it is blocked or closed. A later "
    "task.conflict to you means another claim won: stop."))
async def mempalace_task_claim(palace: Palace, /, correlation_id: str) -> Result:
    return await palace.daemon.call("task_claim", correlation_id=correlation_id, agent=palace.agent)


@tool("log", returns={
    "correlation_id": "string", "state": "string", "terminal": "boolean", "events": "array<object>",
    "?request": "object|null", "?requested_by": "string|null", "?assigned_to": "string|null",
    "?claimed_by": "string|null", "?priority": "integer", "?stalled": "boolean", "?blocked_by": "array",
    "?waiting_on": "array", "?questions": "array<object>"},
      description="A task's lifecycle by correlation id: state, claimant, every event on it.")
async def mempalace_task_status(palace: Palace, /, correlation_id: str) -> Result:
    return await palace.daemon.call("task_show", correlation_id=correlation_id)


@tool("log", returns={"tasks": "array<object>", "count": "integer", "newest": "integer", "capped": "boolean"},
      description="Tasks you requested or were asked to do; open_only=true (default): loops not yet closed.")
async def mempalace_task_list(palace: Palace, /, open_only: bool = True) -> Result:
    return await palace.daemon.call("task_list", agent=palace.agent, open=open_only)


@tool("log", mutating=True, returns={"task": "object|null", "event": "object"},
      description="Give back a task you claimed (it is open again); say why in reason.")
async def mempalace_task_release(palace: Palace, /, correlation_id: str, reason: str | None = None) -> Result:
    return await palace.daemon.call("task_release", **drop_none(correlation_id=correlation_id, reason=reason,
                                                                 agent=palace.agent))


# Destructive: the task leaves whoever holds it (their claim no longer counts).
@tool("log", mutating=True, destructive=True, returns={"task": "object|null", "event": "object"},
      description="As a task's requester, hand it to another agent (or *): open again, it wakes them.")
async def mempalace_task_reassign(palace: Palace, /, correlation_id: str, to_agent: str) -> Result:
    return await palace.daemon.call("task_reassign", correlation_id=correlation_id, to_agent=to_agent,
                                    agent=palace.agent)


@resource("palace://tasks/open", name="open tasks", mime_type="application/json",
                description="Tasks not closed yet (newest first), each with its state and claimant.")
async def open_tasks_resource(palace: Palace, /) -> str:
    return await read_resource(palace, "task_list", open=True)


@resource("palace://task/{correlation_id}", name="task", mime_type="application/json",
                description="One task: its request, every event on it, its state, claims and blockers.")
async def task_resource(palace: Palace, /, correlation_id: str) -> str:
    return await read_resource(palace, "task_show", correlation_id=correlation_id)
