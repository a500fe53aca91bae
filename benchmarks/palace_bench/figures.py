"""What every benchmark reports with: percentiles of its samples, and its figures judged against targets.

Owns only arithmetic, the table it prints and where progress lines go; imports nothing of palace.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["judge", "narrator", "percentile"]


def narrator(progress: bool) -> Callable[[str], None]:
    """Where a benchmark's progress lines go: stderr, at once, or nowhere (``progress`` off)."""
    def say(line: str) -> None:
        if progress:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
    return say


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def judge(results: dict[str, Any], targets: dict[str, tuple[str, float]],
          say: Callable[[str], None] | None) -> dict[str, Any]:
    """Add ``targets`` (each figure against its bound, met or not) to ``results``; print the table."""
    results["targets"] = {
        name: {"target": f"{op} {bound}", "met": (results[name] >= bound if op == ">=" else results[name] <= bound)}
        for name, (op, bound) in targets.items()
    }
    if say is not None:
        say("")
        for name, t in results["targets"].items():
            say(f"  {'ok ' if t['met'] else 'MISS'} {name:28s} {results[name]:>12,.3f}   target {t['target']}")
    return results

