"""The link machine (palace_proto.link): every rule of what a replication link sends next, and when it
wakes next, tested without trio, a socket or a store (issue 44 §2).

A ``Rig`` puts a ``LinkMachine`` ("a") opposite a plain ``PeerSession`` ("b"): what the machine sends
is decoded by the peer's session (so every message is also checked to be legal in order), what the
peer sends is fed to the machine, and the rig answers the machine's requests as the shell would,
from a dict of events per origin (the store), a dict of durable heads and a dict of artifacts."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from palace_proto.bindings import OriginBinding
from palace_proto.broadcast import Graft, IHave, Prune
from palace_proto.envelope import GENESIS_HASH, CommittedEvent, seal_event
from palace_proto.errors import RemoteProtocolError
from palace_proto.framing import NEED_DATA, FrameBuffer
from palace_proto.ids import artifact_id_for_sha256
from palace_proto.link import (
    HELLO_TIMEOUT_S,
    PULL_STALL_S,
    SILENCE_S,
    STALL_REPORT_S,
    SYNC_WAL,
    ArtifactAbsent,
    ArtifactArrived,
    LinkMachine,
    LinkStatistics,
    PeerConfirmed,
)
from palace_proto.outbox import CONTROL_QUEUE_MAX
from palace_proto.overlay import Neighbor, ShuffleReply
from palace_proto.peer import (
    ARTIFACT_CHUNK_BYTES,
    MAX_BINDINGS_PER_MESSAGE,
    MAX_VECTOR_ENTRIES,
    PEER_PROTOCOL_VERSION,
    ArtifactChunk,
    ArtifactWant,
    Events,
    Goodbye,
    Have,
    Hello,
    Members,
    Neighbours,
    Presence,
    Report,
    Vector,
    VectorEntry,
    Want,
    bindings_digest,
)
from palace_proto.session import (
    ANTI_ENTROPY_S,
    ConnectionClosed,
    PeerSession,
    SessionState,
)
from palace_proto.sync import OriginHead
from palace_proto.sync_plan import MAX_FETCHES, SERVE_BURST_EVENTS, SERVE_PAGE, OwedPage

KEY = Ed25519PrivateKey.generate()
OA, OB, OC = ("ori_" + c * 26 for c in "abc")
HASH = b"\x07" * 32
T0 = 1000.0


def hello(peer: str, origin: str) -> Hello:
    return Hello(PEER_PROTOCOL_VERSION, "pal_1", peer, peer, "member", origin=origin, origin_proof=b"n" * 16)


def event(origin: str = OA, seq: int = 1, body: str = "x"):
    return seal_event(KEY, origin=origin, origin_seq=seq, prev_hash=GENESIS_HASH, created_at="2026-11-30T01:02:03.000004Z",
                      type="note", stream="s", room="r", from_agent="a", body=f"{body}{seq}")


def heads(**held: int) -> dict[str, OriginHead]:
    """heads(a=3): we hold OA up to 3."""
    return {"ori_" + k * 26: OriginHead(v, HASH) for k, v in held.items()}


def vector(**theirs: int) -> Vector:
    return Vector(tuple(VectorEntry("ori_" + k * 26, v, HASH) for k, v in sorted(theirs.items())))


class Directory:
    """A member directory: origin -> the daemon (peer id) whose key binds it."""

    def __init__(self, owners: dict[str, str]) -> None:
        self.owners = owners

    def key_for(self, origin: str, origin_seq: int) -> bytes | None:
        return b"k" * 32 if origin in self.owners else None

    def is_bound(self, origin: str) -> bool:
        return origin in self.owners

    def peer_of_origin(self, origin: str) -> str | None:
        return self.owners.get(origin)

    def binding(self, origin: str) -> OriginBinding | None:
        return OriginBinding(origin, b"cert of " + self.owners[origin].encode(), b"n" * 16) if origin in self.owners else None

    def origins_of_peer(self, peer_id: str) -> list[str]:
        return sorted(o for o, p in self.owners.items() if p == peer_id)

    def entries(self) -> tuple[OriginBinding, ...]:
        return tuple(b for b in map(self.binding, sorted(self.owners)) if b is not None)


class Report_:
    """An apply report, as the store answers (``ApplyOutcome``)."""

    def __init__(self, applied=(), gaps=(), rejected=(), refused=()):
        self.applied, self.gaps, self.rejected, self.refused = list(applied), list(gaps), list(rejected), list(refused)


class Rig:
    """A link machine ("a", origin OA) opposite the peer's session ("b", origin OB)."""

    def __init__(self, *, directory: Directory | None = None, expected: str | None = "b", **kw) -> None:
        key_for = None if directory is not None else (lambda origin, seq: b"k" * 32)
        self.m = LinkMachine(hello("a", OA), directory=directory, key_for=key_for, expected_peer_id=expected, **kw)
        self.peer = PeerSession(hello("b", OB))
        self.now = T0
        self.m.start(self.now)
        #: the store: what we hold of each origin, and what is on disk
        self.store: dict[str, list] = {}
        self.durable: dict[str, OriginHead] = {}
        self.artifacts: dict[str, dict] = {}
        self.waits: list[float] = []
        self.syncs = 0

    def hold(self, origin: str, count: int) -> None:
        self.store[origin] = [event(origin, s) for s in range(1, count + 1)]
        self.durable[origin] = OriginHead(count, HASH)

    # -- the peer's side ---------------------------------------------------------------------------

    def tell(self, *messages) -> list:
        """The peer sends ``messages``: what the machine hands the shell."""
        self.m.receive_data(b"".join(self.peer.send(m, now=self.now) for m in messages), self.now)
        out = []
        while (got := self.m.next_event(self.now)) is not NEED_DATA:
            out.append(got)
        return out

    def received(self) -> list:
        """What the peer decoded so far and had not been shown."""
        out = []
        while (message := self.peer.next_event()) is not NEED_DATA:
            out.append(message)
        return out

    # -- the shell's side --------------------------------------------------------------------------

    def step(self):
        """One ``next_send``, answered as the shell would; returns the step."""
        step = self.m.next_send(self.now)
        if isinstance(step, bytes):
            self.peer.receive_data(step)
        elif step is SYNC_WAL:
            self.syncs += 1
            self.m.synced(self.durable)
        elif isinstance(step, OwedPage):
            held = self.store.get(step.origin, [])
            events = [e for e in held if e.origin_seq > step.after_seq][:step.limit]
            if len(events) < step.limit:  # the bus did not hold it all: bounded by our head
                limit = self.m.bound_by_head(step, len(held) if held else None)
                events = events[:max(limit, 0)]
            self.waits.append(self.m.page_filled(step, events, self.now))
        elif isinstance(step, ArtifactWant):
            self.m.artifact_read(step, self.artifacts.get(step.artifact_id))
        return step

    def drain(self, limit: int = 10_000) -> list:
        """Every step until the machine has nothing to send now; what the peer received."""
        for _ in range(limit):
            if self.step() is None:
                return self.received()
        raise AssertionError("the machine never ran out of things to send")

    def open(self, *, their_vector: Vector | None = None) -> list:
        """Both openings: our hello, the peer's, our members and vector, then the peer's vector."""
        opening = self.drain()
        self.tell(self.peer.our_hello)
        opening += self.drain()
        self.tell(their_vector or Vector(()))
        return opening

    def at(self, now: float) -> None:
        """Time moves to ``now``; a passed deadline is handled as the shell does."""
        self.now = now
        timer = self.m.get_timer()
        if timer is not None and now >= timer:
            self.m.handle_timer(now)


