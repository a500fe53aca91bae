"""Benchmark clients, each in a process of its own: started, lined up, timed and stopped.

Owns: running a benchmark's clients as separate OS processes (``run_client_processes``), so a
figure measures the daemon and not one interpreter's GIL shared by every client; the palace
workloads those clients run (durable appends; the paced append → wake probe, a writer and a
watcher); and the small pipe protocol of that probe, which ``benchmarks/vs_jetstream.py`` reuses
for its JetStream clients so both sides are measured the same way.

How a client runs: its *job* is a pair (``prepare``, argument). In its own process the client
calls ``prepare(argument)``, which connects (and subscribes) and returns the timed work as a
callable; once every client has prepared, all start together (a barrier), and each reports
when its work started and finished (``time.perf_counter``: CLOCK_MONOTONIC on Linux, one clock
for every process on the machine) and what it returned. Jobs must pickle: ``prepare`` is a
module-level function, its argument plain data (a ``multiprocessing`` pipe end is allowed).

Must not import palaced (no benchmark does); the clients use ``palacectl.client``.
"""

from __future__ import annotations

import multiprocessing
import queue
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final

from palacectl.client import Client

__all__ = [
    "AGENTS", "WAKE_TIMEOUT_S", "AppendJob", "ClientRun", "ClientsFailed", "FleetEvents", "NoteEvents", "WakeJob",
    "await_wake", "bench_event", "durable_appends", "paced_wake_samples", "rate", "report_wake",
    "run_client_processes", "sample_body", "sample_index", "wake_watcher", "wake_writer",
]

AGENTS: Final = [f"agent-{i:03d}" for i in range(100)]
# Why 60 s: spawning a process and importing the client takes well under a second; a minute
# only bounds a client that hangs while connecting, so the run ends with a message.
PREPARE_TIMEOUT_S: Final = 60.0
# Why 10 s: a wake on loopback takes milliseconds; ten seconds without one is a lost event.
WAKE_TIMEOUT_S: Final = 10.0
# Why 0.5 s: how often the parent looks up from its clients (dead clients, progress, Ctrl-C).
POLL_S: Final = 0.5
# Why 5 s: a client that finished its work exits at once; one that does not is stopped.
EXIT_GRACE_S: Final = 5.0
# Why "spawn": a fresh interpreter per client on every platform (fork would copy the parent's
# state and threads; macOS and Windows have no safe fork anyway).
START_METHOD: Final = "spawn"


class ClientsFailed(RuntimeError):
    """A benchmark client failed, hung or died; the message says which and why."""


@dataclass(frozen=True)
class ClientRun:
    """What one client process reports: when its timed work ran, and what it returned."""

    started: float
    finished: float
    result: Any


def rate(runs: Sequence[ClientRun], operations: int) -> float:
    """Operations per second over the span from the first client's start to the last one's end."""
    return operations / (max(r.finished for r in runs) - min(r.started for r in runs))


def _client_main(index: int, prepare: Callable[[Any], Callable[[], Any]], arg: Any,
                 barrier: Any, results: Any) -> None:
    """Body of one client process: prepare, wait for the others, run the timed work, report."""
    # Ctrl-C reaches the whole process group; the parent handles it and stops us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        work = prepare(arg)
        barrier.wait(PREPARE_TIMEOUT_S)
        started = time.perf_counter()
        result = work()
        finished = time.perf_counter()
    except threading.BrokenBarrierError:
        results.put((index, None, "stopped: another client failed to start"))
        return
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        barrier.abort()
        results.put((index, None, f"{type(exc).__name__}: {exc}"))
        return
    results.put((index, ClientRun(started, finished, result), None))


