"""``palacectl task launch``: run a headless agent harness on one task, and do palace's bookkeeping.

Owns: the checks before a run (the task, its addressee, the git workspace, its base commit and
branch; each refused with ``LaunchRefused``, nothing started), the runners (how each harness is
started headless, and ``[runners.NAME]`` from ``config.toml``), the task's own git worktree, and the
run's bookkeeping: claim first, a ``task.status`` event when the run starts and every
``heartbeat_s`` while it lives (so the claim never looks stalled), the run's output kept as a
``log`` artifact, then the patch (``git diff`` against the base commit) or a ``failed``/``blocked``
reply quoting the run's last message (a built-in harness's JSON output read by
``palace_proto.usage.final_text``), else the log's tail, verbatim. A timeout, Ctrl-C or SIGTERM
stops the runner (its whole process group) and says so in the reply.

The runner is started without a shell, with the task's hand-off and palace's rules as its prompt,
and with palace's answer to its permission requests (issue 28): Claude Code's approve tool (an MCP
config file of the run's own), Gemini CLI's ``BeforeTool`` hook (a Gemini home of the run's own,
the approvals feature's ``approve_hook``); both beside the log, never in the worktree.
Talks to the daemon through ``palacectl.client`` only (never imports palaced).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from palace_proto.errors import ValidationError
from palace_proto.paths import CONFIG_FILENAME
from palace_proto.stamps import format_stamp
from palace_proto.usage import (
    MAX_MACHINE_CHARS,
    USAGE_TYPE,
    final_text,
    format_usd,
    parse_budgets,
    parse_usage,
    usage_metadata,
)

from ...client import Client, DaemonUnreachable
from ...files import ConfigUnreadable
from ...files import read_config as read_config_toml
from ...git import GitDirSnapshot, PinnedGit, palacectl_in_worktree
from ...rules import render_rules
from ..approvals.approve_hook import (
    HookSettingsError,
    check_hooks_stay_on,
    gemini_run_settings,
    hook_command,
    make_gemini_home,
    parse_gemini_settings,
    read_gemini_settings,
    system_settings_path,
    user_gemini_home,
)
from ..approvals.permission_policy import DEFAULT_TIMEOUT_S as DEFAULT_APPROVAL_TIMEOUT_S
from ..approvals.permission_policy import RUNNER_ENV, TASK_ENV, PermissionPolicy, PolicyError
from ..tasks.request import GitBase

__all__ = ["BUILTIN_RUNNERS", "Launch", "LaunchRefused", "LaunchResult", "append_on_task", "metadata_field",
           "remove_worktree", "runner_command", "stop_process_group", "task_slug"]

# Why 60 s: the bookkeeping after a run waits this long for a daemon that is restarting (an
# upgrade, a crash and its service restart) before `task launch` gives up with exit 3.
DAEMON_WAIT_S: Final = 60.0
DAEMON_RETRY_S: Final = 1.0
# Why 10 s: how long a stopped runner gets to exit on SIGTERM before its process group is killed.
STOP_GRACE_S: Final = 10.0
# A runner gets a process group (a session) of its own, so stopping it stops every process it
# started (a harness runs tools, shells, test runners) and a Ctrl-C in our terminal reaches us only.
if sys.platform == "win32":
    NEW_PROCESS_GROUP: Final[dict[str, Any]] = {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
else:
    NEW_PROCESS_GROUP: Final[dict[str, Any]] = {"start_new_session": True}


def stop_process_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop a runner and everything it started: SIGTERM to its group, SIGKILL after the grace."""
    if os.name == "nt":  # no process groups to signal: terminate() is TerminateProcess
        proc.terminate()
        proc.wait()
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


