"""Which tasks to derive: the newest requests and every task not known to be finished.

Owns: the ``task_threads`` table (schema 0009). follow.py keeps one row per task and unsettles a
finished task when anything new happens on it; this module reads the tasks worth deriving
(``tasks_to_derive``: the newest requests, then the unsettled ones however old) with their
events, and records the tasks derived as finished (``settle``), so they are not derived again
until an event on them arrives. What a task's state is stays palace_proto.tasks's business; this
table only says which finished tasks changed since. Reads on the calling thread's reader; the
writes are a write job's (writer thread, inside a batch): ``settle`` takes its ``WriteContext``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

import apsw

from .queries import correlation_events

if TYPE_CHECKING:
    from .batch import WriteContext
    from .queries import Reads

__all__ = ["TaskThread", "settle", "tasks_to_derive", "unsettle_agents"]


class TaskThread(NamedTuple):
    correlation_id: str
    #: recorded as finished, and nothing happened on it since (``settle``)
    settled: bool
    events: list[dict[str, Any]]

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
    rows = conn.execute(f"SELECT {columns} FROM task_threads ORDER BY request_seq DESC LIMIT ?", (newest,)).fetchall()
    capped = False
    if len(rows) == newest:
        older = conn.execute(
            f"SELECT {columns} FROM task_threads INDEXED BY task_threads_unsettled "
            "WHERE settled_seq IS NULL AND request_seq < ? ORDER BY request_seq DESC LIMIT ?",
            (rows[-1][2], unsettled + 1)).fetchall()
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


def unsettle_agents(conn: apsw.Connection, agents: Iterable[str]) -> None:
    """Derive again every task these agents wrote on: the verdicts on their events changed (the
    registry was derived anew; a registry event does this through its trigger)."""
    for agent in agents:
        conn.execute("UPDATE task_threads SET settled_seq = NULL WHERE settled_seq IS NOT NULL AND correlation_id IN "
                     "(SELECT correlation_id FROM events WHERE from_agent=? AND correlation_id IS NOT NULL)", (agent,))
