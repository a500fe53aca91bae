"""The integrate feature's dashboard part: the Merge queue page's data, and a person's review.

Owns the routes ``GET /api/merge`` (the tasks that name an integrator or a reviewer, in
``QUEUE_COLUMNS``: waiting to land, in review, checking, merged, failed, needs rework; each with
its patch, its review and its newest check) and ``POST /api/review`` (this dashboard's person
approves a task's delivered patch or asks for changes: a ``task.review`` written as them, which
every replica judges by the authority table), over the daemon's ``task_list``, ``task_show`` and
``append`` (``palacectl.ui.views.Route``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ...ui.http import HttpError, Request
from ...ui.views import Route, Views
from ..tasks.page import task_card
from .review import VERDICTS, NothingToReview, review_append

__all__ = ["QUEUE_COLUMNS", "ROUTES", "merge_queue", "queue_column", "review"]

#: the Merge queue's columns, in order
QUEUE_COLUMNS: Final = ("in review", "waiting", "checking", "needs rework", "merged", "failed")
# Why 4 KiB: what a person writes with a review; longer belongs in a message or a drawer.
MAX_REVIEW_BYTES: Final = 4096


def queue_column(view: Mapping[str, Any]) -> str | None:
    """Where a task stands in the queue (None: it names no integrator nor reviewer)."""
    if not view.get("integrator") and not (view.get("review") or {}).get("by"):
        return None
    state, review = view.get("state"), view.get("review") or {}
    if state == "applied":
        return "merged"
    if state in ("failed", "blocked", "superseded"):
        return "failed"
    if state == "ready":
        if review.get("state") == "waiting":
            return "in review"
        return "checking" if _checking(view) else "waiting"
    return "needs rework" if view.get("reworks") else None


def _checking(view: Mapping[str, Any]) -> bool:
    """The integrator said it is checking the delivered patch, and no check result came since."""
    delivery = view.get("delivery") or {}
    said = [e for e in view.get("events") or [] if e.get("type") == "task.status"
            and e.get("from_agent") == view.get("integrator") and (e.get("metadata") or {}).get("integrating")
            and str(e.get("created_at")) >= str(delivery.get("created_at"))]
    checks = [c for c in view.get("checks") or [] if c.get("patch_event_id") == delivery.get("event_id")]
    return bool(said) and (not checks or str(said[-1]["created_at"]) > str(checks[-1]["created_at"]))


def _card(view: Mapping[str, Any], column: str) -> dict[str, Any]:
    delivery = view.get("delivery") or {}
    checks = view.get("checks") or []
    reworks = view.get("reworks") or []
    return {**task_card(view), "queue": column, "integrator": view.get("integrator"),
            "review": view.get("review"), "patch_event_id": delivery.get("event_id"), "author": delivery.get("author"),
            "patch_artifact": (delivery.get("artifact_ids") or [None])[0], "check": checks[-1] if checks else None,
            "rework": reworks[-1] if reworks else None, "rounds": len(reworks)}


async def merge_queue(views: Views, request: Request) -> dict[str, Any]:
    listing = await views.call("task_list")
    cards = []
    for view in listing.get("tasks", []):
        column = queue_column(view)
        if column is not None:
            cards.append(_card(view, column))
    return {"columns": [{"name": name, "tasks": [c for c in cards if c["queue"] == name]} for name in QUEUE_COLUMNS],
            "count": len(cards), "person": views.human}


async def review(views: Views, doc: Mapping[str, Any]) -> dict[str, Any]:
    """This dashboard's person reviews a task's delivered patch (the one waiting now)."""
    unknown = set(doc) - {"correlation_id", "verdict", "text"}
    if unknown:
        raise HttpError(400, f"unknown field {sorted(unknown)[0]!r}; a review has correlation_id, verdict, text")
    cid, verdict, text = doc.get("correlation_id"), doc.get("verdict"), doc.get("text") or ""
    if not isinstance(cid, str) or not cid.strip() or len(cid) > 256:
        raise HttpError(400, "correlation_id must be the task's id")
    if verdict not in VERDICTS:
        raise HttpError(400, "verdict must be approve or changes_requested")
    if not isinstance(text, str) or len(text.encode("utf-8", "surrogatepass")) > MAX_REVIEW_BYTES:
        raise HttpError(400, f"text must be at most {MAX_REVIEW_BYTES} bytes of text")
    if verdict == "changes_requested" and not text.strip():
        raise HttpError(400, "say what to change: its author redoes the work from it")
    view = await views.call("task_show", correlation_id=cid.strip())
    try:
        args = review_append(view, views.human, verdict, text, via="palacectl ui")
    except NothingToReview as exc:
        raise HttpError(409, str(exc)) from None
    return {"event": await views.call("append", **args)}


ROUTES: Final = (
    Route("GET", r"^/api/merge$", merge_queue),
    Route("POST", r"^/api/review$", review, "write", "it writes no reviews"),
)
