"""Leases: advisory claims on paths and resources, palace-wide (palace_proto.leases holds the rules).

Owns: the ``lease_acquire``, ``lease_renew``, ``lease_release``, ``lease_list`` and ``lease_check``
operations, reading the lease events the derivation needs (the last ``MAX_TTL_S``: no lease
older can still be in force), and ``LeaseReconciler``, the task that tells an agent once
(``lease.conflict``) that its lease lost a collision or was forced out. The telling is done by the
daemon that wrote the losing lease, so exactly one such event exists per lost lease whatever the
number of replicas; it runs when lease events arrive and at start.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import os
from collections.abc import Mapping
from typing import Any, Final

import trio

from palace_proto.errors import ApiError, NotFound, ValidationError
from palace_proto.event_fields import PublicEvent, thread
from palace_proto.leases import (
    ACQUIRE,
    CONFLICT,
    LEASE_ROOM,
    MAX_HELD,
    MAX_TTL_S,
    RELEASE,
    RENEW,
    Lease,
    LeaseIndex,
    LeaseLedger,
    LeaseRequest,
    check_ttl,
    covers_path,
    held_by,
    lease_conflicts,
    lease_of,
    normalize_path,
)
from palace_proto.projects import project_stream
from palace_proto.stamps import add_seconds, format_duration, seconds_between
from palace_proto.validation import AppendRequest, clean_optional, clean_required

from ..clock import unix_now
from ..clock import utc_now as _now
from ..feature import Feature, Follower
from ..handlers.context import Context
from ..handlers.session import capped
from ..notify.triggers import Trigger
from ..store import WriteContext, append_event, events_of_types_after_seq, latest_seq_of_types
from ..store.leases import LeaseReads

__all__ = ["FEATURE", "OPS", "LeaseBook", "LeaseConflict", "LeaseReconciler", "LeaseSnapshot", "current_leases"]

LOGGER: Final = logging.getLogger("palaced.features.leases")
# Why a day on top of the longest TTL: clocks of the machines that wrote the events may differ.
WINDOW_SLACK_S: Final = 86400
# Why 20,000: lease events of a month in a busy palace; the newest are kept if there are more.
MAX_LEASE_EVENTS: Final = 20_000
# Why 1,000: what a ledger is fed at once; more new lease events than that are read by deriving afresh.
MAX_FEED: Final = 1000
# Why a day: the window the ledger reads from slides by a day before it is derived afresh (the
# window has a day of slack, so no lease that can still be in force is left out meanwhile).
REBUILD_EVERY_S: Final = 86400
# Why 5: a refusal names this many of the leases in the way (each with its holder and reason).
RIVALS_NAMED: Final = 5
# Why 100,000: lease ids known told, kept between runs of the reconciler (then read from the log again).
MAX_TOLD_KEPT: Final = 100_000
# The events the ledger reads: a lease.conflict notice changes no lease, but is judged there (a
# notice from the wrong daemon is flagged: issue 43); it costs the ledger one step like any event.
DERIVED_FROM: Final = (ACQUIRE, RELEASE, RENEW, CONFLICT)
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


def _window_start() -> str:
    return add_seconds(_now(), -(MAX_TTL_S + WINDOW_SLACK_S))


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseSnapshot:
    """Every lease of the window as derived at one point."""

    leases: list[Lease]
    #: the newest lease event's seq the leases were derived up to (a writer job compares it)
    seq: int
    revoked: dict[str, str]
    #: the leases that had not ended when derived, by pattern prefix (for lease check)
    index: LeaseIndex


class LeaseBook:
    """The derived leases, kept up to date: a ``LeaseLedger`` fed each committed lease event
    (local or replicated) as the next read asks, so a lease event costs one step, not a derivation
    of the month (issue 25, finding 6). Derived afresh only when the ledger cannot go on: an event
    that arrived out of order, a revocation, a changed record of an agent whose events it holds
    (impersonations take nothing), a day passed (the window slides), or more events than a
    derivation reads. Both run in a worker thread, one at a time: a lease operation never holds the
    event loop for longer than a lookup."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._watch = ctx.bus.watch_types(frozenset(DERIVED_FROM))
        self._lock = trio.Lock()
        self._snapshot: LeaseSnapshot | None = None
        self._ledger: LeaseLedger | None = None
        #: what the snapshot was made from: the bus generation, the agent records, the revocations
        self._generation = -1
        self._records: Any = None
        self._revoked: dict[str, str] = {}
        self._window = ""
        self._rebuild_at = 0.0
        self._seq = 0
        #: the leases in force by pattern prefix, kept with the ledger; their ends by the clock
        self._index = LeaseIndex()
        self._indexed: set[str] = set()
        self._ends: list[tuple[str, int, Lease]] = []
        self._pushed = 0
        self.derivations = 0
        self.feeds = 0

    def __repr__(self) -> str:
        return f"<LeaseBook derivations={self.derivations} feeds={self.feeds} ledger={self._ledger!r}>"

    @classmethod
    def of(cls, ctx: Context) -> LeaseBook:
        return ctx.state(cls)

    def _current(self, revoked: dict[str, str]) -> bool:
        return (self._snapshot is not None and self._generation == self._watch.generation
                and self._records is self._ctx.store.agents.records and self._revoked == revoked
                and unix_now() < self._rebuild_at)

    async def snapshot(self, *, fresh: bool = False) -> LeaseSnapshot:
        """The leases as derived from what is committed now; unless ``fresh``, the last snapshot
        while a newer one is being made (a reader concurrent with a lease event may see the state
        just before it; whoever wrote that event waits for the fresh one before answering)."""
        revoked = _revoked_origins(self._ctx)
        if self._snapshot is not None and (self._current(revoked) or (self._lock.locked() and not fresh)):
            return self._snapshot
        async with self._lock:
            if not self._current(revoked):
                # Taken before reading: what lands meanwhile is read next time.
                generation, records = self._watch.generation, self._ctx.store.agents.records
                self._snapshot = await self._update(revoked, records)
                self._generation, self._records, self._revoked = generation, records, revoked
            return self._snapshot  # type: ignore[return-value]

    async def _update(self, revoked: dict[str, str], records: Any) -> LeaseSnapshot:
        """The ledger fed with the lease events committed since it was built, or built again (the
        window moved on, a revocation or an agent record changed, too much arrived); the ledger's
        work runs on a thread, as a read would."""
        store, ledger = self._ctx.store, self._ledger
        if ledger is not None and revoked == self._revoked and unix_now() < self._rebuild_at \
                and not self._touched(records, ledger):
            newer = await store.reads(LeaseReads).events_after(DERIVED_FROM, self._seq, MAX_FEED)
            if len(newer) < MAX_FEED and ledger.applied + len(newer) <= 2 * MAX_LEASE_EVENTS:
                fed = await trio.to_thread.run_sync(self._feed, ledger, newer, revoked)
                if fed is not None:
                    return fed
        window = _window_start()
        seq_before, events = await store.reads(LeaseReads).window(DERIVED_FROM, window, MAX_LEASE_EVENTS)
        return await trio.to_thread.run_sync(self._rebuild, revoked, window, seq_before, events)

    def _feed(self, ledger: LeaseLedger, newer: list[PublicEvent], revoked: dict[str, str]) -> LeaseSnapshot | None:
        in_window = [e for e in newer if e["created_at"] >= self._window]
        if not ledger.feed(self._ctx.store.agents.annotate(in_window)):
            return None
        self._seq = max((e["seq"] for e in newer), default=self._seq)
        self.feeds += 1
        self._index_changes(ledger)
        return self._snap(ledger, revoked)

    def _touched(self, records: Any, ledger: LeaseLedger) -> bool:
        """Whether the agent records changed for an agent whose lease events the ledger holds."""
        before = self._records
        if records is before:
            return False
        return any(before.get(agent) is not records.get(agent) for agent in ledger.writers)

    def _rebuild(self, revoked: dict[str, str], window: str, seq_before: int,
                 events: list[PublicEvent]) -> LeaseSnapshot:
        agents = self._ctx.store.agents
        events = agents.annotate(events)
        daemons = agents.origin_daemons
        ledger = LeaseLedger(revoked, lambda origin: daemons.get(origin) or origin)
        ledger.feed(events)
        self._ledger, self._window, self._rebuild_at = ledger, window, unix_now() + REBUILD_EVERY_S
        # One query, one read snapshot: every event committed after it has a higher seq.
        self._seq = max((e["seq"] for e in events), default=seq_before)
        self.derivations += 1
        ledger.take_touched()
        now = _now()
        standing = [lease for lease in ledger.leases() if lease.until() > now]
        self._index, self._indexed = LeaseIndex(standing), {lease.id for lease in standing}
        self._ends = [(lease.until(), n, lease) for n, lease in enumerate(standing)]
        heapq.heapify(self._ends)
        self._pushed = len(standing)
        return self._snap(ledger, revoked)

    def _index_changes(self, ledger: LeaseLedger) -> None:
        """Bring the index of the leases in force up to the ledger: what began or stopped standing,
        and what ended by the clock since, as a new index sharing the rest (a reader may be walking
        the old one in another thread)."""
        now = _now()
        add, remove = [], []
        for lease in ledger.take_touched():
            if lease.until() > now:
                self._pushed += 1
                heapq.heappush(self._ends, (lease.until(), self._pushed, lease))  # renewed: a later end
                if lease.id not in self._indexed:
                    add.append(lease)
                    self._indexed.add(lease.id)
            elif lease.id in self._indexed:
                remove.append(lease)
                self._indexed.discard(lease.id)
        while self._ends and self._ends[0][0] <= now:
            lease = heapq.heappop(self._ends)[2]
            if lease.until() <= now and lease.id in self._indexed:  # else renewed: a later entry holds it
                remove.append(lease)
                self._indexed.discard(lease.id)
        if add or remove:
            self._index = self._index.evolved(add, remove)

    def flagged(self) -> tuple[list[dict[str, Any]], int]:
        """The newest lease events the authority table did not allow, and how many there were (as
        of the last snapshot)."""
        ledger = self._ledger
        return ([dict(f) for f in ledger.flagged], ledger.flagged_count) if ledger is not None else ([], 0)

    def _snap(self, ledger: LeaseLedger, revoked: dict[str, str]) -> LeaseSnapshot:
        window = _window_start()
        leases = [lease for lease in ledger.leases() if lease.created_at >= window]
        return LeaseSnapshot(leases, self._seq, revoked, self._index)


