"""Addresses: where this daemon says it can be reached, and where the others say they can.

Owns: this daemon's own address record (``palace_proto.addresses.offered``: its listen addresses,
a wildcard one as the machine's interface addresses, and the hosts the peers it dialled saw it come
from, ``observed``), signed with its key and announced at start, soon after what its peers saw of
it changes, and on a heartbeat; the newest record heard from each other member daemon,
kept only if it verifies with that daemon's key, relayed to every other link, and handed to the
dialler (``Dialer.gossiped``: each daemon dials the others directly, so a palace joined through
one invite is a mesh, not a star around its inviter); records that aged out
(``palace_proto.addresses.is_stale``) are no longer dialled.

What a hostile member can do with it is bounded: it cannot sign another daemon's record, so it
cannot say where another daemon is; its own record sends the others to at most
``MAX_DIALED_PER_DAEMON`` addresses (a dial there meets another certificate, or nothing); what is
kept is one record per member daemon.

Sends through gossip.py and dials through dialing.py; the network hands it what links receive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import trio
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from palace_proto.addresses import ADDRESS_HEARTBEAT_S, dialable, is_stale, observed, offered
from palace_proto.link import GossipRecord
from palace_proto.peer import Addresses, Seen, addresses_signing_bytes
from palace_proto.text import printable

from ..clock import unix_now_us
from ..limits import LimitLog
from ..members import MemberDirectory
from .dialing import Dialer
from .gossip import Gossip

if TYPE_CHECKING:
    from .link import PeerLink

__all__ = ["AddressBook"]

LOGGER: Final = logging.getLogger("palaced.peers.addresses")
# Why 2 s: the links that come up together (a restart) each say where they saw us from; one new
# record after they settle says it all, and a peer changing its story costs a record per 2 s.
ANNOUNCE_SETTLE_S: Final = 2.0


class AddressBook:
    """This daemon's address record and the newest one heard from each other daemon."""

    def __init__(self, *, peer_id: str, identity: Ed25519PrivateKey, directory: MemberDirectory, gossip: Gossip,
                 dialer: Dialer, listen: Callable[[], list[str]], interfaces: Callable[[], list[str]],
                 limits: LimitLog, dial: bool = True) -> None:
        self.peer_id = peer_id
        self.identity = identity
        self.directory = directory
        self.gossip = gossip
        self.dialer = dialer
        self.limits = limits
        #: dial what the records offer (off: ``[network] gossip_dial = false``; still kept and relayed)
        self.dial = dial
        #: this daemon's listen addresses, as bound (the network's, once it listens)
        self._listen = listen
        #: the machine's interface addresses (for a wildcard listen address)
        self._interfaces = interfaces
        self._serial = 0
        #: this daemon's newest record, as sent (None until the first, at start)
        self.own: Addresses | None = None
        #: other daemons' newest records that verified: at most one per member daemon
        self.heard: dict[str, Addresses] = {}
        #: where each peer that we dialled saw us come from (its newest ``Seen``): one per member daemon
        self.seen_by: dict[str, str] = {}
        self._due = trio.Event()
        gossip.add_source(self._for_new_link, every_link=True)

    def __repr__(self) -> str:
        return f"<AddressBook {self.peer_id[:7]} heard={len(self.heard)} serial={self._serial}>"

    def _for_new_link(self) -> list[GossipRecord]:
        """A new link is sent our record, then every other daemon's we hold."""
        own: list[GossipRecord] = [self.own] if self.own is not None else []
        return own + list(self.heard.values())

    async def serve(self) -> None:
        """Announce this daemon's record at start, every ``ADDRESS_HEARTBEAT_S`` (with what the
        interfaces say then) and soon after what its peers saw of it changed, and stop dialling the
        records that aged out."""
        while True:
            try:
                self.announce()
            except Exception as exc:  # addresses are worth less than the daemon: say so, go on
                self.limits.hit("addresses_failed", "could not announce this daemon's addresses: %s: %s",
                                type(exc).__name__, exc)
            self.sweep()
            with trio.move_on_after(ADDRESS_HEARTBEAT_S):
                await self._due.wait()
                await trio.sleep(ANNOUNCE_SETTLE_S)
            self._due = trio.Event()

    def announce(self) -> None:
        """Sign this daemon's record as it stands and hand it to every link."""
        addresses = offered(self._listen(), self._interfaces(), observed(self.seen_by))
        # The daemon's clock in µs (as reports): a restarted daemon's record still wins over its old ones.
        self._serial = max(self._serial + 1, unix_now_us())
        signature = self.identity.sign(addresses_signing_bytes(self.peer_id, self._serial, addresses))
        self.own = Addresses(self.peer_id, self._serial, addresses, signature)
        self.gossip.broadcast(self.own)

    def sweep(self) -> None:
        """Forget the records that aged out (their daemons stopped announcing): no longer dialled."""
        now = unix_now_us()
        for peer_id in [p for p, record in self.heard.items() if is_stale(record.serial, now)]:
            self.forget(peer_id)

    def receive(self, link: PeerLink, record: Addresses | Seen) -> None:
        """Keep, relay and dial another daemon's record (``LinkHooks.link_addresses``) if it is newer
        than the one we hold, not too old, from a member daemon we know and that is not revoked, and
        verifies with that daemon's key; anything else is ignored and counted (``status``). A
        ``Seen`` is the link's own peer telling where it saw us come from: one vote of that peer."""
        if isinstance(record, Seen):
            if link.peer_id is None:  # pragma: no cover - a link hears nothing of the network before the hellos
                return
            before = observed(self.seen_by)
            self.seen_by[link.peer_id] = record.host
            if observed(self.seen_by) != before:
                self._due.set()
            return
        if record.peer_id == self.peer_id:
            return  # our own, back through a relay: ours is newer
        known = self.heard.get(record.peer_id)
        if known is not None and known.serial >= record.serial:
            if known.serial == record.serial:  # the same record again: the tree prunes its sender
                self.gossip.duplicate(record, link)
            return
        about, relay = printable(record.peer_id, 80), printable(link.peer_id, 80)
        cert = self.directory.certificate_of_peer(record.peer_id)
        if cert is None:
            # Invented, or a race (bindings travel ahead of gossip, so they usually come first):
            # its next record will do once it is known.
            self.limits.hit("addresses_unknown_daemon", "ignored the addresses of %s relayed by %s: no member "
                            "certificate of it is known here", about, relay)
            return
        if self.directory.is_revoked(record.peer_id):
            self.limits.hit("addresses_revoked_daemon", "ignored the addresses of revoked daemon %s relayed by %s",
                            about, relay)
            return
        try:
            Ed25519PublicKey.from_public_bytes(cert.public_key).verify(
                record.signature, addresses_signing_bytes(record.peer_id, record.serial, record.addresses))
        except InvalidSignature:
            self.limits.hit("bad_addresses", "ignored the addresses of %s relayed by %s: bad signature", about, relay)
            return
        if is_stale(record.serial, unix_now_us()):
            return  # an old record still making the rounds: its daemon has not announced for an hour
        self.heard[record.peer_id] = record
        self.gossip.relay(record, link)
        if self.dial:
            self.dialer.gossiped(record.peer_id, dialable(record.addresses, self._own_addresses()))

    def _own_addresses(self) -> list[str]:
        return [*self._listen(), *(self.own.addresses if self.own is not None else ())]

    def forget(self, peer_id: str) -> None:
        """Drop the record heard from ``peer_id`` and stop dialling what it offered (it aged out, or
        the daemon was revoked)."""
        self.seen_by.pop(peer_id, None)
        if self.heard.pop(peer_id, None) is not None and self.dial:
            self.dialer.gossiped(peer_id, [])

    def view(self) -> dict[str, Any]:
        """What ``status`` shows: our own addresses, and how many daemons' records are held."""
        return {"own": list(self.own.addresses) if self.own is not None else [], "heard": len(self.heard)}
