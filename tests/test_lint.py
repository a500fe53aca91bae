"""Lint and types (issue 44 §4): ruff over every folder with Python, mypy over the four packages.

Both run from here so that the one test command (``python -m pytest``, in the README and in
``.ci/run``) also lints; each runs this venv's pinned tool (``sys.executable -m ...``) with the
configuration in pyproject.toml, and a failure carries the tool's own report.

mypy cannot follow the editable install's import hook, and ``palace_proto`` and ``palace_bench``
are folders with other names (``[tool.setuptools.package-dir]``): it reads the packages through a
folder of symlinks named as they are imported. That folder and mypy's cache live outside the
checkout: under ``$PALACE_TEST_CACHE/mypy`` when that is set (``.ci/run`` sets it; a warm cache
takes mypy from about 10 s to 2), else in the test's own temporary folder.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: the folders ruff checks (those that hold Python)
RUFF_FOLDERS = ("proto", "palaced", "palacectl", "tests", "benchmarks", "rules")
#: import name -> folder, for mypy (pyproject's package-dir, and the two plain packages)
MYPY_PACKAGES = {
    "palace_proto": "proto",
    "palaced": "palaced",
    "palacectl": "palacectl",
    "palace_bench": "benchmarks/palace_bench",
}
#: generous: mypy from cold takes about 10 s here, ruff well under one
TOOL_TIMEOUT_S = 600


def _report(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def test_ruff_finds_nothing() -> None:
    folders = [name for name in RUFF_FOLDERS if (ROOT / name).is_dir()]
    # --no-cache: ruff would otherwise write .ruff_cache into the checkout (and it is fast without)
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                           *folders], cwd=ROOT, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    if done.returncode != 0:
        pytest.fail(f"ruff check found problems (see [tool.ruff] in pyproject.toml):\n{_report(done)}", pytrace=False)


def _link(target: Path, link: Path) -> None:
    """Point ``link`` at ``target``, replacing whatever was there (atomically: runs may share it)."""
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return
    spare = link.with_name(f".{link.name}.{os.getpid()}")
    spare.unlink(missing_ok=True)
    spare.symlink_to(target, target_is_directory=True)
    os.replace(spare, link)


def _mypy_home(tmp_path: Path) -> Path:
    cache = os.environ.get("PALACE_TEST_CACHE")
    if not cache:
        return tmp_path
    # One folder per checkout: the cache is only reused when the sources are found at the same paths.
    return Path(cache) / "mypy" / hashlib.sha256(str(ROOT).encode()).hexdigest()[:16]


def _in_checkout(line: str) -> str:
    """mypy names a file by the import path it read it through: name it by its place in the checkout."""
    for name, folder in MYPY_PACKAGES.items():
        if line.startswith(f"{name}/"):
            return folder + line[len(name):]
    return line


@pytest.mark.slow
def test_mypy_finds_nothing(tmp_path: Path) -> None:
    home = _mypy_home(tmp_path)
    sources = home / "src"
    sources.mkdir(parents=True, exist_ok=True)
    for name, folder in MYPY_PACKAGES.items():
        _link(ROOT / folder, sources / name)
    env = {**os.environ, "MYPYPATH": str(sources)}
    args = [arg for name in MYPY_PACKAGES for arg in ("-p", name)]
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(home / "cache"), *args],
                          cwd=sources, env=env, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    if done.returncode != 0:
        report = "\n".join(_in_checkout(line) for line in _report(done).splitlines())
        pytest.fail(f"mypy found problems (see [tool.mypy] in pyproject.toml):\n{report}", pytrace=False)
