"""A harness's permission hook answered by palace: ``palacectl approve-hook`` (issue 28, Gemini CLI).

Owns: the command-hook side of a launched run's permission requests, for the harnesses that hand
them to a command rather than to an MCP tool — today Gemini CLI's ``BeforeTool`` hook
(docs/harness-permissions.md, "Gemini CLI"):

* reading what the harness writes on the hook's stdin (bounded, and mistrusted: anything that is
  not a well-formed request is refused, with a reason);
* mapping the harness's tool names and arguments to the policy's vocabulary, Claude Code's
  (``run_shell_command`` → ``Bash``, ``replace`` → ``Edit``, …; ``GEMINI_TOOLS``), so one
  ``[permissions]`` speaks for every runner, and the request's ``cwd`` to the run's worktree (a
  file tool's path must stay in it); the decision itself is ``approvals``', and a person
  asked is shown Gemini's own call whole;
* printing exactly one decision on stdout, ``{"decision": "allow"}`` or ``{"decision": "deny",
  "reason": …}`` (Gemini hands the reason to the model), and exiting 0;
* the run's own Gemini home that installs the hook (``gemini_run_settings``, ``make_gemini_home``:
  see "the run's Gemini settings" below), made by the worker feature's ``launch`` for the built-in ``gemini``
  runner.

Error handling — the hook fails closed because its harness fails open: Gemini runs the call when
a hook crashes, prints something that is not JSON, or times out. So every failure here (an
exception, a policy that cannot be read, a daemon that cannot be reached, a question nobody
answers) is printed as a deny, and the hook answers ``ANSWER_MARGIN_S`` before the harness's own
limit on it (``--within``) whatever the daemon does. The hook's command line ends in
``|| exit 2``, so even an interpreter that cannot start is a refusal (Gemini: exit 2 denies).

Imports ``approvals`` (which talks to the daemon) and the stdlib; never palaced, never trio.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Final

from .approvals import Call, Verdict, request, worktree_of

__all__ = ["ANSWER_MARGIN_S", "GEMINI_DEFAULT_TIMEOUT_S", "HARNESSES", "MAX_HOOK_INPUT_BYTES", "HookInputError",
           "HookSettingsError", "check_hooks_stay_on", "decision_json", "gemini_calls", "gemini_run_settings",
           "hook_command", "make_gemini_home", "parse_gemini_settings", "parse_hook_input", "read_gemini_settings",
           "run_hook", "strip_json_comments", "system_settings_path", "user_gemini_home"]

#: the harnesses whose command hook this is
HARNESSES: Final = ("gemini",)
# Why 16 MiB: the request carries the call's whole input, and a write_file call carries the file;
# a file that large is written by a command, and a hook's stdin past it is not a request.
MAX_HOOK_INPUT_BYTES: Final = 16 << 20
# Why 60 s: Gemini's own limit on a hook that names none (hookRunner.ts, DEFAULT_HOOK_TIMEOUT);
# what --within assumes when the settings that started the hook did not say.
GEMINI_DEFAULT_TIMEOUT_S: Final = 60
# Why 15 s: the hook's answer must reach the harness before the harness stops waiting (a hook it
# timed out lets the call run), with room for a slow machine to start Python and print.
ANSWER_MARGIN_S: Final = 15
# Why 10 s more: the daemon's `ask` returns at the question's deadline; the question expires this
# long before the hook must answer, so a refusal by silence comes from the daemon, not the clock here.
QUESTION_MARGIN_S: Final = 10
_TOOL_NAME_CHARS: Final = 256

#: Gemini CLI's tools (0.61, packages/core/src/tools/definitions) → the policy's tool name, and
#: which of its input fields is the policy's main argument field (permission_policy._MAIN_FIELD)
GEMINI_TOOLS: Final[dict[str, tuple[str, tuple[tuple[str, str], ...]]]] = {
    "run_shell_command": ("Bash", (("command", "command"),)),
    "read_file": ("Read", (("file_path", "file_path"),)),
    "write_file": ("Write", (("file_path", "file_path"),)),
    "replace": ("Edit", (("file_path", "file_path"),)),
    "glob": ("Glob", (("pattern", "pattern"),)),
    "grep_search": ("Grep", (("pattern", "pattern"),)),
    "search_file_content": ("Grep", (("pattern", "pattern"),)),  # grep_search's name before 0.2x
    "list_directory": ("LS", (("dir_path", "path"), ("path", "path"))),
    "google_web_search": ("WebSearch", (("query", "query"),)),
    "write_todos": ("TodoWrite", ()),
    # read_many_files and web_fetch name several files / URLs: gemini_calls makes one call of each.
}
#: Gemini's own bookkeeping, which changes nothing outside the run (Claude Code never asks about
#: its like): allowed where the policy would ask a person, so a run does not stall on its first
#: turn (0.61 calls update_topic there); a deny rule naming it still refuses it.
GEMINI_BOOKKEEPING: Final = frozenset({
    "update_topic", "write_todos", "complete_task", "tracker_create_task", "tracker_update_task", "tracker_get_task",
    "tracker_list_tasks", "tracker_add_dependency", "tracker_visualize",
})
# How Gemini's web_fetch finds the URLs in its prompt (parsePrompt: whitespace-separated tokens
# holding "://"); JavaScript's \s also has U+FEFF, which Python's does not.
_URL_TOKEN_SPLIT: Final = re.compile(r"[\s\ufeff]+")
#: the words Gemini replaces in a hook's command line before running it (hookRunner.expandCommand)
_GEMINI_EXPANDED: Final = re.compile(r"\$(GEMINI_PROJECT_DIR|GEMINI_CWD|GEMINI_PLANS_DIR|GEMINI_SESSION_ID|"
                                     r"CLAUDE_PROJECT_DIR)")


class HookInputError(ValueError):
    """What the harness wrote on the hook's stdin is not a request; the message says why."""


