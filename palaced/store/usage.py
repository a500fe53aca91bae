"""Usage totals kept at commit: the usage reports this replica holds, which of them count, and the
running sums of those per UTC day (schema 0013).

Owns: the ``usage_reports`` and ``usage_totals`` tables and every write to them — a stored report's
row (``event_stored``, as each event is stored), the judgement of a task's reports again before a
batch commits (``settle``; ``rejudge_agents``, when the registry's verdicts change), filling both
from the log when a database opens without them (``ensure_judged``): the usage's part of the store
(``PART``, parts.py) — and the one read the ``usage`` operation makes (``read_usage``, in
``UsageReads``: totals by a field since a time, how many reports count nowhere, and what each
budget's window has spent). Must not import trio; the writes run on the writer thread inside a
batch's transaction, the read on a reader's connection.

Theory of operation
-------------------
Which reports count is the authority table's (``palace_proto.authority``, rule ``usage.report``),
as ``palace_proto.tasks.derive_task`` judges it: a report on a task that exists, naming it in
``metadata.task_id``, written by an agent that has claimed the task, by the daemon that holds that
agent (an impersonation holds no role), among the task's first ``MAX_USAGE_REPORTS_PER_TASK`` such
reports in (created_at, event id) order. Every other report is *flagged*: held and relayed like
any event, summed nowhere (issue 43, finding 3: a member's invented report stopped every worker).

That verdict belongs to the whole task, and can change after a report is stored: replicas receive
origins in their own order, so a report may arrive before the request or the claim it depends on,
a later claim may make an agent a claimant, a registry event learnt late may make an agent's
events impersonations. So the store keeps it the way it keeps ``task_threads`` (tasks.py), in the
transaction that commits the events:

* each stored ``usage.report`` gets its row (``counts`` 0) and the running batch notes its task;
  so does any event that can move who may report on a task: a request, a release, a reassign, an
  event carrying a status (the batch's ``touched`` subjects of this part);
* before the batch commits (``settle``), each noted task that holds reports is judged again:
  its events are read once (``_judge``: the events that can move roles, and only its claimants'
  reports), ``derive_task`` runs on them, and the difference between the reports that count now and
  those that counted moves the ``counts`` flags and the totals. The tasks of every agent whose
  registry record the batch changed are judged again too, and ``AgentRegistry.reload_ca`` (the
  palace CA's check changed: every record derived anew) calls ``rejudge_agents`` with the agents
  whose record changed. Impersonations are judged as of the transaction (the batch's own registry
  events included: ``_annotate``), which is what the registry says once the batch commits.

A ``usage`` call reads committed rows only, so it never counts a report that does not count, nor
misses one committed before it; every replica holding the same events holds the same rows, in
whatever order they arrived. Judging again is idempotent (it moves the totals to what the events
say), so a noted task that a failed job's savepoint rolled back costs a judgement, never a wrong
total.

Costs. A report costs its row and a counter at commit; a task is judged once per batch, reading at
most ``MAX_TASK_EVENTS`` of its events and ``MAX_REPORTS_JUDGED`` of its claimants' reports (in the
order every replica agrees on, so a flood changes no replica's verdicts differently). A ``usage``
call reads ``usage_totals``: a row per (field, day, key), never a row per report.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
from typing import TYPE_CHECKING, Any, Final

import apsw

from palace_proto.envelope import SignedEvent
from palace_proto.event_fields import PublicEvent, blank_public
from palace_proto.identity import judge as impersonation_of
from palace_proto.identity import order_key
from palace_proto.ids import fingerprint
from palace_proto.tasks import REASSIGN, RELEASE, REQUEST, derive_task
from palace_proto.usage import (
    MAX_USAGE_REPORTS_PER_TASK,
    USAGE_TYPE,
    Spending,
    Total,
    cost_micros,
    record_from_event,
    total_of,
)

from .fetch import all_rows, one_row
from .parts import StorePart
from .reads import ReadSet, StoreRead
from .rows import BODILESS_PUBLIC_COLUMNS, row_to_public

if TYPE_CHECKING:
    from .queries import Reads
    from .state import WriteContext

__all__ = ["BY_TABLE", "MAX_REPORTS_JUDGED", "MAX_TASK_EVENTS", "PART", "USAGE_VERSION", "UsageFigures", "UsageReads",
           "ensure_judged", "event_stored", "read_usage", "rebuild", "rejudge", "rejudge_agents", "settle"]

PART_NAME: Final = "usage"

#: the derivation the tables hold: a database whose meta ``usage_version`` differs is judged anew
#: from the log when the store opens (``ensure_judged``)
USAGE_VERSION: Final = "1"
_VERSION_KEY: Final = "usage_version"
_HELD_KEY: Final = "usage_reports_held"
# Why 10,000: as many of a task's events as every task view reads (queries.correlation_events).
MAX_TASK_EVENTS: Final = 10_000
# Why four times the reports that may count: room for the impersonations among a claimant's
# reports (written as it by another daemon); a task has one report per run, and a flood past this
# is judged on its first reports in (created_at, event id) order, the same on every replica.
MAX_REPORTS_JUDGED: Final = 4 * MAX_USAGE_REPORTS_PER_TASK
#: the groups ``usage_totals`` keeps, and each one's key in a ``usage_reports`` row
BY_TABLE: Final = {"task": "task", "agent": "agent", "machine": "machine", "model": "coalesce(model, '')",
                   "day": "day"}
# Statuses that claim a task (palace_proto.authority: task.claim, and task.deliver by one the task
# is addressed to while nobody holds it): whoever wrote one may have claimed it.
_CLAIMING: Final = ("claimed", "ready")
# The types that move a task without a status of their own.
_MOVING_TYPES: Final = (REQUEST, RELEASE, REASSIGN)
_INSERT_REPORT: Final = (
    "INSERT INTO usage_reports (event_id, task, named_task, agent, origin, created_at, day, machine, model, tokens_in, "
    "tokens_out, cache_read_tokens, cache_write_tokens, cost_micros, valid) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
    "ON CONFLICT (event_id) DO NOTHING")
_ADD_TOTAL: Final = (
    "INSERT INTO usage_totals (by, day, key, runs, tokens_in, tokens_out, cache_read_tokens, cache_write_tokens, "
    "cost_micros, unpriced_runs) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT (by, day, key) DO UPDATE SET "
    "runs = runs + excluded.runs, tokens_in = tokens_in + excluded.tokens_in, "
    "tokens_out = tokens_out + excluded.tokens_out, cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens, "
    "cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens, "
    "cost_micros = cost_micros + excluded.cost_micros, unpriced_runs = unpriced_runs + excluded.unpriced_runs")
# What judging a report and summing it reads of its row.
_REPORT_COLUMNS: Final = ("event_id, agent, origin, created_at, named_task, day, machine, model, tokens_in, tokens_out, "
                          "cache_read_tokens, cache_write_tokens, cost_micros, valid")
# The events of a task that can move who may report on it (the request, claims, deliveries,
# releases, reassigns, closes, corrections): a word without a status moves nothing.
_TASK_EVENTS: Final = (
    f"SELECT {BODILESS_PUBLIC_COLUMNS} FROM events "
    f"WHERE (correlation_id = ?1 AND type != '{USAGE_TYPE}' AND (status IS NOT NULL OR type IN "
    f"({', '.join(repr(t) for t in _MOVING_TYPES)}))) OR id = ?1 ORDER BY created_at, id LIMIT ?2")
_SUMS: Final = ("sum(runs), sum(tokens_in), sum(tokens_out), sum(cache_read_tokens), sum(cache_write_tokens), "
                "sum(cost_micros), sum(unpriced_runs)")


# -- on the write path (writer thread, inside a batch) ------------------------------------------


def _noted(ctx: WriteContext) -> set[str]:
    """The tasks the running batch noted for judging again before it commits (not rewound with a
    failed job: judging again is idempotent)."""
    return ctx.batch.touched.setdefault(PART_NAME, set())


def event_stored(ctx: WriteContext, ev: SignedEvent, seq: int) -> None:
    """``ev`` was just inserted: a report gets its row, and the batch notes the task whose
    reports it may move (judged before the commit: ``settle``)."""
    if ev.type == USAGE_TYPE:
        conn = ctx.conn
        conn.execute(_INSERT_REPORT, _report_row(ev.id, ev.correlation_id, ev.from_agent, ev.origin, ev.created_at,
                                                 ev.metadata_json))
        if conn.changes():
            conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = ?", (_HELD_KEY,))
        if ev.correlation_id is not None:
            _noted(ctx).add(ev.correlation_id)
    elif ev.type == REQUEST:
        _noted(ctx).add(ev.correlation_id or ev.id)
    elif ev.correlation_id is not None and (ev.status is not None or ev.type in _MOVING_TYPES):
        _noted(ctx).add(ev.correlation_id)


def _report_row(event_id: str, task: str | None, agent: str, origin: str, created_at: str,
                metadata_json: str) -> tuple[Any, ...]:
    """The ``usage_reports`` row of a stored report (its figures None when its metadata does not check)."""
    metadata = _loads(metadata_json)
    named = metadata.get("task_id") if isinstance(metadata, dict) else None
    record = record_from_event({"type": USAGE_TYPE, "created_at": created_at, "from_agent": agent,
                                "metadata": metadata})
    at = order_key(created_at, event_id)[0]
    head = (event_id, task, named if isinstance(named, str) else None, agent, origin, at, at[:10])
    if record is None:
        return (*head, None, None, None, None, None, None, None, 0)
    usage = record.usage
    return (*head, record.machine, usage.model, usage.tokens_in, usage.tokens_out, usage.cache_read_tokens or 0,
            usage.cache_write_tokens or 0, cost_micros(usage), 1)


def settle(ctx: WriteContext) -> None:
    """Before the batch commits: judge again every task it noted that holds reports, and the
    tasks of the agents whose registry record it changed (batch.py calls it; idempotent)."""
    batch = ctx.batch
    tasks = set(batch.touched.get(PART_NAME, ()))
    if batch.registry:
        tasks |= _tasks_of(ctx.conn, _changed_agents(ctx))
    conn = ctx.conn
    for task in sorted(tasks):
        if conn.execute("SELECT 1 FROM usage_reports WHERE task = ? LIMIT 1", (task,)).fetchone() is not None:
            rejudge(ctx, task)


def rejudge_agents(ctx: WriteContext, agents: set[str]) -> None:
    """Judge again the tasks holding reports that these agents wrote on: the verdicts on their
    events changed (the registry was derived anew: ``AgentRegistry.reload_ca``)."""
    for task in sorted(_tasks_of(ctx.conn, set(agents))):
        rejudge(ctx, task)


def _changed_agents(ctx: WriteContext) -> set[str]:
    """The agents whose record the batch's registry events change."""
    named = set()
    for event in ctx.batch.registry:
        try:
            agent = json.loads(event.metadata_json).get("agent")
        except (ValueError, AttributeError):
            continue
        if isinstance(agent, str):
            named.add(agent)
    registry = ctx.agents
    return {agent for agent in named if registry.record_of(ctx, agent) != registry.records.get(agent)}


