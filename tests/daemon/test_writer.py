"""The group-commit writer and its ``Upkeep`` (the WAL keeper's side of it), with a fake keeper
that records when the writer calls it: the interface the two halves of the old aio.py share."""

from __future__ import annotations

import functools

import pytest
import trio
import trio.lowlevel
import trio.testing
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.errors import ApiError
from palace_proto.validation import AppendRequest, Limits
from palaced.features import STORE_PARTS
from palaced.store import Store, StoreError, append_event, redact
from palaced.store.writer import Writer


def req(body):
    return AppendRequest.from_wire({"type": "note", "stream": "s", "room": "r", "from_agent": "a", "body": body},
                                   Limits())


class FakeUpkeep:
    """Records the writer's calls; wants the slot between batches when ``due`` says so."""

    def __init__(self, store):
        self.store = store
        self.calls = []
        self.due = False

    async def purge(self):
        self.calls.append("purge")
        self.store.wal.purge_pending = False

    def committed(self, outcomes, *, derived=False):
        self.calls.append(("committed", len(outcomes)))

    def batch_failed(self, error, writes):
        self.calls.append(("failed", writes))

    def between_batches_due(self):
        self.calls.append("due?")
        return self.due

    async def between_batches(self):
        self.calls.append("slot")
        self.due = False


async def test_the_writer_tells_the_keeper_of_each_commit_and_asks_it_between_batches(tmp_path):
    store = Store(tmp_path / "p.sqlite3", Ed25519PrivateKey.generate(), Limits(), parts=STORE_PARTS)
    upkeep = FakeUpkeep(store)
    committed = []
    writer = Writer(store, upkeep, committed.extend)
    await writer.write(lambda ctx: append_event(ctx, req("one")))
    assert upkeep.calls == [("committed", 1), "due?"] and len(committed) == 1
    upkeep.due, upkeep.calls = True, []
    await writer.write(lambda ctx: append_event(ctx, req("two")))
    assert upkeep.calls == [("committed", 1), "due?", "slot"]
    assert (writer.batches, writer.writes, writer.leading) == (2, 2, False)
    store.close()


async def test_a_redaction_is_purged_from_the_wal_before_its_writer_is_answered(tmp_path):
    store = Store(tmp_path / "p.sqlite3", Ed25519PrivateKey.generate(), Limits(), parts=STORE_PARTS)
    upkeep = FakeUpkeep(store)
    writer = Writer(store, upkeep, lambda events: None)
    event = await writer.write(lambda ctx: append_event(ctx, req("secret")))
    upkeep.calls = []

    def redact_it(ctx):
        redact(ctx, event["id"], "evt_x")
        return list(upkeep.calls)  # what the keeper was told while the job ran: nothing yet

    assert await writer.write(redact_it) == []
    assert upkeep.calls == ["purge", ("committed", 1), "due?"] and not store.wal.purge_pending
    store.close()


async def test_maintenance_runs_in_a_slot_between_batches_never_during_one(tmp_path):
    store = Store(tmp_path / "p.sqlite3", Ed25519PrivateKey.generate(), Limits(), parts=STORE_PARTS)
    upkeep = FakeUpkeep(store)
    writer = Writer(store, upkeep, lambda events: None)
    seen = []

    async def work():
        seen.append(writer.leading)
        await trio.lowlevel.checkpoint()  # writes that arrive meanwhile wait for the next batch

    async with trio.open_nursery() as n:
        n.start_soon(writer.maintain, work)
        n.start_soon(writer.write, lambda ctx: append_event(ctx, req("queued behind the slot")))
    assert seen == [True] and writer.batches == 1 and not writer.leading
    writer.stop()
    assert writer.closed
    store.close()


@pytest.mark.parametrize(("background", "order"), [
    (False, ["woken", "writer answered"]),  # a watcher: its push leaves first
    (True, ["writer answered", "woken"]),  # the log follower: never ahead of an answer
])
async def test_watchers_of_a_batch_run_before_its_writers_are_answered_and_background_work_after(
        tmp_path, background, order):
    """Guards issue 27's wake order: a watcher's push leaves before the writer's reply; a waiter in
    the bus's background lane earns no scheduler pass before the answer."""
    from palaced.bus import EventBus

    store = Store(tmp_path / "p.sqlite3", Ed25519PrivateKey.generate(), Limits(), parts=STORE_PARTS)
    bus = EventBus()
    writer = Writer(store, FakeUpkeep(store), bus.publish)
    seen = []

    async def waiter():
        await bus.wait_beyond(0, background=background)
        seen.append("woken")

    async with trio.open_nursery() as n:
        n.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        await writer.write(lambda ctx: append_event(ctx, req("wake me")))
        seen.append("writer answered")
    assert seen == order
    store.close()


