"""Write batches: many write jobs, one transaction, one fsync (group commit), and what they commit.

Owns: ``write_batch`` (a savepoint per job, so a job that raises fails alone; re-runs after SQLite
rolled the whole transaction back by itself), ``WriteContext`` (everything a job may write, through
writes.py, apply.py and imports.py), the origins row of our chain written once per batch, and the
committed-signed cache (``store._recent``) that lets replication push new events without reading
them back. Writer thread only, except ``committed_signed`` (any thread).

Nothing is acknowledged before the commit returns: an apsw error on commit fails the whole batch
as ``StoreError`` (``DiskFullError`` when the disk is full), and the chain goes back to what is
committed.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import apsw

from palace_proto.agents import AgentRecord
from palace_proto.envelope import CommittedEvent, SignedEvent
from palace_proto.ids import artifact_id_for_sha256
from palace_proto.sync import OriginHead
from palace_proto.validation import AppendRequest

from .apply import ApplyReport, apply_remote
from .errors import StoreError, TransactionLost, job_failure, write_error
from .imports import import_history
from .queries import correlation_events, event_by_id, events_of_types_after_seq, events_of_types_since, latest_seq_of_types
from .writes import append_event, append_system, put_artifact, redact

if TYPE_CHECKING:
    from .store import Store

__all__ = ["WriteBatchResult", "WriteContext", "write_batch"]

_LOGGER: Final = logging.getLogger("palaced.store")

# Why 3: each re-run drops the job that lost the transaction; more such jobs in one batch means the
# disk is failing for everyone, and the rest of the batch is better failed than run again and again.
_MAX_BATCH_RERUNS: Final = 3


@dataclass(slots=True)
class WriteBatchResult:
    """Outcome of one write batch: per-job results (value or exception) and the new events."""

    outcomes: list[tuple[bool, Any]] = field(default_factory=list)
    events: list[CommittedEvent] = field(default_factory=list)
    #: ids of events whose bodies this batch purged (the bus scrubs them from its ring)
    purged: list[str] = field(default_factory=list)


class WriteContext:
    """What a write job may do inside the batch transaction (handed to each job callable)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.new_events: list[CommittedEvent] = []
        #: ids of events whose bodies were purged by this batch's jobs
        self.purged: list[str] = []

    @property
    def conn(self) -> apsw.Connection:
        return self._store._conn

    def append(self, req: AppendRequest) -> dict[str, Any]:
        return append_event(self._store, req, self.new_events)

    def append_system(self, req: AppendRequest) -> dict[str, Any]:
        """A registry event of the daemon's own (``writes.append_system``)."""
        return append_system(self._store, req, self.new_events)

    def agent_record(self, agent: str) -> AgentRecord | None:
        """``agent``'s registry record as this transaction sees it."""
        return self._store.agents.record_of(self._store, agent)

    def put_artifact(self, **kwargs: Any) -> dict[str, Any]:
        return put_artifact(self._store, **kwargs)

    def get_event(self, event_id: str) -> dict[str, Any] | None:
        return event_by_id(self.conn, event_id)

    def correlation_events(self, correlation_id: str) -> list[dict[str, Any]]:
        return correlation_events(self.conn, correlation_id)

    def lease_events(self, types: Sequence[str], since_created_at: str, stream: str | None,
                     limit: int) -> list[dict[str, Any]]:
        return events_of_types_since(self.conn, types, since_created_at, stream, limit)

    def lease_events_after(self, types: Sequence[str], after_seq: int, limit: int) -> list[dict[str, Any]]:
        return events_of_types_after_seq(self.conn, types, after_seq, limit)

    def lease_seq(self, types: Sequence[str]) -> int:
        return latest_seq_of_types(self.conn, types)

    def redact(self, event_id: str, redact_event_id: str) -> None:
        redact(self._store, event_id, redact_event_id)
        self.purged.append(event_id)

    def put_verified_artifact(self, *, sha256: str, kind: str, created_by: str, created_at: str,
                              metadata_json: str, content: bytes) -> None:
        """Store an artifact that arrived from a peer (the caller checked the sha256)."""
        if hashlib.sha256(content).hexdigest() != sha256:
            raise StoreError("artifact content does not match its sha256")
        self.conn.execute(
            "INSERT INTO artifacts (id, sha256, kind, size_bytes, content, created_by, created_at, metadata) "
            "VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(sha256) DO NOTHING",
            (artifact_id_for_sha256(sha256), sha256, kind, len(content), content, created_by, created_at, metadata_json),
        )

    def save_bindings(self, bindings: Sequence[tuple[str, bytes, bytes | None]]) -> None:
        """Keep (origin, certificate PEM, proof) bindings; a proof fills in one stored without."""
        self.conn.executemany(
            "INSERT INTO bindings (origin, certificate, proof) VALUES (?, ?, ?) ON CONFLICT(origin) DO UPDATE "
            "SET proof=excluded.proof WHERE bindings.proof IS NULL AND excluded.proof IS NOT NULL", bindings)

    def import_history(self, events: Sequence[SignedEvent], keys: Mapping[str, bytes]) -> dict[str, Any]:
        """Store verified events of other palaces (or of this one's past) as history."""
        result = import_history(self._store, events, keys)
        self.new_events.extend(result.pop("stored"))
        return result

    def apply_remote(self, events: Sequence[SignedEvent], key_for: Callable[[str, int], bytes | None],
                     source: str | None = None, on_applied: Callable[[SignedEvent], None] | None = None,
                     verified_keys: Sequence[bytes | None] | None = None,
                     may_redact: Callable[[SignedEvent, str], bool] | None = None) -> ApplyReport:
        """Verify and store peer events; ``on_applied`` sees each stored event before the next is
        judged (a revocation earlier in a batch governs the rest of it)."""
        report = apply_remote(self._store, events, key_for, source, on_applied, verified_keys, may_redact)
        self.new_events.extend(report.applied)
        self.purged.extend(report.purged)
        return report