def _tasks_of(conn: apsw.Connection, agents: set[str]) -> set[str]:
    """The tasks holding reports that any of ``agents`` wrote an event on."""
    found: set[str] = set()
    for agent in sorted(agents):
        found.update(task for (task,) in conn.execute(
            "SELECT DISTINCT coalesce(correlation_id, id) AS task FROM events WHERE from_agent = ? AND "
            "(correlation_id IS NOT NULL OR type = 'task.request') AND "
            "EXISTS (SELECT 1 FROM usage_reports WHERE usage_reports.task = coalesce(events.correlation_id, events.id))",
            (agent,)))
    return found


def rejudge(ctx: WriteContext, task: str) -> tuple[int, int]:
    """Judge ``task``'s reports again and move the counts flags and the totals by the difference;
    (how many started counting, how many stopped)."""
    conn = ctx.conn
    before = {row[0]: row for row in conn.execute(
        f"SELECT {_REPORT_COLUMNS} FROM usage_reports INDEXED BY usage_reports_counted WHERE task = ? AND counts = 1",
        (task,))}
    judged, counted = _judge(ctx, task)
    now = {event_id for event_id in counted if judged[event_id][-1] == 1}  # its metadata checks
    started = [judged[event_id] for event_id in sorted(now - before.keys())]
    stopped = [before[event_id] for event_id in sorted(before.keys() - now)]
    if started:
        conn.executemany("UPDATE usage_reports SET counts = 1 WHERE event_id = ?", [(r[0],) for r in started])
        _move(conn, task, started, 1)
    if stopped:
        conn.executemany("UPDATE usage_reports SET counts = 0 WHERE event_id = ?", [(r[0],) for r in stopped])
        _move(conn, task, stopped, -1)
    return len(started), len(stopped)


