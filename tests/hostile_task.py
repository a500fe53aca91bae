"""A victim that works while nobody watches, and an obedient edit-only runner (issue 25).

``Victim`` is a real ``palaced`` that founded a palace, a git repository with one commit, and a
stand-in runner, ``obedient``, that behaves like an edit-only harness (Claude Code's
``acceptEdits``, Gemini's ``auto_edit``, Codex's ``workspace-write``): it reads any file it is
told to and writes files in its working directory, nothing else — no command, no network. It does
exactly what the task's words say, in a small language (one instruction per line of the request
body, the rest ignored):

    @write PATH        the lines up to @end are the content of PATH (relative: in the worktree)
    @copy SOURCE PATH  the content of SOURCE (anywhere it can read) into PATH (in the worktree)
    @exit N            exit with status N (after the rest)

So a hostile *task* (a member's words) can make it do whatever an obedient model would, and a
test checks what palace lets that reach: nothing runs but the runner, no file leaves the machine
but what the run wrote in its worktree.

Every daemon is in the root network namespace with mDNS off, on loopback (tests.helpers).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.fleet import ctl_json, wait_until
from tests.helpers import PYTHON, init_repo

__all__ = ["OBEDIENT", "Victim"]

OBEDIENT = r'''#!{python}
import pathlib, sys
prompt = sys.argv[-1]
lines = prompt.splitlines()
status = 0
i = 0
while i < len(lines):
    words = lines[i].split()
    if words[:1] == ["@write"]:
        body = []
        i += 1
        while i < len(lines) and lines[i] != "@end":
            body.append(lines[i])
            i += 1
        target = pathlib.Path(words[1])
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(body) + "\n")
    elif words[:1] == ["@copy"]:
        target = pathlib.Path(words[2])
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(pathlib.Path(words[1]).read_bytes())
    elif words[:1] == ["@exit"]:
        status = int(words[1])
    i += 1
print("obedient runner done", flush=True)
sys.exit(status)
'''


class Victim:
    """A daemon's home, a repository of one commit, and the ``obedient`` runner in config.toml."""

    def __init__(self, home: Path, root: Path) -> None:
        self.home = home
        self.root = root
        self.repo = root / "repo"
        self.base = init_repo(self.repo)
        bin_dir = root / "bin"
        bin_dir.mkdir()
        script = bin_dir / "obedient.py"
        script.write_text(OBEDIENT.format(python=sys.executable))
        with open(home / "config.toml", "a", encoding="utf-8") as fh:
            fh.write(f'[runners.obedient]\ncommand = ["{PYTHON}", "{script}", "{{handoff}}"]\n')
        self.env = {**os.environ}
        self.env.pop("PALACE_HOME", None)
        self.workers: list[subprocess.Popen[bytes]] = []
        self.worker_log = root / "worker.log"

    def start_worker(self, agent: str = "bot", *extra: str) -> subprocess.Popen[bytes]:
        """``palacectl worker`` for ``agent`` with the obedient runner on the repository, connected."""
        with open(self.worker_log, "ab") as log:
            proc = subprocess.Popen([PYTHON, "-m", "palacectl", "--home", str(self.home), "worker", "--agent", agent,
                                     "--runner", "obedient", "--workspace", str(self.repo), *extra],
                                    env=self.env, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        self.workers.append(proc)
        wait_until(lambda: self.worker_running(agent) or proc.poll() is not None, "the worker to connect")
        assert proc.poll() is None, self.log()
        return proc

    def worker_running(self, agent: str = "bot") -> bool:
        return any(w["agent"] == agent and w.get("worker") for w in ctl_json(self.home, "who")["watchers"])

    def log(self) -> str:
        return self.worker_log.read_text(errors="replace") if self.worker_log.exists() else ""

    def stop_workers(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers:
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def task(self, body: str, *, to: str = "bot", from_agent: str = "boss", cid: str | None = None,
             base: str | None = None) -> str:
        """A task request whose body the runner obeys (filed with ``append``, so any correlation id
        the protocol allows is possible)."""
        args = ["append", "--type", "task.request", "--stream", "project/shop", "--room", "tasks",
                "--from-agent", from_agent, "--to-agent", to, "--branch", "main",
                "--base-commit", base or self.base, "--body", body]
        if cid is not None:
            args += ["--correlation-id", cid]
        event = ctl_json(self.home, *args)
        return str(event["correlation_id"])
