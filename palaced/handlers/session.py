"""``session_start``: everything an agent needs when a session starts (or resumes after its
context was compacted), in one reply short enough to paste into its context window.

Owns: what the reply holds and how it is kept short — the agent's identity (which daemon holds
it), its unread inbox (a preview of the oldest first), every feature's part (``Feature.session``,
asked through ``ctx.features``: its open loops and stalled tasks, its active and lost leases, its
last diary entries, its open rooms, who is watching in the palace now) and the one line saying
what to do next (the features add their hints). Each list is capped, and says how many it left
out; text is cut to a preview (``capped``, ``cut``: the helpers the features' parts use too).

Must not import a feature (palaced/features): it asks ``ctx.features``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from palace_proto.event_fields import BRIEF_KEYS
from palace_proto.validation import clean_required

from ..clock import utc_now as _now
from .context import Context
from .inbox import inbox_view

__all__ = ["OPS", "capped", "cut", "session_start"]

# Why 10: the reply is read into an agent's context on every start and after every compaction;
# past this, the agent asks for more (`palacectl inbox`), and the reply says how many were left out.
INBOX_SHOWN: Final = 10
# Why 160 characters: enough for a task's goal or a message's first sentence.
TEXT_CHARS: Final = 160


def cut(text: str | None, chars: int = TEXT_CHARS) -> str:
    """``text`` on one line, cut to ``chars`` (with an ellipsis)."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= chars else flat[: chars - 1] + "…"


def capped(items: list[Any], shown: int) -> dict[str, Any]:
    """The first ``shown`` of ``items``, and how many more there are."""
    return {"items": items[:shown], "more": max(0, len(items) - shown)}


def next_step(agent: str, *, unread: int, elsewhere: str | None, hints: list[str]) -> str:
    """The one line of what to do now (``hints``: the features' steps, in their order)."""
    if elsewhere:
        return (f"{agent} belongs to {elsewhere}: this daemon refuses writes as it. Use your own id here, or "
                f"`palacectl agent transfer {agent} --to <this daemon's peer id>` there.")
    steps = [f"arm `palacectl watch --agent {agent}` in the background (re-arm on exit 0 or 2)"]
    if unread:
        steps.append(f"sweep the inbox (`palacectl inbox --agent {agent}`), then "
                     f"`palacectl inbox mark-read --agent {agent} --upto <last handled id>`")
    steps.extend(hints)
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
    inbox_events = [{**{key: e.get(key) for key in BRIEF_KEYS}, "body": cut(e.get("body")),
                     **({"impersonation": e["impersonation"]["reason"]} if e.get("impersonation") else {})}
                    for e in inbox["events"]]

    reply: dict[str, Any] = {
        "agent": agent,
        "now": now,
        "identity": identity,
        "inbox": {"items": inbox_events, "more": inbox["unread"] - len(inbox_events) if inbox["more"] else 0,
                  "unread": inbox["unread"], "unread_capped": inbox["unread_capped"], "cursor": inbox["cursor"]},
    }
    reply.update(await ctx.features.session(ctx, agent))
    reply["next"] = next_step(agent, unread=inbox["unread"], elsewhere=elsewhere,
                              hints=ctx.features.session_hints(agent, reply))
    return reply


OPS: Final = {"session_start": session_start}
