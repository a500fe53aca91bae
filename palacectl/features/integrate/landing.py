"""One integration branch, moved only to commits whose check passed.

Owns ``Branch``: the branch an integrator owns in a repository on its machine — that it exists and
is checked out nowhere (a branch under someone's working tree would move beneath them), its head,
whether a patch already landed on it (the ``Palace-Patch:`` trailer every landed commit carries, so
a restart after a crash never lands one twice), a patch applied and committed in a fresh detached
worktree on the head (``prepare``: the new commit, or the ``Conflict`` that stopped ``git apply``),
the project's check run in that worktree with a time limit (``run_check``: its whole process group
killed at the limit, its output kept), and the one move of the branch: ``advance``, git's
compare-and-swap of the ref from the head the commit was made on to that commit. The branch never
holds a half-applied patch or one whose check failed: nothing but ``advance`` touches it.

Every git call is pinned (``palacectl.git.PinnedGit``): the worktree holds what a patch wrote, and
git must never run a program of its choosing. The check is the machine owner's command, run with
the environment a run gets, minus git's own variables.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ...git import PINNED_CONFIG, PinnedGit, pinned_env
from ..worker.launch import GIT_WORKTREES_LOCK, NEW_PROCESS_GROUP, stop_process_group
from .patch_check import PatchFile

__all__ = ["Branch", "CheckResult", "Conflict", "LandingError", "PATCH_TRAILER", "TASK_TRAILER"]

PATCH_TRAILER: Final = "Palace-Patch"
TASK_TRAILER: Final = "Palace-Task"
# Why 1,000 commits: how far back a restart looks for a patch it may have landed just before it
# stopped (it lands one at a time, so the commit it looks for is the head or just below).
LANDED_LOOKBACK: Final = 1000
# Why 32 MiB: the check's output kept (its tail), as a run's log is.
MAX_CHECK_LOG_BYTES: Final = 32 << 20
_FULL_COMMIT_RE: Final = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


class LandingError(Exception):
    """git failed on the integrator's own side (the repository, the branch): one line."""


@dataclass(frozen=True, slots=True)
class Conflict:
    """The patch does not apply on ``head``; ``why`` is git's complaint."""

    head: str
    why: str


@dataclass(frozen=True, slots=True)
class CheckResult:
    passed: bool
    exit_code: int | None
    timed_out: bool
    duration_s: float
    log: bytes


