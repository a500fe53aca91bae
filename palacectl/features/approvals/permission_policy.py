"""What an unattended run may do without asking: the permission policy of ``task launch`` and
``worker`` runs (issue 28, "Harness permission prompts routed to palace"; issue 43).

Owns: ``PermissionPolicy`` — rules that allow, deny, or leave to a person each tool call a harness
asks permission for — parsed from ``[permissions]`` in ``config.toml`` (and ``[permissions.RUNNER]``
for one runner), judged per call (``decide``), and described in one line for the log and ``who``.
Pure: no IO, no clock (a file tool's path is resolved by the ``resolve`` the caller passes).

A rule is ``Tool`` (every call of that tool) or ``Tool(pattern)``: a glob (``*``, ``?``, ``[…]``).
Tool names are the harness's own (Claude Code: ``Bash``, ``Edit``, ``Write``, ``Read``,
``WebFetch``, ``mcp__server__tool``, …). Deny rules are read first, then allow rules; a call
neither allows nor denies is a question to a person (``ask_to``), and the run waits for the
answer — ``timeout`` long at most, and then it is a deny, never a yes. What a pattern meets:

* **Shell commands** (``Bash``) are read with a shell parser (``shell_judge``), and a
  rule judges each *simple command* of the line — its literal words joined by single spaces —
  never the line as text. A line is allowed only if every command in it (in a list, a pipeline, a
  subshell, a ``$(…)``) is allowed by a rule; it is refused if any command in it, or what a wrapper
  such as ``env``, ``xargs`` or ``bash -c`` runs, or the line as written, matches a deny rule; and
  it is asked whenever palace cannot vouch for it: a syntax error, a construct it does not judge
  (``if``, ``for``, a function, an assignment), a word whose value it cannot know (``$VAR``,
  ``$(…)``, a glob, ``~``, braces), a redirection that writes a file (``/dev/null`` aside), an
  option that writes a file or runs a program (``shell_judge.option_doubts``: ``-o``,
  ``--output``, git's own options, ``git diff --ext-diff``, …), or a path outside the worktree.
  An allow pattern ending in a name and ``*`` (``git status*``, ``ls*``) matches that name whole:
  ``git status`` and ``git status --short``, not ``git statusx``, and ``ls`` is not ``lsof``;
  any other pattern, and every deny pattern, is a plain glob.
* **File tools** (``Read``, ``Write``, ``Edit``, ``MultiEdit``, ``NotebookEdit``, ``Glob``,
  ``Grep``, ``LS``) are judged on the *resolved* path (symlinks followed, ``..`` resolved, a
  relative path taken from the run's worktree): outside the worktree, or when the worktree is not
  known, the call is asked whatever the rules say; inside, the rules apply (a pattern meets the
  path as given, as resolved, or relative to the worktree). Writing palace's and the harnesses'
  own files in the worktree (``.git``, ``.claude``, ``.gemini``, ``.mcp.json``) is asked too.
* Any other tool: its main argument (a fetch's URL, a search's query) or its input as compact JSON.

The default, when ``config.toml`` says nothing: reading, searching and editing inside the task's
worktree run; ``git status``, ``git diff``, ``git log``, ``ls`` and ``pwd`` run; pushing, ``sudo``
and deleting recursively are refused; everything else — every other shell command, every fetch,
every file outside the worktree — is asked.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePath
from typing import Any, Final

from .shell_judge import option_doubts, read_command

__all__ = ["DEFAULT_ALLOW", "DEFAULT_DENY", "FILE_TOOLS", "PROTECTED_NAMES", "RUNNER_ENV", "SHELL_TOOLS", "TASK_ENV",
           "WRITE_TOOLS", "Decision", "PermissionPolicy", "PolicyError", "Resolve", "main_argument"]

#: the environment of a launched run, read by its ``approve`` tool: which task, which runner's policy
TASK_ENV: Final = "PALACE_TASK_ID"
RUNNER_ENV: Final = "PALACE_RUNNER"

DEFAULT_ALLOW: Final = ("Read", "Glob", "Grep", "LS", "Edit", "MultiEdit", "Write", "NotebookEdit", "TodoWrite",
                        "Bash(git status*)", "Bash(git diff*)", "Bash(git log*)", "Bash(ls*)", "Bash(pwd)")
DEFAULT_DENY: Final = ("Bash(git push*)", "Bash(sudo *)", "Bash(*rm -rf*)", "Bash(*rm -fr*)")
DEFAULT_ASK_TO: Final = "human:*"
# Why 30 minutes: as a question's default; the run holds its claim (heartbeats) while it waits.
DEFAULT_TIMEOUT_S: Final = 1800
# Why 128 rules of 512 characters: a policy names tools and command prefixes; the bound keeps
# the one line `who` shows small and every decision cheap.
MAX_RULES: Final = 128
MAX_RULE_CHARS: Final = 512
_RULE_RE: Final = re.compile(r"^(?P<tool>[A-Za-z0-9_.:-]{1,128})(?:\((?P<pattern>.*)\))?$", re.DOTALL)
#: the input field that is a tool's main argument, by tool name (Claude Code's tools)
_MAIN_FIELD: Final = {"Bash": "command", "Read": "file_path", "Edit": "file_path", "MultiEdit": "file_path",
                      "Write": "file_path", "NotebookEdit": "notebook_path", "WebFetch": "url", "Glob": "pattern",
                      "Grep": "pattern", "LS": "path", "WebSearch": "query"}
_KEYS: Final = frozenset({"allow", "deny", "ask_to", "timeout"})
#: the tools whose main argument is a shell command line (read by ``shell_judge``)
SHELL_TOOLS: Final = frozenset({"Bash"})
#: the tools that read, search or write files: judged on the resolved path, inside the worktree only
FILE_TOOLS: Final = frozenset({"Read", "Write", "Edit", "MultiEdit", "NotebookEdit", "Glob", "Grep", "LS"})
WRITE_TOOLS: Final = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
#: the input fields of a shell tool that name the folder it runs in (Gemini CLI's run_shell_command)
_SHELL_FOLDER_FIELDS: Final = ("dir_path", "directory")
#: the input fields of a file tool that name a path (Claude Code's and, mapped, Gemini CLI's)
_PATH_FIELDS: Final = ("file_path", "notebook_path", "path", "dir_path", "absolute_path")
#: the input fields that hold a glob pattern taken from the tool's folder, by tool
_GLOB_FIELDS: Final = {"Glob": ("pattern",), "Grep": ("glob", "include")}
#: the tools that work on a folder (the worktree when the input names none)
_FOLDER_TOOLS: Final = frozenset({"Glob", "Grep", "LS"})
#: what a run writes in its worktree only with a person's yes: git's folder (hooks, config: code
#: palace's own git commands would run) and the harnesses' settings (a run could widen its own
#: permissions), at the top of the worktree or, for .git, anywhere in it
PROTECTED_NAMES: Final = frozenset({".git", ".claude", ".gemini", ".mcp.json"})
_GLOB_CHARS: Final = re.compile(r"[*?\[{]")
#: an allow pattern's last word before its final ``*`` that is a name (a command, a subcommand)
_NAME_END: Final = re.compile(r"(?:^| )[A-Za-z0-9_][A-Za-z0-9_.]*$")
#: a path with symlinks followed and ``..`` resolved (``os.path.realpath``; injected: IO is the caller's)
Resolve = Callable[[Path], Path]


class PolicyError(ValueError):
    """A ``[permissions]`` value that is not one; the message names the key and what is expected."""


@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    tool: str
    pattern: str | None

    @classmethod
    def parse(cls, text: Any, key: str) -> Rule:
        if not isinstance(text, str) or not 0 < len(text.strip()) <= MAX_RULE_CHARS:
            raise PolicyError(f"{key}: each rule is a string of 1 to {MAX_RULE_CHARS} characters, "
                              'e.g. "Bash(npm test*)" or "WebFetch"')
        match = _RULE_RE.match(text.strip())
        if match is None:
            raise PolicyError(f"{key}: {text!r} is not a rule: write Tool or Tool(pattern), e.g. \"Bash(git push*)\"")
        return cls(match["tool"], match["pattern"])

    def matches(self, tool_name: str, argument: str) -> bool:
        """A plain glob over ``argument`` (deny rules, and allow rules of tools other than the shell's)."""
        if tool_name != self.tool:
            return False
        return self.pattern is None or fnmatch.fnmatchcase(argument, self.pattern)

    def allows_command(self, tool_name: str, command: str) -> bool:
        """An allow rule over one simple command: a pattern ending in a name and ``*`` matches the
        name whole (``git status*``: ``git status``, ``git status -s``, never ``git statusx``;
        ``ls*`` is not ``lsof``); ending in an option (``ls -l*``) or anything else, a plain glob."""
        if tool_name != self.tool:
            return False
        pattern = self.pattern
        if pattern is None:
            return True
        stem = pattern[:-1]
        if pattern.endswith("*") and _NAME_END.search(stem):
            return fnmatch.fnmatchcase(command, stem) or fnmatch.fnmatchcase(command, stem + " *")
        return fnmatch.fnmatchcase(command, pattern)

    def __str__(self) -> str:
        return self.tool if self.pattern is None else f"{self.tool}({self.pattern})"


def main_argument(tool_name: str, tool_input: Mapping[str, Any]) -> str:
    """What a rule's pattern is matched against (see the module docstring)."""
    field = _MAIN_FIELD.get(tool_name)
    value = tool_input.get(field) if field is not None else None
    if isinstance(value, str):
        return value
    return json.dumps(dict(tool_input), sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """``allow``, ``deny`` or ``ask``, with the rule that decided (None: the fallback, ask)."""

    verdict: str
    rule: str | None
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class PermissionPolicy:
    allow: tuple[Rule, ...] = tuple(Rule.parse(r, "allow") for r in DEFAULT_ALLOW)
    deny: tuple[Rule, ...] = tuple(Rule.parse(r, "deny") for r in DEFAULT_DENY)
    ask_to: str = DEFAULT_ASK_TO
    timeout_s: int = DEFAULT_TIMEOUT_S

    @classmethod
    def from_config(cls, config: Mapping[str, Any], runner: str | None = None) -> PermissionPolicy:
        """From a parsed ``config.toml``: ``[permissions]``, overridden key by key by
        ``[permissions.RUNNER]``. Absent: the default.

        Raises:
            PolicyError: an unknown key, a wrong type, a malformed rule.
        """
        section = config.get("permissions", {})
        if not isinstance(section, Mapping):
            raise PolicyError("[permissions] must be a table")
        merged = {k: v for k, v in section.items() if not isinstance(v, Mapping)}
        for key, value in section.items():
            if isinstance(value, Mapping):
                continue  # a runner's own table
            if key not in _KEYS:
                raise PolicyError(f"[permissions] has no key {key!r} (allow, deny, ask_to, timeout, or a "
                                  "[permissions.RUNNER] table)")
        own = section.get(runner) if runner is not None else None
        if isinstance(own, Mapping):
            for key, value in own.items():
                if key not in _KEYS:
                    raise PolicyError(f"[permissions.{runner}] has no key {key!r} (allow, deny, ask_to, timeout)")
                merged[key] = value
        where = f"[permissions.{runner}]" if runner is not None and isinstance(own, Mapping) else "[permissions]"
        return cls.parse(merged, where=where)

    @classmethod
    def parse(cls, values: Mapping[str, Any], *, where: str = "[permissions]") -> PermissionPolicy:
        default = cls()
        allow, deny = default.allow, default.deny
        if "allow" in values:
            allow = cls._rules(values["allow"], f"{where} allow")
        if "deny" in values:
            deny = cls._rules(values["deny"], f"{where} deny")
        ask_to = values.get("ask_to", default.ask_to)
        if not isinstance(ask_to, str) or not (ask_to == "human:*" or re.match(r"^human:[A-Za-z0-9._-]{1,64}$", ask_to)):
            raise PolicyError(f"{where} ask_to: a person, human:NAME, or human:* for anyone")
        timeout = values.get("timeout", default.timeout_s)
        seconds = _duration(timeout, f"{where} timeout")
        return cls(allow, deny, ask_to, seconds)

    @staticmethod
    def _rules(items: Any, key: str) -> tuple[Rule, ...]:
        if not isinstance(items, list):
            raise PolicyError(f'{key} must be a list of rules, e.g. ["Bash(npm test*)", "Read"]')
        if len(items) > MAX_RULES:
            raise PolicyError(f"{key}: at most {MAX_RULES} rules")
        return tuple(Rule.parse(item, key) for item in items)

    def decide(self, tool_name: str, tool_input: Mapping[str, Any], worktree: Path | None = None,
               resolve: Resolve | None = None) -> Decision:
        """Deny rules first, then allow rules; neither: ask ``ask_to`` (the module docstring says
        what each kind of tool is matched on).

        Args:
            worktree: the run's worktree (its working directory); None: unknown, and every file
                tool, and every shell command naming an absolute path, is asked.
            resolve: how a path is resolved (symlinks followed); the caller's IO. None: paths
                cannot be looked at, and every file tool is asked.
        """
        if tool_name in SHELL_TOOLS:
            return self._decide_shell(tool_name, tool_input, worktree, resolve)
        if tool_name in FILE_TOOLS:
            return self._decide_file(tool_name, tool_input, worktree, resolve)
        argument = main_argument(tool_name, tool_input)
        for rule in self.deny:
            if rule.matches(tool_name, argument):
                return self._denied(rule)
        for rule in self.allow:
            if rule.matches(tool_name, argument):
                return Decision("allow", str(rule), f"allowed by palace's policy ({rule})")
        return self._asked("not covered by the policy")

    def _denied(self, rule: Rule, part: str | None = None) -> Decision:
        what = f" (the command `{part[:200]}`)" if part is not None else ""
        return Decision("deny", str(rule), f"refused by palace's policy ({rule}){what}: this run may not do that; "
                                           "find another way or reply blocked with what you need")

    def _asked(self, why: str) -> Decision:
        return Decision("ask", None, f"{why}: asking {self.ask_to}")

    def _decide_shell(self, tool_name: str, tool_input: Mapping[str, Any], worktree: Path | None,
                      resolve: Resolve | None) -> Decision:
        command = tool_input.get(_MAIN_FIELD.get(tool_name, "command"))
        line = command if isinstance(command, str) else main_argument(tool_name, tool_input)
        for rule in self.deny:
            if rule.matches(tool_name, line):
                return self._denied(rule)
        if not isinstance(command, str):
            return self._asked("the command is not text")
        roots = _roots(worktree, resolve)
        reading = read_command(command, roots)
        for part in reading.commands:
            for rule in self.deny:
                if any(rule.matches(tool_name, form) for form in part.forms):
                    return self._denied(rule, part.forms[0])
        if reading.doubts:
            return self._asked(f"palace cannot vouch for this command ({reading.doubts[0]})")
        if tool_input.get("dangerouslyDisableSandbox"):
            return self._asked("the command asks to run outside the harness's sandbox")
        for field in _SHELL_FOLDER_FIELDS:
            if field in tool_input:
                place = _place_of("LS", {"path": tool_input[field]}, worktree, resolve)
                if place.doubt is not None:
                    return self._asked(f"it runs in another folder ({field}): {place.doubt}")
        used: list[str] = []
        for part in reading.commands:
            if part.wrapped:
                continue  # judged by the deny list; the wrapper is what an allow rule must name
            assert part.words is not None  # no doubts: every word is literal
            allowing = next((r for r in self.allow if r.allows_command(tool_name, part.text)), None)
            if allowing is None:
                return self._asked(f"`{part.text[:200]}` is not covered by the policy")
            doubts = option_doubts(part.words, roots)
            if doubts:
                return self._asked(f"palace cannot vouch for `{part.text[:200]}` ({doubts[0]})")
            used.append(str(allowing))
        if not used:
            return self._asked("no command in it to judge")
        rules = ", ".join(dict.fromkeys(used))
        return Decision("allow", rules, f"allowed by palace's policy ({rules})")

    def _decide_file(self, tool_name: str, tool_input: Mapping[str, Any], worktree: Path | None,
                     resolve: Resolve | None) -> Decision:
        argument = main_argument(tool_name, tool_input)
        place = _place_of(tool_name, tool_input, worktree, resolve)
        forms = (argument, *place.forms)
        for rule in self.deny:
            if any(rule.matches(tool_name, form) for form in forms):
                return self._denied(rule)
        if place.doubt is not None:
            return self._asked(place.doubt)
        for rule in self.allow:
            if any(rule.matches(tool_name, form) for form in forms):
                return Decision("allow", str(rule), f"allowed by palace's policy ({rule}, inside the worktree)")
        return self._asked("not covered by the policy")

    def describe(self) -> str:
        """One line for the log and ``who``."""
        return (f"allow {len(self.allow)} rule(s), deny {len(self.deny)} ({', '.join(map(str, self.deny[:3]))}"
                f"{', …' if len(self.deny) > 3 else ''}), ask {self.ask_to} (timeout {self.timeout_s} s)")


def _duration(value: Any, key: str) -> int:
    if isinstance(value, bool):
        raise PolicyError(f"{key}: a duration, e.g. \"30m\" (or seconds)")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str) and (m := re.match(r"^\s*(\d{1,7})\s*([smhd]?)\s*$", value)):
        seconds = int(m[1]) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m[2]]
    else:
        raise PolicyError(f"{key}: a duration, e.g. \"30m\" (or seconds)")
    if not 1 <= seconds <= 7 * 86400:
        raise PolicyError(f"{key}: from 1 s to 7 days")
    return seconds


