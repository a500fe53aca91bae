"""Replication links between in-process replicas over memory streams: catch-up both ways, live
push, relay through a middle replica, and idempotence. (TLS, discovery and membership are not
part of these links; the multi-process tests come with them.)"""

from __future__ import annotations

import contextlib

import trio
import trio.testing
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.peer import PEER_PROTOCOL_VERSION, Hello
from palace_proto.validation import AppendRequest, Limits
from palaced.bus import EventBus
from palaced.replication import PeerLink
from palaced.store import Store
from palaced.store.aio import AsyncStore

LIMITS = Limits()


class Replica:
    def __init__(self, path, name):
        self.name = name
        self.store = Store(path, Ed25519PrivateKey.generate(), LIMITS)
        latest, _ = self.store.latest()
        self.bus = EventBus(latest)
        self.astore = AsyncStore(self.store, self.bus.publish)

    def hello(self):
        return Hello(PEER_PROTOCOL_VERSION, "pal_test", self.name, self.name, "member", origin=self.store.origin_id)

    async def append(self, body):
        req = AppendRequest.from_wire({"type": "note", "stream": "s", "room": "r", "from_agent": self.name,
                                       "body": body}, LIMITS)
        return await self.astore.write(lambda ctx: ctx.append(req))

    def bodies(self):
        return sorted(e.body for o in self.store.version_vector() for e in self.store.signed_events_of_origin(o, 0, 10_000))


@contextlib.asynccontextmanager
async def replicas(tmp_path, *names):
    reps = [Replica(tmp_path / f"{n}.sqlite3", n) for n in names]
    keys = {r.store.origin_id: r.store.public_key for r in reps}
    try:
        async with trio.open_nursery() as nursery:
            for r in reps:
                await nursery.start(r.astore.serve_writer)
            yield reps, keys.get, nursery
            nursery.cancel_scope.cancel()
    finally:
        for r in reps:
            r.store.close()


def connect(nursery, left, right, key_for):
    a, b = trio.testing.memory_stream_pair()
    links = (PeerLink(a, left.hello(), left.astore, left.bus, key_for),
             PeerLink(b, right.hello(), right.astore, right.bus, key_for))
    for link in links:
        nursery.start_soon(link.run)
    return links


async def converged(*reps, count):
    with trio.fail_after(15):
        while not all(r.store.counts()["events"] == count for r in reps):
            await trio.sleep(0.01)


async def test_pair_catches_up_both_ways_then_pushes_live(tmp_path):
    async with replicas(tmp_path, "a", "b") as ((a, b), key_for, nursery):
        for i in range(5):
            await a.append(f"a{i}")
        for i in range(3):
            await b.append(f"b{i}")
        link_a, _ = connect(nursery, a, b, key_for)
        await converged(a, b, count=8)
        assert a.bodies() == b.bodies()
        await a.append("live")
        await converged(a, b, count=9)
        assert "live" in b.bodies()
        assert repr(link_a).startswith("<PeerLink <PeerSession b SYNCING")


async def test_a_line_of_three_relays_through_the_middle(tmp_path):
    async with replicas(tmp_path, "a", "b", "c") as ((a, b, c), key_for, nursery):
        await a.append("from a")
        await c.append("from c")
        connect(nursery, a, b, key_for)
        connect(nursery, b, c, key_for)
        await converged(a, b, c, count=2)
        await c.append("live from c")
        await converged(a, b, c, count=3)
        assert a.bodies() == b.bodies() == c.bodies()
        assert a.store.version_vector() == c.store.version_vector()


async def test_a_large_catch_up_is_batched_and_exact(tmp_path):
    async with replicas(tmp_path, "a", "b") as ((a, b), key_for, nursery):
        reqs = [AppendRequest.from_wire({"type": "note", "stream": "s", "room": "r", "from_agent": "a",
                                         "body": f"{i}" * 50}, LIMITS) for i in range(3000)]
        await a.astore.write(lambda ctx: [ctx.append(r) for r in reqs])
        link_a, _ = connect(nursery, a, b, key_for)
        await converged(a, b, count=3000)
        assert link_a.sent_events == 3000  # nothing sent twice
        assert b.store.version_vector() == a.store.version_vector()


async def test_events_of_an_unknown_origin_are_not_accepted(tmp_path):
    async with replicas(tmp_path, "a", "b") as ((a, b), key_for, nursery):
        await a.append("from a non-member")
        only_b = {b.store.origin_id: b.store.public_key}.get
        connect(nursery, a, b, only_b)
        await b.append("b")
        await converged(a, count=2)
        await trio.sleep(0.2)
        assert b.store.counts()["events"] == 1
