"""`palacectl worker` end to end: real daemons, real git repositories, stand-in runners (scripts
that behave like a harness), and the worker as a real process that is stopped, killed and
restarted — tasks picked up and delivered, `who` showing the worker and its tasks, several runs
in separate worktrees, a stop and a crash that leave no task silently dropped, a daemon restart,
and two workers on two daemons racing for one broadcast task."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from palacectl.features.approvals.permission_policy import PermissionPolicy
from palacectl.features.worker.launch import task_branch
from tests.fleet import api, ctl_json, wait_converged, wait_until
from tests.helpers import PYTHON, init_repo, run_ctl_process, run_git

pytestmark = pytest.mark.transport_fixed

# Edits feature.txt for the task named in its prompt (the documented `claude --print` call).
EDITOR = """#!{python}
import pathlib, re, sys
assert sys.argv[1:4] == ["--print", "--permission-mode", "acceptEdits"], sys.argv
cid = re.search(r"palace task (task_\\S+)", sys.argv[-1]).group(1)
pathlib.Path("feature.txt").write_text("done for " + cid + "\\n")
print("edited feature.txt for", cid)
"""
# Waits until the test opens the gate (a file named after the task, or "all"), then edits.
GATED = """import os, pathlib, sys, time
cid, gates = sys.argv[1], pathlib.Path(sys.argv[2])
print("waiting at the gate", os.getpid(), flush=True)
while not ((gates / cid).exists() or (gates / "all").exists()):
    time.sleep(0.05)