async def test_a_failing_publish_still_answers_the_committed_batch(tmp_path):
    """A bug in publishing fails the leader's task, but every write of the committed batch is
    answered with its event (none waits for ever)."""
    store = Store(tmp_path / "p.sqlite3", Ed25519PrivateKey.generate(), Limits(), parts=STORE_PARTS)

    def publish(events):
        raise RuntimeError("a bug in a subscriber")

    writer = Writer(store, FakeUpkeep(store), publish)
    results = []

    async def write(body):
        results.append((await writer.write(lambda ctx: append_event(ctx, req(body))))["body"])

    with pytest.raises(ExceptionGroup) as raised:
        async with trio.open_nursery() as n:
            n.start_soon(write, "one")
            n.start_soon(write, "two")  # queued in the first one's pass: the same batch
    # The leader (whichever started first) got the bug; the other write its event.
    assert [str(e) for e in raised.value.exceptions] == ["a bug in a subscriber"]
    assert len(results) == 1 and results[0] in ("one", "two")
    assert writer.batches == 1 and not writer.leading
    store.close()


async def test_a_non_durable_write_commits_alone_without_its_fsync_and_durable_ones_keep_theirs(tmp_path):
    """Guards the text indexer's writes (issue 27): ``durable=False`` commits in a batch of its
    own under synchronous=NORMAL, and every durable batch after it under FULL again, even when
    the non-durable job failed."""
    store = Store(tmp_path / "p.sqlite3", Ed25519PrivateKey.generate(), Limits(), parts=STORE_PARTS)
    writer = Writer(store, FakeUpkeep(store), lambda events: None)
    seen = []

    def level(name):
        def job(ctx):
            seen.append((name, ctx.conn.execute("PRAGMA synchronous").fetchone()[0], len(ctx.batch.events)))
            if name == "failing derived":
                raise ValueError("a bug in an indexer")
            return append_event(ctx, req(name))
        return job

    release = trio.Event()
    async with trio.open_nursery() as n:
        n.start_soon(writer.maintain, release.wait)  # holds the lead while the writes queue in order
        await trio.testing.wait_all_tasks_blocked()
        for name, durable in (("append 1", True), ("append 2", True), ("derived", False), ("append 3", True)):
            n.start_soon(functools.partial(writer.write, level(name), durable=durable))
            await trio.testing.wait_all_tasks_blocked()
        release.set()
    with pytest.raises(ApiError):
        await writer.write(level("failing derived"), durable=False)
    await writer.write(level("append 4"))
    full, normal = 2, 1
    # (name, synchronous, events before it in its batch): append 1 and 2 share a batch; the
    # derived writes are alone; every durable batch is FULL again.
    assert seen == [("append 1", full, 0), ("append 2", full, 1), ("derived", normal, 0), ("append 3", full, 0),
                    ("failing derived", normal, 0), ("append 4", full, 0)]
    assert writer.batches == 5
    store.close()


async def test_sync_puts_non_durable_batches_on_disk_once_and_counts_a_durable_commit(tmp_path):
    """Guards the receipt of a peer's live push (issue 27): ``sync`` syncs the WAL once for the
    ``durable=False`` batches before it, callers at the same time share that one sync, a durable
    commit since makes it unnecessary, and a failed sync is a ``StoreError`` that a later call retries."""
    store = Store(tmp_path / "p.sqlite3", Ed25519PrivateKey.generate(), Limits(), parts=STORE_PARTS)
    writer = Writer(store, FakeUpkeep(store), lambda events: None)
    real_sync, syncs, failing = store.wal.sync, [], []

    def counting_sync():
        syncs.append(writer.batches)
        if failing:
            raise OSError(5, "Input/output error")
        real_sync()  # the real WAL file, synced for real

    store.wal.sync = counting_sync
    await writer.sync()
    assert syncs == []  # nothing committed yet: nothing to sync
    await writer.write(lambda ctx: append_event(ctx, req("replicated 1")), durable=False)
    await writer.write(lambda ctx: append_event(ctx, req("replicated 2")), durable=False)
    async with trio.open_nursery() as n:
        for _ in range(3):
            n.start_soon(writer.sync)
    assert syncs == [2]  # one sync for both batches and all three callers
    await writer.sync()
    assert syncs == [2]
    await writer.write(lambda ctx: append_event(ctx, req("replicated 3")), durable=False)
    await writer.write(lambda ctx: append_event(ctx, req("local")))  # FULL: its fsync covers the batch before
    await writer.sync()
    assert syncs == [2]
    await writer.write(lambda ctx: append_event(ctx, req("replicated 4")), durable=False)
    failing.append(True)
    with pytest.raises(StoreError, match="could not sync the write-ahead log"):
        await writer.sync()
    failing.clear()
    await writer.sync()
    assert syncs == [2, 5, 5]
    store.close()


