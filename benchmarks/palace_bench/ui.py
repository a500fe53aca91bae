"""``palacectl bench ui``: the dashboard on a big palace — how long each page's data takes.

Owns: the figures the README gives for ``palacectl ui`` on a log of a million events. A temporary
daemon (``daemon.BenchDaemon``: mDNS off, loopback only) joins a palace of its own, gets a
few hundred tasks with claims, deliveries and dependencies, a few leases and a question for a
person, and is then filled to ``events`` events by 16 client processes (``one_daemon._fill``, the
same fill as ``palacectl bench``). A real ``palacectl ui`` process then serves it, and each
route the page calls is timed over HTTP as the browser calls it (p50/p99 of repeated requests
on one keep-alive connection): Now, a timeline page (newest, a page deep in the log through the
cursor, a text search), an event with its signature checked, the task board and a task, the
fleet and the leases; and the live path, an append to its frame on ``/logstream/stream``.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from palacectl.client import Client

from .daemon import BenchDaemon
from .figures import narrator, percentile
from .one_daemon import _fill

__all__ = ["run_ui_bench"]

DEFAULT_EVENTS: Final = 1_000_000
QUICK_EVENTS: Final = 5_000
#: Why 300: a busy palace's recent tasks (the board shows the newest 500).
TASKS: Final = 300
#: --quick is a smoke run (for tests), not for figures.
QUICK_TASKS: Final = 15
START_TIMEOUT_S: Final = 30.0


def _seed_work(home: Path, tasks: int) -> str:
    """Tasks (every third claimed, every fifth delivered, some waiting on others), leases, a
    question for a person; returns one task's correlation id."""
    first = ""
    with Client(home, client_name="palacectl-bench") as client:
        for i in range(tasks):
            blocked = [first] if i % 7 == 6 and first else None
            created = client.call("task_create", project="bench", from_agent="bench-lead", to_agent=f"agent-{i % 20:03d}",
                                  goal=f"Bench task {i}: make the orders faster", branch="main", base_commit="abcdef1",
                                  done="tests pass", blocked_by=blocked)
            cid = created["task"]["correlation_id"]
            first = first or cid
            if i % 3 == 0 and not blocked:
                client.call("task_claim", correlation_id=cid, agent=f"agent-{i % 20:03d}")
                if i % 5 == 0:
                    client.call("patch_submit", from_agent=f"agent-{i % 20:03d}", correlation_id=cid,
                                content=f"diff --git a/f{i} b/f{i}\n--- a/f{i}\n+++ b/f{i}\n@@ -1 +1 @@\n-a\n+b\n")
        for i in range(10):
            client.call("lease_acquire", agent=f"agent-{i:03d}", project="bench", patterns=[f"src/part{i}/**"], ttl_s="2h")
        client.call("append", type="question", stream="project/bench", room="delegation", from_agent="agent-001",
                    to_agent="human:bench", body="May I merge the orders branch?")
    return first


class _Dashboard:
    """A ``palacectl ui`` process on the bench daemon's home, and one keep-alive connection to it."""

    def __init__(self, home: Path, root: Path) -> None:
        self.log = open(root / "ui.log", "wb")
        env = {k: v for k, v in os.environ.items() if k != "PALACE_HOME"}
        self.proc = subprocess.Popen([sys.executable, "-m", "palacectl", "--home", str(home), "ui", "--no-browser",
                                      "--as", "bench"], stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL,
                                     env=env, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                info = json.loads((home / "ui.json").read_text())
                if info.get("pid") == self.proc.pid:
                    break
            except (OSError, ValueError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"palacectl ui did not start; see {root / 'ui.log'}")
            time.sleep(0.05)
        self.port, self.secret = info["port"], info["secret"]
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def get(self, path: str) -> Any:
        self.conn.request("GET", path, headers={"Authorization": f"Bearer {self.secret}"})
        response = self.conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status} {body[:300]!r}")
        return json.loads(body)

    def stop(self) -> None:
        self.conn.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def _time(fetch: Callable[[], Any], samples: int) -> dict[str, float]:
    fetch()  # warm: the first request after the fill also warms SQLite's page cache
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        fetch()
        times.append((time.perf_counter() - t0) * 1000)
    return {"p50_ms": percentile(times, 50), "p99_ms": percentile(times, 99)}


