"""What each dashboard page shows, gathered from the local daemon's operations.

Owns: one method per page or panel (``now``, ``events``, ``event``, ``tasks``, ``task``,
``artifact``, ``fleet``, ``leases``, ``usage``, ``search``, ``drawer``, ``entity``, ``diary``,
``rooms``, ``room``), the two writes
(``send_message``, a person's message; ``answer_question``, a person's answer), and how their query parameters become daemon arguments.
Every read is a bounded daemon operation — a page of ``list`` through its cursors, the newest 500
tasks and the older unfinished ones, one agent's last event by its index — so a page costs the
same on a palace of a million events as on a new one; nothing here loads the whole log.

What the dashboard adds of its own: it verifies an event's signature itself (the signed event and
its origin's key come from ``export_page``; ``palace_proto.export`` checks them), and an
artifact's sha256 over the bytes it received, so "verified" on the page is the dashboard's word,
not only the daemon's.

Error handling: the daemon's refusals (``ApiError``) become 400/404 with its message; a daemon
that is down is a 503 naming how to start it (``app`` maps both).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import trio

from palace_proto.identity import check_agent_id, is_human
from palace_proto.errors import ApiError, ValidationError
from palace_proto.export import ExportError, verify_export_event
from palace_proto.filters import filter_args
from palace_proto.paths import CONFIG_FILENAME
from palace_proto.questions import ANSWER as QUESTION_ANSWER
from palace_proto.questions import ASK as QUESTION_ASK
from palace_proto.rooms import check_room_id
from palace_proto.usage import BY_FIELDS as USAGE_BY
from palace_proto.usage import STATES as BUDGET_STATES
from palace_proto.usage import parse_budgets

from ..aclient import AsyncDaemon
from ..files import ConfigUnreadable, read_config
from .http import HttpError, Request
from .sse import FILTER_PARAMS

__all__ = ["BOARD_COLUMNS", "MESSAGE_TYPE", "Views"]

#: The task board's columns, in order, and the task states each shows (palace_proto.tasks).
BOARD_COLUMNS: Final = (
    ("open", ("open",)), ("claimed", ("claimed",)), ("stalled", ("stalled",)), ("delivered", ("ready",)),
    ("applied", ("applied",)), ("failed", ("failed",)), ("blocked", ("blocked", "superseded")),
)
#: A person's message from the dashboard: its type, stream and room.
MESSAGE_TYPE: Final = "human.message"
MESSAGE_STREAM: Final = "human"
MESSAGE_ROOM: Final = "messages"
#: Why 16 KiB: a message to an agent is read into its context window; a longer text is a drawer
#: or an artifact.
MAX_MESSAGE_BYTES: Final = 16 * 1024
#: Why 100: the agents shown on "Now" with their last event (one indexed lookup each).
MAX_AGENTS_SHOWN: Final = 100
#: Why 8: concurrent daemon calls for one page (the daemon serves each on its own connection).
PAGE_CONCURRENCY: Final = 8
#: Why 200: a page of the timeline; the next one is fetched through the daemon's cursor.
MAX_PAGE: Final = 200
#: Why 4 MiB: above this an artifact is offered for download, not shown in the page.
MAX_SHOWN_ARTIFACT_BYTES: Final = 4 * 1024 * 1024
#: Why 50: the events addressed to people that "Now" looks at (newest first).
WAITING_LOOKBACK: Final = 50
#: Why 500: a person's own recent events that may answer them.
ANSWERS_LOOKBACK: Final = 500
#: Why 100: the rooms the Rooms page lists (the newest; the daemon's listing takes up to 200).
MAX_ROOMS_SHOWN: Final = 100
#: Why 200: the turns of a room one fetch shows; the next page comes through ``offset``.
MAX_ROOM_PAGE: Final = 200
#: The Usage page's windows: ``since`` -> how many UTC days back, today included (None: every run).
USAGE_SINCE: Final = {"today": 1, "7d": 7, "30d": 30, "all": None}
_EVENT_ID_RE: Final = re.compile(r"^evt_[0-9A-Za-z_]{1,80}$")
_ARTIFACT_ID_RE: Final = re.compile(r"^(art_[0-9a-f]{32}|[0-9a-f]{64})$")


async def gather(calls: Iterable[Callable[[], Awaitable[Any]]], *, limit: int = PAGE_CONCURRENCY) -> list[Any]:
    """Run ``calls`` concurrently (at most ``limit`` at once); their results in order. The first
    failure cancels the rest and propagates (a page is shown whole or not at all)."""
    jobs = list(calls)
    results: list[Any] = [None] * len(jobs)
    limiter = trio.CapacityLimiter(limit)

    async def one(index: int, job: Callable[[], Awaitable[Any]]) -> None:
        async with limiter:
            results[index] = await job()

    try:
        async with trio.open_nursery() as nursery:
            for index, job in enumerate(jobs):
                nursery.start_soon(one, index, job)
    except BaseExceptionGroup as group:
        # Strict groups: hand the first real failure to the caller (an ApiError, an unreachable daemon).
        first = group.exceptions[0]
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
    return results


async def _nothing() -> None:
    return None


def _daemons_by_origin(fleet: Mapping[str, Any] | None) -> dict[str | None, dict[str, Any]]:
    """origin -> {peer_id, name} of the daemon it belongs to, from the daemon's ``fleet`` map."""
    return {o.get("origin"): {"peer_id": o.get("peer_id"), "name": o.get("name")}
            for o in (fleet or {}).get("origins", [])}