def _judge(ctx: WriteContext, task: str) -> tuple[dict[str, tuple[Any, ...]], list[str]]:
    """The task's reports that were judged (id -> row) and those ``derive_task`` counts, from its
    events read once: those that can move roles, and its claimants' reports from their first claim."""
    conn = ctx.conn
    events: list[PublicEvent] = [row_to_public(row) for row in conn.execute(_TASK_EVENTS, (task, MAX_TASK_EVENTS))]
    # Who may have claimed the task, and from when: a report of anyone else, or from before its
    # writer's first claim, cannot count (derive_task would flag it), so it is not even read.
    first_claim: dict[str, str] = {}
    for event in events:
        if event["status"] in _CLAIMING:
            at = order_key(event["created_at"], event["id"])[0]
            first_claim[event["from_agent"]] = min(at, first_claim.get(event["from_agent"], at))
    runs: list[list[tuple[Any, ...]]] = [all_rows(conn.execute(
        f"SELECT {_REPORT_COLUMNS} FROM usage_reports INDEXED BY usage_reports_task WHERE task = ? AND agent = ? "
        "AND named_task = ? AND created_at >= ? ORDER BY created_at, event_id LIMIT ?",
        (task, agent, task, since, MAX_REPORTS_JUDGED))) for agent, since in sorted(first_claim.items())]
    reports = list(heapq.merge(*runs, key=lambda r: (r[3], r[0])))[:MAX_REPORTS_JUDGED]
    if not reports:
        return {}, []
    for r in reports:
        event = blank_public()
        event["id"], event["origin"], event["type"], event["from_agent"] = r[0], r[2], USAGE_TYPE, r[1]
        event["correlation_id"], event["metadata"], event["created_at"] = task, {"task_id": r[4]}, r[3]
        events.append(event)
    # now=None: the verdict must not depend on when it was reached (a claim dated ahead of one
    # replica's clock would otherwise count there later than elsewhere, with nothing to judge it again).
    view = derive_task(task, _annotate(ctx, events), now=None, daemon_of=lambda origin: _daemon(ctx, origin) or origin)
    return {r[0]: r for r in reports}, (view["counted"].get("usage.report", []) if view is not None else [])


