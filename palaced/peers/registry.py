"""The link registry: what this daemon knows of each peer, its one live link, and the change hook.

Owns: one ``PeerRecord`` per peer met, dialled or seen (state, name, role, last contact and error,
how it was reached); the rule of **one link per peer pair** (when both sides dial at once, the
connection dialled by the smaller peer id wins, on both sides alike); each live link's cancel
scope (a replaced or revoked link is ended through it); what ended links sent; and telling every
link which daemons we hear first-hand (``Neighbours``) whenever that set changes.

The change hook: other parts of the package *subscribe* to what happens to links (``subscribe``,
with a ``LinkChange`` of kind added, ready, progress, removed or changed) instead of the registry
calling them. Subscribers are called synchronously, in the order they subscribed, and must not
block: gossip starts and stops handing a link gossip, receipts note what a peer confirmed, reports
wake to tell the fleet. Dialling, admission and revocation change records through the registry and
never call those parts themselves — which keeps the package free of import cycles (the reports
read the views, the views read the dial targets: were the dialler to wake the reports directly,
the imports would run in a circle).

Must not import other modules of ``palaced.peers`` but ``clock`` (they all import this one);
``PeerLink`` is named for types only.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Literal

import trio

from ..clock import utc_now_seconds

if TYPE_CHECKING:
    from .link import PeerLink

__all__ = ["ChangeKind", "LinkChange", "LinkRegistry", "PeerRecord"]

LOGGER: Final = logging.getLogger("palaced.peers.registry")

ChangeKind = Literal["added", "ready", "progress", "removed", "changed"]


@dataclasses.dataclass(slots=True)
class PeerRecord:
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


@dataclasses.dataclass(frozen=True, slots=True)
class LinkChange:
    """What happened to a link or to a peer's record, as the registry's subscribers hear it."""

    #: "added": ``link`` became the peer's link; "ready": its hellos and bindings are in (it may be
    #: sent gossip); "progress": the peer confirmed holding more (``link.machine.confirmed``); "removed":
    #: ``link`` ended; "changed": the peer's record changed state (dialling, a dial error, revoked)
    kind: ChangeKind
    peer_id: str | None
    link: PeerLink | None = None
    #: for "removed": the link was still its peer's link (False: it had been replaced already)
    current: bool = False
    #: for "removed": it ended on a failure (silence, a lost connection, an error), not closed by
    #: either side on purpose
    failed: bool = False


class LinkRegistry:
    """The peers this daemon knows of, their live links (one per peer), and who hears of changes."""

    def __init__(self, peer_id: str) -> None:
        #: this daemon's own peer id (the one-link rule compares it with the peer's)
        self.peer_id = peer_id
        self.records: dict[str, PeerRecord] = {}
        self._scopes: dict[int, trio.CancelScope] = {}
        self._subscribers: list[Callable[[LinkChange], None]] = []
        #: what links that have ended sent (events, bytes); the views add the live ones
        self.ended_sent = (0, 0)
        #: which linked daemons count as heard first-hand (the overlay's active view; a passing
        #: link is none): set by overlay.py, every link counts until it is
        self.first_hand: Callable[[str], bool] = lambda peer_id: True

    def __repr__(self) -> str:
        return f"<LinkRegistry {self.peer_id[:7]} links={len(self.links())} records={len(self.records)}>"

    # -- the change hook -----------------------------------------------------------------------

    def subscribe(self, subscriber: Callable[[LinkChange], None]) -> None:
        """Call ``subscriber`` with every ``LinkChange`` from now on (synchronously; it must not block)."""
        self._subscribers.append(subscriber)

    def _tell(self, change: LinkChange) -> None:
        for subscriber in self._subscribers:
            subscriber(change)

    # -- records -------------------------------------------------------------------------------

    def record(self, peer_id: str) -> PeerRecord:
        """The peer's record, made if it has none yet."""
        record = self.records.get(peer_id)
        if record is None:
            record = self.records[peer_id] = PeerRecord(peer_id)
        return record

    def forget(self, peer_id: str) -> None:
        """Drop the peer's record (the dialler's, for a peer id only mDNS named)."""
        self.records.pop(peer_id, None)

    def link_of(self, peer_id: str) -> PeerLink | None:
        record = self.records.get(peer_id)
        return record.link if record is not None else None

    def links(self) -> list[PeerLink]:
        """Every live link."""
        return [r.link for r in self.records.values() if r.link is not None]

    def changed(self, peer_id: str | None) -> None:
        """The peer's record changed state (dialling, a dial error): tell the subscribers."""
        self._tell(LinkChange("changed", peer_id))

    # -- links ---------------------------------------------------------------------------------

    def register(self, link: PeerLink, peer_id: str) -> bool:
        """Keep one link per peer: True if ``link`` becomes the peer's link (it is then connected,
        and the subscribers hear "added")."""
        record = self.record(peer_id)
        existing = record.link
        if existing is not None:
            preferred = min(self.peer_id, peer_id)
            if existing.dialer != link.dialer and link.dialer != preferred:
                return False
            # Same direction again (the old one is probably half-dead), or the preferred
            # direction arrived second: the new link replaces the old.
            self.cancel(existing)
        record.link = link
        record.direction = "out" if link.dialer == self.peer_id else "in"
        record.state, record.connected_since, record.last_contact = "connected", utc_now_seconds(), utc_now_seconds()
        self._tell(LinkChange("added", peer_id, link))
        return True

    def open_scope(self, link: PeerLink) -> trio.CancelScope:
        """The scope ``link`` runs in: cancelled when another link replaces it or its peer is revoked."""
        scope = self._scopes[id(link)] = trio.CancelScope()
        return scope

    def cancel(self, link: PeerLink) -> None:
        scope = self._scopes.get(id(link))
        if scope is not None:
            scope.cancel()

    def ready(self, link: PeerLink) -> None:
        """Hellos and bindings are in on ``link`` (``LinkHooks.link_ready``)."""
        self._tell(LinkChange("ready", link.peer_id, link))
        self.tell_neighbours()

    def progress(self, link: PeerLink) -> None:
        """The peer confirmed holding more (``LinkHooks.link_progress``)."""
        if link.peer_id is None:
            return
        self._tell(LinkChange("progress", link.peer_id, link))

    def release(self, link: PeerLink, peer_id: str, state: str, *, failed: bool = False) -> bool:
        """``link`` ended, however it ended: forget its scope, count what it sent and, if it was
        still the peer's link, leave the record in ``state``. The subscribers hear "removed";
        returns whether it was the peer's link."""
        self._scopes.pop(id(link), None)
        stats = link.machine.stats
        self.ended_sent = (self.ended_sent[0] + stats.sent_events, self.ended_sent[1] + stats.bytes_sent)
        record = self.records.get(peer_id)
        current = record is not None and record.link is link
        if record is not None and current:
            record.link = None
            record.direction = None
            record.last_contact = link.last_contact
            record.state = state
        self._tell(LinkChange("removed", peer_id, link, current=current, failed=failed))
        if current:
            self.tell_neighbours()
        return current

    def revoke(self, peer_id: str) -> None:
        """The peer was revoked: its record says so and its link is ended."""
        record = self.records.get(peer_id)
        if record is not None:
            record.state = "revoked"
            if record.link is not None:
                self.cancel(record.link)
                LOGGER.warning("dropped the link with revoked peer %s", peer_id)
        self.changed(peer_id)

    def tell_neighbours(self) -> None:
        """Tell every link which daemons we now hear first-hand (those whose hello came on a link
        of ours, and that ``first_hand`` counts): they stop relaying those daemons' events and
        gossip to us (``Neighbours``; a link sends a set only when it changed)."""
        first_hand = self.first_hand
        neighbours = tuple(sorted(peer_id for peer_id, record in self.records.items()
                                  if record.link is not None and record.link.machine.their_hello is not None
                                  and first_hand(peer_id)))
        for record in self.records.values():
            if record.link is not None and record.link.machine.their_hello is not None:
                record.link.tell_neighbours(neighbours)

    async def close_all(self) -> None:
        """Say goodbye on every live link (at shutdown)."""
        for record in list(self.records.values()):
            if record.link is not None:
                await record.link.close()
