"""The four real harnesses, installed once per test run from the npm registry.

Claude Code, Gemini CLI, Codex and OpenCode go into one prefix shared by every module (and every
xdist worker: the first to get the lock runs `npm install`, the rest reuse what it did); npm runs
outside any network namespace and reaches only the registry. Skipped, with the reason, where npm,
root or the namespace tools are missing or the registry cannot be reached.

The prefix is kept between runs in ``$PALACE_TEST_CACHE/harnesses`` when that is set (`.ci/run`
sets it to a folder outside the checkout): each run still runs `npm install` there once, which
takes the newest releases, but finds the last run's ~1 GB already unpacked (about a second instead
of 20-100 s). Without it the prefix is the run's own temporary folder.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .netns import why_not

__all__ = ["PACKAGES", "QUIET", "harnesses", "install_harnesses"]

PACKAGES = ("@anthropic-ai/claude-code", "@google/gemini-cli", "@openai/codex", "opencode-ai")
QUIET = {  # what each harness documents to switch off traffic that is not the task
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
    "GEMINI_TELEMETRY_ENABLED": "false", "NO_UPDATE_NOTIFIER": "1",
}
# Why 600 s: four packages and their platform binaries (about 1 GB) on a slow mirror.
INSTALL_TIMEOUT_S = 600


def install_harnesses(root: Path, outcome: Path) -> Path:
    """The harnesses' bin directory under ``root`` (`npm install` runs there at the first call of
    a run, whose result ``outcome`` keeps for the other calls); skips the test with the reason
    when they cannot be installed or run offline here."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed here: the real-harness tests need Node.js and npm")
    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "lock", "w") as lock:  # also keeps two runs sharing the cache from installing at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not outcome.exists():
            result = subprocess.run([npm, "install", "--prefix", str(root), "--no-audit", "--no-fund",
                                     "--loglevel=error", *PACKAGES], check=False, capture_output=True, text=True,
                                    timeout=INSTALL_TIMEOUT_S, stdin=subprocess.DEVNULL)
            last = result.stderr.strip().splitlines()[-1:] or [f"exit {result.returncode}"]
            outcome.write_text(json.dumps({"ok": result.returncode == 0, "why": last[0]}))
    done = json.loads(outcome.read_text())
    if not done["ok"]:
        pytest.skip(f"npm could not install {', '.join(PACKAGES)} (is the registry reachable?): {done['why']}")
    return root / "node_modules" / ".bin"


@pytest.fixture(scope="session")
def harnesses(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin directory of the four harnesses, installed from the npm registry once per run."""
    base = tmp_path_factory.getbasetemp()
    run = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # one install for all workers
    cache = os.environ.get("PALACE_TEST_CACHE")
    root = Path(cache) / "harnesses" if cache else run / "palace-harnesses"
    return install_harnesses(root, run / "palace-harnesses-outcome.json")