def _loads(text: str) -> Any:
    """Stored metadata as an object ({} when it is not JSON: a peer's event is never an error here)."""
    try:
        return json.loads(text)
    except (ValueError, TypeError, RecursionError):
        return {}


def _daemon(ctx: WriteContext, origin: str) -> str | None:
    """The daemon (peer id) an origin belongs to, as this transaction sees it (an origin stored
    in this very batch included: the registry learns those at the commit)."""
    daemon = ctx.agents.origin_daemons.get(origin)
    if daemon is None:
        row = ctx.conn.execute("SELECT public_key FROM origins WHERE origin = ?", (origin,)).fetchone()
        daemon = fingerprint(bytes(row[0])) if row is not None else None
    return daemon


def _annotate(ctx: WriteContext, events: list[PublicEvent]) -> list[PublicEvent]:
    """The events with ``impersonation`` on those that are one, as the registry will say once
    this batch commits (``AgentRegistry.annotate``, with the batch's registry events counted)."""
    records: dict[str, Any] = {}
    out = []
    for event in events:
        agent = event["from_agent"]
        if agent not in records:
            records[agent] = ctx.agents.record_of(ctx, agent)
        record = records[agent]
        daemon = _daemon(ctx, event["origin"]) if record is not None else None
        found = impersonation_of(record, daemon, event["created_at"], event["id"]) if daemon is not None else None
        out.append({**event, "impersonation": found.to_wire()} if found is not None else event)
    return out


