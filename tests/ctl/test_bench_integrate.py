"""`palacectl bench integrate --quick` runs end to end (a real daemon, a real `palacectl integrate`,
real git) and reports the figures the docs quote; the figures themselves come from the full run."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers import PYTHON


@pytest.mark.slow
def test_bench_integrate_quick_lands_every_patch_and_reports_its_figures():
    proc = subprocess.run([PYTHON, "-m", "palacectl", "bench", "integrate", "--quick", "--json"], capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["commits_on_branch"] == result["patches"] + result["samples"] == 15
    assert result["patches_per_minute"] > 0 and 0 < result["patch_to_branch_p50_s"] <= result["patch_to_branch_p99_s"]


def test_bench_integrate_refuses_a_count_out_of_range():
    proc = subprocess.run([PYTHON, "-m", "palacectl", "bench", "integrate", "--patches", "0"], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 64 and "--patches" in proc.stderr and "Traceback" not in proc.stderr