#: Each harness's documented headless invocation (docs/coordination.md, "Let a machine work by itself").
#: ``{handoff}`` is the prompt, ``{workspace}`` the task's worktree (also the working directory).
BUILTIN_RUNNERS: Final[dict[str, list[str]]] = {
    # `claude --print`: non-interactive; acceptEdits lets it edit files without a prompt; every
    # other permission request goes to palace's `approve` tool (the policy, or a person: issue 28);
    # its JSON result carries the run's usage (recorded as a usage.report: palace_proto.usage).
    "claude": ["claude", "--print", "--permission-mode", "acceptEdits", "--output-format", "json",
               "--mcp-config", "{palace_mcp}", "--permission-prompt-tool", "mcp__palace_run__approve", "{handoff}"],
    # `codex exec`: non-interactive; workspace-write lets it edit inside --cd.
    "codex": ["codex", "exec", "--json", "--cd", "{workspace}", "--sandbox", "workspace-write", "{handoff}"],
    # `gemini --prompt`: headless; yolo, because palace's BeforeTool hook is the gate: the run's own
    # Gemini home (GEMINI_CLI_HOME, made by `task launch`: the user's settings plus the hook) makes
    # every tool call ask `palacectl approve-hook` first, which answers by the policy or a person
    # (issue 28) and refuses on any failure, since Gemini runs a call whose hook failed. --skip-trust:
    # a fresh worktree is a folder Gemini has never been told to trust, and it refuses those (exit 55).
    "gemini": ["gemini", "--approval-mode", "yolo", "--skip-trust", "--output-format", "json", "--prompt",
               "{handoff}"],
    # `opencode run`: one prompt, non-interactive; --dir: its project is the worktree (it takes the
    # project from $PWD otherwise, and refuses edits outside it: issue 26's harness rig).
    "opencode": ["opencode", "run", "--dir", "{workspace}", "--format", "json", "{handoff}"],
}
PLACEHOLDERS: Final = ("{handoff}", "{workspace}", "{correlation_id}", "{palace_mcp}")
#: the MCP server a run's harness is given for its permission requests (``{palace_mcp}``: a JSON
#: file of ``mcpServers``), and the tool it names: ``mcp__palace_run__approve`` in Claude Code
RUN_MCP_SERVER: Final = "palace_run"
# Why a minute over the policy's timeout: the harness must not give up on the approve tool (or
# hook) before palace has had its answer (or its timeout, a deny) from the person.
_APPROVAL_MARGIN_S: Final = 60
#: the built-in runners whose permission requests go to palace's command hook
#: (``palacectl approve-hook``) through settings of the run's own, by harness
HOOKED_RUNNERS: Final = {"gemini": "gemini"}
# Why 2 KiB: the tail of a failed run's log that goes verbatim into the reply (the whole log is
# the artifact); enough for a traceback's last frames and the error.
LOG_TAIL_BYTES: Final = 2048
# Why 32 MiB: the most of a run's output kept as its artifact (the end, where failures are).
MAX_LOG_BYTES: Final = 32 << 20
# Why a third of the stall time (at most 5 min, at least 5 s): two heartbeats fit in every stall
# window, so a live run never looks stalled.
MAX_HEARTBEAT_S: Final = 300.0
MIN_HEARTBEAT_S: Final = 5.0
_SLUG_UNSAFE_RE: Final = re.compile(r"[^A-Za-z0-9_-]+")
# Why 60: a slug names a directory and a branch; with its hash it stays far below every file
# system's name limit and git's ref rules, however long the correlation id.
SLUG_CHARS: Final = 60
#: the most of the first untracked files a refusal names
NAMED_FILES: Final = 3


class LaunchRefused(Exception):
    """A check failed before anything started; the message says which and how to fix it."""


def runner_command(name: str, home: Path) -> list[str]:
    """The command template of runner ``name``: ``[runners.NAME] command`` in config.toml
    (a custom one, or overriding a built-in), else a built-in.

    Raises:
        LaunchRefused: unknown runner, a malformed ``[runners.NAME]``, a ``[permissions]`` that is
            not a policy (its runs' approve tool would refuse every request), or a malformed ``[budgets]``.
    """
    path = home / CONFIG_FILENAME
    config = read_config(home)
    try:
        # Refused here, before anything starts, not at their first use.
        PermissionPolicy.from_config(config, name)
        if config.get("budgets") is not None:
            parse_budgets(config["budgets"])
    except PolicyError as exc:
        raise LaunchRefused(f"{path}: {exc}") from None
    except ValidationError as exc:
        raise LaunchRefused(f"{path}: {exc.message}") from None
    runners = config.get("runners", {})
    custom = runners.get(name) if isinstance(runners, dict) else None
    if custom is not None:
        command = custom.get("command") if isinstance(custom, dict) else None
        if not isinstance(command, list) or not command or not all(isinstance(c, str) and c for c in command):
            raise LaunchRefused(f"{path}: [runners.{name}] command must be a non-empty list of strings, "
                                'e.g. command = ["my-agent", "--prompt", "{handoff}"]')
        return list(command)
    if name in BUILTIN_RUNNERS:
        return list(BUILTIN_RUNNERS[name])
    known = sorted(set(BUILTIN_RUNNERS) | (set(runners) if isinstance(runners, dict) else set()))
    raise LaunchRefused(f"unknown runner {name!r}: use one of {', '.join(known)}, or define "
                        f"[runners.{name}] command = [...] in {path}")


def utc_stamp() -> str:
    """Now, as the log stamps events (compared with their ``created_at``)."""
    return format_stamp(time.time())


def _machine_name() -> str:
    """The machine a run's usage report names (its host name, visible text, bounded)."""
    name = "".join(ch for ch in socket.gethostname() if ch.isprintable() and not ch.isspace())[:MAX_MACHINE_CHARS]
    return name or "unknown"


def read_config(home: Path) -> dict[str, Any]:
    """``config.toml`` of ``home``, parsed ({} when there is none).

    Raises:
        LaunchRefused: it cannot be read or parsed.
    """
    try:
        return read_config_toml(home)
    except ConfigUnreadable as exc:
        raise LaunchRefused(str(exc)) from None


def fill(template: Sequence[str], values: Mapping[str, str]) -> list[str]:
    out = []
    for part in template:
        for key, value in values.items():
            part = part.replace("{" + key + "}", value)
        out.append(part)
    return out


#: a full commit id, SHA-1 or SHA-256 (a branch name or an abbreviation can point elsewhere tomorrow)
FULL_COMMIT_RE: Final = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
ABBREVIATED_COMMIT_RE: Final = re.compile(r"[0-9a-f]{7,64}")
#: held around `git worktree add/remove`: a worker's parallel launches share one repository, and
#: git's own locks refuse (rather than wait for) a second change of its worktree list
GIT_WORKTREES_LOCK: Final = threading.Lock()


