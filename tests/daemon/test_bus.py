"""Unit tests of the in-process event bus (trio, autojump clock)."""

from __future__ import annotations

import trio
import trio.testing
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.envelope import GENESIS_HASH, CommittedEvent, seal_event
from palaced.bus import EventBus, record_bytes
from palaced.features import STORE_PARTS
from palaced.store import append_event

_KEY = Ed25519PrivateKey.generate()


def ev(seq, type="note", *, origin="ori_a", history=False, body=None):
    signed = seal_event(_KEY, origin=origin, origin_seq=seq, prev_hash=GENESIS_HASH,
                        created_at="2026-12-04T00:00:00.000000Z", type=type, stream="s", room="r",
                        from_agent="a", body=f"body {seq}" if body is None else body)
    return CommittedEvent(seq, signed, history=history)


async def test_wait_beyond_wakes_on_publish(autojump_clock):
    bus = EventBus(latest_seq=3)
    woke = []

    async def waiter():
        await bus.wait_beyond(3)
        woke.append(trio.current_time())

    async with trio.open_nursery() as n:
        n.start_soon(waiter)
        await trio.sleep(10)
        assert not woke
        bus.publish([ev(4)])
    assert woke == [10]


async def test_events_after_reads_the_ring_and_reports_gaps():
    bus = EventBus(latest_seq=0, ring_size=3)
    assert bus.events_after(0, 10) == []
    bus.publish([ev(1), ev(2)])
    assert [e["seq"] for e in bus.events_after(0, 10)] == [1, 2]
    assert [e["seq"] for e in bus.events_after(1, 10)] == [2]
    assert bus.events_after(2, 10) == []
    bus.publish([ev(s) for s in range(3, 10)])
    # the ring keeps at least the last 3; older cursors must read the store instead
    assert bus.events_after(0, 10) is None
    assert [e["seq"] for e in bus.events_after(8, 10)] == [9]
    assert [e["seq"] for e in bus.events_after(6, 2)] == [7, 8]


async def test_ring_after_restart_starts_empty():
    bus = EventBus(latest_seq=100)
    assert bus.events_after(100, 10) == []
    assert bus.events_after(50, 10) is None


async def test_a_type_watch_wakes_only_for_its_types():
    """Guards the memory worker's wake-up (issue 13): it is woken by batches holding a memory or
    redaction event, and by nothing else (most appends are neither)."""
    bus = EventBus()
    watch = bus.watch_types(frozenset({"memory.drawer", "event.redact"}))
    woke = []

    async def waiter():
        while True:
            await watch.wait()
            woke.append(bus.latest_seq)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        bus.publish([ev(1, type="note"), ev(2, type="task.reply")])
        await trio.testing.wait_all_tasks_blocked()
        assert woke == []
        bus.publish([ev(3, type="note"), ev(4, type="memory.drawer")])
        await trio.testing.wait_all_tasks_blocked()
        bus.publish([ev(5, type="event.redact")])
        await trio.testing.wait_all_tasks_blocked()
        assert woke == [4, 5]
        nursery.cancel_scope.cancel()


def test_call_on_publish_calls_back_on_every_publish_until_stopped():
    """A replication link's event sender waits on the bus or on a peer's want at once: the bus
    calls it back on each publish (no task of its own), and forgets it when told."""
    bus = EventBus(latest_seq=0)
    calls = []
    stop = bus.call_on_publish(lambda records: calls.append(bus.latest_seq))
    bus.publish([ev(1)])
    bus.publish([ev(2), ev(3)])
    stop()
    bus.publish([ev(4)])
    assert calls == [1, 3]


def test_signed_after_finds_replicated_events_by_chain_position_only():
    """Guards the push path (issue 27): replication takes what it pushes from the bus by origin
    and origin_seq; imported history is never offered; what left the ring is not found."""
    bus = EventBus(ring_size=2)
    bus.publish([ev(1), ev(2), ev(1, origin="ori_old", history=True)])
    assert [e.origin_seq for e in bus.signed_after("ori_a", 0, 10)] == [1, 2]
    assert bus.signed_after("ori_old", 0, 10) is None
    bus.publish([ev(3), ev(4)])  # five records: the ring is cut back to the last two
    assert bus.signed_after("ori_a", 0, 10) is None
    assert [e.origin_seq for e in bus.signed_after("ori_a", 2, 10)] == [3, 4]
    assert set(bus._by_position) == {("ori_a", 3), ("ori_a", 4)}


