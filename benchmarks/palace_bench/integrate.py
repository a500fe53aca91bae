"""``palacectl bench integrate``: how fast an integrator lands delivered patches (issue 46).

Owns the integrator's figures the docs report. One real ``palaced`` on a temporary home (loopback
only, mDNS off), a git repository with an integration branch, and ``palacectl integrate`` as a real
process with a trivial check (``true``), so what is measured is palace's part: the patch fetched
and checked, a worktree made, ``git apply``, the commit, the check's process, the branch's
compare-and-swap, the events on the task. Patches are delivered straight through the daemon's API
(a request, a claim, ``patch_submit``: each adding its own file), so no runner's time is counted.

* **throughput**: ``patches`` tasks delivered at once; the figure is patches landed per minute,
  from the first delivery to the last ``applied``;
* **latency**: ``samples`` patches delivered one at a time, each after the previous one landed;
  the figure is the time from ``patch_submit`` returning to the branch having moved (the integrator
  acks ``applied`` right after moving it; the ack's arrival, seen by a subscription, is the clock),
  p50 and p99.

No benchmark imports palaced.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from palacectl.client import Client

from .daemon import BenchDaemon
from .figures import judge, narrator, percentile

__all__ = ["run_integrate_bench"]

PROJECT: Final = "bench"
REQUESTER: Final = "bench-boss"
WORKER: Final = "bench-worker"
INTEGRATOR: Final = "bench-lander"
BRANCH: Final = "integration"
# Why these targets: an overnight fleet delivers tens of patches an hour; an integrator that lands
# one a second (60/min) with a trivial check is never what the night waits on, and a person who
# approves a patch sees it on the branch within two seconds.
TARGETS: Final = {"patches_per_minute": (">=", 60.0), "patch_to_branch_p50_s": ("<=", 2.0)}
LAND_TIMEOUT_S: Final = 300.0


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _patch(n: int) -> bytes:
    return (f"diff --git a/bench/f{n}.txt b/bench/f{n}.txt\nnew file mode 100644\n--- /dev/null\n"
            f"+++ b/bench/f{n}.txt\n@@ -0,0 +1 @@\n+patch {n}\n").encode()


class _Landings:
    """The ``applied`` acks of the integrator, by task, as a subscription sees them arrive."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.at: dict[str, float] = {}
        self.changed = threading.Condition()
        self._stop = threading.Event()
        self._client = Client(home, client_name="palacectl-bench")
        self._client.connect()
        self._sub = self._client.subscribe(agent=REQUESTER, start="tip", types=["event.ack"])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                push = self._sub.next_push(timeout=0.5)
            except Exception:  # noqa: BLE001 - idle, or the daemon is stopping: look at _stop again
                continue
            for event in push.get("events") or []:
                if event.get("status") == "applied" and event.get("from_agent") == INTEGRATOR:
                    with self.changed:
                        self.at.setdefault(event["correlation_id"], time.perf_counter())
                        self.changed.notify_all()

    def wait_for(self, cids: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not all(c in self.at for c in cids):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"{sum(c not in self.at for c in cids)} patch(es) did not land in {timeout:.0f} s")
                self.changed.wait(min(left, 1.0))

    def close(self) -> None:
        self._stop.set()
        self._client.close()


def _deliver(daemon: BenchDaemon, base: str, n: int) -> str:
    task = daemon.call("task_create", project=PROJECT, from_agent=REQUESTER, to_agent=WORKER, goal=f"add f{n}",
                       branch=BRANCH, base_commit=base, done="the file", integrator=INTEGRATOR)["task"]
    cid = task["correlation_id"]
    daemon.call("task_claim", correlation_id=cid, agent=WORKER)
    daemon.call("patch_submit", from_agent=WORKER, correlation_id=cid, content=_patch(n))
    return cid


def run_integrate_bench(*, quick: bool = False, patches: int | None = None, samples: int | None = None,
                        progress: bool = True) -> dict[str, Any]:
    say = narrator(progress)
    patches = patches or (10 if quick else 200)
    samples = samples or (5 if quick else 50)
    root = Path(tempfile.mkdtemp(prefix="palbenchint"))
    daemon = BenchDaemon(root, "box")
    integrator: subprocess.Popen[bytes] | None = None
    landings: _Landings | None = None
    log_path = root / "integrate.log"
    try:
        repo = root / "repo"
        repo.mkdir()
        _git(repo, "init", "-q", "-b", "main")
        (repo / "README.md").write_text("bench\n")
        _git(repo, "add", "README.md")
        _git(repo, "-c", "user.name=bench", "-c", "user.email=bench@palace.invalid", "commit", "-q", "-m", "first")
        base = _git(repo, "rev-parse", "HEAD").strip()
        _git(repo, "branch", BRANCH, base)
        daemon.start()
        daemon.call("init", name="bench-integrate", daemon_name="box")
        say(f"palaced on {daemon.home}; integrator on {repo} branch {BRANCH}, check: true")
        with open(log_path, "ab") as log:
            integrator = subprocess.Popen(
                [sys.executable, "-m", "palacectl", "--home", str(daemon.home), "integrate", "--agent", INTEGRATOR,
                 "--repo", str(repo), "--branch", BRANCH, "--project", PROJECT, "--check", "true"],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        landings = _Landings(daemon.home)
        _wait(lambda: "holds the lease" in log_path.read_text(errors="replace"), "the integrator to start", integrator,
              log_path)

        say(f"throughput: {patches} patches delivered at once")
        started = time.perf_counter()
        cids = [_deliver(daemon, base, n) for n in range(patches)]
        delivered = time.perf_counter()
        landings.wait_for(cids, LAND_TIMEOUT_S)
        took = max(landings.at[c] for c in cids) - started
        per_minute = patches / took * 60

        say(f"latency: {samples} patches, one at a time")
        waits: list[float] = []
        for n in range(patches, patches + samples):
            head = _git(repo, "rev-parse", BRANCH).strip()
            cid = _deliver(daemon, head, n)
            submitted = time.perf_counter()
            landings.wait_for([cid], LAND_TIMEOUT_S)
            waits.append(landings.at[cid] - submitted)
        landed = len(_git(repo, "log", "--format=%H", f"{base}..{BRANCH}").split())
        if landed != patches + samples:
            raise RuntimeError(f"the branch holds {landed} commits, not {patches + samples}")
        results: dict[str, Any] = {
            "patches": patches, "samples": samples, "deliver_s": round(delivered - started, 3),
            "land_all_s": round(took, 3), "patches_per_minute": round(per_minute, 1),
            "patch_to_branch_p50_s": round(percentile(waits, 50), 3),
            "patch_to_branch_p99_s": round(percentile(waits, 99), 3), "commits_on_branch": landed,
        }
        say(f"  {patches} patches landed in {took:.1f} s: {per_minute:,.0f} per minute")
        say(f"  patch → branch, one at a time: p50 {results['patch_to_branch_p50_s']:.3f} s, "
            f"p99 {results['patch_to_branch_p99_s']:.3f} s")
        return judge(results, TARGETS, say)
    finally:
        if landings is not None:
            landings.close()
        if integrator is not None and integrator.poll() is None:
            integrator.terminate()
            try:
                integrator.wait(30)
            except subprocess.TimeoutExpired:
                integrator.kill()
                integrator.wait()
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


def _wait(predicate: Callable[[], bool], what: str, proc: subprocess.Popen[bytes], log: Path,
          timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise RuntimeError(f"the integrator exited ({proc.returncode}) before {what}:\n"
                               f"{log.read_text(errors='replace')[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)
