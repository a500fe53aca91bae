"""The tasks' part of the store: which tasks to derive, and how a local write on a task is judged.

Owns: the ``task_threads`` table (schema 0009: one row per task; a finished task unsettled when
anything new happens on it), kept in step with ``events`` in the transaction of each insert
(``stored``, with the statements the triggers had until schema 0010: issue 27); the tasks worth
deriving (``tasks_to_derive``: the newest requests, then the unsettled ones however old, with their
events) and recording the tasks derived as finished (``settle``), so they are not derived again
until an event on them arrives; and ``judge``, the authority table on a local write whose rule's
subject is a task (``palace_proto.tasks.derive_task`` over the correlation's events, the new event
appended as a draft). What a task's state is stays palace_proto.tasks's business; this table only
says which finished tasks changed since. ``PART`` declares it to the store (parts.py); ``TaskReads``
offers its reads to the event loop. Reads on the calling thread's reader; the writes are a write
job's (writer thread, inside a batch).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Final, NamedTuple

from palace_proto.authority import Rule
from palace_proto.envelope import SignedEvent
from palace_proto.event_fields import PublicEvent
from palace_proto.identity import REGISTRY_TYPES
from palace_proto.tasks import REQUEST, derive_task
from palace_proto.validation import AppendRequest

from .authority import daemon_of
from .fetch import all_rows
from .parts import StorePart
from .queries import correlation_events
from .reads import ReadSet, StoreRead

if TYPE_CHECKING:
    from .queries import Reads
    from .state import WriteContext

__all__ = ["PART", "TaskReads", "TaskThread", "judge", "settle", "tasks_to_derive", "unsettle_agents"]

# A request adds its task, or unsettles it (a second request on one correlation).
_FOLLOW_REQUEST: Final = (
    "INSERT INTO task_threads (correlation_id, request_seq) VALUES (coalesce(?1, ?2), ?3) "
    "ON CONFLICT (correlation_id) DO UPDATE SET settled_seq = NULL WHERE settled_seq IS NOT NULL")
# Any other event on a settled task unsettles it (a reply can reopen a finished task).
_FOLLOW_THREAD: Final = (
    "UPDATE task_threads SET settled_seq = NULL WHERE correlation_id = ?1 AND settled_seq IS NOT NULL")
# A registry event unsettles every task its agent wrote on (its impersonation verdicts may change).
_UNSETTLE_AGENT: Final = (
    "UPDATE task_threads SET settled_seq = NULL WHERE json_valid(?1) AND settled_seq IS NOT NULL "
    "AND correlation_id IN (SELECT correlation_id FROM events WHERE from_agent = json_extract(?1, '$.agent') "
    "AND correlation_id IS NOT NULL)")


class TaskThread(NamedTuple):
    correlation_id: str
    #: recorded as finished, and nothing happened on it since (``settle``)
    settled: bool
    events: list[PublicEvent]

    @property
    def newest_seq(self) -> int:
        """The local seq of the newest event read on the task (what ``settle`` is told)."""
        return max((e["seq"] for e in self.events), default=0)


def tasks_to_derive(reads: Reads, newest: int, unsettled: int) -> tuple[list[TaskThread], bool]:
    """The ``newest`` tasks by request, then up to ``unsettled`` older tasks not known to be
    finished (newest first), each with every event on it; and whether unsettled tasks were left
    out (more than ``unsettled`` of them are older than the newest requests)."""
    conn = reads.db.reader()
    columns = "correlation_id, settled_seq IS NOT NULL, request_seq"
    rows = all_rows(conn.execute(f"SELECT {columns} FROM task_threads ORDER BY request_seq DESC LIMIT ?", (newest,)))
    capped = False
    if len(rows) == newest:
        older = all_rows(conn.execute(
            f"SELECT {columns} FROM task_threads INDEXED BY task_threads_unsettled "
            "WHERE settled_seq IS NULL AND request_seq < ? ORDER BY request_seq DESC LIMIT ?",
            (rows[-1][2], unsettled + 1)))
        capped = len(older) > unsettled
        rows += older[:unsettled]
    return [TaskThread(cid, bool(settled), correlation_events(conn, cid)) for cid, settled, _ in rows], capped


def settle(ctx: WriteContext, finished: Iterable[tuple[str, int]]) -> int:
    """Record tasks derived as finished from their events up to a local seq (a write job's step);
    how many rows moved. A task with an event newer than that stays unsettled (it may have
    reopened since the read)."""
    conn = ctx.conn
    moved = 0
    for correlation_id, seen_seq in finished:
        conn.execute("UPDATE task_threads SET settled_seq=? WHERE correlation_id=? AND settled_seq IS NULL "
                     "AND NOT EXISTS (SELECT 1 FROM events WHERE correlation_id=? AND seq > ?)",
                     (seen_seq, correlation_id, correlation_id, seen_seq))
        moved += conn.changes()
    return moved


def stored(ctx: WriteContext, ev: SignedEvent, seq: int) -> None:
    """``ev`` was just inserted as local ``seq``: follow its task (if any)."""
    conn = ctx.conn
    if ev.type == REQUEST:
        conn.execute(_FOLLOW_REQUEST, (ev.correlation_id, ev.id, seq))
    elif ev.correlation_id is not None:
        conn.execute(_FOLLOW_THREAD, (ev.correlation_id,))
    if ev.type in REGISTRY_TYPES:
        conn.execute(_UNSETTLE_AGENT, (ev.metadata_json,))


def unsettle_agents(ctx: WriteContext, agents: Iterable[str]) -> None:
    """Derive again every task these agents wrote on: the verdicts on their events changed (the
    registry was derived anew; a registry event itself does this as it is stored)."""
    conn = ctx.conn
    for agent in sorted(agents):
        conn.execute("UPDATE task_threads SET settled_seq = NULL WHERE settled_seq IS NOT NULL AND correlation_id IN "
                     "(SELECT correlation_id FROM events WHERE from_agent=? AND correlation_id IS NOT NULL)", (agent,))


def judge(ctx: WriteContext, req: AppendRequest, rule: Rule, draft: PublicEvent) -> str | None:
    """Why this daemon may not write ``req`` on its task (None: it may), in the words
    ``palace_proto.tasks.derive_task`` flags it with on every replica. A rule of another feature
    judged on a task (a usage report, an approval) must name an existing one."""
    own = rule.name.startswith("task.")
    cid = req.correlation_id
    if not cid:
        return None if own else f"{rule.name} must refer to {rule.refers_to}: give its correlation_id"
    now = str(draft["created_at"])
    events = ctx.agents.annotate(correlation_events(ctx, cid))
    view = derive_task(cid, [*events, draft], now=now, daemon_of=lambda origin: daemon_of(ctx, origin))
    if view is None:
        return None if own else f"{rule.name} must refer to an existing task: no request on {cid} here"
    if req.type == REQUEST and view["request"]["id"] == draft["id"] and len(view["requests"]) == 1:
        return None  # the request that opens the task
    for flag in view["out_of_role"]:
        if flag["event_id"] == draft["id"]:
            return str(flag["why"])
    return None


class TaskReads(ReadSet):
    """The tasks' reads on the async store (``store.reads(TaskReads)``), each on a reader thread."""

    tasks_to_derive = StoreRead(tasks_to_derive)


#: the tasks' part of the store (parts.py)
PART: Final = StorePart("tasks", stored=stored, agents_changed=unsettle_agents, judges={"task": judge})
