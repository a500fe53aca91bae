"""`palacectl approve-hook`, Gemini CLI's BeforeTool hook of a launched run (issue 28), as the real
process Gemini starts — its command line as `task launch` writes it, run by bash in the worktree —
against a real daemon: the policy refuses and allows on its own, the rest is a question on the
task (marked an approval) that the hook waits on, a person's answer is the decision, and a daemon
that is not there is a refusal, never a yes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from palacectl.approve_hook import hook_command
from tests.fleet import ctl_json, wait_until
from tests.helpers import PYTHON, run_ctl

AGENT = "linux-gemini"


def hook(home: Path, worktree: Path, task: str, tool_name: str, tool_input: dict, *, within: int = 120) -> \
        subprocess.Popen[str]:
    """The hook as Gemini runs it: its command line through bash, in the worktree, the request on stdin."""
    command = hook_command([PYTHON, "-P", "-m", "palacectl", "--home", str(home), "approve-hook", "--harness",
                            "gemini", "--agent", AGENT, "--task", task, "--runner", "gemini", "--within", str(within)])
    proc = subprocess.Popen(["bash", "-c", command], cwd=worktree, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"session_id": "s1", "transcript_path": "/t", "cwd": str(worktree),
                                 "hook_event_name": "BeforeTool", "timestamp": "2026-08-07T10:00:00Z",
                                 "tool_name": tool_name, "tool_input": tool_input}))
    proc.stdin.close()
    proc.stdin = None  # written and closed: communicate() reads the rest
    return proc


def decision(proc: subprocess.Popen[str]) -> dict:
    """The one decision the hook printed (exit 0, one line of JSON)."""
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and len(out.splitlines()) == 1, (proc.returncode, out, err)
    return json.loads(out)


def shell(home: Path, worktree: Path, task: str, command: str) -> subprocess.Popen[str]:
    return hook(home, worktree, task, "run_shell_command", {"command": command, "description": "a command"})


def test_the_gemini_hook_decides_by_policy_or_waits_for_a_person_and_refuses_without_a_daemon(daemon, short_tmp):
    home = daemon.home
    (home / "config.toml").write_text('[permissions]\nask_to = "human:ana"\n[permissions.gemini]\ntimeout = 60\n',
                                      encoding="utf-8")
    task = ctl_json(home, "task", "create", "--project", "rig", "--from-agent", "boss", "--to-agent", AGENT, "--goal",
                    "Deploy", "--branch", "main", "--base-commit", "a" * 40, "--done", "deployed")["task"]["correlation_id"]
    worktree = short_tmp / "worktree"
    # What the run could write in its worktree, where Gemini starts the hook: a `palacectl` of its
    # own that allows everything (-P on the hook's command line keeps it from being imported).
    (worktree / "palacectl").mkdir(parents=True)
    (worktree / "palacectl" / "__init__.py").write_text("")
    (worktree / "palacectl" / "__main__.py").write_text('print(\'{"decision": "allow"}\')\n')

    push = decision(shell(home, worktree, task, "git push origin main"))
    assert push["decision"] == "deny" and "refused by palace's policy (Bash(git push*))" in push["reason"], push
    assert decision(hook(home, worktree, task, "read_file", {"file_path": str(worktree / "a.py")})) == {
        "decision": "allow"}
    assert decision(hook(home, worktree, task, "update_topic", {"title": "Deploying"})) == {"decision": "allow"}

    deploy = shell(home, worktree, task, "make deploy")
    [question] = wait_until(lambda: ctl_json(home, "questions", "--status", "open")["questions"],
                            "the hook's question to show")
    assert question["to"] == "human:ana" and question["correlation_id"] == task
    assert question["question"] == f"{AGENT} asks to run Bash: make deploy\n(task {task})\nallow or deny?"
    assert question["approval"] == {"tool": "Bash", "argument": "make deploy"} and question["choices"] == ["allow",
                                                                                                         "deny"]
    waiting = ctl_json(home, "task", "show", task)
    assert waiting["waiting_for_approval"] is True and waiting["waiting_for_person"] is True, waiting
    assert deploy.poll() is None  # the hook waits on the person
    assert run_ctl(home, "answer", question["question_id"], "allow", "--as", "human:ana").returncode == 0
    assert decision(deploy) == {"decision": "allow"}

    drop = shell(home, worktree, task, "psql -c 'drop table orders'")
    [asked] = wait_until(lambda: ctl_json(home, "questions", "--status", "open")["questions"], "the second question")
    assert run_ctl(home, "answer", asked["question_id"], "deny", "--as", "human:ana").returncode == 0
    refused = decision(drop)
    assert refused["decision"] == "deny" and refused["reason"].startswith("human:ana said no"), refused

    # The harness's limit on the hook is shorter than the policy's timeout: the question is too,
    # and silence is a refusal the hook prints itself, in time.
    quiet = decision(hook(home, worktree, task, "run_shell_command", {"command": "make release"}, within=27))
    assert quiet["decision"] == "deny" and "nobody answered within 2 s" in quiet["reason"], quiet

    assert daemon.stop() == 0
    gone = decision(shell(home, worktree, task, "make deploy"))
    assert gone["decision"] == "deny" and gone["reason"].startswith("palace could not ask a person (palaced is not "
                                                                    "running"), gone
    # What the policy settles needs no daemon.
    assert decision(hook(home, worktree, task, "read_file", {"file_path": "/w/a.py"})) == {"decision": "allow"}
    garbage = subprocess.run(["bash", "-c", hook_command([PYTHON, "-P", "-m", "palacectl", "--home", str(home),
                                                          "approve-hook", "--harness", "gemini", "--agent", AGENT])],
                             input="{not json", capture_output=True, text=True, cwd=worktree, check=False)
    assert garbage.returncode == 0 and json.loads(garbage.stdout)["decision"] == "deny", garbage