def kinds(messages) -> list[str]:
    return [type(m).__name__ for m in messages]


# -- the opening -----------------------------------------------------------------------------


def test_the_opening_is_our_hello_then_our_bindings_once_the_peer_lacks_them_then_our_vector():
    rig = Rig(directory=Directory({OA: "a", OC: "c"}))
    rig.durable = heads(a=3)
    first = rig.m.next_send(T0)
    assert isinstance(first, bytes)
    rig.peer.receive_data(first)
    (hello_,) = rig.received()
    assert hello_ == rig.m.session.our_hello and hello_.bindings == bindings_digest([OA, OC])
    assert rig.m.next_send(T0) is None  # our bindings wait for the peer's hello: it may hold them all
    rig.tell(rig.peer.our_hello)  # a hello that says nothing of its bindings: it is sent them all
    members = rig.m.next_send(T0)
    rig.peer.receive_data(members)
    (members,) = rig.received()
    assert [b.origin for b in members.entries] == [OA, OC]
    assert rig.m.next_send(T0) is SYNC_WAL  # the vector names only what a sync covers
    assert rig.m.next_send(T0) is None  # one sync at a time
    rig.m.synced(rig.durable)
    (sent,) = rig.drain()
    assert sent == Vector((VectorEntry(OA, 3, HASH),))


def test_a_peer_holding_the_same_bindings_is_sent_none_at_the_opening():
    rig = Rig(directory=Directory({OA: "a", OC: "c"}))
    rig.peer = PeerSession(dataclasses.replace(hello("b", OB), bindings=bindings_digest([OC, OA])))
    rig.step()  # our hello
    rig.tell(rig.peer.our_hello)
    assert kinds(rig.drain()) == ["Hello", "Vector"]
    rig.tell(Vector(()))
    rig.m.gossip(Presence("c", "c", 1, (), b"s" * 64))
    assert kinds(rig.drain()) == ["Presence"]  # and no binding ahead of gossip it needs: it holds them


def test_many_bindings_travel_in_chunks_and_none_as_an_empty_members():
    owners = {"ori_" + format(i, "026b").replace("0", "a").replace("1", "b"): "x" for i in range(MAX_BINDINGS_PER_MESSAGE + 3)}
    many = Rig(directory=Directory(owners))
    many.step()
    many.tell(many.peer.our_hello)
    messages = many.drain()
    assert [len(m.entries) for m in messages if isinstance(m, Members)] == [MAX_BINDINGS_PER_MESSAGE, 3]
    empty = Rig(directory=Directory({}))
    empty.step()
    empty.tell(empty.peer.our_hello)
    assert kinds(empty.drain()) == ["Hello", "Members", "Vector"]
    assert kinds(Rig().drain()) == ["Hello", "Vector"]  # no directory: no bindings travel


