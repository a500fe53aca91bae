"""Harness hooks that run ``palacectl session start`` when a session starts and after its context
was compacted, so an agent re-reads its state (inbox, open loops, leases, diary) every time.

Owns: which harnesses offer such hooks and where (``HOOK_HARNESSES``: the settings file, the
event, the matcher), the hook entry palace adds (a command that prints the harness's
``additionalContext`` JSON), and installing or removing it in a settings file that may already
hold other hooks — palace's entry is found by its command (``palacectl … session start``), every
other byte of meaning is kept, installing twice changes nothing, removing leaves the rest. From
each harness's documentation:

* Claude Code: ``~/.claude/settings.json``, ``SessionStart`` with the matcher
  ``startup|resume|clear|compact`` (``compact`` fires after a compaction).
* Codex: ``~/.codex/hooks.json``, ``SessionStart`` with the same matcher (``compact`` is a
  documented SessionStart source).
* Gemini CLI: ``~/.gemini/settings.json``, ``SessionStart`` (startup, resume, clear). Its
  ``PreCompress`` hook is advisory (it cannot add context), so nothing re-injects after a
  compression: the agent's rules say to run ``session start`` again.
* OpenCode and Hermes have no command hooks of this kind (OpenCode's are JavaScript plugins):
  palace installs none there.

Writes go through ``palacectl.files`` (atomic, the file's mode kept). An unreadable or invalid
settings file is refused with one line and left as it was.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from .files import new_file_mode, write_atomically

__all__ = ["HOOK_HARNESSES", "HookHarness", "HooksError", "hook_command", "hook_output", "install_hooks",
           "remove_hooks"]

HookResult = Literal["installed", "updated", "unchanged", "removed", "absent"]


class HooksError(Exception):
    """A settings file palace cannot edit safely (unreadable, not JSON, an unexpected shape)."""


@dataclass(frozen=True, slots=True)
class HookHarness:
    name: str
    settings: str  # the file, with ~
    event: str
    matcher: str
    #: Gemini CLI names its hooks (shown in `/hooks panel`); the others have no name field
    named: bool = False
    #: the unit of the hook's timeout: Claude Code and Codex take seconds, Gemini CLI milliseconds
    timeout_ms: bool = False


HOOK_HARNESSES: Final[dict[str, HookHarness]] = {
    "claude": HookHarness("claude", "~/.claude/settings.json", "SessionStart", "startup|resume|clear|compact"),
    "codex": HookHarness("codex", "~/.codex/hooks.json", "SessionStart", "startup|resume|clear|compact"),
    "gemini": HookHarness("gemini", "~/.gemini/settings.json", "SessionStart", "*", named=True, timeout_ms=True),
}
#: palace's entry, found by this in its command
_MARK: Final = " session start --agent "
_HOOK_NAME: Final = "palace-session-start"
# Why 20 s: session start is one local request; a harness waits for its hooks before the session.
_TIMEOUT_S: Final = 20


def hook_command(palacectl: Sequence[str], home: Path, agent: str, harness: str) -> str:
    """The shell command of palace's hook (harnesses run hook commands through a shell)."""
    words = [*palacectl, "--home", str(home), "session", "start", "--agent", agent, "--hook", harness]
    return " ".join(shlex.quote(w) for w in words)


def hook_output(harness: str, text: str) -> str:
    """What the hook prints: the documented JSON that adds ``text`` to the session's context."""
    return json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}},
                      ensure_ascii=False)


def _is_palace(group: Any) -> bool:
    hooks = group.get("hooks") if isinstance(group, dict) else None
    return isinstance(hooks, list) and any(
        isinstance(h, dict) and isinstance(h.get("command"), str) and "palacectl" in h["command"]
        and _MARK in h["command"] for h in hooks)


def _strict_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise _Unkeepable(f"the key {key!r} appears twice in one object")
        data[key] = value
    return data


class _Unkeepable(ValueError):
    """Something in a settings file that writing it back would change (or make invalid)."""


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _Unkeepable(f"the number {text} is out of range")
    return value


def _constant(name: str) -> Any:
    raise _Unkeepable(f"{name} is not JSON")


# How a settings file may be laid out that palace writes back exactly as it found it: what
# Claude Code, Codex and Gemini CLI write themselves (two spaces), and the other usual ones.
_LAYOUTS: Final[tuple[tuple[int | str | None, tuple[str, str]], ...]] = (
    (2, (",", ": ")), (4, (",", ": ")), ("\t", (",", ": ")), (3, (",", ": ")), (None, (", ", ": ")),
    (None, (",", ":")))
