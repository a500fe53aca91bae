"""What a delivered patch may touch before an integrator applies it: the paths it names, read
from its own headers, and its size.

Owns ``check_patch``: the reasons a patch is refused (an empty list: it may be applied), and
``patch_paths``: every path a ``git diff`` names (both sides of a rename or copy, the ``---``
and ``+++`` lines, and each file's mode). Standard library only, no IO: the integrator runs it on
the bytes it fetched before any git command sees them.

Refused, each with its reason: a patch larger than the bound; a path that is absolute, climbs out
of the tree (``..``), or names a ``.git`` directory at any depth (in any case, and the 8.3 alias
``git~1`` Windows gives it); a hook a hook manager would run on the next commit (``.githooks/``,
``.husky/``) or configuration that makes git run or fetch something (``.gitmodules``); a nested
repository (mode 160000); a symbolic link whose target is absolute or climbs out of the tree.
A patch with no file in it is refused too: there is nothing to land.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

__all__ = ["DEFAULT_MAX_PATCH_BYTES", "PatchFile", "check_files", "check_patch", "patch_paths"]

# Why 8 MiB: a change an agent delivers in one task is a few hundred lines; a patch that size is a
# vendored tree or a generated file, which a person should land by hand.
DEFAULT_MAX_PATCH_BYTES: Final = 8 << 20
# Directories whose scripts a hook manager runs on a developer's next commit (a patch adding one
# would run code on whoever pulls the branch), and git's own configuration of submodules.
HOOK_DIRS: Final = (".githooks", ".husky")
GIT_CONFIG_FILES: Final = (".gitmodules",)
_NAMED: Final = 5

_DIFF: Final = b"diff --git "
_TOKEN_RE: Final = re.compile(rb'"(?:[^"\\]|\\.)*"|\S+')
_SIDE_RE: Final = re.compile(rb"^(?:---|\+\+\+) (.*)$")
_MOVE_RE: Final = re.compile(rb"^(?:rename|copy) (?:from|to) (.*)$")
# The file's mode after the patch: "new file mode M", "new mode M", or "index A..B M" (unchanged).
_MODE_RE: Final = re.compile(rb"^(?:new file mode|new mode|index [0-9a-f]+\.\.[0-9a-f]+) ([0-7]{6})$")


@dataclass(frozen=True, slots=True)
class PatchFile:
    """One file of a patch: the paths it names, its new mode (if it says), and what a new symbolic
    link points to (the added line of a file whose new mode is 120000)."""

    paths: tuple[str, ...]
    mode: str | None
    link_target: str | None


def _unquote(raw: bytes) -> str:
    """A path as ``git diff`` prints it: C-quoted when it holds special characters."""
    text = raw.strip()
    if text.startswith(b'"') and text.endswith(b'"') and len(text) >= 2:
        try:
            text = text[1:-1].decode("unicode_escape").encode("latin-1")
        except (UnicodeDecodeError, UnicodeEncodeError):
            text = text[1:-1]
    return text.decode("utf-8", errors="surrogateescape")


def _strip_prefix(path: str) -> str | None:
    """``a/x`` or ``b/x`` → ``x``; ``/dev/null`` → None (a side that does not exist)."""
    if path == "/dev/null":
        return None
    if path.startswith(("a/", "b/")):
        return path[2:]
    return path


def patch_paths(patch: bytes) -> Iterator[PatchFile]:
    """Every file the patch names (see ``PatchFile``), in order."""
    paths: list[str] = []
    mode: str | None = None
    link: list[bytes] = []
    in_file = False
    for line in patch.split(b"\n"):
        if line.startswith(_DIFF):
            if in_file:
                yield _file(paths, mode, link)
            in_file, paths, mode, link = True, [], None, []
            for raw in _header_sides(line[len(_DIFF):]):
                found = _strip_prefix(_unquote(raw))
                if found is not None:
                    paths.append(found)
            continue
        if not in_file:
            continue
        side = _SIDE_RE.match(line)
        if side and not line.startswith((b"--- -", b"+++ +")):
            found = _strip_prefix(_unquote(side.group(1).split(b"\t")[0]))
            if found is not None:
                paths.append(found)
            continue
        move = _MOVE_RE.match(line)
        if move:
            paths.append(_unquote(move.group(1)))
            continue
        new_mode = _MODE_RE.match(line)
        if new_mode:
            mode = new_mode.group(1).decode()
            continue
        if line.startswith(b"+") and not line.startswith(b"+++"):
            link.append(line[1:])
    if in_file:
        yield _file(paths, mode, link)


def _header_sides(rest: bytes) -> list[bytes]:
    """The two paths of a ``diff --git`` line. Unquoted paths may hold spaces, so ``a/X b/X``
    (the same file on both sides: every change but a rename or copy, which say their paths on
    lines of their own) is split in its middle; otherwise two tokens, quoted or not."""
    half = (len(rest) - 1) // 2
    if len(rest) % 2 == 1 and rest[half:half + 1] == b" " and rest[:2] == b"a/" and rest[half + 1:half + 3] == b"b/" \
            and rest[2:half] == rest[half + 3:]:
        return [rest[:half], rest[half + 1:]]
    tokens = _TOKEN_RE.findall(rest)
    return tokens if len(tokens) == 2 else []


def _file(paths: list[str], mode: str | None, link: list[bytes]) -> PatchFile:
    target = link[0].decode("utf-8", errors="surrogateescape") if mode == "120000" and link else None
    return PatchFile(tuple(dict.fromkeys(paths)), mode, target)


def _path_problem(path: str) -> str | None:
    if not path or "\0" in path:
        return "an empty path"
    if path.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", path):
        return f"{path}: an absolute path"
    parts = re.split(r"[/\\]", path)
    if ".." in parts:
        return f"{path}: climbs out of the repository (..)"
    lowered = [p.lower().rstrip(". ") for p in parts]
    if ".git" in lowered or "git~1" in lowered:
        return f"{path}: inside .git (the repository's own files)"
    if lowered[0] in HOOK_DIRS:
        return f"{path}: a hook a hook manager runs on the next commit ({parts[0]}/)"
    if lowered[-1] in GIT_CONFIG_FILES:
        return f"{path}: git configuration ({parts[-1]})"
    return None


def _link_problem(file: PatchFile) -> str | None:
    target = file.link_target
    if target is None:
        return None
    where = file.paths[-1] if file.paths else "?"
    if target.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", target):
        return f"{where}: a symbolic link to an absolute path ({target[:80]})"
    depth = len([p for p in re.split(r"[/\\]", where) if p]) - 1
    for part in re.split(r"[/\\]", target):
        depth += -1 if part == ".." else (0 if part in ("", ".") else 1)
        if depth < 0:
            return f"{where}: a symbolic link out of the repository ({target[:80]})"
    return None


def check_patch(patch: bytes, max_bytes: int = DEFAULT_MAX_PATCH_BYTES) -> list[str]:
    """Why the integrator refuses to apply ``patch`` (empty: it may); at most a few reasons named."""
    if len(patch) > max_bytes:
        return [f"the patch is {len(patch)} bytes, more than the {max_bytes} an integrator lands "
                "(--max-patch-bytes): land it by hand"]
    files = list(patch_paths(patch))
    if not files:
        return ["the patch names no file (not a git diff)"]
    if any(not file.paths for file in files):
        return ["the patch holds a file whose name cannot be read from its headers"]
    return check_files(files)


def check_files(files: list[PatchFile]) -> list[str]:
    """Why these files may not land (empty: they may): the same rules, applied to what git itself
    says a commit changed (``landing.Branch.changes``), so a header this module misreads cannot
    carry a path past them."""
    problems: list[str] = []
    for file in files:
        for path in file.paths:
            if (problem := _path_problem(path)) is not None:
                problems.append(problem)
        if file.mode == "160000":
            problems.append(f"{file.paths[-1] if file.paths else '?'}: a nested repository (a submodule)")
        if (problem := _link_problem(file)) is not None:
            problems.append(problem)
    unique = list(dict.fromkeys(problems))
    return unique[:_NAMED] + ([f"and {len(unique) - _NAMED} more"] if len(unique) > _NAMED else [])