async def current_leases(ctx: Context, stream: str | None = None, *, fresh: bool = False) -> list[Lease]:
    """Every lease of the window (of one project's stream, or all)."""
    snapshot = await LeaseBook.of(ctx).snapshot(fresh=fresh)
    if stream is None:
        return snapshot.leases
    return [lease for lease in snapshot.leases if lease.stream == stream]


def _describe(lease: Lease) -> str:
    reason = f" ({lease.reason})" if lease.reason else ""
    return (f"{lease.holder} holds {', '.join(lease.patterns)} {'exclusively' if lease.exclusive else 'shared'}"
            f"{reason} until {lease.expires_at[:19]}Z [{lease.id}]")


def _agent(args: Mapping[str, Any]) -> str:
    return clean_required("agent", args.get("agent"))


def _refusal(rivals: list[Lease], now: str) -> LeaseConflict:
    return LeaseConflict("lease refused: " + "; ".join(_describe(r) for r in rivals)
                         + ". Wait for it, ask its holder, or take it anyway with --force (they are told)",
                         detail={"holders": [r.to_wire(now) for r in rivals]})


def _over_limit(agent: str, project: str) -> ValidationError:
    return ValidationError(f"{agent} already holds {MAX_HELD} leases in {project}, the most one agent may: release "
                           "some (`palacectl lease release`) or lease a directory that covers them", field="patterns")


