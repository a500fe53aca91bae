"""``palacectl integrate``: land what the fleet delivered, one checked commit at a time.

Owns the integrator's loop: one integration branch of one repository on this machine, the tasks
it lands (delivered — ``ready`` — in its project, for its branch, naming this integrator, from a
requester its policy accepts, reviewed where a review is required), their order (priority, then
dependencies: a task waits for the tasks it is blocked by to be applied, then delivery time), and
for each: the patch fetched and its sha256 checked, its paths checked (``patch_check``), applied
and committed on the branch's head in a fresh worktree, the project's check run there, then the
branch advanced (``landing.Branch.advance``) and the task acked ``applied`` with the commit — or
acked ``failed`` with the check's log. Each check's result is a ``task.check`` on the task.

A patch that no longer applies goes back to its author: ``task.rework`` with the branch's head as
the new base (a worker redoes it there), up to ``max_reworks`` times; after that a person is asked
(a question on the task: rework once more, or close it failed) and the integrator does what they
answer.

One integrator per branch across the palace: it holds an exclusive lease on ``res:integrate:<branch>``
in its project while it works, renewed on a thread of its own; another integrator waits until the
lease is free (released, or expired when its holder is gone).

What a crash leaves: the branch only ever moves to a commit whose check passed, and every landed
commit carries its patch's trailer, so a restarted integrator acks a patch it landed before it
died instead of landing it again; a check it was running is stopped (its process group, named in
the state file) and its worktree removed; a task not yet acked is still ``ready``, and is taken
again. Talks to the daemon through ``palacectl.client`` only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import signal
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from palace_proto.errors import ApiError, NotFound
from palace_proto.filters import filter_args
from palace_proto.ids import artifact_id_for_sha256
from palace_proto.projects import project_stream
from palace_proto.tasks import CHECK, REWORK

from ...client import Client, DaemonUnreachable
from ...files import write_atomically
from ...output import utc_now
from ..worker.launch import task_slug
from ..worker.requesters import Requesters
from ..worker.skipped import Skipped
from ..worker.worker import WorkerRefused, _FileLock, _stop_orphan
from ..worker.worker_policy import WorkerPolicy
from .following import RECONNECT_INTERVAL_S, follow
from .landing import PATCH_TRAILER, TASK_TRAILER, Branch, CheckResult, Conflict, LandingError
from .patch_check import DEFAULT_MAX_PATCH_BYTES, check_files, check_patch

__all__ = ["IntegrateOptions", "Integrator", "IntegratorRefused", "PatchUnusable", "fetch_patch"]

# Why 120 s, renewed every 30 s: an integrator that died frees its branch within two minutes, and
# one that lives misses three renewals before anyone else may take it.
LEASE_TTL_S: Final = 120
LEASE_RENEW_S: Final = 30.0
# Why 3: a patch redone three times that still does not apply is racing the branch; a person decides.
DEFAULT_MAX_REWORKS: Final = 3
# Why 30 minutes: a project's test suite; a check that takes longer is stopped and the task failed.
DEFAULT_CHECK_TIMEOUT_S: Final = 30 * 60
#: the choices of the question a person gets when a patch keeps failing to apply
REWORK_AGAIN, CLOSE_FAILED = "rework", "close failed"
#: events that can make a task landable: a delivery, a review, an ack (a blocker applied), a release
_WAKING: Final = frozenset({"patch.ready", "task.review", "event.ack", "task.reply", "question.answer",
                            "lease.release"})


class PatchUnusable(Exception):
    """A delivered patch that cannot be used here yet or at all: the message says which artifact and why."""


def fetch_patch(call: Callable[..., Any], artifact_ids: Sequence[str]) -> bytes | None:
    """The patch among a delivery's artifacts, its bytes checked against the id the signed event
    names (an artifact's id is its sha256: ``palace_proto.ids``); None when none of them is a patch.

    Raises:
        PatchUnusable: the patch has not reached this daemon yet, or its bytes do not match its id.
    """
    for artifact_id in artifact_ids:
        try:
            record = call("artifact_get", artifact_id=artifact_id, with_content=True)
        except NotFound:
            raise PatchUnusable(f"its patch {artifact_id} has not reached this daemon yet") from None
        if record.get("kind") != "patch":
            continue
        content = record.get("content")
        digest = hashlib.sha256(content).hexdigest() if isinstance(content, bytes) else ""
        if not digest or digest != record.get("sha256") or artifact_id_for_sha256(digest) != artifact_id:
            raise PatchUnusable(f"artifact {artifact_id} does not match its sha256")
        return bytes(content)
    return None


class IntegratorRefused(Exception):
    """The integrator cannot start (its options, its repository, another integrator on this branch here)."""


@dataclass(slots=True)
class IntegrateOptions:
    home: Path
    agent: str
    repo: Path
    branch: str
    project: str
    check: str
    check_timeout_s: float = DEFAULT_CHECK_TIMEOUT_S
    accept: WorkerPolicy = dataclasses.field(default_factory=WorkerPolicy)
    max_patch_bytes: int = DEFAULT_MAX_PATCH_BYTES
    max_reworks: int = DEFAULT_MAX_REWORKS


class Integrator:
    """See the module docstring. ``run`` on the main thread; ``stop`` from a signal handler."""

    def __init__(self, opts: IntegrateOptions, *, say: Callable[[str], None]) -> None:
        self.opts = opts
        self._say = say
        self._stopping = threading.Event()
        self._stream = project_stream(opts.project)
        self._slug = task_slug(f"{opts.repo}:{opts.branch}")
        self._dir = opts.home / "integrate"
        self._slot = self._dir / "worktrees" / self._slug
        self._state_path = self._dir / f"{self._slug}.json"
        self._lease_id: str | None = None
        self._lease_lock = threading.Lock()
        self._holder_said: str | None = None
        self._skipped = Skipped()
        self._requesters = Requesters(opts.accept, self._call)
        self.branch: Branch | None = None
        #: what it did, for tests and the benchmark: (correlation id, outcome, commit or reason)
        self.landed: list[tuple[str, str, str]] = []
        #: the check running now (its process group's leader), stopped when the integrator is
        self._check_pid: int | None = None

    def __repr__(self) -> str:
        return f"<Integrator {self.opts.agent} {self.opts.branch} of {self.opts.repo}>"

    def say(self, message: str) -> None:
        self._say(f"{utc_now()} {message}")

    def stop(self, reason: str) -> None:
        """Stop (from a signal handler): a check under way is stopped too, and its task is left
        ready for the next start, never reported failed."""
        self.say(f"stopping: {reason}")
        self._stopping.set()
        pid = self._check_pid
        if pid is not None and hasattr(os, "killpg"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)

    # -- start and stop -------------------------------------------------------------------------

    def check(self) -> Branch:
        """Refuse what cannot work before anything starts (raises IntegratorRefused); the branch,
        kept for ``run``."""
        if not self.opts.check.strip():
            raise IntegratorRefused("the check command is empty: give --check 'COMMAND' (or [integrate] check in "
                                    "config.toml), e.g. --check 'make test'")
        if not self.opts.repo.is_dir():
            raise IntegratorRefused(f"repository {self.opts.repo} is not a directory")
        try:
            branch = Branch(self.opts.repo, self.opts.branch)
        except LandingError:
            raise IntegratorRefused(f"{self.opts.repo} is not a git repository (--repo: the clone whose branch "
                                    "it lands on)") from None
        try:
            branch.check_usable()
        except LandingError as exc:
            raise IntegratorRefused(str(exc)) from None
        self.branch = branch
        return branch

    def run(self) -> None:
        """Integrate until stopped (raises IntegratorRefused before anything started); checks
        first unless ``check`` already did."""
        if self.branch is None:
            self.check()
        assert self.branch is not None
        lock = _FileLock(self._dir / f"{self._slug}.lock", f"branch {self.opts.branch} of {self.opts.repo}")
        try:
            lock.__enter__()
        except WorkerRefused:
            raise IntegratorRefused(f"another integrator for branch {self.opts.branch} of {self.branch.repo} runs on "
                                    "this palace home; stop it first") from None
        try:
            self._work()
        finally:
            lock.__exit__(None, None, None)

    def _work(self) -> None:
        """The integrator's life, the branch's lock held: recover, then sessions until stopped."""
        self._recover()
        assert self.branch is not None
        self.say(f"integrator {self.opts.agent} started: branch {self.opts.branch} of {self.branch.repo}, project "
                 f"{self.opts.project}, check {self.opts.check!r} (at most {self.opts.check_timeout_s:.0f} s); it "
                 f"lands tasks from {self.opts.accept.describe()}")
        renewer = threading.Thread(target=self._renew_loop, name="lease-renewer", daemon=True)
        renewer.start()
        waiting_said = False
        try:
            while not self._stopping.is_set():
                try:
                    self._session()
                except DaemonUnreachable as exc:
                    if not waiting_said:
                        self.say(f"palaced is not answering ({exc}); the integrator waits for it")
                        waiting_said = True
                    self._stopping.wait(RECONNECT_INTERVAL_S)
                    continue
                waiting_said = False
        finally:
            self._release_lease()
            self.say(f"integrator {self.opts.agent} stopped")

    def _recover(self) -> None:
        """What a previous integrator on this branch left: a check still running, its worktree."""
        state = self._read_state()
        pid = state.get("check_pid")
        if type(pid) is int and pid > 1 and _stop_orphan(pid):
            self.say(f"stopped the check (pid {pid}) a previous integrator left running")
        assert self.branch is not None
        self.branch.discard(self._slot)
        if state.get("task"):
            self.say(f"the previous integrator stopped while landing {state['task']}: it is looked at again")
        self._write_state({})

    # -- one connection to the daemon -----------------------------------------------------------

    def _call(self, op: str, **args: Any) -> Any:
        with Client(self.opts.home, client_name="palacectl-integrate") as client:
            return client.call(op, **args)

    def _session(self) -> None:
        follow(self.opts.home, "palacectl-integrate", greeting=f"connected to palaced; watching {self.opts.project} "
               "for delivered patches", say=self.say, look=self._look, stopping=self._stopping,
               wakes=lambda e: e.get("type") in _WAKING or str(e.get("type", "")).startswith("task."),
               agent=self.opts.agent, **filter_args(stream=self._stream))

    # -- the lease: one integrator per branch ----------------------------------------------------

    def _lease_pattern(self) -> str:
        # A resource name holds no "/"; "~" cannot be in a branch name, so the mapping is one to one.
        return f"res:integrate:{self.opts.branch.replace('/', '~')}"

    def _hold_lease(self) -> bool:
        """Hold the branch's lease (taking it if free); whether we do."""
        with self._lease_lock:
            if self._lease_id is not None:
                return True
            try:
                lease = self._call("lease_acquire", agent=self.opts.agent, project=self.opts.project,
                                   patterns=[self._lease_pattern()], ttl_s=LEASE_TTL_S,
                                   reason=f"integrating {self.opts.branch} on {socket.gethostname()}")["lease"]
            except ApiError as exc:
                if exc.message != self._holder_said:
                    self._holder_said = exc.message
                    self.say(f"another integrator holds branch {self.opts.branch}; waiting for it ({exc.message})"
                             if exc.code == "lease_conflict" else
                             f"could not take the lease on branch {self.opts.branch}: {exc.message}")
                return False
            self._lease_id = lease["id"]
            self._holder_said = None
            self.say(f"holds the lease on branch {self.opts.branch} ({lease['id']})")
            return True

    def _renew_loop(self) -> None:
        while not self._stopping.wait(LEASE_RENEW_S):
            with self._lease_lock:
                lease_id = self._lease_id
                if lease_id is None:
                    continue
                try:
                    self._call("lease_renew", lease_id=lease_id, agent=self.opts.agent, ttl_s=LEASE_TTL_S)
                except (ApiError, DaemonUnreachable) as exc:
                    # Lost (it expired while the daemon was away, or a partition gave it to another):
                    # take it again before landing anything more.
                    self.say(f"could not renew the lease on {self.opts.branch} ({exc}); taking it again")
                    self._lease_id = None

    def _release_lease(self) -> None:
        with self._lease_lock:
            if self._lease_id is None:
                return
            try:
                self._call("lease_release", lease_id=self._lease_id, agent=self.opts.agent)
            except (ApiError, DaemonUnreachable):
                pass  # it expires by itself
            self._lease_id = None

    # -- choosing what to land -------------------------------------------------------------------

    def _look(self) -> None:
        while not self._stopping.is_set() and self._hold_lease():
            view = self._next()
            if view is None:
                return
            try:
                self._land(view)
            except DaemonUnreachable:
                raise  # the session reconnects; the task is still ready
            except Exception as exc:  # noqa: BLE001 - one task's failure must not end the integrator
                message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
                self.say(f"{view['correlation_id']}: could not land it ({message}); looked at again when it changes")
                self._skip(view)

    def _next(self) -> dict[str, Any] | None:
        """The first task to land now, in order (see the module docstring), or None."""
        candidates = []
        for view in self._call("task_list", open=True)["tasks"]:
            cid = view["correlation_id"]
            request = view["request"]
            if (view["state"] != "ready" or view.get("integrator") != self.opts.agent or view.get("delivery") is None
                    or request.get("stream") != self._stream or request.get("branch") != self.opts.branch
                    or view["review"]["state"] not in ("not_required", "approved")
                    or self._skipped.leaves(cid, view["last_activity"])):
                continue
            if not self._requesters.accepts(view):
                self._decline(view)
                continue
            candidates.append(view)
        candidates.sort(key=lambda v: (v["priority"], v["delivery"]["created_at"], v["correlation_id"]))
        for view in candidates:
            if all(self._applied(blocker) for blocker in view["blocked_by"]):
                return view
        return None

    def _applied(self, correlation_id: str) -> bool:
        try:
            return bool(self._call("task_show", correlation_id=correlation_id)["state"] == "applied")
        except NotFound:
            return False

    def _skip(self, view: Mapping[str, Any]) -> None:
        self._skipped.skip(view["correlation_id"], view["last_activity"])

    def _decline(self, view: Mapping[str, Any]) -> None:
        """Say once, on the task, that this integrator does not land it (its policy), and leave it."""
        self._skip(view)
        if any(e.get("from_agent") == self.opts.agent and (e.get("metadata") or {}).get("declined_by")
               for e in self._call("task_show", correlation_id=view["correlation_id"])["events"]):
            return
        reason = (f"integrator {self.opts.agent} on {socket.gethostname()} lands tasks only from "
                  f"{self.opts.accept.describe()}; {view.get('requested_by')} is not one of them (its operator can "
                  f"add --accept-from {view.get('requested_by')})")
        self._append(view, "task.reply", reason, metadata={"declined_by": self.opts.agent})
        self.say(f"declined {view['correlation_id']}: {reason}")

    # -- landing one ------------------------------------------------------------------------------

    def _land(self, view: dict[str, Any]) -> None:
        branch = self.branch
        assert branch is not None
        cid, delivery = view["correlation_id"], view["delivery"]
        patch_event = delivery["event_id"]
        done = branch.landed(patch_event)
        if done is not None:  # landed before a crash, not acked: ack it, never land it twice
            self._close(view, "applied", f"{delivery['author']}'s patch is on {self.opts.branch} as {done[:12]} "
                                         "(landed before the integrator restarted)", commit=done)
            return
        patch = self._patch_of(view)
        if patch is None:
            return
        problems = check_patch(patch, self.opts.max_patch_bytes)
        if problems:
            self._close(view, "failed", f"the patch was refused: {'; '.join(problems)}")
            return
        head = branch.head()
        self._write_state({"task": cid, "patch": patch_event, "head": head, "started_at": utc_now()})
        try:
            prepared = branch.prepare(self._slot, head, patch, message=self._message(view),
                                      author=_identity(delivery["author"]), committer=_identity(self.opts.agent))
            if isinstance(prepared, Conflict):
                self._send_back(view, prepared)
                return
            problems = check_files(branch.changes(prepared))  # what git applied, whatever the headers said
            if problems:
                self._close(view, "failed", f"the patch was refused: {'; '.join(problems)}")
                return
            if self._stopping.is_set():
                return  # stopping: the task stays ready for the next start
            result = self._check(view, prepared)
            if self._stopping.is_set() and not result.passed:
                self.say(f"{cid}: its check was stopped with the integrator; it is looked at again at the next start")
                return
            log_id = self._put_log(view, result)
            self._append(view, CHECK, f"check {'passed' if result.passed else 'failed'} on {prepared[:12]} in "
                                      f"{result.duration_s:.1f} s{' (timed out)' if result.timed_out else ''}",
                         ack_of=patch_event, artifacts=[log_id] if log_id else None,
                         metadata={"result": "passed" if result.passed else "failed", "commit": prepared,
                                   "duration_s": round(result.duration_s, 3), "exit_code": result.exit_code,
                                   "timed_out": result.timed_out, "branch": self.opts.branch})
            if not result.passed:
                self._close(view, "failed", f"the check failed on {prepared[:12]} "
                                            f"({'timed out' if result.timed_out else f'exit {result.exit_code}'}); "
                                            f"{self.opts.branch} stays at {head[:12]}. Log: {log_id or 'none'}",
                            log_id=log_id)
                return
            if not branch.advance(prepared, head):
                self.say(f"{cid}: {self.opts.branch} moved while its check ran; landing it again on the new head")
                return  # still ready: the next look lands it on the new head
            self._write_state({"task": cid, "patch": patch_event, "landed": prepared})
            self._close(view, "applied", f"landed on {self.opts.branch} as {prepared[:12]} (check passed in "
                                         f"{result.duration_s:.1f} s). Log: {log_id or 'none'}",
                        commit=prepared, log_id=log_id)
        finally:
            branch.discard(self._slot)
            self._write_state({})

    def _patch_of(self, view: Mapping[str, Any]) -> bytes | None:
        """The delivered patch's bytes, their sha256 checked; None (skipped until something
        happens on the task) when it is not here yet or is not a patch."""
        try:
            patch = fetch_patch(self._call, view["delivery"]["artifact_ids"])
        except PatchUnusable as exc:
            self.say(f"{view['correlation_id']}: {exc}; not landed")
            self._skip(view)
            return None
        if patch is None:
            self._close(view, "failed", "the delivery names no patch artifact (palacectl patch submit attaches one)")
        return patch

    def _check(self, view: Mapping[str, Any], commit: str) -> CheckResult:
        assert self.branch is not None
        self.say(f"{view['correlation_id']}: checking {commit[:12]} ({self.opts.check!r})")
        # Said on the task, so every replica's Merge queue shows it checking (words: it moves nothing).
        self._append(view, "task.status", f"{self.opts.agent} is checking {commit[:12]} for {self.opts.branch}",
                     metadata={"integrating": "checking", "commit": commit})
        log_path = self._dir / "logs" / f"{self._slug}.log"
        state = self._read_state()

        def started(pid: int) -> None:
            self._check_pid = pid
            self._write_state({**state, "check_pid": pid})

        try:
            return self.branch.run_check(self._slot, self.opts.check, self.opts.check_timeout_s, log_path,
                                         on_start=started)
        finally:
            self._check_pid = None

    def _put_log(self, view: Mapping[str, Any], result: CheckResult) -> str | None:
        if not result.log:
            return None
        return str(self._call("artifact_put", kind="log", created_by=self.opts.agent, content=result.log,
                              metadata={"correlation_id": view["correlation_id"], "check": self.opts.check})["id"])

    def _send_back(self, view: Mapping[str, Any], conflict: Conflict) -> None:
        """The patch no longer applies: back to its author on the new head, or to a person."""
        cid, author = view["correlation_id"], view["delivery"]["author"]
        rounds = len(view.get("reworks") or [])
        if rounds < self.opts.max_reworks:
            self._append(view, REWORK, f"rebase onto {conflict.head}: the patch no longer applies to "
                                       f"{self.opts.branch} ({conflict.why}). Redo it on that commit.",
                         to=author, metadata={"base": conflict.head, "reason": conflict.why[:500]})
            self.say(f"{cid}: does not apply on {conflict.head[:12]}; sent back to {author} (round {rounds + 1} of "
                     f"{self.opts.max_reworks})")
            return
        self._ask_person(view, conflict)

    def _ask_person(self, view: Mapping[str, Any], conflict: Conflict) -> None:
        """After ``max_reworks`` rounds: a question on the task; act on its answer once there is one."""
        cid = view["correlation_id"]
        shown = self._call("task_show", correlation_id=cid)
        mine = [q for q in shown.get("questions") or [] if q.get("asked_by") == self.opts.agent
                and view["delivery"]["event_id"] in str(q.get("question") or "")]
        answered = [q for q in mine if q.get("status") == "answered"]
        if answered:
            choice = str((answered[-1].get("answer") or {}).get("text", "")).strip().lower()
            if choice == REWORK_AGAIN:
                self._append(view, REWORK, f"rebase onto {conflict.head} (a person asked for one more round): "
                                           f"{conflict.why}", to=view["delivery"]["author"],
                             metadata={"base": conflict.head, "reason": conflict.why[:500]})
            else:
                self._close(view, "failed", f"the patch does not apply on {self.opts.branch} after "
                                            f"{self.opts.max_reworks} rounds, and a person closed it")
            return
        if not any(q.get("status") == "open" for q in mine):
            self._call("ask", from_agent=self.opts.agent, to="human:*", correlation_id=cid,
                       stream=view["request"]["stream"], room=view["request"]["room"], wait=False,
                       choices=[REWORK_AGAIN, CLOSE_FAILED],
                       body=f"Task {cid}: patch {view['delivery']['event_id']} by {view['delivery']['author']} still "
                            f"does not apply on {self.opts.branch} ({conflict.head[:12]}) after "
                            f"{self.opts.max_reworks} rounds: {conflict.why}. Send it back once more, or close it "
                            "failed?")
            self.say(f"{cid}: asked a person whether to send it back again")
        self._skip(view)

    # -- what it writes ----------------------------------------------------------------------------

    def _message(self, view: Mapping[str, Any]) -> str:
        body = str(view["request"].get("body") or "")
        goal = body.split("Goal:\n", 1)[-1].strip().splitlines()[0] if "Goal:\n" in body else view["correlation_id"]
        reviewed = view["review"].get("approved_by") or "-"
        return (f"{goal[:72]}\n\nTask {view['correlation_id']}, delivered by {view['delivery']['author']}, reviewed by "
                f"{reviewed}, landed by {self.opts.agent}.\n\n{TASK_TRAILER}: {view['correlation_id']}\n"
                f"{PATCH_TRAILER}: {view['delivery']['event_id']}\n")

    def _append(self, view: Mapping[str, Any], kind: str, body: str, *, status: str | None = None,
                ack_of: str | None = None, to: str | None = None, metadata: dict[str, Any] | None = None,
                artifacts: list[str] | None = None) -> str:
        request = view["request"]
        args: dict[str, Any] = {"type": kind, "stream": request["stream"], "room": request["room"],
                                "from_agent": self.opts.agent, "to_agent": to or request["from_agent"],
                                "correlation_id": view["correlation_id"], "body": body}
        for key, value in (("status", status), ("ack_of", ack_of), ("metadata", metadata), ("artifact_ids", artifacts)):
            if value:
                args[key] = value
        return str(self._call("append", **args)["id"])

    def _close(self, view: Mapping[str, Any], status: str, body: str, *, commit: str | None = None,
               log_id: str | None = None) -> None:
        metadata: dict[str, Any] = {"branch": self.opts.branch}
        if commit:
            metadata["commit"] = commit
        self._append(view, "event.ack", body, status=status, ack_of=view["delivery"]["event_id"], metadata=metadata,
                     artifacts=[log_id] if log_id else None)
        self.landed.append((view["correlation_id"], status, commit or body))
        self.say(f"{view['correlation_id']}: {status}: {body}")

    # -- the state file ----------------------------------------------------------------------------

    def _read_state(self) -> dict[str, Any]:
        try:
            data = json.loads(self._state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write_state(self, state: Mapping[str, Any]) -> None:
        try:
            write_atomically(self._state_path, (json.dumps(dict(state)) + "\n").encode(), create_folder=True)
        except OSError as exc:
            self.say(f"could not write {self._state_path}: {exc.strerror or exc}")


def _identity(agent: str) -> tuple[str, str]:
    """A git identity for an agent id (the email's local part made safe)."""
    local = "".join(c if c.isalnum() or c in "._-" else "-" for c in agent)[:64] or "agent"
    name = "".join(c for c in agent if c not in "<>\n")[:128] or "agent"  # git parses "Name <email>"
    return name, f"{local}@palace.invalid"
