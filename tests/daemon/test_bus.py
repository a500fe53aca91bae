"""Unit tests of the in-process event bus (trio, autojump clock)."""

from __future__ import annotations

import trio
import trio.testing

from palaced.bus import EventBus


def ev(seq, type="note"):
    return {"seq": seq, "id": f"e{seq}", "type": type}


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
    stop = bus.call_on_publish(lambda: calls.append(bus.latest_seq))
    bus.publish([ev(1)])
    bus.publish([ev(2), ev(3)])
    stop()
    bus.publish([ev(4)])
    assert calls == [1, 3]
