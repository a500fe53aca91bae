"""``palacectl worker``: a listener that never sleeps through a task.

Owns: the worker's loop — a subscription to the local daemon that carries the worker's activity
(``who`` shows it as a worker with the tasks it runs), a look at ``task_ready`` whenever an event
could have made a task ready, and up to ``concurrency`` launches (``launch``) at once,
each on a thread of its own and in a worktree of its own; the watch over the tasks it runs (when
another agent's claim wins, a reassign or a terminal status arrives, its run is stopped and says
nothing); its state file and lock (``$PALACE_HOME/workers/<agent>.json`` / ``.lock``); and what
happens when things stop:

* palaced restarts: the subscription reconnects every ``RECONNECT_INTERVAL_S``; runs go on, and
  their outcome is recorded once the daemon is back.
* the worker is stopped (SIGTERM, Ctrl-C): every run is stopped and its task *released* with the
  reason (open again for anyone), then it exits 0.
* the worker dies (SIGKILL, a crash, a power cut): its next start finds the runs its state file
  still lists, stops a runner that outlived it, keeps its log as an artifact and releases the task
  with the reason — or, the second time the same task was interrupted, replies ``blocked``, so a
  task that kills its worker is not retried for ever. Nothing it claimed is silently dropped.

A task the worker cannot run here (its base commit is not in the workspace, another agent claimed
it first) is skipped until something happens on it. Talks to the daemon through
``palacectl.client`` only (never imports palaced).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from palace_proto.errors import ApiError, NotFound
from palace_proto.filters import filter_args
from palace_proto.projects import project_stream
from palace_proto.usage import BUDGET_TYPE as BUDGET_EVENT
from palace_proto.workers import fit_activity

from ...client import Client, DaemonUnreachable, IdleTimeout
from ...files import write_atomically
from ...git import run_git
from ...output import utc_now
from ...watch import sanitise_agent
from ..approvals.permission_policy import PermissionPolicy, PolicyError
from .launch import Launch, LaunchRefused, append_on_task, metadata_field, read_config, remove_worktree, runner_command
from .requesters import Requesters
from .skipped import MAX_SKIPPED, Skipped
from .worker_policy import WorkerPolicy

__all__ = ["MAX_INTERRUPTIONS", "Worker", "WorkerOptions", "WorkerRefused", "state_file"]

# Why 0.5 s: how often the worker retries while palaced restarts (as `watch` does).
RECONNECT_INTERVAL_S: Final = 0.5
# Why 0.5 s: the longest the loop waits for a push before it looks at finished runs and at what
# it must tell the daemon (a run's end is noticed on its own thread; this bounds the hand-over).
LOOP_TICK_S: Final = 0.5
# Why 2: a task interrupted by its worker's death is retried once; the second time it is
# reported blocked (a task that kills its worker must not kill it for ever).
MAX_INTERRUPTIONS: Final = 2
# Why 60 s: on stop, how long the runs get to stop their runners (10 s each) and record their
# outcome before the worker exits anyway (the state file then keeps them for the next start).
SHUTDOWN_WAIT_S: Final = 60.0
#: Where the worker tells of a budget it nears or is over (once per budget, subject, window and
#: state: its topic): the usage feature's budget notices.
_BUDGET_NOTICE: Final = {"type": BUDGET_EVENT, "stream": "usage", "room": "budgets"}
# Events that can make a task ready to take: a new request, a release, a reassign, an applied
# blocker (an ack or a reply with a status), a stall notice, a review asking for changes, a rework.
_WAKING_TYPES: Final = frozenset({"task.request", "task.release", "task.reassign", "task.reply", "event.ack",
                                  "task.stalled", "task.review", "task.rework"})


class WorkerRefused(Exception):
    """The worker cannot start (its options, its workspace, another worker on the same agent)."""


def state_file(home: Path, agent: str) -> Path:
    return home / "workers" / f"{sanitise_agent(agent)}.json"


@dataclass(slots=True)
class WorkerOptions:
    home: Path
    agent: str
    runner: str
    workspace: Path
    concurrency: int = 1
    project: str | None = None
    timeout_s: float | None = None
    #: whose tasks it takes (worker_policy; the default: this daemon's own agents and people)
    accept: WorkerPolicy = dataclasses.field(default_factory=WorkerPolicy)
    #: leave the tasks that were ready before it started (until something happens on one)
    skip_backlog: bool = False


class Worker:
    """See the module docstring. ``run`` on the main thread; ``stop`` from a signal handler."""

    def __init__(self, opts: WorkerOptions, *, say: Callable[[str], None]) -> None:
        self.opts = opts
        self._say = say
        self._stopping = threading.Event()
        self._stop_reason = "the worker was stopped"
        self._lock = threading.Lock()  # guards the fields below and the state file
        self._runs: dict[str, Launch | None] = {}  # correlation id -> its launch (None while it starts)
        self._threads: dict[str, threading.Thread] = {}
        self._state: dict[str, Any] = {"agent": opts.agent, "runs": {}, "interrupted": {}}
        self._skipped = Skipped()  # tasks left until something happens on them
        self._changed = threading.Event()  # the running set changed: tell the daemon, look again
        self._token: str | None = None
        self._recovered = False
        self._stream = project_stream(opts.project) if opts.project else None
        #: this worker's own daemon (peer id), and origin -> (peer id, name) of the daemons heard of
        self._requesters = Requesters(opts.accept, self._call)
        #: budgets reached that were said already (budget/subject/window/state)
        self._held: str | None = None  # why it claims nothing now (a budget over), for `who`
        self._budgets_told: set[str] = set()
        #: tasks declined under the policy (said once on the task, never run)
        self._declined: dict[str, str] = {}
        self._backlog_said = False  # the tasks ready at the first look are named before any is taken

    def __repr__(self) -> str:
        return f"<Worker {self.opts.agent} runner={self.opts.runner} runs={sorted(self._runs)}>"

    def say(self, message: str) -> None:
        self._say(f"{utc_now()} {message}")

    # -- start and stop -------------------------------------------------------------------------

    def check(self) -> None:
        """Refuse what cannot work before anything starts (raises WorkerRefused)."""
        try:
            runner_command(self.opts.runner, self.opts.home)
        except LaunchRefused as exc:
            raise WorkerRefused(str(exc)) from None
        if not self.opts.workspace.is_dir():
            raise WorkerRefused(f"workspace {self.opts.workspace} is not a directory")
        try:
            run_git(self.opts.workspace, "rev-parse", "--show-toplevel", error=LaunchRefused, text=True)
        except LaunchRefused:
            raise WorkerRefused(f"workspace {self.opts.workspace} is not a git repository") from None

    def stop(self, reason: str) -> None:
        self._stop_reason = reason
        self._stopping.set()

    def run(self) -> None:
        """Work until stopped (raises WorkerRefused before anything started)."""
        self.check()
        with self._exclusive():
            self._load_state()
            with self._lock:
                self._save_state()  # there from the start: what runs, and since when, is always on disk
            self.say(f"worker {self.opts.agent} started: runner {self.opts.runner}, workspace {self.opts.workspace}, "
                     f"{self.opts.concurrency} at a time" + (f", project {self.opts.project}" if self.opts.project else "")
                     + f"; it runs tasks from {self.opts.accept.describe()} with this account")
            waiting_said = False
            while not self._stopping.is_set():
                try:
                    self._session()
                except DaemonUnreachable as exc:
                    if not waiting_said:
                        self.say(f"palaced is not answering ({exc}); the worker waits for it, runs go on")
                        waiting_said = True
                    self._stopping.wait(RECONNECT_INTERVAL_S)
                    continue
                waiting_said = False
            self._shutdown()

    def _exclusive(self) -> _FileLock:
        return _FileLock(self.opts.home / "workers" / f"{sanitise_agent(self.opts.agent)}.lock", self.opts.agent)

    def _shutdown(self) -> None:
        with self._lock:
            running = [(cid, launch) for cid, launch in self._runs.items() if launch is not None]
            threads = list(self._threads.values())
        if running:
            self.say(f"stopping {len(running)} run(s): {self._stop_reason}")
        for _, launch in running:
            launch.stop(f"{self._stop_reason} (worker {self.opts.agent} on {socket.gethostname()})", then="released")
        deadline = time.monotonic() + SHUTDOWN_WAIT_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            left = [launch for launch in self._runs.values() if launch is not None]
        for launch in left:  # the daemon is away: the state file keeps them for the next start
            launch.stop(self._stop_reason, then="released", abandon=True)
        for thread in threads:
            thread.join(5)
        self.say(f"worker {self.opts.agent} stopped")

    # -- one connection to the daemon -----------------------------------------------------------

    def _activity(self) -> dict[str, Any]:
        with self._lock:
            tasks = sorted(self._runs)
        # What the daemon accepts, whatever ids the tasks have (a refused report stopped the worker).
        return fit_activity({"runner": self.opts.runner, "concurrency": self.opts.concurrency,
                             "project": self.opts.project, "tasks": tasks, "accepts": self.opts.accept.describe(),
                             "permissions": self._permissions_line(), "held": self._held})

    def _permissions_line(self) -> str:
        """What its runs may do without asking (``[permissions]``), in one line for ``who``."""
        try:
            return PermissionPolicy.from_config(read_config(self.opts.home), self.opts.runner).describe()
        except (PolicyError, LaunchRefused) as exc:
            return f"unreadable [permissions] ({exc}): every request is refused"

    def _session(self) -> None:
        with Client(self.opts.home, client_name="palacectl-worker") as client:
            sub = client.subscribe(agent=self.opts.agent, worker=self._activity(), start="tip", preview=True,
                                   **filter_args(stream=self._stream))
            self._token = sub.started.get("watch_token")
            self._changed.clear()
            self.say(f"connected to palaced; watching for tasks for {self.opts.agent} (or *)")
            if not self._recovered:
                self._recover()
                self._recovered = True
            self._look()
            while not self._stopping.is_set():
                if self._changed.is_set():
                    self._changed.clear()
                    self._tell_activity()
                    self._look()
                try:
                    push = sub.next_push(timeout=LOOP_TICK_S)
                except IdleTimeout:
                    continue
                if push["push"] == "batch":
                    self._on_events(push.get("events") or [])

    def _call(self, op: str, **args: Any) -> Any:
        with Client(self.opts.home, client_name="palacectl-worker") as client:
            return client.call(op, **args)

    def _tell_activity(self) -> None:
        if self._token:
            try:
                self._call("watch_update", watch_token=self._token, worker=self._activity())
            except NotFound:
                pass  # the watch ended under us: the next session announces the activity afresh
            except ApiError as exc:  # what `who` shows of us is worth less than the runs: say so, go on
                self.say(f"could not tell palaced what this worker runs: {exc.message}")

    def _on_events(self, events: list[dict[str, Any]]) -> None:
        look = False
        for event in events:
            cid = event.get("correlation_id")
            kind = event.get("type")
            if kind in _WAKING_TYPES:
                look = True
            if not isinstance(cid, str):
                continue
            with self._lock:
                launch = self._runs.get(cid)
            if launch is not None and not (kind == "task.status" and event.get("from_agent") == self.opts.agent):
                self._check_still_ours(cid, launch)
        if look:
            self._look()

    def _check_still_ours(self, cid: str, launch: Launch) -> None:
        """Stop a run whose claim is no longer ours (another agent's claim came first, a
        reassign, a terminal status): it says nothing, the claimant's run reports."""
        try:
            view = self._call("task_show", correlation_id=cid)
        except NotFound:
            return
        if view["claimed_by"] == self.opts.agent and not view["terminal"]:
            return
        why = (f"{view['claimed_by']} holds the first claim" if view["claimed_by"]
               else f"the task is {view['state']}")
        self.say(f"stopping the run of {cid}: {why}")
        launch.stop(f"{why}; this run stopped", then="lost")

    # -- taking tasks ---------------------------------------------------------------------------

    def _look(self) -> None:
        """Start runs on ready tasks while there are free slots."""
        if self._stopping.is_set():
            return
        with self._lock:
            free = self.opts.concurrency - len(self._runs)
        if free <= 0:
            return
        if self._over_budget():
            return
        ready = self._call("task_ready", agent=self.opts.agent)["tasks"]
        if not self._backlog_said:
            self._backlog_said = True
            ready = self._backlog(ready)
        for view in ready:
            cid = view["correlation_id"]
            if self._stream and view["request"].get("stream") != self._stream:
                continue
            with self._lock:
                if cid in self._runs or cid in self._declined or self._skipped.leaves(cid, view["last_activity"]):
                    continue
            if not self._accepted(view):
                self._decline(view)
                continue
            with self._lock:
                self._runs[cid] = None
                free -= 1
            thread = threading.Thread(target=self._run_task, args=(cid, view["last_activity"]),
                                      name=f"launch {cid}", daemon=True)
            with self._lock:
                self._threads[cid] = thread
            thread.start()
            if free <= 0:
                break

    # -- budgets: what it may still spend ------------------------------------------------------

    def _over_budget(self) -> bool:
        """Whether a budget of ``[budgets]`` that stops this worker is over (its agent's day, the
        palace's month): then it claims nothing. A budget reached (80 %, or over) is said once, in
        the log and as a ``usage.budget`` event the people's daemons notify them of (one per
        budget, subject and window across the palace: a second worker finds the first's event)."""
        try:
            table = read_config(self.opts.home).get("budgets")
        except LaunchRefused:
            return False  # `check` refused an unreadable config before the worker started; a later edit waits
        if table is None:
            return False
        try:
            judged = self._call("usage", by="agent", budgets=table).get("budgets") or []
        except ApiError as exc:
            self.say(f"[budgets] cannot be judged ({exc.message}); the worker claims nothing until it can")
            return True
        held: str | None = None
        for breach in judged:
            mine = breach["scope"] == "palace" or (breach["scope"] == "agent" and breach["subject"] == self.opts.agent)
            if not mine or breach["state"] == "ok":
                continue
            if breach["state"] == "over" and held is None:
                held = f"claims nothing: {breach['line']}"
            self._tell_budget(breach)
        if held != self._held:
            self._held = held  # `who` and the dashboard say why it is idle, on every daemon
            self._tell_activity()
        return held is not None

    def _tell_budget(self, breach: dict[str, Any]) -> None:
        key = "/".join((breach["budget"], breach["subject"], breach["window"], breach["state"]))
        if key in self._budgets_told:
            return
        self._budgets_told.add(key)
        stops = breach["state"] == "over"
        line = (f"worker {self.opts.agent} claims nothing more: " if stops else f"worker {self.opts.agent}: ") + breach["line"]
        self.say(line)
        told = self._call("list", types=[BUDGET_EVENT], topics=[key], limit=1)["events"]
        if not told:
            self._call("append", **_BUDGET_NOTICE, topic=key, from_agent=self.opts.agent, body=line,
                       status="blocked" if stops else None,
                       metadata={"budget": breach["budget"], "subject": breach["subject"], "window": breach["window"],
                                 "state": breach["state"], "spent": breach["spent"], "limit": breach["limit"]})

    def _backlog(self, ready: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Say which tasks were already waiting when the worker started, before it takes any
        (issue 26: a first start took old broadcasts without a word); with ``skip_backlog``, leave
        them until something happens on one. Returns what may be taken now."""
        waiting = [v for v in ready if not self._stream or v["request"].get("stream") == self._stream]
        if not waiting:
            return ready
        shown = "; ".join(
            f"{v['correlation_id']} from {v['requested_by']} "
            f"({'to everyone' if v['request'].get('to_agent') == '*' else 'to you'}, "
            f"requested {v['request']['created_at']})" for v in waiting[:10])
        more = f" and {len(waiting) - 10} more" if len(waiting) > 10 else ""
        if self.opts.skip_backlog:
            with self._lock:
                for v in waiting:
                    self._skipped.skip(v["correlation_id"], v["last_activity"])
            self.say(f"{len(waiting)} task(s) were waiting before this worker started; left (--skip-backlog) until "
                     f"something happens on them: {shown}{more}")
            return []
        self.say(f"{len(waiting)} task(s) were waiting before this worker started; taking those its policy "
                 f"accepts (start with --skip-backlog to leave them): {shown}{more}")
        return ready

    # -- the policy: whose tasks it takes -------------------------------------------------------

    def _accepted(self, view: dict[str, Any]) -> bool:
        return self._requesters.accepts(view)

    def _decline(self, view: dict[str, Any]) -> None:
        """Say once, on the task, why this worker does not run it (never silence, never a run): a
        task addressed to this agent is answered blocked; a broadcast gets a note (another worker
        may take it)."""
        cid = view["correlation_id"]
        peer_id, name = self._requesters.daemon_of(view["request"].get("origin"))
        requester = view.get("requested_by")
        reason = (f"worker {self.opts.agent} on {socket.gethostname()} runs tasks only from "
                  f"{self.opts.accept.describe()}; {requester} (daemon {name or peer_id or 'unknown'}) is not one of "
                  f"them. Its operator can add `--accept-from {requester}` to the worker if it should.")
        with self._lock:
            if len(self._declined) >= MAX_SKIPPED:
                self._declined.pop(next(iter(self._declined)))
            self._declined[cid] = reason
        try:
            shown = self._call("task_show", correlation_id=cid)
            if any(metadata_field(e, "declined_by") == self.opts.agent for e in shown["events"]):
                return  # said already (before a restart)
            with Client(self.opts.home, client_name="palacectl-worker") as client:
                if view.get("assigned_to") == self.opts.agent:
                    append_on_task(client, view["request"], self.opts.agent, "task.reply", reason, status="blocked",
                                   metadata={"declined_by": self.opts.agent})
                else:
                    append_on_task(client, view["request"], self.opts.agent, "note", reason,
                                   metadata={"declined_by": self.opts.agent})
            self.say(f"declined {cid}: {reason}")
        except ApiError as exc:
            self.say(f"could not decline {cid} on the task ({exc.message}); it is not run")

    def _run_task(self, cid: str, last_activity: str) -> None:
        launch = Launch(self.opts.home, cid, runner=self.opts.runner, workspace=self.opts.workspace,
                        agent=self.opts.agent, timeout_s=self.opts.timeout_s, say=self.say, handle_signals=False,
                        daemon_wait_s=None, on_claim=self._claimed, on_start=self._started)
        recorded = True  # False: claimed, but the outcome is not in the palace (the state file keeps it)
        try:
            result = launch.run()
            self.say(f"{cid}: {result.outcome}: {result.reason}"
                     + (f" (patch {result.patch_event})" if result.patch_event else ""))
        except LaunchRefused as exc:
            self.say(f"skipped {cid}: {exc}")
            self._skip(cid, last_activity)
        except ApiError as exc:  # e.g. the claim was refused: another agent's came first
            self.say(f"skipped {cid}: {exc.message}")
            self._skip(cid, last_activity)
        except DaemonUnreachable as exc:
            with self._lock:
                recorded = cid not in self._state["runs"]  # not claimed yet: nothing to report
            self.say(f"{cid}: palaced went away before the outcome was recorded ({exc}); "
                     + ("the next start reports it" if not recorded else "it will be looked at again"))
        except Exception as exc:  # noqa: BLE001 - one task's failure must not end the worker
            self.say(f"{cid}: the run failed unexpectedly: {type(exc).__name__}: {exc}")
        finally:
            if recorded:
                self._clean_up(launch)
            with self._lock:
                self._runs.pop(cid, None)
                self._threads.pop(cid, None)
                if recorded:
                    self._state["runs"].pop(cid, None)
                    self._save_state()
            self._changed.set()

    def _skip(self, cid: str, last_activity: str) -> None:
        with self._lock:
            self._skipped.skip(cid, last_activity)

    def _claimed(self, launch: Launch) -> None:
        with self._lock:
            self._runs[launch.cid] = launch
            self._state["runs"][launch.cid] = {
                "repo": str(launch.repo), "worktree": str(launch.worktree), "branch": getattr(launch, "task_branch", ""),
                "log": str(launch.log_path), "runner": self.opts.runner, "pid": None, "claimed_at": utc_now()}
            self._save_state()
        self._changed.set()
        if self._stopping.is_set():  # claimed while the worker stops: give it back at once
            launch.stop(f"{self._stop_reason} (worker {self.opts.agent} on {socket.gethostname()})", then="released")

    def _started(self, launch: Launch) -> None:
        assert launch.proc is not None
        with self._lock:
            entry = self._state["runs"].get(launch.cid)
            if entry is not None:
                entry["pid"] = launch.proc.pid
                self._save_state()

    def _clean_up(self, launch: Launch) -> None:
        branch = getattr(launch, "task_branch", "")
        if branch and launch.cid in self._state["runs"]:  # claimed, so the worktree is this run's
            try:
                remove_worktree(launch.repo, launch.worktree, branch)
            except LaunchRefused as exc:
                self.say(f"could not remove the worktree {launch.worktree}: {exc}")

    # -- the state file and what a restart finds in it ------------------------------------------

    def _load_state(self) -> None:
        path = state_file(self.opts.home, self.opts.agent)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            # Unreadable: its runs cannot be reported; say so loudly rather than guess.
            self.say(f"cannot read {path} ({exc}); runs of a previous worker it listed are not reported: "
                     f"look for tasks claimed by {self.opts.agent} with `palacectl task list --open`")
            return
        if isinstance(data, dict) and isinstance(data.get("runs"), dict) and isinstance(data.get("interrupted"), dict):
            self._state = {"agent": self.opts.agent, "runs": data["runs"], "interrupted": data["interrupted"]}

    def _save_state(self) -> None:
        """Write the state file (callers hold ``_lock``)."""
        path = state_file(self.opts.home, self.opts.agent)
        try:
            write_atomically(path, (json.dumps(self._state, indent=1) + "\n").encode(), create_folder=True)
        except OSError as exc:
            self.say(f"could not write {path}: {exc.strerror or exc}; a crash now would leave runs unreported")

    def _recover(self) -> None:
        """Report the runs a previous worker on this agent left unfinished (see the module docstring)."""
        with self._lock:
            leftovers = dict(self._state["runs"])
        for cid, entry in leftovers.items():
            if not isinstance(entry, dict):
                entry = {}
            try:
                self._recover_one(cid, entry)
            except (ApiError, LaunchRefused, OSError) as exc:
                self.say(f"could not report the interrupted run of {cid}: {exc}")
            with self._lock:
                self._state["runs"].pop(cid, None)
                self._save_state()

    def _recover_one(self, cid: str, entry: dict[str, Any]) -> None:
        pid = entry.get("pid")
        stopped = ""
        if type(pid) is int and pid > 1 and _stop_orphan(pid):
            stopped = f"; its runner (pid {pid}) outlived it and was stopped"
        log_id = None
        log = Path(str(entry.get("log") or ""))
        try:
            data = log.read_bytes()[-(32 << 20):] if entry.get("log") else b""
        except OSError:
            data = b""
        try:
            view = self._call("task_show", correlation_id=cid)
        except NotFound:
            view = None
        if view is not None and view["claimed_by"] == self.opts.agent and not view["terminal"]:
            if data:
                log_id = self._call("artifact_put", kind="log", created_by=self.opts.agent, content=data,
                                    metadata={"correlation_id": cid, "runner": entry.get("runner"),
                                              "interrupted": True})["id"]
            with self._lock:
                interrupted = self._state["interrupted"]
                count = int(interrupted.pop(cid, 0)) + 1
                interrupted[cid] = count
                while len(interrupted) > MAX_SKIPPED:  # the oldest first: dicts keep insertion order
                    interrupted.pop(next(iter(interrupted)))
            why = (f"the worker {self.opts.agent} on {socket.gethostname()} ended while running it "
                   f"(pid {pid or 'not started'}){stopped}")
            if count >= MAX_INTERRUPTIONS:
                body = (f"{why}, for the {count}th time: reported blocked rather than retried. "
                        f"Log so far: {log_id or 'none'}.")
                with Client(self.opts.home, client_name="palacectl-worker") as client:
                    append_on_task(client, view["request"], self.opts.agent, "task.reply", body, status="blocked",
                                   artifact_ids=[log_id] if log_id else None)
                self.say(f"{cid}: interrupted {count} times; replied blocked")
            else:
                self._call("task_release", correlation_id=cid, agent=self.opts.agent,
                           reason=f"{why}; open again (it will be retried). Log so far: {log_id or 'none'}")
                self.say(f"{cid}: the previous worker's run was interrupted; released it{stopped}")
        repo, worktree, branch = entry.get("repo"), entry.get("worktree"), entry.get("branch")
        if isinstance(repo, str) and isinstance(worktree, str) and isinstance(branch, str) and branch:
            remove_worktree(Path(repo), Path(worktree), branch)
        if entry.get("log"):
            log.unlink(missing_ok=True)


def _stop_orphan(pid: int) -> bool:
    """Stop the process group ``pid`` leads if it is still there (a runner started by a worker
    that died: launch starts each runner as the leader of its own group). True if it was."""
    if os.name == "nt" or not hasattr(os, "getpgid"):
        return False
    try:
        if os.getpgid(pid) != pid:
            return False  # not a group leader: the pid was reused by something else
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return False
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


class _FileLock:
    """One worker per agent on a home: an exclusive lock on ``path`` for the worker's life."""

    def __init__(self, path: Path, agent: str) -> None:
        self.path = path
        self.agent = agent
        self._fd: int | None = None

    def __enter__(self) -> _FileLock:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            _lock_fd(fd)
        except OSError:
            try:
                holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            finally:
                os.close(fd)
            raise WorkerRefused(f"another worker for {self.agent} runs on this palace home (pid {holder}); "
                                "stop it first, or use another --agent") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the lock
            self._fd = None


def _lock_fd(fd: int) -> None:
    """Lock ``fd`` exclusively without waiting (OSError if another process holds it)."""
    if sys.platform == "win32":
        import msvcrt

        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        return
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
