"""Tasks: the delegation envelope (``task.request``), the queue over it, and its lifecycle.

Owns: the ``task_create``, ``task_show``, ``task_list``, ``task_ready``, ``task_claim``,
``task_release`` and ``task_reassign`` operations, the rules of ``task create`` (MemPalace-compatible
validation, reference §4, plus the queue's ``blocked_by``, ``priority`` and ``stall_after``), the
request body an agent receives, the local refusal of a claim (``check_claim``: claimed by another,
blocked, closed; also for a plain ``ack --status claimed``), and ``TaskReconciler``: the task that
tells a second claimant once (``task.conflict``, from the daemon that wrote its claim) and a
requester once per stall (``task.stalled``, from the daemon that wrote the request). The lifecycle
itself is palace_proto.tasks (the same on every replica).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import trio

from palace_proto.errors import ApiError, NotFound, ValidationError
from palace_proto.event_fields import PublicEvent, reply_to, thread, thread_of
from palace_proto.projects import project_stream, slugify
from palace_proto.questions import ASK as QUESTION_ASK
from palace_proto.stamps import seconds_between
from palace_proto.tasks import (
    CONFLICT,
    DEFAULT_STALL_AFTER_S,
    REASSIGN,
    RELEASE,
    REQUEST,
    STALLED,
    check_blocked_by,
    check_integrator,
    check_priority,
    check_review_by,
    check_stall_after,
    derive_task,
    ready_order,
)
from palace_proto.validation import AppendRequest, Limits, clean_optional, clean_required, validate_artifact_ids

from ..clock import utc_now as _now
from ..config import Section
from ..feature import Feature, Follower
from ..handlers.context import Context
from ..handlers.session import capped, cut
from ..notify.triggers import Trigger
from ..store import StoreError, WriteContext, append_event, correlation_events
from ..store import tasks as store_tasks
from ..store.tasks import TaskReads, settle
from .questions import settled as settled_questions

__all__ = [
    "FEATURE", "OPS", "TaskReconciler", "build_task_request", "check_claim", "delivery_line", "recent_views",
    "task_release",
]

LOGGER: Final = logging.getLogger("palaced.features.tasks")
# Why 500: the newest requests a listing, a ready queue or the reconciler looks at, finished or not.
MAX_TASKS: Final = 500
# Why 500: how many older tasks that are not finished they look at besides (newest first); a fleet
# keeps tens open, so beyond this someone is filing tasks nobody does, and a listing must stay fast.
MAX_UNSETTLED: Final = 500

_HEX_COMMIT_RE: Final = re.compile(r"^[0-9a-fA-F]{7,64}$")
TASK_REQUEST_TYPE: Final = REQUEST


def _required_text(label: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"task {label} must not be empty", field=label.replace(" ", "_"))
    return value.strip()


def _git_base(args: Mapping[str, Any]) -> dict[str, str]:
    """The task's git base, a branch and a commit id, as its request carries them (the commit in
    lowercase hex: a branch or tag name moves, and the worker must start where the requester was)."""
    branch = _required_text("branch", args.get("branch"))
    commit = _required_text("base commit", args.get("base_commit"))
    if not _HEX_COMMIT_RE.fullmatch(commit):
        raise ValidationError(
            "task base commit must be a hexadecimal Git object id (at least 7 characters), not a branch or tag",
            field="base_commit",
        )
    return {"branch": branch, "base_commit": commit.lower()}


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


def _review_and_integrator(args: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, str]:
    """``review_by`` and ``integrator`` of a request: as given (``none``: no default applies), else
    the project's defaults from ``[tasks]`` (``defaults``), else none."""
    out: dict[str, str] = {}
    for key, check in (("review_by", check_review_by), ("integrator", check_integrator)):
        value = args.get(key)
        if value is None:
            value = defaults.get(key)
        if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
            continue
        checked = check(value)
        if checked is not None:
            out[key] = checked
    return out


