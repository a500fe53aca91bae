"""What an unattended run may do without asking: the permission policy of ``task launch`` and
``worker`` runs (issue 28, "Harness permission prompts routed to palace").

Owns: ``PermissionPolicy`` — rules that allow, deny, or leave to a person each tool call a harness
asks permission for — parsed from ``[permissions]`` in ``config.toml`` (and ``[permissions.RUNNER]``
for one runner), judged per call (``decide``), and described in one line for the log and ``who``.
Pure: no IO, no clock.

A rule is ``Tool`` (every call of that tool) or ``Tool(pattern)``: a glob (``*``, ``?``, ``[…]``)
matched against the call's main argument — a shell tool's command, a file tool's path, a fetch's
URL — or, for any other tool, its input as compact JSON. Tool names are the harness's own
(Claude Code: ``Bash``, ``Edit``, ``Write``, ``Read``, ``WebFetch``, ``mcp__server__tool``, …).
Deny rules are read first, then allow rules; a call neither allows nor denies is a question to a
person (``ask_to``), and the run waits for the answer — ``timeout`` long at most, and then it is a
deny, never a yes.

The default, when ``config.toml`` says nothing: reading, searching and editing inside the task's
worktree run (the harness confines those itself); pushing, ``sudo`` and deleting recursively are
refused; everything else — every other shell command, every fetch — is asked.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["DEFAULT_ALLOW", "DEFAULT_DENY", "RUNNER_ENV", "TASK_ENV", "Decision", "PermissionPolicy", "PolicyError",
           "main_argument"]

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
        if tool_name != self.tool:
            return False
        return self.pattern is None or fnmatch.fnmatchcase(argument, self.pattern)

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
        return cls.parse(merged, where=f"[permissions{'.' + runner if isinstance(own, Mapping) else ''}]")

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

    def decide(self, tool_name: str, tool_input: Mapping[str, Any]) -> Decision:
        """Deny rules first, then allow rules; neither: ask ``ask_to``."""
        argument = main_argument(tool_name, tool_input)
        for rule in self.deny:
            if rule.matches(tool_name, argument):
                return Decision("deny", str(rule), f"refused by palace's policy ({rule}): this run may not do that; "
                                                   "find another way or reply blocked with what you need")
        for rule in self.allow:
            if rule.matches(tool_name, argument):
                return Decision("allow", str(rule), f"allowed by palace's policy ({rule})")
        return Decision("ask", None, f"not covered by the policy: asking {self.ask_to}")

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


def rules_of(items: Iterable[str]) -> tuple[Rule, ...]:
    """Rules from strings (tests, and a command line that takes them)."""
    return tuple(Rule.parse(item, "rule") for item in items)
