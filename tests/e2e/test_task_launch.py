"""`palacectl task launch` end to end: a real daemon, a real git repository, and stand-in runners
(scripts that behave like a harness: one edits a file, one fails, one changes nothing, one hangs)
— every refusal, the worktree per task, the bookkeeping, the patch applied on the requester's side."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fleet import api, ctl_json, wait_until
from tests.helpers import PYTHON, init_repo, run_ctl_process, run_git

pytestmark = pytest.mark.transport_fixed

EDITOR = """#!{python}
import pathlib, re, sys
args = sys.argv[1:]
assert args[:3] == ["--print", "--permission-mode", "acceptEdits"], args  # the documented headless call
prompt = args[-1]
cid = re.search(r"palace task (task_\\S+)", prompt).group(1)
pathlib.Path("feature.txt").write_text("done for " + cid + "\\n")
print("edited feature.txt for", cid)
"""
FAILER = "import sys\nprint('compiling...')\nprint('boom: the build broke at step 3', flush=True)\nsys.exit(1)\n"
NOOP = "print('nothing to do here')\n"
HANGER = "import time\nprint('working forever', flush=True)\ntime.sleep(600)\n"


def git(repo: Path, *args: str) -> str:
    return run_git(repo, *args, check=True).stdout


@pytest.fixture
def scene(daemon, short_tmp):
    repo = short_tmp / "shop"
    base = init_repo(repo)
    bin_dir = short_tmp / "bin"
    bin_dir.mkdir()
    claude = bin_dir / "claude"
    claude.write_text(EDITOR.format(python=sys.executable))
    claude.chmod(0o755)
    for name, body in (("fail", FAILER), ("noop", NOOP), ("hang", HANGER)):
        (bin_dir / f"{name}.py").write_text(body)
    (daemon.home / "config.toml").write_text(
        "".join(f'[runners.{n}]\ncommand = ["{PYTHON}", "{bin_dir / (n + ".py")}", "{{handoff}}"]\n'
                for n in ("fail", "noop", "hang")))
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    def task(to="worker", **flags):
        args = ["task", "create", "--project", "shop", "--from-agent", "boss", "--to-agent", to, "--goal",
                "Add feature.txt", "--branch", "main", "--base-commit", base, "--done", "feature.txt exists"]
        for k, v in flags.items():
            args += [f"--{k.replace('_', '-')}", v]
        return ctl_json(daemon.home, *args)["task"]["correlation_id"]

    def launch(cid, runner="claude", *extra, workspace=repo):
        return run_ctl_process(daemon.home, "task", "launch", cid, "--runner", runner, "--workspace", str(workspace),
                               *extra, env=env, timeout=120)

    class Scene:
        pass

    s = Scene()
    s.repo, s.base, s.home, s.task, s.launch, s.env = repo, base, daemon.home, task, launch, env
    return s


def events(home, cid, kind=None):
    found = api(home, "list", correlation_ids=[cid], limit=200)["events"]
    return [e for e in found if kind is None or e["type"] == kind]


def test_a_run_claims_reports_and_delivers_a_patch_that_applies_on_the_requesters_side(scene):
    cid = scene.task()
    result = scene.launch(cid, "claude", "--json")
    assert result.returncode == 0, result
    outcome = result.json()
    assert outcome["outcome"] == "delivered" and outcome["patch_event"] and outcome["log_artifact"]
    worktree = Path(outcome["worktree"])
    assert worktree != scene.repo and (worktree / "feature.txt").exists()
    assert git(worktree, "rev-parse", "HEAD").strip() == scene.base  # a fresh worktree at the base commit
    assert not (scene.repo / "feature.txt").exists()  # the workspace itself is untouched
    view = ctl_json(scene.home, "task", "show", cid)
    assert view["claimed_by"] == "worker" and view["state"] == "ready"
    status = events(scene.home, cid, "task.status")[0]
    assert status["metadata"]["runner"] == "claude" and status["metadata"]["pid"] > 0
    log = api(scene.home, "artifact_get", artifact_id=outcome["log_artifact"])
    assert log["kind"] == "log" and b"edited feature.txt for " + cid.encode() in log["content"]
    patch_event = events(scene.home, cid, "patch.ready")[0]
    # The run's log travels with the patch (a replica fetches every artifact an event names; a
    # log named only in the body was never sent: issue 26, first contact 2).
    assert patch_event["artifact_ids"][1:] == [outcome["log_artifact"]]
    assert outcome["log_artifact"] in patch_event["body"]
    patch = api(scene.home, "artifact_get", artifact_id=patch_event["artifact_ids"][0])["content"]
    # The requester applies it on its own checkout.
    subprocess.run(["git", "-C", str(scene.repo), "apply", "-"], input=patch, check=True)
    assert (scene.repo / "feature.txt").read_text() == f"done for {cid}\n"


@pytest.mark.parametrize(("runner", "outcome", "words"), [
    ("fail", "failed", "boom: the build broke at step 3"),
    ("noop", "blocked", "changed nothing"),
])
def test_a_failing_or_idle_run_replies_with_the_tail_of_its_log(scene, runner, outcome, words):
    cid = scene.task()
    result = scene.launch(cid, runner)
    assert result.returncode == 1 and result.stdout.startswith(f"{outcome}: {cid}")
    reply = events(scene.home, cid, "task.reply")[-1]
    assert reply["status"] == outcome and reply["to_agent"] == "boss"
    log_tail_words = "boom: the build broke at step 3" if runner == "fail" else "nothing to do here"
    assert log_tail_words in reply["body"] and words in reply["body"]
    assert ctl_json(scene.home, "task", "show", cid)["state"] == outcome


@pytest.mark.slow
def test_a_hanging_run_is_stopped_by_the_timeout_and_its_claim_never_looked_stalled(scene):
    cid = scene.task(stall_after="10s")
    started = time.monotonic()
    result = scene.launch(cid, "hang", "--timeout", "15s")
    assert result.returncode == 1 and time.monotonic() - started < 60
    reply = events(scene.home, cid, "task.reply")[-1]
    assert reply["status"] == "failed" and "timed out after 15 s" in reply["body"]
    assert len(events(scene.home, cid, "task.status")) >= 3  # the start, then heartbeats every 5 s
    assert events(scene.home, cid, "task.stalled") == []


# What `claude --print --output-format json` prints when a run ends in an error (a result object).
CLAUDE_FAILING = """#!{python}
import json, sys
print(json.dumps({{"type": "result", "subtype": "success", "is_error": True, "num_turns": 3,
                  "result": "I could not finish: the migration needs a database password I do not have.",
                  "total_cost_usd": 0.0123, "usage": {{"input_tokens": 10, "output_tokens": 20}}}}))
