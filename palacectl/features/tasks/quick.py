"""The tasks feature's commands on the loop's quick path: ``task ready`` and ``task claim``.

Owns their bodies (one request to the daemon, rendered), which the loop runs without typer
(``Feature.quick`` in this package's declaration names them) and the typer commands call too, so
the output is one function's either way (``tests/e2e/test_cli_quick.py`` compares them). Must not
import typer, trio or palaced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...loop import call
from ...output import EXIT_OK, emit, note, write_stdout

__all__ = ["task_claim", "task_ready"]


def task_ready(home: Path, o: dict[str, Any]) -> int:
    result = call(home, "task_ready", agent=o["agent"])
    if emit(result, bool(o.get("json"))):
        return EXIT_OK
    if not result["tasks"]:
        note("Nothing ready.")
    for t in result["tasks"]:
        write_stdout(f"{t['correlation_id']}\tP{t['priority']}\tfrom {t['requested_by']}\t{t['request']['created_at']}\n")
    return EXIT_OK


def task_claim(home: Path, o: dict[str, Any]) -> int:
    correlation_id, agent = o["correlation_id"], o["agent"]
    result = call(home, "task_claim", correlation_id=correlation_id, agent=agent)
    emit(result, bool(o.get("json")), f"{'Already yours' if result['already'] else 'Claimed'}: {correlation_id} ({agent})")
    return EXIT_OK
