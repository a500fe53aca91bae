"""``palacectl task launch``: run a headless agent harness on one task, and do palace's bookkeeping.

Owns: the checks before a run (the task, its addressee, the git workspace, its base commit and
branch; each refused with ``LaunchRefused``, nothing started), the runners (how each harness is
started headless, and ``[runners.NAME]`` from ``config.toml``), the task's own git worktree, and
the run's bookkeeping: claim first, a ``task.status`` event when the run starts and every
``heartbeat_s`` while it lives (so the claim never looks stalled), the run's output kept as a
``log`` artifact, then the patch (``git diff`` against the base commit) or a ``failed``/``blocked``
reply with the log's tail, verbatim. A timeout, Ctrl-C or SIGTERM stops the runner (its whole
process group) and says so in the reply.

The runner is started without a shell, with the task's hand-off and palace's rules as its prompt.
Talks to the daemon through ``palacectl.client`` only (never imports palaced).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from palace_proto.paths import CONFIG_FILENAME

from .client import Client
from .git import run_git
from .rules import render_rules

__all__ = ["BUILTIN_RUNNERS", "LaunchRefused", "Launch", "LaunchResult", "runner_command"]

#: Each harness's documented headless invocation (README "Let a machine work by itself").
#: ``{handoff}`` is the prompt, ``{workspace}`` the task's worktree (also the working directory).
BUILTIN_RUNNERS: Final[dict[str, list[str]]] = {
    # `claude --print`: non-interactive; acceptEdits lets it edit files without a prompt.
    "claude": ["claude", "--print", "--permission-mode", "acceptEdits", "{handoff}"],
    # `codex exec`: non-interactive; workspace-write lets it edit inside --cd.
    "codex": ["codex", "exec", "--cd", "{workspace}", "--sandbox", "workspace-write", "{handoff}"],
    # `gemini --prompt`: headless; auto_edit approves edits (not other tools).
    "gemini": ["gemini", "--approval-mode", "auto_edit", "--prompt", "{handoff}"],
    # `opencode run`: one prompt, non-interactive.
    "opencode": ["opencode", "run", "{handoff}"],
}
PLACEHOLDERS: Final = ("{handoff}", "{workspace}", "{correlation_id}")
# Why 2 KiB: the tail of a failed run's log that goes verbatim into the reply (the whole log is
# the artifact); enough for a traceback's last frames and the error.
LOG_TAIL_BYTES: Final = 2048
# Why 32 MiB: the most of a run's output kept as its artifact (the end, where failures are).
MAX_LOG_BYTES: Final = 32 << 20
# Why a third of the stall time (at most 5 min, at least 5 s): two heartbeats fit in every stall
# window, so a live run never looks stalled.
MAX_HEARTBEAT_S: Final = 300.0
MIN_HEARTBEAT_S: Final = 5.0
_BRANCH_SAFE_RE: Final = re.compile(r"[^A-Za-z0-9._/-]")


class LaunchRefused(Exception):
    """A check failed before anything started; the message says which and how to fix it."""


def runner_command(name: str, home: Path) -> list[str]:
    """The command template of runner ``name``: ``[runners.NAME] command`` in config.toml
    (a custom one, or overriding a built-in), else a built-in.

    Raises:
        LaunchRefused: unknown runner, or a malformed ``[runners.NAME]``.
    """
    path = home / CONFIG_FILENAME
    try:
        config = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        config = {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LaunchRefused(f"cannot read {path}: {exc}") from None
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


def fill(template: Sequence[str], values: Mapping[str, str]) -> list[str]:
    out = []
    for part in template:
        for key, value in values.items():
            part = part.replace("{" + key + "}", value)
        out.append(part)
    return out


def _git(repo: Path, *args: str, check: bool = True) -> str:
    # Why 120 s: a worktree of a big repository takes a while to check out.
    return run_git(repo, *args, error=LaunchRefused, check=check, timeout_s=120.0, text=True)


@dataclass
class LaunchResult:
    correlation_id: str
    agent: str
    runner: str
    worktree: str
    outcome: str  # delivered, failed, blocked
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
                 in_place: bool = False, timeout_s: float | None = None, say: Callable[[str], None] = print) -> None:
        self.home = home
        self.cid = correlation_id
        self.runner = runner
        self.workspace = workspace
        self.agent_arg = agent
        self.in_place = in_place
        self.timeout_s = timeout_s
        self.say = say
        self._stop_reason: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"<Launch {self.cid} runner={self.runner} workspace={self.workspace}>"

    # -- checks (nothing is started or written until they all pass) -----------------------------

    def check(self, client: Client) -> dict[str, Any]:
        """The task view, once every check passed; sets ``agent``, ``repo``, ``template``.

        Raises:
            LaunchRefused: naming the check that failed.
        """
        self.template = runner_command(self.runner, self.home)
        view = client.call("task_show", correlation_id=self.cid)
        requests = [e for e in view["events"] if e["type"] == "task.request"]
        if len(requests) != 1:
            raise LaunchRefused(f"task {self.cid} has {len(requests)} requests, not one: launch it by hand")
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
            self.repo = Path(_git(self.workspace, "rev-parse", "--show-toplevel").strip())
        except LaunchRefused:
            raise LaunchRefused(f"workspace {self.workspace} is not a git repository") from None
        request = requests[0]
        self.base = request.get("base_commit") or ""
        self.branch = request.get("branch") or ""
        if not self.base or _git(self.repo, "rev-parse", "--verify", "--quiet", f"{self.base}^{{commit}}",
                                 check=False).strip() == "":
            raise LaunchRefused(f"base commit {self.base or '(none)'} of task {self.cid} is not in {self.repo}: "
                                "fetch it first (git fetch)")
        self.base = _git(self.repo, "rev-parse", f"{self.base}^{{commit}}").strip()
        if _git(self.repo, "status", "--porcelain", "--untracked-files=no").strip():
            raise LaunchRefused(f"workspace {self.repo} has uncommitted changes: commit or stash them first")
        if self.in_place:
            current = _git(self.repo, "rev-parse", "--abbrev-ref", "HEAD").strip()
            if current != self.branch:
                raise LaunchRefused(f"workspace {self.repo} is on branch {current}, the task is for {self.branch}: "
                                    "check that branch out, or drop --in-place (palace then makes a worktree)")
            self.worktree = self.repo
        else:
            self.worktree = self.home / "worktrees" / self.repo.name / self.cid
            self.task_branch = "palace/" + _BRANCH_SAFE_RE.sub("-", self.cid)
            if self.worktree.exists():
                raise LaunchRefused(f"a worktree for {self.cid} exists already ({self.worktree}): remove it with "
                                    f"git -C {self.repo} worktree remove --force {self.worktree}")
            if _git(self.repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{self.task_branch}",
                    check=False).strip():
                raise LaunchRefused(f"branch {self.task_branch} exists already in {self.repo}: delete it "
                                    f"(git branch -D {self.task_branch}) to run the task again")
        return view

    # -- the run ----------------------------------------------------------------------------------

    def run(self) -> LaunchResult:
        """Check, claim, run, report. Raises ``LaunchRefused`` (nothing started) or returns."""
        with Client(self.home, client_name="palacectl-launch") as client:
            view = self.check(client)
            claimed = client.call("task_claim", correlation_id=self.cid, agent=self.agent)
            self.requester = view["requested_by"]
            self.request = view["request"]
            stall = float(claimed["task"]["stall_after_s"])
        if not self.in_place:
            try:
                self.worktree.parent.mkdir(parents=True, exist_ok=True)
                _git(self.repo, "worktree", "add", "--quiet", "-b", self.task_branch, str(self.worktree), self.base)
            except (LaunchRefused, OSError) as exc:
                self._event("task.release", f"{self.agent} could not prepare a worktree: {exc}", status="open")
                raise LaunchRefused(f"cannot create the worktree {self.worktree}: {exc}") from None
        prompt = self._prompt()
        command = fill(self.template, {"handoff": prompt, "workspace": str(self.worktree),
                                       "correlation_id": self.cid})
        log_path = self.worktree.parent / f"{self.worktree.name}.log" if not self.in_place else \
            self.home / "worktrees" / f"{self.cid}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        result = LaunchResult(self.cid, self.agent, self.runner, str(self.worktree), "failed", None, "")
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for sig in previous:
                signal.signal(sig, self._on_signal)
            with open(log_path, "wb") as log:
                try:
                    self._proc = subprocess.Popen(command, cwd=self.worktree, stdout=log, stderr=subprocess.STDOUT,
                                                  stdin=subprocess.DEVNULL, start_new_session=True)
                except OSError as exc:
                    result.outcome, result.reason = "failed", f"cannot start runner {command[0]!r}: {exc.strerror or exc}"
                    self._finish(result, log_path)
                    return result
                started = self._event("task.status", f"{self.agent} started {self.runner} on {self.cid} in "
                                      f"{self.worktree} (pid {self._proc.pid})",
                                      metadata={"runner": self.runner, "worktree": str(self.worktree),
                                                "pid": self._proc.pid, "command": command[:1]})
                result.events.append(started)
                result.exit_code = self._wait(max(MIN_HEARTBEAT_S, min(MAX_HEARTBEAT_S, stall / 3)))
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self._judge(result)
        self._finish(result, log_path)
        return result

    def _prompt(self) -> str:
        return (f"You are agent {self.agent}, working on palace task {self.cid} in the git worktree "
                f"{self.worktree} (at its base commit {self.base[:12]}).\n\n{self.request['body']}\n\n"
                "palace does this run's bookkeeping: it has claimed the task for you, and when you exit it "
                "submits the changes you leave in this worktree as the patch (or replies failed/blocked with "
                "your output). Make the changes, run the checks the definition of done names, and exit; do not "
                "push, and do not claim, ack or submit yourself.\n\n" + render_rules(self.agent, "cli"))

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._stop_reason = f"stopped by {signal.Signals(signum).name} on the launching machine"
        self._kill()

    def _kill(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

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
        if self._stop_reason is not None:
            timed_out = self._stop_reason.startswith("timed out")
            result.outcome, result.reason = ("failed" if timed_out else "blocked"), self._stop_reason
            return
        if result.exit_code != 0:
            result.outcome, result.reason = "failed", f"{self.runner} exited with status {result.exit_code}"
            return
        _git(self.worktree, "add", "-A")
        self.diff = _git(self.worktree, "diff", "--cached", "--binary", self.base)
        if not self.diff.strip():
            result.outcome, result.reason = "blocked", f"{self.runner} exited 0 but changed nothing"
            return
        result.outcome, result.reason = "delivered", f"{self.runner} finished; the patch is ready for review"

    def _finish(self, result: LaunchResult, log_path: Path) -> None:
        try:
            data = log_path.read_bytes()[-MAX_LOG_BYTES:]
        except OSError:
            data = b""
        with Client(self.home, client_name="palacectl-launch") as client:
            if data:
                record = client.call("artifact_put", kind="log", created_by=self.agent, content=data,
                                     metadata={"correlation_id": self.cid, "runner": self.runner})
                result.log_artifact = record["id"]
            if result.outcome == "delivered":
                submitted = client.call(
                    "patch_submit", from_agent=self.agent, correlation_id=self.cid, content=self.diff.encode(),
                    base_commit=self.base, branch=self.branch,
                    body=f"{self.agent} ({self.runner}) delivers {self.cid}: git apply it on {self.base[:12]}. "
                         f"Run log: {result.log_artifact}.")
                result.patch_event = submitted["event"]["id"]
                return
        tail = data[-LOG_TAIL_BYTES:].decode("utf-8", errors="replace")
        body = (f"{self.agent} ({self.runner}) {result.outcome} on {self.cid}: {result.reason}.\n"
                f"Log: {result.log_artifact or 'none'}. Its last lines, verbatim:\n{tail}")
        result.reply_event = self._event("task.reply", body, status=result.outcome,
                                         artifact_ids=[result.log_artifact] if result.log_artifact else None)

    def _event(self, kind: str, body: str, *, status: str | None = None, metadata: dict[str, Any] | None = None,
               artifact_ids: list[str] | None = None) -> str:
        args: dict[str, Any] = {"type": kind, "stream": self.request["stream"], "room": self.request["room"],
                                "from_agent": self.agent, "to_agent": self.requester, "correlation_id": self.cid,
                                "body": body}
        if status is not None:
            args["status"] = status
        if metadata:
            args["metadata"] = metadata
        if artifact_ids:
            args["artifact_ids"] = artifact_ids
        with Client(self.home, client_name="palacectl-launch") as client:
            return client.call("append", **args)["id"]