def write_batch(store: Store, jobs: Sequence[Callable[[WriteContext], Any]]) -> WriteBatchResult:
    """Run write jobs in one transaction (group commit): one fsync for the whole batch.

    Each job runs in its own savepoint. A job that raises is rolled back alone and its exception
    becomes its outcome, while the others commit: a rule it breaks (``ValidationError``,
    ``NotFound``, any ``ApiError``) as it is, a full disk while its rows are written as
    ``DiskFullError``, anything else (a constraint error, a bug) as ``internal``, logged. After
    some errors (SQLITE_FULL while spilling pages, an I/O error) SQLite rolls the whole
    transaction back by itself: then the batch runs again without that job (jobs must only
    write through ``ctx``, so running one again after its first run was discarded is the same
    as running it once). The commit happens once; nothing is acknowledged before it returns.

    Raises:
        DiskFullError: the disk is full and the commit failed: no job of the batch was written.
        StoreError: the same for any other database error.
    """
    failed: dict[int, tuple[bool, Any]] = {}
    running = list(range(len(jobs)))
    for _ in range(_MAX_BATCH_RERUNS + 1):
        try:
            result = _run_batch(store, [jobs[i] for i in running])
        except TransactionLost as lost:
            culprit = running.pop(lost.index)
            failed[culprit] = (False, job_failure(store.path, store._conn, lost.cause or lost))
            continue
        outcomes = dict(zip(running, result.outcomes, strict=True)) | failed
        result.outcomes = [outcomes[i] for i in range(len(jobs))]
        return result
    raise StoreError(f"could not commit to {store.path}: the transaction was rolled back "
                     f"{_MAX_BATCH_RERUNS + 1} times in one batch")


