"""The dashboard feature's pages: Now (what needs the person at the dashboard) and the Timeline
(the log, and one event with its proof), and the person's two writes (``page.js`` draws the pages).

Owns the routes ``GET /api/now`` (the person's overview: agents and what they do, what waits on a
person, questions to answer, stalled and stuck tasks, conflicts, the day's usage), ``GET
/api/events`` (a page of the log with the CLI's filters), ``GET /api/event/ID`` (one event whole
with its proof, checked here: the signed event and its origin's key from ``export_page``,
verified with ``palace_proto.export``), ``POST /api/message`` (the person's message to an agent
or to everyone, high importance) and ``POST /api/answer`` (the person's answer to a question)
(``palacectl.ui.views.Route``). Now reads what other features own — tasks (``task_card``),
leases, questions, usage, the agents' roster — and so builds on them.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Mapping
from typing import Any, Final

from palace_proto.errors import ValidationError
from palace_proto.export import ExportError, verify_export_event
from palace_proto.filters import filter_args
from palace_proto.identity import check_agent_id, is_human
from palace_proto.questions import ANSWER as QUESTION_ANSWER
from palace_proto.questions import ASK as QUESTION_ASK

from ...ui.http import HttpError, Request
from ...ui.sse import FILTER_PARAMS
from ...ui.views import Route, Views, gather, positive
from ..fleet.page import daemons_by_origin
from ..tasks.page import task_card

__all__ = ["MESSAGE_TYPE", "ROUTES", "answer_question", "event", "events", "now", "send_message"]

#: A person's message from the dashboard: its type, and where it goes (the type, stream and room).
MESSAGE_TYPE: Final = "human.message"
_MESSAGE: Final = {"type": MESSAGE_TYPE, "stream": "human", "room": "messages"}
#: Why 16 KiB: a message to an agent is read into its context window; a longer text is a drawer
#: or an artifact.
MAX_MESSAGE_BYTES: Final = 16 * 1024
#: Why 100: the agents shown on "Now" with their last event (one indexed lookup each).
MAX_AGENTS_SHOWN: Final = 100
#: Why 200: a page of the timeline; the next one is fetched through the daemon's cursor.
MAX_PAGE: Final = 200
#: Why 50: the events addressed to people that "Now" looks at (newest first).
WAITING_LOOKBACK: Final = 50
#: Why 500: a person's own recent events that may answer them.
ANSWERS_LOOKBACK: Final = 500
_EVENT_ID_RE: Final = re.compile(r"^evt_[0-9A-Za-z_]{1,80}$")


async def _nothing() -> None:
    return None


def _event_id(value: str | None, field: str = "event id") -> str:
    if not value or not _EVENT_ID_RE.match(value):
        raise HttpError(400, f"{field} {value!r} is not an event id (evt_…)")
    return value


# -- Now -------------------------------------------------------------------------------------------


async def now(views: Views, request: Request) -> dict[str, Any]:
    status, agents, who, listing, leases = await gather([
        lambda: views.call("status"), lambda: views.call("agents"), lambda: views.call("who"),
        lambda: views.call("task_list"), lambda: views.call("lease_list", all=True),
    ])
    tasks = [task_card(t) for t in listing.get("tasks", [])]
    roster = sorted(agents.get("agents", []), key=lambda a: a.get("last_activity") or "", reverse=True)
    shown = roster[:MAX_AGENTS_SHOWN]
    last_events = await gather([
        functools.partial(views.call, "list", **filter_args(from_agent=a["agent"]), order="desc", limit=1, preview=True)
        for a in shown
    ])
    workers: dict[str, list[dict[str, Any]]] = {}
    for watcher in who.get("watchers", []):
        if watcher.get("worker") and watcher.get("agent"):
            workers.setdefault(watcher["agent"], []).append(
                {**watcher["worker"], "daemon": (watcher.get("daemon") or {}).get("name")})
    rows = []
    for agent, page in zip(shown, last_events, strict=True):
        name = agent["agent"]
        events = page.get("events", [])
        rows.append({
            "agent": name, "kind": agent.get("kind"), "daemon_name": agent.get("daemon_name"),
            "daemon_label": agent.get("daemon_label") or agent.get("daemon_name"),
            "here": agent.get("here"), "watching": agent.get("watching"), "watching_on": agent.get("watching_on"),
            "stale": agent.get("stale"), "last_activity": agent.get("last_activity"),
            "impersonations": agent.get("impersonations", 0),
            "last_event": events[0] if events else None,
            "claimed": [t for t in tasks if t["claimed_by"] == name and t["state"] in ("claimed", "stalled")],
            "workers": workers.get(name, []),
        })
    # People: those the palace knows (they wrote, or were registered), and whoever runs this
    # dashboard, who may be written to before ever writing.
    humans = list(dict.fromkeys([views.human, *(a["agent"] for a in roster
                                               if a.get("kind") == "human" or is_human(a["agent"]))]))
    today = time.strftime("%Y-%m-%d", time.gmtime())
    waiting, questions, spent, grants = await gather([
        lambda: _waiting_on_humans(views, humans),
        lambda: views.call("questions", to=views.human, status="open", limit=50),
        lambda: views.optional("usage", by="agent", since=today),
        lambda: views.optional("grants")])
    conflicts = _conflicts(tasks, leases.get("leases", []), agents.get("agents", []), status)
    health = status.get("health") or {}
    return {
        "daemon": (status.get("palace") or {}).get("name"), "events": status.get("events"),
        "latest_event_id": status.get("latest_event_id"),
        "health": {"ok": health.get("ok"), "problems": health.get("problems", []), "notes": health.get("notes", [])},
        "peers": status.get("peers"),
        "agents": rows, "agents_total": len(roster),
        "stalled": [t for t in tasks if t["stalled"]],
        "stuck": [t for t in tasks if t["state"] in ("blocked", "failed")][:20],
        "open": [t for t in tasks if t["state"] == "open"][:20],
        "conflicts": conflicts,
        "waiting": waiting,
        # Questions to this dashboard's person (and to anyone): answered here with one click.
        "questions": questions.get("questions", []),
        # A person's allows widened past one call, in force now: each can be revoked here.
        "grants": (grants or {}).get("grants", []),
        # What runs cost today, by agent (their usage reports: docs/usage.md).
        "usage_today": (spent or {}).get("totals", []),
        "watching": who.get("count", 0),
    }


async def _waiting_on_humans(views: Views, humans: list[str]) -> list[dict[str, Any]]:
    """Events addressed to a person (not broadcasts) that no event of a person answers yet:
    an ack of it, a message replying to it, or a later word on its correlation id."""
    if not humans:
        return []
    humans = humans[:64]  # the daemon's filter takes a list; 64 people is a large company
    to_them, from_them = await gather([
        lambda: views.call("list", **filter_args(to_agent=humans), order="desc", limit=WAITING_LOOKBACK,
                           preview=True),
        lambda: views.call("list", **filter_args(from_agent=humans), order="desc", limit=ANSWERS_LOOKBACK,
                           preview=True),
    ])
    answered_ids: set[str] = set()
    answered_after: dict[str, int] = {}
    for event in from_them.get("events", []):
        if event.get("ack_of"):
            answered_ids.add(event["ack_of"])
        reply_to = (event.get("metadata") or {}).get("reply_to")
        if isinstance(reply_to, str):
            answered_ids.add(reply_to)
        if event.get("correlation_id"):
            answered_after[event["correlation_id"]] = max(answered_after.get(event["correlation_id"], 0),
                                                          event.get("seq", 0))
    waiting = []
    for event in to_them.get("events", []):
        if event.get("to_agent") == "*" or is_human(event.get("from_agent") or ""):
            continue
        if event.get("type") in (QUESTION_ASK, QUESTION_ANSWER):
            continue  # questions have their own list, settled by the daemon
        if event["id"] in answered_ids:
            continue
        cid = event.get("correlation_id")
        if cid and answered_after.get(cid, 0) > event.get("seq", 0):
            continue
        waiting.append(event)
    return waiting


def _conflicts(tasks: list[dict[str, Any]], leases: list[Mapping[str, Any]], agents: list[Mapping[str, Any]],
               status: Mapping[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for task in tasks:
        for conflict in task["conflicts"]:
            if task["state"] not in ("applied", "superseded"):
                out.append({"kind": "task", "correlation_id": task["correlation_id"], "title": task["title"],
                            "detail": conflict})
    for lease in leases:
        if lease.get("state") in ("lost", "forced"):
            out.append({"kind": "lease", "lease_id": lease.get("id"), "agent": lease.get("agent"),
                        "patterns": lease.get("patterns"), "state": lease.get("state"),
                        "ended_by_agent": lease.get("ended_by_agent"), "at": lease.get("ended_at")})
    for agent in agents:
        if agent.get("impersonations"):
            out.append({"kind": "impersonation", "agent": agent["agent"], "count": agent["impersonations"]})
        for contest in agent.get("contested") or []:
            out.append({"kind": "registration", "agent": agent["agent"], "detail": contest})
    forks = (status.get("network") or {}).get("forks") or 0
    if forks:
        out.append({"kind": "fork", "count": forks})
    return out[:100]


# -- Timeline --------------------------------------------------------------------------------------


async def events(views: Views, request: Request) -> dict[str, Any]:
    """A page of the log, newest first, with the CLI's filters; ``before`` pages back."""
    args: dict[str, Any] = {"order": "desc", "preview": True, "limit": positive(request, "limit", 50, MAX_PAGE)}
    # The same names as the event stream's; a blank one is left out.
    args.update(filter_args(**{name: (request.one(name) or "").strip() for name in FILTER_PARAMS}))
    text = (request.one("text") or "").strip()
    if text:
        args["text"] = text
    before = request.one("before")
    if before:
        args["before_event_id"] = _event_id(before, "before")
    page = await views.call("list", **args)
    events = page.get("events", [])
    return {"events": events, "count": len(events),
            "next_before": events[-1]["id"] if len(events) == args["limit"] and not text else None}