async def lease_acquire(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_writer()
    agent = _agent(args)
    project = clean_required("project", args.get("project"))
    request = LeaseRequest.from_wire(args)
    force = args.get("force", False)
    if not isinstance(force, bool):
        raise ValidationError("force must be true or false", field="force")
    stream = project_stream(project)
    # Fresh: a rival the snapshot missed would make the write refuse what --force meant to take.
    snapshot = await LeaseBook.of(ctx).snapshot(fresh=True)
    now = _now()
    if held_by(snapshot.leases, agent, stream, now) >= MAX_HELD:
        raise _over_limit(agent, project)
    # In a worker thread: a hostile lease can cost a few milliseconds per pair to decide.
    # Without --force a refusal names the first few rivals: the rest need not be decided.
    rivals = await trio.to_thread.run_sync(
        lambda: lease_conflicts(snapshot.index.meeting(request.patterns), request, agent, now, stream,
                                limit=None if force else RIVALS_NAMED))
    if rivals and not force:
        raise _refusal(rivals, now)
    lease_id = "lease_" + os.urandom(8).hex()
    mode = "exclusive" if request.exclusive else "shared"
    body = f"{agent} leases {', '.join(request.patterns)} ({mode}, {format_duration(request.ttl_s)})"
    if request.reason:
        body += f": {request.reason}"
    if rivals:
        body += f"; forced out {', '.join(sorted({r.holder for r in rivals}))}"
    req = AppendRequest.from_wire(
        {**thread(stream, LEASE_ROOM, lease_id, topic=project), "type": ACQUIRE, "from_agent": agent, "body": body,
         "metadata": request.metadata([r.id for r in rivals])},
        ctx.limits)
    forced_ids = {r.id for r in rivals}

    def job(w: WriteContext) -> PublicEvent:
        # Checked again in the transaction that writes it, so two acquires on this daemon never both
        # pass: against what the snapshot held plus the lease events committed since (a handful;
        # the writer must not spend its time deriving). Conservative: a lease taken since counts as
        # a rival even if it lost, one forced out since still counts; only a release frees.
        if latest_seq_of_types(w, DERIVED_FROM) != snapshot.seq:
            newer = events_of_types_after_seq(w, DERIVED_FROM, snapshot.seq, MAX_FEED)
            if len(newer) >= MAX_FEED:  # refused, never waved through unchecked
                raise LeaseConflict(f"lease refused: over {MAX_FEED} lease events arrived while it was checked; "
                                    "try again")
            newer = [e for e in newer if e["stream"] == stream]
            released = {e["correlation_id"] for e in newer if e["type"] == RELEASE}
            taken = [lease for lease in map(lease_of, (e for e in newer if e["type"] == ACQUIRE)) if lease is not None]
            standing = [lease for lease in snapshot.index.meeting(request.patterns) if lease.id not in released]
            standing += [lease for lease in taken if lease.id not in forced_ids]
            now = _now()
            fresh = [r for r in lease_conflicts(standing, request, agent, now, stream) if r.id not in forced_ids]
            if fresh:
                raise _refusal(fresh, now)
            mine = [lease for lease in snapshot.leases if lease.id not in released] + taken
            if held_by(mine, agent, stream, now) >= MAX_HELD:
                raise _over_limit(agent, project)
        return append_event(w, req)

    event = await ctx.store.write(job)
    # Derived again before answering: whoever the agent tells next finds the lease in every read.
    await LeaseBook.of(ctx).snapshot(fresh=True)
    # The lease as its event takes it: checked against every rival in the transaction that wrote it.
    mine = lease_of(event)
    return {"lease": mine.to_wire(_now()) if mine else None, "event": event,
            "forced": [r.to_wire(_now()) for r in rivals]}


async def _own_lease(ctx: Context, args: Mapping[str, Any]) -> tuple[Lease, str]:
    lease_id = clean_required("lease_id", args.get("lease_id"))
    leases = await current_leases(ctx, fresh=True)
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
                        metadata: dict[str, Any] | None = None) -> PublicEvent:
    req = AppendRequest.from_wire(
        {**thread(lease.stream, LEASE_ROOM, lease.id), "type": kind, "from_agent": agent, "body": body,
         "metadata": metadata or {}}, ctx.limits)
    return await ctx.store.write(lambda w: append_event(w, req))


