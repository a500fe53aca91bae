"""``palacectl bench usage``: what a ``usage`` call costs on a palace holding many usage reports
(issue 43 §1, finding 4: 100,000 tiny reports stalled the daemon 2–3 s on every call, and a worker
with budgets makes one before each look at the queue).

Owns: the usage figures docs/benchmarks.md reports. One real ``palaced`` on a temporary home
(loopback only, mDNS off), driven through its Unix socket:

* **the palace**: ``reports`` tiny usage reports (default 100,000) on claimed tasks, the way runs
  write them: ``REPORTS_PER_TASK`` per task (so every one counts), each task requested and claimed
  by one of ``AGENTS`` agents, the reports of several machines and models; everything through
  ``append_many`` (``BULK`` a request) for speed. All of it is written today (the daemon dates
  events itself), so the totals hold one day per group;
* **the calls**: ``usage`` asked ``calls`` times each way a client asks it: a worker before it
  looks at the queue (by agent, with its agent's daily and the palace's monthly budgets), a run
  before it starts (by task, with a task budget: every task's total is read), and the Usage page
  (by task over all time, by agent since today, by day); p50 / p99 / max of the round trip.

No benchmark imports palaced.
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from palacectl.client import Client

from .daemon import BenchDaemon
from .figures import narrator

__all__ = ["run_usage_bench"]

#: the reports written, unless ``--reports`` says otherwise
DEFAULT_REPORTS: Final = 100_000
# Why 10: a task is run a few times (a retry, a correction); far under the 256 reports of a task
# that count, so every report written counts.
REPORTS_PER_TASK: Final = 10
AGENTS: Final = 20
MACHINES: Final = ("mac", "linux", "ci-1", "ci-2")
MODELS: Final = ("claude-opus-4-5", "gpt-5-codex", "gemini-2.5-pro", None)
# Why 1,000: append_many's bound (palace_proto.appends.MAX_APPEND_MANY).
BULK: Final = 1000
DEFAULT_CALLS: Final = 40

Say = Callable[[str], None]


def _percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {"p50_ms": at(0.50), "p99_ms": at(0.99), "max_ms": round(ordered[-1], 3),
            "mean_ms": round(statistics.fmean(ordered), 3), "n": len(ordered)}


def _bulk(client: Client, events: list[dict[str, Any]]) -> None:
    for start in range(0, len(events), BULK):
        client.call("append_many", events=events[start:start + BULK])


def _fill(client: Client, reports: int, say: Say) -> dict[str, Any]:
    """The tasks, their claims and ``reports`` usage reports; how long each part took."""
    tasks = [f"task_bench_usage_{n:06d}" for n in range((reports + REPORTS_PER_TASK - 1) // REPORTS_PER_TASK)]
    claimant = {cid: f"agent-{n % AGENTS:02d}" for n, cid in enumerate(tasks)}
    t0 = time.perf_counter()
    _bulk(client, [{"type": "task.request", "stream": "project/bench", "room": "delegation", "from_agent": "boss",
                    "to_agent": claimant[cid], "correlation_id": cid, "status": "open", "body": f"run {cid}"}
                   for cid in tasks])
    _bulk(client, [{"type": "event.ack", "stream": "project/bench", "room": "delegation", "from_agent": claimant[cid],
                    "correlation_id": cid, "status": "claimed", "body": f"{claimant[cid]} claims {cid}"}
                   for cid in tasks])
    tasks_s = time.perf_counter() - t0
    say(f"  {len(tasks):,} tasks requested and claimed in {tasks_s:.1f} s")
    t0 = time.perf_counter()
    written = 0
    events: list[dict[str, Any]] = []
    for n in range(reports):
        cid = tasks[n % len(tasks)]
        cost = None if n % 7 == 0 else round(0.0001 * (n % 50 + 1), 6)
        events.append({"type": "usage.report", "stream": "project/bench", "room": "delegation",
                       "from_agent": claimant[cid], "correlation_id": cid, "body": "usage",
                       "metadata": {"runner": "custom", "tokens_in": 100 + n % 900, "tokens_out": 10 + n % 90,
                                    "cost_usd": cost, "model": MODELS[n % len(MODELS)], "task_id": cid,
                                    "machine": MACHINES[n % len(MACHINES)]}})
        if len(events) == BULK:
            client.call("append_many", events=events)
            written += len(events)
            events = []
            if written % 20_000 == 0:
                say(f"  {written:,} reports written ({written / (time.perf_counter() - t0):,.0f}/s)")
    if events:
        client.call("append_many", events=events)
    reports_s = time.perf_counter() - t0
    say(f"  {reports:,} reports written in {reports_s:.1f} s ({reports / reports_s:,.0f}/s)")
    return {"tasks": len(tasks), "tasks_s": round(tasks_s, 2), "reports": reports, "reports_s": round(reports_s, 2),
            "reports_per_s": round(reports / reports_s)}


def _calls(client: Client, calls: int, say: Say) -> dict[str, Any]:
    today = time.strftime("%Y-%m-%d", time.gmtime())
    ways: dict[str, dict[str, Any]] = {
        "worker_by_agent_with_budgets": {"by": "agent", "budgets": {"agent_daily_usd": 1000.0,
                                                                    "palace_monthly_usd": 100_000.0}},
        "launch_by_task_with_task_budget": {"by": "task", "budgets": {"task_usd": 1000.0}},
        "page_by_task_all": {"by": "task"},
        "page_by_agent_today": {"by": "agent", "since": today},
        "by_day": {"by": "day"},
    }
    figures: dict[str, Any] = {}
    for name, args in ways.items():
        samples = []
        answer: Any = None
        for _ in range(calls):
            t0 = time.perf_counter()
            answer = client.call("usage", **args)
            samples.append((time.perf_counter() - t0) * 1000)
        figures[name] = {**_percentiles(samples), "groups": len(answer["totals"]), "reports": answer["reports"],
                         "flagged": answer.get("flagged")}
        say(f"  usage {name}: p50 {figures[name]['p50_ms']:.1f} ms  p99 {figures[name]['p99_ms']:.1f} ms"
            f"  ({figures[name]['groups']:,} groups, {answer['reports']:,} reports summed)")
    return figures


def run_usage_bench(*, quick: bool = False, progress: bool = True, reports: int | None = None,
                    calls: int | None = None) -> dict[str, Any]:
    """Fill a temporary daemon with usage reports and time ``usage``; returns the figures
    (printing them unless ``progress`` is off)."""
    say: Say = narrator(progress)
    reports = reports if reports is not None else (5_000 if quick else DEFAULT_REPORTS)
    calls = calls if calls is not None else (10 if quick else DEFAULT_CALLS)
    root = Path(tempfile.mkdtemp(prefix="palusage", dir="/tmp"))  # short: socket paths stay under ~107 bytes
    results: dict[str, Any] = {"quick": quick, "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    daemon = BenchDaemon(root, "d0")
    # The measuring process's collector would otherwise pause it mid-call: not the daemon's time.
    gc.disable()
    try:
        say(f"palace bench usage: a temporary daemon on loopback under {root}")
        daemon.start()
        with daemon.connect() as client:
            say(f"writing {reports:,} usage reports on claimed tasks:")
            results["fill"] = _fill(client, reports, say)
            say(f"timing usage ({calls} calls each way):")
            results["usage"] = _calls(client, calls, say)
        results["rss_mb"] = round(daemon.rss_mb(), 1)
    except KeyboardInterrupt:
        say("interrupted: stopping the temporary daemon and removing its directory")
        raise
    finally:
        gc.enable()
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)
    return results