_Layout = tuple[int | str | None, tuple[str, str], str]


def _load(path: Path) -> tuple[dict[str, Any], bytes | None, _Layout]:
    """The settings in ``path``, the bytes as read, and the layout to write them back in: one in
    which everything already there comes out byte for byte (issue 25, finding 10: ``1e400``
    must not become ``Infinity``, a duplicate key must not vanish, a lone surrogate must not
    crash). A file no layout reproduces is refused: nothing is written."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}, None, (2, (",", ": "), "\n")
    except OSError as exc:
        raise HooksError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not raw.strip():
        return {}, raw, (2, (",", ": "), "\n")
    try:
        text = raw.decode("utf-8")
        data = json.loads(text, object_pairs_hook=_strict_pairs, parse_float=_finite, parse_constant=_constant)
    except _Unkeepable as exc:
        raise HooksError(f"{path}: {exc}, which palace cannot write back unchanged; nothing was written. "
                         "Fix that, or add the hook by hand (README: `rules --hooks`)") from None
    except (ValueError, RecursionError):
        raise HooksError(f"{path} is not valid JSON; fix it (or move it away), then run this again. "
                         "Nothing was written.") from None
    if not isinstance(data, dict):
        raise HooksError(f"{path} does not hold a JSON object; nothing was written")
    ending = text[len(text.rstrip()):]
    for indent, separators in _LAYOUTS:
        if _dump(data, (indent, separators, ending)) == text:
            return data, raw, (indent, separators, ending)
    raise HooksError(f"{path} is laid out in a way palace would change when writing it back (spacing, number "
                     "or escape forms); nothing was written. Add the hook by hand (README: `rules --hooks`), "
                     "or let your harness save the file once and run this again")


def _dump(data: dict[str, Any], layout: _Layout) -> str:
    indent, separators, ending = layout
    return json.dumps(data, indent=indent, separators=separators, ensure_ascii=False) + ending


def _event_groups(data: dict[str, Any], path: Path, event: str) -> list[Any]:
    hooks = data.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise HooksError(f"{path}: 'hooks' is not an object; nothing was written")
    groups = hooks.setdefault(event, [])
    if not isinstance(groups, list):
        raise HooksError(f"{path}: 'hooks.{event}' is not a list; nothing was written")
    return groups


def _write(path: Path, data: dict[str, Any], layout: _Layout) -> None:
    target = Path(os.path.realpath(path))
    write_atomically(target, _dump(data, layout).encode("utf-8"),
                     new_file_mode(), keep_mode=True, create_folder=True)


def install_hooks(harness: HookHarness, path: Path, command: str) -> HookResult:
    """Put palace's session-start hook into ``path`` (other hooks stay as they are).

    Raises:
        HooksError: the file cannot be read or is not a settings object.
        OSError: it cannot be written.
    """
    data, _raw, layout = _load(path)
    groups = _event_groups(data, path, harness.event)
    hook: dict[str, Any] = {"type": "command", "command": command,
                            "timeout": _TIMEOUT_S * 1000 if harness.timeout_ms else _TIMEOUT_S}
    if harness.named:
        hook = {"name": _HOOK_NAME, **hook, "description": "palace: re-read the agent's state (session start)"}
    entry = {"matcher": harness.matcher, "hooks": [hook]}
    existing = [i for i, group in enumerate(groups) if _is_palace(group)]
    if existing and groups[existing[0]] == entry and len(existing) == 1:
        return "unchanged"
    result: HookResult = "updated" if existing else "installed"
    for index in reversed(existing):
        del groups[index]
    groups.insert(existing[0] if existing else len(groups), entry)
    _write(path, data, layout)
    return result


def remove_hooks(harness: HookHarness, path: Path) -> HookResult:
    """Take palace's hook out of ``path`` (an event left with no hooks is dropped; nothing else changes)."""
    data, raw, layout = _load(path)
    if raw is None:
        return "absent"
    hooks = data.get("hooks")
    groups = hooks.get(harness.event) if isinstance(hooks, dict) else None
    if not isinstance(groups, list) or not any(_is_palace(g) for g in groups):
        return "absent"
    assert isinstance(hooks, dict)
    kept = [g for g in groups if not _is_palace(g)]
    if kept:
        hooks[harness.event] = kept
    else:
        del hooks[harness.event]
        if not hooks:
            del data["hooks"]
    _write(path, data, layout)
    return "removed"
