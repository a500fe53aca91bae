"""What every stored event updates besides its own row: the agent activity count and the task threads.

Owns: the statements that keep ``agent_activity`` (schema 0008: events, first and last time per
agent and origin) and ``task_threads`` (schema 0009: one row per task; a finished task unsettled
when anything new happens on it) in step with ``events``. Triggers did this until schema 0010; they
cost every insert a trigger sub-program whether or not it concerned the event (issue 27), so the
one insert path (``writes.insert_event``: local appends, peers' events, imports) calls
``event_stored`` instead, in the same transaction. The statements are the triggers' own, with the
same conditions, so the tables read exactly as before. Writer thread only, inside a batch.
"""

from __future__ import annotations

from typing import Final

import apsw

from palace_proto.agents import REGISTRY_TYPES
from palace_proto.envelope import SignedEvent

__all__ = ["event_stored"]

_COUNT_ACTIVITY: Final = (
    "INSERT INTO agent_activity (from_agent, origin, events, first_at, last_at) VALUES (?1, ?2, 1, ?3, ?3) "
    "ON CONFLICT (from_agent, origin) DO UPDATE SET events = events + 1, "
    "first_at = min(first_at, excluded.first_at), last_at = max(last_at, excluded.last_at)")
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


def event_stored(conn: apsw.Connection, ev: SignedEvent, seq: int) -> None:
    """``ev`` was just inserted as local ``seq``: count it, and follow its task (if any)."""
    conn.execute(_COUNT_ACTIVITY, (ev.from_agent, ev.origin, ev.created_at))
    if ev.type == "task.request":
        conn.execute(_FOLLOW_REQUEST, (ev.correlation_id, ev.id, seq))
    elif ev.correlation_id is not None:
        conn.execute(_FOLLOW_THREAD, (ev.correlation_id,))
    if ev.type in REGISTRY_TYPES:
        conn.execute(_UNSETTLE_AGENT, (ev.metadata_json,))
