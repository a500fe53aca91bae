"""``palacectl bench replication``: measure replication between temporary local daemons.

Owns: the replication figures the README reports (issue 3). Everything runs against fresh daemons
on temporary homes under one short ``/tmp`` directory, joined into one palace the way users do it
(``init`` on A, ``invite`` there, ``join`` on the others) and driven through the real Unix-socket
API by real clients:

* cold catch-up: A seeded to 100,000 events once (the seeding time is reported apart), then a
  fresh daemon B joins; from the join reply until B's digest equals A's;
* cross-peer wake latency: a watcher subscribed on B, appends on A addressed to its agent; per
  sample, from sending the append on A to the pushed batch arriving on B (p50/p99);
* sustained replicated throughput: 16 concurrent clients append on A for a fixed time while B
  replicates; appends/s on A, and B's applied events/s end to end (until B's digest equals A's);
* heal time: B stopped (SIGTERM), events appended on A, B restarted on the same port; from B's
  process start until B's digest equals A's.

Every daemon runs with ``--no-mdns`` and listens on 127.0.0.1 only: the benchmark never
multicasts and opens no port beyond loopback. Daemons are subprocesses (``python -m palaced``):
no benchmark imports palaced. Every daemon is stopped and the directory removed in ``finally``,
also on Ctrl-C.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from palacectl.client import Client

from .clients import bench_event
from .daemon import CONVERGE_TIMEOUT_S, START_TIMEOUT_S, BenchDaemon, BenchPalace
from .figures import judge, narrator, percentile

__all__ = ["run_replication_bench"]

TARGETS: Final = {
    "wake_p50_ms": ("<=", 5.0),
    "wake_p99_ms": ("<=", 25.0),
    "catch_up_s": ("<=", 10.0),
    "heal_s": ("<=", 5.0),
}
# Why 16: the API refuses more than 16 unanswered requests on one connection; seeding stays at
# the limit so the group-commit writer always has a full batch waiting.
PIPELINE_DEPTH: Final = 16
SEED_CLIENTS: Final = 8
# Why 20 ms: convergence polls (a digest read on an idle connection) must not load the 2-core
# machines this runs on, yet resolve seconds-long figures to a few hundredths.
POLL_S: Final = 0.02

Say = Callable[[str], None]


def _event(i: int, rng: random.Random) -> dict[str, Any]:
    return bench_event(i, rng, room="replication", label="replication benchmark")


def _digest(client: Client) -> dict[str, Any]:
    return client.call("digest")


def _wait_digest(daemon: BenchDaemon, want: str, what: str, client: Client | None = None) -> float:
    """Poll ``daemon``'s digest until it is ``want``; returns the ``perf_counter`` when it was."""
    own = client is None
    client = client or daemon.connect()
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    try:
        while True:
            if _digest(client)["digest"] == want:
                return time.perf_counter()
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{what}: {daemon.name}'s digest did not match A's within {CONVERGE_TIMEOUT_S:.0f} s")
            time.sleep(POLL_S)
    finally:
        if own:
            client.close()


def _join(threads: list[threading.Thread]) -> None:
    # Why a timeout: a SIGINT may land on a client thread; the main thread must wake up to see it.
    for t in threads:
        while t.is_alive():
            t.join(0.2)