class HookSettingsError(ValueError):
    """The machine's Gemini settings cannot carry palace's hook; the message names the file and why."""


# -- the request: stdin → calls ---------------------------------------------------------------


def parse_hook_input(data: bytes) -> tuple[str, dict[str, Any], str | None]:
    """The tool name, input and working directory (``cwd``: the run's worktree, where Gemini
    runs; None when the request does not say) of a ``BeforeTool`` request.

    Raises:
        HookInputError: too large, not UTF-8 JSON, not an object, another event, no tool name,
            an input that is not an object.
    """
    if len(data) > MAX_HOOK_INPUT_BYTES:
        raise HookInputError(f"the request is larger than {MAX_HOOK_INPUT_BYTES >> 20} MiB")
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise HookInputError(f"the request is not JSON ({type(exc).__name__})") from None
    if not isinstance(document, dict):
        raise HookInputError("the request is not a JSON object")
    event = document.get("hook_event_name", "BeforeTool")
    if event != "BeforeTool":
        raise HookInputError(f"the hook runs on BeforeTool, not on {str(event)[:40]!r}")
    tool_name = document.get("tool_name")
    if not isinstance(tool_name, str) or not 0 < len(tool_name) <= _TOOL_NAME_CHARS or not tool_name.isprintable():
        raise HookInputError("the request names no tool (tool_name)")
    tool_input = document.get("tool_input", {})
    if not isinstance(tool_input, dict):
        raise HookInputError("the request's tool_input is not an object")
    cwd = document.get("cwd")
    return tool_name, tool_input, cwd if isinstance(cwd, str) and cwd else None


def gemini_calls(tool_name: str, tool_input: Mapping[str, Any]) -> list[Call]:
    """One Gemini tool call as the calls the policy judges (all must be allowed). A tool palace
    does not map (an MCP server's ``mcp_<server>_<tool>``, a newer tool) keeps Gemini's name and
    its input, so a rule names it as Gemini does."""
    if tool_name == "read_many_files":
        paths = tool_input.get("include", tool_input.get("paths"))
        if isinstance(paths, list) and paths and all(isinstance(p, str) for p in paths):
            return [("Read", {**tool_input, "file_path": p}) for p in paths]
        return [("Read", dict(tool_input))]
    if tool_name == "web_fetch":
        prompt = tool_input.get("prompt")
        if isinstance(prompt, str):
            urls = [token for token in _URL_TOKEN_SPLIT.split(prompt) if "://" in token]
            return [("WebFetch", {"url": url}) for url in urls] or [("WebFetch", {"url": prompt})]
        return [("WebFetch", dict(tool_input))]
    mapped = GEMINI_TOOLS.get(tool_name)
    if mapped is None:
        return [(tool_name, dict(tool_input))]
    policy_name, fields = mapped
    policy_input = dict(tool_input)
    for theirs, ours in fields:
        if theirs in tool_input:
            policy_input[ours] = tool_input[theirs]
            break
    return [(policy_name, policy_input)]


def decision_json(verdict: Verdict) -> str:
    """The one line the hook prints: Gemini's ``BeforeTool`` decision."""
    if verdict.allowed:
        return json.dumps({"decision": "allow"})
    return json.dumps({"decision": "deny", "reason": verdict.reason}, ensure_ascii=False)


# -- the hook process ---------------------------------------------------------------------------


