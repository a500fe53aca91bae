"""``palacectl bench mesh``: how a fleet of local daemons heals and what its links carry.

Owns: the figures of issue 30 the README reports. Every daemon is a real ``palaced`` on a
temporary home under one short ``/tmp`` directory, on loopback with mDNS off (the network rule),
joined the way users join (``init`` on the first, ``invite`` there, ``join`` on each other one),
then linked into a **full mesh** with ``peers add`` (each pair once):

* **backlog heal**: N daemons (2 and 5) each write K events (10,000) while the others are stopped
  — an afternoon offline, a network split — then all start together and are meshed while a writer
  keeps appending on every daemon for a few seconds; the figure is the time from starting the
  processes until every daemon reports the same digest, and how many events the links carried
  per event a daemon lacked;
* **fan-out**: in a mesh of N (5 and 9: the largest full mesh) daemons, events appended one at a
  time on one daemon;
  the figure is how many times each event crossed a link (summed ``sent_events`` of every link of
  every daemon; N - 1 is the least that reaches everyone);
* **idle traffic**: the same mesh left alone for a minute; every byte every link sent (frames
  before TLS: vectors, presence, reports), per minute for the whole mesh;
* **address gossip** (issue 45 §1): N daemons (5 and 9) joined only through the first one's
  invite, with no ``peers add``; the figure is the time from the last join until every daemon
  holds a link to every other, learnt from the others' signed address records.

Past nine daemons the partial views choose the links (``peers add`` then gives an address to start
from, not a link to keep): ``bench mesh --daemons N`` (mesh_scale.py) measures that palace.

No benchmark imports palaced: the daemons are ``python -m palaced`` (``daemon``).
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from palacectl.client import Client

from .daemon import CONVERGE_TIMEOUT_S, BenchDaemon, stop_all
from .figures import narrator

__all__ = ["run_mesh_bench"]

#: events per append_many request (the API's bound)
BULK: Final = 1000
# Why 200 bytes: the bodies of the measurement (a task request, a reply).
BODY_BYTES: Final = 200
# Why 20 ms: convergence polls must not load the 2-core machines this runs on.
POLL_S: Final = 0.02
# Why 1 s: a mesh whose links sent nothing for a second has finished joining and catching up.
QUIET_S: Final = 1.0

Say = Callable[[str], None]


class BenchMesh:
    """N daemons of one palace on homes under ``root``; ``close`` stops them all."""

    def __init__(self, root: Path, count: int, name: str = "bench-mesh") -> None:
        self.root = root
        self.name = name
        self.daemons = [BenchDaemon(root, f"d{i:02d}") for i in range(count)]
        self.addresses: list[str] = []

    def __repr__(self) -> str:
        return f"<BenchMesh {len(self.daemons)} daemons under {self.root}>"

    def start(self) -> None:
        """Found the palace on the first daemon; every other one joins it (and so links to it only)."""
        first = self.daemons[0]
        for daemon in self.daemons:
            daemon.home.mkdir(parents=True)
            (daemon.home / "config.toml").write_text("[memory]\nembed = false\n")  # the log is measured, not memory
            daemon.start()
        first.call("init", name=self.name, daemon_name=first.name)
        for daemon in self.daemons[1:]:
            code = first.call("invite", role="member", ttl_s=3600, address=self._listen(first))["code"]
            daemon.call("join", code=code, name=daemon.name)
        self.addresses = [self._listen(d) for d in self.daemons]

    @staticmethod
    def _listen(daemon: BenchDaemon) -> str:
        return str(daemon.call("status")["network"]["listen"][0])

    def link_all(self) -> None:
        """A full mesh: each pair is given the other's address once (the smaller dials)."""
        for i, j in itertools.combinations(range(len(self.daemons)), 2):
            self.daemons[i].call("peers_add", address=self.addresses[j])

    def wait_linked(self) -> None:
        want = len(self.daemons) - 1
        deadline = time.monotonic() + CONVERGE_TIMEOUT_S
        while not all(len(d.call("status")["network"]["connected"]) == want for d in self.daemons):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the mesh did not link within {CONVERGE_TIMEOUT_S:.0f} s")
            time.sleep(0.2)

    def wait_converged(self, clients: list[Client]) -> float:
        """Poll every digest until they are equal; returns the ``perf_counter`` when they were."""
        deadline = time.monotonic() + CONVERGE_TIMEOUT_S
        while True:
            digests = {c.call("digest")["digest"] for c in clients}
            if len(digests) == 1:
                return time.perf_counter()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the daemons did not converge within {CONVERGE_TIMEOUT_S:.0f} s")
            time.sleep(POLL_S)

    def link_totals(self) -> tuple[int, int]:
        """(events, bytes) every link of every daemon has sent since the daemons started."""
        events = sent = 0
        for daemon in self.daemons:
            totals = daemon.call("status")["network"]["sent"]
            events += totals["events_sent"]
            sent += totals["bytes_sent"]
        return events, sent

    def wait_quiet(self) -> tuple[int, int]:
        """Until no link has sent an event for ``QUIET_S``; returns the totals then."""
        totals, since = self.link_totals(), time.monotonic()
        deadline = since + CONVERGE_TIMEOUT_S
        while time.monotonic() - since < QUIET_S:
            if time.monotonic() > deadline:
                raise RuntimeError("the links kept sending events")
            time.sleep(0.25)
            now = self.link_totals()
            if now[0] != totals[0]:
                totals, since = now, time.monotonic()
        return totals

    def close(self, *, show_logs: bool) -> None:
        stop_all(self.daemons, show_logs=show_logs)