def _move(conn: apsw.Connection, task: str, rows: list[tuple[Any, ...]], sign: int) -> None:
    """Add (``sign`` 1) or take away (-1) the figures of these report rows in every group they are in."""
    changes = []
    for (_eid, agent, _origin, _at, _named, day, machine, model, tokens_in, tokens_out, cache_read, cache_write,
         micros, _valid) in rows:
        figures = (sign, sign * tokens_in, sign * tokens_out, sign * cache_read, sign * cache_write,
                   sign * (micros or 0), sign * (micros is None))
        for by, key in (("task", task), ("agent", agent), ("machine", machine), ("model", model or ""), ("day", day)):
            changes.append((by, day, key, *figures))
    conn.executemany(_ADD_TOTAL, changes)
    if sign < 0:  # a group left without a run has no row
        conn.executemany("DELETE FROM usage_totals WHERE by = ? AND day = ? AND key = ? AND runs = 0",
                         sorted({c[:3] for c in changes}))


# -- filling from the log ------------------------------------------------------------------------


def ensure_judged(ctx: WriteContext) -> bool:
    """A write job (the store runs it when it opens): fill the tables from the log unless they
    hold this derivation already (schema 0013 on an existing database; a new USAGE_VERSION).
    Returns whether it did."""
    row = ctx.conn.execute("SELECT value FROM meta WHERE key = ?", (_VERSION_KEY,)).fetchone()
    if row is not None and row[0] == USAGE_VERSION:
        return False
    rebuild(ctx)
    return True


def rebuild(ctx: WriteContext) -> dict[str, int]:
    """Derive both tables again from the log (every usage.report, then every task holding one
    judged); how many reports are held and how many count."""
    conn = ctx.conn
    conn.execute("DELETE FROM usage_reports")
    conn.execute("DELETE FROM usage_totals")
    held, after = 0, 0
    while True:  # in chunks of a thousand, in log order
        rows: list[tuple[Any, ...]] = all_rows(conn.execute(
            "SELECT seq, id, correlation_id, from_agent, origin, created_at, metadata FROM events "
            "WHERE type = ? AND seq > ? ORDER BY seq LIMIT 1000", (USAGE_TYPE, after)))
        if not rows:
            break
        conn.executemany(_INSERT_REPORT, [_report_row(*row[1:]) for row in rows])
        held, after = held + len(rows), rows[-1][0]
    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                 (_HELD_KEY, str(held)))
    tasks: list[tuple[str]] = all_rows(conn.execute("SELECT DISTINCT task FROM usage_reports WHERE task IS NOT NULL"))
    for (task,) in tasks:
        rejudge(ctx, task)
    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                 (_VERSION_KEY, USAGE_VERSION))
    (counted,) = one_row(conn.execute("SELECT count(*) FROM usage_reports WHERE counts = 1"))
    return {"held": held, "counted": counted}


# -- the read ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class UsageFigures:
    """What a ``usage`` call reads, at one moment (one read transaction)."""

    #: the totals by the field asked, since the time asked (palace_proto.usage.totals's order)
    totals: list[Total]
    #: usage reports held here that count nowhere
    flagged: int
    #: what each budget's window has spent at ``now`` (None: not asked)
    spending: Spending | None


