"""Gossip: what daemons say about themselves, relayed newest-wins to every ready link.

Owns: which links gossip goes to. A link is given gossip once its hellos and bindings are in (and,
in a palace of partial views, its peer is active: ``takes``, ``welcome``), and no more once it
ends: both heard through the registry's change hook. What a new link is sent
first comes from the sources presence and reports add (``add_source``), in the order they were
added; ``broadcast`` and ``relay`` hand a record to every link (``relay``: but the one it came on),
``discard`` forgets a revoked daemon's. Each link keeps only the newest record per daemon and kind
until its one sender sends it, and sends nothing about a daemon its peer hears first-hand
(``palace_proto.link``), so a flood of presence records or reports costs one send per daemon,
kind and link, never a task or a queue entry each. Verifying and keeping gossip is presence.py's
and reports.py's.

Imports only the registry (its change type); presence and reports import this.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final, Protocol

from palace_proto.link import GossipRecord
from palace_proto.peer import Addresses, Presence, Report, gossip_name

from .registry import LinkChange, LinkRegistry

if TYPE_CHECKING:
    from .link import PeerLink

__all__ = ["GOSSIP_KINDS", "Gossip", "GossipRecord", "GossipTree", "gossip_key"]



#: the broadcast tree's letter for each kind of gossip record (``palace_proto.peer.gossip_name``)
GOSSIP_KINDS: Final[dict[type, str]] = {Presence: "p", Report: "r", Addresses: "a"}


def gossip_key(record: GossipRecord) -> tuple[str, int]:
    """The broadcast tree's name for a gossip record: its kind and daemon, and its serial."""
    return gossip_name(GOSSIP_KINDS[type(record)], record.peer_id), record.serial


class GossipTree(Protocol):
    """What gossip tells the broadcast tree (``overlay.Overlay``)."""

    def gossip_received(self, peer: str, record: GossipRecord) -> None: ...


class Gossip:
    """The ready links, which gossip goes to."""

    def __init__(self, registry: LinkRegistry) -> None:
        #: the links that take gossip (welcomed)
        self.links: dict[int, PeerLink] = {}
        #: every ready link: address records go to each (a joiner's only link is a passing one,
        #: and it needs to learn where the others are before it can ask any of them for a link)
        self.ready: dict[int, PeerLink] = {}
        self._sources: list[tuple[Callable[[], Iterable[GossipRecord]], bool]] = []
        #: the newest record relayed or broadcast per kind and daemon (the tree's key name: a
        #: graft is answered from here); bounded by the members, three kinds each
        self._newest: dict[str, GossipRecord] = {}
        #: which peers' links take gossip (overlay.py: the active view; a passing link carries
        #: none), judged when a link is ready; the overlay ``welcome``s a link that becomes active
        self.takes: Callable[[str], bool] = lambda peer_id: True
        #: which peers a relayed record goes to (overlay.py: the gossip tree's eager peers)
        self.pushes_to: Callable[[str], bool] = lambda peer_id: True
        #: the broadcast tree (overlay.py), once the network wires it: a relayed record then goes
        #: only to the peers it pushes to, and a record heard twice prunes the second sender
        self.tree: GossipTree | None = None
        registry.subscribe(self._on_change)

    def __repr__(self) -> str:
        return f"<Gossip links={len(self.links)}>"

    def add_source(self, source: Callable[[], Iterable[GossipRecord]], *, every_link: bool = False) -> None:
        """``source()`` gives what a newly welcomed link is to be sent (after the earlier sources');
        ``every_link``: what every ready link is sent, welcomed or not."""
        self._sources.append((source, every_link))

    def _on_change(self, change: LinkChange) -> None:
        if change.link is None:
            return
        if change.kind == "ready" and id(change.link) not in self.ready:
            self.ready[id(change.link)] = change.link
            for source, every_link in self._sources:
                if every_link:
                    for gossip in source():
                        _give(change.link, gossip)
            if change.peer_id is None or self.takes(change.peer_id):
                self.welcome(change.link)
        elif change.kind == "removed":
            self.links.pop(id(change.link), None)
            self.ready.pop(id(change.link), None)

    def welcome(self, link: PeerLink) -> None:
        """``link`` takes gossip from now on: it is sent what the sources hold, once."""
        if id(link) in self.links or id(link) not in self.ready:
            return
        self.links[id(link)] = link
        for source, every_link in self._sources:
            if not every_link:
                for gossip in source():
                    _give(link, gossip)

    def newest_of(self, name: str) -> GossipRecord | None:
        """The newest record under the tree's key name (``overlay.gossip_key``), if any."""
        return self._newest.get(name)

    def _keep(self, gossip: GossipRecord) -> None:
        self._newest[gossip_key(gossip)[0]] = gossip

    def broadcast(self, gossip: GossipRecord) -> None:
        """Hand our own ``gossip`` to every link (a peer that hears us first-hand hears it from no one else)."""
        self._keep(gossip)
        for link in (self.ready if isinstance(gossip, Addresses) else self.links).values():
            _give(link, gossip)

    def relay(self, gossip: GossipRecord, came_on: PeerLink) -> None:
        """Hand ``gossip``, new here, to every link but the one it came on (with the tree: to
        the peers it pushes to; it announces the record to the others)."""
        self._keep(gossip)
        if self.tree is not None and came_on.peer_id is not None:
            self.tree.gossip_received(came_on.peer_id, gossip)
        pushes_to = self.pushes_to
        for link_id, link in self.links.items():
            if link_id != id(came_on) and link.peer_id is not None and pushes_to(link.peer_id):
                _give(link, gossip)

    def duplicate(self, gossip: GossipRecord, came_on: PeerLink) -> None:
        """``came_on`` brought a record we held already (or an older one)."""
        if self.tree is not None and came_on.peer_id is not None:
            self.tree.gossip_received(came_on.peer_id, gossip)

    def discard(self, peer_id: str) -> None:
        """Forget whatever waits about daemon ``peer_id``, on every link (it was revoked)."""
        for name in [n for n, record in self._newest.items() if record.peer_id == peer_id]:
            del self._newest[name]
        for link in self.ready.values():
            link.machine.discard_gossip(peer_id)


def _give(link: PeerLink, gossip: GossipRecord) -> None:
    """Hand ``gossip`` to ``link`` (it keeps the newest per daemon and kind until its sender sends it)."""
    link.machine.gossip(gossip)
    link.wake()
