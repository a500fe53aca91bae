"""The group-commit writer: the one way trio code writes to the store.

Owns: the queue of writes, the batches it commits, and answering them. The first write to arrive
while no commit runs becomes the batch's *leader*; it lets every task that is runnable at that
moment queue its write too (one scheduler pass), then commits the whole queue as one transaction
with one fsync and answers every write of it; writes that arrive meanwhile wait for the next
batch. Once the leader's own write is committed it hands the lead to the task of the next write
still queued, so no caller waits on writes that came after its own. Nobody is acknowledged before
the commit returns; watchers and peers waiting for the batch's events are woken before the
writers are answered, and run first. A short batch (the usual appends) commits in the event loop
itself: no thread hop on the way in or out, which is most of a lone append's latency; while it
commits, new requests gather in their sockets and form the next batch. Heavy writes (imports,
memory rebuilds, big artifacts, catch-up batches from peers) run on a worker thread, so the loop
keeps serving meanwhile; so does every batch for a while once commits keep taking longer than
``SLOW_COMMIT_S`` (a slow disk; one slow commit, a hiccup of a virtual disk, is not one).

The WAL is not the writer's: the WAL keeper (wal_keeper.py) is its ``Upkeep``. The writer tells
it about every commit (awaiting, before anyone is answered, the purge a redaction owes the WAL)
and about a batch the full disk failed, and gives it the slot between two batches it asks for
(``between_batches_due``); the keeper asks for a slot of its own, between batches, with
``maintain``.

What is on disk, and what a peer may be told of it: a batch committed with ``durable=False`` is
on disk once a ``sync`` (or a later durable commit) covers it. ``committed_heads`` is the version
vector as of the last batch counted in ``batches`` (what a ``sync`` called now covers), and
``durable_heads`` the one known to be on disk. A vector sent to a peer names ``durable_heads``, a
receipt what ``committed_heads`` held before the sync that precedes it; neither reads
``Store.heads`` (issue 43: read there after a sync, a vector named events committed while the sync
ran, and a batch committed but not yet counted, on its thread or while its redaction is purged
from the WAL, shows there too).

A failing write never stops the writer: a job that raises fails alone (store.write_batch), a batch
that cannot commit fails every job in it (a full disk is answered ``disk_full``, and the next
batch tries again). Must be the only writer of its store.
"""

from __future__ import annotations

import collections
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol, TypeVar

import trio

from palace_proto.envelope import CommittedEvent
from palace_proto.errors import ApiError
from palace_proto.sync import OriginHead

from .store import DiskFullError, Store, StoreError, WriteBatchResult, WriteContext

__all__ = ["HEAVY_ARTIFACT_BYTES", "Upkeep", "Writer"]

LOGGER: Final = logging.getLogger("palaced.store")
# Why 2048: how many writes may wait for a commit before ``write`` itself waits (backpressure on
# every client at once, instead of an unbounded queue).
MAX_QUEUED: Final = 2048
# Why 512: bounds a batch's transaction time (a few ms) so a burst cannot delay the first writer
# of the next batch by more than one batch.
MAX_BATCH: Final = 512
# Why 1 MiB: writing a bigger blob takes milliseconds; such writes commit on a thread (``heavy``).
HEAVY_ARTIFACT_BYTES: Final = 1 << 20
# Why 20 ms: a commit on a healthy disk takes about half a millisecond (an SSD's fsync, even a
# virtual disk's; a busy moment may take a few); one that takes 20 ms is a slow disk (an SD card, a
# spinning disk under load), and would hold the event loop (every connection, every peer) for as
# long each time, so batches go to a thread...
SLOW_COMMIT_S: Final = 0.02
# ...once this many commits within SLOW_WINDOW_S were that slow. Why 3 in 2 s: a virtual disk
# stalls a single fsync now and then (seen here: 20-40 ms, every few seconds under load), which
# says nothing about the next one, and a lone slow commit used to send every batch to a thread
# for seconds (a thread hop per batch: a lone append's latency doubled). A disk that is slow
# takes three slow commits in well under a second...
SLOW_COMMITS: Final = 3
SLOW_WINDOW_S: Final = 2.0
# ...for this long (then the loop tries again: the disk may have been busy).
SLOW_DISK_BACKOFF_S: Final = 10.0

#: what a write job returns (``write`` returns it once committed)
T = TypeVar("T")


