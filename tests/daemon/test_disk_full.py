"""A real full disk under the writer and the vector worker (a small tmpfs, tests/tmpfs.py): writes
answer ``disk_full`` and resume by themselves once space returns, with nothing acknowledged lost;
a WAL checkpoint or an index save that fails is logged once, retried, and never stops anything."""

from __future__ import annotations

import logging

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.errors import DiskFull
from palace_proto.memory import Drawer
from palace_proto.validation import AppendRequest, Limits, ListQuery
from palaced.bus import EventBus
from palaced.features import STORE_PARTS
from palaced.features import memory_vectors as vectors
from palaced.features.memory_vectors import INDEX_FILE, MemoryIndexer
from palaced.store import Store, append_event
from palaced.store.aio import AsyncStore
from palaced.store.backup import wal_bytes
from palaced.store.wal import KEEP_BYTES
from tests.daemon.test_vectors import WordEmbedder, settle
from tests.tmpfs import needs_tmpfs, small_tmpfs

pytestmark = needs_tmpfs
LIMITS = Limits()
# Why 100 KB: a few dozen appends fill the 4 MiB tmpfs, and each spans many pages of the WAL.
BODY = "x" * 100_000


def req(body: str) -> AppendRequest:
    return AppendRequest.from_wire({"type": "note", "stream": "s", "room": "r", "from_agent": "a", "body": body}, LIMITS)


async def test_writes_and_checkpoints_on_a_full_disk_fail_cleanly_and_resume_when_space_returns(caplog):
    """Guards finding 7 of issue 11 (a checkpoint error on a full disk stopped the writer, and with
    it the daemon): appends until the disk is full get ``disk_full`` naming the database; the
    writer keeps serving, reads go on, a failing WAL checkpoint is logged once and retried; once
    the file system grows, writes and checkpoints succeed again and every acknowledged append is
    there, numbered 1..n without a gap."""
    caplog.set_level(logging.INFO, logger="palaced.store")
    with small_tmpfs("4m") as disk:
        store = Store(disk.path / "p.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
        astore = AsyncStore(store, EventBus().publish)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(astore.serve_writer)
                acknowledged = []
                for _ in range(200):
                    try:
                        acknowledged.append(await astore.write(lambda ctx: append_event(ctx, req(BODY))))
                    except DiskFull as exc:
                        full = exc
                        break
                else:
                    raise AssertionError("the 4 MiB disk never filled up")
                assert full.code == "disk_full" and str(store.path) in full.message
                assert "free some space" in full.message
                with pytest.raises(DiskFull):  # still full: the next write is told the same
                    await astore.write(lambda ctx: append_event(ctx, req(BODY)))
                assert astore.statistics()["disk_full"]["path"] == str(store.path)

                listed = await astore.list_events(ListQuery.from_wire({"limit": 1000}))
                assert [e["id"] for e in listed] == [e["id"] for e in acknowledged]

                await astore.checkpoint()  # the WAL cannot be copied into a database that cannot grow
                await astore.checkpoint()
                assert "full" in astore.keeper.checkpoint_error
                failures = [r for r in caplog.records if "WAL checkpoint failed" in r.getMessage()]
                assert len(failures) == 1, "a failing checkpoint is logged once, not at every retry"
                assert len([r for r in caplog.records if "is full" in r.getMessage()
                            and "writes fail" in r.getMessage()]) == 1

                disk.resize("64m")
                acknowledged.append(await astore.write(lambda ctx: append_event(ctx, req("space is back"))))
                assert astore.statistics()["disk_full"] is None
                await astore.checkpoint()
                assert astore.keeper.checkpoint_error is None and wal_bytes(store.path) == KEEP_BYTES
                astore.close_writes()
            listed = await astore.list_events(ListQuery.from_wire({"limit": 1000}))
            assert [e["id"] for e in listed] == [e["id"] for e in acknowledged]
            assert [e["origin_seq"] for e in listed] == list(range(1, len(acknowledged) + 1))
        finally:
            store.close()


async def test_the_vector_worker_survives_a_full_disk_and_saves_once_space_returns(tmp_path, monkeypatch, caplog):
    """Guards finding 7 of issue 11 (the memory indexer runs in the daemon's nursery: an error
    saving its index on a full disk stopped the daemon): the save fails, is logged once however
    often it is retried, leaves no temporary file, search keeps working; once space returns the
    index is saved."""
    monkeypatch.setattr(vectors, "SAVE_RETRY_S", 0.05, raising=False)  # absent before the fix
    monkeypatch.setattr(vectors, "IDLE_CHECK_S", 0.05)
    saves = []
    real_save = vectors.VectorIndex.save
    monkeypatch.setattr(vectors.VectorIndex, "save", lambda self: (saves.append(1), real_save(self))[1])
    caplog.set_level(logging.INFO, logger="palaced.features.memory_vectors")
    store = Store(tmp_path / "v.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    bus = EventBus(store.latest()[0])
    astore = AsyncStore(store, bus.publish)
    try:
        with small_tmpfs("1m") as disk:
            filler = disk.fill()
            async with trio.open_nursery() as nursery:
                await nursery.start(astore.serve_writer)
                indexer = MemoryIndexer(astore, bus, WordEmbedder(), disk.path)
                nursery.start_soon(indexer.run)
                drawer = Drawer("w", "r", "the cat sleeps on the router", "a")
                request = AppendRequest.from_wire(drawer.event(), LIMITS)
                await astore.write(lambda ctx: append_event(ctx, request))
                await settle(indexer, 1)
                with trio.fail_after(20):
                    while len(saves) < 3:  # failed, and retried twice
                        await trio.sleep(0.02)
                assert indexer.save_error and "memory-vectors" not in " ".join(p.name for p in disk.path.iterdir())
                assert len([r for r in caplog.records if "cannot save the vector index" in r.getMessage()]) == 1
                assert (await indexer.search("cat", 1))[0][0] == drawer.id
                filler.unlink()
                with trio.fail_after(20):
                    while indexer.save_error is not None:
                        await trio.sleep(0.02)
                assert (disk.path / INDEX_FILE).exists()
                nursery.cancel_scope.cancel()
    finally:
        store.close()


async def test_a_disk_too_small_for_the_kept_wal_keeps_its_space_for_the_database():
    """The WAL's zeros (wal.KEEP_BYTES) never take the last free space: on a disk without room
    for them the file goes back to its size, and appends go on."""
    with small_tmpfs("4m") as disk:
        store = Store(disk.path / "p.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
        try:
            before = wal_bytes(store.path)
            store.wal.keep_written()  # what the keeper does in its first slot
            assert wal_bytes(store.path) == before < KEEP_BYTES
            store.write_batch([lambda ctx: append_event(ctx, req("x" * 1_000))])
            assert store.db.writer.execute("SELECT count(*) FROM events").fetchone() == (1,)
        finally:
            store.close()