def decide(home: Path, data: bytes, *, harness: str, agent: str, task: str | None, runner: str | None,
           within_s: int) -> Verdict:
    """The verdict on one request (stdin's bytes); raises only for what is palace's own bug."""
    if harness not in HARNESSES:
        return Verdict(False, f"palace has no permission hook for harness {harness!r} (only {', '.join(HARNESSES)}): "
                              "refused")
    try:
        tool_name, tool_input, cwd = parse_hook_input(data)
    except HookInputError as exc:
        return Verdict(False, f"palace cannot judge this request ({exc}): refused")
    # The run's worktree: Gemini's working directory, where it starts the hook too.
    worktree = worktree_of(cwd if cwd is not None else _cwd(), home=home)
    return request(home, gemini_calls(tool_name, tool_input), agent=agent, task=task, runner=runner,
                   bookkeeping=tool_name in GEMINI_BOOKKEEPING, worktree=worktree, asked=(tool_name, tool_input),
                   question_timeout_s=max(1, within_s - ANSWER_MARGIN_S - QUESTION_MARGIN_S))


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:
        return None  # the folder is gone: no worktree, every file tool is asked


def run_hook(home: Path, *, harness: str, agent: str, task: str | None, runner: str | None, within_s: int,
             stdin: IO[bytes] | None, stdout: IO[str], decider: Callable[..., Verdict] = decide) -> int:
    """Read one request on ``stdin``, print one decision on ``stdout``; returns the exit code (0).

    Error handling: see the module docstring — whatever fails, the decision printed is a deny,
    within ``within_s - ANSWER_MARGIN_S`` seconds."""
    deadline_s = max(1, within_s - ANSWER_MARGIN_S)
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            if stdin is None:
                raise HookInputError("the hook has no stdin")
            data = stdin.read(MAX_HOOK_INPUT_BYTES + 1)
            box["verdict"] = decider(home, data, harness=harness, agent=agent, task=task, runner=runner,
                                     within_s=within_s)
        except BaseException as exc:  # noqa: BLE001 - every failure is a deny, printed by the main thread
            box["error"] = exc

    # A thread of its own, so a daemon that never answers still gets a deny printed in time.
    thread = threading.Thread(target=work, name="palace-approve-hook", daemon=True)
    thread.start()
    thread.join(deadline_s)
    verdict = box.get("verdict")
    if not isinstance(verdict, Verdict):
        error = box.get("error")
        verdict = Verdict(False, f"palace's permission hook failed ({type(error).__name__}: {error}): refused"
                          if error is not None else
                          f"palace did not decide within {deadline_s} s (the harness waits {within_s} s): refused")
    try:
        stdout.write(decision_json(verdict) + "\n")
        stdout.flush()
    except (BrokenPipeError, OSError):
        pass  # the harness stopped listening: nothing more to tell it
    return 0


# -- the run's Gemini settings -------------------------------------------------------------------
# Where the hook goes (observed with Gemini CLI 0.61): Gemini reads a system settings file only if it
# and every folder above it belong to root and nobody else may write them, so a run's own
# GEMINI_CLI_SYSTEM_SETTINGS_PATH is skipped unless palace runs as root. A run gets a Gemini home
# of its own instead (GEMINI_CLI_HOME): its .gemini holds the user's settings plus palace's hook,
# and links to everything else of the user's .gemini (credentials, GEMINI.md, extensions, history),
# so the run is the user's Gemini with one hook more, and the user's own files are left as they were.
# The system and the project's settings rank above the user's: palace refuses to start a run where
# either switches hooks off (the run would do everything unasked).


def hook_command(argv: Sequence[str]) -> str:
    """``argv`` as the one command line Gemini runs through its shell (bash -c; PowerShell on
    Windows), ending in an exit 2 — Gemini's refusal — if the process fails without a decision.

    Raises:
        ValueError: on Windows, an argument holding a word Gemini would replace ($GEMINI_CWD, …).
    """
    if os.name == "nt":
        if any(_GEMINI_EXPANDED.search(a) for a in argv):
            raise ValueError("an argument of palace's hook holds a word Gemini replaces ($GEMINI_…)")
        quoted = " ".join("'" + a.replace("'", "''") + "'" for a in argv)
        return f"& {quoted}; if ($LASTEXITCODE -ne 0) {{ exit 2 }}"
    # Every `$` shlex leaves is inside single quotes; `$''` is the same word to bash, and keeps
    # Gemini's textual $GEMINI_… replacement away from a task id or path that holds one.
    return shlex.join(argv).replace("$", "$''") + " || exit 2"


def system_settings_path(env: Mapping[str, str]) -> Path:
    """The system settings file Gemini reads (``GEMINI_CLI_SYSTEM_SETTINGS_PATH``, else the
    platform's; settings.ts getSystemSettingsPath)."""
    if env.get("GEMINI_CLI_SYSTEM_SETTINGS_PATH"):
        return Path(env["GEMINI_CLI_SYSTEM_SETTINGS_PATH"])
    if sys.platform == "darwin":
        return Path("/Library/Application Support/GeminiCli/settings.json")
    if os.name == "nt":
        return Path("C:\\ProgramData\\gemini-cli\\settings.json")
    return Path("/etc/gemini-cli/settings.json")


