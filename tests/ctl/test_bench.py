"""`palacectl bench --quick` runs end to end against its own temporary daemon and reports every
figure the README quotes (the figures themselves are measured with the full run, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIGURES = ["append_1_client_per_s", "append_16_clients_per_s", "wake_p50_ms", "wake_p99_ms", "list_p50_ms",
           "list_p99_ms", "rss_100_watchers_mb", "cli_list_process_ms", "durable_append_p50_ms"]


@pytest.mark.slow
def test_quick_bench_reports_every_figure_and_cleans_up(tmp_path):
    before = {p.name for p in Path("/tmp").glob("palbench*")}
    proc = subprocess.run([sys.executable, "-m", "palacectl", "bench", "--quick", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["quick"] is True and result["list_log_events"] == 20_000
    for name in FIGURES:
        assert result[name] > 0, name
    assert result["wake_p50_ms"] <= result["wake_p99_ms"]
    assert set(result["targets"]) >= {"append_1_client_per_s", "wake_p50_ms", "list_p50_ms", "rss_100_watchers_mb"}
    after = {p.name for p in Path("/tmp").glob("palbench*")}
    assert after <= before, "the temporary daemon's home was left behind"


@pytest.mark.slow
def test_quick_lease_bench_reports_every_phase_and_cleans_up():
    """`palacectl bench leases --quick`: the busy project, the worst leases and the shared flood,
    each with its figures (the worst leases are taken, not refused: the bench measures them)."""
    before = {p.name for p in Path("/tmp").glob("pallease*")}
    proc = subprocess.run([sys.executable, "-m", "palacectl", "bench", "leases", "--quick", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["honest"]["check_1_path"]["n"] > 0 and result["honest"]["check_20_paths"]["p99_ms"] > 0
    hostile, flood = result["hostile"], result["flood"]
    assert hostile["hostile_leases_taken"] == 9 * 2 and hostile["slowest_op_ms"] > 0
    assert flood["shared_worst_leases_standing"] == 9 * 2
    assert flood["attackers_own_exclusive_acquire"]["n"] > 0 and flood["ping"]["n"] > 0
    assert {p.name for p in Path("/tmp").glob("pallease*")} <= before


def test_quick_mcp_bench_reports_its_figures():
    """`palacectl bench mcp --quick`: start-up figures of the MCP server (measured, not asserted)."""
    proc = subprocess.run([sys.executable, "-m", "palacectl", "bench", "mcp", "--quick", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["runs"] == 3 and result["tools_list_bytes"] > 1000
    for name in ("first_ready_ms", "warm_initialize_p50_ms", "warm_ready_p50_ms", "warm_ready_p90_ms"):
        assert result[name] > 0, name
    assert result["targets"] == {"warm_ready_ms": 150, "cold_ready_ms": 400}


def test_quick_cli_bench_times_every_loop_command_against_a_real_daemon():
    """`palacectl bench cli --quick`: each loop command as a process (measured, not asserted)."""
    before = {p.name for p in Path("/tmp").glob("palcli*")}
    proc = subprocess.run([sys.executable, "-m", "palacectl", "bench", "cli", "--quick", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result["commands"]) == {"python -c pass (the floor)", "list", "append", "ack", "wait", "inbox",
                                       "task ready", "task claim", "status (full command line)"}
    assert all(f["p50_ms"] > 0 and f["p90_ms"] >= f["p50_ms"] for f in result["commands"].values())
    assert result["target_ms"] == 60 and result["worst_loop_p50_ms"] > 0
    assert {p.name for p in Path("/tmp").glob("palcli*")} <= before
