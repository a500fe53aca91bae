"""What runs cost, against real daemons (issue 28, "Cost, counted and capped"): a launched run's
usage report becomes a signed usage.report on its task, `palacectl usage` sums the reports by
task, agent, machine, day or model on every replica alike, and this machine's [budgets] are
judged against them (exit 1 when one is over). A malformed report is refused in one line. Only
the reports of a task's claimant count (issue 43 §1, finding 3): a member's forged ones are held,
flagged and summed nowhere, and stop no worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from palace_proto.canonical import canonical_json
from palace_proto.envelope import GENESIS_HASH
from palace_proto.usage import MAX_COST_USD, MAX_TOKENS
from tests.fleet import api, ctl_json, listen_address, wait_converged, wait_until
from tests.helpers import PYTHON, init_repo, run_ctl
from tests.hostile_peer import HostilePeer, issue_member, sealed

RUNNER = """import pathlib, sys
pathlib.Path("feature.txt").write_text("done\\n")
print("working on it")
print("palace-usage: tokens_in=1200 tokens_out=300 cost_usd=0.042 model=test-model")
"""


def usage(home, *args):
    result = run_ctl(home, "usage", *args, "--json")
    return result.returncode, json.loads(result.stdout)


def report(home, agent, task, **fields):
    metadata = {"runner": "custom", "tokens_in": 10, "tokens_out": 5, "task_id": task, "machine": "m1", **fields}
    return run_ctl(home, "append", "--type", "usage.report", "--stream", "s", "--room", "r", "--from-agent", agent,
                   "--correlation-id", task, "--metadata", json.dumps(metadata), "--body", "usage")


def claimed_task(home, agent, goal="Count the runs"):
    """A new task to ``agent`` (from this daemon's own requester), claimed by it: a usage report
    counts only from its task's claimant."""
    cid = ctl_json(home, "task", "create", "--project", "shop", "--from-agent", f"boss-{home.name}", "--to-agent", agent,
                   "--goal", goal, "--branch", "main", "--base-commit", "a" * 40, "--done", "counted")[
        "task"]["correlation_id"]
    ctl_json(home, "task", "claim", cid, "--agent", agent)
    return cid


def test_a_launched_runs_usage_is_recorded_summed_and_judged_against_budgets(daemon, short_tmp):
    repo = short_tmp / "shop"
    base = init_repo(repo)
    script = short_tmp / "metered.py"
    script.write_text(RUNNER)
    (daemon.home / "config.toml").write_text(
        f'[runners.metered]\ncommand = ["{PYTHON}", "{script}", "{{handoff}}"]\n'
        '[budgets]\ntask_tokens = 1000\nagent_daily_usd = 1.0\n', encoding="utf-8")
    cid = ctl_json(daemon.home, "task", "create", "--project", "shop", "--from-agent", "boss", "--to-agent", "bot",
                   "--goal", "Add feature.txt", "--branch", "main", "--base-commit", base, "--done", "it exists")[
        "task"]["correlation_id"]
    launched = run_ctl(daemon.home, "task", "launch", cid, "--runner", "metered", "--workspace", str(repo))
    assert launched.returncode == 0, launched
    [event] = [e for e in ctl_json(daemon.home, "task", "show", cid)["events"] if e["type"] == "usage.report"]
    assert event["from_agent"] == "bot" and event["metadata"]["tokens_in"] == 1200
    assert event["metadata"]["cost_usd"] == 0.042 and event["metadata"]["model"] == "test-model"
    code, by_task = usage(daemon.home, "--by", "task")
    assert code == 1  # the task's 1,500 tokens are over its 1,000
    [total] = by_task["totals"]
    assert (total["key"], total["runs"], total["tokens_in"], total["tokens_out"], total["cost_usd"]) == (
        cid, 1, 1200, 300, 0.042)
    states = {(b["budget"], b["subject"]): b["state"] for b in by_task["budgets"]}
    assert states[("task_tokens", cid)] == "over" and states[("agent_daily_usd", "bot")] == "ok"
    shown = run_ctl(daemon.home, "usage", "--by", "model")
    assert shown.returncode == 1 and "test-model\t1\t1200\t300\t$0.04" in shown.stdout
    assert "budget over:" in shown.stdout


def test_usage_is_the_same_on_every_replica_and_a_bad_report_is_refused(fleet):
    alpha = fleet.found("alpha")
    beta = fleet.join("beta")
    task_a, task_b = claimed_task(alpha.home, "a-bot"), claimed_task(beta.home, "b-bot")
    assert report(alpha.home, "a-bot", task_a, cost_usd=0.5).returncode == 0
    assert report(beta.home, "b-bot", task_b, tokens_in=100, model="m").returncode == 0
    wait_converged(alpha, beta)
    for daemon in (alpha, beta):
        code, by_agent = usage(daemon.home, "--by", "agent")
        assert code == 0
        assert [(t["key"], t["tokens_in"], t["cost_usd"], t["unpriced_runs"]) for t in by_agent["totals"]] == [
            ("a-bot", 10, 0.5, 0), ("b-bot", 100, None, 1)]
        assert by_agent["flagged"] == 0 and by_agent["capped"] is False
    bad = report(alpha.home, "a-bot", task_a, tokens_in=-5)
    assert bad.returncode == 1 and "tokens_in" in bad.stderr and bad.stderr.count("\n") == 1
    unknown = report(alpha.home, "a-bot", task_a, extra=1)
    assert unknown.returncode == 1 and "unknown field 'extra'" in unknown.stderr
    not_mine = report(alpha.home, "a-bot", task_b)  # a-bot never claimed task_b: refused where it is written
    assert not_mine.returncode == 1 and "usage.report is for an agent that has claimed the task" in not_mine.stderr
    wrong_by = run_ctl(alpha.home, "usage", "--by", "colour")
    assert wrong_by.returncode == 1 and "by must be one of task, agent, machine, day, model" in wrong_by.stderr
    (alpha.home / "config.toml").write_text("[budgets]\ntask_euros = 3\n", encoding="utf-8")
    bad_budget = run_ctl(alpha.home, "usage")
    assert bad_budget.returncode == 1 and "task_euros" in bad_budget.stderr and bad_budget.stderr.count("\n") == 1


def test_a_task_over_its_budget_from_earlier_runs_is_not_run_again(daemon, short_tmp):
    repo = short_tmp / "shop"
    base = init_repo(repo)
    script = short_tmp / "metered.py"
    script.write_text(RUNNER)
    config = daemon.home / "config.toml"
    config.write_text(f'[runners.metered]\ncommand = ["{PYTHON}", "{script}", "{{handoff}}"]\n'
                      '[budgets]\ntask_usd = 0.5\n', encoding="utf-8")
    cid = ctl_json(daemon.home, "task", "create", "--project", "shop", "--from-agent", "boss", "--to-agent", "bot",
                   "--goal", "Add feature.txt", "--branch", "main", "--base-commit", base, "--done", "it exists")[
        "task"]["correlation_id"]
    ctl_json(daemon.home, "task", "claim", cid, "--agent", "bot")
    assert report(daemon.home, "bot", cid, cost_usd=0.75).returncode == 0  # an earlier run's cost
    launched = run_ctl(daemon.home, "task", "launch", cid, "--runner", "metered", "--workspace", str(repo))
    assert launched.returncode == 1 and not (repo / "feature.txt").exists(), launched
    [reply] = [e for e in ctl_json(daemon.home, "task", "show", cid)["events"] if e["type"] == "task.reply"]
    assert reply["status"] == "blocked" and "over its $0.50 budget" in reply["body"] and "$0.75" in reply["body"]
    config.write_text(config.read_text() + "[budgets.agents.bot]\nweekly_usd = 3\n", encoding="utf-8")
    refused = run_ctl(daemon.home, "task", "launch", cid, "--runner", "metered", "--workspace", str(repo))
    assert refused.returncode == 1 and "weekly_usd" in refused.stderr and refused.stderr.count("\n") == 1


def forged_report(mallory, seq, prev, task, named=None):
    """A usage.report mallory's own (modified) daemon signs as its own agent, with the largest
    figures a report may carry: what would put any palace over its budgets if it counted."""
    metadata = {"runner": "custom", "tokens_in": MAX_TOKENS, "tokens_out": MAX_TOKENS, "cost_usd": MAX_COST_USD,
                "model": "forged", "task_id": named or task, "machine": "mallory-box"}
    return sealed(mallory.key, mallory.origin, seq=seq, prev=prev, type="usage.report", stream="usage", room="runs",
                  from_agent="mallory", correlation_id=task, metadata_json=canonical_json(metadata), body="usage")


@pytest.mark.transport_fixed
async def test_a_forged_usage_report_counts_nowhere_and_stops_no_worker(fleet, short_tmp):
    """Issue 43 §1, finding 3: any member could write one usage.report, as its own agent, for an
    invented task with the largest figures, and the victim's palace budget went over: its worker
    claimed nothing more for the month. Mallory, an enrolled member, pushes one such report for an
    invented task and one for a real task it never claimed. Every replica holds both (they store
    every validly signed event) and counts neither: the totals are the claimant's alone, `flagged`
    says 2, and a worker under a palace monthly budget still claims and runs a task."""
    alpha, beta = fleet.found("alpha"), fleet.join("beta")
    real = ctl_json(alpha.home, "task", "create", "--project", "shop", "--from-agent", "boss", "--to-agent", "bob",
                    "--goal", "Fix the parser", "--branch", "main", "--base-commit", "a" * 40, "--done", "fixed")[
        "task"]["correlation_id"]
    wait_converged(alpha, beta)
    ctl_json(beta.home, "task", "claim", real, "--agent", "bob")  # bob runs on beta
    assert report(beta.home, "bob", real, tokens_in=1200, tokens_out=300, cost_usd=0.042).returncode == 0
    wait_converged(alpha, beta)
    mallory = issue_member(alpha.home, short_tmp / "creds", "mallory")
    invented = forged_report(mallory, 1, GENESIS_HASH, "task_mallory_invented_0001")
    on_real = forged_report(mallory, 2, invented.event_hash, real)
    peer = await HostilePeer.connect(listen_address(alpha.home), mallory, (alpha.home / "palace" / "ca.crt").read_bytes(),
                                     palace_id=ctl_json(alpha.home, "status")["palace"]["palace_id"],
                                     source_host="127.0.0.66")
    try:
        await peer.handshake()
        await peer.push(invented, on_real)
        await peer.drain(1.0)
    finally:
        await peer.aclose()
    wait_converged(alpha, beta)
    for daemon in (alpha, beta):
        held = api(daemon.home, "list", types=["usage.report"], limit=10)["events"]
        assert {e["id"] for e in held} >= {invented.id, on_real.id}, held  # stored and relayed
        code, by_task = usage(daemon.home, "--by", "task")
        assert [(t["key"], t["runs"], t["tokens_in"], t["cost_usd"]) for t in by_task["totals"]] == [
            (real, 1, 1200, 0.042)], by_task
        assert code == 0 and by_task["flagged"] == 2, by_task
        for by in ("agent", "machine", "model", "day"):
            assert [t["runs"] for t in usage(daemon.home, "--by", by)[1]["totals"]] == [1], by
        said = run_ctl(daemon.home, "usage")
        assert "2 usage report(s) held here count nowhere" in said.stdout, said
    # A worker on alpha under a palace monthly budget still claims: its budget is not over.
    repo = short_tmp / "shop"
    base = init_repo(repo)
    script = short_tmp / "metered.py"
    script.write_text(RUNNER)
    (alpha.home / "config.toml").write_text(
        f'[runners.metered]\ncommand = ["{PYTHON}", "{script}", "{{handoff}}"]\n'
        '[budgets]\npalace_monthly_usd = 1.0\n', encoding="utf-8")
    code, judged = usage(alpha.home)
    assert code == 0 and [(b["budget"], b["state"]) for b in judged["budgets"]] == [("palace_monthly_usd", "ok")]
    env = {**os.environ}
    env.pop("PALACE_HOME", None)
    log = short_tmp / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen([PYTHON, "-m", "palacectl", "--home", str(alpha.home), "worker", "--agent", "bot",
                                   "--runner", "metered", "--workspace", str(repo)],
                                  env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
    try:
        cid = ctl_json(alpha.home, "task", "create", "--project", "shop", "--from-agent", "boss", "--to-agent", "bot",
                       "--goal", "Add feature.txt", "--branch", "main", "--base-commit", base, "--done", "it exists")[
            "task"]["correlation_id"]
        wait_until(lambda: ctl_json(alpha.home, "task", "show", cid)["state"] == "ready", "the worker to deliver",
                   timeout=60)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    assert "claims nothing" not in log.read_text(errors="replace")
    code, after = usage(alpha.home, "--by", "task")
    assert after["flagged"] == 2 and sorted(t["key"] for t in after["totals"]) == sorted([real, cid])
