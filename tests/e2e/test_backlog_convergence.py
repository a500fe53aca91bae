"""Daemons far behind each other converge, whatever the backlog in both directions, and a mesh
sends each event once per peer (issue 30).

Regression: two daemons that each held a few hundred events the other lacked never converged
(K = 300 … 2,000 on loopback: counts frozen at K+1 on each side, both daemons idle, both socket
queues full, `status` saying all was well). Each link's reader served the peer's wants itself;
once both sides were sending, neither read again. Here every daemon writes K = 2,000 events
while cut off from the others (a laptop offline for an afternoon, a network split), then they are
linked into a full mesh while a writer keeps appending on every one of them: all of them end with
identical digests, and no link ends on a stall. Real daemons, real mutual TLS on loopback.
K = 2,000 is the top of the range that froze, and both cases fail on the links before the fix
(3356130^: no convergence in 90 s); at 10,000 (what `palacectl bench mesh` heals) they were the
suite's slowest tests.

(The time this takes is a benchmark figure, not asserted here: `palacectl bench replication`.)
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from tests.fleet import api, append, ctl_json, event_count, listen_address, wait_converged, wait_until
from tests.helpers import Daemon, RawClient

pytestmark = [pytest.mark.slow, pytest.mark.transport_fixed]

BACKLOG = 2_000
#: events per append_many request (the API's bound is 1,000)
BULK = 1_000


def write_backlog(daemon: Daemon, count: int) -> None:
    """``count`` events of 200-byte bodies, in bulk requests (what a daemon wrote while cut off)."""
    name = daemon.home.name
    for start in range(0, count, BULK):
        api(daemon.home, "append_many", events=[
            {"type": "note", "stream": "s", "room": "backlog", "from_agent": f"writer-{name}",
             "body": f"{name} {i} " + "b" * 200} for i in range(start, min(count, start + BULK))])


class Writers:
    """One thread per daemon appending an event every few milliseconds until stopped."""

    def __init__(self, daemons: list[Daemon]) -> None:
        self.stop = threading.Event()
        self.written = [0] * len(daemons)
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._write, args=(i, d), daemon=True) for i, d in enumerate(daemons)]

    def _write(self, index: int, daemon: Daemon) -> None:
        try:
            with RawClient(daemon.socket_path) as client:  # one connection, as an agent's client keeps
                client.hello()
                while not self.stop.is_set():
                    client.call("append", type="note", stream="s", room="live",
                                from_agent=f"live-{daemon.home.name}", body=f"live {index} {self.written[index]}")
                    self.written[index] += 1
                    time.sleep(0.005)
        except Exception as exc:  # reported by the test, not lost in a thread
            self.errors.append(f"{daemon.home.name}: {type(exc).__name__}: {exc}")

    def __enter__(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)


def members(fleet, count: int) -> list[Daemon]:
    """``count`` daemons of one palace that have never linked (enrolled the way ``join`` would),
    with memory embedding off (these tests are about the log)."""
    daemons = [fleet.found("d0")]
    for i in range(1, count):
        daemon = fleet.enrol_offline(f"d{i}")
        (daemon.home / "config.toml").write_text("[memory]\nembed = false\n")
        daemons.append(daemon.start())
    return daemons


@pytest.mark.parametrize("count", [2, 5])
def test_daemons_each_2000_events_behind_the_others_converge_with_writers_running(fleet, count):
    daemons = members(fleet, count)
    for daemon in daemons:
        write_backlog(daemon, BACKLOG)
    before = sum(event_count(d.home) for d in daemons)
    with Writers(daemons) as writers:
        for left, right in itertools.combinations(daemons, 2):  # a full mesh, all at once
            ctl_json(left.home, "peers", "add", listen_address(right.home))
        time.sleep(3)  # the writers go on while the backlogs cross
    assert not writers.errors, writers.errors
    final = wait_converged(*daemons, timeout=300)
    total = event_count(daemons[0].home)
    # Everything every daemon wrote is everywhere (the registration events of each daemon's agents
    # are written once per daemon and counted in `before`).
    assert total >= before + sum(writers.written), (total, before, writers.written)
    assert all(event_count(d.home) == total for d in daemons)
    for daemon in daemons:
        status = ctl_json(daemon.home, "status")
        assert not status["network"]["stalled_links"], status["network"]
        assert status["network"]["link_failures"] == 0
        assert "stopped reading" not in daemon.log() and "sent nothing for" not in daemon.log(), daemon.log()[-3000:]
        assert set(status["network"]["connected"]) == {ctl_json(d.home, "status")["fingerprint"]
                                                       for d in daemons if d is not daemon}
    assert final["digest"]


def link_totals(daemons: list[Daemon]) -> int:
    """Events every link of every daemon has sent since it started (links that ended included)."""
    return sum(ctl_json(d.home, "status")["network"]["sent"]["events_sent"] for d in daemons)


def test_a_full_mesh_sends_each_event_once_per_peer_and_nobody_relays(fleet):
    """Relaying (issue 30): a 20-daemon mesh sent each event 206-220 times (19 needed) and idle
    gossip grew to 71 MB/min, because every daemon relayed every event and gossip record to peers
    that already had it. With Neighbours, daemons that hear the writer first-hand are relayed
    nothing: in a mesh of four, an event crosses exactly three links."""
    daemons = members(fleet, 4)
    for left, right in itertools.combinations(daemons, 2):
        ctl_json(left.home, "peers", "add", listen_address(right.home))
    ids = {d.home.name: ctl_json(d.home, "status")["fingerprint"] for d in daemons}

    def neighbours_known() -> bool:  # every link has heard whom its peer is linked to
        for daemon in daemons:
            peers = [p for p in ctl_json(daemon.home, "peers")["peers"] if p["state"] == "live"]
            if len(peers) != 3 or any(len(p["neighbours"]) != 2 for p in peers):
                return False
        return True

    append(daemons[0].home, "first (registers the writer's agent)", from_agent="mesh-writer")
    wait_converged(*daemons)
    wait_until(neighbours_known, "every peer's neighbours")
    before_events, before = event_count(daemons[0].home), link_totals(daemons)
    for i in range(10):
        append(daemons[0].home, f"mesh {i}", from_agent="mesh-writer")
    wait_converged(*daemons)
    # Then a marker from each of the others, until everyone holds them. A link sends what its
    # daemon committed in commit order, so by the time d1's marker is on d2, a relay of the mesh
    # events from d1 to d2, were there one, has gone out and been counted.
    for daemon in daemons[1:]:
        append(daemon.home, f"marker from {daemon.home.name}")
    wait_converged(*daemons)
    appended = event_count(daemons[0].home) - before_events
    assert link_totals(daemons) - before == 3 * appended
    peers_of_first = {p["peer_id"]: p for p in ctl_json(daemons[0].home, "peers")["peers"]}
    assert sorted(peers_of_first[ids["d1"]]["neighbours"]) == sorted([ids["d2"], ids["d3"]])
