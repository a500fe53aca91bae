"""Leases: advisory claims on paths and resources, palace-wide (palace_proto.leases holds the rules).

Owns: the ``lease_acquire``, ``lease_renew``, ``lease_release``, ``lease_list`` and ``lease_check``
operations, reading the lease events the derivation needs (the last ``MAX_TTL_S``: no lease
older can still be in force), and ``LeaseReconciler``, the task that tells an agent once
(``lease.conflict``) that its lease lost a collision or was forced out. The telling is done by the
daemon that wrote the losing lease, so exactly one such event exists per lost lease whatever the
number of replicas; it runs when lease events arrive and at start.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, Final

from palace_proto.errors import ApiError, NotFound, ValidationError
from palace_proto.leases import (
    ACQUIRE,
    CONFLICT,
    LEASE_ROOM,
    LEASE_TYPES,
    MAX_TTL_S,
    RELEASE,
    RENEW,
    Lease,
    LeaseRequest,
    check_ttl,
    covers_path,
    derive_leases,
    lease_conflicts,
    normalize_path,
)
from palace_proto.stamps import add_seconds, format_duration
from palace_proto.tasks import project_stream
from palace_proto.validation import AppendRequest, clean_optional, clean_required

from ..store import WriteContext
from ..store.clock import utc_now as _now
from .context import Context

__all__ = ["OPS", "LeaseConflict", "LeaseReconciler", "current_leases"]

LOGGER: Final = logging.getLogger("palaced.handlers.leases")
# Why a day on top of the longest TTL: clocks of the machines that wrote the events may differ.
WINDOW_SLACK_S: Final = 86400
# Why 20,000: lease events of a month in a busy palace; the newest are kept if there are more.
MAX_LEASE_EVENTS: Final = 20_000
# Why 500 paths: what one `lease check` or one commit's guard asks at once is checked in one call;
# the guard sends bigger commits in chunks.
MAX_CHECK_PATHS: Final = 500


class LeaseConflict(ApiError):
    code = "lease_conflict"


def _revoked_origins(ctx: Context) -> dict[str, str]:
    directory = ctx.directory
    if directory is None:
        return {}
    return {origin: revocation.revoked_at for revocation in directory.revocations()
            for origin in directory.origins_of_peer(revocation.peer_id)}


async def _lease_events(ctx: Context, stream: str | None) -> list[dict[str, Any]]:
    since = add_seconds(_now(), -(MAX_TTL_S + WINDOW_SLACK_S))
    return await ctx.astore.read(ctx.store.lease_events, sorted(LEASE_TYPES), since, stream, MAX_LEASE_EVENTS)


async def current_leases(ctx: Context, stream: str | None = None) -> tuple[list[Lease], list[dict[str, Any]]]:
    """Every lease of the window (of one project's stream, or all), and the raw events."""
    events = ctx.store.agents.annotate(await _lease_events(ctx, stream))  # impersonations take nothing
    return derive_leases(events, revoked=_revoked_origins(ctx)), events


def _describe(lease: Lease) -> str:
    reason = f" ({lease.reason})" if lease.reason else ""
    return (f"{lease.holder} holds {', '.join(lease.patterns)} {'exclusively' if lease.exclusive else 'shared'}"
            f"{reason} until {lease.expires_at[:19]}Z [{lease.id}]")


def _agent(args: Mapping[str, Any]) -> str:
    return clean_required("agent", args.get("agent"))


async def lease_acquire(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_writer()
    agent = _agent(args)
    project = clean_required("project", args.get("project"))
    request = LeaseRequest.from_wire(args)
    force = args.get("force", False)
    if not isinstance(force, bool):
        raise ValidationError("force must be true or false", field="force")
    stream = project_stream(project)
    leases, _ = await current_leases(ctx, stream)
    rivals = lease_conflicts(leases, request, agent, _now())
    if rivals and not force:
        raise LeaseConflict("lease refused: " + "; ".join(_describe(r) for r in rivals)
                            + ". Wait for it, ask its holder, or take it anyway with --force (they are told)",
                            detail={"holders": [r.to_wire(_now()) for r in rivals]})
    lease_id = "lease_" + os.urandom(8).hex()
    mode = "exclusive" if request.exclusive else "shared"
    body = f"{agent} leases {', '.join(request.patterns)} ({mode}, {format_duration(request.ttl_s)})"
    if request.reason:
        body += f": {request.reason}"
    if rivals:
        body += f"; forced out {', '.join(sorted({r.holder for r in rivals}))}"
    req = AppendRequest.from_wire(
        {"type": ACQUIRE, "stream": stream, "room": LEASE_ROOM, "topic": project, "from_agent": agent,
         "correlation_id": lease_id, "body": body, "metadata": request.metadata([r.id for r in rivals])},
        ctx.limits)
    since = add_seconds(_now(), -(MAX_TTL_S + WINDOW_SLACK_S))
    revoked = _revoked_origins(ctx)
    forced_ids = {r.id for r in rivals}

    def job(w: WriteContext) -> dict[str, Any]:
        # Checked again in the transaction that writes it: two acquires on this daemon never both pass.
        now = _now()
        events = ctx.store.agents.annotate(w.lease_events(sorted(LEASE_TYPES), since, stream, MAX_LEASE_EVENTS))
        fresh = [r for r in lease_conflicts(derive_leases(events, revoked=revoked), request, agent, now)
                 if r.id not in forced_ids]
        if fresh:
            raise LeaseConflict("lease refused: " + "; ".join(_describe(r) for r in fresh)
                                + ". Wait for it, ask its holder, or take it anyway with --force (they are told)",
                                detail={"holders": [r.to_wire(now) for r in fresh]})
        return w.append(req)

    event = await ctx.astore.write(job)
    leases, _ = await current_leases(ctx, stream)
    mine = next((lease for lease in leases if lease.id == lease_id), None)
    return {"lease": mine.to_wire(_now()) if mine else None, "event": event,
            "forced": [r.to_wire(_now()) for r in rivals]}


async def _own_lease(ctx: Context, args: Mapping[str, Any]) -> tuple[Lease, str]:
    lease_id = clean_required("lease_id", args.get("lease_id"))
    # Only its project's leases decide its state: find its stream first, not every project's leases.
    own = await ctx.astore.read(ctx.store.events_by_correlation, lease_id)
    stream = next((e["stream"] for e in own if e["type"] == ACQUIRE), None)
    leases, _ = await current_leases(ctx, stream) if stream is not None else ([], [])
    lease = next((lease for lease in leases if lease.id == lease_id), None)
    if lease is None:
        raise NotFound(f"no lease {lease_id!r} (see `palacectl lease list --all`)")
    agent = clean_optional("agent", args.get("agent")) or lease.holder
    if lease.holder != agent:
        raise ValidationError(f"lease {lease_id} is held by {lease.holder}, not {agent}: only its holder may "
                              "renew or release it (take it with `lease acquire --force`)", field="agent")
    state = lease.state(_now())
    if state != "active":
        raise ValidationError(f"lease {lease_id} is {state}, not active: acquire a new one", field="lease_id")
    return lease, agent


async def _write_change(ctx: Context, kind: str, lease: Lease, agent: str, body: str,
                        metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    req = AppendRequest.from_wire(
        {"type": kind, "stream": lease.stream, "room": LEASE_ROOM, "from_agent": agent, "correlation_id": lease.id,
         "body": body, "metadata": metadata or {}}, ctx.limits)
    return await ctx.astore.write(lambda w: w.append(req))


async def lease_renew(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_writer()
    lease, agent = await _own_lease(ctx, args)
    ttl = args.get("ttl_s")
    if ttl is None:
        ttl_s = lease.ttl_s  # as long again as it was taken for
    else:
        ttl_s = check_ttl(ttl)
    event = await _write_change(ctx, RENEW, lease, agent, f"{agent} renews {lease.id} for {format_duration(ttl_s)}",
                                {"ttl_s": ttl_s})
    leases, _ = await current_leases(ctx, lease.stream)
    renewed = next(x for x in leases if x.id == lease.id)
    return {"lease": renewed.to_wire(_now()), "event": event}


async def lease_release(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_writer()
    if args.get("all") is True:
        agent = _agent(args)
        project = clean_optional("project", args.get("project"))
        leases, _ = await current_leases(ctx, project_stream(project) if project else None)
        now = _now()
        released = []
        for lease in leases:
            if lease.holder == agent and lease.state(now) == "active":
                await _write_change(ctx, RELEASE, lease, agent, f"{agent} releases {lease.id}")
                released.append(lease.id)
        return {"released": released, "count": len(released)}
    lease, agent = await _own_lease(ctx, args)
    await _write_change(ctx, RELEASE, lease, agent, f"{agent} releases {lease.id}")
    return {"released": [lease.id], "count": 1}


async def lease_list(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    project = clean_optional("project", args.get("project"))
    agent = clean_optional("agent", args.get("agent"))
    path = args.get("path")
    path = normalize_path(path) if path is not None else None
    include_all = args.get("all", False) is True
    leases, _ = await current_leases(ctx, project_stream(project) if project else None)
    now = _now()
    shown = [lease.to_wire(now) for lease in leases
             if (include_all or lease.state(now) == "active")
             and (agent is None or lease.holder == agent)
             and (path is None or any(covers_path(p, path) for p in lease.patterns))]
    return {"leases": shown, "count": len(shown), "now": now}


async def lease_check(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    agent = _agent(args)
    project = clean_optional("project", args.get("project"))
    raw = args.get("paths")
    if not isinstance(raw, list) or not raw:
        raise ValidationError("lease check needs at least one path", field="paths")
    if len(raw) > MAX_CHECK_PATHS:
        raise ValidationError(f"lease check takes at most {MAX_CHECK_PATHS} paths per call", field="paths")
    paths = [normalize_path(p) for p in raw]
    leases, _ = await current_leases(ctx, project_stream(project) if project else None)
    now = _now()
    active = [lease for lease in leases if lease.state(now) == "active" and lease.exclusive and lease.holder != agent]
    blocked = []
    for path in paths:
        holders = [lease.to_wire(now) for lease in active if any(covers_path(p, path) for p in lease.patterns)]
        if holders:
            blocked.append({"path": path, "leases": holders})
    return {"ok": not blocked, "blocked": blocked, "checked": len(paths)}


OPS: Final = {
    "lease_acquire": lease_acquire,
    "lease_renew": lease_renew,
    "lease_release": lease_release,
    "lease_list": lease_list,
    "lease_check": lease_check,
}


class LeaseReconciler:
    """Tells each agent whose lease (written here) lost a collision or was forced out, once."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.told = 0

    def __repr__(self) -> str:
        return f"<LeaseReconciler told={self.told}>"

    async def run(self) -> None:
        watch = self.ctx.bus.watch_types(LEASE_TYPES)
        while True:
            try:
                await self.reconcile()
            except ApiError as exc:  # a full disk, shutting down: tried again at the next lease event
                LOGGER.warning("could not tell agents about lost leases: %s", exc.message)
            await watch.wait()

    async def reconcile(self) -> int:
        ctx = self.ctx
        if ctx.membership is not None and ctx.membership.role == "observer":
            return 0
        leases, events = await current_leases(ctx)
        told = {e.get("correlation_id") for e in events if e.get("type") == CONFLICT}
        own = ctx.store.origin_id
        written = 0
        for lease in leases:
            if lease.end not in ("lost", "forced") or lease.origin != own or lease.id in told:
                continue
            why = ("was taken on both sides of a partition; the earlier lease wins" if lease.end == "lost"
                   else "was forced out with --force")
            req = AppendRequest.from_wire(
                {"type": CONFLICT, "stream": lease.stream, "room": LEASE_ROOM, "from_agent": "palaced",
                 "to_agent": lease.holder, "correlation_id": lease.id,
                 "body": (f"Your lease {lease.id} on {', '.join(lease.patterns)} ended: it {why}. "
                          f"{lease.ended_by_agent} holds {lease.ended_by}. Stop editing those paths; "
                          "`palacectl lease list` shows who holds what."),
                 "metadata": {"lease_id": lease.id, "winner_lease_id": lease.ended_by,
                              "winner_agent": lease.ended_by_agent, "end": lease.end,
                              "patterns": list(lease.patterns)}},
                ctx.limits)

            def job(w: WriteContext, req: AppendRequest = req) -> dict[str, Any]:
                return w.append(req)

            await ctx.astore.write(job)
            written += 1
        self.told += written
        return written