def test_nothing_else_goes_before_our_opening_vector():
    rig = Rig()
    rig.step()  # our hello
    assert rig.m.next_send(T0) is SYNC_WAL
    rig.tell(rig.peer.our_hello, vector(b=5))
    rig.m.tell_neighbours(("c",))
    rig.m.vector_checked(rig.m.their_vector, {}, [], refused_next={}, now=T0)
    rig.m.gossip(Presence("c", "c", 1, (), b"s" * 64))
    assert rig.m.next_send(T0) is None  # the want, the neighbours and the gossip wait for the vector
    rig.m.synced({})
    assert kinds(rig.drain()) == ["Hello", "Vector", "Neighbours", "Want", "Presence"]


def test_a_hello_naming_another_peer_than_its_certificate_is_refused():
    rig = Rig(expected="someone-else")
    rig.drain()
    with pytest.raises(RemoteProtocolError, match="TLS certificate"):
        rig.tell(rig.peer.our_hello)


def test_a_peer_that_says_no_hello_in_time_is_refused_and_the_timer_says_when():
    rig = Rig()
    rig.drain()
    assert rig.m.get_timer() == T0 + HELLO_TIMEOUT_S
    rig.at(T0 + HELLO_TIMEOUT_S - 1)
    with pytest.raises(RemoteProtocolError, match="no hello within 10 s"):
        rig.at(T0 + HELLO_TIMEOUT_S)
    late = Rig()
    late.open()
    assert late.m.get_timer() == T0 + ANTI_ENTROPY_S  # a hello came: no deadline for it any more


def test_a_link_needs_a_way_to_verify_events():
    with pytest.raises(TypeError, match="member directory or a key_for"):
        LinkMachine(hello("a", OA))


def test_what_the_peer_says_of_itself_and_others_goes_to_the_shell():
    rig = Rig()
    rig.open()
    assert rig.m.their_hello == rig.peer.our_hello and rig.m.peer_id == "b"
    members = Members((OriginBinding(OC, b"cert", b"n" * 16),))
    presence, report = Presence("c", "c", 1, (), b"s" * 64), Report("c", "c", 1, b"{}", b"s" * 64)
    assert rig.tell(members, presence, report) == [members, presence, report]


# -- vectors: anti-entropy and the neighbours rule ---------------------------------------------


def test_our_vector_goes_every_anti_entropy_period_and_the_timer_says_when():
    rig = Rig()
    rig.open()
    assert rig.m.get_timer() == T0 + ANTI_ENTROPY_S
    rig.at(T0 + ANTI_ENTROPY_S)
    assert rig.m.get_timer() is None  # a vector is due: no deadline until it has gone
    assert rig.m.next_send(rig.now) is SYNC_WAL
    assert rig.m.get_timer() is None  # nor while its sync runs
    rig.durable = heads(a=7)
    rig.m.synced(rig.durable)
    assert rig.drain() == [Vector((VectorEntry(OA, 7, HASH),))]
    assert rig.m.get_timer() == T0 + 2 * ANTI_ENTROPY_S


def test_a_vector_sent_for_another_reason_moves_the_anti_entropy_deadline():
    rig = Rig()
    rig.open(their_vector=vector())
    rig.now = T0 + 4
    rig.tell(Neighbours(("c",)))
    rig.tell(Neighbours(()))  # it lost a first-hand source: we answer with our vector
    assert kinds(rig.drain()) == ["Vector"]
    assert rig.m.get_timer() == T0 + 4 + ANTI_ENTROPY_S


def test_a_peer_whose_neighbours_shrink_is_sent_our_vector_and_one_whose_grow_is_not():
    rig = Rig()
    rig.open()
    assert rig.tell(Neighbours(("c", "d"))) == [] and rig.drain() == []
    assert rig.m.peer_neighbours == {"c", "d"}
    rig.tell(Neighbours(("c",)))
    assert kinds(rig.drain()) == ["Vector"]


def test_our_neighbours_are_told_without_the_peer_itself_and_only_the_newest_set():
    rig = Rig()
    rig.open()
    rig.m.tell_neighbours(("b", "c", "d"))
    rig.m.tell_neighbours(("b", "c"))
    assert rig.drain() == [Neighbours(("c",))]


# -- pulls ---------------------------------------------------------------------------------------


def test_the_peers_vector_is_answered_with_wants_for_what_it_holds_more_of():
    rig = Rig()
    rig.open()
    theirs = rig.tell(vector(a=2, b=9, c=4))[-1]
    assert rig.m.vector_checked(theirs, heads(a=2, b=3, c=4), [], refused_next={}, now=rig.now) == ()
    assert rig.drain() == [Want(OB, 3)]
    assert rig.m.their_heads == {OA: 2, OB: 9, OC: 4}


def test_origins_we_could_not_accept_are_not_asked_for():
    """Unbound origins, an origin whose next event this replica refused, and one whose next event
    this very peer sent and we rejected (until our head moves): asking again would only repeat the
    refusal, every 10 s, forever."""
    rig = Rig(directory=Directory({OA: "a", OB: "b"}))
    rig.open()
    theirs = rig.tell(vector(b=9, c=9))[-1]  # OC: bound nowhere here
    rig.m.vector_checked(theirs, {}, [], refused_next={OB: (1, HASH, "breaks a rule")}, now=rig.now)
    assert rig.drain() == []
    rig = Rig()
    rig.open()
    rig.m.batch_applied([event(OB, 4)], Report_(rejected=[event(OB, 4)]), heads=heads(b=3), committed=heads(b=3),
                        refused_next={})
    rig.drain()
    theirs = vector(b=9)
    rig.m.vector_checked(theirs, heads(b=3), [], refused_next={}, now=rig.now)
    assert rig.drain() == []
    rig.m.vector_checked(theirs, heads(b=5), [], refused_next={}, now=rig.now)  # another peer moved our head
    assert rig.drain() == [Want(OB, 5)]
    assert rig.m.stats.rejected_events == 1