def _roots(worktree: Path | None, resolve: Resolve | None) -> tuple[str, ...]:
    """The worktree as given and as resolved (a shell command may name either)."""
    if worktree is None:
        return ()
    roots = [str(worktree)]
    if resolve is not None:
        roots.append(str(resolve(worktree)))
    return tuple(dict.fromkeys(roots))


@dataclasses.dataclass(frozen=True, slots=True)
class _Place:
    """Where a file tool's call reaches: the forms a rule's pattern meets (each path resolved, and
    relative to the worktree), and why it must be asked (None: inside the worktree)."""

    forms: tuple[str, ...]
    doubt: str | None


def _place_of(tool_name: str, tool_input: Mapping[str, Any], worktree: Path | None,
              resolve: Resolve | None) -> _Place:
    paths = [(field, tool_input[field]) for field in _PATH_FIELDS if field in tool_input]
    globs = [(field, tool_input[field]) for field in _GLOB_FIELDS.get(tool_name, ()) if field in tool_input]
    if not paths and tool_name not in _FOLDER_TOOLS:
        return _Place((), "the call names no file")
    if worktree is None or resolve is None:
        return _Place(tuple(str(v) for _, v in paths if isinstance(v, str)),
                      "palace does not know this run's worktree, so it cannot tell what the path reaches")
    root = resolve(worktree)
    forms: list[str] = []
    doubt: str | None = None
    folder = root
    for field, value in paths:
        if not isinstance(value, str) or not value or "\x00" in value:
            return _Place(tuple(forms), f"{field} is not a path")
        if value.startswith("~"):
            return _Place(tuple(forms), f"{value[:200]}: a path from a home folder, outside this run's worktree")
        real = resolve(Path(value) if Path(value).is_absolute() else worktree / value)
        forms.append(str(real))
        if not _within(real, root):
            doubt = doubt or f"{value[:200]} is outside this run's worktree ({root})"
            continue
        relative = real.relative_to(root)
        forms.append(relative.as_posix())
        if tool_name in WRITE_TOOLS and relative.parts and (relative.parts[0] in PROTECTED_NAMES or
                                                             ".git" in relative.parts):
            doubt = doubt or (f"{value[:200]}: palace's and the harnesses' own files in the worktree "
                              f"({', '.join(sorted(PROTECTED_NAMES))}) are a person's to change")
        if tool_name in _FOLDER_TOOLS:
            folder = real
    for field, value in globs:
        if not isinstance(value, str):
            return _Place(tuple(forms), f"{field} is not a glob pattern")
        why = _glob_escapes(value, folder, root, resolve)
        if why is not None:
            doubt = doubt or why
    return _Place(tuple(forms), doubt)


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _glob_escapes(pattern: str, folder: Path, root: Path, resolve: Resolve) -> str | None:
    """Why a glob pattern (taken from ``folder``) may reach out of the worktree (None: it stays in):
    the folder its fixed part names, resolved, must be inside, and no ``..`` may follow."""
    if pattern.startswith("~"):
        return f"{pattern[:200]}: a pattern from a home folder, outside this run's worktree"
    parts = PurePath(pattern).parts
    fixed: list[str] = []
    for at, part in enumerate(parts):
        if _GLOB_CHARS.search(part):
            if ".." in parts[at:]:
                return f"{pattern[:200]}: a pattern that climbs out of its folder (..)"
            break
        fixed.append(part)
    base = Path(*fixed) if fixed else Path()
    reached = resolve(base if base.is_absolute() else folder / base)
    if not _within(reached, root):
        return f"{pattern[:200]} reaches outside this run's worktree ({root})"
    return None


def rules_of(items: Iterable[str]) -> tuple[Rule, ...]:
    """Rules from strings (tests, and a command line that takes them)."""
    return tuple(Rule.parse(item, "rule") for item in items)
