"""``palacectl bench leases``: what leases cost a daemon, honest and hostile (issue 25, finding 6).

Owns: the lease figures the README reports. One real ``palaced`` on a temporary home (loopback
only, mDNS off), driven through its Unix socket the way agents drive it:

* **a busy project**: 50 agents take 20 leases each (1,000 active, each agent its own
  directories, a tenth of them globs); then ``lease check`` is asked 2,000 times, for one path
  and for a 20-path commit, and its latency percentiles are the figures (target: p99 ≤ 5 ms);
* **the worst leases a member may write**: on top of that, nine agents take, with ``--force``,
  as many of the costliest leases the bounds allow (``MAX_HELD`` each of ``MAX_PATTERNS``
  patterns, every pattern 16 segments and 8 wildcards, distinct, no literal first segment so no
  index helps: every pair of them exhausts ``PAIR_BUDGET``), while a second client pings the
  daemon every 10 ms; then the lease operations, a session start and pings are timed again. The
  figure is the slowest operation seen (target: none over 50 ms);
* **a flood of shared worst leases**: nine more agents take as many shared worst leases (shared
  leases never collide with one another, so all of them stand and every exclusive acquire is tried
  against each); pings, checks and an honest acquire are timed again, and so is the attacker's
  own exclusive acquire of worst patterns, which is tried against all of them.

Latencies are measured by the client, round trip included, with the client's own garbage
collector paused (its pauses are not the daemon's). No benchmark imports palaced.
"""

from __future__ import annotations

import gc
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from palace_proto.errors import ApiError
from palace_proto.leases import MAX_HELD, MAX_PATTERNS, normalize_pattern
from palacectl.client import Client

from .daemon import BenchDaemon
from .figures import narrator

__all__ = ["run_leases_bench", "worst_patterns"]

PROJECT: Final = "bench"
AGENTS: Final = 50
LEASES_PER_AGENT: Final = 20
HOSTILE_AGENTS: Final = 9
# Why 10 ms: often enough to catch any stall of the event loop longer than the 50 ms target.
PING_EVERY_S: Final = 0.01

Say = Callable[[str], None]


def worst_patterns(lease_no: int, count: int = MAX_PATTERNS) -> list[str]:
    """``count`` patterns of the costliest shape the bounds allow, none overlapping another
    (distinct by lease and index), none with a literal first segment."""
    out = []
    for index in range(count):
        segments = [f"*{lease_no:03d}{index:02d}{k:02d}".ljust(15, "q") for k in range(7)]
        segments += [f"n{k:02d}".ljust(15, "q") for k in range(7, 15)]
        segments.append(f"[a-z]{lease_no:04d}{index:02d}".ljust(15, "z"))
        out.append(normalize_pattern("/".join(segments)))
    return out


def _honest_patterns(agent: int, lease: int) -> list[str]:
    if lease % 10 == 9:
        return [f"src/a{agent:02d}/glob{lease:02d}/**/*.py", f"docs/a{agent:02d}/g{lease:02d}/*.md"]
    return [f"src/a{agent:02d}/m{lease:02d}/**"]


def _paths(rng: random.Random, count: int) -> list[str]:
    out = []
    for _ in range(count):
        agent, lease = rng.randrange(AGENTS + 10), rng.randrange(LEASES_PER_AGENT + 5)
        out.append(rng.choice([f"src/a{agent:02d}/m{lease:02d}/handlers/x{lease}.py",
                               f"src/a{agent:02d}/glob{lease:02d}/deep/er/y.py", f"docs/a{agent:02d}/g{lease:02d}/a.md",
                               f"tests/t{lease}.py", "README.md"]))
    return out


def _percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {"p50_ms": at(0.50), "p99_ms": at(0.99), "max_ms": round(ordered[-1], 3),
            "mean_ms": round(statistics.fmean(ordered), 3), "n": len(ordered)}


