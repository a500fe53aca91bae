"""``palacectl reviewer``: an agent that reviews delivered patches, run by a headless harness.

Owns the reviewer's loop: the tasks it reviews (delivered, their review waiting, asking for this
agent by name or for ``any-other-agent``, from a requester its policy accepts, and never a patch
this agent wrote), one at a time; for each, the patch applied on its base commit in a worktree of
its own (``landing.Branch.prepare``, the same pinned git as the integrator's), the runner started
there with a review prompt (the task's words, the patch's author, what to answer), and the
verdict read from the run's last message: a line ``VERDICT: approve`` approves the patch, a line
``VERDICT: changes_requested`` sends it back with the run's words. A run that fails, times out or
says neither writes a note on the task and no verdict: a reviewer that cannot decide never
approves. The review is a ``task.review`` written as this agent, which every replica judges by the
authority table (never the author, never another agent of the author's daemon).

A run that a harness launches works in the worktree only; the worktree is removed after it.
Talks to the daemon through ``palacectl.client`` only.
"""

from __future__ import annotations

import re
import socket
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from palace_proto.event_fields import thread_of
from palace_proto.tasks import ANY_OTHER_AGENT
from palace_proto.usage import final_text

from ...client import Client, DaemonUnreachable
from ...output import utc_now
from ..worker.launch import (
    BUILTIN_RUNNERS,
    NEW_PROCESS_GROUP,
    LaunchRefused,
    fill,
    runner_command,
    stop_process_group,
    task_slug,
)
from ..worker.requesters import Requesters
from ..worker.skipped import Skipped
from ..worker.worker_policy import WorkerPolicy
from .following import RECONNECT_INTERVAL_S, follow
from .integrator import PatchUnusable, fetch_patch
from .landing import Branch, Conflict, LandingError
from .review import review_append

__all__ = ["Reviewer", "ReviewerOptions", "ReviewerRefused", "verdict_of"]

# Why 20 minutes: reading a patch and running a project's tests; a review that takes longer is
# stopped, and says so on the task without a verdict.
DEFAULT_REVIEW_TIMEOUT_S: Final = 20 * 60
# Why 64 KiB: the tail of a run's output the verdict and its words are read from.
MAX_OUTPUT_BYTES: Final = 64 << 10
_VERDICT_RE: Final = re.compile(r"^\s*VERDICT:\s*(approve|changes_requested)\s*$", re.MULTILINE | re.IGNORECASE)


class ReviewerRefused(Exception):
    """The reviewer cannot start (its runner, its repository)."""


@dataclass(slots=True)
class ReviewerOptions:
    home: Path
    agent: str
    runner: str
    workspace: Path
    timeout_s: float = DEFAULT_REVIEW_TIMEOUT_S
    accept: WorkerPolicy = field(default_factory=WorkerPolicy)


def verdict_of(output: str) -> str | None:
    """The run's verdict: its last ``VERDICT:`` line (approve or changes_requested), or None."""
    found = _VERDICT_RE.findall(output)
    return found[-1].lower() if found else None


