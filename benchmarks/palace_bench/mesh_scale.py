"""``palacectl bench mesh --daemons N``: a palace of N daemons, each a machine of its own (issue 45 §2).

Owns the figures of a palace past one LAN's handful: N real ``palaced`` processes, each in a network
namespace of its own on a subnet of its own (``RoutedNetwork``: one router, no multicast between
subnets, so mDNS could not help even if it ran), joined the way users join through one invite
(``--topology invite``: they learn where the others are from the signed address records, and the
partial views choose whom each links to) or linked pairwise with ``peers add`` (``--topology
pairwise``, today's full mesh, for comparison). Without root (namespaces need it) the daemons run
on loopback instead, and the figures say so. What it measures, in order:

* **links**: how many links each daemon holds once the joins settled (the target: at most 8);
* **spread**: 100 events of 200 bytes appended one at a time on one daemon; the time from the
  last append until every daemon holds it, the copies each daemon received per event (the links'
  ``events_sent`` summed over the palace, over N - 1 daemons and the events; 1.0 is the least), and
  the bytes all links carried meanwhile per event per daemon;
* **replicated**: one append with ``--replicated N-1`` (every other daemon confirms holding it, on a
  link of the writer's: past its active view, the writer links to more members while it waits);
* **idle**: every byte every link sent over a minute with nothing written, per daemon;
* **partition** (namespaces only): the router drops everything between the two halves for a
  minute while a writer appends on each side; the time from the heal until every daemon reports
  the same digest;
* **leave and rejoin**: 10 daemons stop while the first appends 100 events, then start again;
  the time until every daemon reports the same digest (nothing lost: the digest covers every event).

No benchmark imports palaced: the daemons are ``python -m palaced`` (``daemon``).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from palacectl.client import Client

from .daemon import CONVERGE_TIMEOUT_S, BenchDaemon, stop_all
from .figures import narrator

__all__ = ["RoutedNetwork", "routed_commands", "run_scale_bench"]

# Why 200 bytes: the bodies of the measurement (a task request, a reply).
BODY_BYTES: Final = 200
#: the peer port every daemon listens on inside its own namespace
PEER_PORT: Final = 7437
# Why 30 s: after the last join, address records and the views' requests settle within a few
# repair rounds (5 s each); the links are counted after this.
SETTLE_S: Final = 30.0
# Why 2 s and 60 s: then the links are counted once two looks 2 s apart agree, for at most a minute.
STABLE_LOOK_S: Final = 2.0
MAX_SETTLE_WAIT_S: Final = 60.0

Say = Callable[[str], None]


def namespaces_usable() -> str | None:
    """Why the daemons cannot each have a namespace here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    return None


def routed_commands(router: str, hosts: list[str], addresses: list[str], gateways: list[str]) -> list[list[str]]:
    """The ``ip`` commands that put each of ``hosts`` (a namespace) alone on a /24 — ``pal0`` at its
    address, its default route via its gateway, the router's end of it ``r<i>`` (``r1``... as
    tests/netns.py numbers them) — behind ``router``, which forwards unicast (IPv4 forwarding on)
    and, like any router without a multicast routing daemon, no multicast. No interface appears in
    the root namespace."""
    commands = [["ip", "netns", "add", router], ["ip", "-n", router, "link", "set", "lo", "up"],
                ["ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv4.ip_forward=1"]]
    for i, (host, address, gateway) in enumerate(zip(hosts, addresses, gateways, strict=True), start=1):
        commands += [
            ["ip", "netns", "add", host],
            ["ip", "-n", router, "link", "add", f"r{i}", "type", "veth", "peer", "name", "pal0", "netns", host],
            ["ip", "-n", router, "addr", "add", f"{gateway}/24", "dev", f"r{i}"],
            ["ip", "-n", host, "addr", "add", f"{address}/24", "dev", "pal0"],
            ["ip", "-n", router, "link", "set", f"r{i}", "up"],
            ["ip", "-n", host, "link", "set", "lo", "up"],
            ["ip", "-n", host, "link", "set", "pal0", "up"],
            ["ip", "-n", host, "route", "add", "default", "via", gateway],
        ]
    return commands


