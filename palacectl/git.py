"""Running git for palacectl (the guard's hooks, ``task launch``'s checks and worktrees).

Owns: ``run_git``, one ``git -C REPO …`` with its output captured and a time limit, whose
failures (git missing, too slow, a non-zero exit) raise the caller's own error class with one line
naming the command, the repository and git's last line of complaint; ``PinnedGit``, git on a
tree an agent's run may have written, which must never run a program of the run's choosing; and
``palacectl_in_worktree``, the command that starts palacectl itself in such a tree.

Why pinned (issue 25, finding 1): git runs programs named in its configuration — an fsmonitor, hooks,
diff and text-conversion drivers, automatic gc — and finds its configuration through the ``.git``
of the directory it is run in. A run controls every file of its working tree, ``.git`` included:
an edit-only harness that wrote ``gitdir: ./g`` into the worktree's ``.git`` and a ``g/config``
with ``core.fsmonitor = <command>`` made palace's own ``git add`` run that command, outside every
harness sandbox. So every git call on such a tree names its repository (``--git-dir``) and working
tree (``--work-tree``) as palace found them *before* the run, switches off on the command line
(which nothing in a repository can override) each key that runs a program, reads no system-wide
configuration, and inherits no ``GIT_*`` variable from the environment. What configuration is
left is the user's own: the repository's (outside a worktree, where a run does not write; for a
run in the checkout itself, ``launch`` checks that the run left ``.git`` as it was) and their
global one.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, overload

__all__ = ["PINNED_CONFIG", "GitDirSnapshot", "PinnedGit", "pinned_env", "run_git"]

#: What of a repository's own directory a run in its checkout could turn into a command runner (for
#: palace's git right after the run, or the user's next commit): its configuration, hooks, and the
#: files that name other configuration or attributes.
WATCHED_FILES: Final = ("config", "config.worktree", "commondir")
WATCHED_DIRS: Final = ("hooks", "info")
# Why 1,000 files of at most 1 MiB: a repository's hooks and info files are a few dozen small
# files; what is beyond is not read (and so counts as changed, which refuses the patch).
MAX_WATCHED_FILES: Final = 1000
MAX_WATCHED_BYTES: Final = 1 << 20

#: Every configuration key that makes the git commands palace runs on an agent's tree start a program,
#: switched off. (Diffs also pass --no-ext-diff --no-textconv: drivers cannot be switched off by key.)
PINNED_CONFIG: Final = (
    "core.fsmonitor=false",  # a program run on every index refresh
    f"core.hooksPath={os.devnull}",  # post-checkout, post-index-change, … (no hook is found there)
    "core.pager=cat",  # never paged (output is captured anyway)
    "gc.auto=0",  # `git add` may start `gc --auto`, and gc its own hooks and helpers
    "maintenance.auto=false",
    "submodule.recurse=false",  # never into a nested repository the run may have made
    "status.submoduleSummary=false",
    "diff.ignoreSubmodules=all",
    "core.sshCommand=false",  # nothing here talks to a remote; if something did, it could not run ssh
    "credential.helper=",
    "protocol.allow=never",
)


def pinned_env(index_file: Path | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a pinned git call: this process's, minus every ``GIT_*`` variable (a
    ``GIT_DIR``, ``GIT_CONFIG_PARAMETERS`` or ``GIT_EXTERNAL_DIFF`` must not steer it), plus no
    system-wide configuration and no prompt; ``index_file``: use this index instead of the
    repository's own."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.upper().startswith("GIT_")}
    # (Literal pathspecs: a file the run named `*` is that file, never every file.)
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0",
                "GIT_LITERAL_PATHSPECS": "1"})
    if index_file is not None:
        env["GIT_INDEX_FILE"] = str(index_file)
    return env


@overload
def run_git(repo: Path, *args: str, error: type[Exception], check: bool = ..., timeout_s: float = ...,
            text: Literal[False] = ...) -> bytes: ...
@overload
def run_git(repo: Path, *args: str, error: type[Exception], check: bool = ..., timeout_s: float = ...,
            text: Literal[True]) -> str: ...
def run_git(repo: Path, *args: str, error: type[Exception], check: bool = True, timeout_s: float = 60.0,
            text: bool = False) -> bytes | str:
    """``git -C repo ARGS``'s standard output (bytes, or text with undecodable bytes replaced).

    For the user's own repository as the user's own git finds it (the guard's hooks run inside the
    user's ``git commit``); on a tree an agent's run may have written, use ``PinnedGit``.

    Raises:
        error: git is not installed, took longer than ``timeout_s``, or (with ``check``) exited
            non-zero.
    """
    return _run(["git", "-C", str(repo), *args], args, repo, error=error, check=check, timeout_s=timeout_s,
                text=text, env=None, cwd=None, stdin=None)


def _run(argv: Sequence[str], args: Sequence[str], where: Path, *, error: type[Exception], check: bool,
         timeout_s: float, text: bool, env: Mapping[str, str] | None, cwd: Path | None,
         stdin: bytes | None) -> bytes | str:
    try:
        done = subprocess.run(list(argv), capture_output=True, check=False, timeout=timeout_s, env=env, cwd=cwd,
                              input=stdin)
    except FileNotFoundError:
        raise error("git is not installed (or not on PATH)") from None
    except subprocess.TimeoutExpired:
        raise error(f"git {' '.join(args[:2])} took over {timeout_s:.0f} s in {where}") from None
    if check and done.returncode != 0:
        complaint = done.stderr.decode(errors="replace").strip().splitlines()
        raise error(f"git {' '.join(args[:2])} failed in {where}: "
                    f"{complaint[-1] if complaint else 'exit ' + str(done.returncode)}")
    return done.stdout.decode(errors="replace") if text else done.stdout


class PinnedGit:
    """git on one working tree with its repository named, and every program-running key off.

    ``discover`` finds both for a directory nobody's run has written yet (the user's workspace, or
    a worktree palace just created); from then on every call names them explicitly.
    """

    def __init__(self, git_dir: Path, work_tree: Path, *, error: type[Exception], timeout_s: float = 120.0) -> None:
        self.git_dir = git_dir
        self.work_tree = work_tree
        self.error = error
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"<PinnedGit {self.work_tree} git_dir={self.git_dir}>"

    @classmethod
    def discover(cls, directory: Path, *, error: type[Exception], timeout_s: float = 120.0) -> PinnedGit:
        """The repository and top of the working tree that hold ``directory`` (with the pinned
        configuration and environment already: even finding them runs nothing of the tree's).

        Raises:
            error: not a git working tree (or git missing, or too slow).
        """
        out = _run(["git", *_config_args(), "rev-parse", "--absolute-git-dir", "--show-toplevel"],
                   ("rev-parse",), directory, error=error, check=True, timeout_s=timeout_s, text=True,
                   env=pinned_env(), cwd=directory, stdin=None)
        lines = str(out).splitlines()
        if len(lines) != 2 or not lines[1]:
            raise error(f"{directory} is not inside a git working tree")
        return cls(Path(lines[0]), Path(lines[1]), error=error, timeout_s=timeout_s)

    @overload
    def __call__(self, *args: str, check: bool = ..., text: Literal[True] = ..., index_file: Path | None = ...,
                 stdin: bytes | None = ...) -> str: ...
    @overload
    def __call__(self, *args: str, check: bool = ..., text: Literal[False], index_file: Path | None = ...,
                 stdin: bytes | None = ...) -> bytes: ...
    def __call__(self, *args: str, check: bool = True, text: bool = True, index_file: Path | None = None,
                 stdin: bytes | None = None) -> str | bytes:
        """``git --git-dir=… --work-tree=… -c … ARGS``'s standard output (text by default).

        Raises:
            error: git is missing, too slow, or (with ``check``) exited non-zero.
        """
        argv = ["git", f"--git-dir={self.git_dir}", f"--work-tree={self.work_tree}", *_config_args(), *args]
        return _run(argv, args, self.work_tree, error=self.error, check=check, timeout_s=self.timeout_s, text=text,
                    env=pinned_env(index_file), cwd=self.work_tree, stdin=stdin)


def _config_args() -> list[str]:
    return [part for key in PINNED_CONFIG for part in ("-c", key)]


def palacectl_in_worktree(*args: str) -> list[str]:
    """``palacectl ARGS`` as a command whose working directory is a tree a run may have written
    (a git hook, a harness's MCP server or permission hook): this interpreter with ``-P``, so the
    ``palacectl`` package a run planted there is never what ``-m palacectl`` imports (``-m`` puts
    the working directory first on ``sys.path``; ``-P`` leaves it out)."""
    return [sys.executable, "-P", "-m", "palacectl", *args]


@dataclass(frozen=True, slots=True)
class _Entry:
    kind: str  # "file", "link", "dir", "other", "absent", "large"
    data: bytes = b""


def _look(path: Path) -> _Entry:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return _Entry("absent")
    except OSError:
        return _Entry("other")
    if stat.S_ISLNK(info.st_mode):
        return _Entry("link", os.readlink(path).encode("utf-8", "surrogateescape"))
    if stat.S_ISDIR(info.st_mode):
        return _Entry("dir", f"{info.st_dev}:{info.st_ino}".encode())
    if not stat.S_ISREG(info.st_mode):
        return _Entry("other")
    if info.st_size > MAX_WATCHED_BYTES:
        return _Entry("large", str(info.st_size).encode())
    try:
        return _Entry("file", path.read_bytes())
    except OSError:
        return _Entry("other")


class GitDirSnapshot:
    """The state of a checkout's ``.git`` that a run in it could use against palace or the user
    (``WATCHED_FILES``, everything in ``WATCHED_DIRS``, and ``.git`` itself: still the same
    directory, or the same ``gitdir:`` file), taken before the run: ``changes`` lists what the run
    altered, and ``restore`` puts back what can be put back. Only for a run in the user's own
    checkout (``task launch --in-place``); a worktree palace made is thrown away after its run."""

    def __init__(self, work_tree: Path, git_dir: Path, entries: dict[Path, _Entry]) -> None:
        self.work_tree = work_tree
        self.git_dir = git_dir
        self._entries = entries

    def __repr__(self) -> str:
        return f"<GitDirSnapshot {self.git_dir} {len(self._entries)} entries>"

    @classmethod
    def take(cls, work_tree: Path, git_dir: Path) -> GitDirSnapshot:
        dirs = [git_dir]
        commondir = _look(git_dir / "commondir")
        if commondir.kind == "file":  # a linked worktree: hooks and config live in the common dir
            dirs.append((git_dir / commondir.data.decode(errors="replace").strip()).resolve())
        entries: dict[Path, _Entry] = {work_tree / ".git": _look(work_tree / ".git")}
        for folder in dirs:
            for name in WATCHED_FILES:
                entries[folder / name] = _look(folder / name)
            for sub in WATCHED_DIRS:
                entries[folder / sub] = _look(folder / sub)
                for path in sorted(cls._files_below(folder / sub))[:MAX_WATCHED_FILES]:
                    entries[path] = _look(path)
        return cls(work_tree, git_dir, entries)

    @staticmethod
    def _files_below(folder: Path) -> list[Path]:
        found: list[Path] = []
        for top, dirnames, filenames in os.walk(folder):  # (symbolic links to directories are not followed)
            found.extend(Path(top) / name for name in [*filenames, *dirnames] if (Path(top) / name).is_symlink()
                         or not (Path(top) / name).is_dir())
            if len(found) > MAX_WATCHED_FILES:
                break
        return found

    def changes(self) -> list[str]:
        """What the run altered, as paths relative to the checkout (empty: nothing)."""
        changed = [path for path, entry in self._entries.items() if _look(path) != entry]
        for folder in {p for p, e in self._entries.items() if p.name in WATCHED_DIRS and e.kind == "dir"}:
            changed.extend(p for p in self._files_below(folder) if p not in self._entries)
        return sorted(self._relative(p) for p in set(changed))

    def restore(self) -> None:
        """Put back every watched file as it was (new files in the watched folders are removed).
        A ``.git`` directory the run replaced cannot be put back; ``changes`` still names it."""
        for folder in {p for p, e in self._entries.items() if p.name in WATCHED_DIRS and e.kind == "dir"}:
            for path in self._files_below(folder):
                if path not in self._entries:
                    _remove(path)
        for path, entry in self._entries.items():
            if _look(path) == entry or entry.kind in ("dir", "other", "large"):
                continue
            _remove(path)
            if entry.kind == "file":
                path.write_bytes(entry.data)
            elif entry.kind == "link":
                os.symlink(entry.data.decode("utf-8", "surrogateescape"), path)

    def _relative(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.work_tree))
        except ValueError:
            return str(path)


def _remove(path: Path) -> None:
    try:
        if path.is_symlink() or not path.is_dir():
            path.unlink(missing_ok=True)
    except OSError:
        pass
