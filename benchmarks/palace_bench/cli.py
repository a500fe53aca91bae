"""``palacectl bench cli``: what one step of an agent's loop costs through the command line (issue 26).

Owns: the per-command figures the docs report. An agent without MCP runs ``palacectl`` for every
step, so each step pays a whole process start. Against a real palaced on a temporary home (no
network: ``--no-mdns``, loopback only), each loop command — list, append, ack, wait (a match
already there), inbox, task ready, task claim — runs as the console script beside this Python,
the way an agent's shell runs it, and is timed from spawn to exit. Also timed: a bare
interpreter (the floor) and a command that goes through the full command line (``status``), for
comparison. Target: ≤ 60 ms per loop command (p50).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from palacectl.service.host import palacectl_command

from .daemon import BenchDaemon
from .figures import percentile

__all__ = ["run_cli_bench"]

RUNS: Final = 30
TARGET_MS: Final = 60


def _time(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    elapsed = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[-6:])} exited {done.returncode}: {done.stderr.decode(errors='replace')}")
    return elapsed


def _stats(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(samples), 1), "p90_ms": round(percentile(samples, 90), 1)}


def run_cli_bench(*, quick: bool = False, progress: bool = True) -> dict[str, Any]:
    say = (lambda m: (sys.stderr.write(m + "\n"), sys.stderr.flush())) if progress else (lambda m: None)
    runs = 5 if quick else RUNS
    root = Path(tempfile.mkdtemp(prefix="palcli", dir="/tmp"))
    daemon = BenchDaemon(root, "a")
    try:
        daemon.start()
        ctl = [*palacectl_command(), "--home", str(daemon.home)]
        tasks = [daemon.call("task_create", project="bench", from_agent="req", to_agent="bench-agent",
                             goal=f"step {i}", branch="main", base_commit="3f2a9c1", done="ok")["task"]
                 for i in range(runs + 1)]
        target = tasks[0]["id"]  # the request event: each run acks it again (acks are new events)
        claims = iter(t["correlation_id"] for t in tasks)
        commands: dict[str, Callable[[], list[str]]] = {
            "list": lambda: [*ctl, "list", "--limit", "1", "--json"],
            "append": lambda: [*ctl, "append", "--type", "note", "--stream", "project/bench", "--room", "general",
                               "--from-agent", "bench-agent", "--body", "a step"],
            "ack": lambda: [*ctl, "ack", target, "--from-agent", "bench-agent", "--status", "claimed"],
            "wait": lambda: [*ctl, "wait", "--type", "note", "--timeout-ms", "1000"],
            "inbox": lambda: [*ctl, "inbox", "--agent", "bench-agent", "--limit", "5"],
            "task ready": lambda: [*ctl, "task", "ready", "--agent", "bench-agent"],
            "task claim": lambda: [*ctl, "task", "claim", next(claims), "--agent", "bench-agent"],
            "status (full command line)": lambda: [*ctl, "status"],
        }
        figures: dict[str, dict[str, float]] = {}
        floor = [_time([sys.executable, "-c", "pass"]) for _ in range(runs)]
        figures["python -c pass (the floor)"] = _stats(floor)
        for name, argv in commands.items():
            _time(argv())  # warm: byte code and page cache, as in a running loop
            figures[name] = _stats([_time(argv()) for _ in range(runs)])
    finally:
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)
    loop = [name for name in commands if not name.startswith("status")]
    worst = max(figures[name]["p50_ms"] for name in loop)
    result = {"quick": quick, "runs": runs, "python": sys.version.split()[0], "commands": figures,
              "worst_loop_p50_ms": worst, "target_ms": TARGET_MS}
    width = max(len(n) for n in figures)
    for name, f in figures.items():
        say(f"{name:<{width}}  p50 {f['p50_ms']:6.1f} ms  p90 {f['p90_ms']:6.1f} ms")
    say(f"slowest loop command p50 {worst:.1f} ms (target <= {TARGET_MS} ms), {runs} runs each")
    return result
