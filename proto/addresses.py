"""Where a daemon can be reached: what its own address record says, and which of another's to dial.

Owns: the rules of the address records daemons gossip about themselves (``peer.Addresses``,
proto/PROTOCOL.md §5.5): which addresses a daemon offers (``offered``: its listen addresses, a
wildcard listen address expanded to the machine's interface addresses, and the hosts its peers
saw it come from, with its listen port), which addresses of another daemon's record are worth a
dial (``dialable``: well formed, not a wildcard or port 0, not one of our own, at most
``MAX_DIALED_PER_DAEMON``), which hosts its peers saw it come from are offered (``observed``:
those most peers agree on), and when a record is too old to dial at all (``is_stale``).

Why a record is signed by the daemon it is about, and relayed newest-wins like a report: a
palace joined through one invite (no mDNS: a VPN, a tailnet, Wi-Fi that drops multicast, WSL's
NAT) would otherwise be a star around its inviter, and stop when the inviter sleeps. With every
daemon's own signed record, each dials the others directly; a member can send the others to
wrong places only for itself (a dial there meets another certificate, or nothing), never say
where another daemon is.

Pure: stdlib and ``peer``'s address syntax only; the clock and the interfaces are the caller's.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Final

from .peer import MAX_ADDRESSES, format_peer_address, parse_peer_address

__all__ = [
    "ADDRESS_HEARTBEAT_S",
    "ADDRESS_TTL_S",
    "MAX_DIALED_PER_DAEMON",
    "MAX_OBSERVED",
    "dialable",
    "is_stale",
    "observed",
    "offered",
]

# Why 10 minutes: addresses change rarely (a laptop moving between networks); a new record goes
# out at once when they do, and the heartbeat keeps a record from ageing out while its daemon runs.
ADDRESS_HEARTBEAT_S: Final = 600.0
# Why an hour: six heartbeats missed is a daemon gone (or cut off): its addresses are not dialled
# on any longer (a remembered address that worked still is: the dialler keeps those).
ADDRESS_TTL_S: Final = 3600.0
# Why 4: a daemon's record offers at most 8; the first few (its listen addresses first) are the
# ones that work, and each dialled address is a dial loop on every daemon of the palace.
MAX_DIALED_PER_DAEMON: Final = 4
# Why 2: the hosts peers saw us come from (a NAT's outside address, a VPN's) are offered after our
# own listen addresses, the newest two.
MAX_OBSERVED: Final = 2


def _is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::")


def offered(listen: Iterable[str], interfaces: Iterable[str], observed: Iterable[str] = ()) -> tuple[str, ...]:
    """This daemon's own record: each listen address (``HOST:PORT``), a wildcard one replaced by
    ``interfaces`` (the machine's addresses) on its port, then the ``observed`` hosts (as peers
    saw them) on the first listen port; duplicates once, at most ``MAX_ADDRESSES``."""
    out: dict[str, None] = {}
    ports: list[int] = []
    for address in listen:
        host, port = parse_peer_address(address)
        ports.append(port)
        hosts = list(interfaces) if _is_wildcard(host) else [host]
        for one in hosts:
            out.setdefault(format_peer_address(one, port))
    if ports:
        for host in list(observed)[:MAX_OBSERVED]:
            out.setdefault(format_peer_address(host, ports[0]))
    return tuple(out)[:MAX_ADDRESSES]


def observed(seen_by: Mapping[str, str]) -> list[str]:
    """The hosts a daemon's record offers as where its peers saw it come from: of each peer's
    newest ``Seen`` (peer id -> host), the IP addresses (no wildcard, no multicast) most peers
    agree on, then by address, at most ``MAX_OBSERVED`` (one peer, however hostile, is one vote)."""
    votes: dict[str, int] = {}
    for host in seen_by.values():
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            continue
        if not (ip.is_unspecified or ip.is_multicast):
            votes[str(ip)] = votes.get(str(ip), 0) + 1
    return sorted(votes, key=lambda host: (-votes[host], host))[:MAX_OBSERVED]


def dialable(addresses: Iterable[str], own: Iterable[str]) -> list[str]:
    """The addresses of another daemon's record worth a dial, in its order: each parses as
    ``HOST:PORT`` with an IP address for a host (a name would be resolved by whoever dials: a
    member must not make every daemon ask a resolver), not a wildcard, not port 0, not one of
    ``own`` (ours: dialling ourselves); once each, at most ``MAX_DIALED_PER_DAEMON``."""
    ours = {_normal(a) for a in own}
    out: list[str] = []
    for address in addresses:
        normal = _normal(address)
        if normal is None or normal in ours or normal in out:
            continue
        out.append(normal)
        if len(out) == MAX_DIALED_PER_DAEMON:
            break
    return out


def _normal(address: str) -> str | None:
    """``address`` in the form the dialler keys its targets by, or None when it is no IP address to dial."""
    try:
        host, port = parse_peer_address(address)
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if ip.is_unspecified or ip.is_multicast or port == 0:
        return None
    return format_peer_address(str(ip), port)


def is_stale(serial_us: int, now_us: int) -> bool:
    """Whether a record signed at ``serial_us`` (its daemon's clock, µs) is too old to dial on."""
    return now_us - serial_us > ADDRESS_TTL_S * 1_000_000
