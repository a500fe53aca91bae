"""Unit tests of the in-process event bus (trio, autojump clock)."""

from __future__ import annotations

import trio

from palaced.bus import EventBus


def ev(seq):
    return {"seq": seq, "id": f"e{seq}"}


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
