"""The peer network: listener, dialers, one link per peer, presence gossip, replication receipts.

Owns: every TCP connection to other daemons of the palace. It listens on the configured
address; dials static peers (``palacectl peers add``), addresses remembered from earlier
connections (so a restart reconnects without waiting for mDNS) and peers that mDNS reports;
runs mutual TLS (``tls.py``) and hands each authenticated stream to a ``PeerLink``; keeps **one
link per peer pair** (when both sides dial at once, the connection dialled by the smaller peer
id wins, on both sides alike); refuses revoked peers and drops their links the moment a
revocation is observed; answers enrolments while invites are pending; gossips which watchers
are connected where (``Presence``) and what each daemon says about itself — its links, their lag,
its health — for the fleet view (``Report``, content in ``palace_proto.fleet``), both signed by
their daemon, relayed newest-wins through one sender per link and kept at most once per member
daemon; and counts which peers confirmed holding an event (``append --replicated K``).

Everything here is IO and bookkeeping; the replication rules live in ``replication.py`` and
``palace_proto``. What ``palacectl peers`` shows is built by ``peers_view``; the ``fleet``
operation reads ``current_report`` and ``heard_reports``.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Final

import trio
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from palace_proto.errors import ApiError, ProtocolError
from palace_proto.fleet import decode_report, encode_report
from palace_proto.peer import (
    MAX_PRESENCE_FILTER_CHARS,
    MAX_WATCHERS_PER_PRESENCE,
    PEER_PROTOCOL_VERSION,
    Hello,
    Presence,
    Report,
    format_peer_address,
    parse_peer_address,
    presence_signing_bytes,
    report_signing_bytes,
)
from palace_proto.ids import fingerprint_is_valid
from palace_proto.pki import CertificateError, MemberCertificate, Revocation
from palace_proto.text import printable
from palace_proto.workers import decode_activity

from .bus import EventBus
from .enrolment import serve_enrolment
from .limits import LimitLog
from .members import MemberDirectory
from .membership import Membership, load_ca_key
from .replication import PeerLink
from .store import StoreError, WriteContext
from .store.aio import AsyncStore
from .tls import client_context, peer_certificate, server_context

__all__ = ["ListenError", "Network", "NetworkSettings"]

LOGGER: Final = logging.getLogger("palaced.network")
HANDSHAKE_TIMEOUT_S: Final = 10.0
CONNECT_TIMEOUT_S: Final = 5.0
# Back-off between dial attempts: quick first retries (a peer restarting), then at most 30 s.
BACKOFF_FIRST_S: Final = 0.5
BACKOFF_MAX_S: Final = 30.0
# A link that lived this long resets the back-off (it was a real connection, not a flap).
STABLE_LINK_S: Final = 10.0
# Why 10 s: presence is re-announced on this heartbeat; a daemon unheard for 3 beats is "silent".
PRESENCE_HEARTBEAT_S: Final = 10.0
PRESENCE_SILENT_S: Final = 3 * PRESENCE_HEARTBEAT_S
# Why 30 s: a report (up to 16 KiB) goes to every link of every daemon on each beat; the fleet view
# needs health and lag fresh to the minute, and a link's change of state goes out sooner anyway
# (REPORT_SETTLE_S). A daemon whose report is older than 3 beats is "silent".
REPORT_HEARTBEAT_S: Final = 30.0
REPORT_SILENT_S: Final = 3 * REPORT_HEARTBEAT_S
# Why 2 s: a link coming up changes state several times within a second (connected, hello, vectors,
# caught up); one report once they settle says it all, and a flapping link costs a report per 2 s.
REPORT_SETTLE_S: Final = 2.0
# When mDNS shows a peer to both sides at once, the larger peer id waits this long before
# dialling, so the preferred connection (dialled by the smaller id) usually comes first.
MDNS_DEFER_S: Final = 2.0
# Remember at most this many addresses per peer (the most recently working ones).
REMEMBERED_PER_PEER: Final = 3
# Bounds on what strangers can make us hold before they prove anything (each hit is logged once,
# see limits.py). Why 256 / 32: a palace is a handful of machines, each with a link or two; a LAN
# host holding 32 connections at once is not one daemon. Why 64 per 10 s: an honest peer redials
# with back-off (0.5 s doubling); a host dialling faster is storming, and each TLS handshake
# costs us CPU. Why 1024 hosts: the accounting itself must not grow without bound.
MAX_INBOUND: Final = 256
MAX_INBOUND_PER_HOST: Final = 32
ACCEPT_WINDOW_S: Final = 10.0
MAX_ACCEPTS_PER_HOST: Final = 64
MAX_TRACKED_HOSTS: Final = 1024
# Why 256: addresses we dial (static, remembered, mDNS). mDNS is open to anyone on the LAN, and the
# palace id in its records is public: beyond this, new mDNS sightings are ignored.
MAX_TARGETS: Final = 256


def _utc(epoch: float | None = None) -> str:
    return datetime.datetime.fromtimestamp(time.time() if epoch is None else epoch, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True, slots=True)
class NetworkSettings:
    listen_host: str
    listen_port: int
    mdns: bool


@dataclasses.dataclass(slots=True)
class _Target:
    """An address we dial, and why."""

    address: str
    sources: set[str]
    peer_id: str | None = None
    state: str = "idle"
    last_error: str | None = None
    last_error_at: str | None = None
    scope: trio.CancelScope | None = None
    defer_s: float = 0.0


@dataclasses.dataclass(slots=True)
class _PeerRecord:
    peer_id: str
    name: str = ""
    role: str = ""
    link: PeerLink | None = None
    direction: str | None = None
    state: str = "discovered"
    last_contact: str | None = None
    last_error: str | None = None
    last_error_at: str | None = None
    connected_since: str | None = None
    #: how this daemon last reached the peer (its dial target's sources): shown as how the peer was
    #: found after that target is gone (an mDNS record expires while the link lives on; issue 26)
    dialled_via: frozenset[str] = frozenset()


#: what daemons gossip about themselves, relayed newest-wins: which watchers are connected, and reports
Gossip = Presence | Report


class _Outbox:
    """Gossip waiting to go to one link: the newest record per kind and daemon only, so a flood of
    presence records or reports costs one send per daemon, kind and link, never a task or a queue
    entry each (and the outbox holds at most two records per member daemon)."""

    def __init__(self) -> None:
        self.pending: dict[tuple[type[Gossip], str], Gossip] = {}
        self.kick = trio.Event()
        self.scope = trio.CancelScope()

    def put(self, gossip: Gossip) -> None:
        key = (type(gossip), gossip.peer_id)
        known = self.pending.get(key)
        if known is None or known.serial < gossip.serial:
            self.pending[key] = gossip
        self.kick.set()

    def discard(self, peer_id: str) -> None:
        """Forget whatever waits about daemon ``peer_id`` (it was revoked)."""
        self.pending = {key: gossip for key, gossip in self.pending.items() if key[1] != peer_id}


@dataclasses.dataclass(frozen=True, slots=True)
class _HeardReport:
    """Another daemon's newest report that verified, read once (``decode_report``) when it came."""

    report: Report
    content: dict[str, Any]
    #: trio.current_time() when it came (the "silent" judgement) and the same as UTC (for display)
    heard: float
    heard_at: str