def test_scrub_purges_the_one_record_for_watchers_and_peers_alike():
    """Guards redaction (issue 27): one record per event, so a purge reaches the view a watcher
    replays, the signed event a link pushes, and a view someone still holds."""
    bus = EventBus()
    secret, other = ev(1, body="hunter2"), ev(2)
    held = secret.public
    bus.publish([secret, other])
    bus.scrub([secret.signed.id])
    [view, _] = bus.events_after(0, 10)
    assert view["body"] == "" and view["body_redacted"] is True
    assert view["body_sha256"] == secret.signed.body_sha256.hex()
    assert bus.signed_after("ori_a", 0, 1)[0].body is None
    assert held["body"] == ""
    assert bus.events_after(1, 10)[0]["body"] == "body 2"


async def test_publish_says_whether_it_woke_a_watcher_or_a_link():
    bus = EventBus()
    assert bus.publish([ev(1)]) is False  # nobody waits

    async def background():
        await bus.wait_beyond(1, background=True)

    async with trio.open_nursery() as n:
        n.start_soon(background)
        await trio.testing.wait_all_tasks_blocked()
        assert bus.publish([ev(2)]) is False  # the background lane never counts
    async with trio.open_nursery() as n:
        n.start_soon(bus.wait_beyond, 2)
        await trio.testing.wait_all_tasks_blocked()
        assert bus.publish([ev(3)]) is True
    stop = bus.call_on_publish(lambda records: records[0].seq == 4)
    assert bus.publish([ev(4)]) is True  # a replication link pushes what it is told of
    assert bus.publish([ev(5)]) is False  # ... and says when it has nothing to push
    stop()
    assert bus.publish([ev(6)]) is False


async def test_the_ring_is_bounded_by_bytes_and_a_late_reader_catches_up_from_the_store(tmp_path):
    """Guards issue 43 (the ring held its last 10,000-20,000 events whatever their size: a member's
    256 KiB events took a replica to gigabytes): large events keep the ring under its byte bound
    (by count it would hold them all), and a reader that fell behind it is told so (``None``) and
    reads the rest from SQLite by seq (``Context.committed_after``), missing nothing."""
    from palace_proto.validation import AppendRequest, Limits
    from palaced.config import Config
    from palaced.features import features
    from palaced.handlers import Context
    from palaced.store import Store
    from palaced.store.aio import AsyncStore

    bound = 2 << 20
    store = Store(tmp_path / "p.sqlite3", _KEY, Limits(), parts=STORE_PARTS)
    bus = EventBus(ring_bytes=bound)
    astore = AsyncStore(store, bus.publish)
    ctx = Context(Config(home=tmp_path, mdns=False, memory_embed=False), astore, bus, _KEY, features())
    big = 256 * 1024
    async with trio.open_nursery() as nursery:
        await nursery.start(astore.serve_writer)
        for i in range(40):
            body = f"{i:04d}" + "x" * (big - 4)
            request = AppendRequest.from_wire({"type": "note", "stream": "s", "room": "r", "from_agent": "a",
                                               "body": body}, Limits())
            await astore.write(lambda wctx, r=request: append_event(wctx, r))
            assert bus.ring_bytes <= bound
            assert bus.ring_bytes == sum(record_bytes(r) for r in bus._ring)
        assert 2 <= len(bus._ring) <= bound // big  # some kept, far from all 40
        assert bus.events_after(0, 100) is None  # the first events left the ring: the reader is told
        seen = []
        while len(seen) < 40:
            page = await ctx.committed_after(seen[-1]["seq"] if seen else 0, 7)
            assert page, "a late reader must get every event"
            seen.extend(page)
        assert [e["body"][:4] for e in seen] == [f"{i:04d}" for i in range(40)]
        assert [e["seq"] for e in seen] == list(range(1, 41))
        nursery.cancel_scope.cancel(reason="test done")
    store.close()


def test_the_byte_bound_trims_the_push_index_with_the_ring():
    """Guards issue 43's trim: a record that leaves the ring by bytes leaves the push index too
    (replication then reads the store), and a record larger than the bound is not kept at all."""
    bus = EventBus(ring_bytes=4 * record_bytes(ev(1, body="x" * 10_000)))
    bus.publish([ev(s, body="x" * 10_000) for s in range(1, 5)])
    assert [r.seq for r in bus._ring] == [1, 2, 3, 4]
    bus.publish([ev(5, body="x" * 10_000)])  # over the bound: back to half of it
    assert [r.seq for r in bus._ring] == [4, 5] and set(bus._by_position) == {("ori_a", 4), ("ori_a", 5)}
    assert bus.signed_after("ori_a", 0, 10) is None and bus.records_after(2, 10) is None
    assert [r.seq for r in bus.records_after(3, 10)] == [4, 5]
    bus.publish([ev(6, body="y" * 100_000)])
    assert bus._ring == [] and bus.ring_bytes == 0 and bus._by_position == {}
    assert bus.records_after(5, 10) is None and bus.records_after(6, 10) == []
    assert repr(bus) == "<EventBus latest_seq=6 ring=0 ring_bytes=0>"