def test_a_fork_in_the_peers_vector_is_pulled_once_as_evidence():
    rig = Rig()
    rig.open()
    theirs = rig.tell(vector(b=3))[-1]
    assert rig.m.vector_checked(theirs, heads(b=5), [OB], refused_next={}, now=rig.now) == (OB,)
    assert rig.drain() == [Want(OB, 2)]
    assert rig.m.vector_checked(theirs, heads(b=5), [OB], refused_next={}, now=rig.now) == ()
    assert rig.drain() == [] and rig.m.forks == [OB]


def test_a_gap_is_pulled_again_from_our_head():
    rig = Rig()
    rig.open(their_vector=vector(b=9))
    rig.m.batch_applied([event(OB, 7)], Report_(gaps=[event(OB, 7)]), heads=heads(b=4), committed={},
                        refused_next={})
    assert rig.drain() == [Want(OB, 4)]


def test_a_pull_that_brings_nothing_for_pull_stall_s_is_named_as_a_stall():
    rig = Rig()
    rig.open()
    theirs = rig.tell(vector(b=9))[-1]
    rig.m.vector_checked(theirs, {}, [], refused_next={}, now=rig.now)
    assert rig.m.stall(rig.now + PULL_STALL_S) is None
    assert "we asked for events of 1 origin(s)" in rig.m.stall(rig.now + PULL_STALL_S + 1)
    rig.now += PULL_STALL_S
    rig.tell(Events((event(OB, 1),)))  # events came: the pull makes progress
    assert rig.m.stall(rig.now + 1) is None


# -- receipts --------------------------------------------------------------------------------


def test_receipts_go_only_after_the_sync_that_covers_them():
    """A receipt names what we held as the writer counted the batch (``committed``), and goes only
    once a sync started after it is done (issue 43)."""
    rig = Rig()
    rig.open(their_vector=vector(b=2))
    batch = [event(OB, 1), event(OB, 2)]
    rig.m.batch_applied(batch, Report_(applied=batch), heads=heads(b=2), committed=heads(b=2), refused_next={})
    assert rig.m.next_send(rig.now) is SYNC_WAL
    rig.m.batch_applied([event(OB, 3)], Report_(applied=[1]), heads=heads(b=3), committed=heads(b=3),
                        refused_next={})
    assert rig.m.next_send(rig.now) is None  # the receipt waits for its sync; the newer one for the next
    rig.m.synced(rig.durable)
    assert isinstance(rig.step(), bytes) and rig.received() == [Have(((OB, 2),))]
    assert rig.m.next_send(rig.now) is SYNC_WAL
    rig.m.synced(rig.durable)
    assert rig.drain() == [Have(((OB, 3),))]
    assert rig.m.stats.received_events == 3


def test_a_receipt_or_a_vector_from_the_peer_that_says_more_is_link_progress():
    rig = Rig()
    rig.drain()
    assert rig.tell(rig.peer.our_hello, vector(a=2)) == [rig.peer.our_hello, PeerConfirmed(), vector(a=2)]
    assert rig.tell(Have(((OA, 2),))) == []  # nothing new
    assert rig.tell(Have(((OA, 3),))) == [PeerConfirmed()]
    assert rig.m.confirmed == {OA: 3}


# -- pushes and served pulls -----------------------------------------------------------------


def test_a_commit_the_peer_lacks_is_pushed_at_the_next_send_and_one_it_holds_wakes_nothing():
    rig = Rig()
    rig.open(their_vector=vector(a=1))
    rig.hold(OA, 3)
    assert not rig.m.committed([CommittedEvent(1, rig.store[OA][0])])  # it holds OA#1
    assert rig.m.committed([CommittedEvent(2, rig.store[OA][1]), CommittedEvent(3, rig.store[OA][2])])
    (events,) = rig.drain()
    assert [e.origin_seq for e in events.events] == [2, 3]
    assert not rig.m.committed([CommittedEvent(3, rig.store[OA][2])])  # sent: the peer holds it now
    assert rig.m.stats.sent_events == 2 and rig.waits == [0.0]  # a push never waits for the serve budget


def test_events_wait_for_the_peers_vector():
    rig = Rig()
    rig.drain()
    rig.hold(OA, 1)
    rig.m.committed([CommittedEvent(1, rig.store[OA][0])])
    assert rig.drain() == []
    rig.tell(rig.peer.our_hello, vector())
    assert kinds(rig.drain()) == ["Events"]


