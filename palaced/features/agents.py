"""Operations on agent identities: register, transfer, retire, and the roster.

Owns: ``agent_register`` (an id taken for this daemon before its first write), ``agent_transfer``
(the holder hands an id to another member daemon, or the palace CA does, signed), ``agent_retire``
(the holder ends an id: its active leases and claims are released first, then the retirement is
written; its history stays), and ``agents`` (every agent the log knows: its daemon, last
activity, watching now or not, stale, impersonations, contested registrations). The registry
itself — who holds what, and the verdict on each event — is ``store/agents.py`` over
``palace_proto.identity``; ``ca_checker`` and ``daemon_label`` are what app.py gives it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any, Final

from palace_proto.agents import DEFAULT_STALE_AFTER_S, check_stale_after
from palace_proto.errors import ApiError, NotFound, ValidationError
from palace_proto.event_fields import PublicEvent
from palace_proto.identity import (
    AGENT_EVENT_ROOM,
    AGENT_EVENT_STREAM,
    REGISTER,
    RETIRE,
    SYSTEM_AGENT,
    TRANSFER,
    AgentRecord,
    ca_signature_of,
    ca_statement,
    check_agent_id,
    is_human,
    new_ca_nonce,
    order_key,
    registry_metadata,
)
from palace_proto.ids import fingerprint_is_valid
from palace_proto.memory import diary_wing
from palace_proto.pki import sign_ca_statement, verify_ca_statement
from palace_proto.stamps import seconds_between
from palace_proto.text import printable
from palace_proto.validation import AppendRequest, clean_optional

from ..clock import utc_now as _now
from ..config import Section
from ..feature import Feature
from ..handlers.context import Context
from ..membership import Membership
from ..store import WriteContext, append_system
from ..store import identity as store_identity
from ..store.memory_views import MemoryReads
from .fleet import daemon_label_map, who
from .leases import lease_release
from .tasks import recent_views, task_release

LOGGER: Final = logging.getLogger("palaced.features.agents")

__all__ = ["FEATURE", "OPS", "ca_checker", "daemon_label", "human_grant", "register_own_agents"]

# Why 10,000: the events of one agent the roster reads to count its impersonations (from the
# daemons that did not hold it all along); the count stops there, so a flood cannot make
# `agents` read the whole log.
MAX_SUSPECT_EVENTS: Final = 10_000


def ca_checker(membership: Membership) -> Callable[[Mapping[str, Any]], bool]:
    """Whether a registry event carries the palace CA's statement for exactly what it says."""
    ca_pem, palace_id = membership.ca_cert_pem, membership.palace_id

    def check(event: Mapping[str, Any]) -> bool:
        found = ca_signature_of(event)
        metadata = event.get("metadata")
        if found is None or not isinstance(metadata, Mapping):
            return False
        nonce, signature = found
        agent, to = metadata.get("agent"), metadata.get("to")
        if not isinstance(agent, str) or (to is not None and not isinstance(to, str)):
            return False
        return verify_ca_statement(ca_pem, ca_statement(palace_id, str(event.get("type")), agent, to, nonce), signature)

    return check


def human_grant(ctx: Context, membership: Membership) -> Callable[[str], dict[str, str]]:
    """The palace CA's statement that makes this daemon's registration of a person's id count
    (only the daemon holding the CA has it: issue 25, finding 8)."""

    def grant(agent: str) -> dict[str, str]:
        nonce = new_ca_nonce(os.urandom(32))
        statement = ca_statement(membership.palace_id, REGISTER, agent, None, nonce)
        return {"ca_nonce": nonce, "ca_signature": sign_ca_statement(ctx.ca_key(), statement)}

    return grant


def daemon_label(ctx: Context) -> Callable[[str], str]:
    """How messages name a daemon: "this daemon", or its name in the palace and its short id."""

    def label(peer_id: str) -> str:
        if peer_id == ctx.fingerprint:
            return "this daemon"
        name = _daemon_names(ctx).get(peer_id)
        return f"daemon {name} ({peer_id[:7]})" if name else f"daemon {peer_id[:7]}"

    return label


def _daemon_names(ctx: Context) -> dict[str, str]:
    names = ctx.network.views.peer_names() if ctx.network is not None else {}
    if ctx.membership is not None:
        names[ctx.fingerprint] = ctx.membership.name
    return names


