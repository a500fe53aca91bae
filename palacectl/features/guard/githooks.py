"""The git guard: pre-commit and pre-push hooks that refuse changes under another agent's lease.

Owns: installing and removing palace's hooks in a repository (``install``, ``uninstall``: chaining
a hook that was there, idempotent, removing only our own), and what a hook does when git runs it
(``run_hook``): list the paths a commit or push touches, ask the daemon (``lease_check``), and
refuse with a message naming the holder and how to proceed. ``PALACE_GUARD=warn`` only warns,
``PALACE_GUARD=off`` skips; a daemon that is down, or any failure of the guard itself, never
blocks a commit (it warns and passes).

Hooks are POSIX sh (git runs them with sh on every platform, Git for Windows included); they
call this interpreter's palacectl with the home it was installed for.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from palace_proto.text import printable

from ...files import write_atomically
from ...git import palacectl_in_worktree, run_git

__all__ = ["CHECK_TIMEOUT_S", "HOOKS", "MARKER", "GuardError", "Installed", "guard_mode", "install", "paths_for_hook",
           "run_hook", "uninstall"]

HOOKS: Final = ("pre-commit", "pre-push")
#: the line that marks a hook as ours (``uninstall`` removes only hooks carrying it)
MARKER: Final = "# palace-guard: installed by `palacectl guard install`"
CHAINED_SUFFIX: Final = ".palace-chained"
ZERO_SHA: Final = "0" * 40
# Why 500: the daemon's lease_check takes at most this many paths per call.
CHECK_CHUNK: Final = 500
# Why 20 s: git waits for the hook; a daemon that does not answer a lease check by then is stuck.
CHECK_TIMEOUT_S: Final = 20.0


class GuardError(Exception):
    """Installing or removing the hooks failed; the message says why and what to do."""


@dataclass(frozen=True)
class Installed:
    hooks_dir: Path
    hooks: list[str]
    chained: list[str]


def _git(repo: Path, *args: str) -> bytes:
    return run_git(repo, *args, error=GuardError)


def hooks_dir(repo: Path) -> Path:
    """Where git looks for this repository's hooks (``core.hooksPath`` and worktrees honoured)."""
    if not repo.is_dir():
        raise GuardError(f"{repo} is not a directory; pass --repo with the path of a git repository")
    try:
        top = _git(repo, "rev-parse", "--show-toplevel").decode().strip()
    except GuardError:
        raise GuardError(f"{repo} is not inside a git repository; pass --repo PATH, or run `git init` first") from None
    path = Path(_git(Path(top), "rev-parse", "--git-path", "hooks").decode().strip())
    return path if path.is_absolute() else Path(top) / path


def hook_script(hook: str, *, agent: str, project: str | None, home: Path) -> str:
    """The sh script of one hook: run the chained hook first (same arguments and stdin), then us."""
    # git runs the hook at the top of the worktree, where a task's patch may have planted a package.
    command = palacectl_in_worktree("--home", str(home), "guard", "run", hook, "--agent", agent)
    if project:
        command += ["--project", project]
    quoted = " ".join(shlex.quote(part) for part in command)
    return f"""#!/bin/sh
{MARKER}
# Refuses a {hook.replace('pre-', '')} touching paths under another agent's exclusive palace lease.
# PALACE_GUARD=warn only warns; PALACE_GUARD=off skips. `palacectl guard uninstall` removes this hook
# (and puts back the one it chains, if any).
chained="$(dirname "$0")/{hook}{CHAINED_SUFFIX}"
input_file=$(mktemp 2>/dev/null || echo "${{TMPDIR:-/tmp}}/palace-guard.$$")
trap 'rm -f "$input_file"' EXIT
cat > "$input_file"
if [ -x "$chained" ]; then
    "$chained" "$@" < "$input_file" || exit $?
fi
{quoted} "$@" < "$input_file"
"""


def _is_ours(path: Path) -> bool:
    try:
        return MARKER in path.read_text(errors="replace")
    except OSError:
        return False


def install(repo: Path, *, agent: str, project: str | None, home: Path) -> Installed:
    """Install (or update) both hooks. A hook that is not ours is kept as ``HOOK.palace-chained``
    and run first by ours. Idempotent.

    Raises:
        GuardError: not a repository, git missing, or the hooks directory cannot be written.
    """
    directory = hooks_dir(repo)
    chained = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for hook in HOOKS:
            path = directory / hook
            keep = directory / (hook + CHAINED_SUFFIX)
            if path.exists() and not _is_ours(path):
                if keep.exists():
                    raise GuardError(f"{path} is not palace's and {keep} exists already; move one of them away first")
                path.rename(keep)
            if keep.exists():
                chained.append(hook)
            write_atomically(path, hook_script(hook, agent=agent, project=project, home=home).encode())
            path.chmod(0o755)
    except OSError as exc:
        raise GuardError(f"cannot write the hooks in {directory}: {exc.strerror or exc}") from None
    return Installed(directory, list(HOOKS), chained)


