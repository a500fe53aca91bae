"""Revocation: a peer revoked in the palace is dropped the moment the revocation is observed.

Owns: the member directory's ``on_revoke`` callback (called from the writer thread mid-batch, or
from trio) and the hop into trio that follows it; then what a revocation drops here: the peer's
link (ended through the registry, its record marked revoked), the presence record, report and address record we
hold of it (no longer dialled at those addresses), and whatever gossip about it waits on the links. Refusing a revoked peer's new
connections is the link runner's (it asks the directory), and dial loops stop on that refusal.

Imports the registry, gossip, presence, reports and addresses (and nothing imports it but the network).
"""

from __future__ import annotations

import trio

from palace_proto.pki import Revocation

from ..members import MemberDirectory
from .addresses import AddressBook
from .gossip import Gossip
from .presence import Presences
from .registry import LinkRegistry
from .reports import Reports

__all__ = ["Revocations"]


class Revocations:
    """Drops revoked peers, once ``watch`` installed it on the member directory."""

    def __init__(self, *, directory: MemberDirectory, registry: LinkRegistry, gossip: Gossip, presence: Presences,
                 reports: Reports, addresses: AddressBook) -> None:
        self.directory = directory
        self.registry = registry
        self.gossip = gossip
        self.presence = presence
        self.reports = reports
        self.addresses = addresses
        self._token: trio.lowlevel.TrioToken | None = None

    def __repr__(self) -> str:
        return f"<Revocations watching={self._token is not None}>"

    def watch(self) -> None:
        """From now on, each revocation the directory observes drops its peer (call from trio)."""
        self._token = trio.lowlevel.current_trio_token()
        self.directory.on_revoke = self._on_revoke_threadsafe

    def _on_revoke_threadsafe(self, revocation: Revocation) -> None:
        # Called from the writer thread (mid-batch) or the trio thread: hop into trio either way.
        if self._token is not None:
            self._token.run_sync_soon(self.drop, revocation.peer_id)

    def drop(self, peer_id: str) -> None:
        """Drop ``peer_id``: its link, what we heard from it, and gossip about it waiting to go."""
        self.registry.revoke(peer_id)
        self.presence.forget(peer_id)
        self.reports.forget(peer_id)
        self.addresses.forget(peer_id)
        self.gossip.discard(peer_id)
