"""Replication links between in-process replicas over memory streams: catch-up both ways, live
push, relay through a middle replica, idempotence, and links that keep moving however much both
ends owe each other over buffers of any size (issue 30). (TLS, discovery and membership are not
part of these links; the multi-process tests come with them.)"""

from __future__ import annotations

import contextlib
import itertools
import random
import tempfile
import threading
from pathlib import Path

import pytest
import trio
import trio.testing
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palace_proto.framing import NEED_DATA, FrameBuffer
from palace_proto.link import SYNC_WAL
from palace_proto.peer import PEER_PROTOCOL_VERSION, Hello, from_wire
from palace_proto.validation import AppendRequest, Limits
from palaced.bus import EventBus
from palaced.features import STORE_PARTS
from palaced.peers.link import PeerLink
from palaced.store import Store, append_event, apply_remote
from palaced.store.aio import AsyncStore
from tests.daemon.pipes import BoundedStream, bounded_stream_pair

LIMITS = Limits()


class Replica:
    def __init__(self, path, name):
        self.name = name
        self.store = Store(path, Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
        latest, _ = self.store.latest()
        self.bus = EventBus(latest)
        self.astore = AsyncStore(self.store, self.bus.publish)

    def hello(self):
        return Hello(PEER_PROTOCOL_VERSION, "pal_test", self.name, self.name, "member", origin=self.store.origin_id)

    async def append(self, body):
        req = AppendRequest.from_wire({"type": "note", "stream": "s", "room": "r", "from_agent": self.name,
                                       "body": body}, LIMITS)
        return await self.astore.write(lambda ctx: append_event(ctx, req))

    async def backlog(self, count, body_bytes, *, seed=0):
        """``count`` events written in one transaction (what a replica wrote while cut off), bodies
        of up to ``body_bytes`` characters."""
        rng = random.Random(seed)
        reqs = [AppendRequest.from_wire({"type": "note", "stream": "s", "room": "r", "from_agent": self.name,
                                         "body": f"{self.name}{i} " + "x" * rng.randint(1, body_bytes)}, LIMITS)
                for i in range(count)]
        await self.astore.write(lambda ctx: [append_event(ctx, r) for r in reqs])

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
            # Links in a nursery of their own, ended before the writers: a link whose write is
            # refused because its writer stopped first would end on "shutting down".
            async with trio.open_nursery() as links:
                yield reps, keys.get, links
                links.cancel_scope.cancel()
            nursery.cancel_scope.cancel()
    finally:
        for r in reps:
            r.store.close()


def connect(nursery, left, right, key_for, pair=trio.testing.memory_stream_pair):
    a, b = pair()
    links = (PeerLink(a, left.hello(), left.astore, left.bus, key_for),
             PeerLink(b, right.hello(), right.astore, right.bus, key_for))
    for link in links:
        nursery.start_soon(link.run)
    return links


async def converged(*reps, count, timeout=15):
    """Until every replica holds ``count`` events, and its in-memory version vector says so too:
    a batch committed on a thread (a catch-up) is visible in SQLite a moment before the writer
    sets the vector it keeps (``bodies`` reads through it)."""
    with trio.fail_after(timeout):
        while not all(r.store.counts()["events"] == count
                      and sum(head.max_seq for head in r.store.heads().values()) == count for r in reps):
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
        await a.astore.write(lambda ctx: [append_event(ctx, r) for r in reqs])
        link_a, _ = connect(nursery, a, b, key_for)
        await converged(a, b, count=3000)
        assert link_a.machine.stats.sent_events == 3000  # nothing sent twice
        assert b.store.version_vector() == a.store.version_vector()


async def test_events_of_an_unknown_origin_are_not_accepted(tmp_path):
    async with replicas(tmp_path, "a", "b") as ((a, b), _key_for, nursery):
        await a.append("from a non-member")
        only_b = {b.store.origin_id: b.store.public_key}.get
        _, link_b = connect(nursery, a, b, only_b)
        await b.append("b")
        await converged(a, count=2)
        await a.append("live from a non-member")  # pushed to b, with the one before (b holds neither)
        with trio.fail_after(10):  # until b has turned both away
            while link_b.machine.stats.rejected_events < 2:
                await trio.sleep(0.01)
        assert b.store.counts()["events"] == 1


STREAM_PAIRS = {
    "lockstep (no buffer at all)": trio.testing.lockstep_stream_pair,
    "4 KiB buffers": lambda: bounded_stream_pair(4096),
    "128 KiB buffers (a socket's)": lambda: bounded_stream_pair(128 * 1024),
}


@pytest.mark.parametrize("pair", STREAM_PAIRS.values(), ids=STREAM_PAIRS.keys())
async def test_two_replicas_far_behind_each_other_converge_whatever_the_buffers(tmp_path, pair):
    """Regression (issue 30): two daemons each holding a few hundred events the other lacked never
    converged. Each link's reader answered the peer's wants itself; once both sides were sending
    and both sockets were full, neither read again. Reading must never wait on writing."""
    async with replicas(tmp_path, "a", "b") as ((a, b), key_for, nursery):
        await a.backlog(1500, 2000, seed=1)
        await b.backlog(1500, 2000, seed=2)
        link_a, link_b = connect(nursery, a, b, key_for, pair=pair)
        await converged(a, b, count=3000, timeout=60)
        assert a.bodies() == b.bodies()
        assert a.store.version_vector() == b.store.version_vector()
        await a.append("live after the catch-up")  # and the link still moves afterwards
        await converged(a, b, count=3001)
        assert link_a.stall() is None and link_b.stall() is None


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(backlogs=st.lists(st.integers(0, 700), min_size=2, max_size=3),
       body_bytes=st.sampled_from([1, 200, 3000, 20_000]),
       # (Not below 512: a 1 MiB batch through a 1-byte pipe takes a million scheduler turns, slower
       # than the send-stall limit; the no-buffer case is the lockstep stream of the test above.)
       capacity=st.sampled_from([512, 9000, 70_000, 1 << 20]),
       triangle=st.booleans(),
       live=st.integers(0, 30),
       seed=st.integers(0, 1000))
def test_any_backlogs_over_any_buffers_converge(backlogs, body_bytes, capacity, triangle, live, seed):
    """Property (issue 30): whatever each replica holds that the others lack, however large its
    events and however small the buffers between them, and with writers still appending during
    the catch-up, every replica ends with the same events (a line, or a triangle where every
    replica hears every other first-hand)."""

    async def scenario(folder: Path) -> None:
        names = "abc"[:len(backlogs)]
        async with replicas(folder, *names) as (reps, key_for, nursery):
            for rep, count in zip(reps, backlogs, strict=True):
                await rep.backlog(count, body_bytes, seed=seed)
            def pair() -> tuple[BoundedStream, BoundedStream]:
                return bounded_stream_pair(capacity)

            for left, right in itertools.pairwise(reps):
                connect(nursery, left, right, key_for, pair=pair)
            if triangle and len(reps) == 3:
                connect(nursery, reps[0], reps[2], key_for, pair=pair)
            for i in range(live):  # writers on every replica while the backlogs cross
                await reps[i % len(reps)].append(f"live {i}")
            await converged(*reps, count=sum(backlogs) + live, timeout=120)
            assert all(r.bodies() == reps[0].bodies() for r in reps)

    with tempfile.TemporaryDirectory(prefix="pl-prop") as folder:
        trio.run(scenario, Path(folder))


async def test_a_live_push_is_visible_before_the_replicas_fsync_and_confirmed_only_after_it(tmp_path):
    """Guards the receipt's meaning (issue 27): a peer's live push commits without waiting for its
    fsync (its origin synced it before pushing), so watchers see it sooner; the ``have`` that
    tells the origin "on disk here" still waits until this replica's WAL is synced."""
    async with replicas(tmp_path, "a", "b") as ((a, b), key_for, nursery):
        await a.append("before")
        link_a, _ = connect(nursery, a, b, key_for)
        await converged(a, b, count=1)
        with trio.fail_after(10):
            while link_a.machine.confirmed.get(a.store.origin_id) != 1:
                await trio.sleep(0.01)
        real_sync, entered, release = b.store.wal.sync, threading.Event(), threading.Event()

        def held_sync():
            entered.set()
            release.wait(10)
            real_sync()

        b.store.wal.sync = held_sync
        await a.append("live")
        await converged(a, b, count=2)  # committed on b, and its watchers told, with b's sync held
        with trio.fail_after(10):  # b syncs for its receipt now, and is held there
            while not entered.is_set():
                await trio.sleep(0.01)
        await trio.testing.wait_all_tasks_blocked()  # whatever both links would do without that sync is done
        assert link_a.machine.confirmed[a.store.origin_id] == 1
        release.set()
        with trio.fail_after(10):
            while link_a.machine.confirmed.get(a.store.origin_id) != 2:
                await trio.sleep(0.01)


async def test_a_vector_names_only_what_the_sync_before_it_covered(tmp_path):
    """Guards issue 43 (a peer's vector was read after a WAL sync and named events committed during
    it: a receipt a power cut could make false): a peer's live push committed on b while b syncs
    for its vector is not in that vector; the next vector, after a sync that covers it, names it."""
    async with replicas(tmp_path, "a", "b") as ((a, b), key_for, _nursery):
        for body in ("one", "two"):
            await a.append(body)
        one, two = a.store.signed_events_of_origin(a.store.origin_id, 0, 10)

        async def push(event):  # what b's link does with a live push: committed before its fsync
            await b.astore.write(lambda ctx: apply_remote(ctx, [event], lambda o, s: key_for(o), source="a"),
                                 durable=False)

        await push(one)
        real_sync, during = b.store.wal.sync, [two]

        def sync_while_a_push_commits():
            while during:
                trio.from_thread.run(push, during.pop())
            real_sync()

        b.store.wal.sync = sync_while_a_push_commits
        link = PeerLink(trio.testing.memory_stream_pair()[0], b.hello(), b.astore, b.bus, key_for)
        machine = link.machine
        machine.next_send(trio.current_time())  # our hello: the opening vector follows, once synced

        async def vector_sent():
            """What the link's sender does for a vector: a sync, then the vector the machine answers."""
            assert machine.next_send(trio.current_time()) is SYNC_WAL
            await link._sync()
            (vector,) = frames(machine.next_send(trio.current_time()))
            return {e.origin: e.max_seq for e in vector.entries}

        assert (await vector_sent())[a.store.origin_id] == 1
        assert b.store.heads()[a.store.origin_id].max_seq == 2  # committed, and watchers told
        machine.outbox.vector()  # anti-entropy
        assert (await vector_sent())[a.store.origin_id] == 2


def frames(data):
    """The messages ``data`` holds, decoded."""
    buffer, messages = FrameBuffer(), []
    buffer.feed(data)
    while (raw := buffer.next_frame()) is not NEED_DATA:
        messages.append(from_wire(raw))
    return messages