class Reviewer:
    """See the module docstring. ``run`` on the main thread; ``stop`` from a signal handler."""

    def __init__(self, opts: ReviewerOptions, *, say: Callable[[str], None]) -> None:
        self.opts = opts
        self._say = say
        self._stopping = threading.Event()
        self._skipped = Skipped()
        self._slot = opts.home / "reviews" / task_slug(f"{opts.workspace}:{opts.agent}")
        self._requesters = Requesters(opts.accept, self._call)
        self.branch: Branch | None = None
        self.template: list[str] = []

    def __repr__(self) -> str:
        return f"<Reviewer {self.opts.agent} runner={self.opts.runner}>"

    def say(self, message: str) -> None:
        self._say(f"{utc_now()} {message}")

    def stop(self, reason: str) -> None:
        self.say(f"stopping: {reason}")
        self._stopping.set()

    def check(self) -> None:
        try:
            self.template = runner_command(self.opts.runner, self.opts.home)
        except LaunchRefused as exc:
            raise ReviewerRefused(str(exc)) from None
        try:
            # Only the repository matters (patches are applied on their own base commit); the
            # branch named is never moved.
            self.branch = Branch(self.opts.workspace, "HEAD")
        except LandingError:
            raise ReviewerRefused(f"workspace {self.opts.workspace} is not a git repository") from None

    def run(self) -> None:
        if self.branch is None:
            self.check()
        assert self.branch is not None
        self.branch.discard(self._slot)
        self.say(f"reviewer {self.opts.agent} started: runner {self.opts.runner}, workspace {self.branch.repo}; it "
                 f"reviews tasks from {self.opts.accept.describe()}")
        while not self._stopping.is_set():
            try:
                self._session()
            except DaemonUnreachable:
                self._stopping.wait(RECONNECT_INTERVAL_S)
        self.say(f"reviewer {self.opts.agent} stopped")

    def _call(self, op: str, **args: Any) -> Any:
        with Client(self.opts.home, client_name="palacectl-reviewer") as client:
            return client.call(op, **args)

    def _session(self) -> None:
        follow(self.opts.home, "palacectl-reviewer", greeting="connected to palaced; watching for patches to review",
               say=self.say, look=self._look, stopping=self._stopping,
               wakes=lambda e: e.get("type") in ("patch.ready", "task.review"), agent=self.opts.agent)

    def _look(self) -> None:
        while not self._stopping.is_set():
            view = self._next()
            if view is None:
                return
            try:
                self._review(view)
            except DaemonUnreachable:
                raise  # the session reconnects; the review is looked at again
            except Exception as exc:  # noqa: BLE001 - one task's failure must not end the reviewer
                self.say(f"{view['correlation_id']}: could not review it ({getattr(exc, 'message', None) or exc})")
            self._skip(view)

    def _next(self) -> dict[str, Any] | None:
        for view in self._call("task_list", open=True)["tasks"]:
            review, delivery = view.get("review") or {}, view.get("delivery")
            if (view["state"] != "ready" or delivery is None or review.get("state") != "waiting"
                    or review.get("by") not in (ANY_OTHER_AGENT, self.opts.agent)
                    or delivery.get("author") == self.opts.agent
                    or self._skipped.leaves(view["correlation_id"], view["last_activity"])):
                continue
            if not self._requesters.accepts(view):
                self._skip(view)
                continue
            return view
        return None

    def _skip(self, view: Mapping[str, Any]) -> None:
        self._skipped.skip(view["correlation_id"], view["last_activity"])

    def _review(self, view: Mapping[str, Any]) -> None:
        branch = self.branch
        assert branch is not None
        cid, delivery = view["correlation_id"], view["delivery"]
        try:
            patch = fetch_patch(self._call, delivery.get("artifact_ids") or [])
        except PatchUnusable as exc:
            self._note(view, f"{self.opts.agent} could not review {delivery['event_id']}: {exc}")
            return
        base = str(delivery.get("base") or view.get("base") or "")
        if patch is None or not re.fullmatch(r"[0-9a-f]{7,64}", base):
            self._note(view, f"{self.opts.agent} could not review {delivery['event_id']}: its patch or its base "
                             "commit is not here")
            return
        try:
            prepared = branch.prepare(self._slot, base, patch, message=f"review of {cid}",
                                      author=(delivery["author"], "author@palace.invalid"),
                                      committer=(self.opts.agent, "reviewer@palace.invalid"))
            if isinstance(prepared, Conflict):
                self._note(view, f"{self.opts.agent} could not review {delivery['event_id']}: it does not apply on "
                                 f"{base[:12]} ({prepared.why})")
                return
            output, code = self._run(view, base)
        finally:
            branch.discard(self._slot)
        words = final_text(self.opts.runner, output) or output[-4000:]
        verdict = verdict_of(words) or verdict_of(output)
        if code != 0 or verdict is None:
            why = f"its run exited {code}" if code != 0 else "its run said no VERDICT line"
            self._note(view, f"{self.opts.agent} reviewed {delivery['event_id']} without a verdict ({why}); "
                             f"nothing approved. Its last words: {words[-1500:]}")
            return
        # (the view this review began from: a delivered patch, which review_append requires)
        self._call("append", **review_append(view, self.opts.agent, verdict, "\n" + words[-3000:],
                                             runner=self.opts.runner))
        self.say(f"{cid}: {verdict}")

    def _run(self, view: Mapping[str, Any], base: str) -> tuple[str, int | None]:
        delivery = view["delivery"]
        prompt = (f"You are agent {self.opts.agent}, reviewing the patch {delivery['author']} delivered on palace task "
                  f"{view['correlation_id']}. It is applied and committed in this worktree ({self._slot}) on its base "
                  f"commit {base[:12]}: `git show HEAD` shows it. The task asked:\n\n{view['request'].get('body')}\n\n"
                  "Judge whether the patch does what the task asks and meets its definition of done; run its checks "
                  "if it names any. Change nothing. End your answer with one line: `VERDICT: approve`, or "
                  "`VERDICT: changes_requested` after saying exactly what to change.")
        command = fill(self.template, {"handoff": prompt, "workspace": str(self._slot),
                                       "correlation_id": view["correlation_id"], "palace_mcp": ""})
        if self.template == BUILTIN_RUNNERS.get("claude"):
            # No permission tool of palace's for a review run: it reads and runs checks, and asks nothing.
            command = [part for part in command if part not in ("--mcp-config", "", "--permission-prompt-tool",
                                                                "mcp__palace_run__approve")]
        log = self._slot.parent / f"{self._slot.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self.say(f"{view['correlation_id']}: reviewing {delivery['event_id']} with {self.opts.runner}")
        with open(log, "wb") as out:
            proc = subprocess.Popen(command, cwd=self._slot, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, **NEW_PROCESS_GROUP)
            try:
                code: int | None = proc.wait(timeout=self.opts.timeout_s)
            except subprocess.TimeoutExpired:
                stop_process_group(proc)
                code = None
            except BaseException:
                stop_process_group(proc)
                raise
        try:
            data = log.read_bytes()[-MAX_OUTPUT_BYTES:]
        finally:
            log.unlink(missing_ok=True)
        return data.decode("utf-8", errors="replace"), code

    def _note(self, view: Mapping[str, Any], body: str) -> None:
        self._call("append", **thread_of(view["request"]), type="note", from_agent=self.opts.agent,
                   to_agent=view["request"]["from_agent"], body=body,
                   metadata={"reviewer": self.opts.agent, "host": socket.gethostname()})
        self.say(f"{view['correlation_id']}: {body[:200]}")
