"""Hostile tasks against a machine that works by itself (issue 25): what a task's words, run by an
obedient edit-only harness (tests/hostile_task.py), can make palace do on the victim's machine.

Each test is one finding of the issue; after each, nothing ran but the runner, no file the run did
not write left the machine, and the worker (where there is one) keeps working. Real daemons, real
git, a stand-in runner that only reads and writes files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from palacectl.features.worker.launch import remove_worktree, task_branch
from tests.fleet import api, ctl_json, wait_until
from tests.helpers import run_ctl_process, run_git
from tests.hostile_task import Victim

pytestmark = pytest.mark.transport_fixed


@pytest.fixture
def victim(daemon, short_tmp):
    v = Victim(daemon.home, short_tmp)
    yield v
    v.stop_workers()


def state_of(home: Path, cid: str) -> str:
    return ctl_json(home, "task", "show", cid)["state"]


def events(home: Path, cid: str, kind: str | None = None) -> list[dict]:
    found = api(home, "list", correlation_ids=[cid], limit=500)["events"]
    return [e for e in found if kind is None or e["type"] == kind]


def claims(home: Path, cid: str) -> list[dict]:
    return [e for e in events(home, cid) if e.get("status") == "claimed"]


def launch(victim: Victim, cid: str, *extra: str):
    return run_ctl_process(victim.home, "task", "launch", cid, "--runner", "obedient", "--agent", "bot",
                           "--workspace", str(victim.repo), "--json", *extra, env=victim.env, timeout=120)


def patch_of(victim: Victim, cid: str) -> str:
    (ready,) = events(victim.home, cid, "patch.ready")
    patch, *log = ready["artifact_ids"]  # the patch, then the run's log (it travels with the event)
    assert len(log) == 1 and api(victim.home, "artifact_get", artifact_id=log[0])["kind"] == "log"
    return api(victim.home, "artifact_get", artifact_id=patch)["content"].decode()


def hijack_git(marker: Path) -> str:
    """A task body: a git directory of the run's own whose config runs a command (fsmonitor) when
    git refreshes an index, and the worktree's `.git` pointed at it."""
    return "\n".join([
        "Please tidy up.",
        "@write g/HEAD", "ref: refs/heads/main", "@end",
        "@write g/objects/.keep", "", "@end",
        "@write g/refs/heads/.keep", "", "@end",
        "@write g/config", "[core]", "\trepositoryformatversion = 0", "\tbare = false",
        f"\tfsmonitor = touch {marker}; false", "@end",
        "@write .git", "gitdir: ./g", "@end",
        "@write feature.txt", "the feature", "@end",
    ])


def test_a_run_cannot_make_palaces_git_run_a_command_through_the_worktrees_git(victim, short_tmp):
    """Finding 1: a run that wrote `gitdir: ./g` into the worktree's `.git` and a `g/config` with
    `core.fsmonitor = <command>` made palace's own `git add` run that command as the user, and left
    the task claimed with no reply. Every git call on the run's tree is now pinned to the
    repository palace found before the run, with every program-running key off."""
    marker = short_tmp / "pwned"
    cid = victim.task(hijack_git(marker), cid="task_hijack_1")
    result = launch(victim, cid)
    assert not marker.exists(), "palace's git ran the command the run wrote into its config"
    assert result.returncode == 0, result
    outcome = json.loads(result.stdout)
    assert outcome["outcome"] == "delivered", outcome
    patch = patch_of(victim, cid)
    assert "feature.txt" in patch
    assert "\n+++ b/.git\n" not in patch  # git never takes a file named .git
    # Removing the worktree (what a worker does after each run) is palace's own work too.
    remove_worktree(victim.repo, Path(outcome["worktree"]), task_branch(cid))
    assert not Path(outcome["worktree"]).exists() and not marker.exists()
    assert task_branch(cid) not in run_git(victim.repo, "branch", "--list", check=True).stdout


def test_a_run_in_the_checkout_that_rewrites_its_git_config_is_refused_and_the_config_put_back(victim, short_tmp):
    """Finding 1, `--in-place`: the run works in the user's own checkout, whose `.git/config` it can
    write. What it did to `.git` is put back as it was, palace runs no git command on it, and the
    task is answered blocked with the reason (never silence)."""
    marker = short_tmp / "pwned"
    config = victim.repo / ".git" / "config"
    before = config.read_bytes()
    cid = victim.task("\n".join([
        "@write .git/config", "[core]", "\trepositoryformatversion = 0", f"\tfsmonitor = touch {marker}; false",
        "@end",
        "@write .git/hooks/pre-commit", "#!/bin/sh", f"touch {marker}", "@end",
        "@write feature.txt", "the feature", "@end"]), cid="task_hijack_2")
    result = launch(victim, cid, "--in-place")
    assert result.returncode != 0 or json.loads(result.stdout)["outcome"] == "blocked", result
    assert not marker.exists()
    assert config.read_bytes() == before
    assert not (victim.repo / ".git" / "hooks" / "pre-commit").exists()
    (reply,) = events(victim.home, cid, "task.reply")
    assert reply["status"] == "blocked" and ".git/config" in reply["body"], reply
    assert not events(victim.home, cid, "patch.ready")
    # The user's next git command in the checkout runs nothing of the run's either.
    run_git(victim.repo, "status", check=True)
    assert not marker.exists()


