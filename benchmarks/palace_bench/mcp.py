"""``palacectl bench mcp``: how soon ``palacectl mcp`` is ready for a harness (issue 26).

Owns: the MCP start-up figures the docs report. Each run starts ``palacectl mcp --agent …`` the
way a harness does (the console script beside this Python, a temporary home, no daemon needed:
the first answers never ask it) and times, from the start of the process, the ``initialize``
answer and the ``tools/list`` answer after it. The first run after the package's files were last
touched stands for a cold start (its byte code and the files may not be in the page cache yet);
the rest are warm. Targets: ready (tools listed) in ≤ 150 ms warm, ≤ 400 ms cold.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from palacectl.service.host import palacectl_command

from .figures import percentile

__all__ = ["run_mcp_bench", "time_mcp_start"]

RUNS: Final = 30
WARM_TARGET_MS: Final = 150
COLD_TARGET_MS: Final = 400


def time_mcp_start(home: Path) -> tuple[float, float, int]:
    """One start: ms to the initialize answer, ms to the tools/list answer, bytes of that listing."""
    start = time.perf_counter()
    proc = subprocess.Popen([*palacectl_command(), "mcp", "--agent", "bench-probe", "--home", str(home)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}
        ).encode() + b"\n")
        proc.stdin.flush()
        if not proc.stdout.readline():
            raise RuntimeError("palacectl mcp gave no initialize answer")
        initialized = time.perf_counter()
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
                         b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n')
        proc.stdin.flush()
        listing = proc.stdout.readline()
        listed = time.perf_counter()
        if not listing:
            raise RuntimeError("palacectl mcp gave no tools/list answer")
    finally:
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()
    return (initialized - start) * 1000, (listed - start) * 1000, len(listing)


def run_mcp_bench(*, quick: bool = False, progress: bool = True) -> dict[str, Any]:
    say = (lambda m: (sys.stderr.write(m + "\n"), sys.stderr.flush())) if progress else (lambda m: None)
    home = Path(tempfile.mkdtemp(prefix="palmcp", dir="/tmp"))
    try:
        runs = [time_mcp_start(home) for _ in range(3 if quick else RUNS)]
    finally:
        shutil.rmtree(home, ignore_errors=True)
    first, warm = runs[0], runs[1:]
    ready = [r[1] for r in warm]
    result = {"quick": quick, "cpus": os.cpu_count(), "python": sys.version.split()[0], "runs": len(runs),
              "first_ready_ms": round(first[1], 1), "warm_initialize_p50_ms": round(statistics.median(r[0] for r in warm), 1),
              "warm_ready_p50_ms": round(statistics.median(ready), 1),
              "warm_ready_p90_ms": round(percentile(ready, 90), 1),
              "tools_list_bytes": first[2],
              "targets": {"warm_ready_ms": WARM_TARGET_MS, "cold_ready_ms": COLD_TARGET_MS}}
    say(f"palacectl mcp, {len(runs)} starts: first ready in {result['first_ready_ms']:.0f} ms "
        f"(cold target <= {COLD_TARGET_MS} ms); warm: initialize p50 {result['warm_initialize_p50_ms']:.0f} ms, "
        f"tools listed p50 {result['warm_ready_p50_ms']:.0f} ms, p90 {result['warm_ready_p90_ms']:.0f} ms "
        f"(target <= {WARM_TARGET_MS} ms); tools/list {first[2]:,} bytes")
    return result
