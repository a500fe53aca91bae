"""Tasks: a delegated piece of work and its lifecycle, derived from the events on its correlation id.

Owns: the queue fields of a ``task.request`` (``blocked_by``, ``priority``, ``stall_after_s`` in its
metadata), the task events palace adds to MemPalace's (``task.release``, ``task.reassign``,
``task.conflict``, ``task.stalled``), and ``derive_task``: a task's state, claimant, claims and
stall from its events, the same on every replica that holds the same events (the events are
ordered by ``created_at`` and id, never by a replica's local seq; ``now`` is the caller's).

States and what moves between them:

    open       the request (``task.request``), a ``task.release`` by the claimant, or a
               ``task.reassign`` by the requester (which also changes the addressee)
    claimed    the first claim (an event with status ``claimed``, e.g. ``event.ack``) since the
               request, release or reassign — by ``created_at``, then event id, so every
               replica names the same claimant; a later claim by another agent in the same
               round is a *conflict*: its agent is told once (``task.conflict``) and stops
    stalled    claimed, with no event from the claimant on the task for ``stall_after_s``
               (derived: it moves back to claimed with the claimant's next event)
    ready      a patch delivered (status ``ready``): ready for review
    applied, failed, blocked, superseded
               the terminal statuses (an ack or reply carrying one)

A task is *ready to take* when it is open, addressed to the agent or to ``*``, and every task it is
blocked by is applied. Pure: stdlib only, no clock, no IO.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from .errors import ValidationError
from .stamps import STAMP_RE, add_seconds, check_duration, parse_duration, seconds_between

__all__ = [
    "CONFLICT", "DEFAULT_PRIORITY", "DEFAULT_STALL_AFTER_S", "MAX_BLOCKED_BY", "REASSIGN", "RELEASE", "REQUEST",
    "STALLED", "TERMINAL", "check_blocked_by", "check_priority", "check_stall_after", "derive_task", "project_stream", "queue_fields",
    "ready_order", "role_refusal", "slugify",
]

REQUEST: Final = "task.request"
RELEASE: Final = "task.release"
REASSIGN: Final = "task.reassign"
CONFLICT: Final = "task.conflict"
STALLED: Final = "task.stalled"
TERMINAL: Final = frozenset({"applied", "failed", "blocked", "superseded"})
# Why 0 (urgent) .. 3 (low), default 2: the scale issue trackers for agents use; 0 sorts first.
MIN_PRIORITY: Final = 0
MAX_PRIORITY: Final = 3
DEFAULT_PRIORITY: Final = 2
# Why 30 min: long enough for a build and a test run without a word; short enough that a crashed
# agent's task is noticed the same hour.
DEFAULT_STALL_AFTER_S: Final = 30 * 60
# Why 32: a task waits on a few others; a longer list is a plan, which belongs in a parent task.
MAX_BLOCKED_BY: Final = 32
_CORRELATION_RE: Final = re.compile(r"^task_[A-Za-z0-9_.-]{1,200}$")


def slugify(text: str, *, max_len: int = 40, empty: str = "work") -> str:
    """Lower-case letters and digits joined by ``_`` (at most ``max_len``), ``empty`` if none."""
    slug = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:max_len].rstrip("_")
    return slug or empty


def project_stream(project: str) -> str:
    """The stream a project's tasks and leases live on: ``project/<slug>``."""
    return f"project/{slugify(project, empty='project')}"


def check_priority(value: Any) -> int:
    if value is None:
        return DEFAULT_PRIORITY
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise ValidationError(f"priority must be an integer from {MIN_PRIORITY} (urgent) to {MAX_PRIORITY} (low)",
                              field="priority")
    return value