def _write_backlog(daemon: BenchDaemon, count: int) -> None:
    with Client(daemon.home, client_name="palacectl-bench") as client:
        for start in range(0, count, BULK):
            client.call("append_many", events=[
                {"type": "note", "stream": "bench", "room": "backlog", "from_agent": f"writer-{daemon.name}",
                 "body": f"{daemon.name} {i} " + "b" * BODY_BYTES} for i in range(start, min(count, start + BULK))])


def _backlog_heal(root: Path, count: int, backlog: int, writes_s: float, say: Say) -> dict[str, Any]:
    """N daemons each ``backlog`` events ahead of the others; time to one digest once meshed."""
    mesh = BenchMesh(root / f"heal{count}", count)
    ok = False
    try:
        mesh.start()
        ports = [address.rsplit(":", 1)[1] for address in mesh.addresses]
        for daemon in mesh.daemons:
            daemon.stop()
        for daemon, port in zip(mesh.daemons, ports, strict=True):  # each alone: nobody to link to
            daemon.start(listen=f"127.0.0.1:{port}")
            _write_backlog(daemon, backlog)
            daemon.stop()
        t0 = time.perf_counter()
        for daemon, port in zip(mesh.daemons, ports, strict=True):
            daemon.spawn(listen=f"127.0.0.1:{port}")
        clients = [daemon.connect() for daemon in mesh.daemons]
        held = [client.call("digest")["events"] for client in clients]
        stop = threading.Event()
        written = [0] * count

        def writer(k: int) -> None:
            with Client(mesh.daemons[k].home, client_name="palacectl-bench") as client:
                while not stop.is_set():
                    client.call("append", type="note", stream="bench", room="live", from_agent=f"live-{k}",
                                body=f"live {k} {written[k]} " + "l" * BODY_BYTES)
                    written[k] += 1
                    time.sleep(0.005)

        threads = [threading.Thread(target=writer, args=(k,), daemon=True) for k in range(count)]
        for thread in threads:
            thread.start()
        mesh.link_all()  # (the links to the founder come back by themselves: remembered addresses)
        time.sleep(writes_s)
        stop.set()
        for thread in threads:
            thread.join(30)
        t_done = mesh.wait_converged(clients)
        total = clients[0].call("digest")["events"]
        sent, _ = mesh.wait_quiet()
        for client in clients:
            client.close()
        # What each daemon lacked: everything but what it held when it started and wrote since
        # (an agent's first write adds its registration: counted in the total, not in `written`).
        lacked = sum(total - h - w for h, w in zip(held, written, strict=True))
        ok = True
        say(f"  {count} daemons, each {backlog:,} events the others lacked, started together and meshed with "
            f"writers on every one for {writes_s:.0f} s: identical digests {t_done - t0:.2f} s after the start "
            f"({total:,} events each; the links carried {sent:,} events, {sent / lacked:.2f} per event lacked)")
        return {f"heal_{count}_daemons_s": t_done - t0, f"heal_{count}_daemons_events": total,
                f"heal_{count}_daemons_live_writes": sum(written),
                f"heal_{count}_daemons_sent_per_lacked": sent / lacked if lacked else 0.0}
    finally:
        mesh.close(show_logs=not ok)


