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
from palaced.replication import PeerLink
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
        (path.parent / f"{name}.key").write_bytes(self.store._key.private_bytes(
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
            yield members, nursery
            nursery.cancel_scope.cancel()
    finally:
        for m in members:
            m.store.close()


def connect(nursery, left, right):
    a, b = trio.testing.memory_stream_pair()
    server = trio.SSLStream(a, left.tls(True), server_side=True)
    client = trio.SSLStream(b, right.tls(False), server_hostname=None)
    for stream, member in ((server, left), (client, right)):
        link = PeerLink(stream, member.hello(), member.astore, member.bus, key_for=None, directory=member.directory)
        nursery.start_soon(link.run)


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
        connect(nursery, m, o)
        await converged(o, count=2)  # the observer receives everything
        await trio.sleep(0.3)
        assert m.store.counts()["events"] == 1  # and the member accepts nothing from it
