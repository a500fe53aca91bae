"""The task queue end to end on real daemons: ready work in order, blockers, claims refused locally,
release and reassign, a stall told once, and two claims across a partition healing to one claimant
with exactly one conflict event for the other."""

from __future__ import annotations

import time

import pytest

from tests.fleet import api, ctl_json, wait_converged, wait_until
from tests.helpers import run_ctl

BASE = "0123abc"


def create(home, goal, *, to="bob", frm="alice", **flags):
    args = ["task", "create", "--project", "shop", "--from-agent", frm, "--to-agent", to, "--goal", goal,
            "--branch", "main", "--base-commit", BASE, "--done", "tests pass", "--json"]
    for name, value in flags.items():
        values = value if isinstance(value, list) else [value]
        for v in values:
            args += ["--" + name.replace("_", "-"), str(v)]
    result = run_ctl(home, *args)
    assert result.returncode == 0, result
    return result.json()["task"]


def ready(home, agent):
    return [t["correlation_id"] for t in ctl_json(home, "task", "ready", "--agent", agent)["tasks"]]


def notices(home, kind, agent):
    return api(home, "list", types=[kind], to_agents=[agent], limit=50)["events"]


def test_ready_work_comes_urgent_first_and_blocked_tasks_wait_for_their_blockers(ctl, daemon):
    home = daemon.home
    base = create(home, "schema migration", priority=1)
    later = create(home, "use the new schema", blocked_by=base["correlation_id"], priority=0)
    low = create(home, "polish docs", priority=3)
    anyone = create(home, "triage the flaky test", to="*")
    assert ready(home, "bob") == [base["correlation_id"], anyone["correlation_id"], low["correlation_id"]]
    assert ready(home, "alice") == []  # her own requests are not work for her
    shown = ctl_json(home, "task", "show", later["correlation_id"])
    assert shown["blocked_by"] == [base["correlation_id"]] and shown["waiting_on"] == [base["correlation_id"]]
    blocked = run_ctl(home, "task", "claim", later["correlation_id"], "--agent", "bob")
    assert blocked.returncode == 1 and f"is blocked by {base['correlation_id']}" in blocked.stderr

    ctl_json(home, "task", "claim", base["correlation_id"], "--agent", "bob")
    assert base["correlation_id"] not in ready(home, "bob")
    ctl_json(home, "ack", base["id"], "--from-agent", "alice", "--status", "applied")
    assert ready(home, "bob")[0] == later["correlation_id"]  # priority 0, unblocked now
    unknown = run_ctl(home, "task", "create", "--project", "shop", "--from-agent", "a", "--to-agent", "b", "--goal", "g",
                      "--branch", "main", "--base-commit", BASE, "--done", "d", "--blocked-by", "task_nope_1")
    assert unknown.returncode == 1 and "unknown task 'task_nope_1'" in unknown.stderr
    bad = run_ctl(home, "task", "create", "--project", "shop", "--from-agent", "a", "--to-agent", "b", "--goal", "g",
                  "--branch", "main", "--base-commit", BASE, "--done", "d", "--priority", "7")
    assert bad.returncode == 1 and "priority must be an integer from 0 (urgent) to 3 (low)" in bad.stderr


def test_claims_are_refused_locally_when_taken_closed_or_not_yours_and_release_reassign_reopen(ctl, daemon):
    home = daemon.home
    task = create(home, "fix the login bug")
    cid = task["correlation_id"]
    assert ctl_json(home, "task", "claim", cid, "--agent", "bob")["already"] is False
    assert ctl_json(home, "task", "claim", cid, "--agent", "bob")["already"] is True  # idempotent
    taken = run_ctl(home, "task", "claim", cid, "--agent", "carol")
    assert taken.returncode == 1 and "already claimed by bob" in taken.stderr
    # A claim by plain ack is a claim too: same rule.
    by_ack = run_ctl(home, "ack", task["id"], "--from-agent", "carol", "--status", "claimed")
    assert by_ack.returncode == 1 and "already claimed by bob" in by_ack.stderr
    not_yours = run_ctl(home, "task", "release", cid, "--agent", "carol")
    assert not_yours.returncode == 1 and "only its claimant" in not_yours.stderr

    ctl_json(home, "task", "release", cid, "--agent", "bob", "--reason", "out of time")
    assert ctl_json(home, "task", "show", cid)["state"] == "open"
    addressed = run_ctl(home, "task", "claim", cid, "--agent", "carol")
    assert addressed.returncode == 1 and "addressed to bob" in addressed.stderr
    assert run_ctl(home, "task", "reassign", cid, "--to-agent", "carol", "--agent", "bob").returncode == 1
    ctl_json(home, "task", "reassign", cid, "--to-agent", "carol")
    assert ready(home, "carol") == [cid]
    ctl_json(home, "task", "claim", cid, "--agent", "carol")
    ctl_json(home, "ack", task["id"], "--from-agent", "alice", "--status", "superseded")
    closed = run_ctl(home, "task", "claim", cid, "--agent", "carol")
    assert closed.returncode == 1 and "is closed (superseded)" in closed.stderr
    view = ctl_json(home, "task", "show", cid)
    assert view["claims"] == ["bob", "carol"] and view["conflicts"] == []


