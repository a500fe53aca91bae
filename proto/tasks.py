"""Tasks: a delegated piece of work and its lifecycle, derived from the events on its correlation id.

Owns: the queue fields of a ``task.request`` (``blocked_by``, ``priority``, ``stall_after_s`` in its
metadata), the task events palace adds to MemPalace's (``task.release``, ``task.reassign``,
``task.conflict``, ``task.stalled``), and ``derive_task``: a task's state, claimant, claims and
stall from its events, the same on every replica that holds the same events (the events are
ordered by ``created_at`` and id, never by a replica's local seq; ``now`` is the caller's). Who may
move a task is the authority table's (``palace_proto.authority``, rules ``task.*`` and
``usage.report``): this module says which roles a writer holds at each point, asks the table, and
does what an allowed event does. An event the table does not allow is listed in ``out_of_role``
with its rule and why, and moves nothing.

States and what moves between them:

    open       the request (``task.request``); a correction (a later request by the requester:
               the newest is the task's wording, earlier ones read as superseded); a
               ``task.release`` by the claimant; a ``task.reassign`` or status ``open`` by the
               requester (a new round: nobody holds the task)
    claimed    the first claim (an event with status ``claimed``, e.g. ``event.ack``) since the
               task (re)opened — by ``created_at``, then event id, so every replica names the
               same claimant; a later claim by another agent in the same round is a *conflict*:
               its agent is told once (``task.conflict``) and stops
    stalled    claimed, with no event from the claimant on the task for ``stall_after_s``
               (derived: it moves back to claimed with the claimant's next event)
    ready      a patch delivered (status ``ready``): ready for review. A review
               (``task.review``, of that patch) approves it, or requests changes: open again for
               its addressee (a rework round); an integrator's ``task.rework`` (the patch no
               longer applies) does the same with a new base commit
    applied, failed, blocked, superseded
               the terminal statuses: the requester's word at any time; the claimant's (or the
               named addressee's, while nobody holds the task) while the task is open — on a
               closed task that is its closing ack, and moves nothing

A task is *ready to take* when it is open, addressed to the agent or to ``*``, and every task it is
blocked by is applied.

Review and integration (issue 46). A request may name its reviewer (``review_by`` in its
metadata: an agent, a person ``human:NAME``, or ``any-other-agent``) and its integrator
(``integrator``: the agent that lands delivered patches on the task's branch). A review counts
only from a reviewer (the authority table's ``reviewer`` role): never the delivered patch's
author, nor another agent of the daemon that wrote the patch (that daemon holds both ids: one
party), though a person may review what their own machine's worker made. With a review required,
``applied`` counts only from the requester or from the integrator once a reviewer approved the
delivered patch, so no member lands its own work under another name. The integrator's check
result (``task.check``) is an event on the task, and it moves nothing. Pure: stdlib only, no
clock, no IO.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from .authority import (
    ADDRESSED,
    ADDRESSED_FREE,
    ADDRESSEE_FREE,
    ANY_AGENT,
    CLAIMANT,
    DAEMON,
    EVER_CLAIMED,
    INTEGRATOR,
    LOSING_CLAIMANT,
    MAX_CLOCK_SKEW_S,
    REQUESTER,
    REVIEWER,
    TELLING_DAEMON,
    Rule,
    Verdict,
    counts_in_order,
    flag_of,
    judge,
    rule_for,
)
from .errors import ValidationError
from .event_fields import PublicEvent, git_base
from .identity import SYSTEM_AGENT, check_agent_id, is_human, order_key
from .stamps import STAMP_RE, add_seconds, check_duration, parse_duration, seconds_between

__all__ = [
    "ANY_OTHER_AGENT", "CHECK", "CHECK_RESULTS", "CONFLICT", "DEFAULT_PRIORITY", "DEFAULT_STALL_AFTER_S",
    "MAX_BLOCKED_BY", "REASSIGN", "RELEASE", "REQUEST", "REVIEW", "REWORK", "STALLED", "TERMINAL", "VERDICTS",
    "check_blocked_by", "check_integrator", "check_priority", "check_review_by", "check_stall_after", "derive_task",
    "queue_fields", "ready_order", "review_fields",
]

REQUEST: Final = "task.request"
RELEASE: Final = "task.release"
REASSIGN: Final = "task.reassign"
CONFLICT: Final = "task.conflict"
STALLED: Final = "task.stalled"
REVIEW: Final = "task.review"
REWORK: Final = "task.rework"
CHECK: Final = "task.check"
#: ``review_by``: any agent or person but the patch's author (and not another agent of its daemon)
ANY_OTHER_AGENT: Final = "any-other-agent"
#: a review's ``metadata.verdict``
VERDICTS: Final = ("approve", "changes_requested")
#: a check's ``metadata.result``
CHECK_RESULTS: Final = ("passed", "failed")
_COMMIT_RE: Final = re.compile(r"^[0-9a-f]{7,64}$")
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


def check_review_by(value: Any) -> str | None:
    """Who must review a task's patch: an agent id, ``human:NAME``, ``any-other-agent``, or None.

    Raises:
        ValidationError: anything else (naming ``review_by``).
    """
    if value is None:
        return None
    if isinstance(value, str) and value.strip() == ANY_OTHER_AGENT:
        return ANY_OTHER_AGENT
    try:
        return check_agent_id(value, field="review_by")
    except ValidationError as exc:
        raise ValidationError(f"{exc.message}; or {ANY_OTHER_AGENT}", field="review_by") from None


def check_integrator(value: Any) -> str | None:
    """The agent that lands the task's delivered patch (an agent id, not a person), or None.

    Raises:
        ValidationError: not an agent id, or a person's.
    """
    if value is None:
        return None
    agent = check_agent_id(value, field="integrator")
    if is_human(agent):
        raise ValidationError(f"integrator {agent!r} is a person: an integrator is an agent (palacectl integrate "
                              "--agent ID)", field="integrator")
    return agent


def _metadata_dict(metadata: Any) -> dict[str, Any]:
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except ValueError:
            metadata = {}
    return metadata if isinstance(metadata, dict) else {}


def review_fields(metadata: Any) -> tuple[str | None, str | None]:
    """(review_by, integrator) of a request's metadata; hostile or malformed values read as None
    (no review, no integrator: nobody gains a role from a value that is not one)."""
    metadata = _metadata_dict(metadata)
    try:
        review_by = check_review_by(metadata.get("review_by"))
    except ValidationError:
        review_by = None
    try:
        integrator = check_integrator(metadata.get("integrator"))
    except ValidationError:
        integrator = None
    return review_by, integrator


def queue_fields(metadata: Any) -> tuple[list[str], int, int | None]:
    """(blocked_by, priority, stall_after_s or None) of a request's metadata; hostile or
    malformed values fall back to the defaults (a peer's event must not break the queue)."""
    metadata = _metadata_dict(metadata)
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


def _order(event: PublicEvent) -> tuple[str, str]:
    return order_key(event.get("created_at"), event.get("id"))


def _corrects(facts: Mapping[str, Any]) -> bool:
    """``task.correct``'s condition: a request on a task that has its request already."""
    return bool(facts["later_request"])


def _metadata_of(event: PublicEvent) -> Mapping[str, Any]:
    metadata = event.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def derive_task(correlation_id: str, events: Sequence[PublicEvent], *, now: str | None = None,
                stall_after_s: int = DEFAULT_STALL_AFTER_S,
                daemon_of: Callable[[Any], Any] | None = None) -> dict[str, Any] | None:
    """The lifecycle view of one task from every event on its correlation id (any order), or
    None without a request. ``now`` (the caller's clock) decides ``stalled`` and which events are
    dated too far ahead to count yet (``authority.counts_in_order``); ``stall_after_s`` is the
    default when the request names none; ``daemon_of(origin)`` names the daemon an origin belongs
    to (a notice counts only from the daemon that wrote what it tells about; without it, origins
    are compared). Every event is judged by the authority table (``palace_proto.authority``): one
    it does not allow is listed in ``out_of_role`` with its rule and why, and moves nothing. See
    the module docstring for the states."""
    # An event palace judged an impersonation (palace_proto.identity: written as an agent by a
    # daemon that did not hold it) holds no role: it stays in the thread and moves nothing.
    genuine = [e for e in events if not e.get("impersonation")]
    dated = [e for e in genuine if isinstance(e.get("created_at"), str) and STAMP_RE.match(e["created_at"])]
    ahead = [e for e in dated if not counts_in_order(e["created_at"], now)]
    ahead_ids = {id(e) for e in ahead}
    ordered = sorted((e for e in dated if id(e) not in ahead_ids), key=_order)
    requests = [e for e in ordered if e.get("type") == REQUEST]
    if not requests:
        return None
    first = requests[0]
    requester = first.get("from_agent")
    daemon = daemon_of if daemon_of is not None else (lambda origin: origin)
    task = _Derivation(correlation_id, first)
    out_of_role: list[dict[str, Any]] = []
    for event in ahead:
        out_of_role.append(flag_of(event, Verdict(False, "clock", f"dated {event['created_at']}, more than "
                                                  f"{MAX_CLOCK_SKEW_S // 60} minutes ahead of this replica's clock: "
                                                  "it counts once that clock reaches it")))
    # What the rows of other features judged on a task count (a usage report): by rule, the
    # events that count, in the settling order, each bounded by its row's per_subject.
    counted: dict[str, list[str]] = {}
    by_id = {e.get("id"): e for e in ordered}
    for event in ordered:
        task.last_activity = max(task.last_activity, event["created_at"])
        kind, who, status = event.get("type"), event.get("from_agent"), event.get("status")
        if event is first:
            if status not in (None, "open"):
                out_of_role.append(flag_of(event, Verdict(False, "task.open", "a request opens its task (status open)")))
            continue
        rule = rule_for(str(kind), status, on_task=True, later_request=kind == REQUEST, metadata=event.get("metadata"))
        if rule is not None and rule.subject != "task":
            continue  # judged by its own feature (a redaction, a question, a memory write…)
        refers, refers_why = True, None
        if kind == REQUEST and status not in (None, "open"):
            refers, refers_why = False, "a request opens its task (status open)"
        elif rule is not None and rule.refers is not None and (why := rule.refers(event, correlation_id)):
            refers, refers_why = False, why
        elif kind in (CONFLICT, STALLED):
            told = by_id.get(str(_metadata_of(event).get("claim_event_id")))
            about = told if kind == CONFLICT else task.wording
            if told is None or about is None or daemon(event.get("origin")) != daemon(about.get("origin")):
                refers, refers_why = False, (f"{kind} must come from the daemon that wrote the "
                                             f"{'claim' if kind == CONFLICT else 'request'} it tells about")
        elif kind in (REVIEW, CHECK, REWORK):
            why = task.refers_to_delivery(event, str(kind))
            if why is not None:
                refers, refers_why = False, why
        roles = task.roles(who, requester, event, daemon)
        if rule is not None and rule.name == "task.close" and status == "applied" and task.review_pending():
            # The review gate: with a review required, only the requester's word or the
            # integrator's after an approval lands the task (never the author's own say-so).
            roles = roles - {CLAIMANT, ADDRESSEE_FREE}
        verdict = judge(rule, roles, kind=str(kind), agent=who, refers=refers,
                        refers_why=refers_why, subject_count=len(counted.get(rule.name, ()) if rule else ()),
                        names=task.names(requester))
        if not verdict.ok:
            out_of_role.append(flag_of(event, verdict))
            continue
        if verdict.rule.startswith("task."):
            task.apply(verdict.rule, event, who, status, requester)
        else:  # a row of another feature on this task: it counts, and moves nothing of the task's
            counted.setdefault(verdict.rule, []).append(str(event.get("id")))
    state = task.state
    blocked_by, priority, own_stall = queue_fields(task.wording.get("metadata"))
    stall_after = own_stall or stall_after_s
    stalled = (state == "claimed" and now is not None and task.claimant_last is not None
               and seconds_between(task.claimant_last, now) >= stall_after)
    return {
        "correlation_id": correlation_id,
        "request": dict(task.wording),
        "opened_at": first["created_at"],
        "requests": [{"event_id": r.get("id"), "created_at": r.get("created_at"),
                      "superseded": r.get("id") in task.superseded} for r in task.requests],
        "state": "stalled" if stalled else state,
        "terminal": state in TERMINAL,
        "requested_by": requester,
        "assigned_to": task.assigned,
        "claimed_by": task.claimant,
        "claim_event_id": task.claim_event,
        "claims": [c["agent"] for c in task.claims],
        "claim_events": task.claims,
        "conflicts": task.conflicts,
        "out_of_role": sorted(out_of_role, key=lambda f: order_key(str(f["created_at"]), str(f["event_id"]))),
        "counted": counted,
        "blocked_by": blocked_by,
        "priority": priority,
        "stall_after_s": stall_after,
        "stalled": stalled,
        "stalls_at": (add_seconds(task.claimant_last, stall_after)
                      if state == "claimed" and task.claimant_last is not None else None),
        "claimant_last_activity": task.claimant_last,
        "last_activity": task.last_activity,
        "events": sorted((dict(e) for e in events), key=_order),
        "impersonations": len(events) - len(genuine),
        "base": task.base,
        "review_by": task.review_by,
        "integrator": task.integrator,
        "delivery": _delivery_view(task.delivery),
        "review": task.review_state(),
        "reviews": task.reviews,
        "reworks": task.reworks,
        "checks": task.checks,
    }


def _delivery_view(event: PublicEvent | None) -> dict[str, Any] | None:
    """What a view says of the patch that made the task ready (None: none in this round)."""
    if event is None:
        return None
    artifacts = event.get("artifact_ids")
    branch, base = git_base(event)
    return {"event_id": event.get("id"), "author": event.get("from_agent"), "created_at": event.get("created_at"),
            "artifact_ids": list(artifacts) if isinstance(artifacts, (list, tuple)) else [], "base": base,
            "branch": branch}


def _said(event: PublicEvent, limit: int = 2000) -> str:
    body = event.get("body")
    return body[:limit] if isinstance(body, str) else ""


class _Derivation:
    """One task's state as ``derive_task`` walks its events (the roles a writer holds at each
    point, and what an allowed event does)."""

    def __init__(self, correlation_id: str, first: PublicEvent) -> None:
        self.correlation_id = correlation_id
        self.wording: PublicEvent = first
        self.requests: list[PublicEvent] = [first]
        self.superseded: set[Any] = set()
        self.assigned: Any = first.get("to_agent")
        self.state = "open"
        self.claimant: Any = None
        self.claim_event: Any = None
        self.claimant_last: str | None = None
        self.claims: list[dict[str, Any]] = []
        self.conflicts: list[dict[str, Any]] = []
        self.ever_claimed: set[Any] = set()
        self.losers: set[Any] = set()
        self.last_activity: str = first["created_at"]
        #: the wording's review and integration (``review_fields``), and where the work starts now
        self.review_by, self.integrator = review_fields(first.get("metadata"))
        self.base: Any = git_base(first)[1]
        #: the patch that made the task ready in this round, and the review that approved it
        self.delivery: PublicEvent | None = None
        self.approval: PublicEvent | None = None
        self.reviews: list[dict[str, Any]] = []
        self.reworks: list[dict[str, Any]] = []
        self.checks: list[dict[str, Any]] = []

    def review_pending(self) -> bool:
        """A review is required and the delivered patch (if any) has none that approves it."""
        return self.review_by is not None and self.approval is None

    def review_state(self) -> dict[str, Any]:
        approval = self.approval
        if self.review_by is None:
            state = "not_required"
        elif approval is not None:
            state = "approved"
        elif self.delivery is not None:
            state = "waiting"
        elif self.reworks and self.reworks[-1]["kind"] == "changes_requested":
            state = "changes_requested"
        else:
            state = "no_patch"
        return {"by": self.review_by, "state": state,
                "approved_by": approval.get("from_agent") if approval is not None else None,
                "approval_event_id": approval.get("id") if approval is not None else None}

    def refers_to_delivery(self, event: PublicEvent, kind: str) -> str | None:
        """Why a review, check or rework does not refer to this task's delivered patch (None: it does)."""
        if self.delivery is None or self.state != "ready":
            return f"{kind} must refer to the task's delivered patch: the task is {self.state}, with no patch waiting"
        metadata = _metadata_of(event)
        if kind == REWORK:
            base = metadata.get("base")
            if not isinstance(base, str) or not _COMMIT_RE.match(base):
                return f"{kind} must name the commit to redo the work on (metadata.base: a hex commit id)"
            return None
        if event.get("ack_of") != self.delivery.get("id"):
            return f"{kind} must acknowledge the task's delivered patch (ack_of {self.delivery.get('id')})"
        if kind == REVIEW and metadata.get("verdict") not in VERDICTS:
            return f"{kind} must say its verdict (metadata.verdict: {' or '.join(VERDICTS)})"
        if kind == CHECK and metadata.get("result") not in CHECK_RESULTS:
            return f"{kind} must say its result (metadata.result: {' or '.join(CHECK_RESULTS)})"
        return None

    def _may_review(self, who: Any, requester: Any, event: PublicEvent | None,
                    daemon: Callable[[Any], Any]) -> bool:
        """Whether ``who`` (writing ``event``) is a reviewer of the delivered patch (``REVIEWER``)."""
        delivery = self.delivery
        if delivery is None or event is None or who == delivery.get("from_agent"):
            return False
        # Another agent of the daemon that wrote the patch is the same party under a second name;
        # a person is not (people's ids are the palace CA's to grant).
        if not is_human(who) and daemon(event.get("origin")) == daemon(delivery.get("origin")):
            return False
        if self.review_by is None:
            return bool(who == requester)
        return self.review_by == ANY_OTHER_AGENT or who == self.review_by

    def roles(self, who: Any, requester: Any, event: PublicEvent | None = None,
              daemon: Callable[[Any], Any] | None = None) -> frozenset[str]:
        if who == SYSTEM_AGENT:
            return frozenset({DAEMON, TELLING_DAEMON})  # which daemon: checked as what it refers to
        roles = {ANY_AGENT}
        if self._may_review(who, requester, event, daemon or (lambda origin: origin)):
            roles.add(REVIEWER)
        if (self.integrator is not None and who == self.integrator and self.delivery is not None
                and not self.review_pending()):
            roles.add(INTEGRATOR)
        if who == requester:
            roles.add(REQUESTER)
        if self.claimant is not None and who == self.claimant:
            roles.add(CLAIMANT)
        if who in self.ever_claimed:
            roles.add(EVER_CLAIMED)
        if who in self.losers:
            roles.add(LOSING_CLAIMANT)
        if self.assigned in ("*", None) or who == self.assigned:
            roles.add(ADDRESSED)
            if self.claimant is None:
                roles.add(ADDRESSED_FREE)
                if who == self.assigned:
                    roles.add(ADDRESSEE_FREE)
        return frozenset(roles)

    def names(self, requester: Any) -> dict[str, Any]:
        """Who holds the named roles now (a flag names them)."""
        named = self.assigned if self.assigned not in ("*", None) else None
        return {REQUESTER: requester, CLAIMANT: self.claimant, ADDRESSEE_FREE: named if self.claimant is None else None,
                ADDRESSED: named}

    def _round(self, state: str = "open") -> None:
        """A new round: nobody holds the task, and no patch waits."""
        self.state, self.claimant, self.claim_event, self.claimant_last = state, None, None, None
        self.losers = set()
        self.delivery = self.approval = None

    def apply(self, rule: str, event: PublicEvent, who: Any, status: Any, requester: Any) -> None:
        """What an event the table allowed does (its rule says which kind of move it is)."""
        terminal = self.state in TERMINAL
        at = event["created_at"]
        if self.claimant is not None and who == self.claimant:
            self.claimant_last = at  # every word of the claimant on the task is a sign of life
        if rule == "task.correct":
            self.superseded.add(self.wording.get("id"))
            self.wording = event
            self.requests.append(event)
            target = event.get("to_agent")
            if isinstance(target, str) and target:
                self.assigned = target
            self.review_by, self.integrator = review_fields(event.get("metadata"))
            self.base = git_base(event)[1] or self.base
            self._round()
        elif rule == "task.claim":
            self.ever_claimed.add(who)
            self.claims.append({"agent": who, "event_id": event.get("id"), "created_at": at})
            if self.claimant is None and not terminal:
                self.state, self.claimant, self.claim_event, self.claimant_last = "claimed", who, event.get("id"), at
            elif self.claimant is not None and who != self.claimant:
                self.losers.add(who)
                self.conflicts.append({"agent": who, "event_id": event.get("id"), "created_at": at,
                                       "claimant": self.claimant, "claim_event_id": self.claim_event})
        elif rule == "task.deliver":
            if terminal:
                return  # a delivery on a closed task: its own words, it moves nothing
            if self.claimant is None:
                # One who may take the task, on a task nobody holds: its claim and its report at once.
                self.ever_claimed.add(who)
                self.claims.append({"agent": who, "event_id": event.get("id"), "created_at": at})
                self.claimant, self.claim_event, self.claimant_last = who, event.get("id"), at
            self.state = "ready"
            self.delivery, self.approval = event, None  # an approval is of one patch: a new one needs its own
        elif rule == "task.close":
            if who == requester or not terminal:
                self.state = status
        elif rule == "task.supersede":
            if who != requester:
                return  # a losing claimant withdraws its claim: it moves nothing
            if event.get("ack_of") in {r.get("id") for r in self.requests} and event.get("ack_of") != self.wording.get("id"):
                self.superseded.add(event.get("ack_of"))  # marks one earlier request, not the task
            else:
                self.state = "superseded"
        elif rule in ("task.reopen", "task.release"):
            if rule == "task.release" and terminal:
                return
            self._round()
        elif rule == "task.reassign":
            if terminal:
                return
            target = event.get("to_agent")
            if isinstance(target, str) and target:
                self.assigned = target
            self._round()
        elif rule == "task.review":
            verdict = _metadata_of(event).get("verdict")
            self.reviews.append({"event_id": event.get("id"), "by": who, "verdict": verdict, "created_at": at,
                                 "patch_event_id": event.get("ack_of"), "said": _said(event)})
            if verdict == "approve":
                self.approval = event
            else:  # changes requested: back to its author's side, on the same base
                self.reworks.append({"event_id": event.get("id"), "by": who, "kind": "changes_requested",
                                     "base": self.base, "created_at": at, "said": _said(event)})
                self._round()
        elif rule == "task.rework":
            self.base = _metadata_of(event)["base"]
            self.reworks.append({"event_id": event.get("id"), "by": who, "kind": "rework",
                                 "base": self.base, "created_at": at, "said": _said(event)})
            self._round()
        elif rule == "task.check":
            metadata = _metadata_of(event)
            self.checks.append({"event_id": event.get("id"), "by": who, "result": metadata.get("result"),
                                "patch_event_id": event.get("ack_of"), "commit": metadata.get("commit"),
                                "duration_s": metadata.get("duration_s"), "created_at": at,
                                "artifact_ids": list(event.get("artifact_ids") or [])})


def ready_order(views: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Highest priority first (0 before 3), then oldest first, then by correlation id."""
    return sorted(views, key=lambda v: (v["priority"], v.get("opened_at") or v["request"]["created_at"],
                                        v["correlation_id"]))


# -- the feature's declaration (palace_proto.features puts every feature's together) ----------------

#: the local API's operations of tasks
OPS: Final = frozenset({"task_create", "task_show", "task_list", "task_ready", "task_claim", "task_release",
                        "task_reassign"})
#: the namespace of task events
NAMESPACE: Final = "task."
#: the rows of the authority table for tasks (a status on a task is judged by its row, whatever the type)
RULES: Final[tuple[Rule, ...]] = (
    Rule("task.open", ("task.request",), (), "task", frozenset({ANY_AGENT}),
         "a correlation id no request names yet (task_create mints one)",
         "the earliest request (created_at, event id) opens the task; its writer is the requester",
         test="tests/proto/test_tasks.py::test_roles_give_the_same_verdict_whatever_order_the_events_arrive_in"),
    Rule("task.correct", ("task.request",), (), "task", frozenset({REQUESTER}),
         "the task it corrects (its correlation id)",
         "the newest request is the task's wording; earlier ones read as superseded; a correction opens the "
         "task again, unclaimed, for its addressee",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing",
         when=_corrects),
    Rule("task.claim", (), ("claimed",), "task", frozenset({ADDRESSED}),
         "an existing task, open",
         "the earliest claim since the task (re)opened holds it; a later one by another agent is a conflict, "
         "told to its agent once (task.conflict)",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.deliver", (), ("ready",), "task", frozenset({CLAIMANT, ADDRESSED_FREE}),
         "an existing task",
         "ready for review; from one the task is addressed to while nobody holds it, its claim and its report "
         "at once; on a closed task it moves nothing",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.close", (), ("applied", "failed", "blocked"), "task",
         frozenset({REQUESTER, CLAIMANT, ADDRESSEE_FREE, INTEGRATOR}),
         "an existing task",
         "the requester's word moves the task at any time; the claimant's, the addressee's and the integrator's "
         "close it while it is open, and on a closed task stand as their closing ack, moving nothing; with a "
         "review required, applied counts only from the requester, or from the integrator once a reviewer "
         "approved the delivered patch",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.supersede", (), ("superseded",), "task", frozenset({REQUESTER, LOSING_CLAIMANT}),
         "an existing task (with ack_of: one of its earlier requests)",
         "the requester's supersedes the task, or only the earlier request its ack_of names; a losing "
         "claimant's withdraws its claim and moves nothing",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.reopen", (), ("open",), "task", frozenset({REQUESTER}),
         "an existing task",
         "a new round: open, nobody holds it",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.release", ("task.release",), (), "task", frozenset({CLAIMANT}),
         "an existing task, open", "open again, nobody holds it",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.reassign", ("task.reassign",), (), "task", frozenset({REQUESTER}),
         "an existing task, open", "open again for the agent it names (to_agent), nobody holds it",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.review", (REVIEW,), (), "task", frozenset({REVIEWER}),
         "the task's delivered patch (ack_of: the patch.ready that made it ready); metadata.verdict approve or "
         "changes_requested",
         "approve: that patch may be integrated (a newer delivery needs its own review); changes_requested: open "
         "again for its addressee, nobody holds it (a rework round, the review's words in the view)",
         test="tests/proto/test_task_review.py::test_nobody_approves_their_own_patch_under_any_name"),
    Rule("task.rework", (REWORK,), (), "task", frozenset({REQUESTER, INTEGRATOR}),
         "the task's delivered patch (the task ready); metadata.base: the commit to redo the work on",
         "open again for its addressee on the new base commit, nobody holds it",
         test="tests/proto/test_task_review.py::test_a_rework_reopens_the_task_on_its_new_base_for_its_addressee"),
    Rule("task.check", (CHECK,), (), "task", frozenset({INTEGRATOR}),
         "the task's delivered patch (ack_of: its patch.ready); metadata.result passed or failed",
         "moves nothing: the integrator's check of the patch, listed in the task's view",
         test="tests/proto/test_task_review.py::test_only_the_integrator_after_the_review_checks_and_lands"),
    Rule("task.conflict", ("task.conflict",), (), "task", frozenset({TELLING_DAEMON}),
         "the losing claim (metadata.claim_event_id)", "moves nothing: tells the loser once",
         written_by="palaced (to a claim's loser)", as_daemon=True,
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.stalled", ("task.stalled",), (), "task", frozenset({TELLING_DAEMON}),
         "the stalled claim (metadata.claim_event_id)", "moves nothing: tells the requester once per stall",
         written_by="palaced (to a stalled task's requester)", as_daemon=True,
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
    Rule("task.words", ("event.ack", "task.reply", "task.status"), (), "task", frozenset({ANY_AGENT}),
         "anything (ack_of: an existing event); a status it carries on a task is judged by that status's row",
         "moves nothing; the claimant's count as its activity (a task stalls without them)",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing",
         defers_to_status=True),
)