def _run_batch(store: Store, jobs: Sequence[Callable[[WriteContext], Any]]) -> WriteBatchResult:
    """One try of ``write_batch``. Raises ``TransactionLost`` naming the job after which SQLite
    had rolled the whole transaction back."""
    conn = store._conn
    result = WriteBatchResult()
    ctx = WriteContext(store)
    saved_chain = (store._origin_seq, store._head_hash)
    try:
        _leave_stuck_transaction(store)
        conn.execute("SAVEPOINT palace_batch")
        # A job alone in its batch needs no savepoint of its own: the batch's is its own.
        job_savepoint = "palace_job" if len(jobs) > 1 else "palace_batch"
        for index, job in enumerate(jobs):
            before = (store._origin_seq, store._head_hash, len(ctx.new_events), len(ctx.purged),
                      len(store._batch_registry), len(store._batch_heads))
            if job_savepoint == "palace_job":
                conn.execute("SAVEPOINT palace_job")
            try:
                value = job(ctx)
            except Exception as exc:
                store._origin_seq, store._head_hash = before[0], before[1]
                del ctx.new_events[before[2]:]
                del ctx.purged[before[3]:]
                del store._batch_registry[before[4]:]
                del store._batch_heads[before[5]:]
                # in_transaction is sqlite3_get_autocommit: SQLite's documented (and only) way
                # to learn that an error made it roll the whole transaction back.
                if not conn.in_transaction:
                    raise TransactionLost(index, exc) from exc
                conn.execute(f"ROLLBACK TO {job_savepoint}")
                if job_savepoint == "palace_job":
                    conn.execute("RELEASE palace_job")
                result.outcomes.append((False, job_failure(store.path, conn, exc)))
                continue
            if not conn.in_transaction:  # the job swallowed an error after which SQLite rolled back
                raise TransactionLost(index, None)
            if job_savepoint == "palace_job":
                conn.execute("RELEASE palace_job")
            result.outcomes.append((True, value))
        if store._origin_seq != saved_chain[0]:
            conn.execute("UPDATE origins SET max_seq=?, head_hash=? WHERE origin=?",
                         (store._origin_seq, store._head_hash, store.origin_id))
            store._batch_heads.append((store.origin_id, OriginHead(store._origin_seq, store._head_hash)))
        conn.execute("RELEASE palace_batch")  # the commit, and its fsync
    except BaseException as exc:
        store._batch_registry.clear()
        store._batch_heads.clear()
        # Nothing of the batch is in the database: the chain goes back to what is committed, so
        # the next append reuses neither a sequence number nor leaves a gap.
        store._origin_seq, store._head_hash = saved_chain
        _leave_stuck_transaction(store, quiet=True)
        if isinstance(exc, (apsw.Error, OSError)):
            raise write_error(store.path, conn, exc) from exc
        raise
    result.events = ctx.new_events
    result.purged = ctx.purged
    registry, store._batch_registry = store._batch_registry, []
    store.agents.after_commit(conn, ctx.new_events, registry)
    if ctx.purged:  # a body purged in the batch that stored it: its record must not carry it on
        targets = set(ctx.purged)
        for record in ctx.new_events:
            if record.signed.id in targets:
                record.redact()
    if store._batch_heads:  # the committed vector, replaced whole: readers on any thread see one or the other
        store._heads = {**store._heads, **dict(store._batch_heads)}
        store._batch_heads = []
    return result


def _leave_stuck_transaction(store: Store, *, quiet: bool = False) -> None:
    """Make sure the writer connection is outside any transaction. A failed COMMIT (e.g.
    SQLITE_FULL while writing the WAL) leaves the transaction open; a batch begun inside it
    would commit the failed batch's rows along with its own."""
    conn = store._conn
    if not conn.in_transaction:
        return
    try:
        conn.execute("ROLLBACK")
    except apsw.Error as exc:
        if not quiet:
            raise write_error(store.path, conn, exc) from exc
        _LOGGER.warning("could not roll back a failed write batch: %s (retried before the next batch)", exc)
