"""The tasks feature's dashboard part: the task board's data and one task's (``page.js`` draws them).

Owns the routes ``GET /api/tasks`` (the board: the newest 500 tasks and the older unfinished ones,
in ``BOARD_COLUMNS``) and ``GET /api/task/ID`` (one task: its events, state, claims, blockers,
the graph of what it waits on and what waits on it, its artifacts), over the daemon's
``task_list`` and ``task_show`` (``palacectl.ui.views.Route``); and ``task_card``, what a page
shows of a task (the dashboard's Now uses it too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ...ui.http import Request
from ...ui.views import Route, Views, gather
from .request import GIT_FIELDS

__all__ = ["BOARD_COLUMNS", "ROUTES", "task", "task_card", "tasks"]

#: The task board's columns, in order, and the task states each shows (palace_proto.tasks). A column
#: is named by the state it shows, in the CLI's word (``ready``: a delivered patch awaits review).
BOARD_COLUMNS: Final = (
    ("open", ("open",)), ("claimed", ("claimed",)), ("stalled", ("stalled",)), ("ready", ("ready",)),
    ("applied", ("applied",)), ("failed", ("failed",)), ("blocked", ("blocked", "superseded")),
)


def _title(task: Mapping[str, Any]) -> str:
    """A task's goal, from its request's body (``Goal:\\n<goal>\\n\\n…``)."""
    body = (task.get("request") or {}).get("body") or ""
    if body.startswith("Goal:\n"):
        return body[len("Goal:\n"):].split("\n\n", 1)[0].strip()[:200]
    return task.get("correlation_id", "")


def task_card(task: Mapping[str, Any]) -> dict[str, Any]:
    """What the board and "Now" show of a task (no bodies: the thread has them)."""
    state = task.get("state")
    column = next((name for name, states in BOARD_COLUMNS if state in states), "open")
    request = task.get("request") or {}
    return {
        "correlation_id": task.get("correlation_id"), "title": _title(task), "state": state, "column": column,
        "requested_by": task.get("requested_by"), "assigned_to": task.get("assigned_to"),
        "claimed_by": task.get("claimed_by"), "priority": task.get("priority"), "stalled": task.get("stalled"),
        "stalls_at": task.get("stalls_at"), "blocked_by": task.get("blocked_by") or [],
        "waiting_on": task.get("waiting_on") or [], "conflicts": task.get("conflicts") or [],
        "last_activity": task.get("last_activity"), "created_at": request.get("created_at"),
        "stream": request.get("stream"), **{name: request.get(name) for name in GIT_FIELDS},
        "impersonations": task.get("impersonations", 0),
        # Issue 46: where the delivered patch stands (its review, its newest check, who lands it).
        "review_state": (task.get("review") or {}).get("state"), "integrator": task.get("integrator"),
        "check": ((task.get("checks") or [{}])[-1]).get("result"),
    }


async def tasks(views: Views, request: Request) -> dict[str, Any]:
    listing = await views.call("task_list")
    cards = [task_card(t) for t in listing.get("tasks", [])]
    columns = [{"name": name, "tasks": [c for c in cards if c["column"] == name]} for name, _ in BOARD_COLUMNS]
    return {"columns": columns, "count": len(cards), "newest": listing.get("newest"),
            "capped": bool(listing.get("capped"))}


async def task(views: Views, request: Request, correlation_id: str) -> dict[str, Any]:
    show, listing = await gather([
        lambda: views.call("task_show", correlation_id=correlation_id), lambda: views.call("task_list"),
    ])
    cards = {t["correlation_id"]: task_card(t) for t in listing.get("tasks", [])}
    me = task_card(show)
    cards[correlation_id] = me
    # The graph: this task, what it waits on (two levels up) and what waits on it.
    nodes: dict[str, dict[str, Any]] = {correlation_id: me}
    edges: list[tuple[str, str]] = []
    frontier = [correlation_id]
    for _ in range(2):
        next_frontier = []
        for cid in frontier:
            for blocker in (cards.get(cid) or {}).get("blocked_by", []):
                edges.append((blocker, cid))
                if blocker not in nodes:
                    nodes[blocker] = cards.get(blocker) or {"correlation_id": blocker, "title": blocker,
                                                            "state": "unknown", "column": "open"}
                    next_frontier.append(blocker)
        frontier = next_frontier
    for card in cards.values():
        if correlation_id in card.get("blocked_by", []) and card["correlation_id"] != correlation_id:
            nodes.setdefault(card["correlation_id"], card)
            edges.append((correlation_id, card["correlation_id"]))
    artifacts = []
    for event in show.get("events", []):
        for artifact_id in event.get("artifact_ids") or []:
            artifacts.append({"artifact_id": artifact_id, "event_id": event["id"], "type": event.get("type"),
                              "from_agent": event.get("from_agent"), "created_at": event.get("created_at"),
                              "status": event.get("status")})
    return {"task": {**show, "card": me}, "graph": {"nodes": list(nodes.values()),
                                                    "edges": [list(e) for e in dict.fromkeys(edges)]},
            "artifacts": artifacts}


ROUTES: Final = (
    Route("GET", r"^/api/tasks$", tasks),
    Route("GET", r"^/api/task/([^/]{1,256})$", task),
)
