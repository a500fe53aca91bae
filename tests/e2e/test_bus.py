"""The event bus under a real daemon: what a member's large events cost a replica's memory."""

from __future__ import annotations

import os

import pytest

from tests.fleet import event_count, wait_converged, wait_until
from tests.helpers import RawClient

#: events of the largest body the default limits allow (``max_body_bytes``), as in issue 43
BIG_BODY = 256 * 1024
EVENTS = 1200
#: per append_many request (10 MiB: well under the API's frame bound)
PER_REQUEST = 40


def resident_bytes(pid: int) -> int:
    """VmRSS of process ``pid`` (Linux /proc)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmRSS from Linux's /proc")
def test_a_replica_receiving_large_events_keeps_its_memory_bounded(fleet):
    """Guards issue 43 (the bus held its last 10,000-20,000 events whatever their size: 4,000 events
    of 256 KiB from a member took the replica from 53 MB to 1.09 GB): a replica that receives
    1,200 such events (300 MiB of bodies) grows by the ring's 64 MiB bound and its working memory
    (measured: 70-90 MiB; 323 MiB before the bound), and holds every event."""
    alpha = fleet.found("alpha")
    beta = fleet.join("beta")
    wait_converged(alpha, beta)
    assert beta.proc is not None
    before = resident_bytes(beta.proc.pid)
    with RawClient(alpha.socket_path) as client:
        client.hello()
        for start in range(0, EVENTS, PER_REQUEST):
            client.call("append_many", events=[
                {"type": "note", "stream": "s", "room": "r", "from_agent": "bulk",
                 "body": f"{i:06d}" + "x" * (BIG_BODY - 6)} for i in range(start, start + PER_REQUEST)])
    target = event_count(alpha.home)
    wait_until(lambda: event_count(beta.home) >= target, "beta to receive every large event", timeout=60)
    grown = resident_bytes(beta.proc.pid) - before
    assert grown < 160 * 2**20, f"beta grew by {grown / 2**20:.0f} MiB receiving {EVENTS} events of 256 KiB"
