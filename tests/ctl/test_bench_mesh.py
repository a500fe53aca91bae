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

TIMEOUT_S = 240


def _bench_daemons() -> set[int]:
    """Pids of palaced processes whose home is a mesh benchmark directory (/tmp/palmesh*)."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"palaced" in argv and any(a.startswith(b"/tmp/palmesh") for a in argv):
            pids.add(int(proc.name))
    return pids


@pytest.mark.slow
def test_quick_mesh_bench_reports_every_figure_and_cleans_up():
    dirs_before = {p.name for p in Path("/tmp").glob("palmesh*")}
    daemons_before = _bench_daemons()
    result = subprocess.run([sys.executable, "-m", "palacectl", "bench", "mesh", "--quick", "--json"],
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["quick"] is True and figures["backlog_events"] == 500
    for count in (2, 3):
        assert figures[f"heal_{count}_daemons_s"] > 0
        assert figures[f"heal_{count}_daemons_events"] >= count * 500
        assert figures[f"heal_{count}_daemons_sent_per_lacked"] >= 0.99  # every lacked event crossed a link
    assert figures["mesh_3_sends_per_event"] == 2.0  # three daemons in a mesh: two links per event, no relay
    assert figures["mesh_3_idle_mb_per_min"] > 0
    assert {p.name for p in Path("/tmp").glob("palmesh*")} == dirs_before
    assert _bench_daemons() == daemons_before