def test_a_commit_is_not_relayed_to_a_peer_that_hears_its_daemon_first_hand_but_ours_always_go():
    rig = Rig(directory=Directory({OA: "a", OB: "b", OC: "c"}))
    rig.open()
    rig.tell(Neighbours(("c",)))
    rig.drain()
    rig.hold(OA, 1)
    rig.hold(OC, 1)
    rig.m.committed([CommittedEvent(1, rig.store[OC][0]), CommittedEvent(2, rig.store[OA][0])])
    sent = rig.drain()
    assert [e.origin for m in sent if isinstance(m, Events) for e in m.events] == [OA]


def test_bindings_travel_ahead_of_the_events_that_need_them():
    directory = Directory({OA: "a"})
    rig = Rig(directory=directory)
    rig.open()
    directory.owners[OC] = "c"  # bound after our opening
    rig.hold(OC, 2)
    rig.m.committed([CommittedEvent(1, rig.store[OC][1])])
    members, events = rig.drain()
    assert [b.origin for b in members.entries] == [OC] and [e.origin_seq for e in events.events] == [1, 2]
    rig.hold(OC, 3)
    rig.m.committed([CommittedEvent(2, rig.store[OC][2])])
    assert kinds(rig.drain()) == ["Events"]  # sent once


def test_what_the_peer_proved_it_holds_by_sending_it_counts_as_held():
    rig = Rig()
    rig.open()
    batch = [event(OB, 1), event(OB, 2), event(OC, 1)]
    assert rig.m.events_verified(batch, [b"k" * 32, b"k" * 32, None])  # OC#1 did not verify
    assert rig.m.confirmed == {OB: 2}
    assert not rig.m.events_verified(batch[:1], [b"k" * 32])


def test_one_page_and_one_artifact_are_read_at_a_time():
    rig = Rig()
    rig.open()
    rig.hold(OA, 3)
    rig.hold(OC, 3)
    rig.tell(Want(OA, 0), Want(OC, 0), ArtifactWant("art_" + "1" * 32, 0), ArtifactWant("art_" + "2" * 32, 0))
    steps = [rig.m.next_send(rig.now) for _ in range(4)]
    assert [type(s).__name__ for s in steps] == ["ArtifactWant", "OwedPage", "NoneType", "NoneType"]
    rig.m.artifact_read(steps[0], None)
    assert kinds(rig.drain()) == ["ArtifactChunk", "ArtifactChunk"]  # (the page was handed out, never filled)


def test_a_push_the_peer_no_longer_lacks_or_now_hears_first_hand_is_dropped_unsent():
    rig = Rig(directory=Directory({OA: "a", OB: "b", OC: "c"}))
    rig.open()
    rig.hold(OA, 2)
    rig.hold(OC, 1)
    rig.m.committed([CommittedEvent(1, rig.store[OA][1]), CommittedEvent(2, rig.store[OC][0])])
    assert rig.m.serving.owed_origins() == [OA, OC]
    rig.tell(Have(((OA, 2),)), Neighbours(("c",)))  # it got OA elsewhere, and now hears c itself
    assert rig.drain() == [] and not rig.m.serving.owes


def test_a_want_is_served_a_page_at_a_time_up_to_our_head_round_robin_over_origins():
    rig = Rig()
    rig.open()
    rig.hold(OA, SERVE_PAGE + 10)
    rig.hold(OC, 3)
    rig.tell(Want(OA, 0), Want(OC, 1))
    sent = [(m.events[0].origin, m.events[0].origin_seq, m.events[-1].origin_seq) for m in rig.drain()]
    assert sent == [(OA, 1, SERVE_PAGE), (OC, 2, 3), (OA, SERVE_PAGE + 1, SERVE_PAGE + 10)]


def test_a_page_is_sent_in_batches_bounded_by_bytes():
    rig = Rig()
    rig.open()
    rig.store[OA] = [event(OA, s, body="y" * 300_000) for s in range(1, 9)]
    rig.tell(Want(OA, 0))
    assert [len(m.events) for m in rig.drain()] == [3, 3, 2]


def test_pulls_beyond_the_burst_wait_for_the_budget_while_everything_else_goes():
    rig = Rig()
    rig.open()
    rig.hold(OA, SERVE_PAGE)
    rig.m.serving.throttle(SERVE_BURST_EVENTS - 100, rig.now)  # what earlier pulls spent
    rig.tell(Want(OA, 0))
    assert rig.drain() == []
    (wait,) = rig.waits
    assert wait == pytest.approx((SERVE_PAGE - 100) / 25_000)
    assert rig.m.get_timer() == rig.now + wait  # the sender wakes for it
    rig.m.tell_neighbours(("c",))
    assert rig.drain() == [Neighbours(("c",))]  # the wait holds events only
    rig.at(rig.now + wait)
    (events,) = rig.drain()
    assert len(events.events) == SERVE_PAGE


# -- artifacts -------------------------------------------------------------------------------


def artifact(content: bytes) -> tuple[str, dict]:
    sha = hashlib.sha256(content).hexdigest()
    return artifact_id_for_sha256(sha), {"content": content, "sha256": sha, "kind": "file", "created_by": "alice",
                                         "created_at": "2026-11-30T01:02:03.000004Z", "metadata": {"k": 1}}