class Branch:
    """See the module docstring."""

    def __init__(self, repo: Path, branch: str, *, timeout_s: float = 120.0) -> None:
        self.branch = branch
        self.ref = f"refs/heads/{branch}"
        self.git = PinnedGit.discover(repo, error=LandingError, timeout_s=timeout_s)
        self.repo = self.git.work_tree
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"<Branch {self.branch} of {self.repo}>"

    def check_usable(self) -> None:
        """Raises ``LandingError`` naming what is wrong: no such branch, or it is checked out."""
        if not self.git("check-ref-format", "--branch", self.branch, check=False).strip():
            raise LandingError(f"{self.branch!r} is not a branch name git takes")
        if not self.git("rev-parse", "--verify", "--quiet", f"{self.ref}^{{commit}}", check=False).strip():
            raise LandingError(f"branch {self.branch} does not exist in {self.repo}: create it first "
                               f"(git -C {self.repo} branch {self.branch} <commit>)")
        listed = self.git("worktree", "list", "--porcelain")
        for block in listed.split("\n\n"):
            lines = block.splitlines()
            if f"branch {self.ref}" in lines and lines and lines[0].startswith("worktree "):
                where = lines[0][len("worktree "):]
                raise LandingError(f"branch {self.branch} is checked out in {where}: the integrator moves it, which "
                                   "would change that checkout under its user; check out another branch there "
                                   f"(git -C {where} switch --detach)")

    def head(self) -> str:
        out = self.git("rev-parse", "--verify", f"{self.ref}^{{commit}}").strip()
        if not _FULL_COMMIT_RE.match(out):
            raise LandingError(f"git named {out[:80]!r} as the head of {self.branch}")
        return out

    def landed(self, patch_event_id: str) -> str | None:
        """The commit on the branch that landed ``patch_event_id`` (its trailer), or None."""
        wanted = f"{PATCH_TRAILER}: {patch_event_id}"
        out = self.git("log", "-z", f"-n{LANDED_LOOKBACK}", "--format=%H%n%B", self.ref)
        for entry in out.split("\0"):
            commit, _, message = entry.strip("\n").partition("\n")
            if any(line.strip() == wanted for line in message.splitlines()):
                return commit
        return None

    def prepare(self, slot: Path, head: str, patch: bytes, *, message: str, author: tuple[str, str],
                committer: tuple[str, str]) -> str | Conflict:
        """Apply ``patch`` on ``head`` in a new detached worktree at ``slot`` and commit it; the new
        commit's id, or the conflict. ``slot`` is left for the check (``discard`` removes it).

        Raises:
            LandingError: the worktree could not be made, or the commit failed.
        """
        self.discard(slot)
        slot.parent.mkdir(parents=True, exist_ok=True)
        with GIT_WORKTREES_LOCK:
            self.git("worktree", "add", "--quiet", "--detach", str(slot), head)
        tree = PinnedGit.discover(slot, error=LandingError, timeout_s=self.timeout_s)
        # Not --3way: a merge that needs one leaves conflict markers, which no check should judge.
        try:
            applied = subprocess.run(
                ["git", f"--git-dir={tree.git_dir}", f"--work-tree={tree.work_tree}", *_pinned_args(), "apply",
                 "--index", "--whitespace=nowarn", "-"], input=patch, capture_output=True, cwd=slot, env=pinned_env(),
                timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise LandingError(f"git apply took longer than {self.timeout_s:.0f} s") from None
        if applied.returncode != 0:
            why = applied.stderr.decode("utf-8", errors="replace").strip().splitlines()
            return Conflict(head, "; ".join(why[-3:]) or f"git apply exited with status {applied.returncode}")
        tree("-c", f"user.name={committer[0]}", "-c", f"user.email={committer[1]}", "commit", "--quiet",
             "--no-verify", "--allow-empty", f"--author={author[0]} <{author[1]}>", "-m", message)
        return tree("rev-parse", "HEAD").strip()

    def changes(self, commit: str) -> list[PatchFile]:
        """What ``commit`` changed against its parent, as git says: each path with its new mode, and
        a symbolic link's target (for ``patch_check.check_files``)."""
        raw = self.git("diff-tree", "-r", "-z", "--no-commit-id", "--no-renames", "--raw", commit, text=False)
        fields = raw.split(b"\0")
        files: list[PatchFile] = []
        for head, path in zip(fields[::2], fields[1::2], strict=False):
            parts = head.lstrip(b":").split(b" ")
            if len(parts) < 5:
                continue
            mode, blob = parts[1].decode(), parts[3].decode()
            name = path.decode("utf-8", errors="surrogateescape")
            target = None
            if mode == "120000":
                target = self.git("cat-file", "blob", blob, text=False).decode("utf-8", errors="surrogateescape")
            files.append(PatchFile((name,), mode, target))
        return files

    def run_check(self, slot: Path, command: str, timeout_s: float, log_path: Path, *,
                  on_start: Callable[[int], None] | None = None) -> CheckResult:
        """Run the project's check in ``slot`` (a shell command, as the owner wrote it in config);
        ``on_start(pid)`` once it runs (the leader of its own process group)."""
        argv: Sequence[str] = (["cmd", "/c", command] if sys.platform == "win32" else ["/bin/sh", "-c", command])
        env = {**pinned_env(), "PWD": str(slot)}
        for name in ("GIT_CONFIG_NOSYSTEM", "GIT_TERMINAL_PROMPT", "GIT_OPTIONAL_LOCKS", "GIT_LITERAL_PATHSPECS"):
            env.pop(name, None)  # the check's own git runs as the project's would
        started = time.monotonic()
        timed_out = False
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(argv, cwd=slot, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, **NEW_PROCESS_GROUP)
            if on_start is not None:
                on_start(proc.pid)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                stop_process_group(proc)
            except BaseException:
                stop_process_group(proc)  # stopped ourselves (a signal): never leave the check running
                raise
        duration = time.monotonic() - started
        try:
            with open(log_path, "rb") as log:
                size = log.seek(0, os.SEEK_END)
                log.seek(max(0, size - MAX_CHECK_LOG_BYTES))
                data = log.read()
        except OSError:
            data = b""
        if timed_out:
            data += f"\n[palace] the check was stopped after {timeout_s:.0f} s (its time limit)\n".encode()
        code = None if timed_out else proc.returncode
        return CheckResult(code == 0, code, timed_out, duration, data)

    def advance(self, new: str, old: str) -> bool:
        """Move the branch from ``old`` to ``new`` if it is still at ``old`` (git's compare-and-swap);
        whether it moved."""
        self.git("update-ref", "-m", "palace integrate", self.ref, new, old, check=False)
        return self.head() == new

    def discard(self, slot: Path) -> None:
        """Remove a worktree of ours (what a crash left too); never follows a link."""
        with GIT_WORKTREES_LOCK:
            if slot.is_symlink():
                slot.unlink()
            elif slot.exists():
                shutil.rmtree(slot, ignore_errors=True)
            self.git("worktree", "prune", check=False)


def _pinned_args() -> list[str]:
    return [part for key in PINNED_CONFIG for part in ("-c", key)]
