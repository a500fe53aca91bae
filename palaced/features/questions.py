"""Questions to a person: ``ask`` (and wait for the answer), ``answer``, ``questions``.

Owns: the three operations (proto/PROTOCOL.md, "Questions"). What a question and an answer are,
and how a question is settled from its answers the same way on every replica, is
``palace_proto.questions``; this module writes the events, waits on the bus for an answer (pushed:
no polling), and says who here counts as a proven person: the daemon that holds the person's id
(granted by the palace CA, ``store/agents.py``), or, on a daemon that belongs to no palace, the
machine's own user.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import trio

from palace_proto.errors import ApiError, ValidationError
from palace_proto.event_fields import PublicEvent, reply_to, thread
from palace_proto.fleet import daemon_labels
from palace_proto.identity import is_human
from palace_proto.question_grants import MAX_GRANT_S, REVOKE, Grant, check_grant, check_shape, grants_in_force
from palace_proto.questions import (
    ANSWER,
    ANYONE,
    ASK,
    DEFAULT_TIMEOUT_S,
    MAX_ANSWERS_PER_ORIGIN,
    MAX_APPROVAL_INLINE_BYTES,
    MAX_TIMEOUT_S,
    QUESTION_ROOM,
    QUESTION_STREAM,
    QuestionState,
    approval_marker,
    ask_metadata,
    check_addressee,
    check_approval,
    check_choices,
    check_timeout,
    is_approval,
    match_choice,
    settle,
)
from palace_proto.stamps import add_seconds, seconds_between
from palace_proto.tasks import derive_task
from palace_proto.text import printable
from palace_proto.validation import AppendRequest, ListQuery, clean_optional, clean_required

from ..clock import utc_now
from ..feature import Feature
from ..handlers.context import Context
from ..notify.triggers import Trigger, preview
from ..store import WriteContext, append_event, put_artifact
from ..store import questions as store_questions
from ..store.aio import HEAVY_ARTIFACT_BYTES
from ..store.questions import QuestionReads

__all__ = ["FEATURE", "OPS", "held_people", "in_force", "machine_labels", "proven_person", "settled"]

# Why 500: the page a waiting ``ask`` reads from the bus after each wake (as ``wait`` does).
_PAGE: Final = 500
# Why 200: a person's list of questions; older ones are in the log (``list --type question.ask``).
MAX_QUESTIONS: Final = 200
# Why 200: the grants a palace's people give in a week (each an allow they chose to widen); past
# that the oldest are not read, and their calls are asked again (never allowed by a grant unread).
MAX_GRANTS_READ: Final = 200


def proven_person(ctx: Context, event: PublicEvent) -> bool:
    """Whether ``event`` was written as a person's id by the daemon that holds it. A daemon in no
    palace has no registry to ask: its own user is the only person there is."""
    agents = ctx.store.agents
    if not is_human(event.get("from_agent")):
        return False
    if not agents.enforcing and ctx.membership is None:
        return True
    record = agents.records.get(event["from_agent"])
    return record is not None and agents.verdict(event) is None


def held_people(ctx: Context) -> list[str]:
    """The person ids this daemon holds now (whom it may answer as, and notify)."""
    agents = ctx.store.agents
    return sorted(agent for agent in agents.records if is_human(agent) and agents.holds(agent))


def machine_labels(ctx: Context) -> dict[str, str]:
    """origin -> the machine (daemon) that writes it, as a person tells the palace's daemons apart:
    where a question was asked, read from who signed it (never from what it says)."""
    names = ctx.network.views.peer_names() if ctx.network is not None else {}
    if ctx.membership is not None:
        names[ctx.membership.peer_id] = ctx.membership.name
    labels = daemon_labels(names)
    return {origin: labels[peer] for origin, peer in ctx.store.agents.origin_daemons.items() if peer in labels}


async def _question(ctx: Context, event_id: Any) -> PublicEvent:
    event = await ctx.event_or_404(event_id)
    if event.get("type") != ASK:
        raise ValidationError(f"event {event['id']} is a {event.get('type')}, not a question ({ASK})", field="event_id")
    return event


async def settled(ctx: Context, asked: Sequence[PublicEvent],
                  task: Mapping[str, Any] | None = None) -> list[QuestionState]:
    """The state of each question of ``asked``, from the answers that can count held here (each
    origin's first few per question, written as a person's id: ``Reads.person_answers``), with the
    registry's verdicts; an approval marker counts only from the claimant of the task it is asked on
    (``question.approval``: the task's derivation says, ``task`` when the caller has it derived)."""
    if not asked:
        return []
    answers = ctx.store.agents.annotate(
        await ctx.store.reads(QuestionReads).person_answers([q["id"] for q in asked], MAX_ANSWERS_PER_ORIGIN))
    by_question: dict[Any, list[PublicEvent]] = {}
    for a in answers:
        by_question.setdefault(a["ack_of"], []).append(a)
    now = utc_now()
    refused = await _approvals_refused(ctx, asked, now, task)
    return [settle(q, by_question.get(q["id"], []), lambda a: proven_person(ctx, a), now,
                   approval_refused=refused.get(q["id"])) for q in asked]


async def _approvals_refused(ctx: Context, asked: Sequence[PublicEvent], now: str,
                             task: Mapping[str, Any] | None) -> dict[Any, str]:
    """Why each approval-marked question of ``asked`` does not count as one (the authority table's
    ``question.approval``: only the claimant of the task it names asks for approval on it)."""
    refused: dict[Any, str] = {}
    views: dict[str, Mapping[str, Any] | None] = {}
    if task is not None:
        views[task["correlation_id"]] = task
    daemons = ctx.store.agents.origin_daemons
    for question in asked:
        if not is_approval(question):
            continue
        cid = question.get("correlation_id")
        if not isinstance(cid, str) or not cid:
            refused[question["id"]] = "question.approval must be asked on a task (its correlation id)"
            continue
        if cid not in views:
            events = ctx.store.agents.annotate(await ctx.store.events_by_correlation(cid))
            views[cid] = derive_task(cid, events, now=now, daemon_of=lambda origin: daemons.get(origin) or origin)
        view = views[cid]
        if view is None:
            refused[question["id"]] = f"question.approval must be asked on an existing task: no request on {cid} here"
            continue
        why = next((f["why"] for f in view["out_of_role"] if f["event_id"] == question["id"]), None)
        if why is not None:
            refused[question["id"]] = str(why)
    return refused


async def _settled(ctx: Context, question: PublicEvent) -> QuestionState:
    return (await settled(ctx, [question]))[0]


def _reply(state: QuestionState) -> dict[str, Any]:
    return {**state.to_wire(), "timed_out": state.status != "answered"}


async def ask(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Write a question to a person and, unless ``wait`` is false, wait for the answer that counts
    (or the question's timeout). With ``question_id``: no new question, wait for that one's answer.
    ``wait_s`` bounds this call's wait (a harness whose tool calls time out asks again with the id).
    The reply is the question's state: ``status`` answered, open or expired, ``answer`` ({by,
    text, event_id}) when answered, and ``timed_out`` unless answered."""
    wait = args.get("wait", True)
    if not isinstance(wait, bool):
        raise ValidationError("wait must be true or false", field="wait")
    wait_s = args.get("wait_s")
    if wait_s is not None and (isinstance(wait_s, bool) or not isinstance(wait_s, int) or wait_s < 0):
        raise ValidationError("wait_s must be a number of seconds (0 or more)", field="wait_s")
    if args.get("question_id") is not None:
        question = await _question(ctx, args.get("question_id"))
    else:
        granted = await _granted(ctx, args)
        if granted is not None:
            return granted
        question = await _write_question(ctx, args)
    # The tip before reading the answers: one committed after it is seen by the loop below.
    cursor = ctx.bus.latest_seq
    state = await _settled(ctx, question)
    remaining = (seconds_between(utc_now(), state.terms.expires_at)
                 if state.terms.expires_at is not None else MAX_TIMEOUT_S)
    limit = min(remaining, wait_s) if wait_s is not None else remaining
    if not wait or state.status != "open" or limit <= 0:
        return _reply(state)
    with trio.move_on_after(limit):
        while True:
            await ctx.bus.wait_beyond(cursor)
            new = await ctx.committed_after(cursor, _PAGE)
            if not new:
                continue
            cursor = new[-1]["seq"]
            if any(e.get("type") == ANSWER and e.get("ack_of") == question["id"] for e in new):
                state = await _settled(ctx, question)
                if state.status == "answered":
                    return _reply(state)
    return _reply(await _settled(ctx, question))


async def _write_question(ctx: Context, args: Mapping[str, Any]) -> PublicEvent:
    """Write the question; a run's permission request (``approval``) keeps its whole request in
    the metadata when short, else in an artifact the event names, written in the same transaction
    (so no replica holds the question without what it asks about)."""
    ctx.require_writer()
    to = check_addressee(args.get("to"))
    choices = check_choices(args.get("choices"))
    timeout_s = check_timeout(args.get("timeout_s", DEFAULT_TIMEOUT_S))
    approval = check_approval(args.get("approval"))
    marker: dict[str, str] | None = None
    whole: bytes | None = None
    if approval is not None:
        text = approval["input"].encode("utf-8")
        if len(text) > ctx.limits.max_artifact_bytes:
            raise ValidationError(f"approval.input is {len(text)} bytes; this daemon keeps artifacts of at most "
                                  f"{ctx.limits.max_artifact_bytes} bytes", field="approval.input")
        marker = approval_marker(approval, inline=len(text) <= MAX_APPROVAL_INLINE_BYTES)
        whole = None if "input" in marker else text
    routing = thread(args.get("stream") or QUESTION_STREAM, args.get("room") or QUESTION_ROOM,
                     args.get("correlation_id"), topic=args.get("topic"))
    metadata = ask_metadata(choices, utc_now(), timeout_s, marker)
    if marker is not None and ctx.membership is not None:
        # The machine the run asks from, for the notification's title (a person's phone has no
        # roster to look it up in); the dashboard and the CLI name it from who signed the question.
        metadata["asked_on"] = printable(ctx.membership.name, 64)
    req = AppendRequest.from_wire({
        **routing, "type": ASK, "from_agent": clean_required("from_agent", args.get("from_agent")), "to_agent": to,
        "body": args.get("body"), "metadata": metadata,
        "artifact_ids": [marker["input_artifact"]] if marker is not None and whole is not None else [],
    }, ctx.limits)
    if is_human(req.from_agent):
        raise ValidationError("a question is asked by an agent (from_agent); people answer", field="from_agent")
    if whole is None:
        return await ctx.store.write(lambda w: append_event(w, req))
    content = whole

    def job(w: WriteContext) -> PublicEvent:
        artifact = put_artifact(w, kind="note", created_by=req.from_agent, content=content)
        assert marker is not None and artifact["id"] == marker["input_artifact"]
        return append_event(w, req)

    return await ctx.store.write(job, heavy=len(content) > HEAVY_ARTIFACT_BYTES)


async def answer(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Answer a question as a person this daemon holds (``as``; by default the one it holds).

    Refused: a person this daemon does not hold, a question for someone else, an answer that is
    none of the choices, a question already answered or expired. Two answers written at once (or
    apart, in a partition) are settled by ``settle``: ``won`` says whether this one counts.
    """
    ctx.require_writer()
    question = await _question(ctx, args.get("event_id"))
    text = clean_required("text", args.get("text"))
    person = clean_optional("as", args.get("as"))
    held = held_people(ctx)
    in_palace = ctx.store.agents.enforcing or ctx.membership is not None
    if person is None:
        to = question["to_agent"]
        named = to if isinstance(to, str) and is_human(to) and to != "human:*" else None
        if len(held) == 1:
            person = held[0]
        elif named is not None and (not in_palace or _grantable_here(ctx, named)):
            # Outside a palace, or on the daemon holding the palace CA before anyone holds that
            # person's id: the question's own person answers (issue 47: the founder's first answer).
            person = named
        elif ctx.store.agents.human_grant is not None:
            raise ValidationError("say who answers: --as human:NAME (this daemon holds the palace CA: your first "
                                  "answer as a person makes their id this daemon's" +
                                  (f"; it holds {', '.join(held)} already)" if held else ")"), field="as")
        else:
            raise ValidationError("say who answers: --as human:NAME" + (
                f" (this daemon holds {', '.join(held)})" if held else
                " (this daemon holds no person's id: the palace owner grants one with `palacectl agent transfer "
                "human:NAME --to PEER_ID` on the daemon holding the palace CA)"), field="as")
    if not is_human(person):
        raise ValidationError(f"as={person!r}: answers come from a person, human:NAME", field="as")
    if in_palace and person not in held and not _grantable_here(ctx, person):
        raise ApiError(f"{person} is not held by this daemon, so its answer would not count; answer from the "
                       f"daemon holding {person}, or have it moved here (`palacectl agent transfer {person} --to "
                       f"{ctx.store.agents.daemon}` on the palace owner's daemon)", code="forbidden")
    to = question.get("to_agent")
    if to != "human:*" and to != person:
        raise ApiError(f"the question is for {to}, not {person}", code="forbidden")
    state = await _settled(ctx, question)
    if state.status == "answered":
        assert state.answer is not None
        raise ApiError(f"already answered by {state.answer.get('from_agent')} at {state.answer.get('created_at')}: "
                       f"{state.choice!r}", code="conflict")
    if state.status == "expired":
        raise ApiError(f"the question expired at {state.terms.expires_at}; nobody waits for its answer any more",
                       code="conflict")
    choice = match_choice(state.terms, text)
    if choice is None:
        raise ValidationError(f"{text!r} is not one of the choices: {', '.join(state.terms.choices or ())}", field="text")
    grant = check_grant(args.get("grant"), args.get("for_s"))
    if grant is not None:
        if state.approval is None or choice != "allow":
            raise ValidationError("a grant widens an allow of a run's permission request: answer allow to an approval "
                                  "question, or leave --grant out", field="grant")
        if not state.approval.get("shape"):
            raise ValidationError("this request can be allowed for this call only: palace cannot tell which later "
                                  "calls are the same (several commands in one line, or words it cannot read); "
                                  "leave --grant out", field="grant")
    req = AppendRequest.from_wire({**reply_to(question), "type": ANSWER, "from_agent": person, "body": choice,
                                   "metadata": {"grant": grant} if grant is not None else None}, ctx.limits)
    written = await ctx.store.write(lambda w: append_event(w, req))
    state = await _settled(ctx, question)
    return {"answer": written, "won": state.answer is not None and state.answer.get("id") == written["id"],
            "question": state.to_wire()}


def _grantable_here(ctx: Context, person: str) -> bool:
    """The daemon holding the palace CA grants a person's id to itself on first use: while nobody
    was ever granted it (a member's own registration of a person's id is void, and must not stop
    the grant: issue 43)."""
    agents = ctx.store.agents
    record = agents.records.get(person)
    return agents.human_grant is not None and (record is None or not record.tenures)


async def questions(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Questions, newest first, with their state: to a person (``to``: human:NAME takes those to
    human:* too), of a ``status`` (open, answered, expired; default any), at most ``limit``."""
    to = args.get("to")
    if to is not None:
        to = check_addressee(to)
    status = args.get("status")
    if status not in (None, "open", "answered", "expired"):
        raise ValidationError("status must be open, answered or expired", field="status")
    limit = args.get("limit", 50)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_QUESTIONS:
        raise ValidationError(f"limit must be 1 to {MAX_QUESTIONS}", field="limit")
    filters: dict[str, Any] = {"types": [ASK], "order": "desc", "limit": MAX_QUESTIONS if status else limit}
    if to is not None:
        filters["to_agents"] = sorted({to, "human:*"})
    asked = await ctx.store.list_events(ListQuery.from_wire(filters))
    out = []
    machines = machine_labels(ctx)
    for state in await settled(ctx, asked):
        if status is None or state.status == status:
            out.append({**state.to_wire(), "machine": machines.get(state.question.get("origin"))})
        if len(out) >= limit:
            break
    return {"questions": out, "count": len(out)}


async def _task_facts(ctx: Context, cid: Any, now: str) -> tuple[str | None, str | None]:
    """(the project of the task ``cid`` names — its request's stream ``project/NAME`` —, its
    claimant now), each None when not known here."""
    if not isinstance(cid, str) or not cid:
        return None, None
    daemons = ctx.store.agents.origin_daemons
    events = ctx.store.agents.annotate(await ctx.store.events_by_correlation(cid))
    view = derive_task(cid, events, now=now, daemon_of=lambda origin: daemons.get(origin) or origin)
    if view is None:
        return None, None
    stream = view["request"].get("stream")
    project = stream.removeprefix("project/") if isinstance(stream, str) and stream.startswith("project/") else None
    return project, view.get("claimed_by")


async def in_force(ctx: Context, now: str) -> list[Grant]:
    """The grants in force here at ``now`` (``palace_proto.question_grants``): from the newest answers that
    carry one (a week's, at most MAX_GRANTS_READ), settled with their questions, less those a
    person revoked."""
    reads = ctx.store.reads(QuestionReads)
    answers = await reads.grant_answers(add_seconds(now, -MAX_GRANT_S), MAX_GRANTS_READ)
    if not answers:
        return []
    asked = []
    for question_id in dict.fromkeys(a.get("ack_of") for a in answers):
        event = await ctx.store.get_event(question_id) if isinstance(question_id, str) else None
        if event is not None and event.get("type") == ASK:
            asked.append(event)
    states = await settled(ctx, asked)
    projects = {cid: (await _task_facts(ctx, cid, now))[0]
                for cid in dict.fromkeys(q.get("correlation_id") for q in asked)}
    revokes = ctx.store.agents.annotate(
        await reads.revocations([str(a["id"]) for a in answers], MAX_ANSWERS_PER_ORIGIN))
    return grants_in_force([(state, projects.get(state.question.get("correlation_id"))) for state in states],
                           revokes, lambda e: proven_person(ctx, e), now)


async def _granted(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any] | None:
    """The reply to an approval a grant in force covers (no question is written), else None."""
    approval = args.get("approval")
    if not isinstance(approval, Mapping) or approval.get("shape") is None:
        return None
    shape = check_shape(approval.get("shape"))
    checked = check_approval(approval)  # a malformed request is refused as it would be when asked
    assert checked is not None
    now = utc_now()
    agent = clean_required("from_agent", args.get("from_agent"))
    task = args.get("correlation_id") if isinstance(args.get("correlation_id"), str) else None
    project, claimant = await _task_facts(ctx, task, now)
    if claimant is None or claimant != agent:
        return None  # only a task's claimant asks for approval on it (question.approval): asked, and judged so
    for grant in await in_force(ctx, now):
        if grant.covers(shape, agent=agent, task=task, project=project, now=now):
            return {"question_id": None, "status": "granted", "timed_out": False, "asked_by": agent,
                    "correlation_id": task, "grant": grant.to_wire(),
                    "approval": {"shape": shape, "input_sha256": checked["input_sha256"]},
                    "answer": {"by": grant.by, "text": "allow", "event_id": grant.answer_id}}
    return None


async def grants(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """The grants in force here now, newest first."""
    found = await in_force(ctx, utc_now())
    return {"grants": [g.to_wire() for g in found], "count": len(found)}


async def revoke_grant(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """End a grant: a ``question.revoke`` of the answer that gave it, written as a person this
    daemon holds whom its question asked (``as``; by default the one it holds)."""
    ctx.require_writer()
    answer_id = clean_required("answer_id", args.get("answer_id"))
    now = utc_now()
    grant = next((g for g in await in_force(ctx, now) if g.answer_id == answer_id), None)
    if grant is None:
        raise ApiError(f"no grant in force was given by answer {answer_id} (`palacectl grant list` shows them)",
                       code="not_found")
    question = await _question(ctx, grant.question_id)
    held = held_people(ctx)
    person = clean_optional("as", args.get("as"))
    to = question.get("to_agent")
    if person is None:
        fits = [p for p in held if to in (ANYONE, p)]
        if len(fits) != 1:
            raise ValidationError("say who revokes: --as human:NAME" +
                                  (f" (this daemon holds {', '.join(held)})" if held else
                                   " (this daemon holds no person's id)"), field="as")
        person = fits[0]
    if not is_human(person) or person not in held:
        raise ApiError(f"{person} is not a person this daemon holds, so the revocation would not count; revoke from "
                       "the daemon holding a person the question asked", code="forbidden")
    if to not in (ANYONE, person):
        raise ApiError(f"the grant answered a question to {to}: only {to} revokes it", code="forbidden")
    req = AppendRequest.from_wire({**reply_to(await ctx.event_or_404(answer_id)), "type": REVOKE,
                                   "from_agent": person, "body": f"{person} revokes the grant of {answer_id}"},
                                  ctx.limits)
    written = await ctx.store.write(lambda w: append_event(w, req))
    return {"revoked": grant.to_wire(), "event": written}


OPS: Final = {"ask": ask, "answer": answer, "questions": questions, "grants": grants, "revoke_grant": revoke_grant}


# -- the feature's declaration --------------------------------------------------------------------

def _inbox_also(agent: str) -> tuple[str, ...]:
    """A person's inbox holds the questions to anyone (human:*) too: any person may answer them."""
    return (ANYONE,) if is_human(agent) else ()


def _question_title(event: PublicEvent) -> str:
    to = " to anyone" if event.get("to_agent") == ANYONE else ""
    if is_approval(event):
        metadata = event.get("metadata") or {}
        machine = metadata.get("asked_on") if isinstance(metadata.get("asked_on"), str) else None
        task = event.get("correlation_id")
        return (f"Approval{to} for {event.get('from_agent')}" + (f" on {preview(machine, 40)}" if machine else "")
                + (f" (task {preview(str(task), 60)})" if task else ""))
    return f"Question{to} from {event.get('from_agent')}"


def _choices_hint(event: PublicEvent) -> str:
    metadata = event.get("metadata")
    choices = metadata.get("choices") if isinstance(metadata, Mapping) else None
    offered = (" " + "|".join(preview(c, 40) for c in choices[:12])) if isinstance(choices, list) and choices else ""
    # A question to anyone: the answer must say which person gives it (issue 47 §1.2).
    who = " --as human:NAME" if event.get("to_agent") == ANYONE else ""
    return f"palacectl answer {event.get('id')}{offered or ' TEXT'}{who}"


#: a question to a person is only ever told to them (or to every person, for ``human:*``)
TRIGGERS: Final = (Trigger("question", lambda e: e.get("type") == ASK, _question_title, _choices_hint,
                           addressed_only=True),)

FEATURE: Final = Feature(name="questions", ops=OPS, builds_on=("tasks", "fleet"), inbox_also=_inbox_also,
                         store=store_questions.PART,
                         triggers=TRIGGERS)