def task_slug(correlation_id: str) -> str:
    """A name for a task's directory and branch, safe whatever the correlation id holds (issue 25,
    findings 4 and 5: ``..``, ``/``, a space, ``x.lock`` or a trailing ``.`` made a directory
    outside the home, or a branch git refuses): its letters, digits, ``_`` and ``-`` (others become
    ``-``; at most SLUG_CHARS), then a hash of the whole id, so two ids never share a slug."""
    readable = _SLUG_UNSAFE_RE.sub("-", correlation_id).strip("-")[:SLUG_CHARS] or "task"
    return f"{readable}-{hashlib.sha256(correlation_id.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def task_branch(correlation_id: str) -> str:
    """The branch of a task's own worktree: ``palace/<slug>``."""
    return "palace/" + task_slug(correlation_id)


def remove_worktree(repo: Path, worktree: Path, branch: str) -> None:
    """Remove a task's worktree and its branch (what is missing already is fine). The work is
    in the palace by then: the patch or the log artifact.

    The worktree's own ``.git`` is the run's to have changed: palace deletes the directory itself
    (symbolic links are removed, never followed) and then lets git, pinned to the user's
    repository, forget it.

    Raises:
        LaunchRefused: the repository is gone, or git failed.
    """
    with GIT_WORKTREES_LOCK:
        if worktree.is_symlink():
            worktree.unlink()
        elif worktree.exists():
            shutil.rmtree(worktree, ignore_errors=True)
        git = PinnedGit.discover(repo, error=LaunchRefused)
        git("worktree", "prune", check=False)
        git("branch", "-D", branch, check=False)