def user_gemini_home(env: Mapping[str, str], home: Path) -> Path:
    """The folder whose ``.gemini`` Gemini reads as the user's (``GEMINI_CLI_HOME``, else ``home``)."""
    return Path(env["GEMINI_CLI_HOME"]) if env.get("GEMINI_CLI_HOME") else home


def strip_json_comments(text: str) -> str:
    """``text`` without its ``//`` and ``/* */`` comments (Gemini's settings are JSON with
    comments: it reads them with strip-json-comments); strings are left as they are.

    Raises:
        ValueError: a ``/*`` comment that never ends.
    """
    out: list[str] = []
    i, n, in_string = 0, len(text), False
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\":
                out.append(text[i:i + 2])
                i += 2
                continue
            in_string = ch != '"'
        elif ch == '"':
            in_string = True
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ValueError("a /* comment never ends")
            out.append(" ")
            i = end + 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def parse_gemini_settings(text: str, where: str) -> dict[str, Any]:
    """A Gemini settings file's text as its object ({} for an empty file).

    Raises:
        HookSettingsError: not JSON (with comments), or not an object.
    """
    try:
        settings = json.loads(strip_json_comments(text)) if text.strip() else {}
    except (ValueError, RecursionError) as exc:
        raise HookSettingsError(f"{where} is not JSON ({exc})") from None
    if not isinstance(settings, dict):
        raise HookSettingsError(f"{where} is not a JSON object")
    return settings


def read_gemini_settings(path: Path) -> dict[str, Any]:
    """The Gemini settings file at ``path`` ({} when there is none).

    Raises:
        HookSettingsError: it cannot be read, or is not a JSON object.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise HookSettingsError(f"cannot read Gemini's settings {path}: "
                                f"{getattr(exc, 'strerror', None) or exc}") from None
    return parse_gemini_settings(text, f"Gemini's settings {path}")


def check_hooks_stay_on(settings: Mapping[str, Any], where: str) -> None:
    """Refuse settings that rank above the user's and switch hooks off.

    Raises:
        HookSettingsError: ``hooksConfig.enabled`` is false there.
    """
    hooks_config = settings.get("hooksConfig")
    if isinstance(hooks_config, Mapping) and hooks_config.get("enabled") is False:
        raise HookSettingsError(f"{where} switch Gemini's hooks off (hooksConfig.enabled = false): palace's "
                                "permission hook could not run, so it does not start Gemini unattended")


def gemini_run_settings(user: Mapping[str, Any], command: str, timeout_s: int, *,
                        where: str = "Gemini's user settings") -> dict[str, Any]:
    """The user settings of one run: the user's (``user``), with palace's hook first among the
    ``BeforeTool`` hooks (matching every tool, ``timeout_s`` long) and hooks switched on.

    Raises:
        HookSettingsError: the user's settings hold hooks in another shape.
    """
    settings = copy.deepcopy(dict(user))
    hooks_config = settings.setdefault("hooksConfig", {})
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks_config, dict) or not isinstance(hooks, dict):
        raise HookSettingsError(f"{where}: hooks and hooksConfig must be objects")
    before = hooks.get("BeforeTool", [])
    if not isinstance(before, list):
        raise HookSettingsError(f"{where}: hooks.BeforeTool must be a list")
    hooks_config["enabled"] = True
    ours = {"matcher": ".*", "hooks": [{"type": "command", "command": command, "timeout": timeout_s * 1000}]}
    hooks["BeforeTool"] = [ours, *before]
    return settings


def make_gemini_home(run_home: Path, user_home: Path, settings: Mapping[str, Any]) -> Path:
    """A Gemini home for one run at ``run_home`` (its ``GEMINI_CLI_HOME``): ``.gemini/settings.json``
    is ``settings``; every other entry of the user's ``.gemini``, and their ``.agents``, is a link
    to the user's own (what the run changes there, it changes for the user, as a run without
    palace's hook would). Returns ``run_home``.

    Raises:
        OSError: the folder or a link cannot be made.
    """
    gemini = run_home / ".gemini"
    gemini.mkdir(parents=True, exist_ok=True)
    theirs = user_home / ".gemini"
    if theirs.is_dir():
        for entry in theirs.iterdir():
            if entry.name != "settings.json" and not (gemini / entry.name).is_symlink():
                (gemini / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    agents = user_home / ".agents"
    if agents.is_dir() and not (run_home / ".agents").is_symlink():
        (run_home / ".agents").symlink_to(agents, target_is_directory=True)
    (gemini / "settings.json").write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    return run_home
