"""Replication between palace members over mutual TLS (in-process streams): origins are bound to
keys by CA-verified certificates carried in the hello and relayed in Members messages, so a relayed
origin verifies on a replica that never met it, and an observer's events are refused by members."""

from __future__ import annotations

import contextlib
import datetime
import ssl

import trio
import trio.testing
from cryptography.hazmat.primitives import serialization

from palace_proto.bindings import OriginBinding
from palace_proto.ids import fingerprint
from palace_proto.peer import PEER_PROTOCOL_VERSION, Hello
from palace_proto.pki import issue_certificate, new_palace
from palaced.members import MemberDirectory
from palaced.peers.link import PeerLink
from tests.daemon.test_replication import Replica, converged

NOW = datetime.datetime.now(datetime.UTC)


class Member(Replica):
    def __init__(self, path, name, ca_key, ca_pem, role="member"):
        super().__init__(path, name)
        self.cert = issue_certificate(ca_key, ca_pem, self.store.public_key, role=role, name=name, now=NOW)
        self.directory = MemberDirectory(ca_pem, lambda: datetime.datetime.now(datetime.UTC))
        (self.nonce,) = [nonce for origin, nonce in self.store.own_origins() if origin == self.store.origin_id]
        self.directory.bind(OriginBinding(self.store.origin_id, self.cert, self.nonce))
        self.role = role
        (path.parent / f"{name}.crt").write_bytes(self.cert)
        (path.parent / f"{name}.key").write_bytes(self.store.chain.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        self.ca_pem = ca_pem
        self.dir = path.parent

    def hello(self):
        return Hello(PEER_PROTOCOL_VERSION, "pal_test", fingerprint(self.store.public_key), self.name, self.role,
                     origin=self.store.origin_id, certificate=self.cert, origin_proof=self.nonce)

    def tls(self, server_side):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server_side else ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_cert_chain(self.dir / f"{self.name}.crt", self.dir / f"{self.name}.key")
        ctx.load_verify_locations(cadata=self.ca_pem.decode())
        ctx.verify_mode = ssl.CERT_REQUIRED
        if not server_side:
            ctx.check_hostname = False
        return ctx


@contextlib.asynccontextmanager
async def palace(tmp_path, *specs):
    ca_key, ca_pem, _ = new_palace("test", NOW)
    members = [Member(tmp_path / f"{name}.sqlite3", name, ca_key, ca_pem, role) for name, role in specs]
    try:
        async with trio.open_nursery() as nursery:
            for m in members:
                await nursery.start(m.astore.serve_writer)
            async with trio.open_nursery() as links:  # ended before the writers (see test_replication)
                yield members, links
                links.cancel_scope.cancel()
            nursery.cancel_scope.cancel()
    finally:
        for m in members:
            m.store.close()


def connect(nursery, left, right):
    """Link ``left`` and ``right``; returns (left's link, right's link)."""
    a, b = trio.testing.memory_stream_pair()
    server = trio.SSLStream(a, left.tls(True), server_side=True)
    client = trio.SSLStream(b, right.tls(False), server_hostname=None)
    links = []
    for stream, member in ((server, left), (client, right)):
        link = PeerLink(stream, member.hello(), member.astore, member.bus, key_for=None, directory=member.directory)
        nursery.start_soon(link.run)
        links.append(link)
    return links[0], links[1]


async def test_a_relayed_origin_verifies_through_members_bindings(tmp_path):
    async with palace(tmp_path, ("a", "member"), ("b", "member"), ("c", "member")) as ((a, b, c), nursery):
        await a.append("from a")
        await c.append("from c")
        connect(nursery, a, b)
        connect(nursery, b, c)
        await converged(a, b, c, count=2)
        assert c.directory.key_for(a.store.origin_id, 1) == a.store.public_key  # learned through b
        await a.append("live from a")
        await converged(a, b, c, count=3)


async def test_members_refuse_an_observers_events(tmp_path):
    async with palace(tmp_path, ("m", "member"), ("o", "observer")) as ((m, o), nursery):
        await m.append("member event")
        await o.append("observer tried to write")  # written locally, behind the daemon's back
        m_link, _ = connect(nursery, m, o)
        await converged(o, count=2)  # the observer receives everything
        await o.append("observer writes live")  # pushed to m, with the one before (m holds neither)
        with trio.fail_after(10):  # until m has turned both away
            while m_link.machine.stats.rejected_events < 2:
                await trio.sleep(0.01)
        assert m.store.counts()["events"] == 1  # and the member accepts nothing from it


def connect_cuttable(nursery, left, right):
    """Like ``connect``, returning (left's link, right's link, a cancel scope that cuts the pair)."""
    a, b = trio.testing.memory_stream_pair()
    server = trio.SSLStream(a, left.tls(True), server_side=True)
    client = trio.SSLStream(b, right.tls(False), server_hostname=None)
    scope = trio.CancelScope()
    links = [PeerLink(stream, member.hello(), member.astore, member.bus, key_for=None, directory=member.directory)
             for stream, member in ((server, left), (client, right))]

    async def run_pair():
        with scope:
            async with trio.open_nursery() as pair:
                for link in links:
                    pair.start_soon(link.run)

    nursery.start_soon(run_pair)
    return links[0], links[1], scope


def peer(member):
    return fingerprint(member.store.public_key)


async def test_a_full_mesh_sends_each_event_once_per_peer_and_heals_a_lost_link_through_a_relay(tmp_path):
    """Relaying with Neighbours (issue 30): in a mesh where every daemon hears every other
    first-hand, an event goes from its daemon to each peer once and is relayed by nobody (a
    20-daemon mesh sent each event 206-220 times before, for 19 needed). When a daemon loses its
    link to the writer, it says so; the middle daemon then answers with its vector, so what the
    writer wrote meanwhile is pulled through it, and new events are relayed to it again."""
    async with palace(tmp_path, ("a", "member"), ("b", "member"), ("c", "member")) as ((a, b, c), nursery):
        ab, ba, _ = connect_cuttable(nursery, a, b)
        bc, cb, _ = connect_cuttable(nursery, b, c)
        ac, ca, cut_ac = connect_cuttable(nursery, a, c)
        links = {a: (ab, ac), b: (ba, bc), c: (ca, cb)}
        for member, own in links.items():  # what the link registry (palaced.peers) tells its links once hellos are in
            others = tuple(sorted(peer(m) for m in links if m is not member))
            for link in own:
                link.tell_neighbours(others)
        with trio.fail_after(5):  # every link has heard its peer's neighbours
            while not all(link.machine.peer_neighbours for own in links.values() for link in own):
                await trio.sleep(0.01)
        await a.append("first")
        await converged(a, b, c, count=1)
        for i in range(20):
            await a.append(f"mesh {i}")
        await converged(a, b, c, count=21)
        # A marker from b and one from c: a link sends what its replica committed in commit order,
        # so once c holds b's marker, a relay of a's events from b to c would have gone first.
        await b.append("marker from b")
        await c.append("marker from c")
        await converged(a, b, c, count=23)
        assert ab.machine.stats.sent_events == ac.machine.stats.sent_events == 21
        # Nobody relays a's events (b and c hear a first-hand): b and c sent each other their markers only.
        assert bc.machine.stats.sent_events == cb.machine.stats.sent_events == 1
        assert ba.machine.stats.sent_events == ca.machine.stats.sent_events == 1

        cut_ac.cancel()  # c loses its link to a (and a to c): both say so to b
        ca.tell_neighbours(())
        await a.append("while c does not know it lost a")  # b skips c: c still lists a
        await converged(a, b, count=24)
        cb.tell_neighbours((peer(b),))  # c's neighbours are now b alone: b answers with its vector
        ab.tell_neighbours((peer(b),))
        await converged(a, b, c, count=24)  # c pulled the missed event through b
        await a.append("after the loss")
        await converged(a, b, c, count=25)  # and b relays a's new events to c again
        assert bc.machine.stats.sent_events >= 1 + 2


async def test_an_origin_named_in_a_vector_has_its_binding_sent_ahead_of_it(tmp_path):
    """Regression guard (a fresh-check run that never converged): b took its opening bindings just
    before it bound a's origin and applied a's events, then sent a vector naming a. c cannot verify
    a, so it never asks for a's events, and b sent a's binding only ahead of events: the link stayed
    apart for good. Bindings now travel ahead of every vector naming their origins."""
    async with palace(tmp_path, ("a", "member"), ("b", "member"), ("c", "member")) as ((a, b, c), nursery):
        await a.append("from a")
        connect(nursery, a, b)
        await converged(a, b, count=1)
        entries = b.directory.entries
        b.directory.entries = lambda: tuple(e for e in entries() if e.origin != a.store.origin_id)  # the race
        connect(nursery, b, c)
        await converged(a, b, c, count=1, timeout=5)
        assert c.directory.key_for(a.store.origin_id, 1) == a.store.public_key
