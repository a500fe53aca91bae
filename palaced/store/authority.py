"""The authority table on the write path: a local write the table does not allow is refused.

Owns: ``refusal`` — whether this daemon may write one event (an append of any kind: a client's
``append``, an ack, a patch, a claim, a room turn, an answer, a run's usage report…), judged in
the writing transaction by the same derivation every replica runs on what arrives, with the new
event appended as a draft (``palace_proto.authority``: a write it would flag is refused with the
flag's own words) — and ``daemon_of``, which daemon an origin belongs to (what a notice's rule
compares). Writer thread only, inside a batch's transaction (``writes.append_event`` calls it).

Which derivation judges: the rule's subject says. A task (``task.*``, a status on a task,
``usage.report``, an approval asked on a task): ``palace_proto.tasks.derive_task`` over the
correlation's events. A room: ``palace_proto.rooms.derive_room`` over the room's events. A
person's answer: ``palace_proto.questions.settle`` over the question's answers that can count.
The other subjects are judged where their events are built (the registry: ``agents.py``; a
redaction: ``handlers/log.py``; leases: ``handlers/leases.py``), and their rows say any member's
agent or the daemon itself, which the identity checks of ``writes.append_event`` already hold.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from palace_proto.agents import is_human
from palace_proto.authority import ANY_AGENT, Rule, rule_for
from palace_proto.questions import ASK, MAX_ANSWERS_PER_ORIGIN, settle
from palace_proto.rooms import ROOM_TYPES, derive_room
from palace_proto.tasks import REQUEST, derive_task
from palace_proto.validation import AppendRequest

from . import rooms as store_rooms
from .clock import utc_now
from .queries import person_answers

if TYPE_CHECKING:
    from .batch import WriteContext

__all__ = ["DRAFT_ID", "daemon_of", "refusal"]

# Why this id: after every real id of the same instant ("evt_" then digits): the draft is judged as
# the newest event, where it would be once written.
DRAFT_ID: Final = "evt_~draft"


def daemon_of(ctx: WriteContext, origin: Any) -> Any:
    """The daemon (peer id) an origin belongs to, or the origin itself when its key is unknown."""
    return ctx.agents.origin_daemons.get(origin) or origin


def _draft(ctx: WriteContext, req: AppendRequest, now: str) -> dict[str, Any]:
    """The event ``req`` would be, as a derivation reads it."""
    return {"id": DRAFT_ID, "origin": ctx.chain.origin, "type": req.type, "stream": req.stream, "room": req.room,
            "topic": req.topic, "from_agent": req.from_agent, "to_agent": req.to_agent,
            "correlation_id": req.correlation_id, "status": req.status, "ack_of": req.ack_of, "body": req.body,
            "metadata": json.loads(req.metadata_json), "created_at": now}


def refusal(ctx: WriteContext, req: AppendRequest) -> str | None:
    """Why this daemon may not write ``req`` (None: it may), in the words every replica would flag it with.

    Only events whose rule needs its subject's state are derived; a free word, a memory write or a
    registry event costs nothing here.
    """
    rule = rule_for(req.type, req.status, on_task=True, later_request=True,
                    approval=req.type == "question.ask" and "approval" in json.loads(req.metadata_json))
    if rule is None:
        return (f"type {req.type!r} is in palace's namespaces but its authority table does not name it: nothing "
                "may write it yet")
    cid = req.correlation_id
    if not cid and rule.name in ("usage.report", "question.approval"):
        return f"{rule.name} must refer to {rule.refers_to}: give its correlation_id"
    if not _needs_subject(rule) or (not cid and rule.subject != "question"):
        return None
    if rule.subject == "task":
        return _task_refusal(ctx, req, rule.name)
    if rule.name == "question.answer":
        return _answer_refusal(ctx, req)
    if rule.subject == "room" and req.type in ROOM_TYPES:
        return _room_refusal(ctx, req)
    return None


def _answer_refusal(ctx: WriteContext, req: AppendRequest) -> str | None:
    """A person's answer, judged as ``palace_proto.questions.settle`` will judge it everywhere."""
    question = ctx.get_event(req.ack_of) if req.ack_of else None
    if question is None or question.get("type") != ASK:
        return f"question.answer must acknowledge a question ({ASK}) with ack_of"
    now = utc_now()
    draft = _draft(ctx, req, now)
    answers = ctx.agents.annotate(person_answers(ctx.conn, [question["id"]], MAX_ANSWERS_PER_ORIGIN))
    state = settle(question, [*answers, draft], lambda answer: _proven(ctx, answer), now)
    for answer, verdict in state.flagged:
        if answer.get("id") == DRAFT_ID:
            return verdict.why
    return None


def _proven(ctx: WriteContext, answer: Mapping[str, Any]) -> bool:
    """Whether ``answer`` was written as a person's id by the daemon holding it (the draft: by
    this daemon, the running batch's registration included). A daemon in no palace has no
    registry: its own user is the only person there is."""
    agent = answer.get("from_agent")
    if not is_human(agent):
        return False
    if not ctx.agents.enforcing:
        return True
    if answer.get("id") == DRAFT_ID:
        record = ctx.agents.record_of(ctx, str(agent))
        return record is not None and record.current is not None and record.current.daemon == ctx.agents.daemon
    return ctx.agents.records.get(str(agent)) is not None and not answer.get("impersonation")


def _needs_subject(rule: Rule) -> bool:
    """Whether judging an event of ``rule`` needs its subject's state: anything more than "any
    member's agent", unbounded (a request, which opens or corrects a task, always does)."""
    return (rule.writers != {ANY_AGENT} or rule.per_origin is not None or rule.per_subject is not None
            or rule.name in ("task.open", "task.correct"))


def _task_refusal(ctx: WriteContext, req: AppendRequest, rule: str) -> str | None:
    cid = req.correlation_id
    assert cid is not None
    now = utc_now()
    draft = _draft(ctx, req, now)
    events = ctx.agents.annotate(ctx.correlation_events(cid))
    view = derive_task(cid, [*events, draft], now=now, daemon_of=lambda origin: daemon_of(ctx, origin))
    if view is None:
        if rule in ("usage.report", "question.approval"):
            return f"{rule} must refer to an existing task: no request on {cid} here"
        return None  # not a task: a status on other words moves nothing
    if req.type == REQUEST and view["request"]["id"] == DRAFT_ID and len(view["requests"]) == 1:
        return None  # the request that opens the task
    for flag in view["out_of_role"]:
        if flag["event_id"] == DRAFT_ID:
            return str(flag["why"])
    return None


def _room_refusal(ctx: WriteContext, req: AppendRequest) -> str | None:
    cid = req.correlation_id
    assert cid is not None
    now = utc_now()
    draft = _draft(ctx, req, now)
    events = ctx.agents.annotate(store_rooms.room_events(ctx, cid))
    room = derive_room(cid, [*events, draft], now=now)
    if room is None:
        return None  # no such room here: its operation says so
    for flag in room.flagged:
        if flag["event_id"] == DRAFT_ID:
            return str(flag["why"])
    return None
