"""Network namespaces for tests that run real networks (mDNS, other subnets), never in the root namespace.

Creating namespaces needs root (CI runs as root) and iproute2/util-linux; without them the tests
that need namespaces skip with the reason. ``netns_pair`` builds two namespaces joined by a veth
pair that never appears in the root namespace; ``routed_subnets`` builds machines on separate
subnets behind one router, which forwards unicast and, like any router without a multicast
routing daemon, no multicast. Both delete their namespaces (and so the veths) afterwards, even
when building them failed halfway.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest

from palace_bench.mesh_scale import routed_commands


def why_no_namespaces() -> str | None:
    if os.geteuid() != 0:
        return "real mDNS runs only in network namespaces this test creates, which needs root (CI runs as root)"
    missing = [tool for tool in ("unshare", "ip") if shutil.which(tool) is None]
    if missing:
        return f"real mDNS runs only in network namespaces; {' and '.join(missing)} not installed (util-linux, iproute2)"
    return None


WHY_NOT = why_no_namespaces()
needs_namespaces = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


@contextlib.contextmanager
def netns_pair(tag: str, subnet: str) -> Iterator[tuple[str, str]]:
    """Namespaces ``pal<pid><tag>a`` / ``…b`` joined by veth, ``<subnet>.1`` <-> ``<subnet>.2`` (/24)."""
    one, two = f"pal{os.getpid()}{tag}a", f"pal{os.getpid()}{tag}b"
    setup = [
        ["ip", "netns", "add", one], ["ip", "netns", "add", two],
        ["ip", "-n", one, "link", "add", "pal0", "type", "veth", "peer", "name", "pal1", "netns", two],
        ["ip", "-n", one, "addr", "add", f"{subnet}.1/24", "dev", "pal0"],
        ["ip", "-n", two, "addr", "add", f"{subnet}.2/24", "dev", "pal1"],
        ["ip", "-n", one, "link", "set", "lo", "up"], ["ip", "-n", two, "link", "set", "lo", "up"],
        ["ip", "-n", one, "link", "set", "pal0", "up"], ["ip", "-n", two, "link", "set", "pal1", "up"],
    ]
    try:
        _run_setup(setup)
        yield one, two
    finally:
        _delete_namespaces((one, two))


def _run_setup(commands: Sequence[Sequence[str]]) -> None:
    """Run each ``ip`` command in order; the first that fails skips the test, saying which and why."""
    for command in commands:
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot build test network namespaces here: {' '.join(command)}: {done.stderr.strip()}")


def _delete_namespaces(names: Sequence[str]) -> None:
    """Delete the namespaces (those never made are ignored): their veth ends go with them."""
    for name in names:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


@dataclass(frozen=True)
class RoutedSubnets:
    """Machines on subnets of their own, joined only through ``router``.

    ``hosts[i]`` is the namespace of the machine at ``addresses[i]`` (``<base>.<i+1>.2/24``),
    whose default route is ``gateways[i]`` (``<base>.<i+1>.1``, the router's end of its link).
    """

    router: str
    hosts: list[str]
    addresses: list[str]
    gateways: list[str]

    def exec_prefix(self, index: int) -> list[str]:
        """What runs a command on machine ``index``: ``ip netns exec NS``."""
        return ["ip", "netns", "exec", self.hosts[index]]


@contextlib.contextmanager
def routed_subnets(tag: str, count: int, base: str = "10.214") -> Iterator[RoutedSubnets]:
    """``count`` namespaces ``pal<pid><tag><i>``, each alone on ``<base>.<i>.0/24`` (i from 1),
    routed through namespace ``pal<pid><tag>r`` (IPv4 forwarding on, no multicast routing).

    Each machine has one veth, ``pal0`` (``<base>.<i>.2``, default route via ``<base>.<i>.1``);
    the router's end of it is ``r<i>``. No interface appears in the root namespace. Unicast
    crosses the subnets; multicast (mDNS included) stays on its own link, as between the subnets
    of a real network without a multicast router.
    """
    assert 1 <= count <= 250, count
    prefix = f"pal{os.getpid()}{tag}"
    router = f"{prefix}r"
    hosts = [f"{prefix}{i}" for i in range(1, count + 1)]
    addresses = [f"{base}.{i}.2" for i in range(1, count + 1)]
    gateways = [f"{base}.{i}.1" for i in range(1, count + 1)]
    setup = routed_commands(router, hosts, addresses, gateways)  # the benchmark's own network (mesh_scale)
    try:
        _run_setup(setup)
        yield RoutedSubnets(router, hosts, addresses, gateways)
    finally:
        _delete_namespaces([*hosts, router])