def _event_id(value: str | None, field: str = "event id") -> str:
    if not value or not _EVENT_ID_RE.match(value):
        raise HttpError(400, f"{field} {value!r} is not an event id (evt_…)")
    return value


def _positive(request: Request, name: str, default: int, maximum: int) -> int:
    text = request.one(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or not 1 <= int(text) <= maximum:
        raise HttpError(400, f"{name} must be a whole number from 1 to {maximum}")
    return int(text)


def _title(task: Mapping[str, Any]) -> str:
    """A task's goal, from its request's body (``Goal:\\n<goal>\\n\\n…``)."""
    body = (task.get("request") or {}).get("body") or ""
    if body.startswith("Goal:\n"):
        return body[len("Goal:\n"):].split("\n\n", 1)[0].strip()[:200]
    return task.get("correlation_id", "")


def _percent(spent: Any, limit: Any) -> int | None:
    """How much of a budget is spent, in whole percent (None if the daemon's figures are not numbers)."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (spent, limit))
    if not numbers or limit <= 0:
        return None
    return int(spent * 100 / limit + 1e-9)  # floored: 100 % only once a budget is over


def _overall(totals: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The sum of ``totals``: a cost only when some run reported one (unknown is None, never 0),
    summed in whole micro-dollars as the daemon does."""
    priced = [t["cost_usd"] for t in totals if isinstance(t.get("cost_usd"), (int, float))]
    return {"runs": sum(t.get("runs", 0) for t in totals), "tokens_in": sum(t.get("tokens_in", 0) for t in totals),
            "tokens_out": sum(t.get("tokens_out", 0) for t in totals),
            "cost_usd": sum(round(c * 1_000_000) for c in priced) / 1_000_000 if priced else None,
            "unpriced_runs": sum(t.get("unpriced_runs", 0) for t in totals)}


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
        "stream": request.get("stream"), "branch": request.get("branch"), "base_commit": request.get("base_commit"),
        "impersonations": task.get("impersonations", 0),
    }


