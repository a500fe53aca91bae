"""`palacectl bench ui --quick` runs end to end (a real daemon, a real `palacectl ui`, the fill)
and reports every figure the README quotes; the figures themselves come from the full run on a
million events, not from this smoke test."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers import PYTHON

ROUTES = ("now", "timeline", "timeline_deep_page", "timeline_filtered", "timeline_text", "event_with_proof", "tasks",
          "task", "fleet", "leases", "live_frame")


@pytest.mark.slow
def test_bench_ui_quick_reports_every_figure():
    proc = subprocess.run([PYTHON, "-m", "palacectl", "bench", "ui", "--quick", "--json"], capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["events"] >= 5_000
    for route in ROUTES:
        assert 0 < result[f"{route}_p50_ms"] <= result[f"{route}_p99_ms"], route


def test_bench_ui_refuses_a_fill_too_small_to_measure():
    proc = subprocess.run([PYTHON, "-m", "palacectl", "bench", "ui", "--events", "10"], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 64 and "--events must be at least 1000" in proc.stderr