def build_task_request(args: Mapping[str, Any], random_hex8: str, limits: Limits,
                       defaults: Mapping[str, Any] | None = None) -> tuple[AppendRequest, str]:
    """Validate ``task create`` arguments and build the task.request append and the handoff line.
    ``defaults``: the project's ``review_by`` and ``integrator`` (``TaskSettings.for_project``).

    Raises:
        ValidationError: a field is missing, the base commit is not a hex object id, or a reviewer
            or integrator is not an agent id.
    """
    project = _required_text("project", args.get("project"))
    from_agent = _required_text("requesting agent", args.get("from_agent"))
    to_agent = _required_text("destination agent", args.get("to_agent"))
    goal = args.get("goal")
    if not isinstance(goal, str) or not goal.strip():
        raise ValidationError("task goal must not be empty", field="goal")
    git = _git_base(args)
    done = args.get("done")
    if not isinstance(done, str) or not done.strip():
        raise ValidationError("task definition of done must not be empty", field="done")
    metadata: dict[str, Any] = {}
    blocked_by = check_blocked_by(args.get("blocked_by"))
    if blocked_by:
        metadata["blocked_by"] = blocked_by
    if args.get("priority") is not None:
        metadata["priority"] = check_priority(args.get("priority"))
    stall = args.get("stall_after")
    if stall is not None:
        metadata["stall_after_s"] = check_stall_after(stall)
    metadata.update(_review_and_integrator(args, defaults or {}))
    correlation_id = f"task_{slugify(goal)}_{random_hex8}"
    body = (
        f"Goal:\n{goal.strip()}\n\n"
        f"Branch: {git['branch']}\nBase commit: {git['base_commit']}\n\n"
        f"Definition of done:\n{done.strip()}\n\n"
        f"Delivery:\n{delivery_line(correlation_id)}"
    )
    routing = thread(project_stream(project), "delegation", correlation_id, topic=args.get("topic"))
    req = AppendRequest.from_wire(
        {**routing, **git, "type": TASK_REQUEST_TYPE, "from_agent": from_agent, "to_agent": to_agent, "status": "open",
         "body": body, "metadata": metadata},
        limits,
    )
    handoff = (
        f"Open palace task {correlation_id} as {to_agent}. Claim it, follow its exact definition of done, "
        f"and deliver through the log (MCP mempalace_task_status with correlation_id={correlation_id}, "
        f"or palacectl task show {correlation_id})."
    )
    return req, handoff


# -- the operations ------------------------------------------------------------------------------





def view_of(ctx: Context, correlation_id: str, events: Sequence[PublicEvent]) -> dict[str, Any] | None:
    """The task's view; impersonations (the agent registry's verdict) are flagged and move nothing,
    and what the authority table does not allow is listed in ``out_of_role`` (palace_proto.tasks)."""
    daemons = ctx.store.agents.origin_daemons
    return derive_task(correlation_id, ctx.store.agents.annotate(events), now=_now(),
                       stall_after_s=settings(ctx).stall_after_s,
                       daemon_of=lambda origin: daemons.get(origin) or origin)


async def task_view(ctx: Context, correlation_id: str) -> dict[str, Any] | None:
    events = await ctx.store.events_by_correlation(correlation_id)
    return view_of(ctx, correlation_id, events)


async def _task_or_404(ctx: Context, correlation_id: str) -> dict[str, Any]:
    view = await task_view(ctx, correlation_id)
    if view is None:
        raise NotFound(f"task {correlation_id!r} not found")
    return view


async def _blockers_open(ctx: Context, view: Mapping[str, Any]) -> list[str]:
    """The tasks ``view`` is blocked by that are not applied yet (unknown ones count as open)."""
    waiting = []
    for blocker in view["blocked_by"]:
        other = await task_view(ctx, blocker)
        if other is None or other["state"] != "applied":
            waiting.append(blocker)
    return waiting