def test_the_wal_sync_of_a_missing_file_raises_oserror(tmp_path):
    """``Wal.sync`` never creates the WAL (SQLite owns its existence): no file, an OSError."""
    store = Store(tmp_path / "p.sqlite3", Ed25519PrivateKey.generate(), Limits(), parts=STORE_PARTS)
    store.wal.sync()
    store.close()  # the last connection closing removes the WAL
    with pytest.raises(OSError):
        store.wal.sync()


async def test_sync_within_lets_a_durable_commit_cover_the_batches_before_syncing_itself(tmp_path):
    """Guards the receipts' grace (issue 27): ``sync(within)`` first waits up to ``within`` for a
    durable commit to cover the non-durable batches (no sync of its own), and syncs itself once
    it is over."""
    store = Store(tmp_path / "p.sqlite3", Ed25519PrivateKey.generate(), Limits(), parts=STORE_PARTS)
    writer = Writer(store, FakeUpkeep(store), lambda events: None)
    real_sync, syncs = store.wal.sync, []
    store.wal.sync = lambda: (syncs.append(writer.batches), real_sync())
    await writer.write(lambda ctx: append_event(ctx, req("replicated")), durable=False)
    async with trio.open_nursery() as n:
        n.start_soon(writer.sync, 30.0)
        await trio.testing.wait_all_tasks_blocked()
        await writer.write(lambda ctx: append_event(ctx, req("local")))
    assert syncs == []
    await writer.write(lambda ctx: append_event(ctx, req("replicated again")), durable=False)
    with trio.fail_after(10):
        await writer.sync(0.05)
    assert syncs == [3]
    store.close()


async def test_a_sync_makes_durable_only_what_was_counted_before_it_started(tmp_path):
    """Guards issue 43 (a vector read after a WAL sync named events committed during it: a claim a
    power cut could make false): ``durable_heads`` moves to what a sync covered, taken before it
    starts; a batch committed while it runs, or committed but not yet counted (its redaction still
    being purged from the WAL), stays out until a later sync or durable commit covers it."""
    store = Store(tmp_path / "p.sqlite3", Ed25519PrivateKey.generate(), Limits(), parts=STORE_PARTS)
    upkeep = FakeUpkeep(store)
    writer = Writer(store, upkeep, lambda events: None)
    origin = store.origin_id
    real_sync, during = store.wal.sync, []

    def sync_while_committing():
        for body in during:  # commits in the loop while this thread is about to sync
            trio.from_thread.run(functools.partial(writer.write, lambda ctx, b=body: append_event(ctx, req(b)),
                                                   durable=False))
        during.clear()
        real_sync()

    def seq(heads):
        return heads[origin].max_seq if origin in heads else 0

    store.wal.sync = sync_while_committing
    await writer.write(lambda ctx: append_event(ctx, req("replicated 1")), durable=False)
    assert (seq(writer.committed_heads), seq(writer.durable_heads)) == (1, 0)
    during.append("replicated 2, committed during the sync")
    await writer.sync()
    assert seq(store.heads()) == seq(writer.committed_heads) == 2
    assert seq(writer.durable_heads) == 1  # 2 may have missed the sync: not named
    await writer.sync()
    assert seq(writer.durable_heads) == 2

    await writer.write(lambda ctx: append_event(ctx, req("replicated 3")), durable=False)
    seen = {}

    async def purge():  # the slot between a batch's commit and its count
        seen["store"], seen["counted"] = seq(store.heads()), seq(writer.committed_heads)
        await writer.sync()
        seen["durable"] = seq(writer.durable_heads)
        store.wal.purge_pending = False

    upkeep.purge = purge
    store.wal.purge_pending = True
    await writer.write(lambda ctx: append_event(ctx, req("replicated 4")), durable=False)
    assert seen == {"store": 4, "counted": 3, "durable": 3}
    await writer.write(lambda ctx: append_event(ctx, req("local")))  # a durable commit covers every batch
    assert seq(writer.durable_heads) == seq(writer.committed_heads) == 5
    store.close()
