"""Network namespaces for tests that run real mDNS (never in the root namespace).

Creating namespaces needs root (CI runs as root) and iproute2/util-linux; without them the tests
that need namespaces skip with the reason. ``netns_pair`` builds two namespaces joined by a veth
pair that never appears in the root namespace, and deletes them (and so the veth) afterwards.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest


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
        for command in setup:
            done = subprocess.run(command, check=False, capture_output=True, text=True)
            if done.returncode != 0:
                pytest.skip(f"cannot build test network namespaces here: {' '.join(command)}: {done.stderr.strip()}")
        yield one, two
    finally:
        for name in (one, two):
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