def _daemon_named(given: object, names: Mapping[str, str]) -> str:
    """The peer id of the member daemon ``given`` names: its peer id, or its name where exactly one
    known daemon bears it (cloned machines share a hostname; a peer id is never ambiguous)."""
    if not isinstance(given, str) or not given.strip() or len(given) > 256:
        raise ValidationError("to must name a daemon of the palace: its name or peer id (`palacectl peers` lists "
                              "them)", field="to")
    given = given.strip()
    if fingerprint_is_valid(given) and given.upper() in names:
        return given.upper()
    bearing = sorted(peer_id for peer_id, name in names.items() if name == given)
    if len(bearing) == 1:
        return bearing[0]
    if bearing:
        raise ValidationError(f"{len(bearing)} daemons are named {printable(given, 64)!r} ({', '.join(bearing)}): "
                              "give the peer id of the one you mean", field="to")
    raise NotFound(f"no member daemon named {printable(given, 64)!r} is known here; `palacectl peers` lists the "
                   "palace's daemons (a name or a peer id)")


def _agent_arg(args: Mapping[str, Any]) -> str:
    return check_agent_id(args.get("agent"))


def _system_event(kind: str, agent: str, body: str, metadata: dict[str, Any], ctx: Context) -> AppendRequest:
    return AppendRequest.from_wire(
        {"type": kind, "stream": AGENT_EVENT_STREAM, "room": AGENT_EVENT_ROOM, "topic": agent,
         "from_agent": SYSTEM_AGENT, "body": body, "metadata": metadata}, ctx.limits)


def _record_wire(ctx: Context, record: AgentRecord | None, agent: str) -> dict[str, Any]:
    wire = record.to_wire() if record is not None else {"agent": agent, "daemon": None, "since": None,
                                                         "retired": False, "tenures": [], "void": []}
    daemon = wire["daemon"]
    wire["daemon_name"] = _daemon_names(ctx).get(daemon) if daemon else None
    wire["here"] = daemon == ctx.fingerprint
    return wire


async def register_own_agents(ctx: Context) -> list[str]:
    """This daemon belongs to a palace (founded, joined, or started as a member): from now on its
    writes register their agents, and the agents it wrote as before that nobody holds are
    registered to it now (once). Returns the agents it registered."""
    store = ctx.store
    store.agents.enforcing = True
    if ctx.membership is not None and ctx.membership.role == "observer":
        return []

    def job(w: WriteContext) -> list[str]:
        if store_identity.own_agents_registered(w):
            return []
        agents = store.agents.unregistered_own_agents(w)
        for agent in agents:
            append_system(w, _system_event(REGISTER, agent, f"{agent} is registered to this daemon (it wrote as "
                                          f"{agent} before belonging to a palace)",
                                          store.agents.register_metadata(agent), ctx))
        store_identity.note_own_agents_registered(w)
        return agents

    return await ctx.store.write(job, heavy=True)