async def event(views: Views, request: Request, event_id: str) -> dict[str, Any]:
    """One event whole, with its proof (checked here), the daemon that wrote it and the thread
    it belongs to."""
    event = await views.call("get_event", event_id=_event_id(event_id))
    cid = event.get("correlation_id")
    proof, daemon, thread = await gather([
        lambda: _proof(views, event), lambda: _daemon_of(views, event.get("origin")),
        lambda: views.call("list", **filter_args(correlation_id=cid), limit=100, preview=True) if cid else _nothing(),
    ])
    proof["daemon"] = daemon
    return {"event": event, "proof": proof, "thread": (thread or {}).get("events", [])}


async def _daemon_of(views: Views, origin: str | None) -> dict[str, Any] | None:
    """The daemon an origin belongs to, from the daemon's ``fleet`` map: asked again only for an
    origin not seen before (a binding never changes its daemon; new ones come with members)."""
    origins = views.memo.get("origins", {})
    if origin not in origins:
        origins = views.memo["origins"] = daemons_by_origin(await views.optional("fleet"))
    return origins.get(origin)


async def _proof(views: Views, event: Mapping[str, Any]) -> dict[str, Any]:
    """The event's signature, hash chain link and body hash, verified by the dashboard."""
    seq = event.get("seq")
    if type(seq) is not int or seq < 1:
        return {"verified": False, "reason": "the daemon gave no local seq for this event"}
    page = await views.call("export_page", after_seq=seq - 1, limit=1)
    lines = page.get("events", [])
    if not lines or lines[0].get("id") != event.get("id"):
        return {"verified": False, "reason": "the daemon's export does not hold this event"}
    line = lines[0]
    try:
        keys = {origin: bytes.fromhex(key) for origin, key in (page.get("origins") or {}).items()}
        verify_export_event({k: v for k, v in line.items() if k != "seq"}, keys)
    except (ExportError, ValueError, TypeError) as exc:
        return {"verified": False, "reason": str(exc), "origin": line.get("origin")}
    key = (page.get("origins") or {}).get(line.get("origin"), "")
    return {
        "verified": True, "reason": None, "origin": line.get("origin"), "origin_seq": line.get("origin_seq"),
        "event_hash": line.get("event_hash"), "prev_hash": line.get("prev_hash"),
        "signature": line.get("signature"), "public_key": key,
        "body_checked": not event.get("body_redacted"),
    }


