"""``session_start``: everything an agent needs when a session starts (or resumes after its
context was compacted), in one reply short enough to paste into its context window.

Owns: what the reply holds and how it is kept short — the agent's identity (which daemon holds
it), its unread inbox (a preview of the oldest first), its open loops (tasks it requested or
holds that are not closed, stalled ones marked), its active leases and the ones it lost, its last
diary entries, who is watching in the palace now, and the one line saying what to do next. Each
list is capped, and says how many it left out; text is cut to a preview.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from palace_proto.memory import diary_wing
from palace_proto.stamps import seconds_between
from palace_proto.validation import clean_required

from ..store import memory_views as views
from ..store.clock import utc_now as _now
from .context import Context
from .fleet import who
from .inbox import inbox_view
from .leases import current_leases
from .rooms import rooms_of
from .tasks import recent_views

__all__ = ["OPS", "session_start"]

# Why these caps: the reply is read into an agent's context on every start and after every
# compaction; past these, the agent asks for more (`palacectl inbox`, `task list`), and the
# reply says how many were left out.
INBOX_SHOWN: Final = 10
LOOPS_SHOWN: Final = 10
LEASES_SHOWN: Final = 10
DIARY_SHOWN: Final = 3
WATCHERS_SHOWN: Final = 20
# Why 160 characters: enough for a task's goal or a message's first sentence.
TEXT_CHARS: Final = 160
# Why a day: a lease lost longer ago than that is history, not something to act on.
LOST_LEASE_WINDOW_S: Final = 86400


def _cut(text: str | None, chars: int = TEXT_CHARS) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= chars else flat[: chars - 1] + "…"


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
                return _cut(" ".join(goal))
    return _cut(body)


def next_step(agent: str, *, unread: int, stalled: int, elsewhere: str | None) -> str:
    """The one line of what to do now."""
    if elsewhere:
        return (f"{agent} belongs to {elsewhere}: this daemon refuses writes as it. Use your own id here, or "
                f"`palacectl agent transfer {agent} --to <this daemon's peer id>` there.")
    steps = [f"arm `palacectl watch --agent {agent}` in the background (re-arm on exit 0 or 2)"]
    if unread:
        steps.append(f"sweep the inbox (`palacectl inbox --agent {agent}`), then "
                     f"`palacectl inbox mark-read --agent {agent} --upto <last handled id>`")
    if stalled:
        steps.append("answer the stalled tasks (reply, or release what you cannot finish)")
    steps.append(f"claim before you work (`palacectl task ready --agent {agent}`, `palacectl task claim`)")
    return "Next: " + "; ".join(steps) + "."


async def session_start(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    agent = clean_required("agent", args.get("agent"))
    now = _now()
    registry = ctx.store.agents
    record = registry.records.get(agent)
    current = record.current if record else None
    elsewhere = None
    if current is not None and current.daemon is not None and current.daemon != registry.daemon:
        elsewhere = registry.daemon_label(current.daemon)
    identity = {"agent": agent, "daemon": current.daemon if current else None,
                "here": current is not None and current.daemon == registry.daemon,
                "retired": bool(record and record.retired), "elsewhere": elsewhere,
                # False on a daemon in no palace yet: writes register nobody until init or join
                "registers": registry.enforcing}

    inbox = await inbox_view(ctx, agent, INBOX_SHOWN, True)
    inbox_events = [{"id": e["id"], "type": e["type"], "from_agent": e["from_agent"], "to_agent": e["to_agent"],
                     "correlation_id": e["correlation_id"], "status": e["status"], "created_at": e["created_at"],
                     "body": _cut(e.get("body")), **({"impersonation": e["impersonation"]["reason"]}
                                                    if e.get("impersonation") else {})}
                    for e in inbox["events"]]

    loops, stalled = [], []
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

    leases = await current_leases(ctx)
    mine = [lease for lease in leases if lease.holder == agent]
    active = [{"id": lease.id, "project": lease.stream.removeprefix("project/"), "patterns": list(lease.patterns),
               "mode": "exclusive" if lease.exclusive else "shared", "expires_at": lease.expires_at}
              for lease in mine if lease.state(now) == "active"]
    lost = [{"id": lease.id, "patterns": list(lease.patterns), "end": lease.end, "ended_at": lease.ended_at,
             "holder_now": lease.ended_by_agent}
            for lease in mine if lease.end in ("lost", "forced") and lease.ended_at
            and seconds_between(lease.ended_at, now) <= LOST_LEASE_WINDOW_S]

    diary = await ctx.astore.memory_read(views.diary_page, diary_wing(agent.lower()), DIARY_SHOWN)
    entries = [{"date": e["date"], "topic": e["topic"], "content": _cut(e["content"])} for e in diary["entries"]]

    watching = []
    for watcher in (await who(ctx, {}))["watchers"]:
        if not watcher.get("agent") or watcher.get("daemon_silent"):
            continue
        where = "here" if watcher.get("local") else ((watcher.get("daemon") or {}).get("name") or "a peer")
        entry = {"agent": watcher["agent"], "on": where, "worker": bool(watcher.get("worker"))}
        if entry not in watching:
            watching.append(entry)

    def capped(items: list[Any], shown: int) -> dict[str, Any]:
        return {"items": items[:shown], "more": max(0, len(items) - shown)}

    return {
        "agent": agent,
        "now": now,
        "identity": identity,
        "inbox": {"items": inbox_events, "more": inbox["unread"] - len(inbox_events) if inbox["more"] else 0,
                  "unread": inbox["unread"], "unread_capped": inbox["unread_capped"], "cursor": inbox["cursor"]},
        "open_loops": capped(loops, LOOPS_SHOWN),
        "stalled": capped(stalled, LOOPS_SHOWN),
        "leases": capped(active, LEASES_SHOWN),
        "lost_leases": capped(lost, LEASES_SHOWN),
        "diary": {"items": entries, "total": diary["total"]},
        "rooms": await rooms_of(ctx, agent),
        "watching": capped(watching, WATCHERS_SHOWN),
        "you_are_watching": any(w["agent"] == agent and w["on"] == "here" for w in watching),
        "next": next_step(agent, unread=inbox["unread"], stalled=len(stalled), elsewhere=elsewhere),
    }


OPS: Final = {"session_start": session_start}