@dataclass
class LaunchResult:
    correlation_id: str
    agent: str
    runner: str
    worktree: str
    # delivered, failed, blocked; released (a stopping worker gave it back); lost (another
    # agent's claim holds: nothing reported)
    outcome: str
    exit_code: int | None
    reason: str
    log_artifact: str | None = None
    patch_event: str | None = None
    reply_event: str | None = None
    events: list[str] = field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Launch:
    """One run of a runner on one task (see the module docstring)."""

    def __init__(self, home: Path, correlation_id: str, *, runner: str, workspace: Path, agent: str | None,
                 in_place: bool = False, timeout_s: float | None = None, say: Callable[[str], None] = print,
                 handle_signals: bool = True, daemon_wait_s: float | None = DAEMON_WAIT_S,
                 on_claim: Callable[[Launch], None] | None = None,
                 on_start: Callable[[Launch], None] | None = None) -> None:
        """``handle_signals``: SIGINT/SIGTERM stop the run (the main thread only; a worker runs
        launches on threads and calls ``stop`` instead). ``daemon_wait_s``: how long the
        bookkeeping after the run waits for a daemon that is restarting (None: until ``stop``).
        ``on_claim``: called once the claim is recorded (``worktree``, ``repo``, ``log_path`` are
        known); ``on_start``: once the runner process runs (``proc`` is set)."""
        self.home = home
        self.cid = correlation_id
        self.runner = runner
        self.workspace = workspace
        self.agent_arg = agent
        self.in_place = in_place
        self.timeout_s = timeout_s
        self.say = say
        self.handle_signals = handle_signals
        self.daemon_wait_s = daemon_wait_s
        self.on_claim = on_claim
        self.on_start = on_start
        self._stop_reason: str | None = None
        self._then = "blocked"
        self._abandon = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        #: a gemini run's own Gemini home (``GEMINI_CLI_HOME``), while it runs
        self.gemini_home: Path | None = None
        #: names this run in the events that record its outcome (so a retry never records it twice)
        self.run_id = secrets.token_hex(8)
        #: when the runner started (the daemon's stamp format): its usage report is written after it
        self._run_started = "9999"

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self._proc

    def stop(self, reason: str, *, then: str = "blocked", abandon: bool = False) -> None:
        """Stop the run (from any thread): the runner is stopped, and then the task is replied
        ``blocked`` with ``reason`` (``then="blocked"``), released with it so it is open again
        (``"released"``: a worker that stops), or nothing is written (``"lost"``: someone else
        holds the claim). ``abandon``: also give up waiting for an unreachable daemon (a
        worker's state file keeps the run, and its next start reports it)."""
        if self._stop_reason is None:
            self._stop_reason, self._then = reason, then
        if abandon:
            self._abandon.set()

    def __repr__(self) -> str:
        return f"<Launch {self.cid} runner={self.runner} workspace={self.workspace}>"

    # -- checks (nothing is started or written until they all pass) -----------------------------

    def check(self, client: Client) -> dict[str, Any]:
        """The task view, once every check passed; sets ``agent``, ``repo``, ``template``.

        Raises:
            LaunchRefused: naming the check that failed.
        """
        self.template = runner_command(self.runner, self.home)
        #: the harness whose permission hook this run gets: a built-in runner's command only (a
        #: user's own runner is started as written)
        self.hooked = HOOKED_RUNNERS.get(self.runner) if self.template == BUILTIN_RUNNERS.get(self.runner) else None
        view = client.call("task_show", correlation_id=self.cid)
        # The task's request is its first (a second one, by anyone, is flagged and changes nothing).
        request = view["request"]
        if view["terminal"]:
            raise LaunchRefused(f"task {self.cid} is closed ({view['state']})")
        assigned = view["assigned_to"]
        if assigned == "*" and not self.agent_arg:
            raise LaunchRefused(f"task {self.cid} is a broadcast: say which agent runs it with --agent ID")
        self.agent = self.agent_arg or assigned
        if assigned not in ("*", self.agent):
            raise LaunchRefused(f"task {self.cid} is addressed to {assigned}, not {self.agent}")
        if view["claimed_by"] not in (None, self.agent):
            raise LaunchRefused(f"task {self.cid} is already claimed by {view['claimed_by']}")
        if view.get("waiting_on"):
            raise LaunchRefused(f"task {self.cid} is blocked by {', '.join(view['waiting_on'])} (not applied yet)")
        if not self.workspace.is_dir():
            raise LaunchRefused(f"workspace {self.workspace} is not a directory")
        try:
            self.git = PinnedGit.discover(self.workspace, error=LaunchRefused)
        except LaunchRefused:
            raise LaunchRefused(f"workspace {self.workspace} is not a git repository") from None
        self.repo = self.git.work_tree
        start = GitBase.of(request)
        # A rework round (the integrator's: the patch no longer applied) starts from its new base.
        self.branch, self.base = start.branch, self._resolve_base(view.get("base") or start.commit)
        #: what sent the task back, if it came back (a review's changes, a rebase): the run is told
        self.rework = (view.get("reworks") or [None])[-1]
        if self.git("status", "--porcelain", "--untracked-files=no", "--ignore-submodules=all").strip():
            raise LaunchRefused(f"workspace {self.repo} has uncommitted changes: commit or stash them first")
        if self.in_place:
            current = self.git("rev-parse", "--abbrev-ref", "HEAD").strip()
            if current != self.branch:
                raise LaunchRefused(f"workspace {self.repo} is on branch {current}, the task is for {self.branch}: "
                                    "check that branch out, or drop --in-place (palace then makes a worktree)")
            # The patch is what the run changed: files that were there before it would be told from
            # its own only by guessing, and a private note must never travel to the requester.
            untracked = [p for p in self.git("ls-files", "--others", "--exclude-standard", "-z").split("\0") if p]
            if untracked:
                named = ", ".join(untracked[:NAMED_FILES]) + (", …" if len(untracked) > NAMED_FILES else "")
                raise LaunchRefused(f"workspace {self.repo} has {len(untracked)} untracked file(s) ({named}): palace "
                                    "would not tell them from what the run writes; commit, stash (git stash -u) or "
                                    "remove them, or drop --in-place (a fresh worktree)")
            #: ignored before the run (collapsed directories): never part of the patch, whatever the
            #: run does to the ignore rules
            self.ignored_before = tuple(p for p in self.git(
                "ls-files", "--others", "--ignored", "--exclude-standard", "--directory", "-z", text=False).split(b"\0")
                if p)
            self.worktree = self.repo
            self.tree_git = self.git
        else:
            slug = task_slug(self.cid)
            self.worktree = self.home / "worktrees" / _safe_dir_name(self.repo.name) / slug
            self.task_branch = task_branch(self.cid)
            if self.worktree.exists():
                raise LaunchRefused(f"a worktree for {self.cid} exists already ({self.worktree}): remove it with "
                                    f"git -C {self.repo} worktree remove --force {self.worktree}")
            if self.git("rev-parse", "--verify", "--quiet", f"refs/heads/{self.task_branch}", check=False).strip():
                raise LaunchRefused(f"branch {self.task_branch} exists already in {self.repo}: delete it "
                                    f"(git branch -D {self.task_branch}) to run the task again")
        # Beside the worktree, not in it: the log is never part of the patch.
        self.log_path = (self.home / "worktrees" / f"{task_slug(self.cid)}.log" if self.in_place
                         else self.worktree.parent / f"{self.worktree.name}.log")
        if self.hooked == "gemini":
            self.gemini_settings_document = self._gemini_settings()
        return view

    def _resolve_base(self, base: str) -> str:
        """The task's base as the full id of a commit in the repository. Only a commit id, never a
        branch, tag or other revision (they point elsewhere from one day, or one machine, to the
        next: issue 25, finding 2); an abbreviated id only if exactly one commit here has it.

        Raises:
            LaunchRefused: not a commit id, not in the repository, or ambiguous.
        """
        lowered = base.lower()
        if not ABBREVIATED_COMMIT_RE.fullmatch(lowered):
            raise LaunchRefused(f"base commit {base or '(none)'} of task {self.cid} is not a commit id (7 to 64 hex "
                                "digits; a branch or tag is not taken): its requester must name the exact commit")
        if FULL_COMMIT_RE.fullmatch(lowered):
            candidates = [lowered]
        else:
            candidates = self.git("rev-parse", f"--disambiguate={lowered}", check=False).split()
        commits = [c for c in candidates if self.git("cat-file", "-t", c, check=False).strip() == "commit"]
        if len(commits) > 1:
            raise LaunchRefused(f"base commit {base} of task {self.cid} names {len(commits)} commits in {self.repo}: "
                                "its requester must give more digits")
        if not commits:
            raise LaunchRefused(f"base commit {base} of task {self.cid} is not in {self.repo}: fetch it first (git fetch)")
        return commits[0]

    # -- the run ----------------------------------------------------------------------------------

    def run(self) -> LaunchResult:
        """Check, claim, run, report. Raises ``LaunchRefused`` (nothing started) or returns."""
        with Client(self.home, client_name="palacectl-launch") as client:
            view = self.check(client)
            claimed = client.call("task_claim", correlation_id=self.cid, agent=self.agent)
            self.request = view["request"]
            stall = float(claimed["task"]["stall_after_s"])
            over = self._task_budget_over(client)
        if self.on_claim is not None:
            self.on_claim(self)
        if over is not None:
            # Its earlier runs spent what the task may cost: no run starts; the requester is told.
            result = LaunchResult(self.cid, self.agent, self.runner, "", "blocked", None, over)
            result.reply_event = self._event("task.reply", f"{self.agent} did not run {self.cid}: {over}",
                                             status="blocked")
            return result
        if self.in_place:
            # What a run in the checkout itself could turn into a command runner for palace's own
            # git (or the user's next one): compared, and put back, once the run is over.
            self.git_state = GitDirSnapshot.take(self.repo, self.git.git_dir)
        else:
            try:
                self.worktree.parent.mkdir(parents=True, exist_ok=True)
                with GIT_WORKTREES_LOCK:
                    self.git("worktree", "add", "--quiet", "-b", self.task_branch, str(self.worktree), self.base)
                # Found now, before the runner starts: afterwards its `.git` is the run's to have changed.
                self.tree_git = PinnedGit.discover(self.worktree, error=LaunchRefused)
            except (LaunchRefused, OSError) as exc:
                # Answered once, never retried by itself (issue 25, finding 4: a release made a
                # worker claim and release the same task forever); its requester can open it again.
                reason = f"{self.agent} could not prepare a worktree for {self.cid}: {exc}"
                self._event("task.reply", reason, status="blocked")
                raise LaunchRefused(f"cannot create the worktree {self.worktree}: {exc}") from None
        prompt = self._prompt()
        log_path = self.log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        mcp_config = self._write_run_mcp_config(log_path.with_suffix(".mcp.json"))
        #: the run's own Gemini home (GEMINI_CLI_HOME), beside the log; removed after the run
        self.gemini_home = log_path.with_suffix(".gemini-home") if self.hooked == "gemini" else None
        command = fill(self.template, {"handoff": prompt, "workspace": str(self.worktree),
                                       "correlation_id": self.cid, "palace_mcp": str(mcp_config)})
        result = LaunchResult(self.cid, self.agent, self.runner, str(self.worktree), "failed", None, "")
        previous = ({sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
                    if self.handle_signals else {})
        try:
            for sig in previous:
                signal.signal(sig, self._on_signal)
            with open(log_path, "wb") as log:
                try:
                    if self.gemini_home is not None:
                        make_gemini_home(self.gemini_home, user_gemini_home(os.environ, Path.home()),
                                         self.gemini_settings_document)
                    # PWD too: a runner that reads it (OpenCode) must not see the launching shell's.
                    self._proc = subprocess.Popen(command, cwd=self.worktree, stdout=log, stderr=subprocess.STDOUT,
                                                  stdin=subprocess.DEVNULL, env=self._run_env(), **NEW_PROCESS_GROUP)
                except OSError as exc:
                    result.outcome, result.reason = "failed", f"cannot start runner {command[0]!r}: {exc.strerror or exc}"
                    self._finish(result, log_path)
                    return result
                self._run_started = utc_stamp()
                if self.on_start is not None:
                    self.on_start(self)
                try:
                    started = self._event("task.status", f"{self.agent} started {self.runner} on {self.cid} in "
                                          f"{self.worktree} (pid {self._proc.pid})",
                                          metadata={"runner": self.runner, "worktree": str(self.worktree),
                                                    "pid": self._proc.pid, "command": command[:1]})
                    result.events.append(started)
                except DaemonUnreachable as exc:  # restarting: the run goes on, the heartbeats say it lives
                    self.say(f"palacectl: the start of the run was not recorded ({exc}); the run goes on")
                result.exit_code = self._wait(max(MIN_HEARTBEAT_S, min(MAX_HEARTBEAT_S, stall / 3)))
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self.gemini_home is not None:  # links to the user's .gemini: removed, never followed
                shutil.rmtree(self.gemini_home, ignore_errors=True)
        self._judge(result)
        self._finish(result, log_path)
        return result

    def _write_run_mcp_config(self, path: Path) -> Path:
        """The MCP server of this run's permission requests (``{palace_mcp}``): palace's ``approve``
        tool, speaking as the run's agent, on this home. Beside the log, never in the worktree."""
        # The server starts in the worktree.
        command, *args = palacectl_in_worktree("mcp", "--agent", self.agent, "--home", str(self.home),
                                               "--tools", "approvals")
        server = {"type": "stdio", "command": command, "args": args}
        path.write_text(json.dumps({"mcpServers": {RUN_MCP_SERVER: server}}, indent=2) + "\n", encoding="utf-8")
        return path

    def _gemini_settings(self) -> dict[str, Any]:
        """Gemini's user settings for this run (the approvals feature's ``approve_hook``, "the run's Gemini
        settings"): the user's, plus palace's ``BeforeTool`` hook on every tool, speaking as the
        run's agent on this home for this task and runner. Its time limit is the policy's timeout
        plus a margin, and the hook is told it, so it answers (a deny at worst) before Gemini would
        give up on it and run the call. The settings that rank above the user's — the system's and
        the project's (the task's base commit; the checkout itself with --in-place) — must leave
        hooks on.

        Raises:
            LaunchRefused: a settings file cannot be read, switches hooks off, or cannot carry the hook.
        """
        within_s = self._approval_timeout_s() + _APPROVAL_MARGIN_S
        try:
            check_hooks_stay_on(read_gemini_settings(system_settings_path(os.environ)), "Gemini's system settings")
            project = ".gemini/settings.json"
            if self.in_place:
                check_hooks_stay_on(read_gemini_settings(self.repo / project), f"{self.repo / project}")
            elif self.git("ls-tree", "--name-only", self.base, "--", project).strip():
                where = f"{project} of {self.base[:12]}"
                check_hooks_stay_on(parse_gemini_settings(self.git("show", f"{self.base}:{project}"), where), where)
            user = user_gemini_home(os.environ, Path.home()) / ".gemini" / "settings.json"
            # The hook runs in the worktree.
            command = hook_command(palacectl_in_worktree("--home", str(self.home), "approve-hook", "--harness",
                                                         "gemini", "--agent", self.agent, "--task", self.cid,
                                                         "--runner", self.runner, "--within", str(within_s)))
            return gemini_run_settings(read_gemini_settings(user), command, within_s, where=f"{user}")
        except (HookSettingsError, ValueError) as exc:
            raise LaunchRefused(f"cannot give the gemini run palace's permission hook: {exc}") from None

    def _approval_timeout_s(self) -> int:
        """How long the policy lets a person take to answer a permission request."""
        try:
            return PermissionPolicy.from_config(read_config(self.home), self.runner).timeout_s
        except (PolicyError, LaunchRefused):
            return DEFAULT_APPROVAL_TIMEOUT_S  # the run's approve tool or hook says what is wrong, and denies

    def _run_env(self) -> dict[str, str]:
        """The runner's environment: ours, its working directory (a runner that reads ``PWD``,
        OpenCode, must not see the launching shell's), and what palace's ``approve`` tool reads:
        the task, the runner (whose ``[permissions.RUNNER]`` applies), and, for Claude Code, an MCP
        tool timeout past the policy's (a person may take that long to answer). A Gemini run gets
        its own Gemini home (its hook)."""
        env = {**os.environ, "PWD": str(self.worktree), TASK_ENV: self.cid, RUNNER_ENV: self.runner}
        env.setdefault("MCP_TOOL_TIMEOUT", str((self._approval_timeout_s() + _APPROVAL_MARGIN_S) * 1000))
        if self.gemini_home is not None:
            env["GEMINI_CLI_HOME"] = str(self.gemini_home)
        return env

    def _prompt(self) -> str:
        again = ""
        if self.rework is not None:
            why = ("Its reviewer asked for changes" if self.rework["kind"] == "changes_requested"
                   else "Its earlier patch no longer applied to the branch")
            again = (f"This task came back ({why}, {self.rework['by']}): redo it from the base commit above.\n"
                     f"{self.rework['said']}\n\n")
        return (f"You are agent {self.agent}, working on palace task {self.cid} in the git worktree "
                f"{self.worktree} (at its base commit {self.base[:12]}).\n\n{again}{self.request['body']}\n\n"
                "palace does this run's bookkeeping: it has claimed the task for you, and when you exit it "
                "submits the changes you leave in this worktree as the patch (or replies failed/blocked with "
                "your output). Make the changes, run the checks the definition of done names, and exit; do not "
                "push, and do not claim, ack or submit yourself.\n\n" + render_rules(self.agent, "cli"))

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stop(f"stopped by {signal.Signals(signum).name} on the launching machine")

    def _kill(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        stop_process_group(proc)

    def _wait(self, heartbeat_s: float) -> int | None:
        assert self._proc is not None
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        started = time.monotonic()
        next_beat = started + heartbeat_s
        while True:
            try:
                return self._proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if self._stop_reason is not None:
                self._kill()
                return self._proc.returncode
            if deadline is not None and now >= deadline:
                self._stop_reason = f"timed out after {self.timeout_s:.0f} s (--timeout): the runner was stopped"
                self._kill()
                return self._proc.returncode
            if now >= next_beat:
                next_beat = now + heartbeat_s
                try:  # the claim is renewed: an event from the claimant on the task
                    self._event("task.status", f"{self.agent}'s {self.runner} run is alive ({now - started:.0f} s)",
                                metadata={"pid": self._proc.pid, "elapsed_s": round(now - started)})
                except Exception as exc:  # noqa: BLE001 - the daemon may restart under a long run
                    self.say(f"palacectl: heartbeat not recorded ({exc}); the run goes on")

    def _judge(self, result: LaunchResult) -> None:
        if self._stop_reason is not None and self._then != "blocked":
            result.outcome, result.reason = self._then, self._stop_reason
            return
        if self._stop_reason is not None:
            timed_out = self._stop_reason.startswith("timed out")
            result.outcome, result.reason = ("failed" if timed_out else "blocked"), self._stop_reason
            return
        if result.exit_code != 0:
            result.outcome, result.reason = "failed", f"{self.runner} exited with status {result.exit_code}"
            return
        try:
            self.diff = self._patch()
        except LaunchRefused as exc:
            result.outcome, result.reason = "blocked", f"no patch delivered: {exc}"
            return
        if not self.diff.strip():
            result.outcome, result.reason = "blocked", f"{self.runner} exited 0 but changed nothing"
            return
        result.outcome, result.reason = "delivered", f"{self.runner} finished; the patch is ready for review"

    def _patch(self) -> str:
        """The run's changes against the base commit, as a binary patch (pinned git only).

        In a worktree palace made, that is everything in it. In the checkout itself, the tracked
        files the run changed and the files it added (there were no untracked ones before, and
        what was ignored then stays out), staged in an index of palace's own: the user's index is
        left as it was. No nested repository travels (a submodule entry the base did not have).

        Raises:
            LaunchRefused: the run changed ``.git`` (in the checkout: put back as it was), made a
                nested repository, or git failed.
        """
        if not self.in_place:
            self.tree_git("add", "-A")
            return self._diff(None)
        changed = self.git_state.changes()
        if changed:
            self.git_state.restore()
            raise LaunchRefused(f"the run changed the repository's own files ({', '.join(changed[:NAMED_FILES])}): "
                                "put back as they were before it; palace ran no git command on them")
        index = self.home / "worktrees" / f"{task_slug(self.cid)}.index"
        try:
            own = self.git.git_dir / "index"
            if own.is_file():
                shutil.copyfile(own, index)
            self.tree_git("add", "-u", index_file=index)
            added = [p for p in self.tree_git("ls-files", "--others", "--exclude-standard", "-z", text=False,
                                              index_file=index).split(b"\0")
                     if p and not _under_any(p, self.ignored_before)]
            if added:
                self.tree_git("add", "--pathspec-from-file=-", "--pathspec-file-nul", index_file=index,
                              stdin=b"\0".join(added))
            return self._diff(index)
        finally:
            index.unlink(missing_ok=True)

    def _diff(self, index: Path | None) -> str:
        raw = self.tree_git("diff", "--cached", "--raw", "-z", "--no-renames", self.base, index_file=index)
        fields = raw.split("\0")
        for head, path in zip(fields[::2], fields[1::2], strict=False):  # the split leaves a trailing ""
            modes = head.lstrip(":").split(" ")
            if len(modes) >= 2 and modes[1] == "160000" and modes[0] != "160000":
                raise LaunchRefused(f"the run made a nested git repository at {path}: palace does not deliver one")
        return self.tree_git("diff", "--cached", "--binary", "--no-ext-diff", "--no-textconv", "--no-color",
                             self.base, index_file=index)

    def _finish(self, result: LaunchResult, log_path: Path) -> None:
        """Record the run's outcome, waiting for a restarting daemon (``daemon_wait_s``).

        Raises:
            DaemonUnreachable: the daemon did not come back in time (nothing, or only the log
                artifact, was recorded).
        """
        try:
            data = log_path.read_bytes()[-MAX_LOG_BYTES:]
        except OSError:
            data = b""
        deadline = None if self.daemon_wait_s is None else time.monotonic() + self.daemon_wait_s
        while True:
            try:
                self._record(result, data)
                return
            except DaemonUnreachable as exc:
                if self._abandon.is_set() or (deadline is not None and time.monotonic() >= deadline):
                    raise
                self.say(f"palacectl: waiting for palaced to record the outcome of {self.cid} ({exc})")
                self._abandon.wait(DAEMON_RETRY_S)

    def _record(self, result: LaunchResult, data: bytes) -> None:
        if result.outcome == "lost":
            return  # someone else's claim holds: their run reports the task, this one says nothing
        self._record_outcome(result, data)
        if result.outcome != "lost":
            self._record_usage(data)

    def _task_budget_over(self, client: Client) -> str | None:
        """The line saying this task is over its ``[budgets]`` (``task_usd``, ``task_tokens``) from
        the runs it had already, or None. Harnesses report usage when a run ends, so a budget
        stops the next run of a task, not one under way."""
        table = read_config(self.home).get("budgets")
        if table is None:
            return None
        judged = client.call("usage", by="task", budgets=table).get("budgets") or []
        over = [b["line"] for b in judged if b["scope"] == "task" and b["subject"] == self.cid and b["state"] == "over"]
        return "; ".join(over) or None

    def _record_usage(self, data: bytes) -> None:
        """The run's usage as the harness reported it (``palace_proto.usage``: its JSON output, or
        a ``palace-usage:`` line), as a ``usage.report`` on the task; nothing when it reported none.
        After the outcome, so a retry after a daemon restart finds this run recorded (the usage of
        this run already there is not written twice)."""
        usage = parse_usage(self.runner, data.decode("utf-8", errors="replace"))
        if usage is None:
            return
        metadata = usage_metadata(usage, task_id=self.cid, machine=_machine_name())
        with Client(self.home, client_name="palacectl-launch") as client:
            events = client.call("task_show", correlation_id=self.cid)["events"]
            if any(e["type"] == USAGE_TYPE and e["from_agent"] == self.agent and e["created_at"] >= self._run_started
                   for e in events):
                return
            cost = f", {format_usd(usage.cost_usd)}" if usage.cost_usd is not None else ""
            client.call("append", type=USAGE_TYPE, stream=self.request["stream"], room=self.request["room"],
                        from_agent=self.agent, correlation_id=self.cid, metadata=metadata,
                        body=f"{self.agent} ({self.runner}) used {usage.tokens_in} tokens in, {usage.tokens_out} out"
                             f"{cost} on {self.cid}")

    def _record_outcome(self, result: LaunchResult, data: bytes) -> None:
        with Client(self.home, client_name="palacectl-launch") as client:
            view = client.call("task_show", correlation_id=self.cid)
            if any(metadata_field(e, "run") == self.run_id for e in view["events"]):
                return  # recorded by an attempt whose reply the daemon's restart swallowed
            if view["claimed_by"] != self.agent:
                # The claim was lost while the run went on (a double claim across a partition
                # that healed, a reassign): never deliver over the claimant's work.
                result.outcome = "lost"
                result.reason = (f"{view['claimed_by']} holds the claim now" if view["claimed_by"]
                                 else f"the task is {view['state']} and no longer claimed by {self.agent}")
                return
            if data:
                record = client.call("artifact_put", kind="log", created_by=self.agent, content=data,
                                     metadata={"correlation_id": self.cid, "runner": self.runner})
                result.log_artifact = record["id"]
            if result.outcome == "released":
                log = f" Its log so far: {result.log_artifact}." if result.log_artifact else ""
                result.reply_event = client.call(
                    "task_release", correlation_id=self.cid, agent=self.agent,
                    reason=f"{result.reason}; open again for anyone.{log}",
                    artifact_ids=[result.log_artifact] if result.log_artifact else None)["event"]["id"]
                return
            if result.outcome == "delivered":
                submitted = client.call(
                    "patch_submit", from_agent=self.agent, correlation_id=self.cid, content=self.diff.encode(),
                    **GitBase(self.branch, self.base).fields(), metadata={"run": self.run_id},
                    # The log travels with the patch: every replica that gets the event gets it.
                    artifact_ids=[result.log_artifact] if result.log_artifact else None,
                    body=f"{self.agent} ({self.runner}) delivers {self.cid}: git apply it on {self.base[:12]}. "
                         f"Run log: {result.log_artifact or 'none'}.")
                result.patch_event = submitted["event"]["id"]
                return
        # A harness's JSON output quoted raw is noise to a person: its last message, in words, when
        # the output has one (the log artifact keeps everything); else the log's tail, verbatim.
        words = final_text(self.runner, data.decode("utf-8", errors="replace"))
        quoted = (f"The run's last message:\n{words}" if words else
                  f"Its last lines, verbatim:\n{data[-LOG_TAIL_BYTES:].decode('utf-8', errors='replace')}")
        body = (f"{self.agent} ({self.runner}) {result.outcome} on {self.cid}: {result.reason}.\n"
                f"Log: {result.log_artifact or 'none'}. {quoted}")
        result.reply_event = self._event("task.reply", body, status=result.outcome, metadata={"run": self.run_id},
                                         artifact_ids=[result.log_artifact] if result.log_artifact else None)

    def _event(self, kind: str, body: str, *, status: str | None = None, metadata: dict[str, Any] | None = None,
               artifact_ids: list[str] | None = None) -> str:
        with Client(self.home, client_name="palacectl-launch") as client:
            return append_on_task(client, self.request, self.agent, kind, body, status=status, metadata=metadata,
                                  artifact_ids=artifact_ids)


def append_on_task(client: Client, request: Mapping[str, Any], agent: str, kind: str, body: str, *,
                   status: str | None = None, metadata: dict[str, Any] | None = None,
                   artifact_ids: list[str] | None = None) -> str:
    """Append an event from ``agent`` on the task of ``request`` (its stream, room and
    correlation, to its requester); returns the event id."""
    args: dict[str, Any] = {"type": kind, "stream": request["stream"], "room": request["room"], "from_agent": agent,
                            "to_agent": request["from_agent"], "correlation_id": request["correlation_id"],
                            "body": body}
    if status is not None:
        args["status"] = status
    if metadata:
        args["metadata"] = metadata
    if artifact_ids:
        args["artifact_ids"] = artifact_ids
    return client.call("append", **args)["id"]


def _safe_dir_name(name: str) -> str:
    """A repository's folder name as one safe path component (it names a folder of the home)."""
    return _SLUG_UNSAFE_RE.sub("-", name).strip("-")[:SLUG_CHARS] or "repo"


def _under_any(path: bytes, prefixes: Sequence[bytes]) -> bool:
    """Is ``path`` one of ``prefixes`` or inside one (git lists collapsed directories with a '/')?"""
    return any(path == p.rstrip(b"/") or (p.endswith(b"/") and path.startswith(p)) for p in prefixes)


def metadata_field(event: Mapping[str, Any], key: str) -> Any:
    """The value of ``key`` in an event's metadata (a dict, or its JSON text), if any: a run's
    ``run`` id here, a worker's ``declined_by`` in ``worker``."""
    metadata = event.get("metadata")
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except ValueError:
            return None
    return metadata.get(key) if isinstance(metadata, dict) else None