sys.exit(1)
"""


def test_a_failed_harness_run_replies_with_its_last_message_in_words_not_its_json(scene):
    """Issue 28: a built-in harness prints JSON (for its usage); the failed reply quotes what the
    run said, which a person can read, and leaves the JSON to the log artifact."""
    claude = Path(scene.env["PATH"].split(os.pathsep)[0]) / "claude"
    claude.write_text(CLAUDE_FAILING.format(python=sys.executable))
    cid = scene.task()
    result = scene.launch(cid)
    assert result.returncode == 1 and result.stdout.startswith(f"failed: {cid}"), result
    reply = events(scene.home, cid, "task.reply")[-1]
    assert reply["status"] == "failed"
    assert ("The run's last message:\nI could not finish: the migration needs a database password I do not have."
            in reply["body"]), reply["body"]
    assert "total_cost_usd" not in reply["body"]
    log = api(scene.home, "artifact_get", artifact_id=reply["artifact_ids"][0])["content"].decode()
    assert '"total_cost_usd": 0.0123' in log  # the whole output is kept



def test_sigterm_stops_the_runner_and_reports_blocked(scene):
    cid = scene.task()
    proc = subprocess.Popen([PYTHON, "-m", "palacectl", "--home", str(scene.home), "task", "launch", cid, "--runner",
                             "hang", "--workspace", str(scene.repo)], env={**os.environ, **scene.env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_until(lambda: events(scene.home, cid, "task.status"), "the run to start")
    pid = events(scene.home, cid, "task.status")[0]["metadata"]["pid"]
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, (out, err)
    assert out.startswith(b"blocked: " + cid.encode()) and b"Traceback" not in err
    reply = events(scene.home, cid, "task.reply")[-1]
    assert reply["status"] == "blocked" and "stopped by SIGTERM" in reply["body"]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the runner is gone too


def test_every_refusal_is_one_line_and_starts_nothing(scene, short_tmp):
    mine = scene.task()
    broadcast = scene.task(to="*")
    (short_tmp / "plain").mkdir()
    cases = [
        (("task_nope_1", "claude"), {}, "not found"),
        ((broadcast, "claude"), {}, "is a broadcast: say which agent runs it with --agent"),
        ((mine, "claude", "--agent", "someone-else"), {}, "addressed to worker, not someone-else"),
        ((mine, "claude"), {"workspace": short_tmp / "plain"}, "is not a git repository"),
        ((mine, "nosuch"), {}, "unknown runner 'nosuch'"),
        ((mine, "claude", "--in-place"), {}, None),  # placeholder: replaced below (branch mismatch)
    ]
    git(scene.repo, "checkout", "-q", "-b", "elsewhere")
    cases[-1] = ((mine, "claude", "--in-place"), {}, "is on branch elsewhere, the task is for main")
    for args, kwargs, message in cases:
        result = scene.launch(*args, **kwargs)
        assert result.returncode == 1 and message in result.stderr and result.stderr.count("\n") == 1, (args, result)
    git(scene.repo, "checkout", "-q", "main")
    config = scene.home / "config.toml"
    kept = config.read_text() if config.exists() else None
    config.write_text(kept + '\n[permissions]\nalow = ["Read"]\n' if kept else '[permissions]\nalow = ["Read"]\n')
    bad_policy = scene.launch(mine)
    assert bad_policy.returncode == 1 and "[permissions] has no key 'alow'" in bad_policy.stderr, bad_policy
    assert bad_policy.stderr.count("\n") == 1
    if kept is None:
        config.unlink()
    else:
        config.write_text(kept)
    (scene.repo / "README.md").write_text("dirty\n")
    dirty = scene.launch(mine)
    assert dirty.returncode == 1 and "uncommitted changes" in dirty.stderr
    git(scene.repo, "checkout", "-q", "README.md")
    other = short_tmp / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    missing_base = scene.launch(mine, workspace=other)
    assert missing_base.returncode == 1 and f"base commit {scene.base}" in missing_base.stderr
    ctl_json(scene.home, "task", "claim", mine, "--agent", "worker")
    ctl_json(scene.home, "task", "release", mine, "--agent", "worker")
    ctl_json(scene.home, "task", "reassign", mine, "--to-agent", "other-worker")
    taken = scene.task()
    ctl_json(scene.home, "task", "claim", taken, "--agent", "worker")
    ctl_json(scene.home, "task", "release", taken, "--agent", "worker")
    ctl_json(scene.home, "task", "reassign", taken, "--to-agent", "*")
    ctl_json(scene.home, "task", "claim", taken, "--agent", "rival")
    claimed = scene.launch(taken, "claude", "--agent", "worker")
    assert claimed.returncode == 1 and "already claimed by rival" in claimed.stderr
    # Nothing was started by any refusal: no run events, no worktree.
    for cid in (broadcast, taken):
        assert events(scene.home, cid, "task.status") == []
    assert not (scene.home / "worktrees").exists() or not any((scene.home / "worktrees").rglob("task_*"))


# A stand-in Gemini CLI: reports what `task launch` gave it — its Gemini home, the settings there,
# and what the BeforeTool hook named in them answers, run as Gemini runs it (bash -c, in the
# worktree, an environment of PATH alone) — then edits a file.
GEMINI = """#!{python}
import json, os, pathlib, subprocess, sys
args = sys.argv[1:]
assert args[:3] == ["--approval-mode", "yolo", "--skip-trust"], args
home = os.environ.get("GEMINI_CLI_HOME")
report = {{"home": home}}
if home:
    gemini = pathlib.Path(home, ".gemini")
    settings = json.loads((gemini / "settings.json").read_text())
    hook = settings["hooks"]["BeforeTool"][0]
    report.update(settings=settings, linked=sorted(p.name for p in gemini.iterdir() if p.is_symlink()))
    for command in ("git push origin main", "git status"):
        request = {{"hook_event_name": "BeforeTool", "cwd": os.getcwd(), "tool_name": "run_shell_command",
                   "tool_input": {{"command": command}}}}
        done = subprocess.run(["bash", "-c", hook["hooks"][0]["command"]], input=json.dumps(request), text=True,
                              capture_output=True, env={{"PATH": os.environ["PATH"]}})
        report[command] = [done.returncode, done.stdout, done.stderr]