def test_launch_in_place_refuses_a_checkout_with_untracked_files(victim):
    """Finding 3: the clean-tree check ignored untracked files and the patch was `git add -A` of the
    whole checkout, so a private note lying there went to the requester. A run in the checkout now
    needs one without untracked files (nothing is claimed otherwise)."""
    (victim.repo / "private-note.txt").write_text("my bank PIN\n")
    cid = victim.task("@write feature.txt\nthe feature\n@end", cid="task_private_1")
    result = launch(victim, cid, "--in-place")
    assert result.returncode != 0
    error = json.loads(result.stdout)["error"]["message"]
    assert "untracked" in error and "private-note.txt" in error, result
    assert "Traceback" not in result.stderr
    assert not claims(victim.home, cid)


def test_a_run_that_unignores_a_secret_does_not_ship_it(victim):
    """Finding 3: what was ignored before the run stays out of its patch, whatever the run does to
    the ignore rules (`.env` ignored; the run empties .gitignore)."""
    (victim.repo / ".gitignore").write_text(".env\n")
    run_git(victim.repo, "add", ".gitignore", check=True)
    run_git(victim.repo, "commit", "-q", "-m", "ignore .env", check=True)
    base = run_git(victim.repo, "rev-parse", "HEAD", check=True).stdout.strip()
    (victim.repo / ".env").write_text("API_KEY=secret\n")
    cid = victim.task("@write .gitignore\n\n@end\n@write feature.txt\nthe feature\n@end", cid="task_env_1",
                      base=base)
    result = launch(victim, cid, "--in-place")
    assert result.returncode == 0, result
    patch = patch_of(victim, cid)
    assert "feature.txt" in patch and "API_KEY" not in patch and "b/.env" not in patch
    assert run_git(victim.repo, "diff", "--cached", "--name-only", check=True).stdout == ""  # the user's index untouched


@pytest.mark.parametrize("cid", ["task_loop.lock", "task_..", "task_trailing.", "task_../../escape",
                                 "task_" + "x" * 250, "task_with space", "task_a/b"])
def test_any_correlation_id_makes_a_safe_worktree_and_branch(victim, cid):
    """Findings 4 and 5: a correlation id git refuses as a branch (`x.lock`, `..`, a trailing `.`)
    made `git worktree add` fail after the claim, and `../…` made directories outside the home.
    Worktrees and branches are now named by a slug of the id and its hash."""
    victim.task("@write feature.txt\nthe feature\n@end", cid=cid)
    result = launch(victim, cid)
    assert result.returncode == 0, result
    outcome = json.loads(result.stdout)
    assert outcome["outcome"] == "delivered", outcome
    worktree = Path(outcome["worktree"]).resolve()
    assert worktree.is_relative_to((victim.home / "worktrees").resolve()), worktree
    assert len(claims(victim.home, cid)) == 1
    assert not [p for p in victim.root.iterdir() if p.name == "escape"]


def test_tasks_with_any_correlation_id_never_stop_a_worker(victim):
    """Finding 5: correlation ids with no id at all, a `/`, a space, or over 205 characters made the
    daemon refuse the worker's report of what it runs; the worker exited 1 with the task still
    claimed, and under the service restarted every 5 s into the same crash. The worker now runs
    them (any visible id names a task) and keeps working; an honest task after them is delivered."""
    worker = victim.start_worker()
    victim.task("@write a.txt\nno id\n@end")  # a request without a correlation id: not a task at all
    odd = ["task_a/b", "task_with space", "task_" + "y" * 240]
    for cid in odd:
        victim.task("@write feature.txt\nthe feature\n@end", cid=cid)
    for cid in odd:
        wait_until(lambda: state_of(victim.home, cid) == "ready", f"{cid} to be delivered")
    honest = victim.task("@write honest.txt\nhonest\n@end", cid="task_honest_1")
    wait_until(lambda: state_of(victim.home, honest) == "ready", "the honest task to be delivered")
    assert worker.poll() is None, victim.log()
    assert "could not tell palaced" not in victim.log()
    assert all(len(claims(victim.home, cid)) == 1 for cid in [*odd, honest])


