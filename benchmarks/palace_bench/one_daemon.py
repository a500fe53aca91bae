"""``palacectl bench``: measure a temporary palaced started for the purpose.

Owns: the performance figures the README reports (issue 2 §8). Everything runs against a fresh
daemon on a temporary home, driven through the real Unix-socket API by real clients:

* durable appends/s from 1 client (sequential request/reply) and from 16 concurrent clients,
  each client a process of its own (``clients``: threads in one process would measure that
  process's GIL as much as the daemon);
* append → watcher wake latency (a watcher on its own subscription), p50/p99, from the moment the
  append is sent (so it includes the fsynced commit), and the wake time minus the writer's ack
  time (negative: the watcher heard of the event before the writer heard it was durable);
* ``list --to-agent X --limit 50`` latency on a log of 1,000,000 events (API round trip), and
  ``palacectl list --to-agent X --limit 50 --json`` as a whole process;
* the daemon's resident memory with 100 connected watchers.

The daemon is a subprocess (``daemon.BenchDaemon``: mDNS off, loopback only).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from palacectl.client import Client

from .clients import AGENTS, AppendJob, FleetEvents, durable_appends, rate, run_client_processes
from .daemon import BenchDaemon
from .figures import judge, narrator, percentile

__all__ = ["run_bench"]

TARGETS: Final = {
    "append_1_client_per_s": (">=", 2000),
    "append_16_clients_per_s": (">=", 10000),
    "wake_p50_ms": ("<=", 1.0),
    "wake_p99_ms": ("<=", 5.0),
    "list_p50_ms": ("<=", 20.0),
    "rss_100_watchers_mb": ("<=", 80.0),
    "cli_list_process_ms": ("<=", 200.0),
}
# Why 16: the figure the README and the JetStream comparison quote (and the fill's client count).
CONCURRENT_CLIENTS: Final = 16
# Why so long: only a daemon that stopped answering takes this long; the run then ends with a message.
APPENDS_TIMEOUT_S: Final = 3600.0


def _appends_sequential(home: Path, n: int, start: int) -> float:
    """One client process, ``n`` appends one after the other; appends/s."""
    [run] = run_client_processes([(durable_appends, AppendJob(home, n, start, FleetEvents(1)))],
                                 timeout_s=APPENDS_TIMEOUT_S)
    return n / (run.finished - run.started)


def _appends_concurrent(home: Path, clients: int, per_client: int, start: int,
                        poll: Callable[[], None] | None = None) -> float:
    """``clients`` client processes appending at once, each request after reply; appends/s overall."""
    jobs = [(durable_appends, AppendJob(home, per_client, start + k * per_client, FleetEvents(k)))
            for k in range(clients)]
    runs = run_client_processes(jobs, timeout_s=APPENDS_TIMEOUT_S, poll=poll)
    return rate(runs, clients * per_client)


def _wake_latency(home: Path, samples: int) -> dict[str, float]:
    watcher = Client(home)
    watcher.connect()
    watcher.send("subscribe", to_agents=["bench-watcher"], start="tip")
    watcher.receive()  # the "started" push
    after_send: list[float] = []
    after_ack: list[float] = []
    commit: list[float] = []
    with Client(home) as writer:
        for i in range(samples):
            t_send = time.perf_counter()
            rid = writer.send("append", type="note", stream="bench", room="wake", from_agent="bench-writer",
                              to_agent="bench-watcher", body=str(i))
            push = watcher.receive(timeout=10)
            t_wake = time.perf_counter()
            reply = writer.receive(timeout=10)
            t_ack = time.perf_counter()
            if not (push.get("push") == "batch" and reply.get("id") == rid and reply.get("ok")):
                raise RuntimeError(f"the benchmark's append or wake went wrong: {push!r} {reply!r}")
            after_send.append((t_wake - t_send) * 1000)
            commit.append((t_ack - t_send) * 1000)
            after_ack.append((t_wake - t_ack) * 1000)  # negative: the watcher heard first
    watcher.close()
    return {
        "wake_p50_ms": percentile(after_send, 50), "wake_p99_ms": percentile(after_send, 99),
        "durable_append_p50_ms": percentile(commit, 50), "durable_append_p99_ms": percentile(commit, 99),
        "wake_minus_ack_p50_ms": percentile(after_ack, 50), "wake_minus_ack_p99_ms": percentile(after_ack, 99),
    }


def _list_latency(home: Path, queries: int) -> dict[str, float]:
    rng = random.Random(7)
    samples = []
    with Client(home) as client:
        for _ in range(queries):
            agent = rng.choice(AGENTS)
            t0 = time.perf_counter()
            result = client.call("list", to_agents=[agent], limit=50)
            samples.append((time.perf_counter() - t0) * 1000)
            if result["count"] != 50:
                raise RuntimeError(f"list returned {result['count']} events, expected 50")
    return {"list_p50_ms": percentile(samples, 50), "list_p99_ms": percentile(samples, 99)}


def _cli_list_process(home: Path, runs: int) -> float:
    env = {**os.environ, "PALACE_HOME": str(home)}
    samples = []
    for k in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "palacectl", "list", "--to-agent", AGENTS[k % len(AGENTS)],
                               "--limit", "50", "--json"], env=env, capture_output=True)
        samples.append((time.perf_counter() - t0) * 1000)
        if proc.returncode != 0:
            raise RuntimeError(f"palacectl list failed: {proc.stderr.decode(errors='replace')}")
    return percentile(samples, 50)


def _rss_with_watchers(daemon: BenchDaemon, watchers: int) -> float:
    clients = []
    try:
        for k in range(watchers):
            c = Client(daemon.home)
            c.connect()
            c.send("subscribe", to_agents=[f"idle-{k}"], exclude_from_agents=[f"idle-{k}"], start="tip",
                   agent=f"idle-{k}")
            c.receive()
            clients.append(c)
        with Client(daemon.home) as probe:
            if probe.call("who")["count"] < watchers:
                raise RuntimeError(f"fewer than {watchers} watchers are connected")
        time.sleep(1.0)
        return daemon.rss_mb()
    finally:
        for c in clients:
            c.close()


def _fill(home: Path, total: int, progress: Callable[[str], None]) -> float:
    """Append until the log holds ``total`` events, with CONCURRENT_CLIENTS client processes."""
    with Client(home) as client:
        have = client.call("status")["events"]
    todo = max(0, total - have)
    if todo == 0:
        return 0.0
    t0 = time.perf_counter()
    last = [t0]

    def report() -> None:
        if time.perf_counter() - last[0] < 5.0:
            return
        last[0] = time.perf_counter()
        with Client(home) as probe:
            now = probe.call("status")["events"]
        progress(f"  filled {now:,}/{total:,} events ({(now - have) / (last[0] - t0):,.0f}/s since start)")

    per_client = -(-todo // CONCURRENT_CLIENTS)  # the last client's share may overshoot by < 16 events
    _appends_concurrent(home, CONCURRENT_CLIENTS, per_client, have, poll=report)
    return time.perf_counter() - t0


def run_bench(*, quick: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run every measurement; returns the figures (and prints a table unless ``progress`` is off)."""
    say: Callable[[str], None] = narrator(progress)
    # --quick is a smoke run (seconds, for tests); its figures are not the ones to report.
    scale = 0.05 if quick else 1.0
    list_log = 20_000 if quick else 1_000_000
    root = Path(tempfile.mkdtemp(prefix="palbench", dir="/tmp"))  # short: socket paths stay < 107 bytes
    daemon = BenchDaemon(root, "a")
    results: dict[str, Any] = {"quick": quick, "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    try:
        daemon.start()
        say("palace bench: temporary daemon started")
        n1 = int(3000 * scale)
        results["append_1_client_per_s"] = _appends_sequential(daemon.home, n1, 0)
        say(f"  1 client:   {results['append_1_client_per_s']:,.0f} durable appends/s")
        results["append_16_clients_per_s"] = _appends_concurrent(daemon.home, CONCURRENT_CLIENTS,
                                                                 int(2000 * scale), n1)
        say(f"  {CONCURRENT_CLIENTS} client processes: {results['append_16_clients_per_s']:,.0f} durable appends/s")
        results.update(_wake_latency(daemon.home, int(2000 * scale)))
        say(f"  wake: p50 {results['wake_p50_ms']:.3f} ms, p99 {results['wake_p99_ms']:.3f} ms "
            f"(durable append p50 {results['durable_append_p50_ms']:.3f} ms; wake - ack p50 "
            f"{results['wake_minus_ack_p50_ms']:+.3f} ms)")
        results["rss_100_watchers_mb"] = _rss_with_watchers(daemon, 100)
        say(f"  RSS with 100 watchers: {results['rss_100_watchers_mb']:.1f} MB")
        say(f"  filling the log to {list_log:,} events for the list benchmark…")
        results["fill_seconds"] = _fill(daemon.home, list_log, say)
        results["list_log_events"] = list_log
        results.update(_list_latency(daemon.home, 50 if quick else 200))
        say(f"  list --to-agent X --limit 50 on {list_log:,} events: p50 {results['list_p50_ms']:.2f} ms, "
            f"p99 {results['list_p99_ms']:.2f} ms")
        results["cli_list_process_ms"] = _cli_list_process(daemon.home, 5 if quick else 20)
        say(f"  `palacectl list --json` as a process: p50 {results['cli_list_process_ms']:.0f} ms")
        results["rss_after_fill_100_watchers_mb"] = _rss_with_watchers(daemon, 100)
        say(f"  RSS with 100 watchers after the fill: {results['rss_after_fill_100_watchers_mb']:.1f} MB")
    finally:
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)
    return judge(results, TARGETS, say if progress else None)

