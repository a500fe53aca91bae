"""Write batches: many write jobs, one transaction, one fsync (group commit), and what they commit.

Owns: ``write_batch`` (a savepoint per job, so a job that raises fails alone; re-runs after SQLite
rolled the whole transaction back by itself; a new ``Batch`` for each try, state.py), what the
store parts settle before the commit, and our chain's head moved in the committed vector once per
batch (in memory only: the origins row of our own origin is caught up when the store opens,
schema 0015). Writer thread only.

Nothing is acknowledged before the commit returns: an apsw error on commit fails the whole batch
as ``StoreError`` (``DiskFullError`` when the disk is full), and the chain goes back to what is
committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import apsw

from palace_proto.envelope import CommittedEvent
from palace_proto.sync import OriginHead

from .errors import StoreError, TransactionLost, job_failure, write_error
from .state import Batch, WriteContext

__all__ = ["WriteBatchResult", "write_batch"]

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
            # Our head goes to the vector in memory; the origins row is not written (a page less in
            # every commit: schema 0015), the store reads the head from the chain when it opens.
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
