"""A hostile peer for attack tests: a real enrolled member (or observer) over real TLS to a real
daemon, speaking the peer protocol with the project's own encoders — and sending whatever the
test gives it.

``HostilePeer`` frames messages with ``palace_proto`` (so what it sends is exactly what a peer
could send), but nothing checks that they are honest: forged, altered or borrowed events,
bindings of other daemons' origins, floods, oversized or malformed frames, messages out of order,
stalls. ``send`` goes through a ``PeerSession`` (legal order, real encoding); ``send_frame`` and
``send_raw`` skip it for what no session would allow. Credentials come from the founder's CA key
(``issue_member``), exactly what ``join`` would have written.
"""

from __future__ import annotations

import datetime
import os
import ssl
from pathlib import Path
from typing import Any

import trio
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.bindings import OriginBinding
from palace_proto.canonical import canonical_json
from palace_proto.envelope import GENESIS_HASH, SignedEvent, seal_event
from palace_proto.framing import NEED_DATA, encode_frame
from palace_proto.identity import AGENT_EVENT_ROOM, AGENT_EVENT_STREAM, REGISTER, SYSTEM_AGENT, registry_metadata
from palace_proto.ids import fingerprint, origin_id_for_key
from palace_proto.peer import PEER_PROTOCOL_VERSION, Events, Hello, Members, Vector, VectorEntry
from palace_proto.pki import issue_certificate
from palace_proto.session import ConnectionClosed, PeerSession
from tests.fleet import append, ctl_json, listen_address, wait_converged

__all__ = ["Credentials", "HostilePeer", "ModifiedDaemon", "Scene", "issue_member", "origin_of", "palace_of", "sealed"]

TIMEOUT_S = 20.0


class Credentials:
    """A member's key, its CA-issued certificate (on disk, for TLS) and a key-derived origin."""

    def __init__(self, key: Ed25519PrivateKey, cert_pem: bytes, cert_path: Path, key_path: Path) -> None:
        self.key = key
        self.cert_pem = cert_pem
        self.cert_path = cert_path
        self.key_path = key_path
        self.public_key = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.peer_id = fingerprint(self.public_key)
        self.nonce = os.urandom(16)
        self.origin = origin_id_for_key(self.public_key, self.nonce)

    @property
    def binding(self) -> OriginBinding:
        return OriginBinding(self.origin, self.cert_pem, self.nonce)

    def new_origin(self) -> OriginBinding:
        """Another key-derived origin of this key (a member may hold a few: up to the cap)."""
        nonce = os.urandom(16)
        return OriginBinding(origin_id_for_key(self.public_key, nonce), self.cert_pem, nonce)

    # Tuple-style access for older tests: (cert path, key path, cert PEM, key).
    def __iter__(self) -> Any:
        return iter((self.cert_path, self.key_path, self.cert_pem, self.key))


def issue_member(founder_home: Path, folder: Path, name: str, role: str = "member") -> Credentials:
    """A fresh key and a certificate from the founder's CA."""
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
    return Credentials(key, cert, cert_path, key_path)


def now_stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def sealed(key: Ed25519PrivateKey, origin: str, seq: int = 1, prev: bytes = GENESIS_HASH,
           body: str = "forged", **fields: Any) -> SignedEvent:
    """An event signed with ``key`` (valid or not for ``origin``: the receiver decides)."""
    draft: dict[str, Any] = {"type": "note", "stream": "project/attack", "room": "general", "from_agent": "mallory",
                             "created_at": now_stamp()}
    draft.update(fields)
    return seal_event(key, origin=origin, origin_seq=seq, prev_hash=prev, body=body, **draft)