def check_blocked_by(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or len(value) > MAX_BLOCKED_BY:
        raise ValidationError(f"blocked_by must be a list of at most {MAX_BLOCKED_BY} task correlation ids",
                              field="blocked_by")
    out = []
    for item in value:
        if not isinstance(item, str) or not _CORRELATION_RE.match(item.strip()):
            raise ValidationError(f"blocked_by {str(item)[:80]!r} is not a task correlation id (task_…)",
                                  field="blocked_by")
        if item.strip() not in out:
            out.append(item.strip())
    return out


def check_stall_after(value: Any, *, field: str = "stall_after") -> int:
    """A stall time in seconds, or ``90s``/``30m``/``2h``/``7d`` (palace_proto.stamps's range).

    Raises:
        ValidationError: not a duration, or out of range.
    """
    return parse_duration(value, field=field) if isinstance(value, str) else check_duration(value, field=field)


def queue_fields(metadata: Any) -> tuple[list[str], int, int | None]:
    """(blocked_by, priority, stall_after_s or None) of a request's metadata; hostile or
    malformed values fall back to the defaults (a peer's event must not break the queue)."""
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except ValueError:
            metadata = {}
    if not isinstance(metadata, dict):
        metadata = {}
    try:
        blocked_by = check_blocked_by(metadata.get("blocked_by"))
    except ValidationError:
        blocked_by = []
    try:
        priority = check_priority(metadata.get("priority"))
    except ValidationError:
        priority = DEFAULT_PRIORITY
    stall = metadata.get("stall_after_s")
    try:
        stall_after = check_duration(stall, field="stall_after") if stall is not None else None
    except ValidationError:
        stall_after = None
    return blocked_by, priority, stall_after


def _order(event: Mapping[str, Any]) -> tuple[str, str]:
    return str(event.get("created_at")), str(event.get("id"))


def derive_task(correlation_id: str, events: Sequence[Mapping[str, Any]], *, now: str | None = None,
                stall_after_s: int = DEFAULT_STALL_AFTER_S) -> dict[str, Any] | None:
    """The lifecycle view of one task from every event on its correlation id (any order), or
    None without a request. ``now`` (the caller's clock) decides ``stalled``; ``stall_after_s``
    is the default when the request names none. See the module docstring for the rules."""
    # An event palace judged an impersonation (palace_proto.agents: written as an agent by a
    # daemon that did not hold it) moves nothing: it stays in the thread, flagged.
    genuine = [e for e in events if not e.get("impersonation")]
    requests = sorted((e for e in genuine if e.get("type") == REQUEST), key=_order)
    if not requests:
        return None
    request = requests[0]
    blocked_by, priority, own_stall = queue_fields(request.get("metadata"))
    stall_after = own_stall or stall_after_s
    requester, assigned = request.get("from_agent"), request.get("to_agent")
    ordered = sorted((e for e in genuine if isinstance(e.get("created_at"), str) and STAMP_RE.match(e["created_at"])),
                     key=_order)
    state, claimant, claim_event = "open", None, None
    claims: list[dict[str, Any]] = []
    conflicts: list[dict[str, Any]] = []
    out_of_role: list[dict[str, Any]] = []
    last_activity = request["created_at"]
    claimant_last = None

    def flag(event: Mapping[str, Any], why: str) -> None:
        out_of_role.append({"agent": event.get("from_agent"), "event_id": event.get("id"), "type": event.get("type"),
                            "status": event.get("status"), "created_at": event.get("created_at"), "why": why})

    for event in ordered:
        last_activity = max(last_activity, event["created_at"])
        kind, who, status = event.get("type"), event.get("from_agent"), event.get("status")
        if kind == REQUEST:
            if event is not request and event.get("id") != request.get("id"):
                # A second request moves nothing, whoever wrote it: the first one stands.
                flag(event, "a second request on the task" if who == requester else "a request on another's task")
            elif status and status != "open":
                flag(event, "a request opens its task")
            continue
        if kind == RELEASE:
            if who == claimant and claimant is not None and state not in TERMINAL:
                state, claimant, claim_event, claimant_last = "open", None, None, None
            else:
                flag(event, "only the claimant releases")
            continue
        if kind == REASSIGN:
            if who == requester and state not in TERMINAL:
                target = event.get("to_agent")
                if isinstance(target, str) and target:
                    assigned = target
                state, claimant, claim_event, claimant_last = "open", None, None, None
            else:
                flag(event, "only the requester reassigns")
            continue
        if kind in (CONFLICT, STALLED):
            continue  # palace's own notices: they move nothing
        if who == claimant and claimant is not None:
            claimant_last = event["created_at"]
        may_claim = assigned in ("*", None) or who == assigned
        if status == "claimed":
            if not may_claim:
                flag(event, f"the task is addressed to {assigned}")
                continue
            claims.append({"agent": who, "event_id": event.get("id"), "created_at": event["created_at"]})
            if claimant is None and state not in TERMINAL:
                state, claimant, claim_event, claimant_last = "claimed", who, event.get("id"), event["created_at"]
            elif claimant is not None and who != claimant:
                conflicts.append({"agent": who, "event_id": event.get("id"), "created_at": event["created_at"],
                                  "claimant": claimant, "claim_event_id": claim_event})
            continue
        if not status:
            continue  # words on the task (a reply, a note): they move nothing
        role = _role_for(status, who=who, requester=requester, claimant=claimant, may_claim=may_claim, state=state)
        if role is None:
            flag(event, f"status {status!r} is not {who}'s to set on this task")
            continue
        if role == "reopen":
            state, claimant, claim_event, claimant_last = "open", None, None, None
        elif role == "deliver_unclaimed":
            # A delivery by one who may take the task, on a task nobody holds: its claim and its report.
            claims.append({"agent": who, "event_id": event.get("id"), "created_at": event["created_at"]})
            state, claimant, claim_event, claimant_last = status, who, event.get("id"), event["created_at"]
        else:
            state = status
    stalled = (state == "claimed" and now is not None and claimant_last is not None
               and seconds_between(claimant_last, now) >= stall_after)
    return {
        "correlation_id": correlation_id,
        "request": dict(request),
        "state": "stalled" if stalled else state,
        "terminal": state in TERMINAL,
        "requested_by": requester,
        "assigned_to": assigned,
        "claimed_by": claimant,
        "claim_event_id": claim_event,
        "claims": [c["agent"] for c in claims],
        "claim_events": claims,
        "conflicts": conflicts,
        "out_of_role": out_of_role,
        "blocked_by": blocked_by,
        "priority": priority,
        "stall_after_s": stall_after,
        "stalled": stalled,
        "stalls_at": (add_seconds(claimant_last, stall_after) if state == "claimed" and claimant_last is not None else None),
        "claimant_last_activity": claimant_last,
        "last_activity": last_activity,
        "events": sorted((dict(e) for e in events), key=_order),
        "impersonations": len(events) - len(genuine),
    }


#: what the requester sets: open the task again (a new round: nobody holds it), or close it
REQUESTER_STATUSES: Final = frozenset({"open", "applied", "failed", "superseded", "blocked"})
#: what only the requester sets (the claimant reports with the others)
_REQUESTER_ONLY: Final = frozenset({"open", "applied", "superseded"})


def _role_for(status: str, *, who: Any, requester: Any, claimant: Any, may_claim: bool, state: str) -> str | None:
    """Whose move a status is (issue 25, finding 7), or None when it is not ``who``'s:

    * the requester opens the task again (``open``: reopen), and closes it — ``applied``,
      ``failed``, ``superseded``, ``blocked``;
    * the claimant reports and delivers: any other status (``ready``, ``blocked``, ``failed``, its
      own progress words), never ``open``, ``applied`` or ``superseded``;
    * one the task is addressed to, while nobody holds it, may decline it (``blocked``) or deliver
      (``ready``: its claim and its report at once);
    * anyone else: nothing.
    """
    if who == requester and status in REQUESTER_STATUSES:
        return "reopen" if status == "open" else "set"
    if claimant is not None and who == claimant and state not in TERMINAL and status not in _REQUESTER_ONLY:
        return "set"
    if claimant is None and state not in TERMINAL and may_claim:
        if status == "blocked":
            return "set"
        if status == "ready":
            return "deliver_unclaimed"
    return None


def role_refusal(view: Mapping[str, Any], agent: str, kind: str, status: str | None) -> str | None:
    """Why ``agent`` may not write a ``kind`` event with ``status`` on the task ``view`` (None: it
    may), in the words a refusal gives: the same rules ``derive_task`` applies to what arrives, so
    a daemon refuses locally what every replica would flag and ignore."""
    cid, requester, claimant = view["correlation_id"], view["requested_by"], view["claimed_by"]
    assigned, state = view["assigned_to"], view["state"]
    if kind == REQUEST:
        return (f"task {cid} has its request already (from {requester}); a second one would change nothing: "
                "file a new task")
    if kind == RELEASE:
        return None if agent == claimant else f"only the claimant ({claimant or 'nobody yet'}) releases task {cid}"
    if kind == REASSIGN:
        return None if agent == requester else f"only the requester ({requester}) reassigns task {cid}"
    if not status:
        return None
    terminal = view.get("terminal", state in TERMINAL)
    may_claim = assigned in ("*", None) or agent == assigned
    if status == "claimed":
        return None if may_claim else (f"task {cid} is addressed to {assigned}, not {agent}; the requester "
                                       f"({requester}) can reassign it")
    if _role_for(status, who=agent, requester=requester, claimant=claimant, may_claim=may_claim,
                 state="applied" if terminal else "open") is not None:
        return None
    if status in _REQUESTER_ONLY or (terminal and agent != requester):
        return (f"status {status} on task {cid} is its requester's ({requester}) to set"
                + ("" if agent != claimant else "; as its claimant, report ready, blocked or failed"))
    return (f"status {status} on task {cid} is for its claimant ({claimant or 'nobody yet'}) to report"
            + ("; claim it first" if claimant is None and may_claim else ""))


def ready_order(views: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Highest priority first (0 before 3), then oldest first, then by correlation id."""
    return sorted(views, key=lambda v: (v["priority"], v["request"]["created_at"], v["correlation_id"]))