class Views:
    """The pages of one dashboard run, over one daemon."""

    def __init__(self, daemon: AsyncDaemon, *, human: str) -> None:
        self.daemon = daemon
        self.human = human
        #: origin -> its daemon, as the daemon's ``fleet`` map last said (``daemon_of``)
        self._origins: dict[str | None, dict[str, Any]] = {}

    def __repr__(self) -> str:
        return f"<Views {self.daemon.path} as {self.human}>"

    async def call(self, op: str, **args: Any) -> Any:
        return await self.daemon.call(op, **{k: v for k, v in args.items() if v is not None})

    async def optional(self, op: str, **args: Any) -> Any:
        """An operation an older daemon may not have (None then)."""
        try:
            return await self.call(op, **args)
        except ApiError as exc:
            if exc.code == "unknown_op":
                return None
            raise

    # -- who is this dashboard -----------------------------------------------------------------

    async def session(self) -> dict[str, Any]:
        status = await self.call("status")
        palace = status.get("palace") or {}
        role = palace.get("role")
        return {
            "human": self.human, "can_write": role != "observer",
            "daemon": {"name": palace.get("name"), "peer_id": palace.get("peer_id"), "role": role,
                       "palace_name": palace.get("palace_name"), "origin": status.get("origin"),
                       "version": status.get("version"), "home": status.get("home")},
        }

    # -- Now -----------------------------------------------------------------------------------

    async def now(self) -> dict[str, Any]:
        status, agents, who, listing, leases = await gather([
            lambda: self.call("status"), lambda: self.call("agents"), lambda: self.call("who"),
            lambda: self.call("task_list"), lambda: self.call("lease_list", all=True),
        ])
        tasks = [task_card(t) for t in listing.get("tasks", [])]
        roster = sorted(agents.get("agents", []), key=lambda a: a.get("last_activity") or "", reverse=True)
        shown = roster[:MAX_AGENTS_SHOWN]
        last_events = await gather([
            (lambda name=a["agent"]: self.call("list", **filter_args(from_agent=name), order="desc", limit=1,
                                               preview=True))
            for a in shown
        ])
        workers: dict[str, list[dict[str, Any]]] = {}
        for watcher in who.get("watchers", []):
            if watcher.get("worker") and watcher.get("agent"):
                workers.setdefault(watcher["agent"], []).append(
                    {**watcher["worker"], "daemon": (watcher.get("daemon") or {}).get("name")})
        rows = []
        for agent, page in zip(shown, last_events):
            name = agent["agent"]
            events = page.get("events", [])
            rows.append({
                "agent": name, "kind": agent.get("kind"), "daemon_name": agent.get("daemon_name"),
                "here": agent.get("here"), "watching": agent.get("watching"), "watching_on": agent.get("watching_on"),
                "stale": agent.get("stale"), "last_activity": agent.get("last_activity"),
                "impersonations": agent.get("impersonations", 0),
                "last_event": events[0] if events else None,
                "claimed": [t for t in tasks if t["claimed_by"] == name and t["state"] in ("claimed", "stalled")],
                "workers": workers.get(name, []),
            })
        # People: those the palace knows (they wrote, or were registered), and whoever runs this
        # dashboard, who may be written to before ever writing.
        humans = list(dict.fromkeys([self.human, *(a["agent"] for a in roster
                                                   if a.get("kind") == "human" or is_human(a["agent"]))]))
        today = time.strftime("%Y-%m-%d", time.gmtime())
        waiting, questions, spent = await gather([
            lambda: self._waiting_on_humans(humans),
            lambda: self.call("questions", to=self.human, status="open", limit=50),
            lambda: self.optional("usage", by="agent", since=today)])
        conflicts = self._conflicts(tasks, leases.get("leases", []), agents.get("agents", []), status)
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
            # What runs cost today, by agent (their usage reports: docs/usage.md).
            "usage_today": (spent or {}).get("totals", []),
            "watching": who.get("count", 0),
        }

    async def _waiting_on_humans(self, humans: list[str]) -> list[dict[str, Any]]:
        """Events addressed to a person (not broadcasts) that no event of a person answers yet:
        an ack of it, a message replying to it, or a later word on its correlation id."""
        if not humans:
            return []
        humans = humans[:64]  # the daemon's filter takes a list; 64 people is a large company
        to_them, from_them = await gather([
            lambda: self.call("list", **filter_args(to_agent=humans), order="desc", limit=WAITING_LOOKBACK,
                              preview=True),
            lambda: self.call("list", **filter_args(from_agent=humans), order="desc", limit=ANSWERS_LOOKBACK,
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

    @staticmethod
    def _conflicts(tasks: list[dict[str, Any]], leases: list[Mapping[str, Any]], agents: list[Mapping[str, Any]],
                   status: Mapping[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for task in tasks:
            for conflict in task["conflicts"]:
                if not task["state"] in ("applied", "superseded"):
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

    # -- Timeline ------------------------------------------------------------------------------

    async def events(self, request: Request) -> dict[str, Any]:
        """A page of the log, newest first, with the CLI's filters; ``before`` pages back."""
        args: dict[str, Any] = {"order": "desc", "preview": True, "limit": _positive(request, "limit", 50, MAX_PAGE)}
        # The same names as the event stream's; a blank one is left out.
        args.update(filter_args(**{name: (request.one(name) or "").strip() for name in FILTER_PARAMS}))
        text = (request.one("text") or "").strip()
        if text:
            args["text"] = text
        before = request.one("before")
        if before:
            args["before_event_id"] = _event_id(before, "before")
        page = await self.call("list", **args)
        events = page.get("events", [])
        return {"events": events, "count": len(events),
                "next_before": events[-1]["id"] if len(events) == args["limit"] and not text else None}

    async def event(self, event_id: str) -> dict[str, Any]:
        """One event whole, with its proof (checked here), the daemon that wrote it and the thread
        it belongs to."""
        event = await self.call("get_event", event_id=_event_id(event_id))
        cid = event.get("correlation_id")
        proof, daemon, thread = await gather([
            lambda: self.proof(event), lambda: self.daemon_of(event.get("origin")),
            lambda: self.call("list", **filter_args(correlation_id=cid), limit=100, preview=True) if cid else _nothing(),
        ])
        proof["daemon"] = daemon
        return {"event": event, "proof": proof, "thread": (thread or {}).get("events", [])}

    async def daemon_of(self, origin: str | None) -> dict[str, Any] | None:
        """The daemon an origin belongs to, from the daemon's ``fleet`` map: asked again only for an
        origin not seen before (a binding never changes its daemon; new ones come with members)."""
        if origin not in self._origins:
            self._origins = _daemons_by_origin(await self.optional("fleet"))
        return self._origins.get(origin)

    async def proof(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """The event's signature, hash chain link and body hash, verified by the dashboard."""
        seq = event.get("seq")
        if type(seq) is not int or seq < 1:
            return {"verified": False, "reason": "the daemon gave no local seq for this event"}
        page = await self.call("export_page", after_seq=seq - 1, limit=1)
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

    # -- Rooms ---------------------------------------------------------------------------------

    async def rooms(self, request: Request) -> dict[str, Any]:
        """Rooms, newest first, open and closed (or one ``status``; one ``project``'s)."""
        status = request.one("status")
        listing = await self.optional("room_list", project=(request.one("project") or "").strip() or None,
                                      status=status if status in ("open", "closed") else None, limit=MAX_ROOMS_SHOWN)
        if listing is None:  # a daemon from before rooms
            return {"rooms": [], "count": 0, "supported": False}
        return {"rooms": listing.get("rooms", []), "count": listing.get("count", 0), "supported": True}

    async def room(self, room_id: str, request: Request) -> dict[str, Any]:
        """One room: its state and a page of its events in the order every replica agrees on (from
        ``offset``), each marked as a turn of the transcript or not; nobody's read position moves."""
        raw = request.one("offset") or "0"
        if not raw.isdigit() or len(raw) > 9:
            raise HttpError(400, "offset must be a whole number")
        return await self.call("room_show", room_id=check_room_id(room_id), offset=int(raw), limit=MAX_ROOM_PAGE)

    # -- Tasks ---------------------------------------------------------------------------------

    async def tasks(self) -> dict[str, Any]:
        listing = await self.call("task_list")
        cards = [task_card(t) for t in listing.get("tasks", [])]
        columns = [{"name": name, "tasks": [c for c in cards if c["column"] == name]} for name, _ in BOARD_COLUMNS]
        return {"columns": columns, "count": len(cards), "newest": listing.get("newest"),
                "capped": bool(listing.get("capped"))}

    async def task(self, correlation_id: str) -> dict[str, Any]:
        show, listing = await gather([
            lambda: self.call("task_show", correlation_id=correlation_id), lambda: self.call("task_list"),
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

    async def artifact(self, artifact_id: str) -> tuple[dict[str, Any], bytes]:
        """An artifact's record and bytes, its sha256 checked here over what arrived."""
        if not _ARTIFACT_ID_RE.match(artifact_id or ""):
            raise HttpError(400, f"{artifact_id!r} is not an artifact id (art_… or a sha256)")
        record = await self.call("artifact_get", artifact_id=artifact_id)
        content = record.pop("content", b"") or b""
        if isinstance(content, str):
            content = content.encode("utf-8")
        computed = hashlib.sha256(content).hexdigest()
        record["sha256_computed"] = computed
        record["sha256_verified"] = computed == record.get("sha256")
        return record, content

    async def artifact_view(self, artifact_id: str) -> dict[str, Any]:
        record, content = await self.artifact(artifact_id)
        text = None
        if len(content) <= MAX_SHOWN_ARTIFACT_BYTES:
            try:
                text = content.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        return {**record, "text": text, "shown": text is not None}

    # -- Fleet ---------------------------------------------------------------------------------

    async def fleet(self) -> dict[str, Any]:
        status, peers, who, fleet = await gather([
            lambda: self.call("status"), lambda: self.call("peers"), lambda: self.call("who"),
            lambda: self.optional("fleet"),
        ])
        palace = status.get("palace") or {}
        me = palace.get("peer_id")
        nodes: dict[str, dict[str, Any]] = {}
        if me:
            nodes[me] = {"peer_id": me, "name": palace.get("name"), "role": palace.get("role"), "self": True,
                         "state": "self", "health": status.get("health"), "events": status.get("events"),
                         "version": status.get("version"), "revoked": False}
        edges: dict[tuple[str, str], dict[str, Any]] = {}

        def edge(a: str, b: str, info: Mapping[str, Any], seen_by: str) -> None:
            key = (min(a, b), max(a, b))
            known = edges.get(key)
            if known is None or (info.get("state") == "live" and known.get("state") != "live"):
                edges[key] = {"a": key[0], "b": key[1], "state": info.get("state"), "seen_by": seen_by,
                              "we_lack": info.get("we_lack"), "they_lack": info.get("they_lack"),
                              "last_contact": info.get("last_contact")}

        for peer in peers.get("peers", []):
            peer_id = peer.get("peer_id")
            if not peer_id:
                continue
            nodes.setdefault(peer_id, {"peer_id": peer_id, "name": peer.get("name"), "role": peer.get("role"),
                                       "self": False, "revoked": bool(peer.get("revoked"))})
            nodes[peer_id].update({"state": peer.get("state"), "last_contact": peer.get("last_contact"),
                                   "we_lack": peer.get("we_lack"), "they_lack": peer.get("they_lack"),
                                   "forks": peer.get("forks"), "last_error": peer.get("last_error")})
            if me and peer.get("state") not in ("discovered", None):
                edge(me, peer_id, peer, "self")
        for daemon in (fleet or {}).get("daemons", []):
            peer_id = daemon.get("peer_id")
            report = daemon.get("report") or {}
            if not peer_id:
                continue
            node = nodes.setdefault(peer_id, {"peer_id": peer_id, "name": daemon.get("name"), "self": False,
                                              "state": "known", "revoked": False})
            node.update({"health": report.get("health"), "events": report.get("events"),
                         "version": report.get("version"), "role": node.get("role") or report.get("role"),
                         "heard_at": daemon.get("heard_at"), "silent": daemon.get("silent")})
            for link in report.get("links") or []:
                other = link.get("peer_id")
                if other and link.get("state") not in ("discovered", None):
                    nodes.setdefault(other, {"peer_id": other, "name": None, "self": False, "state": "known",
                                             "revoked": False})
                    edge(peer_id, other, link, peer_id)
        for revoked in (fleet or {}).get("revoked", []):
            if revoked.get("peer_id") in nodes:
                nodes[revoked["peer_id"]]["revoked"] = True
        daemon_of = _daemons_by_origin(fleet)
        forks = [{**fork, "daemon": (daemon_of.get(fork.get("origin")) or {}).get("name")}
                 for fork in peers.get("forks", [])]
        return {
            "self": me, "nodes": list(nodes.values()), "edges": list(edges.values()),
            "forks": forks, "watchers": who.get("watchers", []),
            "network": status.get("network"), "reports": fleet is not None,
        }

    # -- Leases --------------------------------------------------------------------------------

    async def leases(self) -> dict[str, Any]:
        listing = await self.call("lease_list", all=True)
        leases = listing.get("leases", [])
        return {"active": [l for l in leases if l.get("state") == "active"],
                "conflicts": [l for l in leases if l.get("state") in ("lost", "forced")],
                "ended": [l for l in leases if l.get("state") not in ("active", "lost", "forced")][:100],
                "now": listing.get("now")}

    # -- Usage ---------------------------------------------------------------------------------

    async def usage(self, request: Request) -> dict[str, Any]:
        """What runs cost (docs/usage.md): the totals of the usage reports ``by`` task, agent,
        machine, day or model ``since`` today, 7 or 30 UTC days ago (today included) or ever; this
        machine's ``[budgets]`` judged by the daemon, the most severe first (or why they cannot be:
        ``budgets_error``, one line; ``budgets`` None when there are none); how many reports held
        count nowhere (``flagged``: not their task's claimant's); and the workers a budget holds
        (``who``: a worker over its budget claims nothing and says why)."""
        by = request.one("by") or "task"
        if by not in USAGE_BY:
            raise HttpError(400, f"by must be one of {', '.join(USAGE_BY)}")
        since = request.one("since") or "all"
        if since not in USAGE_SINCE:
            raise HttpError(400, f"since must be one of {', '.join(USAGE_SINCE)}")
        days = USAGE_SINCE[since]
        since_date = None if days is None else time.strftime("%Y-%m-%d", time.gmtime(time.time() - (days - 1) * 86400))
        # The config may change while the dashboard runs (a budget raised): read at every request, off the loop.
        budgets, problem = await trio.to_thread.run_sync(self._budgets_table)

        async def spent() -> Any:
            nonlocal problem
            try:
                return await self.optional("usage", by=by, since=since_date, budgets=budgets)
            except ApiError as exc:
                if budgets is None or exc.code != "invalid_argument":
                    raise
                # A daemon of another version may refuse what this palacectl accepts: the totals still show.
                problem = f"{self._config_path()}: {exc.message}"
                return await self.optional("usage", by=by, since=since_date)

        result, who = await gather([spent, lambda: self.call("who")])
        held = [{"agent": w.get("agent"), "daemon": (w.get("daemon") or {}).get("name"), "local": w.get("local"),
                 "runner": w["worker"].get("runner"), "held": w["worker"]["held"]}
                for w in who.get("watchers", []) if isinstance(w.get("worker"), dict) and w["worker"].get("held")]
        out: dict[str, Any] = {"by": by, "since": since, "since_date": since_date, "config": str(self._config_path()),
                               "budgets_error": problem, "held": held, "supported": result is not None}
        if result is None:  # a daemon from before usage reports
            return {**out, "totals": [], "overall": _overall([]), "reports": 0, "flagged": 0, "budgets": None}
        judged = None
        if budgets is not None and problem is None:
            severity = {state: rank for rank, state in enumerate(reversed(BUDGET_STATES))}
            judged = sorted(({**b, "percent": _percent(b.get("spent"), b.get("limit"))}
                             for b in result.get("budgets") or []), key=lambda b: severity.get(b.get("state"), 0))
        totals = result.get("totals", [])
        return {**out, "totals": totals, "overall": _overall(totals), "reports": result.get("reports", 0),
                "flagged": int(result.get("flagged") or 0), "budgets": judged}

    def _config_path(self) -> Path:
        return self.daemon.home / CONFIG_FILENAME

    def _budgets_table(self) -> tuple[Any, str | None]:
        """This machine's ``[budgets]`` table (None: there is none) and, when it cannot be used,
        why in one line (it is then not sent, and the totals still show)."""
        try:
            table = read_config(self.daemon.home).get("budgets")
        except ConfigUnreadable as exc:
            return None, " ".join(str(exc).split())
        if table is None:
            return None, None
        try:
            parse_budgets(table)  # palace_proto's own check, the one the daemon makes
        except ValidationError as exc:
            return None, f"{self._config_path()}: {exc.message}"
        return table, None

    # -- Memory --------------------------------------------------------------------------------

    async def search(self, request: Request) -> dict[str, Any]:
        query = (request.one("q") or "").strip()
        if not query:
            raise HttpError(400, "give a search query (q)")
        mode = request.one("mode") or "hybrid"
        if mode not in ("hybrid", "keyword", "vector"):
            raise HttpError(400, "mode must be hybrid, keyword or vector")
        return await self.call("search", query=query, mode=mode, limit=_positive(request, "limit", 20, 100),
                               wing=(request.one("wing") or "").strip() or None,
                               room=(request.one("room") or "").strip() or None)

    async def drawer(self, drawer_id: str) -> dict[str, Any]:
        return await self.call("drawer_get", drawer_id=drawer_id)

    async def entity(self, request: Request) -> dict[str, Any]:
        entity = (request.one("entity") or "").strip()
        if not entity:
            raise HttpError(400, "give an entity")
        return await self.call("kg_query", entity=entity, as_of=(request.one("as_of") or "").strip() or None,
                               direction="both")

    async def diary(self, request: Request) -> dict[str, Any]:
        agent = (request.one("agent") or "").strip()
        if not agent:
            agents = await self.call("agents")
            return {"agents": [{"agent": a["agent"], "entries": a.get("diary_entries", 0), "wing": a.get("wing")}
                               for a in agents.get("agents", [])]}
        return await self.call("diary_read", agent_name=agent, last_n=_positive(request, "last_n", 20, 100))

    # -- the writes: a person's message, a person's answer ---------------------------------------

    async def answer_question(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        """This dashboard's person answers a question (the daemon checks that it holds the person,
        that the question is theirs, open, and that the text is one of its choices)."""
        unknown = set(doc) - {"question_id", "text"}
        if unknown:
            raise HttpError(400, f"unknown field {sorted(unknown)[0]!r}; an answer has question_id, text")
        question_id, text = doc.get("question_id"), doc.get("text")
        if not isinstance(question_id, str):
            raise HttpError(400, "question_id must be the question's event id")
        if not isinstance(text, str) or not text.strip():
            raise HttpError(400, "text must be the answer (one of the choices, or any text)")
        if len(text.encode("utf-8", "surrogatepass")) > MAX_MESSAGE_BYTES:
            raise HttpError(400, f"the answer is over {MAX_MESSAGE_BYTES} bytes")
        return await self.call("answer", event_id=_event_id(question_id, "question_id"), text=text,
                               **{"as": self.human})


    async def send_message(self, doc: Mapping[str, Any]) -> dict[str, Any]:
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
        event = await self.call(
            "append", type=MESSAGE_TYPE, stream=MESSAGE_STREAM, room=MESSAGE_ROOM, from_agent=self.human,
            to_agent=to_agent, body=body, correlation_id=(correlation_id or "").strip() or None,
            metadata=metadata)
        return {"event": event}