pathlib.Path("feature.txt").write_text("done\\n")
print("REPORT " + json.dumps(report))
"""


def gemini_report(scene, outcome):
    log = api(scene.home, "artifact_get", artifact_id=outcome["log_artifact"])["content"].decode()
    return json.loads(next(line for line in log.splitlines() if line.startswith("REPORT "))[len("REPORT "):])


def test_a_gemini_run_gets_a_gemini_home_of_its_own_whose_hook_answers_by_palaces_policy(scene, short_tmp):
    """Guards the built-in gemini runner's gate (issue 28): yolo is safe only with palace's hook in
    the settings Gemini reads. Gemini skips a system settings file that root does not own, so the
    hook goes into the user settings of a Gemini home of the run's own (GEMINI_CLI_HOME): the
    user's settings and files, plus the hook. A runner of the user's own gets none, and settings
    that switch hooks off refuse the launch before anything starts."""
    (Path(scene.env["PATH"].split(os.pathsep)[0]) / "gemini").write_text(GEMINI.format(python=sys.executable))
    (Path(scene.env["PATH"].split(os.pathsep)[0]) / "gemini").chmod(0o755)
    me = short_tmp / "me"
    (me / ".gemini" / "extensions").mkdir(parents=True)
    (me / ".gemini" / "GEMINI.md").write_text("palace rules\n")
    theirs = ('{"model": {"name": "theirs"}, // a comment\n'
              '"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "palacectl session start"}]}]}}')
    (me / ".gemini" / "settings.json").write_text(theirs)
    env = {**scene.env, "HOME": str(me), "GEMINI_CLI_SYSTEM_SETTINGS_PATH": str(short_tmp / "no-system.json")}
    cid = scene.task()
    result = run_ctl_process(scene.home, "task", "launch", cid, "--runner", "gemini", "--workspace", str(scene.repo),
                             "--json", env=env, timeout=120)
    assert result.returncode == 0 and result.json()["outcome"] == "delivered", result
    report = gemini_report(scene, result.json())
    home = Path(report["home"])
    assert home.parent == Path(result.json()["worktree"]).parent and not home.exists()  # beside the log; removed
    assert report["linked"] == ["GEMINI.md", "extensions"]
    settings = report["settings"]
    assert settings["model"] == {"name": "theirs"} and settings["hooksConfig"] == {"enabled": True}
    assert settings["hooks"]["SessionStart"][0]["hooks"][0]["command"] == "palacectl session start"
    [ours] = settings["hooks"]["BeforeTool"]
    assert ours["matcher"] == ".*" and ours["hooks"][0]["timeout"] == (1800 + 60) * 1000
    assert f"--task {cid}" in ours["hooks"][0]["command"] and ours["hooks"][0]["command"].endswith(" || exit 2")
    code, out, err = report["git push origin main"]
    assert code == 0 and json.loads(out)["decision"] == "deny", (out, err)
    assert "refused by palace's policy (Bash(git push*))" in json.loads(out)["reason"]
    code, out, err = report["git status"]
    assert code == 0 and json.loads(out) == {"decision": "allow"}, (out, err)
    assert (me / ".gemini" / "settings.json").read_text() == theirs  # the user's own file is as it was

    # A runner of the user's own (any command but the built-in one) is started as written.
    config = scene.home / "config.toml"
    config.write_text(config.read_text() + '[runners.gemini]\ncommand = ["gemini", "--approval-mode", "yolo", '
                                           '"--skip-trust", "--prompt", "{handoff}"]\n')
    own = scene.task()
    mine = run_ctl_process(scene.home, "task", "launch", own, "--runner", "gemini", "--workspace", str(scene.repo),
                           "--json", env=env, timeout=120)
    assert mine.returncode == 0 and gemini_report(scene, mine.json()) == {"home": None}, mine

    # Settings ranked above the user's that switch hooks off: refused, nothing started.
    config.write_text(config.read_text().split("[runners.gemini]")[0])
    (short_tmp / "system.json").write_text('{"hooksConfig": {"enabled": false}}')
    refused_cid = scene.task()
    refused = run_ctl_process(scene.home, "task", "launch", refused_cid, "--runner", "gemini", "--workspace",
                              str(scene.repo), env={**env, "GEMINI_CLI_SYSTEM_SETTINGS_PATH": str(short_tmp / "system.json")},
                              timeout=120)
    assert refused.returncode == 1 and "switch Gemini's hooks off" in refused.stderr, refused
    assert refused.stderr.count("\n") == 1
    (scene.repo / ".gemini").mkdir()
    (scene.repo / ".gemini" / "settings.json").write_text('{"hooksConfig": {"enabled": false}}\n')
    git(scene.repo, "add", ".gemini")
    git(scene.repo, "commit", "-q", "-m", "project settings")
    project_base = git(scene.repo, "rev-parse", "HEAD").strip()
    project_cid = ctl_json(scene.home, "task", "create", "--project", "shop", "--from-agent", "boss", "--to-agent",
                           "worker", "--goal", "Add feature.txt", "--branch", "main", "--base-commit", project_base,
                           "--done", "feature.txt exists")["task"]["correlation_id"]
    project = run_ctl_process(scene.home, "task", "launch", project_cid, "--runner", "gemini", "--workspace",
                              str(scene.repo), env=env, timeout=120)
    assert project.returncode == 1 and f".gemini/settings.json of {project_base[:12]} switch" in project.stderr, project
    for cid_ in (refused_cid, project_cid):
        assert events(scene.home, cid_, "task.status") == [] and ctl_json(scene.home, "task", "show", cid_)["state"] == "open"