def _timed(client: Client, op: str, **args: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    try:
        result = client.call(op, **args)
    except ApiError as exc:
        result = exc
    return (time.perf_counter() - t0) * 1000, result


class _Pinger(threading.Thread):
    """Pings the daemon every ``PING_EVERY_S`` on its own connection; keeps every latency."""

    def __init__(self, home: Path) -> None:
        super().__init__(daemon=True, name="bench-pinger")
        self.home = home
        self.samples: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with Client(self.home, client_name="palacectl-bench-ping") as client:
            while not self.stop.is_set():
                self.samples.append(_timed(client, "ping")[0])
                time.sleep(PING_EVERY_S)


def _honest_phase(client: Client, say: Say, rng: random.Random, checks: int, agents: int,
                  per_agent: int) -> dict[str, Any]:
    acquire_ms = []
    t0 = time.perf_counter()
    for lease in range(per_agent):
        for number in range(agents):
            ms, result = _timed(client, "lease_acquire", agent=f"agent{number:02d}", project=PROJECT,
                                patterns=_honest_patterns(number, lease), ttl_s="7d")
            if isinstance(result, ApiError):
                raise RuntimeError(f"an honest lease was refused: {result}")
            acquire_ms.append(ms)
    say(f"  {agents * per_agent:,} honest leases of {agents} agents taken in {time.perf_counter() - t0:.1f} s")
    one, commit = [], []
    for i in range(checks):
        agent = f"agent{rng.randrange(AGENTS):02d}"
        if i % 2:
            commit.append(_timed(client, "lease_check", agent=agent, project=PROJECT, paths=_paths(rng, 20))[0])
        else:
            one.append(_timed(client, "lease_check", agent=agent, project=PROJECT, paths=_paths(rng, 1))[0])
    figures = {"acquire": _percentiles(acquire_ms), "check_1_path": _percentiles(one),
               "check_20_paths": _percentiles(commit)}
    say(f"  lease check, 1 path:   p50 {figures['check_1_path']['p50_ms']:.2f} ms  "
        f"p99 {figures['check_1_path']['p99_ms']:.2f} ms  (target p99 <= 5 ms)")
    say(f"  lease check, 20 paths: p50 {figures['check_20_paths']['p50_ms']:.2f} ms  "
        f"p99 {figures['check_20_paths']['p99_ms']:.2f} ms")
    return figures


def _hostile_phase(daemon: BenchDaemon, client: Client, say: Say, rng: random.Random, rounds: int,
                   held: int) -> dict[str, Any]:
    pinger = _Pinger(daemon.home)
    pinger.start()
    acquire_ms, taken, refused, refusals = [], 0, 0, set()
    try:
        for number in range(HOSTILE_AGENTS):
            for lease in range(held):
                ms, result = _timed(client, "lease_acquire", agent=f"mallory{number}", project=PROJECT,
                                    patterns=worst_patterns(number * 100 + lease), ttl_s="7d", force=True)
                acquire_ms.append(ms)
                taken += not isinstance(result, ApiError)
                if isinstance(result, ApiError):
                    refused += 1
                    refusals.add(str(result)[:200])
        ops: dict[str, list[float]] = {"lease_check_20_paths": [], "lease_check_1_path": [], "lease_list": [],
                                       "session_start": [], "lease_acquire_honest": []}
        for i in range(rounds):
            agent = f"agent{rng.randrange(AGENTS):02d}"
            ops["lease_check_20_paths"].append(
                _timed(client, "lease_check", agent=agent, project=PROJECT, paths=_paths(rng, 20))[0])
            ops["lease_check_1_path"].append(
                _timed(client, "lease_check", agent=agent, project=PROJECT, paths=_paths(rng, 1))[0])
            if i % 10 == 0:
                ops["lease_list"].append(_timed(client, "lease_list", project=PROJECT)[0])
                ops["session_start"].append(_timed(client, "session_start", agent=agent)[0])
                ops["lease_acquire_honest"].append(
                    _timed(client, "lease_acquire", agent="newcomer", project=PROJECT,
                           patterns=[f"new/n{i}/**"], ttl_s="10m")[0])
    finally:
        pinger.stop.set()
        pinger.join()
    figures: dict[str, Any] = {"hostile_leases_taken": taken, "hostile_leases_refused": refused,
                               "refusals": sorted(refusals),
                               "hostile_acquire": _percentiles(acquire_ms), "ping": _percentiles(pinger.samples)}
    figures.update({name: _percentiles(samples) for name, samples in ops.items() if samples})
    slowest = max(figures[name]["max_ms"] for name in ("hostile_acquire", "ping", *ops))
    figures["slowest_op_ms"] = slowest
    say(f"  {taken} worst leases forced in by {HOSTILE_AGENTS} agents ({refused} refused);"
        f" acquire max {figures['hostile_acquire']['max_ms']:.1f} ms")
    for why in sorted(refusals):
        say(f"    refused: {why}")
    say(f"  ping during all of it: p99 {figures['ping']['p99_ms']:.2f} ms  max {figures['ping']['max_ms']:.1f} ms")
    for name in ops:
        say(f"  {name}: p99 {figures[name]['p99_ms']:.2f} ms  max {figures[name]['max_ms']:.1f} ms")
    say(f"  slowest operation: {slowest:.1f} ms (target <= 50 ms)")
    return figures


def _flood_phase(daemon: BenchDaemon, client: Client, say: Say, rng: random.Random, rounds: int,
                 held: int) -> dict[str, Any]:
    """Shared worst leases never collide with one another, so all of them stand: every exclusive
    acquire is tried against each. Timed: the daemon for everyone else, and the attacker's own
    exclusive acquire of worst patterns against them all."""
    pinger = _Pinger(daemon.home)
    pinger.start()
    taken = 0
    try:
        for number in range(HOSTILE_AGENTS):
            for lease in range(held):
                _, result = _timed(client, "lease_acquire", agent=f"flood{number}", project=PROJECT,
                                   patterns=worst_patterns(5000 + number * 100 + lease), ttl_s="7d", shared=True,
                                   force=True)
                taken += not isinstance(result, ApiError)
        ops: dict[str, list[float]] = {"lease_check_20_paths": [], "lease_acquire_honest": [],
                                       "attackers_own_exclusive_acquire": []}
        for i in range(rounds):
            agent = f"agent{rng.randrange(AGENTS):02d}"
            ops["lease_check_20_paths"].append(
                _timed(client, "lease_check", agent=agent, project=PROJECT, paths=_paths(rng, 20))[0])
            if i % 10 == 0:
                ops["lease_acquire_honest"].append(
                    _timed(client, "lease_acquire", agent="newcomer", project=PROJECT,
                           patterns=[f"flood/n{i}/**"], ttl_s="10m")[0])
                ops["attackers_own_exclusive_acquire"].append(
                    _timed(client, "lease_acquire", agent="mallory0", project=PROJECT,
                           patterns=worst_patterns(9000 + i), ttl_s="10m")[0])
    finally:
        pinger.stop.set()
        pinger.join()
    figures: dict[str, Any] = {"shared_worst_leases_standing": taken, "ping": _percentiles(pinger.samples)}
    figures.update({name: _percentiles(samples) for name, samples in ops.items() if samples})
    say(f"  {taken} shared worst leases standing; ping p99 {figures['ping']['p99_ms']:.2f} ms"
        f"  max {figures['ping']['max_ms']:.1f} ms")
    for name in ops:
        say(f"  {name}: p99 {figures[name]['p99_ms']:.2f} ms  max {figures[name]['max_ms']:.1f} ms")
    return figures


def run_leases_bench(*, quick: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run both lease measurements; returns the figures (printing them unless ``progress`` is off)."""
    say: Say = narrator(progress)
    rng = random.Random(25)
    root = Path(tempfile.mkdtemp(prefix="pallease", dir="/tmp"))  # short: socket paths stay under ~107 bytes
    results: dict[str, Any] = {"quick": quick, "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    daemon = BenchDaemon(root, "d0")
    # The measuring process's own collector would otherwise pause it mid-call (a full pass over
    # the answers it decoded: 50-70 ms seen on a 1,000-lease list): those pauses are not the
    # daemon's. Answers are freed as they go; nothing here builds cycles.
    gc.disable()
    try:
        say(f"palace bench leases: a temporary daemon on loopback under {root}")
        daemon.start()
        with daemon.connect() as client:
            say("a busy project:")
            results["honest"] = _honest_phase(client, say, rng, 200 if quick else 2000, 10 if quick else AGENTS,
                                              5 if quick else LEASES_PER_AGENT)
            say("the worst leases a member may write:")
            results["hostile"] = _hostile_phase(daemon, client, say, rng, 20 if quick else 200,
                                                2 if quick else MAX_HELD)
            say("a flood of shared worst leases (they never collide with one another, so all stand):")
            results["flood"] = _flood_phase(daemon, client, say, rng, 20 if quick else 100,
                                            2 if quick else MAX_HELD)
    except KeyboardInterrupt:
        say("interrupted: stopping the temporary daemon and removing its directory")
        raise
    finally:
        gc.enable()
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)
    return results
