"""A scripted peer for attack tests: real TLS to a real daemon, messages chosen by the test.

It speaks the peer protocol through ``palace_proto.session.PeerSession`` (so its framing is the
real one) but sends whatever the test asks — forged, altered or unauthorised events — to check
that the daemon refuses them. Credentials come from files a test has (a daemon's home, or a
certificate the test issued with the founder's CA key).
"""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path
from typing import Any

import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.envelope import GENESIS_HASH, SignedEvent, seal_event
from palace_proto.framing import NEED_DATA
from palace_proto.ids import fingerprint
from palace_proto.peer import PEER_PROTOCOL_VERSION, Events, Hello, Members, Vector
from palace_proto.pki import issue_certificate
from palace_proto.session import ConnectionClosed, PeerSession

TIMEOUT_S = 20.0


def issue_member(founder_home: Path, folder: Path, name: str, role: str = "member") -> tuple[Path, Path, bytes, Ed25519PrivateKey]:
    """A fresh key and a certificate from the founder's CA: (cert path, key path, cert PEM, key)."""
    folder.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    ca_key = serialization.load_pem_private_key((founder_home / "palace" / "ca.key").read_bytes(), password=None)
    ca_pem = (founder_home / "palace" / "ca.crt").read_bytes()
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    cert = issue_certificate(ca_key, ca_pem, raw, role=role, name=name,  # type: ignore[arg-type]
                             now=datetime.datetime.now(datetime.UTC))
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    cert_path.write_bytes(cert)
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path, cert, key


def sealed(key: Ed25519PrivateKey, origin: str, seq: int = 1, prev: bytes = GENESIS_HASH,
           body: str = "forged") -> SignedEvent:
    return seal_event(key, origin=origin, origin_seq=seq, prev_hash=prev,
                      created_at=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                      type="note", stream="project/attack", room="general", from_agent="mallory", body=body)


class StubPeer:
    def __init__(self, stream: trio.SSLStream, hello: Hello) -> None:
        self.stream = stream
        self.session = PeerSession(hello)
        self.their_vector: Vector | None = None

    @classmethod
    async def connect(cls, address: str, cert_path: Path, key_path: Path, ca_pem: bytes, *, palace_id: str,
                      origin: str, role: str = "member", name: str = "stub") -> StubPeer:
        host, port = address.rsplit(":", 1)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_cert_chain(cert_path, key_path)
        ctx.load_verify_locations(cadata=ca_pem.decode())
        ctx.check_hostname = False
        tcp = await trio.open_tcp_stream(host, int(port))
        stream = trio.SSLStream(tcp, ctx, server_hostname=None)
        await stream.do_handshake()
        from cryptography import x509

        cert_pem = cert_path.read_bytes()
        raw = x509.load_pem_x509_certificate(cert_pem).public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        hello = Hello(PEER_PROTOCOL_VERSION, palace_id, fingerprint(raw), name, role, origin=origin,
                      certificate=cert_pem)
        return cls(stream, hello)

    async def send(self, message: Any) -> None:
        await self.stream.send_all(self.session.send(message))

    async def next_message(self) -> Any:
        with trio.fail_after(TIMEOUT_S):
            while True:
                message = self.session.next_event()
                if message is not NEED_DATA:
                    if isinstance(message, Vector):
                        self.their_vector = message
                    return message
                try:
                    data = await self.stream.receive_some(1 << 16)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                self.session.receive_data(data)

    async def handshake(self, members: tuple[tuple[str, bytes], ...] = ()) -> None:
        """Hello, members, an empty vector; then read until the daemon's vector arrived."""
        await self.send(self.session.our_hello)
        await self.send(Members(members))
        await self.send(Vector(()))
        while self.their_vector is None:
            message = await self.next_message()
            if isinstance(message, ConnectionClosed):
                raise ConnectionError(f"the daemon closed the link during the handshake: {message.goodbye}")

    async def push(self, *events: SignedEvent) -> None:
        await self.send(Events(tuple(events)))

    async def drain(self, seconds: float) -> list[Any]:
        """Read whatever comes for a while (the daemon's answers, or its goodbye)."""
        got: list[Any] = []
        with trio.move_on_after(seconds):
            while True:
                message = await self.next_message()
                got.append(message)
                if isinstance(message, ConnectionClosed):
                    break
        return got

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)