class RoutedNetwork:
    """N namespaces, each alone on a /24 behind one router namespace. The first half sits in
    10.213.0.0/17 and the second in 10.213.128.0/17, so ``partition`` cuts the halves apart with two
    routing rules (blackhole: packets vanish, as when a link goes down without a word)."""

    def __init__(self, count: int) -> None:
        assert 2 <= count <= 200, count
        self.prefix = f"pb{os.getpid()}"
        self.router = f"{self.prefix}r"
        half = (count + 1) // 2
        octets = [i + 1 for i in range(half)] + [128 + i + 1 for i in range(count - half)]
        self.hosts = [f"{self.prefix}h{i}" for i in range(count)]
        self.addresses = [f"10.213.{o}.2" for o in octets]
        self._gateways = [f"10.213.{o}.1" for o in octets]

    def __repr__(self) -> str:
        return f"<RoutedNetwork {len(self.hosts)} hosts via {self.router}>"

    def exec_prefix(self, index: int) -> list[str]:
        return ["ip", "netns", "exec", self.hosts[index]]

    def build(self) -> None:
        for command in routed_commands(self.router, self.hosts, self.addresses, self._gateways):
            subprocess.run(command, check=True, capture_output=True)

    def _rules(self, verb: str) -> None:
        for src, dst in (("10.213.0.0/17", "10.213.128.0/17"), ("10.213.128.0/17", "10.213.0.0/17")):
            subprocess.run(["ip", "-n", self.router, "rule", verb, "from", src, "to", dst, "blackhole"],
                           check=True, capture_output=True)

    def partition(self) -> None:
        self._rules("add")

    def heal(self) -> None:
        self._rules("del")

    def close(self) -> None:
        for name in [*self.hosts, self.router]:
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


class ScalePalace:
    """The N daemons of one palace (on ``network``, or on loopback without one)."""

    def __init__(self, root: Path, count: int, network: RoutedNetwork | None) -> None:
        self.network = network
        self.daemons = [BenchDaemon(root, f"d{i:02d}", prefix=network.exec_prefix(i) if network else ())
                        for i in range(count)]
        self.listen = [f"{network.addresses[i]}:{PEER_PORT}" if network else "127.0.0.1:0" for i in range(count)]

    def __repr__(self) -> str:
        return f"<ScalePalace {len(self.daemons)} daemons>"

    def start(self, topology: str) -> float:
        """Start every daemon, found the palace on the first, join the others through its invites
        (and, pairwise, ``peers add`` every pair); returns the ``perf_counter`` of the last join."""
        for daemon, listen in zip(self.daemons, self.listen, strict=True):
            daemon.home.mkdir(parents=True)
            (daemon.home / "config.toml").write_text("[memory]\nembed = false\n")  # the log is measured
            daemon.spawn(listen)
        for daemon in self.daemons:
            daemon.connect().close()
        first = self.daemons[0]
        first.call("init", name="bench-scale", daemon_name=first.name)
        address = first.call("status")["network"]["listen"][0]
        for daemon in self.daemons[1:]:
            code = first.call("invite", role="member", ttl_s=3600, address=address)["code"]
            daemon.call("join", code=code, name=daemon.name)
        joined = time.perf_counter()
        if topology == "pairwise":
            addresses = [d.call("status")["network"]["listen"][0] for d in self.daemons]
            for i in range(len(self.daemons)):
                for j in range(i + 1, len(self.daemons)):
                    self.daemons[i].call("peers_add", address=addresses[j])
        return joined

    def statuses(self, daemons: list[BenchDaemon] | None = None) -> list[dict[str, Any]]:
        return [d.call("status")["network"] for d in (daemons or self.daemons)]

    def totals(self) -> tuple[int, int]:
        """(events, bytes) every link of every daemon sent since the daemons started."""
        events = sent = 0
        for network in self.statuses():
            events += network["sent"]["events_sent"]
            sent += network["sent"]["bytes_sent"]
        return events, sent

    def wait_converged(self, clients: list[Client], timeout: float = CONVERGE_TIMEOUT_S) -> float:
        """Poll every digest until they are equal; returns the ``perf_counter`` when they were."""
        deadline = time.monotonic() + timeout
        while True:
            if len({c.call("digest")["digest"] for c in clients}) == 1:
                return time.perf_counter()
            if time.monotonic() > deadline:
                counts = sorted({c.call("digest")["events"] for c in clients})
                raise RuntimeError(f"the daemons did not converge within {timeout:.0f} s (event counts {counts})")
            time.sleep(0.05)

    def close(self, *, show_logs: bool) -> None:
        stop_all(self.daemons, show_logs=show_logs, logs_of=3)


