"""Views: the peer network as ``status``, ``peers``, ``doctor``, ``who``, the dashboard and this
daemon's own report read it.

Owns: read-only assembly, nothing kept. ``peers_view`` is one row per peer known here (by
record or by member certificate) and per dial target whose peer is not known yet: state, how it
was found, addresses, lag both ways from the version vectors, the link's counters and why it
stalls; ``targets_view`` the dial targets; ``peer_names``, ``stalled_links``, ``link_totals``
and ``connected_peers`` the small reads ``status`` and the handlers need.

Reads the registry, the dialler's targets and the receipts; changes none of them, and imports
none of gossip, presence or reports (reports import this).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from palace_proto.link import LinkStatistics
from palace_proto.text import printable

from ..members import MemberDirectory
from .dialing import Dialer
from .link import PeerLink
from .receipts import Receipts
from .registry import LinkRegistry, PeerRecord

__all__ = ["PeerViews"]


def _counters(link: PeerLink | None) -> dict[str, int]:
    """A link's counters as ``peers`` shows them (sent_events ... bytes_received); zeros without one."""
    return dataclasses.asdict(link.machine.stats if link is not None else LinkStatistics())


class PeerViews:
    """What the peer network shows: built afresh on each call."""

    def __init__(self, *, peer_id: str, directory: MemberDirectory, registry: LinkRegistry, dialer: Dialer,
                 receipts: Receipts) -> None:
        self.peer_id = peer_id
        self.directory = directory
        self.registry = registry
        self.dialer = dialer
        self.receipts = receipts

    def __repr__(self) -> str:
        return f"<PeerViews {self.peer_id[:7]}>"

    def peer_names(self) -> dict[str, str]:
        """Every member daemon known here (by certificate, or met on a link): peer id -> its name."""
        names = {cert.peer_id: printable(cert.name, 64) for cert in self.directory.certificates()}
        names.update((peer_id, printable(record.name, 64))
                     for peer_id, record in self.registry.records.items() if record.name)
        return names

    def stalled_links(self) -> list[dict[str, str]]:
        """Links that make no progress now: ``{peer_id, name, reason}`` each (``status`` health)."""
        out = []
        for peer_id, record in sorted(self.registry.records.items()):
            reason = record.link.stall() if record.link is not None else None
            if reason is not None:
                out.append({"peer_id": peer_id, "name": printable(record.name, 64), "reason": reason})
        return out

    def link_totals(self) -> dict[str, int]:
        """What every link of this daemon has sent since it started: ``{events_sent, bytes_sent}``."""
        live = self.registry.links()
        ended = self.registry.ended_sent
        return {"events_sent": ended[0] + sum(link.machine.stats.sent_events for link in live),
                "bytes_sent": ended[1] + sum(link.machine.stats.bytes_sent for link in live)}

    def connected_peers(self) -> list[str]:
        return sorted(p for p, r in self.registry.records.items() if r.link is not None)

    def peers_view(self, heads: dict[str, int]) -> list[dict[str, Any]]:
        peers = {}
        records = self.registry.records
        confirmed = self.receipts.confirmed
        known_certs = {cert.peer_id: cert for cert in self.directory.certificates()}
        for peer_id in sorted(set(records) | set(known_certs)):
            if peer_id == self.peer_id:
                continue
            record = records.get(peer_id) or PeerRecord(peer_id)
            cert = known_certs.get(peer_id)
            link = record.link
            theirs = dict(confirmed.get(peer_id, {}))
            if link is not None:
                for origin, seq in link.machine.confirmed.items():
                    theirs[origin] = max(theirs.get(origin, 0), seq)
            origins = sorted(set(heads) | set(theirs))
            vector: list[dict[str, Any]] = [{"origin": o, "ours": heads.get(o, 0), "theirs": theirs.get(o, 0)}
                                            for o in origins]
            known = link is not None or peer_id in confirmed
            # None: we have never heard what that peer holds (e.g. known only through a relay).
            we_lack = sum(max(0, v["theirs"] - v["ours"]) for v in vector) if known else None
            they_lack = sum(max(0, v["ours"] - v["theirs"]) for v in vector) if known else None
            revoked = self.directory.is_revoked(peer_id)
            if revoked:
                state = "revoked"
            elif link is None:
                state = record.state if record.state in ("connecting", "error", "disconnected") else "discovered"
            elif link.machine.their_hello is None or link.machine.their_vector is None:
                state = "connecting"
            elif we_lack or they_lack or link.machine.fetching:
                state = "catching up"
            else:
                state = "live"
            targets = [t for t in self.dialer.targets.values() if t.peer_id == peer_id]
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
                "forks": list(link.machine.forks) if link else [],
                **_counters(link),
                # The daemons that peer is linked to itself (its Neighbours): we relay it nothing of theirs
                "neighbours": sorted(link.machine.peer_neighbours) if link else [],
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
                      for t in self.dialer.targets.values() if t.peer_id is None]
        return list(peers.values()) + unresolved

    def targets_view(self) -> list[dict[str, Any]]:
        return [{"address": t.address, "sources": sorted(t.sources), "peer_id": t.peer_id, "state": t.state,
                 "last_error": t.last_error, "last_error_at": t.last_error_at} for t in self.dialer.targets.values()]