class ListenError(ApiError):
    """The peer port cannot be opened (in use, or an address this machine does not have)."""

    code = "internal"


class Network:
    def __init__(self, *, settings: NetworkSettings, home: Path, membership: Membership, identity: Ed25519PrivateKey,
                 identity_path: Path, astore: AsyncStore, bus: EventBus, directory: MemberDirectory,
                 watchers: Callable[[], list[tuple[str, ...]]], max_artifact_bytes: int,
                 facts: Callable[[], Awaitable[Mapping[str, Any]]] | None = None) -> None:
        self.settings = settings
        self.membership = membership
        self.identity = identity
        self.astore = astore
        self.store = astore.store
        self.bus = bus
        self.directory = directory
        self.peer_id = membership.peer_id
        self.max_artifact_bytes = max_artifact_bytes
        self._watchers = watchers
        #: what this daemon's report says beyond its links (release, start, events, health, forks,
        #: watchers), gathered as ``status`` gathers it: handlers/maintenance.py ``report_facts``
        self._facts = facts
        folder = home / "palace"
        self._member_cert_path = folder / "member.crt"
        self._ca_key_path = folder / "ca.key"
        self._key_path = identity_path
        self._client_ctx = client_context(self._member_cert_path, identity_path, membership.ca_cert_pem)
        self._server_ctx = server_context(self._member_cert_path, identity_path, membership.ca_cert_pem,
                                          allow_enrolment=False)
        self._enrol_ctx: ssl.SSLContext | None = (
            server_context(self._member_cert_path, identity_path, membership.ca_cert_pem, allow_enrolment=True)
            if membership.can_invite else None)
        own = directory.binding(self.store.origin_id)
        if own is None:
            raise ValueError(f"this daemon's own origin {self.store.origin_id} has no proven binding")
        self.hello = Hello(PEER_PROTOCOL_VERSION, membership.palace_id, membership.peer_id, membership.name,
                           membership.role, origin=self.store.origin_id, certificate=membership.member_pem,
                           origin_proof=own.proof)
        self.listen_addresses: list[str] = []
        self.mdns_state = "off" if not settings.mdns else "starting"
        self._targets: dict[str, _Target] = {}
        self._records: dict[str, _PeerRecord] = {}
        self._link_scopes: dict[int, trio.CancelScope] = {}
        #: what each peer confirmed holding (kept after it disconnects: it still holds it)
        self.peer_confirmed: dict[str, dict[str, int]] = {}
        self._progress = trio.Event()
        self._presence_serial = 0
        self._presences: dict[str, tuple[Presence, float, str]] = {}
        self._presence_due = trio.Event()
        self._skews: dict[str, float] = {}
        self._report_serial = 0
        #: this daemon's newest report, as sent (None until the first is built, at start)
        self._own_report: Report | None = None
        #: the (state, direction) of each link in the newest report, to tell a change of state
        self._reported_links: dict[str, tuple[Any, Any]] = {}
        self._report_due = trio.Event()
        #: other daemons' newest reports: at most one per member daemon (a certificate is needed)
        self._reports: dict[str, _HeardReport] = {}
        self._outboxes: dict[int, _Outbox] = {}
        self._nursery: trio.Nursery | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self.invites_pending = False
        self.limits = LimitLog(LOGGER)
        self._inbound = 0
        self._inbound_by_host: dict[str, int] = {}
        self._accepts_by_host: dict[str, list[float]] = {}
        #: links that ended on an unexpected error (logged with a traceback each), since start
        self.link_failures = 0
        #: what links that have ended sent (events, bytes); ``link_totals`` adds the live ones
        self._ended_sent = (0, 0)

    def __repr__(self) -> str:
        return f"<Network {self.peer_id[:7]} links={sum(1 for r in self._records.values() if r.link)}>"

    # -- lifetime ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self.directory.on_revoke = self._on_revoke_threadsafe
        await self.refresh_invites()
        address = format_peer_address(self.settings.listen_host, self.settings.listen_port)
        try:
            listeners = await trio.open_tcp_listeners(self.settings.listen_port,
                                                      host=self.settings.listen_host or None)
        except OSError as exc:
            raise ListenError(f"cannot listen for peers on {address}: {exc.strerror or exc} (another palaced on "
                              "this port? choose one with --listen HOST:PORT or [network] listen)") from None
        self.listen_addresses = [format_peer_address(*l.socket.getsockname()[:2]) for l in listeners]
        LOGGER.info("listening for peers on %s", ", ".join(self.listen_addresses))
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(trio.serve_listeners, self._on_tcp, listeners)
            for address in await self.astore.read(self.store.static_peers):
                self.add_target(address, "static")
            for peer_id, address, _source, _ok in await self.astore.read(self.store.peer_addresses):
                self.add_target(address, "remembered", peer_id=peer_id)
            nursery.start_soon(self._presence_loop)
            nursery.start_soon(self._report_loop)
            if self.settings.mdns:
                nursery.start_soon(self._run_mdns)
            task_status.started(self.listen_addresses)
            try:
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(1):
                    for record in list(self._records.values()):
                        if record.link is not None:
                            await record.link.close()

    @property
    def listen_port(self) -> int:
        return parse_peer_address(self.listen_addresses[0])[1] if self.listen_addresses else self.settings.listen_port

    async def refresh_invites(self) -> None:
        """Whether the listener should let certificate-less joiners through to enrolment."""
        if self._enrol_ctx is None:
            return
        self.invites_pending = await self.astore.read(self.store.pending_invites, int(time.time())) > 0

    # -- mDNS ----------------------------------------------------------------------------------

    async def _run_mdns(self) -> None:
        from .discovery import Sighting, run_discovery  # zeroconf is imported only when mDNS is on

        def seen(sighting: Sighting) -> None:
            # Anyone on the LAN may announce anything with our (public) palace id: a peer id must at
            # least be a well-formed fingerprint before it becomes a record or a dial target.
            if not fingerprint_is_valid(sighting.peer_id):
                self.limits.hit("mdns_malformed", "mDNS: ignoring a record whose peer id is not a fingerprint (%s)",
                                printable(sighting.peer_id, 80))
                return
            if sighting.version != PEER_PROTOCOL_VERSION:
                self.limits.hit(f"mdns_version_{sighting.version}", "mDNS: peer %s speaks protocol %s, we speak %s; "
                                "upgrade both", sighting.peer_id, sighting.version, PEER_PROTOCOL_VERSION)
                return
            defer = MDNS_DEFER_S if self.peer_id > sighting.peer_id else 0.0
            for address in sighting.addresses:
                self.add_target(address, "mdns", peer_id=sighting.peer_id, defer_s=defer)

        def gone(peer_id: str) -> None:
            for target in list(self._targets.values()):
                if target.peer_id == peer_id and target.sources == {"mdns"}:
                    self._drop_target(target.address)

        try:
            async with trio.open_nursery() as nursery:
                working = await nursery.start(partial(
                    run_discovery, palace_id=self.membership.palace_id, peer_id=self.peer_id,
                    name=self.membership.name, port=self.listen_port, version=PEER_PROTOCOL_VERSION,
                    on_seen=seen, on_gone=gone))
                self.mdns_state = "on" if working else "failed (see the daemon log)"
        finally:
            self.mdns_state = "off"

    # -- dialling ------------------------------------------------------------------------------

    def add_target(self, address: str, source: str, *, peer_id: str | None = None, defer_s: float = 0.0) -> None:
        """Dial ``address`` (until it works, with back-off) and keep redialling it while it is wanted."""
        target = self._targets.get(address)
        if target is not None:
            target.sources.add(source)
            if peer_id and not target.peer_id:
                target.peer_id = peer_id
            return
        if len(self._targets) >= MAX_TARGETS and source == "mdns":
            self.limits.hit("dial_targets", "ignoring mDNS sightings: %d addresses are dialled already (the limit)",
                            MAX_TARGETS)
            return
        target = self._targets[address] = _Target(address, {source}, peer_id=peer_id, defer_s=defer_s)
        if peer_id:
            self._record(peer_id)
        if self._nursery is not None:
            self._nursery.start_soon(self._dial_loop, target)

    def _drop_target(self, address: str) -> None:
        target = self._targets.pop(address, None)
        if target is None:
            return
        if target.scope is not None:
            target.scope.cancel()
        # A record made only because mDNS named a peer id goes with its last address (mDNS is open
        # to anyone on the LAN: its peer ids must not pile up).
        peer_id = target.peer_id
        record = self._records.get(peer_id) if peer_id else None
        if (record is not None and record.link is None and self.directory.certificate_of_peer(peer_id) is None
                and not any(t.peer_id == peer_id for t in self._targets.values())):
            del self._records[peer_id]

    async def add_static(self, address: str) -> str:
        host, port = parse_peer_address(address)
        normal = format_peer_address(host, port)

        def job(ctx: WriteContext) -> None:
            ctx.conn.execute("INSERT OR IGNORE INTO static_peers VALUES (?, ?)", (normal, _utc()))

        await self.astore.write(job)
        self.add_target(normal, "static")
        return normal

    async def remove_static(self, address: str) -> bool:
        host, port = parse_peer_address(address)
        normal = format_peer_address(host, port)

        def job(ctx: WriteContext) -> bool:
            return bool(ctx.conn.execute("DELETE FROM static_peers WHERE address=? RETURNING 1", (normal,)).fetchall())

        removed = await self.astore.write(job)
        target = self._targets.get(normal)
        if target is not None:
            target.sources.discard("static")
            if not target.sources:
                self._drop_target(normal)
        return removed

    async def _dial_loop(self, target: _Target) -> None:
        backoff = BACKOFF_FIRST_S
        with trio.CancelScope() as scope:
            target.scope = scope
            if target.defer_s:
                await trio.sleep(target.defer_s)
            while True:
                record = self._records.get(target.peer_id) if target.peer_id else None
                if record is not None and record.link is not None:
                    target.state = "connected (other direction)" if record.direction == "in" else "connected"
                    await record.link.closed.wait()
                    await trio.sleep(random.uniform(0.05, 0.3))
                    continue
                started = trio.current_time()
                try:
                    outcome = await self._dial_once(target)
                except Exception as exc:
                    LOGGER.exception("unexpected error on the link via %s", target.address)
                    self._note_target_error(target, f"internal error: {type(exc).__name__}: {exc}")
                    outcome = "error"
                if outcome == "self":
                    target.state = "self"
                    LOGGER.info("%s is this daemon itself; not dialling it", target.address)
                    return
                if outcome == "revoked":
                    target.state = "revoked"  # it stays refused: stop dialling it
                    return
                if trio.current_time() - started >= STABLE_LINK_S:
                    backoff = BACKOFF_FIRST_S
                    if outcome in ("linked", "duplicate"):
                        continue  # a link that lived: redial at once
                elif outcome == "duplicate" and target.peer_id and getattr(
                        self._records.get(target.peer_id), "link", None) is not None:
                    continue  # the other direction is up: wait on it (top of the loop)
                target.state = f"retrying in {backoff:.0f} s" if backoff >= 1 else "retrying"
                await trio.sleep(backoff * random.uniform(0.8, 1.2))
                backoff = min(BACKOFF_MAX_S, backoff * 2)

    async def _dial_once(self, target: _Target) -> str:
        target.state = "connecting"
        if target.peer_id:
            self._record(target.peer_id).state = "connecting"
            self._links_changed()
        try:
            host, port = parse_peer_address(target.address)
            with trio.fail_after(CONNECT_TIMEOUT_S):
                tcp = await trio.open_tcp_stream(host, port)
            stream = trio.SSLStream(tcp, self._client_ctx, server_hostname=None)
            with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                await stream.do_handshake()
            cert = peer_certificate(stream, self.membership.ca_cert_pem, datetime.datetime.now(datetime.UTC))
            if cert is None:  # pragma: no cover - CERT_REQUIRED on the client side
                raise CertificateError("the peer presented no certificate")
        except (OSError, trio.TooSlowError, trio.BrokenResourceError, ssl.SSLError, CertificateError,
                ValueError) as exc:
            reason = _describe_dial_error(exc)
            self._note_target_error(target, reason)
            return "error"
        if cert.peer_id == self.peer_id:
            await trio.aclose_forcefully(stream)
            return "self"
        if target.peer_id and target.peer_id != cert.peer_id:
            LOGGER.info("%s is now %s (was %s)", target.address, cert.peer_id, target.peer_id)
        target.peer_id = cert.peer_id
        target.last_error = None
        self._record(cert.peer_id).dialled_via = frozenset(target.sources)
        await self._remember_address(cert.peer_id, target.address, "/".join(sorted(target.sources)))
        target.state = "connected"
        return await self._run_connection(stream, cert, dialer=self.peer_id, remote=target.address)

    def _note_target_error(self, target: _Target, reason: str) -> None:
        target.last_error, target.last_error_at = reason, _utc()
        target.state = "error"
        if target.peer_id:
            record = self._record(target.peer_id)
            record.last_error, record.last_error_at = f"{target.address}: {reason}", target.last_error_at
            if record.link is None:
                record.state = "error"
                self._links_changed()
        LOGGER.debug("dial %s failed: %s", target.address, reason)

    async def _remember_address(self, peer_id: str, address: str, source: str) -> None:
        def job(ctx: WriteContext) -> None:
            ctx.conn.execute(
                "INSERT INTO peer_addresses VALUES (?, ?, ?, ?) ON CONFLICT(peer_id, address) "
                "DO UPDATE SET last_ok=excluded.last_ok, source=excluded.source", (peer_id, address, source, _utc()))
            ctx.conn.execute(
                "DELETE FROM peer_addresses WHERE peer_id=? AND address NOT IN (SELECT address FROM peer_addresses "
                "WHERE peer_id=? ORDER BY last_ok DESC LIMIT ?)", (peer_id, peer_id, REMEMBERED_PER_PEER))

        try:
            await self.astore.write(job)
        except (StoreError, ApiError) as exc:  # remembering is a convenience: a full disk must not stop the link
            self.limits.hit("remember_address", "could not remember the address of %s: %s", peer_id, exc)

    # -- accepting -----------------------------------------------------------------------------

    def _admit(self, host: str) -> bool:
        """May a new connection from ``host`` proceed to the TLS handshake? (Bounds: total, per host
        at once, per host per window; refusals are logged once per limit and counted.)"""
        if self._inbound >= MAX_INBOUND:
            self.limits.hit("inbound_total", "refusing peer connections: %d are open (the limit)", MAX_INBOUND)
            return False
        if self._inbound_by_host.get(host, 0) >= MAX_INBOUND_PER_HOST:
            self.limits.hit("inbound_per_host", "refusing peer connections from %s: %d are open from there (the "
                            "limit)", host, MAX_INBOUND_PER_HOST)
            return False
        now = trio.current_time()
        recent = [t for t in self._accepts_by_host.get(host, ()) if now - t < ACCEPT_WINDOW_S]
        if len(recent) >= MAX_ACCEPTS_PER_HOST:
            self._accepts_by_host[host] = recent
            self.limits.hit("accept_rate", "refusing peer connections from %s: more than %d in %.0f s (a reconnect "
                            "storm)", host, MAX_ACCEPTS_PER_HOST, ACCEPT_WINDOW_S)
            return False
        if host not in self._accepts_by_host and len(self._accepts_by_host) >= MAX_TRACKED_HOSTS:
            self._accepts_by_host = {h: ts for h, ts in self._accepts_by_host.items()
                                     if ts and now - ts[-1] < ACCEPT_WINDOW_S or self._inbound_by_host.get(h)}
            if len(self._accepts_by_host) >= MAX_TRACKED_HOSTS:
                self.limits.hit("tracked_hosts", "refusing peer connections: %d hosts connected within %.0f s (the "
                                "limit)", MAX_TRACKED_HOSTS, ACCEPT_WINDOW_S)
                return False
        recent.append(now)
        self._accepts_by_host[host] = recent
        return True

    async def _on_tcp(self, tcp: trio.SocketStream) -> None:
        try:
            host = str(tcp.socket.getpeername()[0])
        except OSError:
            host = "?"
        if not self._admit(host):
            await trio.aclose_forcefully(tcp)
            return
        self._inbound += 1
        self._inbound_by_host[host] = self._inbound_by_host.get(host, 0) + 1
        try:
            await self._accept(tcp)
        except Exception:
            # A bug in one connection must not take the daemon down: log it, drop the connection.
            self.link_failures += 1
            LOGGER.exception("unexpected error on an incoming peer connection from %s", host)
        finally:
            self._inbound -= 1
            left = self._inbound_by_host.get(host, 1) - 1
            if left > 0:
                self._inbound_by_host[host] = left
            else:
                self._inbound_by_host.pop(host, None)
            await trio.aclose_forcefully(tcp)

    async def _accept(self, tcp: trio.SocketStream) -> None:
        try:
            remote = format_peer_address(*tcp.socket.getpeername()[:2])
        except OSError:
            remote = "?"
        enrolling = self._enrol_ctx is not None and self.invites_pending
        stream = trio.SSLStream(tcp, self._enrol_ctx if enrolling else self._server_ctx, server_side=True)
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                await stream.do_handshake()
            cert = peer_certificate(stream, self.membership.ca_cert_pem, datetime.datetime.now(datetime.UTC))
        except (trio.TooSlowError, trio.BrokenResourceError, ssl.SSLError, CertificateError, OSError) as exc:
            LOGGER.warning("refused a connection from %s: %s", remote, _describe_accept_error(exc))
            await trio.aclose_forcefully(stream)
            return
        if cert is None:
            try:
                await serve_enrolment(stream, self.astore, ca_key=self._load_ca_key,
                                      ca_pem=self.membership.ca_cert_pem, palace_id=self.membership.palace_id,
                                      palace_name=self.membership.palace_name, remote=remote,
                                      now=lambda: datetime.datetime.now(datetime.UTC))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            finally:
                await trio.aclose_forcefully(stream)
                await self.refresh_invites()
            return
        await self._run_connection(stream, cert, dialer=cert.peer_id, remote=remote)

    def _load_ca_key(self) -> Ed25519PrivateKey:
        return load_ca_key(self._ca_key_path.parent.parent)

    # -- links ---------------------------------------------------------------------------------

    def _record(self, peer_id: str) -> _PeerRecord:
        record = self._records.get(peer_id)
        if record is None:
            record = self._records[peer_id] = _PeerRecord(peer_id)
        return record

    def _register(self, link: PeerLink, peer_id: str) -> bool:
        """Keep one link per peer: True if ``link`` becomes the peer's link."""
        record = self._record(peer_id)
        existing = record.link
        if existing is not None:
            preferred = min(self.peer_id, peer_id)
            if existing.dialer != link.dialer and link.dialer != preferred:
                return False
            # Same direction again (the old one is probably half-dead), or the preferred
            # direction arrived second: the new link replaces the old.
            scope = self._link_scopes.get(id(existing))
            if scope is not None:
                scope.cancel()
        record.link = link
        record.direction = "out" if link.dialer == self.peer_id else "in"
        return True

    async def _run_connection(self, stream: trio.SSLStream, cert: MemberCertificate, *, dialer: str,
                              remote: str) -> str:
        """Run one authenticated connection as the peer's link until it ends, however it ends.

        Returns "linked" (it ran and ended), "failed" (it ended on an error: the dialler backs
        off), "duplicate", "self" or "revoked". Every way out — EOF, a protocol error, a failure of
        our own (disk full, a bug), cancellation — releases the link in ``finally``: a link left
        marked live would make the dialler spin and refuse the peer's own dials as duplicates.
        """
        peer_id = cert.peer_id
        name = printable(cert.name, 64)
        record = self._record(peer_id)
        record.name, record.role = name, cert.role
        if peer_id == self.peer_id:
            await trio.aclose_forcefully(stream)
            return "self"
        if self.directory.is_revoked(peer_id):
            LOGGER.warning("refused revoked peer %s (%s) from %s", peer_id, name, remote)
            record.state, record.last_error, record.last_error_at = "revoked", "revoked", _utc()
            await trio.aclose_forcefully(stream)
            return "revoked"
        link = PeerLink(stream, self.hello, self.astore, self.bus, directory=self.directory,
                        expected_peer_id=peer_id, hooks=self, max_artifact_bytes=self.max_artifact_bytes,
                        dialer=dialer, limits=self.limits)
        if not self._register(link, peer_id):
            LOGGER.debug("closing a second connection with %s (the other direction is kept)", peer_id)
            await trio.aclose_forcefully(stream)
            return "duplicate"
        record.state, record.connected_since, record.last_contact = "connected", _utc(), _utc()
        self._links_changed()
        LOGGER.info("connected to %s (%s, %s) %s %s", peer_id, name, cert.role,
                    "at" if dialer == self.peer_id else "from", remote)
        outcome = "linked"
        try:
            with trio.CancelScope() as scope:
                self._link_scopes[id(link)] = scope
                try:
                    await link.run()
                except ProtocolError as exc:
                    outcome = "failed"
                    message = printable(exc.message, 300)
                    record.last_error, record.last_error_at = f"protocol error: {message}", _utc()
                    LOGGER.warning("link with %s failed: %s", peer_id, message)
                    with trio.move_on_after(1):
                        await link.close("protocol_error", message[:200])
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    record.last_error, record.last_error_at = f"connection lost: {exc}", _utc()
                except (StoreError, ApiError) as exc:
                    # This daemon cannot take what the peer sends now (a full disk, shutting down):
                    # not a bug, so no traceback; the link ends and is dialled again with back-off.
                    outcome = "failed"
                    record.last_error, record.last_error_at = f"this daemon could not store its events: {exc}", _utc()
                    self.limits.hit(f"link_store_error/{peer_id}", "link with %s ended: %s (it reconnects with "
                                    "back-off)", peer_id, exc)
                    with trio.move_on_after(1):
                        await link.close("internal", "the other side cannot store events now; it will reconnect")
                except Exception as exc:
                    # Our own failure while serving this peer (the disk, a bug): this link ends,
                    # logged once with its traceback; the daemon and every other link go on.
                    outcome = "failed"
                    self.link_failures += 1
                    record.last_error, record.last_error_at = f"internal error: {type(exc).__name__}: {exc}", _utc()
                    LOGGER.exception("link with %s ended on an unexpected error", peer_id)
                    with trio.move_on_after(1):
                        await link.close("internal", "the other side failed; it will reconnect")
        finally:
            self._link_scopes.pop(id(link), None)
            outbox = self._outboxes.pop(id(link), None)
            if outbox is not None:
                outbox.scope.cancel()
            self._ended_sent = (self._ended_sent[0] + link.sent_events, self._ended_sent[1] + link.bytes_sent)
            if record.link is link:
                record.link = None
                record.direction = None
                record.last_contact = link.last_contact
                record.state = "revoked" if self.directory.is_revoked(peer_id) else "disconnected"
                self._links_changed()
                self._neighbours_changed()
                LOGGER.info("disconnected from %s (%s)", peer_id, name)
            await trio.aclose_forcefully(stream)
        return outcome

    # -- LinkHooks -----------------------------------------------------------------------------

    def link_ready(self, link: PeerLink) -> None:
        if self._nursery is None or id(link) in self._outboxes:
            return
        outbox = self._outboxes[id(link)] = _Outbox()
        outbox.put(self._own_presence())
        for presence, _, _ in self._presences.values():
            outbox.put(presence)
        if self._own_report is not None:
            outbox.put(self._own_report)  # the one naming this link follows once it settles
        for heard in self._reports.values():
            outbox.put(heard.report)
        self._links_changed()
        self._neighbours_changed()
        self._nursery.start_soon(self._send_gossip, link, outbox)

    def _neighbours_changed(self) -> None:
        """Tell every link which daemons we now hear first-hand (those whose hello came on a link
        of ours): they stop relaying those daemons' events and gossip to us (``Neighbours``)."""
        neighbours = tuple(sorted(peer_id for peer_id, record in self._records.items()
                                  if record.link is not None and record.link.their_hello is not None))
        for record in self._records.values():
            if record.link is not None and record.link.their_hello is not None:
                record.link.tell_neighbours(neighbours)

    def pull_elsewhere(self, link: PeerLink, origin: str, max_seq: int) -> bool:
        owner = self.directory.peer_of_origin(origin)
        if owner is None or owner == link.peer_id:
            return False
        record = self._records.get(owner)
        source = record.link if record is not None else None
        return source is not None and source.their_heads.get(origin, 0) >= max_seq

    def link_progress(self, link: PeerLink) -> None:
        if link.peer_id is None:
            return
        held = self.peer_confirmed.setdefault(link.peer_id, {})
        for origin, seq in link.confirmed.items():
            if seq > held.get(origin, 0):
                held[origin] = seq
        self._progress.set()
        self._progress = trio.Event()
        self._links_changed()  # it may have caught up: the report loop tells

    def link_presence(self, link: PeerLink, presence: Presence) -> None:
        if presence.peer_id == self.peer_id:
            return
        known = self._presences.get(presence.peer_id)
        if known is not None and known[0].serial >= presence.serial:
            return
        cert = self.directory.certificate_of_peer(presence.peer_id)
        if cert is None:
            return  # a daemon we cannot verify yet; its next heartbeat will do
        try:
            Ed25519PublicKey.from_public_bytes(cert.public_key).verify(
                presence.signature,
                presence_signing_bytes(presence.peer_id, presence.name, presence.serial, presence.watchers))
        except Exception:
            self.limits.hit("bad_presence", "ignored a presence record for %s relayed by %s: bad signature",
                            presence.peer_id, link.peer_id)
            return
        if self.directory.is_revoked(presence.peer_id):
            return
        self._presences[presence.peer_id] = (presence, trio.current_time(), _utc())
        if presence.peer_id == link.peer_id:
            # Direct from its daemon: the serial is that daemon's clock (µs), good to a few ms.
            self._skews[presence.peer_id] = presence.serial / 1e6 - time.time()
        # Relayed to every other link through its outbox: newest per daemon, one sender per link.
        for link_id, outbox in self._outboxes.items():
            if link_id != id(link):
                outbox.put(presence)

    def link_report(self, link: PeerLink, report: Report) -> None:
        """Keep and relay another daemon's report if it is newer than the one we hold, comes from a
        member daemon we know and that is not revoked, verifies with that daemon's key and holds a
        JSON object; anything else is ignored and counted (``status.network.limits``). So what is
        kept is bounded by the member directory: one report per daemon, at most 16 KiB each."""
        if report.peer_id == self.peer_id:
            return  # our own, back through a relay: ours is newer
        known = self._reports.get(report.peer_id)
        if known is not None and known.report.serial >= report.serial:
            return
        about, relay = printable(report.peer_id, 80), printable(link.peer_id, 80)
        cert = self.directory.certificate_of_peer(report.peer_id)
        if cert is None:
            # Invented, or a race (its bindings travel ahead of its gossip on every link, so they
            # come first): its next report will do once it is known.
            self.limits.hit("report_unknown_daemon", "ignored a daemon report for %s relayed by %s: no member "
                            "certificate of it is known here", about, relay)
            return
        if self.directory.is_revoked(report.peer_id):
            self.limits.hit("report_revoked_daemon", "ignored a daemon report for revoked daemon %s relayed by %s",
                            about, relay)
            return
        try:
            Ed25519PublicKey.from_public_bytes(cert.public_key).verify(
                report.signature, report_signing_bytes(report.peer_id, report.name, report.serial, report.report))
        except InvalidSignature:
            self.limits.hit("bad_report", "ignored a daemon report for %s relayed by %s: bad signature", about, relay)
            return
        try:
            content = decode_report(report.report)
        except ValueError as exc:
            # Signed by its daemon, yet not a report: a bug or a hostile member. Not relayed either.
            self.limits.hit("bad_report_content", "ignored a daemon report of %s: %s", about, exc)
            return
        self._reports[report.peer_id] = _HeardReport(report, content, trio.current_time(), _utc())
        for link_id, outbox in self._outboxes.items():
            if link_id != id(link):
                outbox.put(report)

    # -- presence ------------------------------------------------------------------------------

    def watchers_changed(self) -> None:
        self._presence_due.set()

    def _own_presence(self) -> Presence:
        self._presence_serial = max(self._presence_serial + 1, time.time_ns() // 1000)
        local = self._watchers()
        if len(local) > MAX_WATCHERS_PER_PRESENCE:
            self.limits.hit("presence_watchers", "announcing the first %d of %d watchers to peers (the limit of one "
                            "presence record)", MAX_WATCHERS_PER_PRESENCE, len(local))
        watchers = tuple((agent[:256], filters[:MAX_PRESENCE_FILTER_CHARS], since[:64], *rest)
                         for agent, filters, since, *rest in local[:MAX_WATCHERS_PER_PRESENCE])
        signature = self.identity.sign(presence_signing_bytes(self.peer_id, self.membership.name,
                                                              self._presence_serial, watchers))
        return Presence(self.peer_id, self.membership.name, self._presence_serial, watchers, signature)

    async def _send_gossip(self, link: PeerLink, outbox: _Outbox) -> None:
        """The one task that sends presence records and reports to ``link``, from its outbox, until
        it ends."""
        with outbox.scope:
            try:
                while True:
                    await outbox.kick.wait()
                    outbox.kick = trio.Event()
                    batch, outbox.pending = list(outbox.pending.values()), {}
                    for gossip in batch:
                        if not link.relays_to_peer(gossip.peer_id):
                            continue  # the peer hears that daemon first-hand: it has this record or a newer one
                        await link.send_bindings_of(gossip.peer_id)  # so the peer can verify it
                        await link.send(gossip)
            except (trio.BrokenResourceError, trio.ClosedResourceError, ProtocolError):
                pass  # the link is ending; _run_connection cleans up

    async def _presence_loop(self) -> None:
        while True:
            with trio.move_on_after(PRESENCE_HEARTBEAT_S):
                await self._presence_due.wait()
            self._presence_due = trio.Event()
            own = self._own_presence()
            for outbox in self._outboxes.values():
                outbox.put(own)
            await trio.sleep(0.05)  # coalesce bursts of watcher changes

    def remote_watchers(self) -> list[dict[str, Any]]:
        now = trio.current_time()
        out = []
        for presence, heard, heard_utc in self._presences.values():
            silent = now - heard > PRESENCE_SILENT_S
            for agent, filters, since, *rest in presence.watchers:
                # Another daemon's words: shown as visible text only (no terminal escapes, no line
                # breaks); a worker's activity only as far as it passes the same check as ours.
                out.append({"agent": printable(agent, 256) or None, "filters": printable(filters, 512),
                            "since": printable(since, 64), "worker": decode_activity(rest[0]) if rest else None,
                            "daemon": {"peer_id": presence.peer_id, "name": printable(presence.name, 64)},
                            "daemon_last_heard": heard_utc, "daemon_silent": silent})
        return out

    def clock_skews(self) -> dict[str, float]:
        """Seconds each directly connected peer's clock is ahead of ours (from its presence serial)."""
        return dict(self._skews)

    # -- daemon reports ------------------------------------------------------------------------

    def _links_changed(self) -> None:
        """A link may have changed state: the report loop looks within ``REPORT_SETTLE_S``."""
        self._report_due.set()

    async def _report_loop(self) -> None:
        """Announce this daemon's report at start, every ``REPORT_HEARTBEAT_S``, and once links
        settle after one of them changed state. A link's own events (connected, lost, failed,
        revoked, the peer's progress) wake the loop; a link in a passing state (connecting,
        catching up) is looked at again every ``REPORT_SETTLE_S``, because it ends without an
        event of its own (the last of our pulls applied). A look that finds every link in the
        state last reported sends nothing until the heartbeat."""
        next_beat = trio.current_time()
        passing = False
        failed_before = False
        while True:
            with trio.move_on_at(min(next_beat, trio.current_time() + REPORT_SETTLE_S) if passing else next_beat):
                await self._report_due.wait()
                await trio.sleep(REPORT_SETTLE_S)
            self._report_due = trio.Event()  # after the settling: what changed by now is in this report
            beat = trio.current_time() >= next_beat
            try:
                links = await self._report_links()
                passing = any(link["state"] in ("connecting", "catching up") for link in links)
                if beat or _link_states(links) != self._reported_links:
                    await self._announce_report(links)
                    next_beat = trio.current_time() + REPORT_HEARTBEAT_S
            except Exception as exc:
                # A report is worth less than the daemon: say so (with a traceback the first time:
                # it is a bug, or the store failing) and try again on the next beat.
                if not failed_before:
                    LOGGER.exception("could not announce this daemon's report (retried every %.0f s)",
                                     REPORT_HEARTBEAT_S)
                    failed_before = True
                self.limits.hit("report_failed", "could not announce this daemon's report: %s: %s",
                                type(exc).__name__, exc)
                next_beat = trio.current_time() + REPORT_HEARTBEAT_S

    async def _report_links(self) -> list[dict[str, Any]]:
        """This daemon's own links as its report carries them: every peer it has a record of (met,
        dialled or seen by mDNS), with the state and lag ``peers`` shows; connected ones first, as
        the report keeps only the first ``MAX_REPORT_LINKS``."""
        heads = self.store.version_vector()  # kept in memory: no read
        views = [p for p in self.peers_view(heads) if p["peer_id"] in self._records]
        views.sort(key=lambda p: (p["state"] not in ("live", "catching up", "connecting"), p["peer_id"]))
        return [{key: p[key] for key in ("peer_id", "state", "direction", "last_contact", "we_lack", "they_lack")}
                for p in views]

    async def _report_content(self, links: list[dict[str, Any]]) -> dict[str, Any]:
        """The whole report (palace_proto.fleet): ``links``, and the rest as ``status`` sees it."""
        content: dict[str, Any] = {"role": self.membership.role, "origin": self.store.origin_id, "links": links}
        try:
            content.update(await self._facts() if self._facts is not None else {})
        except Exception as exc:
            # The report still goes out (its links are worth having), saying what went wrong; a
            # failing store shows in status and the log as well.
            self.limits.hit("report_facts", "could not gather this daemon's status for its report: %s: %s",
                            type(exc).__name__, exc)
            content["health"] = {"ok": False, "problems": [
                f"could not gather this daemon's status: {type(exc).__name__}: {exc}"]}
        return content

    async def _announce_report(self, links: list[dict[str, Any]]) -> None:
        """Sign a new report and put it in every link's outbox."""
        encoded = encode_report(await self._report_content(links))
        # The daemon's clock in µs (as presence): a restarted daemon's reports still win over its old ones.
        self._report_serial = max(self._report_serial + 1, time.time_ns() // 1000)
        name = self.membership.name
        signature = self.identity.sign(report_signing_bytes(self.peer_id, name, self._report_serial, encoded))
        self._own_report = Report(self.peer_id, name, self._report_serial, encoded, signature)
        self._reported_links = _link_states(links)
        for outbox in self._outboxes.values():
            outbox.put(self._own_report)

    async def current_report(self) -> dict[str, Any]:
        """This daemon's report as it would go out now, read back as its peers read it."""
        return decode_report(encode_report(await self._report_content(await self._report_links())))

    def heard_reports(self) -> list[dict[str, Any]]:
        """Other daemons' newest reports (revoked daemons left out), in peer id order: ``{peer_id,
        name, report, heard_at, silent}``; the name is the one its certificate gives."""
        now = trio.current_time()
        out = []
        for peer_id, heard in sorted(self._reports.items()):
            if self.directory.is_revoked(peer_id):
                continue
            cert = self.directory.certificate_of_peer(peer_id)
            out.append({"peer_id": peer_id, "name": printable(cert.name if cert else heard.report.name, 64),
                        "report": heard.content, "heard_at": heard.heard_at,
                        "silent": now - heard.heard > REPORT_SILENT_S})
        return out

    # -- revocation ----------------------------------------------------------------------------

    def _on_revoke_threadsafe(self, revocation: Revocation) -> None:
        # Called from the writer thread (mid-batch) or the trio thread: hop into trio either way.
        if self._token is not None:
            self._token.run_sync_soon(self._drop_revoked, revocation.peer_id)

    def _drop_revoked(self, peer_id: str) -> None:
        record = self._records.get(peer_id)
        if record is not None:
            record.state = "revoked"
            if record.link is not None:
                scope = self._link_scopes.get(id(record.link))
                if scope is not None:
                    scope.cancel()
                LOGGER.warning("dropped the link with revoked peer %s", peer_id)
        self._presences.pop(peer_id, None)
        self._reports.pop(peer_id, None)
        for outbox in self._outboxes.values():
            outbox.discard(peer_id)
        self._links_changed()

    # -- replication receipts ------------------------------------------------------------------

    def holders(self, origin: str, origin_seq: int) -> list[str]:
        return sorted(p for p, held in self.peer_confirmed.items() if held.get(origin, 0) >= origin_seq)

    async def wait_replicated(self, origin: str, origin_seq: int, count: int, timeout_s: float) -> list[str]:
        with trio.move_on_after(timeout_s):
            while True:
                progress = self._progress
                if len(self.holders(origin, origin_seq)) >= count:
                    break
                await progress.wait()
        return self.holders(origin, origin_seq)

    # -- views ---------------------------------------------------------------------------------

    def peer_names(self) -> dict[str, str]:
        """Every member daemon known here (by certificate, or met on a link): peer id -> its name."""
        names = {cert.peer_id: printable(cert.name, 64) for cert in self.directory.certificates()}
        names.update((peer_id, printable(record.name, 64)) for peer_id, record in self._records.items() if record.name)
        return names

    def stalled_links(self) -> list[dict[str, str]]:
        """Links that make no progress now: ``{peer_id, name, reason}`` each (``status`` health)."""
        out = []
        for peer_id, record in sorted(self._records.items()):
            reason = record.link.stall() if record.link is not None else None
            if reason is not None:
                out.append({"peer_id": peer_id, "name": printable(record.name, 64), "reason": reason})
        return out

    def link_totals(self) -> dict[str, int]:
        """What every link of this daemon has sent since it started: ``{events_sent, bytes_sent}``."""
        live = [r.link for r in self._records.values() if r.link is not None]
        return {"events_sent": self._ended_sent[0] + sum(link.sent_events for link in live),
                "bytes_sent": self._ended_sent[1] + sum(link.bytes_sent for link in live)}

    def connected_peers(self) -> list[str]:
        return sorted(p for p, r in self._records.items() if r.link is not None)

    def peers_view(self, heads: dict[str, int]) -> list[dict[str, Any]]:
        peers = {}
        known_certs = {cert.peer_id: cert for cert in self.directory.certificates()}
        for peer_id in sorted(set(self._records) | set(known_certs)):
            if peer_id == self.peer_id:
                continue
            record = self._records.get(peer_id) or _PeerRecord(peer_id)
            cert = known_certs.get(peer_id)
            link = record.link
            theirs = dict(self.peer_confirmed.get(peer_id, {}))
            if link is not None:
                for origin, seq in link.confirmed.items():
                    theirs[origin] = max(theirs.get(origin, 0), seq)
            origins = sorted(set(heads) | set(theirs))
            vector = [{"origin": o, "ours": heads.get(o, 0), "theirs": theirs.get(o, 0)} for o in origins]
            known = link is not None or peer_id in self.peer_confirmed
            # None: we have never heard what that peer holds (e.g. known only through a relay).
            we_lack = sum(max(0, v["theirs"] - v["ours"]) for v in vector) if known else None
            they_lack = sum(max(0, v["ours"] - v["theirs"]) for v in vector) if known else None
            revoked = self.directory.is_revoked(peer_id)
            if revoked:
                state = "revoked"
            elif link is None:
                state = record.state if record.state in ("connecting", "error", "disconnected") else "discovered"
            elif link.their_hello is None or link.session.their_vector is None:
                state = "connecting"
            elif we_lack or they_lack or link.fetching:
                state = "catching up"
            else:
                state = "live"
            targets = [t for t in self._targets.values() if t.peer_id == peer_id]
            addresses = [{"address": t.address, "source": "/".join(sorted(t.sources)), "state": t.state}
                         for t in targets]
            found_by = {s for t in targets for s in t.sources} | record.dialled_via
            if record.direction == "in":
                found_by.add("incoming")
            if not found_by:
                found_by.add("relay")  # known only from certificates relayed by other peers
            peers[peer_id] = {
                "peer_id": peer_id, "name": record.name or (printable(cert.name, 64) if cert else ""),
                "role": record.role or (cert.role if cert else ""), "state": state, "revoked": revoked,
                "direction": record.direction, "found_by": sorted(found_by),
                "addresses": addresses, "connected_since": record.connected_since if link else None,
                "last_contact": link.last_contact if link else record.last_contact,
                "last_error": record.last_error, "last_error_at": record.last_error_at,
                "we_lack": we_lack, "they_lack": they_lack, "vector": vector,
                "forks": list(link.forks) if link else [],
                "sent_events": link.sent_events if link else 0, "received_events": link.received_events if link else 0,
                "rejected_events": link.rejected_events if link else 0,
                "refused_events": link.refused_events if link else 0,
                "refused_bindings": link.refused_bindings if link else 0,
                "bytes_sent": link.bytes_sent if link else 0, "bytes_received": link.bytes_received if link else 0,
                # The daemons that peer is linked to itself (its Neighbours): we relay it nothing of theirs
                "neighbours": sorted(link.peer_neighbours) if link else [],
                # Why this link makes no progress now (None: it does, or it is idle): status health
                "stall": link.stall() if link else None,
            }
        unresolved = [{"peer_id": None, "name": "", "role": "", "state": t.state, "revoked": False, "direction": None,
                       "found_by": sorted(t.sources), "addresses": [{"address": t.address,
                                                                       "source": "/".join(sorted(t.sources)),
                                                                       "state": t.state}],
                       "connected_since": None, "last_contact": None, "last_error": t.last_error,
                       "last_error_at": t.last_error_at, "we_lack": 0, "they_lack": 0, "vector": [], "forks": [],
                       "sent_events": 0, "received_events": 0, "rejected_events": 0,
                       "refused_events": 0, "refused_bindings": 0, "bytes_sent": 0, "bytes_received": 0,
                       "neighbours": [], "stall": None}
                      for t in self._targets.values() if t.peer_id is None]
        return list(peers.values()) + unresolved

    def targets_view(self) -> list[dict[str, Any]]:
        return [{"address": t.address, "sources": sorted(t.sources), "peer_id": t.peer_id, "state": t.state,
                 "last_error": t.last_error, "last_error_at": t.last_error_at} for t in self._targets.values()]


def _link_states(links: list[dict[str, Any]]) -> dict[str, tuple[Any, Any]]:
    return {link["peer_id"]: (link["state"], link["direction"]) for link in links}


def _describe_dial_error(exc: BaseException) -> str:
    cause = exc.__cause__
    if isinstance(exc, OSError) and isinstance(cause, BaseExceptionGroup) and cause.exceptions:
        exc = cause.exceptions[0]  # trio: "all attempts to connect failed", from the attempts' errors
    if isinstance(exc, trio.TooSlowError):
        return "timed out (no answer; is the address right and the port open?)"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (nothing listens there: is palaced running, on that port?)"
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed ({exc.reason or exc}): not a daemon of this palace, or revoked"
    if isinstance(exc, trio.BrokenResourceError):
        return "the peer closed the connection during the handshake (it does not accept our certificate)"
    if isinstance(exc, CertificateError):
        return f"the peer's certificate is not acceptable: {exc}"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def _describe_accept_error(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed ({exc.reason or exc}): not a member of this palace"
    if isinstance(exc, trio.BrokenResourceError):
        cause = exc.__cause__
        if isinstance(cause, ssl.SSLError):
            return f"TLS handshake failed ({cause.reason or cause}): not a member of this palace"
        return "the connection closed during the TLS handshake (not a member of this palace?)"
    if isinstance(exc, trio.TooSlowError):
        return "no TLS handshake within the time limit"
    return str(exc)