def read_usage(reads: Reads, by: str, since: str = "", now: str | None = None, *,
               tasks: bool = True) -> UsageFigures:
    """The totals of the reports that count, by ``by`` (a key of ``BY_TABLE``) since ``since``
    (``YYYY-MM-DD``, a created_at bound, or "" for all), how many reports count nowhere, and, with
    ``now`` (a created_at), the spending budgets judge: each agent's of ``now``'s day, each task's
    over its life (left out with ``tasks=False``: no task budget to judge), the palace's of its
    month. Costs the number of (day, key) groups read, never the number of reports."""
    conn = reads.db.reader()
    with conn:  # one read transaction: the totals, the count and the spending of one commit
        sums: dict[str, list[int]] = {}
        rows: list[tuple[Any, ...]]
        if not since or since[10:] in ("", "T00:00:00.000000Z"):
            rows = all_rows(conn.execute(f"SELECT key, {_SUMS} FROM usage_totals WHERE by = ? AND day >= ? GROUP BY key",
                                         (by, since[:10])))
        else:
            # Whole days after the first; of the first, its reports from that time on. Any time
            # of that day sorts before "…T99".
            rows = all_rows(conn.execute(f"SELECT key, {_SUMS} FROM usage_totals WHERE by = ? AND day > ? GROUP BY key",
                                         (by, since[:10])))
            rows += conn.execute(
                f"SELECT {BY_TABLE[by]}, count(*), sum(tokens_in), sum(tokens_out), sum(cache_read_tokens), "
                "sum(cache_write_tokens), sum(coalesce(cost_micros, 0)), sum(cost_micros IS NULL) FROM usage_reports "
                "INDEXED BY usage_reports_counted_at WHERE counts = 1 AND created_at >= ? AND created_at < ? "
                "GROUP BY 1", (since, since[:10] + "T99")).fetchall()
        for key, *figures in rows:
            have = sums.setdefault(key, [0] * 7)
            for i, value in enumerate(figures):
                have[i] += value or 0
        totals = sorted((_total(by, key, figures) for key, figures in sums.items()),
                        key=lambda t: (t.key is None, t.key or ""))
        held_row = conn.execute("SELECT value FROM meta WHERE key = ?", (_HELD_KEY,)).fetchone()
        (counted,) = one_row(conn.execute("SELECT coalesce(sum(runs), 0) FROM usage_totals WHERE by = 'day'"))
        spending = _spending(conn, now, tasks) if now is not None else None
    return UsageFigures(totals, int(held_row[0]) - counted if held_row else 0, spending)


def _total(by: str, key: str, figures: list[int] | tuple[int, ...]) -> Total:
    runs, tokens_in, tokens_out, cache_read, cache_write, micros, unpriced = figures
    return total_of(by, None if by == "model" and key == "" else key, runs=runs, tokens_in=tokens_in,
                    tokens_out=tokens_out, cache_read_tokens=cache_read, cache_write_tokens=cache_write,
                    priced_micros=micros, unpriced_runs=unpriced)


def _grouped(conn: apsw.Connection, by: str, sql: str, args: tuple[Any, ...]) -> tuple[Total, ...]:
    return tuple(_total(by, key, figures) for key, *figures in conn.execute(sql, args))


def _spending(conn: apsw.Connection, now: str, tasks: bool) -> Spending:
    day, month = now[:10], now[:7]
    agents = _grouped(conn, "agent", f"SELECT key, {_SUMS} FROM usage_totals WHERE by = 'agent' AND day = ? "
                                     "GROUP BY key ORDER BY key", (day,))
    per_task = _grouped(conn, "task", f"SELECT key, {_SUMS} FROM usage_totals WHERE by = 'task' GROUP BY key "
                                      "ORDER BY key", ()) if tasks else ()
    row = one_row(conn.execute(f"SELECT {_SUMS} FROM usage_totals WHERE by = 'day' AND day BETWEEN ? AND ?",
                               (month + "-01", month + "-31")))
    return Spending(day=day, month=month, agents_today=agents, tasks=per_task,
                    palace_month=_total("month", month, tuple(v or 0 for v in row)))



class UsageReads(ReadSet):
    """The usage's reads on the async store (``store.reads(UsageReads)``), on a reader thread."""

    usage = StoreRead(read_usage)


#: the usage's part of the store (parts.py)
PART: Final = StorePart(PART_NAME, stored=event_stored, settle=settle, agents_changed=rejudge_agents,
                        opened=ensure_judged)