# -- the writes: a person's message, a person's answer -------------------------------------------


async def answer_question(views: Views, doc: Mapping[str, Any]) -> dict[str, Any]:
    """This dashboard's person answers a question (the daemon checks that it holds the person,
    that the question is theirs, open, and that the text is one of its choices)."""
    unknown = set(doc) - {"question_id", "text", "grant", "for_s"}
    if unknown:
        raise HttpError(400, f"unknown field {sorted(unknown)[0]!r}; an answer has question_id, text (and, to allow "
                             "more than this call, grant and for_s)")
    question_id, text = doc.get("question_id"), doc.get("text")
    if not isinstance(question_id, str):
        raise HttpError(400, "question_id must be the question's event id")
    if not isinstance(text, str) or not text.strip():
        raise HttpError(400, "text must be the answer (one of the choices, or any text)")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_MESSAGE_BYTES:
        raise HttpError(400, f"the answer is over {MAX_MESSAGE_BYTES} bytes")
    grant = {key: doc[key] for key in ("grant", "for_s") if doc.get(key) is not None}
    return await views.call("answer", event_id=_event_id(question_id, "question_id"), text=text,
                            **grant, **{"as": views.human})


async def revoke_grant(views: Views, doc: Mapping[str, Any]) -> dict[str, Any]:
    """This dashboard's person ends a grant (the daemon checks that it holds the person and that
    the grant's question asked them)."""
    unknown = set(doc) - {"answer_id"}
    if unknown:
        raise HttpError(400, f"unknown field {sorted(unknown)[0]!r}; a revocation has answer_id")
    answer_id = doc.get("answer_id")
    if not isinstance(answer_id, str):
        raise HttpError(400, "answer_id must be the grant's id (the answer that gave it)")
    return await views.call("revoke_grant", answer_id=_event_id(answer_id, "answer_id"), **{"as": views.human})