def test_an_artifact_is_served_in_chunks_between_event_batches():
    rig = Rig()
    rig.open()
    artifact_id, record = artifact(b"z" * (2 * ARTIFACT_CHUNK_BYTES + 5))
    rig.artifacts[artifact_id] = record
    rig.hold(OA, 1500)
    rig.tell(Want(OA, 0), ArtifactWant(artifact_id, 0), ArtifactWant("art_" + "0" * 32, 0))
    sent = rig.drain()
    order = kinds(sent)
    assert order.count("Events") == 3 and order.count("ArtifactChunk") == 4
    assert order.index("Events") < 2 < len(order) - 1 - order[::-1].index("Events")  # interleaved, both ways
    chunks = [m for m in sent if isinstance(m, ArtifactChunk)]
    assert [(c.offset, len(c.data)) for c in chunks[:3]] == [
        (0, ARTIFACT_CHUNK_BYTES), (ARTIFACT_CHUNK_BYTES, ARTIFACT_CHUNK_BYTES), (2 * ARTIFACT_CHUNK_BYTES, 5)]
    assert chunks[0].metadata_json == '{"k":1}'
    assert (chunks[3].artifact_id, chunks[3].size) == ("art_" + "0" * 32, -1)  # not held here


def test_artifacts_an_event_lacks_are_asked_for_at_most_max_fetches_at_once():
    rig = Rig()
    rig.open(their_vector=vector(b=2))
    ids = [f"art_{i:032x}" for i in range(MAX_FETCHES + 2)]
    waiting = event(OB, 1)
    rig.m.batch_applied([waiting], Report_(), [(waiting, ids)], heads={}, committed={}, refused_next={})
    assert [m.artifact_id for m in rig.drain()] == sorted(ids[:MAX_FETCHES])
    assert rig.m.fetching
    fetched_elsewhere = event(OC, 1)
    rig.m.batch_applied([fetched_elsewhere], Report_(), [(fetched_elsewhere, [])], heads={}, committed={},
                        refused_next={})
    assert rig.drain() == [Want(OC, 0)]  # its artifacts are here now: its origin is pulled again


def test_an_artifact_that_arrives_whole_is_handed_over_and_its_origin_pulled_again():
    rig = Rig()
    rig.open(their_vector=vector(b=2))
    artifact_id, record = artifact(b"payload")
    waiting = event(OB, 1)
    rig.m.batch_applied([waiting], Report_(), [(waiting, [artifact_id])], heads={}, committed={}, refused_next={})
    rig.drain()
    chunk = ArtifactChunk(artifact_id, 0, 7, record["sha256"], "file", "alice", "2026-11-30T01:02:03.000004Z", "{}", b"payload")
    (arrived,) = rig.tell(chunk)
    assert isinstance(arrived, ArtifactArrived) and arrived.received.content == b"payload"
    assert arrived.record == {"sha256": record["sha256"], "kind": "file", "created_by": "alice",
                              "created_at": "2026-11-30T01:02:03.000004Z", "metadata_json": "{}"}
    rig.m.artifact_stored(arrived.received, {})
    assert rig.drain() == [Want(OB, 0)]
    assert rig.tell(ArtifactChunk("art_" + "1" * 32, 0, -1, "", "", "", "", "{}", b"")) == []  # never asked for


def test_an_artifact_the_peer_lacks_or_describes_against_the_rules():
    rig = Rig()
    rig.open(their_vector=vector(b=2))
    artifact_id, record = artifact(b"payload")
    waiting = event(OB, 1)
    rig.m.batch_applied([waiting], Report_(), [(waiting, [artifact_id, "art_" + "2" * 32])], heads={}, committed={},
                        refused_next={})
    rig.drain()
    assert rig.tell(ArtifactChunk("art_" + "2" * 32, 0, -1, "", "", "", "", "{}", b"")) == [
        ArtifactAbsent("art_" + "2" * 32)]
    bad = ArtifactChunk(artifact_id, 0, 7, record["sha256"], "", "alice", "2026-11-30T01:02:03.000004Z", "{}", b"payload")
    with pytest.raises(RemoteProtocolError, match="descriptive fields"):
        rig.tell(bad)


# -- gossip ----------------------------------------------------------------------------------


def test_gossip_goes_newest_per_daemon_with_its_bindings_and_never_about_a_first_hand_neighbour():
    rig = Rig(directory=Directory({OA: "a", OC: "c", "ori_" + "d" * 26: "d"}))
    rig.open()
    rig.tell(Neighbours(("d",)))
    for serial in (3, 1, 2):
        rig.m.gossip(Presence("c", "c", serial, (), b"s" * 64))
    rig.m.gossip(Report("c", "c", 1, b"{}", b"s" * 64))
    rig.m.gossip(Presence("d", "d", 1, (), b"s" * 64))  # the peer hears d first-hand
    rig.m.gossip(Presence("b", "b", 1, (), b"s" * 64))  # about the peer itself
    rig.m.gossip(Presence("e", "e", 1, (), b"s" * 64))
    rig.m.discard_gossip("e")  # revoked meanwhile
    assert [(type(m).__name__, getattr(m, "serial", None)) for m in rig.drain()] == [
        ("Presence", 3), ("Report", 1)]  # c's bindings went with our opening


def test_gossip_about_a_daemon_bound_after_our_opening_carries_its_bindings():
    directory = Directory({OA: "a"})
    rig = Rig(directory=directory)
    rig.open()
    directory.owners[OC] = "c"
    rig.m.gossip(Presence("c", "c", 1, (), b"s" * 64))
    members, presence = rig.drain()
    assert [b.origin for b in members.entries] == [OC] and presence.peer_id == "c"