async def _blockers_open_of(ctx: Context, views: Sequence[Mapping[str, Any]],
                            known: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """``_blockers_open`` of many tasks at once (issue 25, finding 10: 500 tasks each blocked on
    32 invented ids made every ``task ready`` take seconds, one store read per blocker). Blockers
    among the ``known`` views are looked up there; of the rest, one query finds which exist at
    all (an unknown one is open), and those are read in the same thread hop."""
    by_id = {view["correlation_id"]: view for view in known}
    wanted = sorted({b for view in views for b in view["blocked_by"] if b not in by_id})
    for cid, events in (await ctx.store.events_of_correlations(wanted) if wanted else {}).items():
        view = view_of(ctx, cid, events)
        if view is not None:
            by_id[cid] = view
    return {view["correlation_id"]: [b for b in view["blocked_by"]
                                     if b not in by_id or by_id[b]["state"] != "applied"] for view in views}


def check_claim(view: Mapping[str, Any] | None, correlation_id: str, agent: str, *, waiting: Sequence[str] = ()) -> None:
    """Refuse a claim the queue forbids (the caller then writes nothing).

    Raises:
        NotFound: no such task.
        ValidationError: closed, claimed by another agent, addressed to another, or blocked.
    """
    if view is None:
        raise NotFound(f"task {correlation_id!r} not found")
    if view["terminal"]:
        raise ValidationError(f"task {correlation_id} is closed ({view['state']}): nothing to claim",
                              field="correlation_id")
    if view["claimed_by"] not in (None, agent):
        raise ValidationError(f"task {correlation_id} is already claimed by {view['claimed_by']}; ask them, or the "
                              f"requester ({view['requested_by']}) to reassign it", field="correlation_id")
    if view["assigned_to"] not in ("*", agent, None):
        raise ValidationError(f"task {correlation_id} is addressed to {view['assigned_to']}, not {agent}; the "
                              f"requester ({view['requested_by']}) can reassign it", field="agent")
    if waiting:
        raise ValidationError(f"task {correlation_id} is blocked by {', '.join(waiting)} (not applied yet)",
                              field="correlation_id")


async def task_create(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_writer()
    project = args.get("project")
    defaults = settings(ctx).for_project(project.strip() if isinstance(project, str) else "")
    req, handoff = build_task_request(args, os.urandom(4).hex(), ctx.limits, defaults)
    for blocker in check_blocked_by(args.get("blocked_by")):
        if await task_view(ctx, blocker) is None:
            raise NotFound(f"blocked_by names an unknown task {blocker!r}")
    event = await ctx.store.write(lambda w: append_event(w, req))
    return {"task": event, "handoff": handoff}


async def task_show(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    correlation_id = clean_required("correlation_id", args.get("correlation_id"))
    view = await _task_or_404(ctx, correlation_id)
    view["waiting_on"] = await _blockers_open(ctx, view)
    view["questions"] = await _questions_on(ctx, view)
    # A run waiting for a person (a question asked on the task, not answered yet): shown as such
    # on every daemon, since the question replicates with the task (issue 28).
    view["waiting_for_person"] = any(q["status"] == "open" for q in view["questions"])
    # ... and, among those, a run's permission request: "waiting for approval".
    # (An approval asked by another than the claimant does not count: the question.approval rule.)
    view["waiting_for_approval"] = any(q["status"] == "open" and q["approval"] for q in view["questions"])
    return view


async def _questions_on(ctx: Context, view: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The questions asked on the task, with their state (``palace_proto.questions``)."""
    asked = [e for e in view.get("events", []) if e.get("type") == QUESTION_ASK]
    return [state.to_wire() for state in await settled_questions(ctx, asked, view)]


async def recent_views(ctx: Context) -> list[dict[str, Any]]:
    """The tasks worth deriving, derived (``task_views`` without its ``capped``)."""
    return (await task_views(ctx))[0]


async def task_views(ctx: Context) -> tuple[list[dict[str, Any]], bool]:
    """The tasks worth deriving, derived: the newest MAX_TASKS requests and up to MAX_UNSETTLED
    older tasks not known to be finished (store/tasks.py); and whether older unfinished
    tasks were left out. A task derived as finished, with every conflict on it told, is recorded
    as settled, so it is not read again until an event on it arrives; an old open task therefore
    stays in every listing, the ready queue and the reconciler, however many newer tasks there are."""
    threads, capped = await ctx.store.reads(TaskReads).tasks_to_derive(MAX_TASKS, MAX_UNSETTLED)
    looked = ctx.state(TaskLook)
    if capped and (looked.capped_logged_at is None or time.monotonic() - looked.capped_logged_at > 3600):
        looked.capped_logged_at = time.monotonic()
        LOGGER.warning("more than %d tasks older than the newest %d are not finished; the oldest of them are left "
                       "out of task listings and the ready queue (close or supersede the ones nobody will do)",
                       MAX_UNSETTLED, MAX_TASKS)
    views, finished = [], []
    for task in threads:
        view = view_of(ctx, task.correlation_id, task.events)
        if view is None:
            continue
        views.append(view)
        if view["terminal"] and not task.settled and not _untold_conflicts(view):
            finished.append((task.correlation_id, task.newest_seq))
    if finished:
        # Written only when a task has just finished (once per task), not on every listing.
        try:
            await ctx.store.write(lambda w: settle(w, finished))
        except (ApiError, StoreError) as exc:  # a full disk, shutting down: derived again next time
            LOGGER.info("could not record finished tasks: %s", getattr(exc, "message", exc))
    return views, capped


def _notices(events: Sequence[Mapping[str, Any]]) -> set[tuple[str, Any]]:
    """(type, claim event id) of every conflict or stall notice on a task."""
    return {(e["type"], (e.get("metadata") or {}).get("claim_event_id")) for e in events
            if e["type"] in (CONFLICT, STALLED) and isinstance(e.get("metadata"), dict)}


def _untold_conflicts(view: Mapping[str, Any]) -> bool:
    noticed = _notices(view["events"])
    return any((CONFLICT, c["event_id"]) not in noticed for c in view["conflicts"])


async def task_list(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    agent = clean_optional("agent", args.get("agent"))
    open_only = args.get("open", False) is True
    stalled_only = args.get("stalled", False) is True
    views = []
    derived, capped = await task_views(ctx)
    for view in derived:
        if agent and agent not in (view["requested_by"], view["assigned_to"], view["claimed_by"]) \
                and view["assigned_to"] != "*":
            continue
        if (open_only and view["terminal"]) or (stalled_only and not view["stalled"]):
            continue
        view.pop("events")
        view["role"] = ("requester" if agent == view["requested_by"] else "assignee") if agent else None
        views.append(view)
    # newest: how many of the newest requests are listed finished or not (older ones only while
    # unfinished); capped: more older unfinished tasks than a listing holds (the oldest left out).
    return {"tasks": views, "count": len(views), "newest": MAX_TASKS, "capped": capped}


async def task_ready(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Tasks the agent may take now: addressed to it or to ``*``, open, unclaimed, every blocker applied."""
    agent = clean_required("agent", args.get("agent"))
    # Every recent request, not only those addressed to the agent: a reassign readdresses a task.
    views = await recent_views(ctx)
    candidates = [view for view in views if view["state"] == "open" and view["assigned_to"] in (agent, "*")
                  and view["requested_by"] != agent]
    waiting = await _blockers_open_of(ctx, candidates, views)
    ready = []
    for view in candidates:
        if waiting[view["correlation_id"]]:
            continue
        view.pop("events")
        ready.append(view)
    ordered = ready_order(ready)
    return {"tasks": ordered, "count": len(ordered)}


async def task_claim(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_writer()
    cid = clean_required("correlation_id", args.get("correlation_id"))
    agent = clean_required("agent", args.get("agent"))
    before = await task_view(ctx, cid)
    check_claim(before, cid, agent, waiting=await _blockers_open(ctx, before) if before else ())
    assert before is not None
    if before["claimed_by"] == agent:
        return {"task": _public(before), "event": None, "already": True}

    def job(w: WriteContext) -> PublicEvent:
        # Checked again in the transaction that writes the claim: two claims on this daemon never both pass.
        view = view_of(ctx, cid, correlation_events(w, cid))
        check_claim(view, cid, agent)
        assert view is not None
        request = view["request"]
        # On the task's thread: its id, which is the request's own id when the request named none.
        routing = {**reply_to(request), "correlation_id": cid}
        return append_event(w, AppendRequest.from_wire(
            {**routing, "type": "event.ack", "from_agent": agent, "status": "claimed", "body": f"{agent} claims {cid}",
             "metadata": {"ack_of": routing["ack_of"]}},
            ctx.limits))

    event = await ctx.store.write(job)
    after = await task_view(ctx, cid)
    return {"task": _public(after), "event": event, "already": False}


async def task_release(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_writer()
    cid = clean_required("correlation_id", args.get("correlation_id"))
    agent = clean_required("agent", args.get("agent"))
    view = await _task_or_404(ctx, cid)
    if view["claimed_by"] != agent or view["terminal"]:
        raise ValidationError(f"task {cid} is not claimed by {agent} (claimant: {view['claimed_by'] or 'nobody'}, "
                              f"state {view['state']}); only its claimant releases it", field="agent")
    reason = clean_optional("reason", args.get("reason"))
    event = await _task_event(ctx, view, RELEASE, agent, view["requested_by"],
                              f"{agent} releases {cid}" + (f": {reason}" if reason else ""),
                              artifact_ids=validate_artifact_ids(args.get("artifact_ids")))
    return {"task": _public(await task_view(ctx, cid)), "event": event}


async def task_reassign(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_writer()
    cid = clean_required("correlation_id", args.get("correlation_id"))
    to_agent = clean_required("to_agent", args.get("to_agent"))
    view = await _task_or_404(ctx, cid)
    agent = clean_optional("agent", args.get("agent")) or view["requested_by"]
    if agent != view["requested_by"] or view["terminal"]:
        raise ValidationError(f"only the requester ({view['requested_by']}) reassigns task {cid}, and only while "
                              f"it is open (state {view['state']})", field="agent")
    event = await _task_event(ctx, view, REASSIGN, agent, to_agent,
                              f"{agent} reassigns {cid} to {to_agent}" +
                              (f" (was claimed by {view['claimed_by']})" if view["claimed_by"] else ""))
    return {"task": _public(await task_view(ctx, cid)), "event": event}


async def _task_event(ctx: Context, view: Mapping[str, Any], kind: str, agent: str, to_agent: str | None,
                      body: str, metadata: dict[str, Any] | None = None,
                      artifact_ids: tuple[str, ...] = ()) -> PublicEvent:
    request = view["request"]
    # On the task's thread: its id, which is the request's own id when the request named none.
    routing = {**thread_of(request), "correlation_id": view["correlation_id"]}
    req = AppendRequest.from_wire(
        {**routing, "type": kind, "from_agent": agent, "to_agent": to_agent,
         # A release or reassign opens the task again; palace's notices move nothing.
         "status": "open" if kind in (RELEASE, REASSIGN) else None, "body": body, "metadata": metadata or {},
         "artifact_ids": list(artifact_ids)},
        ctx.limits)
    return await ctx.store.write(lambda w: append_event(w, req))


def _public(view: dict[str, Any] | None) -> dict[str, Any] | None:
    if view is None:
        return None
    return {k: v for k, v in view.items() if k != "events"}


OPS: Final = {
    "task_create": task_create,
    "task_show": task_show,
    "task_list": task_list,
    "task_ready": task_ready,
    "task_claim": task_claim,
    "task_release": task_release,
    "task_reassign": task_reassign,
}


# Why 2 s: conflicts and stalls are told within seconds, without deriving every task per event.
RECONCILE_MIN_INTERVAL_S: Final = 2.0
# Why 60 s: a stall is measured in minutes; a look a minute notices it in time.
STALL_SCAN_S: Final = 60.0


class TaskReconciler(Follower):
    """Tells a second claimant once (its own daemon writes it) and a requester once per stall
    (the requester's daemon writes it); see the module docstring. It looks after a task event, or
    when the next claimed task would stall, and at most every RECONCILE_MIN_INTERVAL_S."""

    types = frozenset({"event.ack", REQUEST, RELEASE, REASSIGN, CONFLICT, STALLED})
    doing = "tell agents about task conflicts or stalls"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._looked_at = time.monotonic()
        self.conflicts_told = 0
        self.stalls_told = 0
        #: seconds until the next claimed task would stall (as of the last look)
        self.next_stall_in = STALL_SCAN_S

    def __repr__(self) -> str:
        return f"<TaskReconciler conflicts={self.conflicts_told} stalls={self.stalls_told}>"

    async def catch_up(self) -> int:
        self._looked_at = time.monotonic()
        return await self.reconcile()

    async def wait_next(self) -> None:
        # Until a task event, or until the next claimed task would stall (at most STALL_SCAN_S).
        with trio.move_on_after(max(RECONCILE_MIN_INTERVAL_S, min(STALL_SCAN_S, self.next_stall_in))):
            await super().wait_next()
        await trio.sleep(max(0.0, RECONCILE_MIN_INTERVAL_S - (time.monotonic() - self._looked_at)))

    async def reconcile(self) -> int:
        ctx = self.ctx
        views = await recent_views(ctx)
        ctx.state(TaskLook).stalled = [v["correlation_id"] for v in views if v["stalled"]]
        now = _now()
        upcoming = [v["stalls_at"] for v in views if v["stalls_at"] is not None and v["stalls_at"] > now]
        self.next_stall_in = (min(seconds_between(now, at) for at in upcoming) + 0.5) if upcoming else STALL_SCAN_S
        if ctx.membership is not None and ctx.membership.role == "observer":
            return 0
        own = ctx.store.origin_id
        written = 0
        for view in views:
            events = view["events"]
            by_id = {e["id"]: e for e in events}
            noticed = _notices(events)
            for conflict in view["conflicts"]:
                claim = by_id.get(conflict["event_id"])
                if claim is None or claim.get("origin") != own or (CONFLICT, conflict["event_id"]) in noticed:
                    continue
                await _task_event(
                    ctx, view, CONFLICT, "palaced", conflict["agent"],
                    f"Task {view['correlation_id']} is claimed by {conflict['claimant']} (the first claim); your claim "
                    f"came second (claims on both sides of a partition). Stop working on it; "
                    f"`palacectl task show {view['correlation_id']}` shows both claims.",
                    {"claim_event_id": conflict["event_id"], "claimant": conflict["claimant"],
                     "claimant_event_id": conflict["claim_event_id"]})
                noticed.add((CONFLICT, conflict["event_id"]))
                self.conflicts_told += 1
                written += 1
            if view["stalled"] and view["request"].get("origin") == own \
                    and (STALLED, view["claim_event_id"]) not in noticed:
                await _task_event(
                    ctx, view, STALLED, "palaced", view["requested_by"],
                    f"Task {view['correlation_id']} is stalled: {view['claimed_by']} claimed it and has said nothing "
                    f"on it since {view['claimant_last_activity'][:19]}Z. Ask them, or reassign it "
                    f"(`palacectl task reassign {view['correlation_id']} --to-agent AGENT`).",
                    {"claim_event_id": view["claim_event_id"], "claimant": view["claimed_by"]})
                self.stalls_told += 1
                written += 1
        return written


# -- the feature's declaration --------------------------------------------------------------------

# Why 10: the open loops session start shows (the reply goes into an agent's context each start).
LOOPS_SHOWN: Final = 10


def _goal(view: Mapping[str, Any]) -> str:
    """A task's goal: what follows ``Goal:`` in its request (task create writes it so), up to the
    next blank line; else the body's start."""
    body = view["request"].get("body") or ""
    lines = body.splitlines()
    for index, line in enumerate(lines):
        if line.lower().startswith("goal:"):
            goal = [line[5:]]
            for following in lines[index + 1:]:
                if not following.strip():
                    break
                goal.append(following)
            if " ".join(goal).strip():
                return cut(" ".join(goal))
    return cut(body)


async def session_part(ctx: Context, agent: str) -> dict[str, Any]:
    """Session start's open loops (tasks the agent requested or holds that are not closed) and the
    stalled ones among them."""
    loops: list[dict[str, Any]] = []
    stalled: list[dict[str, Any]] = []
    for view in await recent_views(ctx):
        if view["terminal"]:
            continue
        role = ("requester" if view["requested_by"] == agent else
                "claimant" if view["claimed_by"] == agent else None)
        if role is None:
            continue
        loop = {"correlation_id": view["correlation_id"], "role": role, "state": view["state"],
                "claimed_by": view["claimed_by"], "goal": _goal(view), "last_activity": view["last_activity"]}
        (stalled if view["stalled"] else loops).append(loop)
    return {"open_loops": capped(loops, LOOPS_SHOWN), "stalled": capped(stalled, LOOPS_SHOWN)}


def session_hints(agent: str, reply: Mapping[str, Any]) -> list[str]:
    hints = []
    stalled = reply.get("stalled") or {}
    if stalled.get("items") or stalled.get("more"):
        hints.append("answer the stalled tasks (reply, or release what you cannot finish)")
    hints.append(f"claim before you work (`palacectl task ready --agent {agent}`, `palacectl task claim`)")
    return hints


def ack_rule(ctx: Context, w: WriteContext, target: Mapping[str, Any], agent: str, status: str | None) -> None:
    """A claim by ``ack`` of a task's request is a claim: the queue's rules hold (checked in the
    writing transaction; ``task_claim`` checks the same)."""
    if status == "claimed" and target["type"] == TASK_REQUEST_TYPE and target["correlation_id"]:
        cid = target["correlation_id"]
        check_claim(view_of(ctx, cid, correlation_events(w, cid)), cid, agent)


# -- what a person is told of, the [tasks] section, and its part of status ----------------------


class TaskLook:
    """What the tasks feature keeps of its last look (``ctx.state(TaskLook)``)."""

    def __init__(self, ctx: Context) -> None:
        #: correlation ids of the stalled tasks among the recent ones (the reconciler's last look)
        self.stalled: list[str] = []
        #: when it was last logged that unfinished tasks were left out of listings (monotonic)
        self.capped_logged_at: float | None = None

    def __repr__(self) -> str:
        return f"<TaskLook stalled={len(self.stalled)}>"


async def status_part(ctx: Context) -> dict[str, Any]:
    """``status``'s ``tasks``: a note, not a health problem (a stalled task needs a person or its
    requester, not a fix here)."""
    stalled = ctx.state(TaskLook).stalled
    return {"tasks": {"stalled": len(stalled), "stalled_ids": stalled[:20]}}



def _is_task(event: Mapping[str, Any]) -> bool:
    cid = event.get("correlation_id")
    return isinstance(cid, str) and cid.startswith("task_")


def _task_hint(event: Mapping[str, Any]) -> str:
    return f"palacectl task show {event.get('correlation_id')}"


TRIGGERS: Final = (
    Trigger("stall", lambda e: e.get("type") == STALLED, lambda e: f"Task stalled: {e.get('correlation_id')}",
            _task_hint),
    Trigger("lost_claim", lambda e: e.get("type") == CONFLICT,
            lambda e: f"Claim lost by {e.get('to_agent')}: {e.get('correlation_id')}", _task_hint),
    Trigger("task_failed", lambda e: e.get("status") == "failed" and _is_task(e),
            lambda e: f"Task failed: {e.get('correlation_id')} ({e.get('from_agent')})", _task_hint),
    Trigger("task_blocked", lambda e: e.get("status") == "blocked" and _is_task(e),
            lambda e: f"Task blocked: {e.get('correlation_id')} ({e.get('from_agent')})", _task_hint),
    Trigger("review", lambda e: e.get("type") == "patch.ready" and _is_task(e) and bool(_review_by(e)),
            lambda e: f"Review wanted ({_review_by(e)}): {e.get('correlation_id')}, patch by {e.get('from_agent')}",
            lambda e: f"palacectl review {e.get('correlation_id')} --approve --as {_reviewer_hint(e)}"),
)


def _review_by(event: Mapping[str, Any]) -> str | None:
    metadata = event.get("metadata")
    value = metadata.get("review_by") if isinstance(metadata, dict) else None
    return value if isinstance(value, str) else None


def _reviewer_hint(event: Mapping[str, Any]) -> str:
    who = _review_by(event) or ""
    return who if who.startswith("human:") else "human:NAME"


@dataclasses.dataclass(frozen=True, slots=True)
class TaskSettings:
    """``[tasks]`` of config.toml."""

    #: a claimed task with no word from its claimant for this long is stalled (``stall_after``)
    stall_after_s: int = DEFAULT_STALL_AFTER_S
    #: who reviews and who lands a new task's patch unless its request says (``review_by``,
    #: ``integrator``), and per project (``[tasks.projects.NAME]``)
    review_by: str | None = None
    integrator: str | None = None
    projects: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)

    def for_project(self, project: str) -> dict[str, str]:
        """The defaults a new request of ``project`` gets: the project's own, else ``[tasks]``'s."""
        out = {key: value for key, value in (("review_by", self.review_by), ("integrator", self.integrator))
               if value is not None}
        out.update(self.projects.get(project, {}))
        return out


#: what ``[tasks.projects.NAME]`` may say
_PROJECT_KEYS: Final = ("review_by", "integrator")


def _read_settings(values: Mapping[str, Any]) -> TaskSettings:
    stall = values.get("stall_after")
    review_by = check_review_by(values.get("review_by")) if values.get("review_by") is not None else None
    integrator = check_integrator(values.get("integrator")) if values.get("integrator") is not None else None
    projects: dict[str, dict[str, str]] = {}
    for name, table in (values.get("projects") or {}).items():
        if not isinstance(table, dict):
            raise ValidationError(f"tasks.projects.{name} must be a table: [tasks.projects.{name}] with review_by "
                                  "and/or integrator")
        unknown = sorted(set(table) - set(_PROJECT_KEYS))
        if unknown:
            raise ValidationError(f"unknown key tasks.projects.{name}.{unknown[0]} (known: {', '.join(_PROJECT_KEYS)})")
        project: dict[str, str] = {}
        for key, check in (("review_by", check_review_by), ("integrator", check_integrator)):
            if key in table:
                try:
                    checked = check(table[key]) if str(table[key]).strip().lower() != "none" else "none"
                except ValidationError as exc:
                    raise ValidationError(f"tasks.projects.{name}.{exc.message}") from None
                if checked is not None:
                    project[key] = checked
        projects[name] = project
    return TaskSettings(check_stall_after(stall, field="tasks.stall_after") if stall is not None
                        else DEFAULT_STALL_AFTER_S, review_by, integrator, projects)


def settings(ctx: Context) -> TaskSettings:
    return ctx.config.section("tasks", TaskSettings())


FEATURE: Final = Feature(
    name="tasks", ops=OPS, builds_on=("questions",), services=(TaskReconciler,), session=session_part,
    session_hints=session_hints, ack_rule=ack_rule, store=store_tasks.PART, triggers=TRIGGERS,
    section=Section("tasks", {"stall_after": str, "review_by": str, "integrator": str, "projects": dict},
                    _read_settings), inline_ops=frozenset({"task_show"}),
    status=status_part)