def _append(client: Client, writer: str, body: str) -> None:
    client.call("append", type="note", stream="bench", room="scale", from_agent=writer,
                body=body + " " + "s" * BODY_BYTES)


@contextmanager
def _writers(palace: ScalePalace, indices: list[int], pause_s: float) -> Iterator[list[int]]:
    """A writer appending on each of ``indices`` until the block ends; yields the counts written."""
    stop, written = threading.Event(), [0] * len(indices)

    def write(k: int, index: int) -> None:
        with Client(palace.daemons[index].home, client_name="palacectl-bench") as client:
            while not stop.is_set():
                _append(client, f"writer-{index}", f"side write {written[k]}")
                written[k] += 1
                time.sleep(pause_s)

    threads = [threading.Thread(target=write, args=(k, i), daemon=True) for k, i in enumerate(indices)]
    for thread in threads:
        thread.start()
    try:
        yield written
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)


def _settled(palace: ScalePalace) -> list[dict[str, Any]]:
    """The daemons' statuses once their links stop changing: the same link counts in two looks
    ``STABLE_LOOK_S`` apart (a link that only carried a request is closed ~12 s after it opened; on a
    loaded machine the sweep comes later), or the last look after ``MAX_SETTLE_WAIT_S``."""
    statuses = palace.statuses()
    deadline = time.monotonic() + MAX_SETTLE_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(STABLE_LOOK_S)
        again = palace.statuses()
        if [len(n["connected"]) for n in again] == [len(n["connected"]) for n in statuses]:
            return again
        statuses = again
    return statuses