# -- a quiet or stuck peer, and the end --------------------------------------------------------


def test_a_peer_that_sends_nothing_for_silence_s_is_given_up_and_named_as_stalled_before():
    rig = Rig()
    rig.open()
    rig.m.reading(rig.now)
    assert rig.m.get_timer() == rig.now + ANTI_ENTROPY_S
    rig.drain()
    start = rig.now
    rig.at(start + ANTI_ENTROPY_S)  # our anti-entropy vector
    rig.drain()
    assert rig.m.get_timer() == start + 2 * ANTI_ENTROPY_S
    assert rig.m.stall(start + STALL_REPORT_S + 1) == "it has sent nothing for 16 s"
    rig.at(start + 2 * ANTI_ENTROPY_S)
    rig.drain()
    assert rig.m.get_timer() == start + SILENCE_S
    with pytest.raises(RemoteProtocolError, match="sent nothing for 30 s"):
        rig.at(start + SILENCE_S)


def test_the_silence_rule_counts_only_while_we_wait_for_the_peer():
    rig = Rig()
    rig.open()
    rig.m.reading(T0)
    rig.m.receive_data(b"", T0 + 1)  # bytes came (EOF here): the shell is busy with them, not waiting
    assert rig.m.get_timer() == T0 + ANTI_ENTROPY_S and rig.m.stall(T0 + 100) is None


def test_a_peer_that_takes_nothing_we_send_is_named_as_stalled():
    rig = Rig()
    rig.open()
    rig.m.sending(T0)
    assert rig.m.stall(T0 + STALL_REPORT_S) is None
    assert rig.m.stall(T0 + STALL_REPORT_S + 1) == "it has taken nothing we sent for 16 s"
    assert rig.m.goodbye("shutting_down", "bye") is None  # half a frame is on its way
    rig.m.data_sent(100)
    assert rig.m.stall(T0 + 100) is None and rig.m.stats.bytes_sent == 100


def test_after_our_goodbye_nothing_more_is_sent_and_no_timer_runs():
    rig = Rig()
    rig.open()
    rig.hold(OA, 1)
    rig.m.committed([CommittedEvent(1, rig.store[OA][0])])
    rig.peer.receive_data(rig.m.goodbye("shutting_down", "bye"))
    assert rig.received() == [Goodbye("shutting_down", "bye")]
    assert rig.m.next_send(rig.now) is None and rig.m.get_timer() is None
    assert rig.m.goodbye("shutting_down", "again") is None


def test_the_peers_goodbye_and_eof_close_the_link():
    rig = Rig()
    rig.open()
    assert rig.tell(Goodbye("protocol_error", "why")) == []
    rig.m.receive_data(b"", rig.now)
    assert rig.m.next_event(rig.now) == ConnectionClosed(Goodbye("protocol_error", "why"))
    assert rig.m.session.state is SessionState.CLOSED and rig.m.next_send(rig.now) is None


def test_statistics_and_repr_show_what_status_reads():
    rig = Rig()
    rig.open()
    assert rig.m.stats.bytes_received > 0
    assert repr(rig.m).startswith("<LinkMachine <PeerSession b SYNCING in=2 out=2> sent=0 received=0")
    assert LinkStatistics().sent_events == 0


# -- properties --------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["commit", "want", "have", "tick", "neighbours", "gossip", "apply"]),
                          st.integers(0, 40)), max_size=40))
def test_whatever_happens_the_machine_never_asks_to_be_woken_in_the_past(script):
    """After the shell handled the timer and sent all it could, the next deadline is in the future
    (or there is none): a sender that sleeps until it can never spin."""
    rig = Rig()
    rig.open(their_vector=vector(a=0))
    seq = 0
    for action, n in script:
        if action == "commit":
            seq += 1
            rig.hold(OA, seq)
            rig.m.committed([CommittedEvent(seq, rig.store[OA][-1])])
        elif action == "want":
            rig.tell(Want(OA, min(n, seq)))
        elif action == "have":
            rig.tell(Have(((OA, n),)))
        elif action == "tick":
            rig.now += n
        elif action == "neighbours":
            rig.tell(Neighbours(tuple(f"p{i}" for i in range(n % 3))))
        elif action == "gossip":
            rig.m.gossip(Presence("c", "c", n, (), b"s" * 64))
        else:
            rig.m.batch_applied([event(OB, n + 1)], Report_(applied=[1]), heads=heads(b=n + 1),
                                committed=heads(b=n + 1), refused_next={})
        rig.m.reading(rig.now)
        rig.at(rig.now)
        rig.drain()
        timer = rig.m.get_timer()
        assert timer is None or timer > rig.now


# -- delta vectors (issue 45 §2) ---------------------------------------------------------------


def sent_vectors(rig: Rig) -> list[Vector]:
    """The vectors the machine put on the wire, as sent (not as the peer merged them)."""
    out = []
    while (step := rig.m.next_send(rig.now)) is not None:
        if step is SYNC_WAL:
            rig.m.synced(rig.durable)
        elif isinstance(step, bytes):
            rig.peer.receive_data(step)
            out += [Vector(tuple(VectorEntry(*e) for e in raw["entries"]), raw.get("delta", False))
                    for raw in _frames(step) if raw["t"] == "vector"]
    rig.received()
    return out