def run_client_processes(jobs: Sequence[tuple[Callable[[Any], Callable[[], Any]], Any]], *, timeout_s: float,
                         poll: Callable[[], None] | None = None) -> list[ClientRun]:
    """Run each job in a process of its own, all starting their timed work together.

    Args:
        jobs: (``prepare``, argument) pairs; see the module docstring.
        timeout_s: the longest the timed work may take, once every client has prepared.
        poll: called about every ``POLL_S`` while the clients work (progress lines).

    Returns:
        One ``ClientRun`` per job, in the order of ``jobs``.

    Raises:
        ClientsFailed: a client raised, died or ran past ``timeout_s``; every client is stopped.

    Resource handling: every process is joined before this returns or raises, also on Ctrl-C;
    one that does not exit on its own within ``EXIT_GRACE_S`` is terminated, then killed.
    """
    ctx = multiprocessing.get_context(START_METHOD)
    barrier = ctx.Barrier(len(jobs) + 1)
    results = ctx.Queue()
    procs = [ctx.Process(target=_client_main, args=(k, prepare, arg, barrier, results), daemon=True,
                         name=f"palace-bench-client-{k}")
             for k, (prepare, arg) in enumerate(jobs)]
    done: dict[int, ClientRun] = {}
    finished_cleanly = False
    try:
        for p in procs:
            p.start()
        try:
            barrier.wait(PREPARE_TIMEOUT_S)
        except threading.BrokenBarrierError:
            raise ClientsFailed(_first_error(results) or
                                f"a benchmark client did not start within {PREPARE_TIMEOUT_S:.0f} s") from None
        deadline = time.monotonic() + timeout_s
        while len(done) < len(jobs):
            try:
                k, run, error = results.get(timeout=POLL_S)
            except queue.Empty:
                if poll is not None:
                    poll()
                _check_alive(procs, done, results)
                if time.monotonic() > deadline:
                    raise ClientsFailed(f"{len(jobs) - len(done)} benchmark client(s) still running after "
                                        f"{timeout_s:.0f} s") from None
                continue
            if error is not None:
                raise ClientsFailed(f"benchmark client {k} failed: {error}")
            done[k] = run
        finished_cleanly = True
        return [done[k] for k in range(len(jobs))]
    finally:
        _stop(procs, graceful=finished_cleanly)
        results.close()


def _first_error(results: Any) -> str | None:
    """The first failure a client reported, if one arrives soon (after a broken barrier)."""
    deadline = time.monotonic() + EXIT_GRACE_S
    while time.monotonic() < deadline:
        try:
            k, _, error = results.get(timeout=0.2)
        except queue.Empty:
            continue
        if error is not None and not error.startswith("stopped:"):
            return f"benchmark client {k} failed: {error}"
    return None


def _check_alive(procs: Sequence[Any], done: dict[int, ClientRun], results: Any) -> None:
    """Raise if a client exited without reporting (killed, out of memory, a crash in C)."""
    for k, p in enumerate(procs):
        if k not in done and p.exitcode is not None:
            # It may have reported just before exiting: look once more before calling it dead.
            try:
                k2, run, error = results.get(timeout=0.2)
            except queue.Empty:
                raise ClientsFailed(f"benchmark client {k} exited ({p.exitcode}) without reporting") from None
            if error is not None:
                raise ClientsFailed(f"benchmark client {k2} failed: {error}")
            done[k2] = run


def _stop(procs: Sequence[Any], *, graceful: bool) -> None:
    """Join every client process; terminate (then kill) those that do not exit by themselves."""
    if graceful:
        deadline = time.monotonic() + EXIT_GRACE_S
        for p in procs:
            if p.pid is not None:
                p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.pid is not None and p.is_alive():
            p.terminate()
    for p in procs:
        if p.pid is None:
            continue
        p.join(EXIT_GRACE_S)
        if p.is_alive():
            p.kill()
            p.join()


# -- the workloads -----------------------------------------------------------------------------


def bench_event(i: int, rng: random.Random, *, room: str = "delegation", label: str = "benchmark") -> dict[str, Any]:
    """The benchmark's event: 5% broadcasts, the rest spread over 100 agents (a busy fleet's inbox)."""
    to = "*" if rng.random() < 0.05 else rng.choice(AGENTS)
    return {"type": "task.reply", "stream": "project/bench", "room": room, "from_agent": "bench-writer",
            "to_agent": to, "correlation_id": f"task_bench_{i % 1000}", "status": "ready",
            "body": f"{label} event {i}: " + "x" * 120}


def sample_body(i: int, size: int) -> str:
    """A body of exactly ``size`` ASCII characters that starts with the sample's number."""
    head = f"{i:08d} "
    return head + "x" * max(0, size - len(head))


def sample_index(body: str | bytes) -> int:
    """The sample number ``sample_body`` put at the start of a body."""
    return int(body[:8])


