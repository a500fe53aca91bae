"""Gossip: what daemons say about themselves, relayed newest-wins to every ready link.

Owns: which links gossip goes to. A link is given gossip once its hellos and bindings are in, and
no more once it ends: both heard through the registry's change hook. What a new link is sent
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
from typing import TYPE_CHECKING

from palace_proto.link import GossipRecord

from .registry import LinkChange, LinkRegistry

if TYPE_CHECKING:
    from .link import PeerLink

__all__ = ["Gossip", "GossipRecord"]



class Gossip:
    """The ready links, which gossip goes to."""

    def __init__(self, registry: LinkRegistry) -> None:
        self.links: dict[int, PeerLink] = {}
        self._sources: list[Callable[[], Iterable[GossipRecord]]] = []
        registry.subscribe(self._on_change)

    def __repr__(self) -> str:
        return f"<Gossip links={len(self.links)}>"

    def add_source(self, source: Callable[[], Iterable[GossipRecord]]) -> None:
        """``source()`` gives what a newly ready link is to be sent (after the earlier sources')."""
        self._sources.append(source)

    def _on_change(self, change: LinkChange) -> None:
        if change.link is None:
            return
        if change.kind == "ready" and id(change.link) not in self.links:
            self.links[id(change.link)] = change.link
            for source in self._sources:
                for gossip in source():
                    change.link.gossip(gossip)
        elif change.kind == "removed":
            self.links.pop(id(change.link), None)

    def broadcast(self, gossip: GossipRecord) -> None:
        """Hand ``gossip`` to every link."""
        for link in self.links.values():
            link.gossip(gossip)

    def relay(self, gossip: GossipRecord, came_on: PeerLink) -> None:
        """Hand ``gossip`` to every link but the one it came on."""
        for link_id, link in self.links.items():
            if link_id != id(came_on):
                link.gossip(gossip)

    def discard(self, peer_id: str) -> None:
        """Forget whatever waits about daemon ``peer_id``, on every link (it was revoked)."""
        for link in self.links.values():
            link.discard_gossip(peer_id)