class ModifiedDaemon:
    """A member whose daemon was modified to write whatever the test says, signed with its own key
    on its own origin's chain — what its receivers accept, whatever the authority table says
    (issue 43 §3: "a member controls its own code; receivers accept what its key signs").

    ``write`` seals the next event of the chain (as any agent, any type, any date); ``register``
    writes an honest-looking ``agent.register`` of its own, so the agents it writes as are its
    own in the registry (a registered bystander, not an impostor: the authority table, not the
    registry, must stop it). ``pending`` are the events not pushed yet (``push`` sends them)."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials
        self.seq = 0
        self.prev = GENESIS_HASH
        self.pending: list[SignedEvent] = []
        self.registered: set[str] = set()

    def __repr__(self) -> str:
        return f"<ModifiedDaemon {self.credentials.peer_id[:7]} seq={self.seq} pending={len(self.pending)}>"

    def write(self, **fields: Any) -> SignedEvent:
        """The next event of this daemon's chain (``created_at`` now unless given)."""
        draft: dict[str, Any] = {"type": "note", "stream": "project/attack", "room": "general", "from_agent": "mallory",
                                 "created_at": now_stamp(), "body": ""}
        draft.update(fields)
        body = draft.pop("body")
        metadata = draft.pop("metadata", None)
        if metadata is not None:
            draft["metadata_json"] = canonical_json(metadata)
        event = seal_event(self.credentials.key, origin=self.credentials.origin, origin_seq=self.seq + 1,
                           prev_hash=self.prev, body=body, **draft)
        self.seq, self.prev = event.origin_seq, event.event_hash
        self.pending.append(event)
        return event

    def register(self, agent: str) -> SignedEvent | None:
        """Register ``agent`` to this daemon (once), as an honest daemon does before its first write."""
        if agent in self.registered:
            return None
        self.registered.add(agent)
        return self.write(type=REGISTER, stream=AGENT_EVENT_STREAM, room=AGENT_EVENT_ROOM, topic=agent,
                          from_agent=SYSTEM_AGENT, body=f"{agent} is registered to this daemon",
                          metadata=registry_metadata(REGISTER, agent, self.credentials.peer_id))

    def say(self, agent: str, **fields: Any) -> SignedEvent:
        """An event written as ``agent`` (registered first, unless it is the daemon itself)."""
        if agent != SYSTEM_AGENT:
            self.register(agent)
        return self.write(from_agent=agent, **fields)

    async def push(self, peer: HostilePeer, *, batch: int = 200) -> None:
        """Send the pending events over ``peer`` (handshaken), in chain order."""
        while self.pending:
            chunk, self.pending = self.pending[:batch], self.pending[batch:]
            await peer.push(*chunk)


class HostilePeer:
    """One TLS connection to a daemon's peer port, as a member with ``credentials``."""

    def __init__(self, stream: trio.SSLStream, hello: Hello, credentials: Credentials) -> None:
        self.stream = stream
        self.credentials = credentials
        self.session = PeerSession(hello)
        self.their_vector: Vector | None = None
        self.received: list[Any] = []

    def __repr__(self) -> str:
        return f"<HostilePeer {self.credentials.peer_id[:7]} {self.session!r}>"

    @classmethod
    async def connect(cls, address: str, credentials: Credentials, ca_pem: bytes, *, palace_id: str,
                      role: str = "member", name: str = "mallory", origin: str | None = None,
                      origin_proof: bytes | None = None, source_host: str | None = None) -> HostilePeer:
        """TLS to ``address`` (``HOST:PORT``); ``source_host`` picks our side's loopback address
        (e.g. 127.0.0.66) so the daemon sees a host of its own, apart from honest peers."""
        host, port = address.rsplit(":", 1)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_cert_chain(credentials.cert_path, credentials.key_path)
        ctx.load_verify_locations(cadata=ca_pem.decode())
        ctx.check_hostname = False
        with trio.fail_after(TIMEOUT_S):
            tcp = await trio.open_tcp_stream(host, int(port), local_address=source_host)
            stream = trio.SSLStream(tcp, ctx, server_hostname=None)
            try:
                await stream.do_handshake()
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
        hello = Hello(PEER_PROTOCOL_VERSION, palace_id, credentials.peer_id, name, role,
                      origin=origin or credentials.origin, certificate=credentials.cert_pem,
                      origin_proof=credentials.nonce if origin_proof is None else origin_proof)
        return cls(stream, hello, credentials)

    # -- sending ---------------------------------------------------------------------------------

    async def send(self, message: Any) -> None:
        """A message in protocol order (the session encodes it and refuses what is out of order)."""
        await self.stream.send_all(self.session.send(message))

    async def send_frame(self, wire: Any, *, max_frame_bytes: int = 1 << 40) -> None:
        """Any msgpack-encodable value as one frame, bypassing the session's rules."""
        await self.stream.send_all(encode_frame(wire, max_frame_bytes=max_frame_bytes))

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def hello(self) -> None:
        await self.send(self.session.our_hello)

    async def handshake(self, members: tuple[OriginBinding, ...] = (), vector: tuple[VectorEntry, ...] = ()) -> None:
        """Hello, members, a vector; then read until the daemon's vector arrived."""
        await self.send(self.session.our_hello)
        await self.send(Members(members))
        await self.send(Vector(vector))
        while self.their_vector is None:
            message = await self.next_message()
            if isinstance(message, ConnectionClosed):
                raise ConnectionError(f"the daemon closed the link during the handshake: {message.goodbye}")

    async def push(self, *events: SignedEvent) -> None:
        await self.send(Events(tuple(events)))

    # -- receiving -------------------------------------------------------------------------------

    async def next_message(self, timeout: float = TIMEOUT_S) -> Any:
        with trio.fail_after(timeout):
            while True:
                message = self.session.next_event()
                if message is not NEED_DATA:
                    if isinstance(message, Vector):
                        self.their_vector = message
                    self.received.append(message)
                    return message
                try:
                    data = await self.stream.receive_some(1 << 16)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                self.session.receive_data(data)

    async def drain(self, seconds: float) -> list[Any]:
        """Read whatever comes for a while (the daemon's answers, or its goodbye)."""
        got: list[Any] = []
        with trio.move_on_after(seconds):
            while True:
                message = await self.next_message(seconds + 1)
                got.append(message)
                if isinstance(message, ConnectionClosed):
                    break
        return got

    async def closed_by_daemon(self, timeout: float = TIMEOUT_S) -> bool:
        """True once the daemon has closed the connection (whatever it said before)."""
        with trio.move_on_after(timeout):
            while True:
                try:
                    data = await self.stream.receive_some(1 << 16)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return True
                if not data:
                    return True
        return False

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