def _fan_out(root: Path, count: int, events: int, idle_s: float, say: Say) -> dict[str, Any]:
    """A full mesh of ``count``: sends per event appended on one daemon, then idle bytes per minute."""
    mesh = BenchMesh(root / f"mesh{count}", count)
    clients: list[Client] = []
    ok = False
    try:
        t0 = time.perf_counter()
        mesh.start()
        mesh.link_all()
        mesh.wait_linked()
        say(f"  {count} daemons joined and meshed in {time.perf_counter() - t0:.1f} s")
        clients = [daemon.connect() for daemon in mesh.daemons]
        writer = clients[0]
        # The writer's first event also registers its agent: sent, and spread, before counting.
        writer.call("append", type="note", stream="bench", room="fan-out", from_agent="bench-writer",
                    body="the writer's first event")
        mesh.wait_converged(clients)
        before, _ = mesh.wait_quiet()
        first = writer.call("digest")["events"]
        for i in range(events):
            writer.call("append", type="note", stream="bench", room="fan-out", from_agent="bench-writer",
                        body=f"fan-out {i} " + "f" * BODY_BYTES)
            time.sleep(0.02)  # one at a time: each event spreads before the next
        mesh.wait_converged(clients)
        after, _ = mesh.wait_quiet()
        per_event = (after - before) / (writer.call("digest")["events"] - first)
        time.sleep(5)  # past the reports that the writes' link changes set off
        _, bytes_before = mesh.link_totals()
        time.sleep(idle_s)
        _, bytes_after = mesh.link_totals()
        per_min = (bytes_after - bytes_before) / idle_s * 60 / 1e6
        ok = True
        say(f"  {count}-daemon full mesh: each event crossed {per_event:.1f} links ({count - 1} needed); idle, "
            f"the links carried {per_min:.2f} MB/min")
        return {f"mesh_{count}_sends_per_event": per_event, f"mesh_{count}_idle_mb_per_min": per_min}
    finally:
        for client in clients:
            client.close()
        mesh.close(show_logs=not ok)


def _gossip_mesh(root: Path, count: int, say: Say) -> dict[str, Any]:
    """``count`` daemons joined through one invite each: seconds until the address gossip meshed them."""
    mesh = BenchMesh(root / f"gossip{count}", count)
    ok = False
    try:
        started = time.perf_counter()
        mesh.start()
        joined = time.perf_counter()
        mesh.wait_linked()
        took = time.perf_counter() - joined
        ok = True
        say(f"  {count} daemons joined through one invite in {joined - started:.1f} s (one after the other); every "
            f"one linked to every other {took:.2f} s after the last join (address gossip)")
        return {f"gossip_mesh_{count}_s": took, f"gossip_mesh_{count}_joins_s": joined - started}
    finally:
        mesh.close(show_logs=not ok)


def run_mesh_bench(*, quick: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run every mesh measurement; returns the figures (printing them unless ``progress`` is off)."""
    say: Say = narrator(progress)
    # --quick is a smoke run (for tests); its figures are not the ones to report.
    backlog = 500 if quick else 10_000
    heal_sizes = (2, 3) if quick else (2, 5)
    # Up to nine daemons a palace is a full mesh (palace_proto.overlay.FULL_MESH_MAX); past it the
    # partial views choose the links, measured by `bench mesh --daemons N` (mesh_scale.py).
    mesh_sizes = (3,) if quick else (5, 9)
    gossip_sizes = (3,) if quick else (5, 9)
    fan_out_events = 10 if quick else 100
    idle_s = 5.0 if quick else 60.0
    root = Path(tempfile.mkdtemp(prefix="palmesh", dir="/tmp"))  # short: socket paths stay under ~107 bytes
    results: dict[str, Any] = {"quick": quick, "cpus": os.cpu_count(), "python": sys.version.split()[0],
                               "backlog_events": backlog, "directory": str(root)}
    try:
        say(f"palace bench mesh: temporary daemons on loopback under {root}")
        for count in heal_sizes:
            results.update(_backlog_heal(root, count, backlog, 1.0 if quick else 3.0, say))
        for count in mesh_sizes:
            results.update(_fan_out(root, count, fan_out_events, idle_s, say))
        for count in gossip_sizes:
            results.update(_gossip_mesh(root, count, say))
    except KeyboardInterrupt:
        say("interrupted: stopping the temporary daemons and removing their directory")
        raise
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return results
