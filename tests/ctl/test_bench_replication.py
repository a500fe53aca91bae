"""`palacectl bench replication --quick` runs end to end against its own temporary daemons, reports
every figure the README quotes, and leaves no daemon or directory behind (the figures themselves
are measured with the full run, not asserted)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import palaced_pids_under

FIGURES = [
    "seed_events", "seed_seconds", "seed_appends_per_s", "catch_up_events", "catch_up_s", "catch_up_events_per_s",
    "catch_up_events_sent", "catch_up_link_quiet_s",
    "wake_p50_ms", "wake_p99_ms", "wake_max_ms", "wake_samples", "durable_append_on_a_p50_ms",
    "throughput_clients", "throughput_seconds", "throughput_appends_per_s", "throughput_replicated_per_s",
    "throughput_b_applied_during_writes_per_s", "heal_events", "heal_s", "heal_daemon_start_s",
    "heal_after_start_s",
]
# Figures that may legitimately be zero: B never fell behind, A sent nothing twice.
MAY_BE_ZERO = ["throughput_b_max_lag_events", "throughput_b_lag_after_writes_s", "catch_up_redundant_events"]
TIMEOUT_S = 180


@pytest.mark.slow
def test_quick_replication_bench_reports_every_figure_and_cleans_up():
    dirs_before = {p.name for p in Path("/tmp").glob("palrep*")}
    daemons_before = palaced_pids_under("/tmp/palrep")
    proc = subprocess.Popen([sys.executable, "-m", "palacectl", "bench", "replication", "--quick", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        # Ctrl-C: the benchmark stops the daemons it started (each in its own session) and exits.
        proc.send_signal(signal.SIGINT)
        try:
            stdout, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        pytest.fail(f"`palacectl bench replication --quick` took over {TIMEOUT_S} s; stderr:\n{stderr}")
    assert proc.returncode == 0, stderr
    result = json.loads(stdout)
    assert result["quick"] is True and result["catch_up_events"] >= 2_000
    for name in FIGURES:
        assert isinstance(result[name], (int, float)) and result[name] > 0, (name, result.get(name))
    for name in MAY_BE_ZERO:
        assert isinstance(result[name], (int, float)) and result[name] >= 0, (name, result.get(name))
    unlisted = set(result) - set(FIGURES) - set(MAY_BE_ZERO) - {"quick", "python", "targets"}
    assert unlisted == {"cpus"}, f"figures this test does not check: {unlisted - {'cpus'}}"
    assert result["wake_p50_ms"] <= result["wake_p99_ms"] <= result["wake_max_ms"]
    assert result["heal_daemon_start_s"] < result["heal_s"]
    assert result["catch_up_events_sent"] >= result["catch_up_events"]
    assert set(result["targets"]) == {"wake_p50_ms", "wake_p99_ms", "catch_up_s", "heal_s"}
    assert all(isinstance(t["met"], bool) for t in result["targets"].values())
    assert palaced_pids_under("/tmp/palrep") <= daemons_before, "a benchmark daemon was left running"
    assert {p.name for p in Path("/tmp").glob("palrep*")} <= dirs_before, "the benchmark's directory was left behind"