def _measure(palace: ScalePalace, count: int, events: int, idle_s: float, partition_s: float, leave: int,
             settle_s: float, say: Say) -> dict[str, Any]:
    out: dict[str, Any] = {}
    key = f"scale_{count}"
    time.sleep(settle_s)
    statuses = _settled(palace)
    links = [len(n["connected"]) for n in statuses]
    active = [len(n["overlay"]["active"]) for n in statuses]
    out[f"{key}_links_max"], out[f"{key}_links_mean"] = max(links), sum(links) / len(links)
    out[f"{key}_active_max"], out[f"{key}_mode"] = max(active), statuses[0]["overlay"]["mode"]
    say(f"  links per daemon once settled: max {max(links)}, mean {sum(links) / len(links):.1f}, min {min(links)} "
        f"({statuses[0]['overlay']['mode']}; active views of at most {max(active)})")

    clients = [d.connect() for d in palace.daemons]
    try:
        writer = clients[0]
        _append(writer, "bench-writer", "the writer's first event")  # registers the agent: spread before counting
        palace.wait_converged(clients)
        time.sleep(2)
        events_before, bytes_before = palace.totals()
        t0 = time.perf_counter()
        for i in range(events):
            _append(writer, "bench-writer", f"spread {i}")
            time.sleep(0.02)  # one at a time, as agents write
        last = time.perf_counter()
        done = palace.wait_converged(clients)
        time.sleep(2)  # the pushes' receipts and announcements
        events_after, bytes_after = palace.totals()
        copies = (events_after - events_before) / (count - 1) / events
        per_event = (bytes_after - bytes_before) / events / count
        out.update({f"{key}_to_last_daemon_s": done - last, f"{key}_copies_per_daemon": copies,
                    f"{key}_bytes_per_event_per_daemon": per_event, f"{key}_write_s": last - t0})
        say(f"  {events} events appended on one daemon: the last daemon held the last {done - last:.2f} s after it "
            f"was written; {copies:.2f} copies received per daemon and event; {per_event / 1000:.2f} KB on the wire "
            f"per event per daemon (all traffic while they spread, gossip included)")

        t_rep = time.perf_counter()
        replicated = writer.call("append", type="note", stream="bench", room="scale", from_agent="bench-writer",
                                 body="held by every other daemon?", replicated=count - 1, timeout_ms=60_000)
        out[f"{key}_replicated_all_s"] = time.perf_counter() - t_rep
        confirmed = replicated["replication"]["replicated_count"]
        out[f"{key}_replicated_all_count"] = confirmed
        say(f"  append --replicated {count - 1} (every other daemon confirms, on a link of the writer's): "
            f"{confirmed} confirmed in {out[f'{key}_replicated_all_s']:.2f} s")
        palace.wait_converged(clients)

        time.sleep(5)
        _, idle_before = palace.totals()
        time.sleep(idle_s)
        _, idle_after = palace.totals()
        idle = (idle_after - idle_before) / idle_s * 60 / count / 1000
        out[f"{key}_idle_kb_per_min_per_daemon"] = idle
        say(f"  idle for {idle_s:.0f} s: {idle:.1f} KB/min on the wire per daemon")

        network = palace.network
        if network is not None and partition_s > 0:
            half = (count + 1) // 2
            network.partition()
            with _writers(palace, [0, half], 0.2) as written:
                time.sleep(partition_s)
                network.heal()
                healed = time.perf_counter()
            merged = palace.wait_converged(clients)
            out[f"{key}_partition_heal_s"] = merged - healed
            out[f"{key}_partition_writes"] = sum(written)
            say(f"  split in two halves for {partition_s:.0f} s with a writer on each ({sum(written)} events): "
                f"identical digests {merged - healed:.1f} s after the heal")

        if leave:
            leaving = random.Random(45).sample(range(1, count), leave)
            for index in leaving:
                clients[index].close()
                palace.daemons[index].stop()
            for i in range(events):
                _append(writer, "bench-writer", f"while {leave} were away {i}")
            for index in leaving:
                palace.daemons[index].spawn(palace.listen[index])
            for index in leaving:
                clients[index] = palace.daemons[index].connect()
            started = time.perf_counter()
            back = palace.wait_converged(clients)
            out[f"{key}_rejoin_s"] = back - started
            say(f"  {leave} daemons stopped while {events} events were written, then started again: identical "
                f"digests {back - started:.1f} s after they started")
        out[f"{key}_events"] = writer.call("digest")["events"]
    finally:
        for client in clients:
            client.close()
    return out


def run_scale_bench(*, daemons: int, topology: str = "invite", namespaces: bool = True, events: int = 100,
                    idle_s: float = 60.0, partition_s: float = 60.0, leave: int = 10, settle_s: float = SETTLE_S,
                    progress: bool = True) -> dict[str, Any]:
    """Measure a palace of ``daemons`` (see the module); returns the figures, printing them unless
    ``progress`` is off."""
    say: Say = narrator(progress)
    why_not = namespaces_usable() if namespaces else "not asked for (--no-namespaces)"
    network = RoutedNetwork(daemons) if why_not is None else None
    root = Path(tempfile.mkdtemp(prefix="palscale", dir="/tmp"))  # short: socket paths stay under ~107 bytes
    results: dict[str, Any] = {"daemons": daemons, "topology": topology, "cpus": os.cpu_count(),
                               "python": sys.version.split()[0], "namespaces": network is not None,
                               "directory": str(root)}
    palace = ScalePalace(root, daemons, network)
    ok = False
    try:
        where = "each in a network namespace of its own, on its own subnet" if network else f"on loopback ({why_not})"
        say(f"palace bench mesh: {daemons} daemons {where}, joined by {topology}")
        if network is not None:
            network.build()
        t0 = time.perf_counter()
        joined = palace.start(topology)
        results[f"scale_{daemons}_join_s"] = joined - t0
        say(f"  started and joined in {joined - t0:.1f} s")
        results.update(_measure(palace, daemons, events, idle_s, partition_s if network else 0.0,
                                min(leave, daemons - 2), settle_s, say))
        ok = True
    except KeyboardInterrupt:
        say("interrupted: stopping the temporary daemons and removing their directory")
        raise
    finally:
        palace.close(show_logs=not ok)
        if network is not None:
            network.close()
        shutil.rmtree(root, ignore_errors=True)
    return results