@pytest.mark.slow
def test_a_stalled_task_is_listed_noted_in_status_and_its_requester_told_once(ctl, daemon):
    """Guards the stall notice: told once per stall, not once per look of the reconciler (a look
    after the first notice is shown by the notice of a second task, claimed only then)."""
    home = daemon.home
    task = create(home, "long job", stall_after="10s")
    cid = task["correlation_id"]
    ctl_json(home, "task", "claim", cid, "--agent", "bob")
    assert ctl_json(home, "task", "list", "--stalled")["count"] == 0
    told = wait_until(lambda: notices(home, "task.stalled", "alice"), "alice to be told of the stall", timeout=45)
    assert len(told) == 1 and told[0]["correlation_id"] == cid and "bob claimed it" in told[0]["body"]
    assert [t["correlation_id"] for t in ctl_json(home, "task", "list", "--stalled")["tasks"]] == [cid]
    status = run_ctl(home, "status", "--json").json()
    assert status["tasks"]["stalled"] == 1 and status["tasks"]["stalled_ids"] == [cid]
    later = create(home, "later job", stall_after="10s")["correlation_id"]
    ctl_json(home, "task", "claim", later, "--agent", "bob")
    wait_until(lambda: [n for n in notices(home, "task.stalled", "alice") if n["correlation_id"] == later],
               "alice to be told of the second stall", timeout=45)
    # The look that told of it found the first task still stalled: once per stall, not once per look.
    assert [n["correlation_id"] for n in notices(home, "task.stalled", "alice")].count(cid) == 1
    ctl_json(home, "append", "--type", "task.reply", "--stream", "project/shop", "--room", "delegation",
             "--from-agent", "bob", "--correlation-id", cid, "--body", "still on it")
    assert ctl_json(home, "task", "show", cid)["state"] == "claimed"


def test_two_claims_across_a_partition_heal_to_the_first_and_one_conflict_for_the_other(fleet):
    a, b, c = fleet.ends_through_middle()
    task = create(a.home, "one job, two takers", to="*")
    wait_converged(a, b, c)
    with fleet.partitioned(b):
        ctl_json(a.home, "task", "claim", task["correlation_id"], "--agent", "alice-worker")
        time.sleep(0.01)
        ctl_json(c.home, "task", "claim", task["correlation_id"], "--agent", "gamma-worker")
    for d in (a, b, c):
        wait_until(lambda d=d: ctl_json(d.home, "task", "show", task["correlation_id"])["conflicts"],
                   f"{d.home.name} to see both claims")
    wait_until(lambda: notices(c.home, "task.conflict", "gamma-worker"), "gamma-worker to be told")
    wait_converged(a, b, c)
    for d in (a, b, c):
        view = ctl_json(d.home, "task", "show", task["correlation_id"])
        assert (view["claimed_by"], [x["agent"] for x in view["conflicts"]]) == ("alice-worker", ["gamma-worker"])
        told = notices(d.home, "task.conflict", "gamma-worker")
        assert len(told) == 1 and "claimed by alice-worker" in told[0]["body"], d.home
        assert notices(d.home, "task.conflict", "alice-worker") == []
    human = run_ctl(c.home, "task", "show", task["correlation_id"])
    assert "double claim: gamma-worker claimed too" in human.stdout


def test_the_configured_stall_time_is_every_tasks_default(daemon_factory, short_tmp):
    home = short_tmp / "home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text('[tasks]\nstall_after = "45m"\n')
    daemon = daemon_factory(home)
    default = create(daemon.home, "uses the default")
    own = create(daemon.home, "names its own", stall_after="2h")
    assert ctl_json(home, "task", "show", default["correlation_id"])["stall_after_s"] == 45 * 60
    assert ctl_json(home, "task", "show", own["correlation_id"])["stall_after_s"] == 2 * 3600


def test_tasks_blocked_on_invented_ids_stay_out_of_ready_and_the_rest_come_out_right(ctl, daemon):
    """Guards issue 25 finding 10: a member's raw task.requests, each blocked on 32 invented task
    ids (the CLI refuses unknown blockers; an event appended or pushed does not), wait forever
    and cost ``task ready`` a few queries in all, while real blockers still decide the rest."""
    home = daemon.home
    for n in range(40):
        api(home, "append", type="task.request", stream="project/shop", room="delegation", from_agent="mallory",
            to_agent="*", correlation_id=f"task_hostile_{n}", body="do it",
            metadata={"blocked_by": [f"task_invented_{n}_{k}" for k in range(32)]})
    done = create(home, "done already")
    ctl_json(home, "ack", done["id"], "--from-agent", "alice", "--status", "applied")
    open_one = create(home, "still open", to="carol")
    after_done = create(home, "after the done one", blocked_by=done["correlation_id"])
    after_open = create(home, "after the open one", blocked_by=open_one["correlation_id"])
    ready_now = ready(home, "bob")
    assert after_done["correlation_id"] in ready_now and after_open["correlation_id"] not in ready_now
    assert not [cid for cid in ready_now if cid.startswith("task_hostile_")]
    shown = ctl_json(home, "task", "show", "task_hostile_3")
    assert len(shown["waiting_on"]) == 32
