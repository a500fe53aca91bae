"""This machine's network interfaces: which IPv4 addresses peers can reach it on.

Owns: listing usable interface addresses, for mDNS (which needs multicast) and for invite codes
and ``doctor`` (which need an interface that is up, preferably not link-local). Imports only
ifaddr (not zeroconf), so callers that never browse mDNS stay light.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import sys
from typing import Final

import ifaddr

__all__ = ["interface_ipv4_addresses", "local_ipv4_addresses"]

# Linux ioctl to read an interface's flags, and the flags we look at (<linux/if.h>).
SIOCGIFFLAGS: Final = 0x8913
IFF_UP: Final = 0x1
IFF_MULTICAST: Final = 0x1000


def interface_ipv4_addresses(*, multicast: bool) -> list[str]:
    """This machine's non-loopback IPv4 addresses on interfaces that are up (and, with
    ``multicast``, able to multicast): routable ones first, link-local (169.254/16) last: peers
    should be offered the address most likely to reach us (invite codes, doctor)."""
    found: set[str] = set()
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            # ifaddr's IPv4 address is a str (is_IPv4 is that test), an IPv6 one a tuple
            if (isinstance(ip.ip, str) and not ipaddress.ip_address(ip.ip).is_loopback
                    and _interface_usable(adapter.name, multicast=multicast)):
                found.add(ip.ip)
    return sorted(found, key=lambda a: (ipaddress.ip_address(a).is_link_local, ipaddress.ip_address(a)))


def local_ipv4_addresses() -> list[str]:
    """The addresses mDNS advertises on; ``["127.0.0.1"]`` if there are none (a network namespace
    with only ``lo`` still discovers its own daemons)."""
    return interface_ipv4_addresses(multicast=True) or ["127.0.0.1"]


def _interface_usable(interface: str, *, multicast: bool) -> bool:
    """False if the interface is known to be down (or, with ``multicast``, unable to multicast);
    True if we cannot tell."""
    if sys.platform != "linux":
        return True
    import fcntl  # Unix only; imported here so the module still imports everywhere

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            request = struct.pack("16sH22x", interface.encode()[:15], 0)
            flags = struct.unpack_from("16sH", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
    except OSError:
        return True
    return bool(flags & IFF_UP and (flags & IFF_MULTICAST or not multicast))
