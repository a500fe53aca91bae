"""Running git for palacectl (the guard's hooks, ``task launch``'s checks and worktrees).

Owns: ``run_git``, one ``git -C REPO …`` with its output captured and a time limit, whose
failures (git missing, too slow, a non-zero exit) raise the caller's own error class with one line
naming the command, the repository and git's last line of complaint.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Literal, overload

__all__ = ["run_git"]


@overload
def run_git(repo: Path, *args: str, error: type[Exception], check: bool = ..., timeout_s: float = ...,
            text: Literal[False] = ...) -> bytes: ...
@overload
def run_git(repo: Path, *args: str, error: type[Exception], check: bool = ..., timeout_s: float = ...,
            text: Literal[True]) -> str: ...
def run_git(repo: Path, *args: str, error: type[Exception], check: bool = True, timeout_s: float = 60.0,
            text: bool = False) -> bytes | str:
    """``git -C repo ARGS``'s standard output (bytes, or text with undecodable bytes replaced).

    Raises:
        error: git is not installed, took longer than ``timeout_s``, or (with ``check``) exited
            non-zero.
    """
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False, timeout=timeout_s)
    except FileNotFoundError:
        raise error("git is not installed (or not on PATH)") from None
    except subprocess.TimeoutExpired:
        raise error(f"git {' '.join(args[:2])} took over {timeout_s:.0f} s in {repo}") from None
    if check and done.returncode != 0:
        complaint = done.stderr.decode(errors="replace").strip().splitlines()
        raise error(f"git {' '.join(args[:2])} failed in {repo}: "
                    f"{complaint[-1] if complaint else 'exit ' + str(done.returncode)}")
    return done.stdout.decode(errors="replace") if text else done.stdout
