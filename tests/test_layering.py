"""Import layering (STYLE §2-3): palacectl never imports palaced, palace_proto stays pure, and a
simple palacectl command does not pay for trio, apsw or heavy optional packages."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _imports(folder: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / folder).rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


@pytest.mark.parametrize(("folder", "forbidden"), [
    ("palacectl", {"palaced"}),
    ("proto", {"trio", "apsw", "palaced", "palacectl", "typer", "logging", "time"}),
    ("palaced/store", {"trio"} ),
])
def test_forbidden_imports(folder, forbidden):
    for path, names in _imports(folder).items():
        if folder == "palaced/store" and path.endswith("aio.py"):
            continue  # the one trio adapter of the store
        assert not (names & forbidden), f"{path} imports {sorted(names & forbidden)}"


def test_palacectl_simple_command_imports_no_trio_or_apsw():
    """Guards palacectl's start-up time: agents call it in their loops."""
    code = ("import sys, palacectl.cli, palacectl.client, palacectl.watch; "
            "bad = [m for m in ('trio', 'apsw', 'palaced', 'cryptography', 'fastembed', 'mcp') if m in sys.modules]; "
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_proto_never_reads_the_clock():
    """palace_proto takes time as an argument (``now``); datetime is allowed only for its types."""
    for path in (ROOT / "proto").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in {"now", "utcnow", "today", "monotonic", "time"}:
                if isinstance(node.value, (ast.Name, ast.Attribute)):
                    owner = node.value.id if isinstance(node.value, ast.Name) else node.value.attr
                    assert owner not in {"datetime", "date", "time"}, f"{path.name}:{node.lineno} reads the clock"