async def lease_renew(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_writer()
    lease, agent = await _own_lease(ctx, args)
    ttl = args.get("ttl_s")
    ttl_s = lease.ttl_s if ttl is None else check_ttl(ttl)  # by default, as long again as it was taken for
    event = await _write_change(ctx, RENEW, lease, agent, f"{agent} renews {lease.id} for {format_duration(ttl_s)}",
                                {"ttl_s": ttl_s})
    leases = await current_leases(ctx, lease.stream, fresh=True)
    renewed = next(x for x in leases if x.id == lease.id)
    return {"lease": renewed.to_wire(_now()), "event": event}


async def lease_release(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_writer()
    if args.get("all") is True:
        agent = _agent(args)
        project = clean_optional("project", args.get("project"))
        leases = await current_leases(ctx, project_stream(project) if project else None, fresh=True)
        now = _now()
        released = []
        for lease in leases:
            if lease.holder == agent and lease.state(now) == "active":
                await _write_change(ctx, RELEASE, lease, agent, f"{agent} releases {lease.id}")
                released.append(lease.id)
        if released:
            await LeaseBook.of(ctx).snapshot(fresh=True)  # every read after this answer sees them released
        return {"released": released, "count": len(released)}
    lease, agent = await _own_lease(ctx, args)
    await _write_change(ctx, RELEASE, lease, agent, f"{agent} releases {lease.id}")
    await LeaseBook.of(ctx).snapshot(fresh=True)
    return {"released": [lease.id], "count": 1}


async def lease_list(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    project = clean_optional("project", args.get("project"))
    agent = clean_optional("agent", args.get("agent"))
    path = args.get("path")
    path = normalize_path(path) if path is not None else None
    include_all = args.get("all", False) is True
    leases = await current_leases(ctx, project_stream(project) if project else None)
    now = _now()

    def shown() -> list[dict[str, Any]]:
        return [lease.to_wire(now) for lease in leases
                if (include_all or lease.state(now) == "active")
                and (agent is None or lease.holder == agent)
                and (path is None or any(covers_path(p, path) for p in lease.patterns))]

    # In a worker thread: a month of leases takes tens of milliseconds to put on the wire.
    listed = await trio.to_thread.run_sync(shown)
    # What the authority table did not allow (a renew or release by another than the holder, a
    # notice from the wrong daemon): flagged, it moved nothing (palace_proto.leases.LeaseLedger).
    flagged, flagged_count = LeaseBook.of(ctx).flagged()
    return {"leases": listed, "count": len(listed), "now": now, "flagged": flagged, "flagged_count": flagged_count}


async def lease_check(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    agent = _agent(args)
    project = clean_optional("project", args.get("project"))
    raw = args.get("paths")
    if not isinstance(raw, list) or not raw:
        raise ValidationError("lease check needs at least one path", field="paths")
    if len(raw) > MAX_CHECK_PATHS:
        raise ValidationError(f"lease check takes at most {MAX_CHECK_PATHS} paths per call", field="paths")
    paths = [normalize_path(p) for p in raw]
    stream = project_stream(project) if project else None
    snapshot = await LeaseBook.of(ctx).snapshot()
    now = _now()

    def blocks(lease: Lease) -> bool:  # only another agent's exclusive lease can block a path
        return lease.exclusive and lease.holder != agent and (stream is None or lease.stream == stream)

    def blocked_paths() -> list[dict[str, Any]]:
        blocked = []
        for path in paths:
            holders = [lease.to_wire(now) for lease in snapshot.index.covering(path, blocks)
                       if lease.state(now) == "active"]
            if holders:
                blocked.append({"path": path, "leases": holders})
        return blocked

    # In a worker thread: 500 paths against leases of many globs take milliseconds.
    blocked = await trio.to_thread.run_sync(blocked_paths)
    return {"ok": not blocked, "blocked": blocked, "checked": len(paths)}


OPS: Final = {
    "lease_acquire": lease_acquire,
    "lease_renew": lease_renew,
    "lease_release": lease_release,
    "lease_list": lease_list,
    "lease_check": lease_check,
}


class LeaseReconciler(Follower):
    """Tells each agent whose lease (written here) lost a collision or was forced out, once."""

    types = frozenset(DERIVED_FROM)
    doing = "tell agents about lost leases"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.told = 0
        #: lease ids whose loss was told (found in the log or written here)
        self._told: set[str] = set()

    def __repr__(self) -> str:
        return f"<LeaseReconciler told={self.told}>"

    async def catch_up(self) -> int:
        return await self.reconcile()

    async def reconcile(self) -> int:
        ctx = self.ctx
        if ctx.membership is not None and ctx.membership.role == "observer":
            return 0
        leases = await current_leases(ctx, fresh=True)
        own = ctx.store.origin_id
        lost = [lease for lease in leases if lease.end in ("lost", "forced") and lease.origin == own
                and lease.id not in self._told]
        if not lost:
            return 0
        # Looked up by lease id (the correlation index): only the notices of leases not known told,
        # and only this daemon's (the one that tells; a notice forged elsewhere silences nobody).
        ids = [lease.id for lease in lost]
        notices = await ctx.store.correlations_present(ids, (CONFLICT,), own)
        self._remember(notices)
        requests = [self._notice(lease) for lease in lost if lease.id not in self._told]
        if not requests:
            return 0

        # One transaction for every notice: a forced batch of leases costs the writer one job.
        def job(w: WriteContext) -> int:
            for req in requests:
                append_event(w, req)
            return len(requests)

        written = await ctx.store.write(job)
        self._remember(req.correlation_id for req in requests)
        self.told += written
        return written

    def _remember(self, lease_ids: Any) -> None:
        self._told.update(lease_ids)
        if len(self._told) > MAX_TOLD_KEPT:  # read again from the log as needed: a bound, not a loss
            self._told.clear()

    def _notice(self, lease: Lease) -> AppendRequest:
        why = ("was taken on both sides of a partition; the earlier lease wins" if lease.end == "lost"
               else "was forced out with --force")
        return AppendRequest.from_wire(
            {**thread(lease.stream, LEASE_ROOM, lease.id), "type": CONFLICT, "from_agent": "palaced",
             "to_agent": lease.holder,
             "body": (f"Your lease {lease.id} on {', '.join(lease.patterns)} ended: it {why}. "
                      f"{lease.ended_by_agent} holds {lease.ended_by}. Stop editing those paths; "
                      "`palacectl lease list` shows who holds what."),
             "metadata": {"lease_id": lease.id, "winner_lease_id": lease.ended_by,
                          "winner_agent": lease.ended_by_agent, "end": lease.end,
                          "patterns": list(lease.patterns)}},
            self.ctx.limits)


# -- the feature's declaration --------------------------------------------------------------------

# Why 10: the leases session start shows.
LEASES_SHOWN: Final = 10
# Why a day: a lease lost longer ago than that is history, not something to act on.
LOST_LEASE_WINDOW_S: Final = 86400


async def session_part(ctx: Context, agent: str) -> dict[str, Any]:
    """Session start's active leases of the agent, and the ones it lost within a day."""
    now = _now()
    mine = [lease for lease in await current_leases(ctx) if lease.holder == agent]
    active = [{"id": lease.id, "project": lease.stream.removeprefix("project/"), "patterns": list(lease.patterns),
               "mode": "exclusive" if lease.exclusive else "shared", "expires_at": lease.expires_at}
              for lease in mine if lease.state(now) == "active"]
    lost = [{"id": lease.id, "patterns": list(lease.patterns), "end": lease.end, "ended_at": lease.ended_at,
             "holder_now": lease.ended_by_agent}
            for lease in mine if lease.end in ("lost", "forced") and lease.ended_at
            and seconds_between(lease.ended_at, now) <= LOST_LEASE_WINDOW_S]
    return {"leases": capped(active, LEASES_SHOWN), "lost_leases": capped(lost, LEASES_SHOWN)}


TRIGGERS: Final = (Trigger("lost_lease", lambda e: e.get("type") == CONFLICT, lambda e: f"Lease lost by {e.get('to_agent')}",
                           lambda e: "palacectl lease list"),)

FEATURE: Final = Feature(name="leases", ops=OPS, services=(LeaseReconciler,), session=session_part,
                         triggers=TRIGGERS)