async def agent_register(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Take an agent id for this daemon (what the first write as it does by itself)."""
    ctx.require_writer()
    agent = _agent_arg(args)
    store = ctx.store

    def job(w: WriteContext) -> PublicEvent | None:
        record = w.agents.record_of(w, agent)
        current = record.current if record else None
        if current is not None and current.daemon is not None:
            if current.daemon != store.agents.daemon:
                raise store.agents.elsewhere(agent, current.daemon)
            if agent in store.agents.registered_by(w, store.origin_id):
                return None
        body = f"{agent} is registered to this daemon" + (" again" if record and record.retired else "")
        return append_system(w, _system_event(REGISTER, agent, body, store.agents.register_metadata(agent), ctx))

    event = await ctx.store.write(job)
    record = ctx.store.agents.records.get(agent)
    return {"agent": _record_wire(ctx, record, agent), "registered": event is not None, "event": event}


async def agent_transfer(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Hand an agent id to another member daemon: by its holder, or by the palace CA's daemon."""
    ctx.require_writer()
    membership = ctx.require_member()
    agent = _agent_arg(args)
    names = _daemon_names(ctx)
    to = _daemon_named(args.get("to"), names)
    if ctx.directory is not None and ctx.directory.is_revoked(to):
        raise ValidationError(f"daemon {to} was revoked from the palace: it can hold no agent", field="to")
    store = ctx.store
    ca_key = ctx.ca_key() if membership.can_invite else None
    nonce = new_ca_nonce(os.urandom(32))

    def job(w: WriteContext) -> PublicEvent:
        record = w.agents.record_of(w, agent)
        current = record.current if record else None
        holder = current.daemon if current else None
        if holder == to:
            raise ValidationError(f"agent {agent} is held by {store.agents.daemon_label(to)} already", field="to")
        metadata = registry_metadata(TRANSFER, agent, store.agents.daemon, to_daemon=to)
        if holder != store.agents.daemon:
            if ca_key is None:
                where = (f"it belongs to {store.agents.daemon_label(holder)}" if holder else
                         "nobody holds it" + (" (it was retired)" if record and record.retired else ""))
                raise ApiError(f"agent {agent} is not this daemon's to give: {where}; transfer it on its daemon, or "
                               "on the daemon holding the palace CA", code="not_permitted")
            statement = ca_statement(membership.palace_id, TRANSFER, agent, to, nonce)
            metadata = registry_metadata(TRANSFER, agent, store.agents.daemon, to_daemon=to, ca_nonce=nonce,
                                         ca_signature=sign_ca_statement(ca_key, statement))
        return append_system(w, _system_event(
            TRANSFER, agent, f"{agent} moves to daemon {names.get(to) or to[:7]} ({to})", metadata, ctx))

    event = await ctx.store.write(job)
    return {"agent": _record_wire(ctx, ctx.store.agents.records.get(agent), agent), "event": event,
            "by_ca": "ca_signature" in event["metadata"]}


async def agent_retire(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """End an agent id held here: its leases and claims are released, then it is retired."""
    ctx.require_writer()
    agent = _agent_arg(args)
    reason = clean_optional("reason", args.get("reason"))
    store = ctx.store
    record = store.agents.records.get(agent)
    current = record.current if record else None
    if current is None or current.daemon is None:
        raise NotFound(f"agent {agent} is not registered" + (" (it is retired already)" if record else "")
                       + "; nothing to retire")
    if current.daemon != store.agents.daemon:
        raise ApiError(f"agent {agent} belongs to {store.agents.daemon_label(current.daemon)}: retire it there (or "
                       f"transfer it here first from the daemon holding the palace CA)", code="not_permitted")
    why = f"{agent} is retired" + (f": {reason}" if reason else "")
    released_leases = (await lease_release(ctx, {"all": True, "agent": agent}))["released"]
    released_tasks = []
    for view in await recent_views(ctx):
        if view["claimed_by"] == agent and not view["terminal"]:
            await task_release(ctx, {"correlation_id": view["correlation_id"], "agent": agent, "reason": why})
            released_tasks.append(view["correlation_id"])

    def job(w: WriteContext) -> PublicEvent:
        now = w.agents.record_of(w, agent)
        held = now.current if now else None
        if held is None or held.daemon != store.agents.daemon:
            raise ApiError(f"agent {agent} is no longer held here", code="not_permitted")
        return append_system(w, _system_event(RETIRE, agent, why, registry_metadata(RETIRE, agent, store.agents.daemon),
                                             ctx))

    event = await ctx.store.write(job)
    return {"agent": _record_wire(ctx, ctx.store.agents.records.get(agent), agent), "event": event,
            "released_leases": released_leases, "released_tasks": released_tasks}


def _held_throughout(record: AgentRecord, daemon: str | None, first: str, last: str) -> bool:
    """Whether ``daemon`` held the agent (or nobody had registered it yet) from ``first`` to
    ``last``: then none of its events in that span can be an impersonation."""
    start, end = order_key(first, ""), order_key(last, "\U0010ffff")
    in_force = record.holder_at(first, "")
    spans = ([in_force] if in_force is not None else []) + [t for t in record.tenures if start <= t.key <= end]
    return all(t.daemon == daemon for t in spans)


async def agents(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Every agent the palace knows: its daemon, activity, watchers, staleness, impersonations."""
    include_all = args.get("all", False)
    if not isinstance(include_all, bool):
        raise ValidationError("all must be true or false", field="all")
    only = clean_optional("agent", args.get("agent"))
    registry = ctx.store.agents
    records = registry.records
    activity = await ctx.store.agent_activity()
    # Diaries only: the events were counted by agent_activity (one scan of the log, not two).
    diaries = await ctx.store.reads(MemoryReads).diaries()
    live: dict[str, list[str]] = {}
    for watcher in (await who(ctx, {}))["watchers"]:
        if watcher.get("agent") and not watcher.get("daemon_silent"):
            daemon = (watcher.get("daemon") or {}).get("label") or "here"
            live.setdefault(watcher["agent"], []).append(daemon)
    seen: dict[str, dict[str, Any]] = {}
    suspects: dict[str, list[str]] = {}
    for agent, origin, count, first, last in activity:
        if agent == SYSTEM_AGENT or (only and agent != only):
            continue
        entry = seen.setdefault(agent, {"events": 0, "last_activity": None})
        entry["events"] += count
        entry["last_activity"] = max(entry["last_activity"] or "", last)
        record = records.get(agent)
        if record is not None and not _held_throughout(record, registry.origin_daemons.get(origin), first, last):
            suspects.setdefault(agent, []).append(origin)
    for agent in records:
        if not only or agent == only:
            seen.setdefault(agent, {"events": 0, "last_activity": None})
    now = _now()
    names, labels = _daemon_names(ctx), daemon_label_map(ctx)
    out = []
    for agent in sorted(set(seen) | ({a for a in live if not only or a == only})):
        if agent == SYSTEM_AGENT:
            continue
        record = records.get(agent)
        if record is not None and record.retired and not include_all:
            continue
        info = seen.get(agent, {"events": 0, "last_activity": None})
        diary = diaries.get(agent, {})
        last_activity = max(info["last_activity"] or "", diary.get("last_activity") or "") or None
        impersonations = 0
        if agent in suspects:  # only daemons that did not hold the id all along can have written one
            written = await ctx.store.events_written_as(agent, suspects[agent], MAX_SUSPECT_EVENTS)
            impersonations = sum(1 for event in written if registry.verdict(event) is not None)
        wire = _record_wire(ctx, record, agent)
        out.append({
            "agent": agent,
            "kind": "human" if is_human(agent) else "agent",
            "daemon": wire["daemon"],
            "daemon_name": names.get(wire["daemon"]) if wire["daemon"] else None,
            # its name, told apart from a namesake's (cloned machines share a hostname)
            "daemon_label": labels.get(wire["daemon"]) if wire["daemon"] else None,
            "here": wire["here"],
            "registered_since": wire["since"] if wire["daemon"] else None,
            "retired": wire["retired"],
            "retired_at": wire["since"] if wire["retired"] else None,
            "last_activity": last_activity,
            "events": info["events"],
            "stale": last_activity is not None and seconds_between(last_activity, now) > stale_after_s(ctx),
            "watching": agent in live,
            "watching_on": sorted(set(live.get(agent, []))),
            # An author's wing is named after it; only a diary with no events of its own has its wing.
            "wing": diary_wing(agent) if info["events"] else diary.get("wing") or diary_wing(agent),
            "diary_entries": diary.get("diary_entries", 0),
            "impersonations": impersonations,
            "contested": wire["void"],
        })
    return {"agents": out, "count": len(out), "stale_after_s": stale_after_s(ctx),
            "daemon": ctx.fingerprint}


OPS: Final = {
    "agent_register": agent_register,
    "agent_transfer": agent_transfer,
    "agent_retire": agent_retire,
    "agents": agents,
}


# -- the feature's declaration --------------------------------------------------------------------

def on_start(ctx: Context) -> None:
    """The registry names daemons by their names in the palace (its refusals say where an agent lives)."""
    ctx.store.agents.daemon_label = daemon_label(ctx)


async def on_joined(ctx: Context, membership: Membership) -> None:
    """The daemon belongs to a palace: the registry judges the palace CA's statements from now on
    (derived again with them), the CA's own daemon grants people's ids, and the agents this daemon
    wrote as before are registered to it."""
    agents = ctx.store.agents
    agents.ca_check = ca_checker(membership)
    if membership.can_invite:  # the CA's daemon: its registrations of people's ids count
        agents.human_grant = human_grant(ctx, membership)
    await ctx.store.write(agents.reload_ca, heavy=True)
    registered = await register_own_agents(ctx)
    if registered:
        LOGGER.info("registered %d agent(s) this daemon wrote as to it: %s", len(registered),
                    ", ".join(registered[:20]))


def _stale_after(values: Mapping[str, Any]) -> int:
    """``[agents] stale_after`` in seconds: an agent silent for this long is marked stale in ``agents``."""
    value = values.get("stale_after")
    return check_stale_after(value) if value is not None else DEFAULT_STALE_AFTER_S


def stale_after_s(ctx: Context) -> int:
    return int(ctx.config.section("agents", DEFAULT_STALE_AFTER_S))


FEATURE: Final = Feature(name="agents", ops=OPS, builds_on=("fleet", "leases", "memory", "tasks"), on_start=on_start,
                         on_joined=on_joined, section=Section("agents", {"stale_after": str}, _stale_after))