pathlib.Path("feature.txt").write_text("gated work for " + cid + "\\n")
print("done", flush=True)
"""


def git(repo: Path, *args: str) -> str:
    return run_git(repo, *args, check=True).stdout


def events(home: Path, cid: str, kind: str | None = None) -> list[dict]:
    found = api(home, "list", correlation_ids=[cid], limit=500)["events"]
    return [e for e in found if kind is None or e["type"] == kind]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (our own child that exited) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except OSError:
        return True


class Machine:
    """A daemon's home with a clone of the project, stand-in runners, and workers on it."""

    def __init__(self, home: Path, root: Path, origin: Path | None = None) -> None:
        self.home = home
        self.repo = root / "repo"
        if origin is None:
            self.base = init_repo(self.repo)
        else:
            subprocess.run(["git", "clone", "-q", str(origin), str(self.repo)], check=True)
            self.base = git(self.repo, "rev-parse", "HEAD").strip()
        self.gates = root / "gates"
        self.gates.mkdir()
        bin_dir = root / "bin"
        bin_dir.mkdir()
        claude = bin_dir / "claude"
        claude.write_text(EDITOR.format(python=sys.executable))
        claude.chmod(0o755)
        (bin_dir / "gated.py").write_text(GATED)
        (bin_dir / "fail.py").write_text("import sys\nprint('boom', flush=True)\nsys.exit(1)\n")
        (home / "config.toml").write_text(
            f'[runners.gated]\ncommand = ["{PYTHON}", "{bin_dir / "gated.py"}", "{{correlation_id}}", "{self.gates}"]\n'
            f'[runners.fail]\ncommand = ["{PYTHON}", "{bin_dir / "fail.py"}"]\n')
        self.env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
        self.env.pop("PALACE_HOME", None)
        self.workers: list[subprocess.Popen[bytes]] = []
        self.logs = root / "worker.log"

    def task(self, to: str = "bot", **flags: str) -> str:
        args = ["task", "create", "--project", "shop", "--from-agent", "boss", "--to-agent", to, "--goal",
                "Add feature.txt", "--branch", "main", "--base-commit", self.base, "--done", "feature.txt exists"]
        for k, v in flags.items():
            args += [f"--{k.replace('_', '-')}", v]
        return ctl_json(self.home, *args)["task"]["correlation_id"]

    def worker(self, agent: str = "bot", runner: str = "gated", *extra: str) -> subprocess.Popen[bytes]:
        log = open(self.logs, "ab")
        proc = subprocess.Popen([PYTHON, "-m", "palacectl", "--home", str(self.home), "worker", "--agent", agent,
                                 "--runner", runner, "--workspace", str(self.repo), *extra],
                                env=self.env, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        self.workers.append(proc)
        wait_until(lambda: self.worker_entry(agent) is not None or proc.poll() is not None, "the worker to connect")
        assert proc.poll() is None, self.log()
        return proc

    def worker_entry(self, agent: str = "bot") -> dict | None:
        for w in ctl_json(self.home, "who")["watchers"]:
            if w["agent"] == agent and w.get("worker"):
                return w
        return None

    def open_gate(self, name: str = "all") -> None:
        (self.gates / name).write_text("go\n")

    def state(self, agent: str = "bot") -> dict:
        return json.loads((self.home / "workers" / f"{agent}.json").read_text())

    def log(self) -> str:
        return self.logs.read_text(errors="replace") if self.logs.exists() else ""

    def stop_workers(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers:
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def machine(daemon, short_tmp):
    m = Machine(daemon.home, short_tmp)
    m.daemon = daemon
    yield m
    m.open_gate()
    m.stop_workers()


def state_of(home: Path, cid: str) -> str:
    return ctl_json(home, "task", "show", cid)["state"]


def test_a_worker_picks_up_tasks_and_delivers_patches_that_apply(machine):
    worker = machine.worker(runner="claude")
    entry = machine.worker_entry()
    assert entry["worker"] == {"runner": "claude", "concurrency": 1, "project": None, "tasks": [],
                               "accepts": "this daemon's agents and people",
                               "permissions": PermissionPolicy().describe()}  # the default: who shows it
    assert "ask human:*" in entry["worker"]["permissions"]
    mine, broadcast = machine.task(), machine.task(to="*")
    for cid in (mine, broadcast):
        wait_until(lambda: state_of(machine.home, cid) == "ready", f"{cid} to be delivered")
        view = ctl_json(machine.home, "task", "show", cid)
        assert view["claimed_by"] == "bot"
        patch_event = events(machine.home, cid, "patch.ready")[0]
        patch = api(machine.home, "artifact_get", artifact_id=patch_event["artifact_ids"][0])["content"]
        # The requester's side: the patch applies on its own checkout at the base commit.
        subprocess.run(["git", "-C", str(machine.repo), "apply", "--check", "-"], input=patch, check=True)
        assert b"done for " + cid.encode() in patch
    # Each run had its own worktree, removed once the patch was in the palace (the worker cleans up
    # and forgets the run just after the patch is written: waited for, not raced); the workspace is
    # untouched.
    wait_until(lambda: machine.state()["runs"] == {}, "the worker to forget its finished runs")
    assert not list((machine.home / "worktrees").rglob("task_*/")), list((machine.home / "worktrees").iterdir())
    assert git(machine.repo, "branch", "--list", "palace/*").strip() == ""
    assert not (machine.repo / "feature.txt").exists()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(60) == 0, machine.log()
    assert machine.worker_entry() is None  # `who` no longer shows it
    assert "Traceback" not in machine.log()


def test_who_shows_the_tasks_a_worker_runs_and_concurrency_gives_each_its_own_worktree(machine):
    machine.worker("bot", "gated", "--concurrency", "2")
    first, second, third = machine.task(), machine.task(), machine.task()
    wait_until(lambda: len(machine.worker_entry()["worker"]["tasks"]) == 2, "two runs at once")
    running = machine.worker_entry()["worker"]["tasks"]
    assert set(running) < {first, second, third}
    trees = {cid: Path(machine.state()["runs"][cid]["worktree"]) for cid in running}
    assert len(set(trees.values())) == 2
    for cid, tree in trees.items():
        # The run's status event follows its start (what `who` shows, and the state file names the
        # worktree from the claim on) by a moment: the worktree is made in between.
        status = wait_until(lambda cid=cid: events(machine.home, cid, "task.status"), f"{cid}'s status")[0]
        assert status["metadata"]["worktree"] == str(tree) and status["metadata"]["runner"] == "gated"
        assert git(tree, "rev-parse", "HEAD").strip() == machine.base  # at the task's base commit
        assert git(tree, "rev-parse", "--abbrev-ref", "HEAD").strip() == task_branch(cid)  # palace/<slug>
    waiting = ({first, second, third} - set(running)).pop()
    assert state_of(machine.home, waiting) == "open"  # the third waits for a free slot
    machine.open_gate()
    for cid in (first, second, third):
        wait_until(lambda: state_of(machine.home, cid) == "ready", f"{cid} to be delivered")
    wait_until(lambda: machine.worker_entry()["worker"]["tasks"] == [], "the worker to be idle again")


def test_stopping_the_worker_stops_its_run_and_releases_the_task(machine):
    worker = machine.worker()
    cid = machine.task()
    wait_until(lambda: machine.state()["runs"].get(cid, {}).get("pid"), "the run to start")
    pid = machine.state()["runs"][cid]["pid"]
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(90) == 0, machine.log()
    assert not alive(pid)
    release = events(machine.home, cid, "task.release")[-1]
    assert release["from_agent"] == "bot" and "stopped by SIGTERM" in release["body"]
    view = ctl_json(machine.home, "task", "show", cid)
    assert view["state"] == "open" and view["claimed_by"] is None  # open again for anyone
    assert machine.state()["runs"] == {}


@pytest.mark.slow
def test_a_worker_killed_mid_task_reports_it_when_it_starts_again(machine):
    cid = machine.task()
    first = machine.worker()
    wait_until(lambda: machine.state()["runs"].get(cid, {}).get("pid"), "the run to start")
    orphan = machine.state()["runs"][cid]["pid"]
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert alive(orphan)  # the runner outlived its worker
    second = machine.worker()
    wait_until(lambda: events(machine.home, cid, "task.release"), "the interrupted run to be reported")
    release = events(machine.home, cid, "task.release")[-1]
    assert "ended while running it" in release["body"] and f"pid {orphan}" in release["body"]
    assert "outlived it and was stopped" in release["body"]
    wait_until(lambda: not alive(orphan), "the orphaned runner to be stopped")
    logs = [a for a in release["body"].split() if a.startswith("art_")]
    assert logs and b"waiting at the gate" in api(machine.home, "artifact_get", artifact_id=logs[0].rstrip("."))["content"]
    # Released, so the new worker takes it again; killed a second time, it is reported blocked.
    wait_until(lambda: machine.state()["runs"].get(cid, {}).get("pid") not in (None, orphan), "the retry to start")
    second.send_signal(signal.SIGKILL)
    second.wait()
    machine.worker()
    wait_until(lambda: events(machine.home, cid, "task.reply"), "the second interruption to be reported")
    reply = events(machine.home, cid, "task.reply")[-1]
    assert reply["status"] == "blocked" and "for the 2th time" in reply["body"]
    assert state_of(machine.home, cid) == "blocked"
    # Not retried again: a later task's run starts once the worker has looked at its queue since.
    later = machine.task()
    wait_until(lambda: machine.state()["runs"].get(later, {}).get("pid"), "a later task's run to start")
    assert cid not in machine.state()["runs"]


def test_a_worker_goes_on_across_a_daemon_restart(machine):
    machine.worker()
    cid = machine.task()
    wait_until(lambda: machine.state()["runs"].get(cid, {}).get("pid"), "the run to start")
    assert machine.daemon.stop() == 0
    machine.open_gate(cid)  # the run ends while palaced is down: its outcome waits for the daemon
    wait_until(lambda: f"waiting for palaced to record the outcome of {cid}" in machine.log(),
               "the run to end while palaced is down")
    machine.daemon.start()
    wait_until(lambda: state_of(machine.home, cid) == "ready", "the outcome to be recorded after the restart")
    assert len(events(machine.home, cid, "patch.ready")) == 1
    wait_until(lambda: machine.worker_entry() is not None, "the worker to reconnect")
    later = machine.task()
    machine.open_gate(later)
    wait_until(lambda: state_of(machine.home, later) == "ready", "a task created after the restart to be delivered")


def test_a_task_this_workspace_cannot_run_is_skipped_not_claimed(machine, short_tmp):
    other = short_tmp / "elsewhere"
    foreign_base = init_repo(other)
    (other / "x").write_text("x")
    git(other, "add", "x")
    git(other, "commit", "-q", "-m", "second")
    foreign_base = git(other, "rev-parse", "HEAD").strip()
    machine.worker(runner="claude")
    foreign = ctl_json(machine.home, "task", "create", "--project", "shop", "--from-agent", "boss", "--to-agent",
                       "bot", "--goal", "elsewhere", "--branch", "main", "--base-commit", foreign_base, "--done",
                       "x")["task"]["correlation_id"]
    wait_until(lambda: f"skipped {foreign}" in machine.log(), "the worker to skip the task")
    assert ctl_json(machine.home, "task", "show", foreign)["claimed_by"] is None
    mine = machine.task()  # the next one it can run is still taken
    wait_until(lambda: state_of(machine.home, mine) == "ready", "the runnable task to be delivered")
    assert state_of(machine.home, foreign) == "open"


def test_worker_refusals_are_one_line(machine, short_tmp):
    plain = short_tmp / "plain"
    plain.mkdir()
    for args, code, words in [
        (("--runner", "nosuch", "--workspace", str(machine.repo)), 1, "unknown runner 'nosuch'"),
        (("--runner", "claude", "--workspace", str(plain)), 1, "is not a git repository"),
        (("--runner", "claude", "--workspace", str(machine.repo), "--concurrency", "0"), 64, "--concurrency"),
        (("--runner", "claude", "--workspace", str(machine.repo), "--timeout", "soon"), 64, "--timeout"),
    ]:
        result = run_ctl_process(machine.home, "worker", "--agent", "bot", *args, env=machine.env, timeout=60)
        assert result.returncode == code and words in result.stderr and result.stderr.count("\n") == 1, result
    machine.worker()
    again = run_ctl_process(machine.home, "worker", "--agent", "bot", "--runner", "gated", "--workspace",
                            str(machine.repo), env=machine.env, timeout=60)
    assert again.returncode == 1 and "another worker for bot runs on this palace home" in again.stderr, again


def _two_machines(fleet, short_tmp, *, through_middle: bool):
    if through_middle:
        a, b, c = fleet.ends_through_middle()
    else:
        a, c = fleet.found("alpha"), None
        c = fleet.join("gamma")
        b = None
    left = Machine(a.home, short_tmp / "mac")
    right = Machine(c.home, short_tmp / "box", origin=left.repo)
    return a, b, c, left, right


def _one_delivery(left, right, cid):
    """The one patch delivered on ``cid``, once no other can come: both daemons hold the task as
    delivered (a claim by anyone but its claimant is refused from then on), and every claim's run
    has said in its worker's log how it ended (a run that lost its claim writes nothing to the
    palace, so only its log tells that it is over)."""
    for m in (left, right):
        wait_until(lambda: state_of(m.home, cid) == "ready", "the task to be delivered")
    claimants = {e["from_agent"] for m in (left, right) for e in events(m.home, cid, "event.ack")
                 if e["status"] == "claimed"}
    ended = re.compile(rf"^\S+ {re.escape(cid)}: (\w+)", re.MULTILINE)  # the worker's line at a run's end

    def outcomes() -> list[str]:
        return ended.findall(left.log()) + ended.findall(right.log())

    wait_until(lambda: len(outcomes()) >= len(claimants), "every run of the task to end")
    assert outcomes().count("delivered") == 1, outcomes()
    patches = events(left.home, cid, "patch.ready")
    assert len(patches) == 1, patches
    return patches[0]


@pytest.mark.slow
def test_two_workers_on_two_daemons_race_for_one_broadcast_task_and_one_delivers(fleet, short_tmp):
    a, _, c, left, right = _two_machines(fleet, short_tmp, through_middle=False)
    try:
        left.worker("mac-bot", "claude")
        right.worker("box-bot", "claude", "--accept-from", "boss")  # the Mac's requester, by name
        wait_until(lambda: right.worker_entry("mac-bot") is not None, "presence: the box sees the Mac's worker")
        cid = left.task(to="*")
        patch = _one_delivery(left, right, cid)
        view = ctl_json(left.home, "task", "show", cid)
        assert patch["from_agent"] == view["claimed_by"]
        wait_converged(a, c)
    finally:
        left.stop_workers()
        right.stop_workers()


@pytest.mark.slow
def test_two_workers_that_both_claimed_across_a_partition_end_with_one_run(fleet, short_tmp):
    a, b, c, left, right = _two_machines(fleet, short_tmp, through_middle=True)
    try:
        cid = left.task(to="*")
        wait_until(lambda: events(right.home, cid, "task.request"), "the task to reach the box")
        with fleet.partitioned(b):
            left.worker("mac-bot", "gated")
            right.worker("box-bot", "gated", "--accept-from", "boss")
            for m in (left, right):  # both claimed it and run it: neither can see the other
                wait_until(lambda: m.state(m.workers and ("mac-bot" if m is left else "box-bot"))["runs"]
                           .get(cid, {}).get("pid"), "both runs to start")
        winner_claim = min((events(left.home, cid, "event.ack") + events(right.home, cid, "event.ack")),
                           key=lambda e: (e["created_at"], e["id"]))
        winner = winner_claim["from_agent"]
        loser, loser_machine = ("box-bot", right) if winner == "mac-bot" else ("mac-bot", left)
        loser_pid = loser_machine.state(loser)["runs"][cid]["pid"]
        # Healed: the loser's worker sees the first claim (and palace's conflict notice) and stops its run.
        wait_until(lambda: not alive(loser_pid), "the losing run to be stopped")
        wait_until(lambda: loser_machine.state(loser)["runs"] == {}, "the losing worker to let go")
        left.open_gate()
        right.open_gate()
        patch = _one_delivery(left, right, cid)
        assert patch["from_agent"] == winner
        # The loser's own daemon writes palace's notice; it may still be on its way to the Mac.
        wait_until(lambda: events(left.home, cid, "task.conflict"), "palace's conflict notice on the Mac")
        wait_converged(a, b, c)
        conflicts = events(left.home, cid, "task.conflict")
        assert len(conflicts) == 1 and conflicts[0]["to_agent"] == loser
        assert not [e for e in events(left.home, cid, "task.reply") if e["from_agent"] == loser]
    finally:
        left.stop_workers()
        right.stop_workers()


def test_a_first_start_names_the_tasks_already_waiting_before_it_takes_them(machine):
    """Guards issue 26: a worker's first start took old broadcast tasks without a word. It names
    what was waiting (and to whom it was addressed) before any claim; --skip-backlog leaves them
    until something happens on one, and takes what comes after."""
    old_broadcast, old_mine = machine.task(to="*"), machine.task()
    machine.worker("bot", "claude", "--skip-backlog")
    wait_until(lambda: "were waiting before this worker started" in machine.log(), "the worker to name its backlog")
    said = next(line for line in machine.log().splitlines() if "were waiting before" in line)
    assert "2 task(s)" in said and "left (--skip-backlog)" in said
    assert f"{old_broadcast} from boss (to everyone" in said and f"{old_mine} from boss (to you" in said
    fresh = machine.task()
    wait_until(lambda: state_of(machine.home, fresh) == "ready", "a task created after the start to be delivered")
    assert state_of(machine.home, old_broadcast) == "open" and state_of(machine.home, old_mine) == "open"
    machine.stop_workers()
    machine.workers.clear()
    machine.worker("bot", "claude")  # without the flag: named first, then taken
    for cid in (old_broadcast, old_mine):
        wait_until(lambda: state_of(machine.home, cid) == "ready", f"{cid} to be delivered")
    second_start = machine.log().rsplit("worker bot started", 1)[1]
    assert "2 task(s) were waiting before this worker started; taking those its policy accepts" in second_start
    assert second_start.index("taking those its policy accepts") < second_start.index(f"{old_broadcast}: ")


def test_a_worker_over_its_agents_daily_budget_claims_nothing_and_says_so_once(machine):
    """Issue 28: [budgets] agent_daily_tokens reached: the worker takes no task, says why in its
    log, and writes one usage.budget event (what people's daemons notify them of). Its looks at the
    queue after the task arrived are shown by what it tells `who`, not waited for: a look judges
    the budget first, and the spending the last one judged includes a report written after it."""
    config = machine.home / "config.toml"
    config.write_text(config.read_text() + "[budgets]\nagent_daily_tokens = 1000\n", encoding="utf-8")
    earlier = machine.task()
    ctl_json(machine.home, "task", "claim", earlier, "--agent", "bot")  # a run of bot's, earlier today
    spent = {"runner": "gated", "tokens_in": 900, "tokens_out": 200, "task_id": earlier, "machine": "m"}

    def report(usage: dict[str, int], body: str) -> None:
        ctl_json(machine.home, "append", "--type", "usage.report", "--stream", "project/shop", "--room", "delegation",
                 "--from-agent", "bot", "--correlation-id", earlier, "--metadata", json.dumps({**spent, **usage}),
                 "--body", body)

    def held_line() -> str:
        entry = machine.worker_entry()
        return (entry["worker"].get("held") or "") if entry else ""

    report({}, "earlier run")
    machine.worker()
    cid = machine.task()
    wait_until(lambda: "claims nothing more" in machine.log(), "the worker to say it stops claiming")
    report({"tokens_in": 100, "tokens_out": 0}, "a later run")  # what the worker's next look judges
    second = machine.task()  # a task.request: the worker looks at the queue again
    wait_until(lambda: "1,200 tokens spent" in held_line(), "a look at the queue with both tasks in it")
    assert state_of(machine.home, cid) == state_of(machine.home, second) == "open"
    [told] = api(machine.home, "list", types=["usage.budget"])["events"]
    assert told["from_agent"] == "bot" and told["status"] == "blocked"
    assert told["topic"].startswith("agent_daily_tokens/bot/") and "1,100 tokens spent, 110%" in told["body"], told
    assert machine.log().count("claims nothing more") == 1
    # `who` (and so the dashboard) says why the worker is idle, on every daemon that hears of it.
    [held] = [w["worker"]["held"] for w in ctl_json(machine.home, "who")["watchers"] if w.get("worker")]
    assert held.startswith("claims nothing: agent bot is over its 1,000 tokens daily budget"), held
    assert "claims nothing: " in run_ctl_process(machine.home, "who").stdout
