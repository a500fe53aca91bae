"""Gossip: what daemons say about themselves, relayed newest-wins through one sender per link.

Owns: each ready link's ``Outbox`` (the newest presence record and report per daemon, waiting to
go) and the one task per link that sends from it, in the network's nursery. A link gets its
outbox when its hellos and bindings are in and loses it when it ends: both heard through the
registry's change hook. What a new link is sent first comes from the sources presence and reports
add (``add_source``), in the order they were added; ``broadcast`` and ``relay`` put a record in
every outbox (``relay``: but the one of the link it came on), ``discard`` forgets a revoked
daemon's. Verifying and keeping gossip is presence.py's and reports.py's.

Imports only the registry (its change type); presence and reports import this.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import trio

from palace_proto.errors import ProtocolError
from palace_proto.peer import Presence, Report

from .registry import LinkChange, LinkRegistry

if TYPE_CHECKING:
    from ..replication import PeerLink

__all__ = ["Gossip", "GossipRecord", "Outbox"]

#: what daemons gossip about themselves, relayed newest-wins: which watchers are connected, and reports
GossipRecord = Presence | Report


class Outbox:
    """Gossip waiting to go to one link: the newest record per kind and daemon only, so a flood of
    presence records or reports costs one send per daemon, kind and link, never a task or a queue
    entry each (and the outbox holds at most two records per member daemon)."""

    def __init__(self) -> None:
        self.pending: dict[tuple[type[GossipRecord], str], GossipRecord] = {}
        self.kick = trio.Event()
        self.scope = trio.CancelScope()

    def put(self, gossip: GossipRecord) -> None:
        key = (type(gossip), gossip.peer_id)
        known = self.pending.get(key)
        if known is None or known.serial < gossip.serial:
            self.pending[key] = gossip
        self.kick.set()

    def discard(self, peer_id: str) -> None:
        """Forget whatever waits about daemon ``peer_id`` (it was revoked)."""
        self.pending = {key: gossip for key, gossip in self.pending.items() if key[1] != peer_id}


class Gossip:
    """The outboxes of the ready links, and their senders."""

    def __init__(self, registry: LinkRegistry) -> None:
        self.outboxes: dict[int, Outbox] = {}
        #: where senders run, set by the network as it starts (no outbox opens before)
        self.nursery: trio.Nursery | None = None
        self._sources: list[Callable[[], Iterable[GossipRecord]]] = []
        registry.subscribe(self._on_change)

    def __repr__(self) -> str:
        return f"<Gossip outboxes={len(self.outboxes)}>"

    def add_source(self, source: Callable[[], Iterable[GossipRecord]]) -> None:
        """``source()`` gives what a newly ready link is to be sent (after the earlier sources')."""
        self._sources.append(source)

    def _on_change(self, change: LinkChange) -> None:
        if change.link is None:
            return
        if change.kind == "ready":
            self._open(change.link)
        elif change.kind == "removed":
            outbox = self.outboxes.pop(id(change.link), None)
            if outbox is not None:
                outbox.scope.cancel()

    def _open(self, link: PeerLink) -> None:
        if self.nursery is None or id(link) in self.outboxes:
            return
        outbox = self.outboxes[id(link)] = Outbox()
        for source in self._sources:
            for gossip in source():
                outbox.put(gossip)
        self.nursery.start_soon(self._send, link, outbox)

    def broadcast(self, gossip: GossipRecord) -> None:
        """Put ``gossip`` in every link's outbox."""
        for outbox in self.outboxes.values():
            outbox.put(gossip)

    def relay(self, gossip: GossipRecord, came_on: PeerLink) -> None:
        """Put ``gossip`` in every outbox but that of the link it came on."""
        for link_id, outbox in self.outboxes.items():
            if link_id != id(came_on):
                outbox.put(gossip)

    def discard(self, peer_id: str) -> None:
        """Forget whatever waits about daemon ``peer_id``, in every outbox (it was revoked)."""
        for outbox in self.outboxes.values():
            outbox.discard(peer_id)

    async def _send(self, link: PeerLink, outbox: Outbox) -> None:
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
                pass  # the link is ending; the link runner cleans up