def _run_threads(workers: list[Callable[[], None]]) -> None:
    """Run ``workers`` concurrently and re-raise the first failure."""
    errors: list[BaseException] = []

    def guard(work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as exc:  # noqa: BLE001 - re-raised by the main thread after the run
            errors.append(exc)

    # Daemon threads: on Ctrl-C the main thread stops the daemons, which ends these clients.
    threads = [threading.Thread(target=guard, args=(w,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    _join(threads)
    if errors:
        raise RuntimeError(f"benchmark client failed: {errors[0]}") from errors[0]


def _append_pipelined(daemon: BenchDaemon, total: int, start: int, clients: int = SEED_CLIENTS) -> float:
    """Append ``total`` events with ``clients`` connections, each with PIPELINE_DEPTH requests in
    flight; returns the elapsed seconds."""

    def worker(k: int) -> None:
        rng = random.Random(1000 + k)
        mine = range(start + k, start + total, clients)
        with Client(daemon.home, client_name="palacectl-bench") as client:
            in_flight = 0
            for i in mine:
                if in_flight == PIPELINE_DEPTH:
                    _expect_ok(client.receive(timeout=60))
                    in_flight -= 1
                client.send("append", **_event(i, rng))
                in_flight += 1
            for _ in range(in_flight):
                _expect_ok(client.receive(timeout=60))

    t0 = time.perf_counter()
    _run_threads([functools.partial(worker, k) for k in range(clients)])
    return time.perf_counter() - t0


def _expect_ok(reply: dict[str, Any]) -> None:
    if not reply.get("ok"):
        raise RuntimeError(f"append failed: {reply.get('error')}")


def _seed(daemon: BenchDaemon, total: int, say: Say) -> tuple[int, float]:
    """Append on ``daemon`` until its log holds ``total`` events; returns (appended, seconds)."""
    have = daemon.call("digest")["events"]
    todo = max(0, total - have)
    elapsed = 0.0
    chunk = 20_000
    done = 0
    while done < todo:
        n = min(chunk, todo - done)
        elapsed += _append_pipelined(daemon, n, have + done)
        done += n
        say(f"  seeded {have + done:,}/{total:,} events on A ({done / elapsed:,.0f} appends/s)")
    return todo, elapsed


# -- the measurements ---------------------------------------------------------------------------


def _wake_latency(palace: BenchPalace, samples: int) -> dict[str, float]:
    """A watcher on B, request/reply appends on A addressed to its agent: send → push on B."""
    after_send: list[float] = []
    durable: list[float] = []
    watcher = palace.b.connect()
    try:
        watcher.send("subscribe", to_agents=["bench-watcher"], start="tip", agent="bench-watcher")
        started = watcher.receive(timeout=10)
        if started.get("push") != "started":
            raise RuntimeError(f"subscribe on B failed: {started}")
        with palace.a.connect() as writer:
            for i in range(samples):
                t_send = time.perf_counter()
                rid = writer.send("append", type="note", stream="bench", room="wake", from_agent="bench-writer",
                                  to_agent="bench-watcher", body=f"cross-peer wake {i}")
                # The ack is read first (it comes first: B hears of the event only once A committed
                # it). A push that came earlier would be overstated by the time to read one reply.
                reply = writer.receive(timeout=10)
                t_ack = time.perf_counter()
                push = watcher.receive(timeout=10)
                t_wake = time.perf_counter()
                if not (reply.get("id") == rid and reply.get("ok")):
                    raise RuntimeError(f"append on A failed: {reply}")
                if push.get("push") != "batch" or push["events"][-1]["id"] != reply["result"]["id"]:
                    raise RuntimeError(f"unexpected push on B: {push}")
                after_send.append((t_wake - t_send) * 1000)
                durable.append((t_ack - t_send) * 1000)
    finally:
        watcher.close()
    return {"wake_p50_ms": percentile(after_send, 50), "wake_p99_ms": percentile(after_send, 99),
            "wake_max_ms": max(after_send), "wake_samples": samples,
            "durable_append_on_a_p50_ms": percentile(durable, 50)}


def _throughput(palace: BenchPalace, clients: int, seconds: float) -> dict[str, float]:
    """``clients`` request/reply writers on A for ``seconds``; B's digest sampled until it matches A's."""
    with palace.a.connect() as probe_a, palace.b.connect() as probe_b:
        base_a = _digest(probe_a)["events"]
        base_b = _digest(probe_b)["events"]
        if base_a != base_b:
            raise RuntimeError(f"B is not caught up before the throughput run ({base_b} of {base_a} events)")
        counts = [0] * clients
        errors: list[BaseException] = []
        barrier = threading.Barrier(clients + 1)
        stop_at = time.perf_counter() + seconds + 60  # set for real once every writer is connected

        def writer(k: int) -> None:
            rng = random.Random(500 + k)
            try:
                with palace.a.connect() as client:
                    barrier.wait()
                    n = 0
                    while time.perf_counter() < stop_at:
                        client.call("append", **_event(10_000_000 + k * 1_000_000 + n, rng))
                        n += 1
                    counts[k] = n
            except Exception as exc:  # noqa: BLE001 - re-raised by the main thread after the run
                errors.append(exc)
                barrier.abort()

        # Daemon threads: on Ctrl-C the main thread stops the daemons, which ends these clients.
        threads = [threading.Thread(target=writer, args=(k,), daemon=True) for k in range(clients)]
        for t in threads:
            t.start()
        try:
            stop_at = time.perf_counter() + seconds
            barrier.wait(timeout=START_TIMEOUT_S)
        except threading.BrokenBarrierError:
            raise RuntimeError(f"benchmark client failed: {errors[0] if errors else 'barrier broken'}") from None
        t0 = time.perf_counter()
        max_lag = 0
        while any(t.is_alive() for t in threads):
            a_now, b_now = _digest(probe_a)["events"], _digest(probe_b)["events"]
            max_lag = max(max_lag, a_now - b_now)
            time.sleep(0.1)
        t_end = time.perf_counter()
        if errors:
            raise RuntimeError(f"benchmark client failed: {errors[0]}") from errors[0]
        appended = sum(counts)
        b_at_end = _digest(probe_b)["events"]
        final = _digest(probe_a)
        if final["events"] != base_a + appended:
            raise RuntimeError(f"A holds {final['events'] - base_a} new events, the clients appended {appended}")
        t_caught_up = _wait_digest(palace.b, final["digest"], "throughput", probe_b)
    window = t_end - t0
    return {
        "throughput_clients": clients, "throughput_seconds": window,
        "throughput_appends_per_s": appended / window,
        "throughput_replicated_per_s": appended / (t_caught_up - t0),
        "throughput_b_applied_during_writes_per_s": (b_at_end - base_b) / window,
        "throughput_b_max_lag_events": max_lag,
        "throughput_b_lag_after_writes_s": t_caught_up - t_end,
    }


def _heal(palace: BenchPalace, events: int, say: Say) -> dict[str, float]:
    """Stop B, append on A, restart B on its old port; time from B's start to identical digests."""
    b = palace.b
    assert b.port is not None
    b.stop()
    if b.proc is not None and b.proc.returncode != 0:
        raise RuntimeError(f"palaced b exited {b.proc.returncode} on SIGTERM; its log:\n{b.log_tail()}")
    start = palace.a.call("digest")["events"]
    _append_pipelined(palace.a, events, 20_000_000 + start)
    want = palace.a.call("digest")
    say(f"  B stopped; {events:,} events appended on A (A holds {want['events']:,}); restarting B on port {b.port} "
        "(it redials A's remembered address)")
    t0 = b.spawn(listen=f"127.0.0.1:{b.port}")
    client = b.connect()
    t_ready = time.perf_counter()
    try:
        t_done = _wait_digest(b, want["digest"], "heal", client)
    finally:
        client.close()
    return {"heal_events": events, "heal_s": t_done - t0, "heal_daemon_start_s": t_ready - t0,
            "heal_after_start_s": t_done - t_ready}


def _catch_up(palace: BenchPalace, events: int, say: Say) -> dict[str, float]:
    """Seed A, then a fresh daemon B joins; time from the join reply until B's digest equals A's."""
    appended, seconds = _seed(palace.a, events, say)
    say(f"  seeding: {appended:,} appends in {seconds:.1f} s ({appended / seconds:,.0f}/s, "
        f"{SEED_CLIENTS} clients × {PIPELINE_DEPTH} pipelined)")
    want = palace.a.call("digest")
    b = palace.b
    b.start()
    client = b.connect()
    try:
        say(f"  A holds {want['events']:,} events; a fresh daemon B joins")
        t_joined = palace.join(b)
        t_done = _wait_digest(b, want["digest"], "cold catch-up", client)
    finally:
        client.close()
    sent = palace.settle()
    t_settled = time.perf_counter()
    elapsed = t_done - t_joined
    return {"seed_events": appended, "seed_seconds": seconds, "seed_appends_per_s": appended / seconds,
            "catch_up_events": want["events"], "catch_up_s": elapsed, "catch_up_events_per_s": want["events"] / elapsed,
            "catch_up_events_sent": sent, "catch_up_redundant_events": max(0, sent - want["events"]),
            "catch_up_link_quiet_s": t_settled - t_joined}


def run_replication_bench(*, quick: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run every replication measurement; returns the figures (and prints them unless ``progress`` is off).

    Order: A is seeded once (its figure reported apart), B joins it cold (catch-up), then the A–B
    pair is measured live (wake, throughput) and across B's restart (heal), all on the seeded log.
    """
    say: Say = narrator(progress)
    # --quick is a smoke run (seconds, for tests); its figures are not the ones to report.
    catch_up_events = 2_000 if quick else 100_000
    wake_samples = 30 if quick else 500
    throughput_s = 1.0 if quick else 10.0
    heal_events = 200 if quick else 5_000
    results: dict[str, Any] = {"quick": quick, "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    # A short directory: the Unix socket path must stay under ~107 bytes.
    palace = BenchPalace(Path(tempfile.mkdtemp(prefix="palrep", dir="/tmp")), "bench-replication")
    show_logs = False
    try:
        palace.found()
        say(f"palace bench replication: temporary daemons on loopback under {palace.root}")
        say(f"  seeding A with {catch_up_events:,} events…")
        results.update(_catch_up(palace, catch_up_events, say))
        say(f"  cold catch-up: B joined and held all {results['catch_up_events']:,} events after "
            f"{results['catch_up_s']:.2f} s ({results['catch_up_events_per_s']:,.0f} events/s); A sent "
            f"{results['catch_up_events_sent']:,} events ({results['catch_up_redundant_events']:,} B already held), "
            f"the link was quiet {results['catch_up_link_quiet_s']:.2f} s after the join")

        results.update(_wake_latency(palace, wake_samples))
        say(f"  cross-peer wake (append on A → push on B): p50 {results['wake_p50_ms']:.2f} ms, "
            f"p99 {results['wake_p99_ms']:.2f} ms over {wake_samples} samples "
            f"(durable append on A p50 {results['durable_append_on_a_p50_ms']:.2f} ms)")

        results.update(_throughput(palace, 16, throughput_s))
        say(f"  sustained, 16 clients on A for {results['throughput_seconds']:.1f} s: "
            f"{results['throughput_appends_per_s']:,.0f} appends/s on A; "
            f"{results['throughput_replicated_per_s']:,.0f} events/s replicated to B end to end "
            f"(B applied {results['throughput_b_applied_during_writes_per_s']:,.0f}/s while writes ran, "
            f"max lag {results['throughput_b_max_lag_events']:,} events, caught up "
            f"{results['throughput_b_lag_after_writes_s']:.2f} s after the writes stopped)")

        results.update(_heal(palace, heal_events, say))
        say(f"  heal: B restarted behind by {heal_events:,} events, identical digest after {results['heal_s']:.2f} s "
            f"(process start → API answers {results['heal_daemon_start_s']:.2f} s, then "
            f"{results['heal_after_start_s']:.2f} s to converge)")
    except KeyboardInterrupt:
        say("interrupted: stopping the temporary daemons and removing their directory")
        raise
    except Exception:
        show_logs = progress  # the daemons' side of the failure, before their directory goes
        raise
    finally:
        palace.close(show_logs=show_logs)
        shutil.rmtree(palace.root, ignore_errors=True)
    return judge(results, TARGETS, say if progress else None)