def uninstall(repo: Path) -> Installed:
    """Remove our hooks (only ours) and put back the hooks they chained.

    Raises:
        GuardError: as ``install``.
    """
    directory = hooks_dir(repo)
    removed, restored = [], []
    try:
        for hook in HOOKS:
            path = directory / hook
            keep = directory / (hook + CHAINED_SUFFIX)
            if path.exists() and _is_ours(path):
                path.unlink()
                removed.append(hook)
                if keep.exists():
                    keep.rename(path)
                    restored.append(hook)
    except OSError as exc:
        raise GuardError(f"cannot change the hooks in {directory}: {exc.strerror or exc}") from None
    return Installed(directory, removed, restored)


def _split_z(data: bytes) -> list[str]:
    return [p.decode("utf-8", errors="surrogateescape") for p in data.split(b"\0") if p]


def paths_for_hook(repo: Path, hook: str, stdin: bytes) -> list[str]:
    """The paths (relative to the repository root) a commit or a push would change.

    pre-commit: what is staged (both sides of a rename). pre-push: for each ref pushed, what its
    new commits change (against the remote's commit when git knows it, else every commit not on a
    remote yet).
    """
    if hook == "pre-commit":
        return sorted(set(_split_z(_git(repo, "diff", "--cached", "--name-only", "--no-renames", "-z"))))
    paths: set[str] = set()
    for line in stdin.decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue
        _local_ref, local_sha, _remote_ref, remote_sha = parts
        if local_sha == ZERO_SHA:
            continue  # a deletion changes no file
        if remote_sha != ZERO_SHA and _has_commit(repo, remote_sha):
            out = _git(repo, "diff", "--name-only", "--no-renames", "-z", remote_sha, local_sha)
        else:
            out = _git(repo, "log", "--name-only", "--no-renames", "-z", "--format=", local_sha, "--not", "--remotes")
        paths.update(_split_z(out))
    return sorted(paths)


def _has_commit(repo: Path, sha: str) -> bool:
    try:
        _git(repo, "cat-file", "-e", f"{sha}^{{commit}}")
    except GuardError:
        return False
    return True


Check = Callable[[list[str]], dict[str, Any]]


def run_hook(hook: str, repo: Path, stdin: bytes, check: Check, *, mode: str, say: Callable[[str], None]) -> int:
    """What a hook does; returns its exit code (1 refuses the commit or push).

    ``check(paths)`` is the daemon's ``lease_check`` for the hook's agent; it may raise anything
    (the daemon is down, times out): the guard then warns and lets the commit through.
    """
    if mode == "off":
        return 0
    try:
        paths = paths_for_hook(repo, hook, stdin)
        blocked: list[dict[str, Any]] = []
        for start in range(0, len(paths), CHECK_CHUNK):
            blocked += check(paths[start:start + CHECK_CHUNK])["blocked"]
    except Exception as exc:  # noqa: BLE001 - the guard must never block a commit by failing itself
        say(f"palace guard: leases not checked ({_one_line(exc)}); letting this {hook[4:]} through")
        return 0
    if not blocked:
        return 0
    holders: dict[str, dict[str, Any]] = {}
    for item in blocked:
        for lease in item["leases"]:
            holders.setdefault(lease["id"], lease)
    verb = "would be refused" if mode == "warn" else "refused"
    lines = [f"palace guard: this {hook[4:]} {verb}: it touches paths under another agent's exclusive lease:"]
    # Every value below was written by another member: shown escaped (a reason with bidi overrides
    # or C1 controls must not rewrite what the committer reads in the terminal).
    for item in blocked[:20]:
        owners = ", ".join(f"{printable(lease['agent'])} ({printable(lease['id'])})" for lease in item["leases"])
        lines.append(f"  {printable(item['path'], 300)}  — held by {owners}")
    if len(blocked) > 20:
        lines.append(f"  … and {len(blocked) - 20} more path(s)")
    for lease in list(holders.values())[:20]:
        reason = f", reason: {printable(lease['reason'], 200)}" if lease.get("reason") else ""
        patterns = printable(", ".join(map(str, lease["patterns"])), 300)
        lines.append(f"  {printable(lease['id'])}: {printable(lease['agent'])} holds {patterns} until "
                     f"{printable(str(lease['expires_at'])[:19])}Z{reason}")
    lines.append("  To proceed: ask the holder to release it (palacectl lease release ID), wait for it to expire, "
                 "or take it with `palacectl lease acquire PATTERN --force` (they are told); "
                 "PALACE_GUARD=warn git … lets this one through with a warning.")
    say("\n".join(lines))
    return 0 if mode == "warn" else 1


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def guard_mode() -> str:
    """``PALACE_GUARD``: ``refuse`` (default), ``warn`` or ``off``."""
    value = os.environ.get("PALACE_GUARD", "").strip().lower()
    return value if value in ("warn", "off") else "refuse"
