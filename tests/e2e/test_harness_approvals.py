"""A launched run asks palace for permission (issue 28), through the real harness driven by a
scripted model — Claude Code through palace's approve tool (--permission-prompt-tool), Gemini CLI
through palace's BeforeTool hook (`palacectl approve-hook`, in the run's own settings file): a
command the policy refuses is refused with palace's reason, the model sees it and goes on; a
command the policy does not cover becomes a question to a person on the task, the run waits, and
once the person allows it the command runs in the same run and its work reaches the requester as
a patch."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path

import pytest

from tests.fleet import api, ctl_json
from tests.harness_rig.install import harnesses  # noqa: F401 - the fixture
from tests.harness_rig.launchers import HARNESSES, Rig, User
from tests.harness_rig.script import Call, Script
from tests.helpers import init_repo, run_ctl

pytestmark = [pytest.mark.slow, pytest.mark.transport_fixed]

README = Path(__file__).resolve().parents[2] / "README.md"
RECORD = "python3 -c \"open('approved.txt', 'w').write('approved\\n')\""
#: each harness's shell tool, and what a call of it carries besides the command
SHELL: dict[str, tuple[str, dict[str, str]]] = {"claude": ("Bash", {"description": "a command"}),
                                                "gemini": ("run_shell_command", {"description": "a command"})}


@pytest.fixture
def user(harnesses, daemon_factory, short_tmp) -> User:
    root = short_tmp / "user"
    root.mkdir()
    return User(root, daemon_factory(root / ".palace").home, harnesses, README)


def answer_when_asked(home: Path, cid: str, text: str, seen: list[dict]) -> threading.Thread:
    """A person who answers the first open question on task ``cid`` (from another thread: the
    run waits on the question meanwhile)."""
    def person() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            open_ = [q for q in ctl_json(home, "questions", "--status", "open")["questions"] if q["correlation_id"] == cid]
            if open_:
                seen.append(open_[0])
                seen.append(ctl_json(home, "task", "show", cid))  # as the person's daemon shows the task
                run_ctl(home, "answer", open_[0]["question_id"], text, "--as", "human:ana")
                return
            time.sleep(0.2)

    thread = threading.Thread(target=person, daemon=True)
    return thread


@pytest.mark.parametrize("harness", sorted(SHELL))
def test_a_launched_run_is_refused_by_policy_and_waits_for_a_persons_allow_from_another_daemon(
        harness, user, daemon_factory, short_tmp):
    """The run's machine (the user's daemon) joined a palace whose owner's daemon (alpha) holds
    human:ana: the question replicates there, ana answers there, the answer comes back."""
    alpha = daemon_factory(short_tmp / "alpha")
    ctl_json(alpha.home, "init", "--palace-name", "rig", "--daemon-name", "alpha")
    ctl_json(user.home, "join", ctl_json(alpha.home, "invite", "--role", "member")["code"], "--name", "laptop")
    agent, _, _ = user.configure(harness)
    shell, extra = SHELL[harness]
    (user.home / "config.toml").write_text('[permissions]\nask_to = "human:ana"\ntimeout = "2m"\n', encoding="utf-8")
    repo = short_tmp / "repo"
    base = init_repo(repo)
    cid = ctl_json(user.home, "task", "create", "--project", "rig", "--from-agent", "boss", "--to-agent", agent,
                   "--goal", "Record that the deploy was approved", "--branch", "main", "--base-commit", base,
                   "--done", "approved.txt exists")["task"]["correlation_id"]
    asked: list[dict] = []
    person = answer_when_asked(alpha.home, cid, "allow", asked)
    script = Script([
        Call((shell,), {"command": "git push origin main", **extra}, label="push"),
        # Not a plain file write (those the default policy allows without asking anyone).
        Call((shell,), {"command": RECORD, **extra}, label="record", on_issue=person.start),
    ], final="approved.txt is written.", id_prefix=HARNESSES[harness].id_prefix)
    rig = Rig(HARNESSES[harness], script, user.root, user.env, repo, short_tmp)
    try:
        rig.start([user.palacectl, "--home", str(user.home), "task", "launch", cid, "--runner", harness,
                   "--workspace", str(repo), "--timeout", "150s", "--json"])
        code = rig.wait(180)
        push, record = [*rig.script.outcomes, None, None][:2]
        report = rig.report()
        assert push is not None and push.answered_at is not None, report
        assert "refused by palace's policy (Bash(git push*))" in str(push.raw), report
        assert record is not None and record.answered_at is not None, report
        assert asked and f"asks to run Bash: {RECORD}" in asked[0]["question"], asked
        task_while_waiting = asked[1]
        assert task_while_waiting["waiting_for_person"] is True and task_while_waiting["state"] == "claimed"
        assert task_while_waiting["waiting_for_approval"] is True, task_while_waiting
        approval = asked[0]["approval"]  # the whole request, bound by its sha256 (issue 43)
        assert (approval["tool"], approval["argument"]) == ("Bash", RECORD), asked
        assert json.loads(approval["input"])["tool_input"]["command"] == RECORD, asked
        assert approval["input_sha256"] == hashlib.sha256(approval["input"].encode()).hexdigest(), asked
        assert task_while_waiting["questions"][0]["question_id"] == asked[0]["question_id"]
        assert code == 0, report
        patches = [e for e in api(user.home, "list", correlation_ids=[cid], limit=100)["events"]
                   if e["type"] == "patch.ready"]
        assert patches, report
        patch = api(user.home, "artifact_get", artifact_id=patches[0]["artifact_ids"][0])["content"].decode()
        assert "approved.txt" in patch and "+approved" in patch
        # Its JSON result carried the run's usage (what the scripted model server reported).
        [spent] = [e for e in api(user.home, "list", correlation_ids=[cid], limit=100)["events"]
                   if e["type"] == "usage.report"]
        assert spent["metadata"]["runner"] == harness and spent["metadata"]["tokens_in"] > 0, spent
        [state] = [q for q in ctl_json(user.home, "questions")["questions"] if q["correlation_id"] == cid]
        refused_here = run_ctl(user.home, "answer", state["question_id"], "deny", "--as", "human:ana")
        assert refused_here.returncode == 1  # answered already; and not ana's daemon
        assert state["status"] == "answered" and state["answer"] == {**state["answer"], "by": "human:ana",
                                                                       "text": "allow"}
    finally:
        rig.close()