class FleetEvents:
    """``bench_event`` with a random generator of the client's own (picklable; seeded in the client)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._rng: random.Random | None = None

    def __call__(self, i: int) -> dict[str, Any]:
        if self._rng is None:
            self._rng = random.Random(self.seed)
        return bench_event(i, self._rng)


@dataclass(frozen=True)
class NoteEvents:
    """A note to one agent with a body of ``body_bytes`` (the comparison with JetStream: same payload),
    appended asking for the ``reply`` shape given (``"slim"``: id, seq, origin_seq and created_at, as
    the floor and JetStream answer; None: the whole event)."""

    body_bytes: int
    to_agent: str = "bench-reader"
    reply: str | None = None

    def __call__(self, i: int) -> dict[str, Any]:
        event = {"type": "note", "stream": "bench", "room": "throughput", "from_agent": "bench-writer",
                 "to_agent": self.to_agent, "body": sample_body(i, self.body_bytes)}
        if self.reply is not None:
            event["reply"] = self.reply
        return event


@dataclass(frozen=True)
class AppendJob:
    """``count`` durable appends, request after reply, numbered from ``first``."""

    home: Path
    count: int
    first: int
    events: Callable[[int], dict[str, Any]]


def durable_appends(job: AppendJob) -> Callable[[], int]:
    """Prepare: connect. Work: append ``job.count`` events one after the other (each acked once durable)."""
    client = Client(job.home, client_name="palacectl-bench")
    client.connect()

    def work() -> int:
        try:
            for i in range(job.first, job.first + job.count):
                client.call("append", **job.events(i))
        finally:
            client.close()
        return job.count

    return work


# -- the append → wake probe -------------------------------------------------------------------
#
# A writer process appends sample i and, once acked, waits on a pipe until the watcher process
# (a different connection, possibly to a different daemon) reports that it was woken with sample
# i and when. One sample at a time: the next append is sent only after the previous wake, so no
# sample waits behind another. The latency is the watcher's wake time minus the writer's send
# time, both read from the same monotonic clock. The first ``warmup`` samples are not counted.


def report_wake(pipe: Connection, index: int, woken_at: float) -> None:
    """Watcher side: sample ``index`` woke us at ``woken_at``."""
    pipe.send((index, woken_at))


def await_wake(pipe: Connection, index: int) -> float:
    """Writer side: when the watcher was woken by sample ``index`` (raises if it was not)."""
    if not pipe.poll(WAKE_TIMEOUT_S):
        raise RuntimeError(f"the watcher was not woken by sample {index} within {WAKE_TIMEOUT_S:.0f} s")
    seen, woken_at = pipe.recv()
    if seen != index:
        raise RuntimeError(f"the watcher was woken by sample {seen} while sample {index} was expected")
    return woken_at


@dataclass(frozen=True)
class WakeJob:
    """One side of the probe: the daemon (its home) this side talks to, and the pipe to the other side."""

    home: Path
    samples: int
    warmup: int
    body_bytes: int
    agent: str
    pipe: Connection
    #: the writer's ``append`` reply shape (``NoteEvents.reply``)
    reply: str | None = None


def wake_watcher(job: WakeJob) -> Callable[[], int]:
    """Prepare: subscribe to ``job.agent`` from the tip. Work: report each woken sample on the pipe."""
    client = Client(job.home, client_name="palacectl-bench")
    client.connect()
    client.send("subscribe", to_agents=[job.agent], start="tip", agent=job.agent)
    started = client.receive(timeout=WAKE_TIMEOUT_S)
    if started.get("push") != "started":
        client.close()
        raise RuntimeError(f"subscribe failed: {started.get('error', started)}")

    def work() -> int:
        seen = 0
        try:
            while seen < job.samples:
                push = client.receive(timeout=WAKE_TIMEOUT_S)
                woken_at = time.perf_counter()
                if push.get("push") != "batch":
                    continue  # a cursor push: progress over events that are not ours
                for event in push["events"]:
                    report_wake(job.pipe, sample_index(event["body"]), woken_at)
                    seen += 1
        finally:
            client.close()
        return seen

    return work


def paced_wake_samples(append: Callable[[int], object], pipe: Connection, samples: int,
                       warmup: int) -> dict[str, list[float]]:
    """Writer side of the probe, for any system: ``append(i)`` writes sample ``i`` and returns once
    it is acked as durable; then wait for the watcher's wake. Returns the wake latency (send → wake)
    and the ack latency (send → ack) of each sample after the warm-up, in ms."""
    wake_ms: list[float] = []
    ack_ms: list[float] = []
    for i in range(samples):
        sent_at = time.perf_counter()
        append(i)
        acked_at = time.perf_counter()
        woken_at = await_wake(pipe, i)
        if i >= warmup:
            wake_ms.append((woken_at - sent_at) * 1000)
            ack_ms.append((acked_at - sent_at) * 1000)
    return {"wake_ms": wake_ms, "ack_ms": ack_ms}


def wake_writer(job: WakeJob) -> Callable[[], dict[str, list[float]]]:
    """Prepare: connect. Work: the paced samples; returns wake and ack latencies in ms (warm-up dropped)."""
    client = Client(job.home, client_name="palacectl-bench")
    client.connect()

    shape = {"reply": job.reply} if job.reply is not None else {}

    def append(i: int) -> None:
        client.call("append", type="note", stream="bench", room="wake", from_agent="bench-writer",
                    to_agent=job.agent, body=sample_body(i, job.body_bytes), **shape)

    def work() -> dict[str, list[float]]:
        try:
            return paced_wake_samples(append, job.pipe, job.samples, job.warmup)
        finally:
            client.close()

    return work
