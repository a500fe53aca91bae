"""Write batches: many write jobs, one transaction, one fsync (group commit), and what they commit.

Owns: ``write_batch`` (a savepoint per job, so a job that raises fails alone; re-runs after SQLite
rolled the whole transaction back by itself), ``Batch`` (what a running batch accumulates: the
records of the events it stored, the bodies it purged, its registry events and the heads it
moved, with the ``mark``/``rewind`` a failed job goes back with), ``WriteContext`` (everything a
job may write, through writes.py, apply.py and imports.py), and the origins row of our chain
written once per batch. Writer thread only.

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

from palace_proto.identity import AgentRecord
from palace_proto.envelope import CommittedEvent, SignedEvent
from palace_proto.ids import artifact_id_for_sha256
from palace_proto.sync import OriginHead
from palace_proto.validation import AppendRequest, Limits

from .apply import ApplyReport, Refusals, apply_remote
from .errors import StoreError, TransactionLost, job_failure, write_error
from .imports import import_history
from .queries import correlation_events, event_by_id, events_of_types_after_seq, latest_seq_of_types
from .writes import append_event, append_system, put_artifact, redact

if TYPE_CHECKING:
    from .identity import AgentRegistry
    from .chain import Chain
    from .db import Db
    from .origins import Vector
    from .parts import StoreParts
    from .wal import Wal

__all__ = ["Batch", "WriteBatchResult", "WriteContext", "write_batch"]

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


class Batch:
    """What one try of a write batch accumulated, and our chain as it grew: all of it is the
    batch's until the commit, and dropped with it if the commit fails. A job that fails goes
    back to its ``mark`` (``rewind``)."""

    __slots__ = ("chain", "events", "heads", "purged", "registry", "touched")

    def __init__(self, chain: Chain) -> None:
        self.chain = chain
        #: the records of the events stored, in order (the bus gets them once committed)
        self.events: list[CommittedEvent] = []
        #: ids of events whose bodies were purged
        self.purged: list[str] = []
        #: the registry events stored (agents.py counts them at once, and for good at the commit)
        self.registry: list[SignedEvent] = []
        #: the heads moved, in order (the committed ``Vector`` takes them at the commit)
        self.heads: list[tuple[str, OriginHead]] = []
        #: what each store part noted for settling before the commit, by the part's name (parts.py:
        #: the tasks whose usage reports may count differently now...); not rewound: settling is
        #: idempotent
        self.touched: dict[str, set[str]] = {}

    def __repr__(self) -> str:
        return f"<Batch events={len(self.events)} purged={len(self.purged)} chain={self.chain.seq}>"

    def mark(self) -> tuple[int, bytes, int, int, int, int]:
        """Where the batch and our chain stand (before a job runs)."""
        chain = self.chain
        return (chain.seq, chain.head_hash, len(self.events), len(self.purged), len(self.registry),
                len(self.heads))

    def rewind(self, mark: tuple[int, bytes, int, int, int, int]) -> None:
        """Drop everything added since ``mark`` (the job's savepoint was rolled back)."""
        self.chain.seq, self.chain.head_hash = mark[0], mark[1]
        del self.events[mark[2]:]
        del self.purged[mark[3]:]
        del self.registry[mark[4]:]
        del self.heads[mark[5]:]


class WriteContext:
    """What a write job may do inside the batch transaction (handed to each job callable), and
    the state the store's write modules share: the writer connection (``conn``), our ``chain``,
    the running ``batch``, the agent registry, the committed ``vector``, the ``wal``'s pending
    purge, what was refused from peers (``refusals``) and the features' ``parts`` of the store.
    One per store; writer thread only.
    """

    def __init__(self, db: Db, chain: Chain, agents: AgentRegistry, vector: Vector, wal: Wal, limits: Limits,
                 refusals: Refusals, parts: StoreParts) -> None:
        self.path = db.path
        self.conn: apsw.Connection = db.writer
        self.chain = chain
        self.agents = agents
        self.vector = vector
        self.wal = wal
        self.limits = limits
        self.refusals = refusals
        #: what the features keep in the store beside the log, moved in each write (parts.py)
        self.parts = parts
        #: the batch being written (a new one for each try of ``write_batch``)
        self.batch = Batch(chain)
        #: whether commits wait for their fsync now (``synchronous=FULL``, as schema.connect sets it)
        self.durable_commits = True

    def __repr__(self) -> str:
        return f"<WriteContext {self.path} {self.batch!r}>"

    def append(self, req: AppendRequest) -> dict[str, Any]:
        return append_event(self, req)

    def append_system(self, req: AppendRequest) -> dict[str, Any]:
        """A registry event of the daemon's own (``writes.append_system``)."""
        return append_system(self, req)

    def agent_record(self, agent: str) -> AgentRecord | None:
        """``agent``'s registry record as this transaction sees it."""
        return self.agents.record_of(self, agent)

    def put_artifact(self, **kwargs: Any) -> dict[str, Any]:
        return put_artifact(self, **kwargs)

    def get_event(self, event_id: str) -> dict[str, Any] | None:
        return event_by_id(self.conn, event_id)

    def correlation_events(self, correlation_id: str) -> list[dict[str, Any]]:
        return correlation_events(self.conn, correlation_id)

    def events_of_types_after(self, types: Sequence[str], after_seq: int, limit: int) -> list[dict[str, Any]]:
        """The first ``limit`` events of ``types`` after local ``after_seq``, in this transaction."""
        return events_of_types_after_seq(self.conn, types, after_seq, limit)

    def latest_seq_of_types(self, types: Sequence[str]) -> int:
        """The seq of the newest event of one of ``types`` (0 if none), in this transaction."""
        return latest_seq_of_types(self.conn, types)

    def redact(self, event_id: str, redact_event_id: str) -> None:
        redact(self, event_id, redact_event_id)
        self.batch.purged.append(event_id)

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
        result = import_history(self, events, keys)
        self.batch.events.extend(result.pop("stored"))
        return result

    def apply_remote(self, events: Sequence[SignedEvent], key_for: Callable[[str, int], bytes | None],
                     source: str | None = None, on_applied: Callable[[SignedEvent], None] | None = None,
                     verified_keys: Sequence[bytes | None] | None = None,
                     may_redact: Callable[[SignedEvent, str], bool] | None = None) -> ApplyReport:
        """Verify and store peer events; ``on_applied`` sees each stored event before the next is
        judged (a revocation earlier in a batch governs the rest of it)."""
        report = apply_remote(self, events, key_for, source, on_applied, verified_keys, may_redact)
        batch = self.batch
        batch.events.extend(report.applied)
        batch.purged.extend(report.purged)
        return report


def write_batch(ctx: WriteContext, jobs: Sequence[Callable[[WriteContext], Any]], *,
                durable: bool = True) -> WriteBatchResult:
    """Run write jobs in one transaction (group commit): one fsync for the whole batch.

    ``durable=False``: the commit does not wait for its fsync (``synchronous=NORMAL`` for this
    transaction): only for derived data a crash may lose and the daemon redoes (the text index, the
    activity counts).
    The next durable commit's fsync covers it (the WAL is synced as a whole, in order), and a
    power cut before that loses the whole transaction, never part of it.

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
            result = _run_batch(ctx, [jobs[i] for i in running], durable)
        except TransactionLost as lost:
            culprit = running.pop(lost.index)
            failed[culprit] = (False, job_failure(ctx.path, ctx.conn, lost.cause or lost))
            continue
        outcomes = dict(zip(running, result.outcomes, strict=True)) | failed
        result.outcomes = [outcomes[i] for i in range(len(jobs))]
        return result
    raise StoreError(f"could not commit to {ctx.path}: the transaction was rolled back "
                     f"{_MAX_BATCH_RERUNS + 1} times in one batch")


def _run_batch(ctx: WriteContext, jobs: Sequence[Callable[[WriteContext], Any]],
               durable: bool = True) -> WriteBatchResult:
    """One try of ``write_batch``. Raises ``TransactionLost`` naming the job after which SQLite
    had rolled the whole transaction back."""
    conn = ctx.conn
    chain = ctx.chain
    result = WriteBatchResult()
    batch = ctx.batch = Batch(chain)
    committed_chain = (chain.seq, chain.head_hash)  # chain.mark(), written out: once per batch
    try:
        _leave_stuck_transaction(ctx)
        if durable is not ctx.durable_commits:
            # Set before the transaction (SQLite's rule), and set back by the next durable batch
            # whatever became of this one: no durable batch ever commits without its fsync.
            conn.execute("PRAGMA synchronous=FULL" if durable else "PRAGMA synchronous=NORMAL")
            ctx.durable_commits = durable
        conn.execute("SAVEPOINT palace_batch")
        # A job alone in its batch needs no savepoint of its own: the batch's is its own.
        job_savepoint = "palace_job" if len(jobs) > 1 else "palace_batch"
        for index, job in enumerate(jobs):
            mark = batch.mark()
            if job_savepoint == "palace_job":
                conn.execute("SAVEPOINT palace_job")
            try:
                value = job(ctx)
            except Exception as exc:
                batch.rewind(mark)
                # in_transaction is sqlite3_get_autocommit: SQLite's documented (and only) way
                # to learn that an error made it roll the whole transaction back.
                if not conn.in_transaction:
                    raise TransactionLost(index, exc) from exc
                conn.execute(f"ROLLBACK TO {job_savepoint}")
                if job_savepoint == "palace_job":
                    conn.execute("RELEASE palace_job")
                result.outcomes.append((False, job_failure(ctx.path, conn, exc)))
                continue
            if not conn.in_transaction:  # the job swallowed an error after which SQLite rolled back
                raise TransactionLost(index, None)
            if job_savepoint == "palace_job":
                conn.execute("RELEASE palace_job")
            result.outcomes.append((True, value))
        # What the store parts derive (which usage reports count, and their totals...) moves in
        # the transaction of the events that moved it: a reader never sees one without the other.
        for settle in ctx.parts.settle:
            settle(ctx)
        if chain.seq != committed_chain[0]:
            conn.execute("UPDATE origins SET max_seq=?, head_hash=? WHERE origin=?",
                         (chain.seq, chain.head_hash, chain.origin))
            batch.heads.append((chain.origin, OriginHead(chain.seq, chain.head_hash)))
        conn.execute("RELEASE palace_batch")  # the commit, and its fsync
    except BaseException as exc:
        # Nothing of the batch is in the database: the chain goes back to what is committed, so
        # the next append reuses neither a sequence number nor leaves a gap (the batch's registry
        # events and heads go with it).
        chain.rewind(committed_chain)
        _leave_stuck_transaction(ctx, quiet=True)
        if isinstance(exc, (apsw.Error, OSError)):
            raise write_error(ctx.path, conn, exc) from exc
        raise
    result.events = batch.events
    result.purged = batch.purged
    ctx.agents.after_commit(conn, batch.events, batch.registry)
    if batch.purged:  # a body purged in the batch that stored it: its record must not carry it on
        targets = set(batch.purged)
        for record in batch.events:
            if record.signed.id in targets:
                record.redact()
    if batch.heads:  # the committed vector, replaced whole: readers on any thread see one or the other
        vector = ctx.vector
        vector.heads = {**vector.heads, **dict(batch.heads)}
    return result


def _leave_stuck_transaction(ctx: WriteContext, *, quiet: bool = False) -> None:
    """Make sure the writer connection is outside any transaction. A failed COMMIT (e.g.
    SQLITE_FULL while writing the WAL) leaves the transaction open; a batch begun inside it
    would commit the failed batch's rows along with its own."""
    conn = ctx.conn
    if not conn.in_transaction:
        return
    try:
        conn.execute("ROLLBACK")
    except apsw.Error as exc:
        if not quiet:
            raise write_error(ctx.path, conn, exc) from exc
        _LOGGER.warning("could not roll back a failed write batch: %s (retried before the next batch)", exc)
