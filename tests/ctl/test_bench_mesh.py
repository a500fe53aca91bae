"""`palacectl bench mesh --quick` runs end to end against its own temporary daemons, reports every
figure the README quotes, and leaves no daemon or directory behind (the figures themselves are
measured with the full run and written in the README, not asserted; the behaviour they measure
is asserted by tests/e2e/test_backlog_convergence.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import palaced_pids_under

TIMEOUT_S = 240


@pytest.mark.slow
def test_quick_mesh_bench_reports_every_figure_and_cleans_up():
    result = subprocess.run([sys.executable, "-m", "palacectl", "bench", "mesh", "--quick", "--json"],
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["quick"] is True and figures["backlog_events"] == 500
    for count in (2, 3):
        assert figures[f"heal_{count}_daemons_s"] > 0, figures
        assert figures[f"heal_{count}_daemons_events"] >= count * 500, figures
        assert figures[f"heal_{count}_daemons_sent_per_lacked"] >= 0.99, figures  # every lacked event crossed a link
    assert figures["mesh_3_sends_per_event"] == 2.0, figures  # three daemons in a mesh: two links per event
    assert figures["mesh_3_idle_mb_per_min"] > 0, figures
    assert figures["gossip_mesh_3_s"] > 0, figures  # joined by invite, meshed by gossip
    # Its own directory and daemons are gone (other runs may be going on beside it).
    assert figures["directory"].startswith("/tmp/palmesh") and not Path(figures["directory"]).exists()
    assert not palaced_pids_under(figures["directory"])


def test_an_unknown_topology_is_refused_in_one_line_before_any_daemon_starts(tmp_path, monkeypatch):
    result = subprocess.run([sys.executable, "-m", "palacectl", "bench", "mesh", "--daemons", "3", "--topology", "ring"],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 64, result  # a usage problem (docs/commands.md's exit codes)
    assert result.stderr.strip().count("\n") == 0 and "--topology must be 'invite' or 'pairwise'" in result.stderr
    assert "Traceback" not in result.stderr
    # Before any daemon starts: the run itself is never called. (Looking for daemons under
    # /tmp/palscale instead raced with the 12-daemon test of another worker.)
    import palace_bench.mesh_scale
    from palacectl.cli.bench import bench_mesh
    from palacectl.cli.common import UsageProblem

    def started(**args):
        raise AssertionError(f"the run started: {args}")

    monkeypatch.setattr(palace_bench.mesh_scale, "run_scale_bench", started)
    with pytest.raises(UsageProblem, match="--topology must be"):
        bench_mesh(quick=True, daemons=3, topology="ring", namespaces=False, json_=True)
