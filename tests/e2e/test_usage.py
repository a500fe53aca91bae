"""What runs cost, against real daemons (issue 28, "Cost, counted and capped"): a launched run's
usage report becomes a signed usage.report on its task, `palacectl usage` sums the reports by
task, agent, machine, day or model on every replica alike, and this machine's [budgets] are
judged against them (exit 1 when one is over). A malformed report is refused in one line."""

from __future__ import annotations

import json

from tests.fleet import ctl_json, wait_converged
from tests.helpers import PYTHON, init_repo, run_ctl

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
    assert report(alpha.home, "a-bot", "task_a", cost_usd=0.5).returncode == 0
    assert report(beta.home, "b-bot", "task_b", tokens_in=100, model="m").returncode == 0
    wait_converged(alpha, beta)
    for daemon in (alpha, beta):
        code, by_agent = usage(daemon.home, "--by", "agent")
        assert code == 0
        assert [(t["key"], t["tokens_in"], t["cost_usd"], t["unpriced_runs"]) for t in by_agent["totals"]] == [
            ("a-bot", 10, 0.5, 0), ("b-bot", 100, None, 1)]
    bad = report(alpha.home, "a-bot", "task_a", tokens_in=-5)
    assert bad.returncode == 1 and "tokens_in" in bad.stderr and bad.stderr.count("\n") == 1
    unknown = report(alpha.home, "a-bot", "task_a", extra=1)
    assert unknown.returncode == 1 and "unknown field 'extra'" in unknown.stderr
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
    assert report(daemon.home, "bot", cid, cost_usd=0.75).returncode == 0  # an earlier run's cost
    launched = run_ctl(daemon.home, "task", "launch", cid, "--runner", "metered", "--workspace", str(repo))
    assert launched.returncode == 1 and not (repo / "feature.txt").exists(), launched
    [reply] = [e for e in ctl_json(daemon.home, "task", "show", cid)["events"] if e["type"] == "task.reply"]
    assert reply["status"] == "blocked" and "over its $0.50 budget" in reply["body"] and "$0.75" in reply["body"]
    config.write_text(config.read_text() + "[budgets.agents.bot]\nweekly_usd = 3\n", encoding="utf-8")
    refused = run_ctl(daemon.home, "task", "launch", cid, "--runner", "metered", "--workspace", str(repo))
    assert refused.returncode == 1 and "weekly_usd" in refused.stderr and refused.stderr.count("\n") == 1