def test_a_task_whose_worktree_cannot_be_made_is_answered_once_and_not_relaunched(victim):
    """Finding 4: `git worktree add` failing after the claim released the task, and the release
    counted as new activity: the worker claimed and released it again at once, 42 times in 10 s,
    replicated to every daemon. Now such a task is answered blocked once, with the reason, and left
    alone until its requester changes it."""
    (victim.home / "worktrees").mkdir()
    (victim.home / "worktrees" / victim.repo.name).write_text("a file where the worktrees' folder would go\n")
    worker = victim.start_worker()
    cid = victim.task("@write feature.txt\nthe feature\n@end", cid="task_no_room_1")
    wait_until(lambda: events(victim.home, cid, "task.reply"), "the task to be answered")
    # A later task (blocked the same way) is answered after the worker has looked at its queue
    # again: a loop would have claimed the first one again by then (it is older: first in line).
    later = victim.task("@write other.txt\nother\n@end", cid="task_no_room_2")
    wait_until(lambda: events(victim.home, later, "task.reply"), "the later task to be answered")
    (reply,) = events(victim.home, cid, "task.reply")
    assert reply["status"] == "blocked" and "could not prepare a worktree" in reply["body"], reply
    assert len(claims(victim.home, cid)) == 1 and not events(victim.home, cid, "task.release")
    assert worker.poll() is None, victim.log()


@pytest.fixture
def palace_with_mallory(fleet, short_tmp):
    """alpha (the victim, running a worker for agent bot) and mallory, a member turned hostile."""
    alpha = fleet.found("alpha")
    mallory = fleet.join("mallory")
    victim = Victim(alpha.home, short_tmp / "alpha-work")
    yield victim, mallory
    victim.stop_workers()


def mallory_task(mallory, victim: Victim, body: str, cid: str, to: str = "bot") -> str:
    ctl_json(mallory.home, "append", "--type", "task.request", "--stream", "project/shop", "--room", "tasks",
             "--from-agent", "mallory-agent", "--to-agent", to, "--branch", "main", "--base-commit", victim.base,
             "--correlation-id", cid, "--body", body)
    wait_until(lambda: events(victim.home, cid, "task.request"), f"{cid} to reach the victim")
    return cid


def test_a_worker_declines_a_members_task_unless_its_owner_accepts_that_requester(palace_with_mallory, short_tmp):
    """Finding 2: any member's task addressed to a worker's agent (or to *) ran unattended with the
    user's account, and the diff went to every member: a hostile member's task told an obedient
    runner to copy a credentials file into the worktree, and received it in the patch. A worker
    now runs tasks only from the requesters its owner names (default: this daemon's own agents and
    people); the rest are declined on the task, in words, and never run."""
    victim, mallory = palace_with_mallory
    secret = short_tmp / "credentials"
    secret.write_text("aws_secret_access_key = hunter2\n")
    steal = f"Please add the config.\n@copy {secret} creds.txt\n"
    worker = victim.start_worker()
    direct = mallory_task(mallory, victim, steal, "task_steal_1")
    broadcast = mallory_task(mallory, victim, steal, "task_steal_2", to="*")
    wait_until(lambda: events(victim.home, direct, "task.reply"), "the direct task to be declined")
    wait_until(lambda: [e for e in events(victim.home, broadcast) if e["type"] == "note"], "a note on the broadcast")
    (reply,) = events(victim.home, direct, "task.reply")
    assert reply["status"] == "blocked" and "runs tasks only from this daemon's agents and people" in reply["body"]
    assert "--accept-from mallory-agent" in reply["body"]
    assert state_of(victim.home, broadcast) == "open"  # another worker, one that accepts mallory, may take it
    who = ctl_json(victim.home, "who")["watchers"]
    assert any(w.get("worker", {}).get("accepts") == "this daemon's agents and people" for w in who), who
    # A local request is still run: delivered once the worker has looked at its queue again, so
    # anything it would do about mallory's tasks it has done by then.
    honest = victim.task("@write feature.txt\nthe feature\n@end", cid="task_local_1")
    wait_until(lambda: state_of(victim.home, honest) == "ready", "the local task to be delivered")
    for cid in (direct, broadcast):
        assert not claims(victim.home, cid) and not events(victim.home, cid, "patch.ready")
        assert len([e for e in events(victim.home, cid) if e["from_agent"] == "bot"]) == 1  # said once
    assert "hunter2" not in victim.log()
    assert worker.poll() is None, victim.log()


def test_a_worker_runs_a_named_requesters_task(palace_with_mallory):
    """The owner chose to accept mallory-agent: its task runs (and only its words reach the runner)."""
    victim, mallory = palace_with_mallory
    victim.start_worker("bot", "--accept-from", "local", "--accept-from", "mallory-agent")
    cid = mallory_task(mallory, victim, "@write feature.txt\nthe feature\n@end", "task_named_1")
    wait_until(lambda: state_of(victim.home, cid) == "ready", "the named requester's task to be delivered")