class Upkeep(Protocol):
    """What the writer tells the WAL keeper, and the slot between batches it gives it."""

    async def purge(self) -> None:
        """A committed batch redacted a body (``store.wal.purge_pending``): push the old page images
        out of the WAL before anyone is answered."""

    def committed(self, outcomes: list[tuple[bool, Any]], *, derived: bool = False) -> None:
        """A batch committed with these outcomes (after ``purge``; nobody is answered yet);
        ``derived``: the batch wrote only data derived from the log (``write(derived=True)``)."""

    def batch_failed(self, error: DiskFullError, writes: int) -> None:
        """A batch of ``writes`` could not commit: the disk is full."""

    def between_batches_due(self) -> bool:
        """Whether the keeper wants the slot after this batch (cheap: it is asked after each one)."""

    async def between_batches(self) -> None:
        """The slot: the leader runs it before the next batch."""


class _Pending:
    """One queued write: its job, and (once its batch is committed) its outcome — or, while still
    queued, the lead handed to its task (``lead``)."""

    __slots__ = ("derived", "done", "durable", "heavy", "job", "lead", "ok", "value")

    def __init__(self, job: Callable[[WriteContext], Any], heavy: bool, durable: bool = True,
                 derived: bool = False) -> None:
        self.job = job
        self.heavy = heavy
        self.durable = durable
        self.derived = derived
        self.done = trio.Event()
        self.ok = False
        self.value: Any = None
        self.lead = False


