"""The shape of a permission request: what a person's grant is bound to (palace_proto.question_grants).

Owns: ``shape_of`` — the text a request is matched by when a person allowed an earlier one for
its task, its agent or its project. Equal shapes only ever match (never a prefix, never a glob),
so a shape must say everything the call does that a person would weigh:

* a shell line (``Bash``): its one simple command's literal words, as ``shell_judge`` reads them,
  and the folder it runs in where the input names one. A line of several commands, a wrapper, or
  anything palace cannot read whole (a ``$VAR``, a redirection, a glob: ``Reading.doubts``) has no
  shape: a person can allow it for its call only.
* a file tool that writes (``Write``, ``Edit``…): the tool and the resolved path — a grant lets
  the run write that one file again, whatever it writes.
* any other file tool: the tool and its whole input, its path resolved.
* any other tool: the tool and its main argument (a fetch's URL), or its whole input.

A request of several calls has a shape only if each has one (one per line, in order).

Pure but for resolving paths (``real_path``, passed in); never trio, never palaced.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from palace_proto.question_grants import MAX_SHAPE_CHARS

from .permission_policy import FILE_TOOLS, SHELL_TOOLS, WRITE_TOOLS, main_argument
from .shell_judge import read_command

__all__ = ["shape_of"]

_PATH_FIELDS: Final = ("file_path", "notebook_path", "path", "dir_path", "absolute_path")
_SHELL_FOLDER_FIELDS: Final = ("dir_path", "directory")


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=str)


def _shell_shape(tool: str, tool_input: Mapping[str, Any], worktree: Path | None) -> str | None:
    line = tool_input.get("command")
    if not isinstance(line, str):
        return None
    reading = read_command(line, [str(worktree)] if worktree is not None else [])
    if reading.doubts or len(reading.commands) != 1:
        return None
    (command,) = reading.commands
    if command.words is None or command.wrapped:
        return None
    folder = next((tool_input[f] for f in _SHELL_FOLDER_FIELDS if isinstance(tool_input.get(f), str)), None)
    return f"{tool}: {shlex.join(command.words)}" + (f" (in {folder})" if folder else "")


def _file_shape(tool: str, tool_input: Mapping[str, Any], worktree: Path | None,
                resolve: Callable[[Path], Path]) -> str | None:
    resolved = dict(tool_input)
    path = None
    for field in _PATH_FIELDS:
        value = tool_input.get(field)
        if isinstance(value, str) and value:
            given = Path(value)
            if not given.is_absolute():
                if worktree is None:
                    return None
                given = worktree / given
            path = str(resolve(given))
            resolved[field] = path
    if tool in WRITE_TOOLS:
        return f"{tool}: {path}" if path is not None else None
    return f"{tool}: {_compact(resolved)}"


def _one(tool: str, tool_input: Mapping[str, Any], worktree: Path | None,
         resolve: Callable[[Path], Path]) -> str | None:
    if tool in SHELL_TOOLS:
        return _shell_shape(tool, tool_input, worktree)
    if tool in FILE_TOOLS:
        return _file_shape(tool, tool_input, worktree, resolve)
    return f"{tool}: {main_argument(tool, tool_input)}"


def shape_of(calls: Sequence[tuple[str, Mapping[str, Any]]], worktree: Path | None,
             resolve: Callable[[Path], Path]) -> str | None:
    """The shape of a request of ``calls`` (see the module docstring), or None: it can be allowed
    for its call only."""
    if not calls:
        return None
    shapes = []
    for tool, tool_input in calls:
        try:
            shape = _one(tool, tool_input, worktree, resolve)
        except (OSError, RuntimeError, ValueError):
            return None
        if shape is None or "\n" in shape:
            return None
        shapes.append(shape)
    joined = "\n".join(shapes)
    return joined if len(joined) <= MAX_SHAPE_CHARS else None