def _live_frames(ui: _Dashboard, home: Path, samples: int) -> dict[str, float]:
    """An append (through the daemon's API) to its frame on an open event stream."""
    sock = socket.create_connection(("127.0.0.1", ui.port), timeout=30)
    sock.sendall(f"GET /logstream/stream?to_agent=bench-live HTTP/1.1\r\nHost: 127.0.0.1:{ui.port}\r\n"
                 f"Authorization: Bearer {ui.secret}\r\n\r\n".encode())
    buffer = b""
    while b"retry:" not in buffer:
        buffer += sock.recv(65536)
    times = []
    with Client(home, client_name="palacectl-bench") as writer:
        for i in range(samples):
            marker = f"live-{i}-{time.monotonic_ns()}".encode()
            t0 = time.perf_counter()
            writer.call("append", type="note", stream="bench", room="live", from_agent="bench-writer",
                        to_agent="bench-live", body=marker.decode())
            buffer = b""
            while marker not in buffer:
                buffer += sock.recv(65536)
            times.append((time.perf_counter() - t0) * 1000)
    sock.close()
    return {"p50_ms": percentile(times, 50), "p99_ms": percentile(times, 99)}


def run_ui_bench(*, quick: bool = False, progress: bool = True, events: int | None = None) -> dict[str, Any]:
    """Fill a temporary palace and time the dashboard's routes on it; returns the figures."""
    say: Callable[[str], None] = narrator(progress)
    total = events or (QUICK_EVENTS if quick else DEFAULT_EVENTS)
    samples = 5 if quick else 30
    root = Path(tempfile.mkdtemp(prefix="palbench", dir="/tmp"))  # short: socket paths stay < 107 bytes
    daemon = BenchDaemon(root, "a")
    results: dict[str, Any] = {"quick": quick, "events": total, "cpus": os.cpu_count()}
    ui: _Dashboard | None = None
    try:
        daemon.start()
        with Client(daemon.home) as client:
            client.call("init", name="bench", daemon_name="bench")
        tasks = QUICK_TASKS if quick else TASKS
        say(f"palace bench ui: seeding {tasks} tasks, then filling the log to {total:,} events…")
        task = _seed_work(daemon.home, tasks)
        results["fill_seconds"] = round(_fill(daemon.home, total, say), 1)
        with Client(daemon.home) as client:
            have = client.call("status")["events"]
            middle = client.call("export_page", after_seq=have // 2, limit=1)["events"][0]["id"]
            newest = client.call("list", order="desc", limit=1)["events"][0]["id"]
        results["events"] = have
        ui = _Dashboard(daemon.home, root)
        routes = {
            "now": "/api/now",
            "timeline": "/api/events?limit=50",
            "timeline_deep_page": f"/api/events?limit=50&before={middle}",
            "timeline_filtered": "/api/events?limit=50&to_agent=agent-042&type=task.reply",
            "timeline_text": "/api/events?limit=50&text=question+merge",
            "event_with_proof": f"/api/event/{newest}",
            "tasks": "/api/tasks",
            "task": f"/api/task/{task}",
            "fleet": "/api/fleet",
            "leases": "/api/leases",
        }
        for name, path in routes.items():
            figures = _time(functools.partial(ui.get, path), samples)
            results[f"{name}_p50_ms"], results[f"{name}_p99_ms"] = round(figures["p50_ms"], 1), round(figures["p99_ms"], 1)
            say(f"  {name:<20} {path[:60]:<60} p50 {figures['p50_ms']:8.1f} ms   p99 {figures['p99_ms']:8.1f} ms")
        live = _live_frames(ui, daemon.home, samples * 3)
        results["live_frame_p50_ms"], results["live_frame_p99_ms"] = round(live["p50_ms"], 2), round(live["p99_ms"], 2)
        say(f"  append → its frame on /logstream/stream: p50 {live['p50_ms']:.2f} ms   p99 {live['p99_ms']:.2f} ms")
    finally:
        if ui is not None:
            ui.stop()
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)
    return results