class Writer:
    """Group-commits the write jobs of ``store`` (see the module docstring). ``on_committed`` gets
    the records of each batch's new events once committed, before its writes are answered, and
    returns whether it woke someone to run first (``EventBus.publish``); ``on_purged`` the ids of
    the bodies it purged, before anyone is answered."""

    def __init__(self, store: Store, upkeep: Upkeep, on_committed: Callable[[list[CommittedEvent]], bool | None],
                 on_purged: Callable[[list[str]], None] | None = None) -> None:
        self.store = store
        self._wal = store.wal
        self._upkeep = upkeep
        self._on_committed = on_committed
        self._on_purged = on_purged
        self._queue: collections.deque[_Pending] = collections.deque()
        self._room = trio.Semaphore(MAX_QUEUED)
        #: whether a task leads: commits what is queued (or runs maintenance, then commits); one at a time
        self.leading = False
        self._not_leading = trio.Event()
        #: writes are refused (shutdown)
        self.closed = False
        #: when the last batch was answered (monotonic seconds): the keeper's idle clock
        self.last_write = time.monotonic()
        #: until when batches commit on a thread because the disk was slow (monotonic seconds)
        self._slow_until = 0.0
        #: when the last few slow commits ended (monotonic seconds)
        self._slow_commits: collections.deque[float] = collections.deque(maxlen=SLOW_COMMITS)
        self.batches = 0
        self.writes = 0
        #: how many of the batches are known to be on disk: a durable commit syncs the WAL, so
        #: every batch before it too; ``sync`` for those committed with ``durable=False``
        self._synced = 0
        self._sync_lock = trio.Lock()
        #: set (and replaced) at each durable commit: ``sync`` waiting for one to cover its batches
        self._durable_commit = trio.Event()
        # The store's vector is replaced whole at each commit (batch.py), so holding one is holding
        # a snapshot. What the database held when it was opened counts as on disk.
        #: the version vector as of the last batch counted in ``batches``: what ``sync`` covers
        self.committed_heads: Mapping[str, OriginHead] = store.vector.heads
        #: the version vector known to be on disk: all a receipt or a vector may tell a peer
        self.durable_heads: Mapping[str, OriginHead] = store.vector.heads

    def __repr__(self) -> str:
        return f"<Writer {self.store.path} batches={self.batches} writes={self.writes} closed={self.closed}>"

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def slow_disk(self) -> bool:
        return time.monotonic() < self._slow_until

    async def write(self, job: Callable[[WriteContext], T], *, heavy: bool = False, durable: bool = True,
                    derived: bool = False) -> T:
        """Run ``job(ctx)`` in the next write batch; return its value once committed and fsynced.

        ``heavy``: the job may take long (many rows, big blobs): it is committed on a worker
        thread, in a batch of its own, so the event loop keeps serving meanwhile.

        ``durable=False``: committed in a batch of its own that does not wait for its fsync
        (``store.write_batch``), so it holds the writer only for its own work; returned once
        committed, not once on disk (``sync`` waits for that). For data that exists elsewhere
        already: derived data (the text index, the activity counts), and a peer's events, durable
        at their origin, which a watcher here may see before this replica's own fsync.

        ``derived=True`` (with ``durable=False``): the job writes only data derived from the log
        (a chunk of the text index): its success proves nothing about room for other writes (a
        full disk still takes its few rows), so it does not end a full disk's report.

        Raises:
            ValidationError, NotFound, ApiError: raised by the job (nothing it did was written).
            DiskFullError: the disk is full (``disk_full``); nothing of this write was written.
            StoreError: the batch could not be committed.
        """
        if self.closed:
            raise ApiError("palaced is shutting down and accepts no new writes", code="shutting_down")
        try:
            self._room.acquire_nowait()  # the usual case: no scheduler pass on the way in
        except trio.WouldBlock:
            await self._room.acquire()
            if self.closed:  # shutdown began while this write waited for room
                self._room.release()
                raise ApiError("palaced is shutting down and accepts no new writes", code="shutting_down") from None
        pending = _Pending(job, heavy, durable, derived and not durable)
        self._queue.append(pending)
        # Not cancellable once queued: the batch commits regardless, and the reply must reflect it.
        with trio.CancelScope(shield=True):
            if not self.leading:
                await self._lead(pending)
            else:
                await pending.done.wait()  # committed, or handed the lead while still queued
                if pending.lead:
                    pending.lead = False
                    await self._lead(pending, handed=True)
        if pending.ok:
            return pending.value
        raise pending.value

    async def sync(self, within: float = 0.0) -> None:
        """Wait until every batch committed so far is on disk (those written with
        ``durable=False`` too). Callers at the same time share one fsync, and a durable commit
        meanwhile counts: usually nothing is left to do.

        ``within``: how long a durable commit may take to come and cover them (seconds), before
        this syncs the WAL itself: a sync of its own, many fewer of them under a stream of
        non-durable batches, and none where durable writes go on anyway.

        Raises:
            StoreError: the WAL could not be synced.
        """
        target = self.batches
        if self._synced >= target:
            return
        if within > 0:
            with trio.move_on_after(within):
                while self._synced < target:
                    await self._durable_commit.wait()
            if self._synced >= target:
                return
        async with self._sync_lock:
            if self._synced >= target:
                return
            # What the sync covers is taken before it starts: a batch committed while it runs (or
            # committed but not counted yet) may have missed it.
            through, heads = self.batches, self.committed_heads
            try:
                await trio.to_thread.run_sync(self._wal.sync)
            except OSError as exc:
                raise StoreError(f"could not sync the write-ahead log of {self.store.path}: {exc}") from exc
            if through > self._synced:  # else a durable commit meanwhile covered more
                self._synced, self.durable_heads = through, heads

    async def maintain(self, work: Callable[[], Awaitable[Any]]) -> None:
        """Run ``work`` between batches: as the leader, once the current one has finished (then
        commit what was queued meanwhile)."""
        while self.leading:
            await self._not_leading.wait()
        await self._lead(first=work)

    async def drained(self) -> None:
        """Wait until nobody leads: the last leader has answered what it took."""
        while self.leading:
            await self._not_leading.wait()

    def close(self) -> None:
        """Refuse new writes (shutdown); queued ones still commit."""
        self.closed = True

    def stop(self) -> None:
        """Refuse new writes, and answer those still queued ``shutting_down`` (the writer is done)."""
        self.closed = True
        self._fail_queued(ApiError("palaced is shutting down", code="shutting_down"))

    async def _lead(self, mine: _Pending | None = None, *, first: Callable[[], Awaitable[Any]] | None = None,
                    handed: bool = False) -> None:
        """Lead: run ``first`` (maintenance, awaited), then commit what is queued, batch after
        batch, until ``mine`` is committed; then hand the lead to the task of the next write still
        queued (a leader that drained the queue for everyone would keep its own caller waiting for
        as long as others keep writing: a peer's catch-up held an append for seconds), or stop
        leading when the queue is empty. Only when nobody leads (the caller checks), or when the
        lead was ``handed`` to ``mine``'s task."""
        if not handed:
            assert not self.leading
            self.leading = True
            self._not_leading = trio.Event()
        handed_on = False
        upkeep = self._upkeep
        try:
            if first is not None:
                await first()
            # One scheduler pass: every task runnable now (requests read in this loop iteration)
            # queues its write before the batch is taken.
            await trio.lowlevel.cancel_shielded_checkpoint()
            while self._queue:
                await self._commit(self._take_batch())
                if upkeep.between_batches_due():
                    await upkeep.between_batches()
                if self._queue and (mine is None or mine.done.is_set()):
                    self._hand_lead(self._queue[0])
                    handed_on = True
                    return
        finally:
            if not handed_on:
                self.leading = False
                self._not_leading.set()
                # Only after a failure (a bug): nobody else would ever answer what is still queued.
                self._fail_queued(ApiError("internal error in the writer; see the palaced log", code="internal"))

    @staticmethod
    def _hand_lead(successor: _Pending) -> None:
        """Wake the task of a write still queued as the next leader (its ``done`` starts anew)."""
        successor.lead = True
        woken, successor.done = successor.done, trio.Event()
        woken.set()

    def _fail_queued(self, error: ApiError) -> None:
        while self._queue:
            pending = self._queue.popleft()
            pending.ok, pending.value = False, error
            pending.done.set()
            self._room.release()

    def _take_batch(self) -> list[_Pending]:
        """The next batch: a heavy or a non-durable write alone, else the light durable writes at
        the front (up to MAX_BATCH)."""
        queue = self._queue
        first = queue.popleft()
        batch = [first]
        if first.heavy or not first.durable:
            return batch
        while queue and len(batch) < MAX_BATCH and not queue[0].heavy and queue[0].durable:
            batch.append(queue.popleft())
        return batch

    async def _commit(self, batch: list[_Pending]) -> None:
        jobs = [p.job for p in batch]
        durable = batch[0].durable
        on_thread = batch[0].heavy or time.monotonic() < self._slow_until
        try:
            if on_thread:
                # Never abandoned on cancel: a started batch always finishes (clean shutdown).
                result = await trio.to_thread.run_sync(functools.partial(self.store.write_batch, jobs, durable=durable))
            else:
                started = time.perf_counter()
                result = self.store.write_batch(jobs, durable=durable)
                took = time.perf_counter() - started
                if took > SLOW_COMMIT_S:
                    self._note_slow_commit(took)
        except DiskFullError as exc:
            # Nothing of the batch was written; every job is told so, and the next batch tries again.
            self._upkeep.batch_failed(exc, len(batch))
            self._answer(batch, [(False, exc)] * len(batch))
            return
        except StoreError as exc:
            LOGGER.error("write batch of %d failed: %s", len(batch), exc)
            self._answer(batch, [(False, exc)] * len(batch))
            return
        except BaseException:
            error = ApiError("internal error in the writer; see the palaced log", code="internal")
            self._answer(batch, [(False, error)] * len(batch))
            raise
        await self._committed(batch, result)

    def _note_slow_commit(self, took: float) -> None:
        now = time.monotonic()
        self._slow_commits.append(now)
        if len(self._slow_commits) < SLOW_COMMITS or now - self._slow_commits[0] > SLOW_WINDOW_S:
            return
        self._slow_commits.clear()
        if now >= self._slow_until:
            LOGGER.info("%d commits within %.0f s took over %.0f ms, the last %.0f ms (a slow or busy disk): "
                        "writes commit on a thread for %.0f s", SLOW_COMMITS, SLOW_WINDOW_S, SLOW_COMMIT_S * 1000,
                        took * 1000, SLOW_DISK_BACKOFF_S)
        self._slow_until = now + SLOW_DISK_BACKOFF_S

    async def _committed(self, batch: list[_Pending], result: WriteBatchResult) -> None:
        heads = self.store.vector.heads  # this batch's (the next one cannot commit before it is counted)
        if result.purged and self._on_purged is not None:
            self._on_purged(result.purged)  # before anyone is answered: no ring replays a purged body
        if self._wal.purge_pending:
            await self._upkeep.purge()  # before anyone is told "redacted"
        self._upkeep.committed(result.outcomes, derived=batch[0].derived)
        self.batches += 1
        self.committed_heads = heads
        if batch[0].durable:
            self._synced, self.durable_heads = self.batches, heads
            self._durable_commit.set()
            self._durable_commit = trio.Event()
        self.writes += len(batch)
        self.last_write = time.monotonic()
        try:
            if result.events and self._on_committed(result.events):
                # Someone waits for these events (a watcher, a `wait`, a peer's link): it runs
                # first, so its push leaves before the replies to the writers, not after them
                # (issue 27: the wake and the push to a peer are the latencies that count; the
                # reply's send and the writer's return to its socket cost a watcher ~70 us).
                # Two passes: trio runs the tasks of a pass in either order, so only in the second
                # is every woken task's first turn sure to be over. Nobody waits: no pass at all.
                await trio.lowlevel.cancel_shielded_checkpoint()
                await trio.lowlevel.cancel_shielded_checkpoint()
        finally:
            self._answer(batch, result.outcomes)  # committed: answered even if publishing failed

    def _answer(self, batch: list[_Pending], outcomes: list[tuple[bool, Any]]) -> None:
        for p, (ok, value) in zip(batch, outcomes, strict=True):
            p.ok, p.value = ok, value
            p.done.set()
            self._room.release()
