"""What a cost reads as (issue 47 §1.6: costs under a cent printed as ``$0.01``): ``palacectl usage``
against a fake client, and the dashboard's ``usd()`` (palacectl/ui/static/app.js) run by node beside
``palace_proto.usage.format_usd``: one rule in both."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from palace_proto.usage import format_usd
from tests.ctl.fake_client import FakeClient, invoke

APP_JS = Path(__file__).resolve().parents[2] / "palacectl" / "ui" / "static" / "app.js"
#: (cost in dollars, how a person reads it)
COSTS = [(0, "$0.00"), (0.00004, "<$0.0001"), (0.0001, "$0.0001"), (0.004, "$0.0040"), (0.0041, "$0.0041"),
         (0.00999, "$0.0099"), (0.01, "$0.01"), (0.042, "$0.04"), (5.0, "$5.00"), (1234.5, "$1,234.50")]


def total(key: str, cost: float | None, unpriced: int = 0) -> dict[str, object]:
    return {"by": "task", "key": key, "runs": 1, "tokens_in": 10, "tokens_out": 5, "cache_read_tokens": 0,
            "cache_write_tokens": 0, "cost_usd": cost, "unpriced_runs": unpriced}


@pytest.mark.parametrize(("cost", "shown"), COSTS)
def test_a_cost_below_a_cent_shows_its_fraction_never_a_whole_cent(cost: float, shown: str):
    assert format_usd(cost) == shown


def test_usage_prints_a_cost_under_a_cent_as_its_fraction(fake: FakeClient):
    """Guards §1.6: $0.005 printed as $0.01 (and $0.004 as $0.00)."""
    fake.answers["usage"] = {"by": "task", "totals": [total("task_a", 0.004), total("task_b", 0.005, unpriced=1),
                                                      total("task_c", None)], "budgets": [], "flagged": 0}
    result = invoke("usage")
    assert result.returncode == 0, result
    rows = {line.split("\t")[0]: line.split("\t")[-1] for line in result.stdout.splitlines()[1:]}
    assert rows == {"task_a": "$0.0040", "task_b": "$0.0050+", "task_c": "?"}


def test_the_dashboard_formats_a_cost_as_the_cli_does():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the dashboard's usd() is not run here (the browser tests show it)")
    found = re.search(r"^function usd\(value\) \{\n.*?^\}\n", APP_JS.read_text(encoding="utf-8"), re.S | re.M)
    assert found, "app.js defines usd(value)"
    script = found.group(0) + f"console.log(JSON.stringify({json.dumps([c for c, _ in COSTS])}.map(usd)));"
    out = subprocess.run([node, "-e", script], capture_output=True, text=True, timeout=30, check=True).stdout
    assert json.loads(out) == [shown for _, shown in COSTS]
