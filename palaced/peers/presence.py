"""Presence: which watchers are connected where, across the palace.

Owns: this daemon's presence record (its watchers, signed with its key, with a serial from its
clock so a restarted daemon's records still win), announced on a heartbeat and soon after a watch
starts or ends; the newest record heard from each other member daemon, kept only if it verifies
with that daemon's certificate and it is not revoked, and relayed to every other link; what
``who`` shows of other daemons' watchers (``remote_watchers``); and how far each directly
connected peer's clock is from ours (``clock_skews``, from the serials of its own records).

Sends through gossip.py; imports nothing else of the package.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from palace_proto.overlay import gossip_period
from palace_proto.peer import (
    MAX_PRESENCE_FILTER_CHARS,
    MAX_WATCHERS_PER_PRESENCE,
    Presence,
    presence_signing_bytes,
)
from palace_proto.text import printable
from palace_proto.workers import decode_activity

from ..clock import unix_now, unix_now_us, utc_now_seconds
from ..limits import LimitLog
from ..members import MemberDirectory
from ..membership import Membership
from .gossip import Gossip, GossipRecord

if TYPE_CHECKING:
    from .link import PeerLink

__all__ = ["PRESENCE_HEARTBEAT_S", "PRESENCE_SILENT_S", "Presences"]

# Why 10 s: presence is re-announced on this heartbeat; a daemon unheard for 3 beats is "silent".
PRESENCE_HEARTBEAT_S: Final = 10.0
PRESENCE_SILENT_S: Final = 3 * PRESENCE_HEARTBEAT_S


class Presences:
    """This daemon's presence record and the newest one heard from each other daemon."""

    def __init__(self, *, peer_id: str, membership: Membership, identity: Ed25519PrivateKey,
                 directory: MemberDirectory, gossip: Gossip, watchers: Callable[[], list[tuple[str, ...]]],
                 limits: LimitLog) -> None:
        self.peer_id = peer_id
        self.membership = membership
        self.identity = identity
        self.directory = directory
        self.gossip = gossip
        self.limits = limits
        self._watchers = watchers
        self._serial = 0
        #: our newest record, as announced (what a new link is sent)
        self._current: Presence | None = None
        #: peer id -> (its newest record, trio.current_time() when heard, the same as UTC)
        self._heard: dict[str, tuple[Presence, float, str]] = {}
        self._due = trio.Event()
        self._skews: dict[str, float] = {}
        gossip.add_source(self._for_new_link)

    def __repr__(self) -> str:
        return f"<Presences {self.peer_id[:7]} heard={len(self._heard)} serial={self._serial}>"

    def watchers_changed(self) -> None:
        """A watch started or ended here: announce soon."""
        self._due.set()

    def own(self) -> Presence:
        """A new presence record of this daemon, signed."""
        self._serial = max(self._serial + 1, unix_now_us())
        local = self._watchers()
        if len(local) > MAX_WATCHERS_PER_PRESENCE:
            self.limits.hit("presence_watchers", "announcing the first %d of %d watchers to peers (the limit of one "
                            "presence record)", MAX_WATCHERS_PER_PRESENCE, len(local))
        watchers = tuple((agent[:256], filters[:MAX_PRESENCE_FILTER_CHARS], since[:64], *rest)
                         for agent, filters, since, *rest in local[:MAX_WATCHERS_PER_PRESENCE])
        signature = self.identity.sign(presence_signing_bytes(self.peer_id, self.membership.name,
                                                              self._serial, watchers))
        return Presence(self.peer_id, self.membership.name, self._serial, watchers, signature)

    def _for_new_link(self) -> list[GossipRecord]:
        """A new link is sent our presence first (the one announced last: a new record per link
        would go round the whole palace each time a link comes up), then every other daemon's we hold."""
        if self._current is None:
            self._current = self.own()
        return [self._current, *(presence for presence, _, _ in self._heard.values())]

    def receive(self, link: PeerLink, presence: Presence) -> None:
        """``link`` brought ``presence`` (``LinkHooks.link_presence``): keep and relay it if it is
        newer than ours of that daemon, and verifies."""
        if presence.peer_id == self.peer_id:
            return
        known = self._heard.get(presence.peer_id)
        if known is not None and known[0].serial >= presence.serial:
            if known[0].serial == presence.serial:  # the same record again: the tree prunes its sender
                self.gossip.duplicate(presence, link)
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
        self._heard[presence.peer_id] = (presence, trio.current_time(), utc_now_seconds())
        if presence.peer_id == link.peer_id:
            # Direct from its daemon: the serial is that daemon's clock (µs), good to a few ms.
            self._skews[presence.peer_id] = presence.serial / 1e6 - unix_now()
        # Relayed to every other link: each keeps the newest per daemon for its one sender.
        self.gossip.relay(presence, link)

    def forget(self, peer_id: str) -> None:
        """Drop what we heard from ``peer_id`` (it was revoked)."""
        self._heard.pop(peer_id, None)

    def _members(self) -> int:
        return len(self.directory.certificates())

    async def serve(self) -> None:
        """Announce our presence every ``PRESENCE_HEARTBEAT_S`` (longer in a palace of more than
        ten: ``gossip_period``) and soon after watchers change."""
        while True:
            with trio.move_on_after(gossip_period(PRESENCE_HEARTBEAT_S, self._members())):
                await self._due.wait()
            self._due = trio.Event()
            self._current = self.own()
            self.gossip.broadcast(self._current)
            await trio.sleep(0.05)  # coalesce bursts of watcher changes

    def remote_watchers(self) -> list[dict[str, Any]]:
        now, silent_after = trio.current_time(), gossip_period(PRESENCE_SILENT_S, self._members())
        out = []
        for presence, heard, heard_utc in self._heard.values():
            silent = now - heard > silent_after
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