def certificate_key(cert_pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(cert_pem).public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)


# -- a palace with a hostile member ---------------------------------------------------------------

def palace_of(home):
    return ctl_json(home, "status")["palace"]["palace_id"]


def origin_of(home):
    return ctl_json(home, "status")["origin"]


class Scene:
    """alpha (victim, the founder) and beta (honest), linked and converged; mallory's credentials
    (a member whose connections come from its own loopback address, 127.0.0.66 and up)."""

    def __init__(self, fleet, short_tmp):
        self.alpha = fleet.found("alpha")
        self.beta = fleet.join("beta")
        append(self.beta.home, "beta says hello")
        wait_converged(self.alpha, self.beta)
        self.mallory = issue_member(self.alpha.home, short_tmp / "creds", "mallory")
        self.ca_pem = (self.alpha.home / "palace" / "ca.crt").read_bytes()
        self.palace_id = palace_of(self.alpha.home)
        self.address = listen_address(self.alpha.home)
        self._next_host = 66

    async def connect(self, **kwargs) -> HostilePeer:
        kwargs.setdefault("source_host", "127.0.0.66")
        return await HostilePeer.connect(self.address, self.mallory, self.ca_pem, palace_id=self.palace_id, **kwargs)

    def fresh_host(self) -> str:
        """Another loopback address, so per-host rate bounds do not throttle a test's own retries."""
        self._next_host += 1
        return f"127.0.{self._next_host // 250}.{self._next_host % 250 + 2}"

    def still_serving_and_converging(self, tag: str, *, mallory_may_fork: bool = False) -> None:
        """The victim answers, both honest daemons still take writes, and they converge; no
        honest origin forked (``mallory_may_fork``: mallory signing two events at one sequence
        of its own origin is a real fork, which alpha records and refuses, as it should)."""
        assert self.alpha.running, self.alpha.log()
        append(self.alpha.home, f"alpha after {tag}")
        append(self.beta.home, f"beta after {tag}")
        wait_converged(self.alpha, self.beta)
        forks = ctl_json(self.alpha.home, "peers")["forks"]
        allowed = {self.mallory.origin} if mallory_may_fork else set()
        assert {f["origin"] for f in forks} <= allowed, forks
        assert "Traceback" not in self.alpha.log(), self.alpha.log()[-4000:]