def _frames(data: bytes) -> list[dict]:
    buffer = FrameBuffer(1 << 24)
    buffer.feed(data)
    frames = []
    while (raw := buffer.next_frame()) is not NEED_DATA:
        frames.append(raw)
    return frames


def test_after_the_first_whole_vector_a_link_sends_only_the_origins_that_moved():
    rig = Rig()
    rig.durable = heads(a=3, b=2)
    rig.step()  # our hello
    assert sent_vectors(rig) == [Vector((VectorEntry(OA, 3, HASH), VectorEntry(OB, 2, HASH)))]
    rig.tell(rig.peer.our_hello, Vector(()))
    rig.durable = heads(a=5, b=2, c=1)
    rig.at(T0 + ANTI_ENTROPY_S)
    assert sent_vectors(rig) == [Vector((VectorEntry(OA, 5, HASH), VectorEntry(OC, 1, HASH)), delta=True)]
    rig.at(T0 + 2 * ANTI_ENTROPY_S)  # idle: an empty delta still goes (it says the link is alive)
    assert sent_vectors(rig) == [Vector((), delta=True)]
    # the peer's side merged every delta into the whole vector
    assert rig.peer.their_vector == Vector((VectorEntry(OA, 5, HASH), VectorEntry(OB, 2, HASH), VectorEntry(OC, 1, HASH)))


def test_an_empty_first_vector_is_whole_and_the_next_names_what_appeared():
    rig = Rig()
    rig.open()
    rig.durable = heads(a=1)
    rig.at(T0 + ANTI_ENTROPY_S)
    assert sent_vectors(rig) == [Vector((VectorEntry(OA, 1, HASH),), delta=True)]


def test_a_delta_is_merged_into_the_peers_vector_and_handed_on_whole():
    rig = Rig()
    rig.drain()
    rig.tell(rig.peer.our_hello, vector(b=4, c=2))
    (merged,) = [m for m in rig.tell(Vector((VectorEntry(OB, 6, HASH),), delta=True)) if isinstance(m, Vector)]
    assert merged == vector(b=6, c=2) and not merged.delta
    assert rig.m.their_vector == vector(b=6, c=2)


def test_a_delta_before_any_whole_vector_or_past_the_bound_is_refused():
    rig = Rig()
    rig.drain()
    with pytest.raises(RemoteProtocolError, match="before the whole one"):
        rig.tell(rig.peer.our_hello, Vector((), delta=True))
    big = Rig()
    big.drain()
    origins = ["ori_" + format(i, "026b").replace("0", "a").replace("1", "b") for i in range(MAX_VECTOR_ENTRIES)]
    big.tell(big.peer.our_hello, Vector(tuple(VectorEntry(o, 1, HASH) for o in origins)))
    with pytest.raises(RemoteProtocolError, match="more than"):
        big.tell(Vector((VectorEntry(OC, 1, HASH),), delta=True))


# -- the partial views' and the broadcast tree's messages (issue 45 §2) ------------------------


def test_view_and_tree_messages_go_to_the_shell_and_ours_go_after_the_opening_in_order():
    rig = Rig()
    rig.step()  # our hello
    rig.m.send_control(Neighbor(high=True))
    rig.m.send_control(IHave(((OA, 1),)))
    assert rig.m.next_send(T0) is SYNC_WAL  # they wait for our opening vector, like every small message
    rig.m.synced({})
    rig.tell(rig.peer.our_hello, Vector(()))
    assert kinds(rig.drain()) == ["Hello", "Vector", "Neighbor", "IHave"]
    assert rig.tell(Graft(OA, 1), Prune(), ShuffleReply(("c",))) == [Graft(OA, 1), Prune(), ShuffleReply(("c",))]


def test_the_oldest_control_messages_are_dropped_past_the_bound():
    rig = Rig()
    rig.open()
    for seq in range(1, CONTROL_QUEUE_MAX + 11):
        rig.m.send_control(Graft(OA, seq))
    sent = rig.drain()
    assert len(sent) == CONTROL_QUEUE_MAX and sent[0] == Graft(OA, 11)


def test_a_lazy_link_pushes_only_our_own_events_but_still_serves_pulls_and_grafts():
    rig = Rig()
    rig.open(their_vector=vector())
    rig.hold(OC, 3)
    rig.hold(OA, 1)
    rig.m.lazy = True
    assert not rig.m.committed([CommittedEvent(s, rig.store[OC][s - 1]) for s in (1, 2, 3)])
    assert rig.drain() == []
    assert rig.m.committed([CommittedEvent(4, rig.store[OA][0])])  # ours: nobody else relays it to this peer
    assert [e.origin for e in rig.drain()[0].events] == [OA]
    assert rig.m.serve_from(OC, 2)  # it grafted OC#2: that one goes (the vectors pull the rest)
    (events,) = rig.drain()
    assert [e.origin_seq for e in events.events] == [2]
    assert not rig.m.serve_from(OC, 2)  # it holds that one now: a graft for it costs nothing
    rig.tell(Want(OC, 0))
    assert [e.origin_seq for e in rig.drain()[0].events] == [1, 2, 3]
