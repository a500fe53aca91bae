"""The peer network of one daemon: its parts wired together, its port, and its lifetime.

Owns: building the package's parts for one membership, with the TLS contexts and the hello this
daemon presents; listening on the peer port (``ListenError`` when it cannot); running the
listener, the dial loops, the gossip senders, the presence, report and address heartbeats and the
overlay (partial views, broadcast tree) in one nursery until cancelled, then saying goodbye on
every link; and being the ``LinkHooks`` every ``PeerLink`` calls, each hook handed to the part
that owns it. Handlers reach the parts through it
(``network.dialer``, ``network.views``, ``network.receipts``...); the ``limits`` they all count
refusals in are shown by ``status``.

The top of the package: imports every part, and nothing in the package imports it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.broadcast import BroadcastMessage
from palace_proto.envelope import SignedEvent
from palace_proto.errors import ApiError
from palace_proto.overlay import OverlayMessage
from palace_proto.peer import (
    PEER_PROTOCOL_VERSION,
    Addresses,
    Hello,
    Presence,
    Report,
    Seen,
    format_peer_address,
    parse_peer_address,
)

from ..bus import EventBus
from ..interfaces import interface_ipv4_addresses
from ..limits import LimitLog
from ..members import MemberDirectory
from ..membership import Membership
from ..store.aio import AsyncStore
from ..tls import client_context, server_context
from .addresses import AddressBook
from .admission import Admission
from .dialing import Dialer
from .gossip import Gossip
from .link import PeerLink
from .links import LinkRunner
from .overlay import Overlay
from .presence import Presences
from .receipts import Receipts
from .registry import LinkRegistry
from .reports import Reports
from .revocation import Revocations
from .views import PeerViews

__all__ = ["ListenError", "Network", "NetworkSettings"]

LOGGER: Final = logging.getLogger("palaced.peers.network")


@dataclasses.dataclass(frozen=True, slots=True)
class NetworkSettings:
    listen_host: str
    listen_port: int
    mdns: bool
    #: dial the addresses other daemons gossip (addresses.py announces and relays either way)
    gossip_dial: bool = True


class ListenError(ApiError):
    """The peer port cannot be opened (in use, or an address this machine does not have)."""

    code = "internal"


class Network:
    """The peer network: its parts, their lifetime (``run``), and the hooks its links call."""

    def __init__(self, *, settings: NetworkSettings, home: Path, membership: Membership, identity: Ed25519PrivateKey,
                 identity_path: Path, store: AsyncStore, bus: EventBus, directory: MemberDirectory,
                 watchers: Callable[[], list[tuple[str, ...]]], max_artifact_bytes: int,
                 facts: Callable[[], Awaitable[Mapping[str, Any]]] | None = None) -> None:
        self.settings = settings
        self.membership = membership
        self.identity = identity
        self.store = store
        self.bus = bus
        self.directory = directory
        self.peer_id = membership.peer_id
        self.max_artifact_bytes = max_artifact_bytes
        member_cert_path = home / "palace" / "member.crt"
        client_ctx = client_context(member_cert_path, identity_path, membership.ca_cert_pem)
        server_ctx = server_context(member_cert_path, identity_path, membership.ca_cert_pem, allow_enrolment=False)
        enrol_ctx = (server_context(member_cert_path, identity_path, membership.ca_cert_pem, allow_enrolment=True)
                     if membership.can_invite else None)
        own = directory.binding(self.store.origin_id)
        if own is None:
            raise ValueError(f"this daemon's own origin {self.store.origin_id} has no proven binding")
        self.hello = Hello(PEER_PROTOCOL_VERSION, membership.palace_id, membership.peer_id, membership.name,
                           membership.role, origin=self.store.origin_id, certificate=membership.member_pem,
                           origin_proof=own.proof)
        self.listen_addresses: list[str] = []
        #: every bound the network keeps on outside input, logged once and counted (``status``)
        self.limits = LimitLog(logging.getLogger("palaced.peers"))
        self.registry = LinkRegistry(self.peer_id)
        self.links = LinkRunner(peer_id=self.peer_id, hello=self.hello, store=store, bus=bus, directory=directory,
                                registry=self.registry, hooks=self, max_artifact_bytes=max_artifact_bytes,
                                limits=self.limits)
        self.dialer = Dialer(peer_id=self.peer_id, membership=membership, store=store, directory=directory,
                             registry=self.registry, runner=self.links, client_ctx=client_ctx, limits=self.limits,
                             mdns=settings.mdns)
        self.admission = Admission(home=home, membership=membership, store=store, runner=self.links,
                                   server_ctx=server_ctx, enrol_ctx=enrol_ctx, limits=self.limits)
        # The registry's subscribers hear each change in this order: gossip (ready links), receipts,
        # reports. What a new link is sent first: presence, then reports (the order of the sources).
        self.gossip = Gossip(self.registry)
        self.presence = Presences(peer_id=self.peer_id, membership=membership, identity=identity,
                                  directory=directory, gossip=self.gossip, watchers=watchers, limits=self.limits)
        self.receipts = Receipts(self.registry)
        self.views = PeerViews(peer_id=self.peer_id, directory=directory, registry=self.registry, dialer=self.dialer,
                               receipts=self.receipts)
        self.reports = Reports(peer_id=self.peer_id, membership=membership, identity=identity, store=self.store,
                               directory=directory, registry=self.registry, views=self.views, gossip=self.gossip,
                               facts=facts, limits=self.limits)
        self.addresses = AddressBook(peer_id=self.peer_id, identity=identity, directory=directory, gossip=self.gossip,
                                     dialer=self.dialer, listen=lambda: self.listen_addresses,
                                     interfaces=lambda: interface_ipv4_addresses(multicast=False), limits=self.limits,
                                     dial=settings.gossip_dial)
        self.overlay = Overlay(peer_id=self.peer_id, own_origin=self.store.origin_id, directory=directory,
                               registry=self.registry, dialer=self.dialer, gossip=self.gossip, store=store, bus=bus,
                               limits=self.limits)
        self.reports.keeps = self.overlay.keeps_link
        self.revocations = Revocations(directory=directory, registry=self.registry, gossip=self.gossip,
                                       presence=self.presence, reports=self.reports, addresses=self.addresses)

    def __repr__(self) -> str:
        return f"<Network {self.peer_id[:7]} links={len(self.registry.links())}>"

    # -- lifetime ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        self.revocations.watch()
        await self.admission.refresh_invites()
        address = format_peer_address(self.settings.listen_host, self.settings.listen_port)
        try:
            listeners = await trio.open_tcp_listeners(self.settings.listen_port,
                                                      host=self.settings.listen_host or None)
        except OSError as exc:
            raise ListenError(f"cannot listen for peers on {address}: {exc.strerror or exc} (another palaced on "
                              "this port? choose one with --listen HOST:PORT or [network] listen)") from None
        self.listen_addresses = [format_peer_address(*listener.socket.getsockname()[:2]) for listener in listeners]
        LOGGER.info("listening for peers on %s", ", ".join(self.listen_addresses))
        async with trio.open_nursery() as nursery:
            self.dialer.nursery = nursery
            nursery.start_soon(trio.serve_listeners, self.admission.on_tcp, listeners)
            await self.dialer.dial_known()
            nursery.start_soon(self.presence.serve)
            nursery.start_soon(self.reports.serve)
            nursery.start_soon(self.addresses.serve)
            nursery.start_soon(self.overlay.serve)
            if self.settings.mdns:
                nursery.start_soon(self.dialer.serve_mdns, self.listen_port)
            task_status.started(self.listen_addresses)
            try:
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(1):
                    await self.registry.close_all()

    @property
    def listen_port(self) -> int:
        return parse_peer_address(self.listen_addresses[0])[1] if self.listen_addresses else self.settings.listen_port

    # -- LinkHooks (link.py): each to the part that owns it -------------------------------------

    def link_ready(self, link: PeerLink) -> None:
        self.registry.ready(link)

    def link_progress(self, link: PeerLink) -> None:
        self.registry.progress(link)

    def link_presence(self, link: PeerLink, presence: Presence) -> None:
        self.presence.receive(link, presence)

    def link_report(self, link: PeerLink, report: Report) -> None:
        self.reports.receive(link, report)

    def link_addresses(self, link: PeerLink, addresses: Addresses | Seen) -> None:
        self.addresses.receive(link, addresses)

    def link_control(self, link: PeerLink, message: OverlayMessage | BroadcastMessage) -> None:
        self.overlay.control(link, message)

    def link_applied(self, link: PeerLink, applied: Sequence[SignedEvent], duplicates: Sequence[SignedEvent]) -> None:
        self.overlay.applied(link, applied, duplicates)

    def pull_elsewhere(self, link: PeerLink, origin: str, max_seq: int) -> bool:
        owner = self.directory.peer_of_origin(origin)
        if owner is None or owner == link.peer_id:
            return False
        source = self.registry.link_of(owner)
        return source is not None and source.machine.their_heads.get(origin, 0) >= max_seq
