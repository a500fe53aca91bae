"""`palacectl bench memory --quick` runs end to end against real daemons and reports every figure
the README quotes (the figures themselves come from the full run, not from this smoke test)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers import PYTHON


@pytest.mark.slow
def test_bench_memory_quick_reports_every_figure():
    proc = subprocess.run([PYTHON, "-m", "palacectl", "bench", "memory", "--quick", "--json"], capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    for mode in ("keyword", "vector", "hybrid"):
        assert 0 <= result[f"eval_{mode}_recall_at_5"] <= 1 and 0 <= result[f"eval_{mode}_mrr_at_5"] <= 1
    # The point of hybrid search: better first answers than either ranking alone, on our own set.
    assert result["eval_hybrid_mrr_at_5"] > max(result["eval_keyword_mrr_at_5"], result["eval_vector_mrr_at_5"])
    for key in ("embedding_drawers_per_s", "append_idle_per_s", "append_while_embedding_per_s",
                "search_index_p50_ms", "search_embed_p50_ms", "rss_with_model_mb", "fresh_peer_index_s"):
        assert result[key] > 0, key
    assert result["model_loads"] == 1