async def send_message(views: Views, doc: Mapping[str, Any]) -> dict[str, Any]:
    """A person's message to an agent or to everyone, with high importance (it wakes the
    addressees' watchers: ``watch --agent`` wakes on anything addressed to it or ``*``)."""
    unknown = set(doc) - {"to_agent", "body", "correlation_id", "reply_to"}
    if unknown:
        raise HttpError(400, f"unknown field {sorted(unknown)[0]!r}; a message has to_agent, body, "
                             "correlation_id, reply_to")
    to_agent, body = doc.get("to_agent"), doc.get("body")
    if not isinstance(to_agent, str) or not to_agent.strip():
        raise HttpError(400, "to_agent must name an agent, or * for everyone")
    to_agent = to_agent.strip()
    if to_agent != "*":
        try:
            check_agent_id(to_agent, field="to_agent")
        except ValidationError as exc:
            raise HttpError(400, exc.message) from None
    if not isinstance(body, str) or not body.strip():
        raise HttpError(400, "body must be the message's text")
    if len(body.encode("utf-8", "surrogatepass")) > MAX_MESSAGE_BYTES:
        raise HttpError(400, f"the message is over {MAX_MESSAGE_BYTES} bytes; file a drawer or an artifact instead")
    metadata: dict[str, Any] = {"importance": "high", "via": "palacectl ui"}
    reply_to = doc.get("reply_to")
    if reply_to is not None:
        if not isinstance(reply_to, str):
            raise HttpError(400, "reply_to must be an event id")
        metadata["reply_to"] = _event_id(reply_to, "reply_to")
    correlation_id = doc.get("correlation_id")
    if correlation_id is not None and not isinstance(correlation_id, str):
        raise HttpError(400, "correlation_id must be a string")
    event = await views.call(
        "append", **_MESSAGE, from_agent=views.human, to_agent=to_agent, body=body,
        correlation_id=(correlation_id or "").strip() or None, metadata=metadata)
    return {"event": event}


ROUTES: Final = (
    Route("GET", r"^/api/now$", now),
    Route("GET", r"^/api/events$", events),
    Route("GET", r"^/api/event/([^/]{1,120})$", event),
    Route("POST", r"^/api/message$", send_message, "write", "it sends no messages"),
    Route("POST", r"^/api/answer$", answer_question, "write", "it writes no answers"),
    Route("POST", r"^/api/grant/revoke$", revoke_grant, "write", "it revokes no grants"),
)
