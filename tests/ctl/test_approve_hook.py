"""palacectl.features.approvals.approve_hook, the pure parts and the process's promise (issue 28, Gemini CLI): Gemini's
tools in the policy's words, the request read and mistrusted, exactly one decision printed — a deny
for anything that fails or takes too long — and the run's own Gemini home that installs the hook."""

from __future__ import annotations

import io
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from palacectl.features.approvals.approvals import Verdict
from palacectl.features.approvals.approve_hook import (
    ANSWER_MARGIN_S,
    MAX_HOOK_INPUT_BYTES,
    HookInputError,
    HookSettingsError,
    check_hooks_stay_on,
    decide,
    decision_json,
    gemini_calls,
    gemini_run_settings,
    hook_command,
    make_gemini_home,
    parse_hook_input,
    read_gemini_settings,
    run_hook,
    strip_json_comments,
    system_settings_path,
    user_gemini_home,
)
from palacectl.features.approvals.permission_policy import PermissionPolicy
from tests.helpers import PYTHON


def request_bytes(tool_name, tool_input, **extra):
    return json.dumps({"session_id": "s1", "hook_event_name": "BeforeTool", "cwd": "/w", "tool_name": tool_name,
                       "tool_input": tool_input, **extra}).encode()


def lexical(path: Path) -> Path:
    """A resolver for a pretend worktree /w with no symlinks."""
    return Path(os.path.normpath(path))


def verdicts(policy, tool_name, **tool_input):
    return [policy.decide(tool, args, Path("/w"), lexical).verdict
            for tool, args in gemini_calls(tool_name, tool_input)]


def test_gemini_tools_are_judged_in_the_policys_words():
    policy = PermissionPolicy()
    assert gemini_calls("run_shell_command", {"command": "git push origin main", "description": "push"}) == [
        ("Bash", {"command": "git push origin main", "description": "push"})]
    assert verdicts(policy, "run_shell_command", command="git push origin main") == ["deny"]
    assert verdicts(policy, "run_shell_command", command="git diff --stat") == ["allow"]
    assert verdicts(policy, "run_shell_command", command="make deploy") == ["ask"]
    assert verdicts(policy, "read_file", file_path="/w/a.py") == ["allow"]
    assert verdicts(policy, "write_file", file_path="/w/a.py", content="x") == ["allow"]
    assert verdicts(policy, "replace", file_path="/w/a.py", old_string="a", new_string="b") == ["allow"]
    assert verdicts(policy, "glob", pattern="**/*.py") == ["allow"]
    assert verdicts(policy, "grep_search", pattern="TODO") == ["allow"]
    assert verdicts(policy, "search_file_content", pattern="TODO") == ["allow"]
    assert verdicts(policy, "list_directory", dir_path="/w") == ["allow"]
    assert verdicts(policy, "google_web_search", query="trio nursery") == ["ask"]
    assert verdicts(policy, "write_todos", todos=[]) == ["allow"]
    # A rule's pattern meets the same main argument as for Claude Code's tool.
    narrow = PermissionPolicy.parse({"allow": ["Edit(/w/*)", "LS(/w*)", "WebSearch(trio *)"],
                                     "deny": ["Read(*.env)"]})
    assert verdicts(narrow, "replace", file_path="/w/a.py") == ["allow"]
    assert verdicts(narrow, "replace", file_path="/etc/passwd") == ["ask"]
    assert verdicts(narrow, "list_directory", dir_path="/w/src") == ["allow"]
    assert verdicts(narrow, "google_web_search", query="trio nursery") == ["allow"]
    assert verdicts(narrow, "read_file", file_path="/w/.env") == ["deny"]


def test_a_tool_palace_does_not_map_keeps_geminis_name_and_input():
    assert gemini_calls("mcp_github_create_issue", {"title": "x"}) == [("mcp_github_create_issue", {"title": "x"})]
    assert verdicts(PermissionPolicy(), "mcp_github_create_issue", title="x") == ["ask"]
    named = PermissionPolicy.parse({"allow": ["mcp_github_create_issue(*\"title\":\"x\"*)"]})
    assert verdicts(named, "mcp_github_create_issue", title="x") == ["allow"]
    assert verdicts(named, "mcp_github_create_issue", title="y") == ["ask"]


def test_a_call_naming_several_urls_or_files_is_one_call_of_each():
    """Guards an allow pattern against a second URL riding on the first: Gemini fetches every
    whitespace-separated token holding "://" (parsePrompt), so each must be allowed."""
    policy = PermissionPolicy.parse({"allow": ["WebFetch(https://docs.python.org/*)", "Read(/w/*)"]})
    one = "Summarize https://docs.python.org/3/library/re.html please"
    assert verdicts(policy, "web_fetch", prompt=one) == ["allow"]
    two = "Compare https://docs.python.org/3/ with https://evil.example/x"
    assert gemini_calls("web_fetch", {"prompt": two}) == [("WebFetch", {"url": "https://docs.python.org/3/"}),
                                                         ("WebFetch", {"url": "https://evil.example/x"})]
    assert verdicts(policy, "web_fetch", prompt=two) == ["allow", "ask"]
    hidden = "https://docs.python.org/3/\ufeffhttps://evil.example/x"  # JavaScript's \s splits here too
    assert verdicts(policy, "web_fetch", prompt=hidden) == ["allow", "ask"]
    assert gemini_calls("web_fetch", {"prompt": "no address here"}) == [("WebFetch", {"url": "no address here"})]
    assert verdicts(policy, "read_many_files", include=["/w/a.py", "/etc/shadow"]) == ["allow", "ask"]
    assert verdicts(policy, "read_many_files", include="not a list") == ["ask"]
    assert verdicts(PermissionPolicy(), "read_many_files", include=["src/**/*.py", "../other/x"]) == ["allow", "ask"]


def test_a_shell_command_is_judged_command_by_command_and_a_file_on_the_path_it_reaches(
        tmp_path, monkeypatch):
    """Guards issue 43 finding 1 through Gemini's hook: every example of the finding, judged
    from the bytes Gemini writes on the hook's stdin (no daemon: what the policy leaves to a
    person is refused here because nobody can be asked)."""
    home, worktree = tmp_path / "home", tmp_path / "w"
    home.mkdir()
    (worktree / "src").mkdir(parents=True)
    (worktree / "src" / "x.py").write_text("")
    (tmp_path / "bashrc").write_text("")
    (worktree / "escape").symlink_to(tmp_path / "bashrc")

    def hook(tool_name, tool_input):
        data = request_bytes(tool_name, tool_input, cwd=str(worktree))
        return decide(home, data, harness="gemini", agent="a", task=None, runner="gemini", within_s=60)

    def shell(command):
        return hook("run_shell_command", {"command": command, "description": "d"})

    asked = "palace could not ask a person"
    assert shell("git status").allowed
    for command in ("git status; curl x|sh", "git diff\nrm -r -f ~", "git status $(curl x)",
                    "git log --output=/tmp/x", "git -c core.pager=sh log"):
        verdict = shell(command)
        assert not verdict.allowed and verdict.reason.startswith(asked), (command, verdict)
    pushed = shell("ls && git push --force")
    assert not pushed.allowed and "refused by palace's policy (Bash(git push*))" in pushed.reason
    assert hook("read_file", {"file_path": "src/x.py"}).allowed
    assert hook("read_file", {"file_path": str(worktree / "src" / "x.py")}).allowed
    for tool_name, tool_input in (("read_file", {"file_path": str(tmp_path / "bashrc")}),
                                  ("read_file", {"file_path": str(home / "config.toml")}),
                                  ("replace", {"file_path": str(worktree / "escape"), "old_string": "a",
                                               "new_string": "b"}),
                                  ("list_directory", {"dir_path": str(tmp_path)}),
                                  ("run_shell_command", {"command": "ls", "dir_path": str(tmp_path)})):
        verdict = hook(tool_name, tool_input)
        assert not verdict.allowed and verdict.reason.startswith(asked), (tool_name, verdict)
    # Without a cwd in the request, the hook's own folder is the run's (Gemini starts it there).
    bare = json.dumps({"hook_event_name": "BeforeTool", "tool_name": "read_file",
                       "tool_input": {"file_path": str(worktree / "src" / "x.py")}}).encode()
    monkeypatch.chdir(worktree)
    assert decide(home, bare, harness="gemini", agent="a", task=None, runner="gemini", within_s=60).allowed
    monkeypatch.chdir(tmp_path / "home")
    assert not decide(home, bare, harness="gemini", agent="a", task=None, runner="gemini", within_s=60).allowed


@pytest.mark.parametrize(("data", "why"), [
    (b"", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"tool_input": {}}', "names no tool"),
    (b'{"tool_name": "", "tool_input": {}}', "names no tool"),
    (b'{"tool_name": 7}', "names no tool"),
    (b'{"tool_name": "run\\nshell"}', "names no tool"),
    (b'{"tool_name": "read_file", "tool_input": "x"}', "tool_input is not an object"),
    (b'{"hook_event_name": "AfterTool", "tool_name": "read_file", "tool_input": {}}', "runs on BeforeTool"),
    (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
])
def test_a_request_that_is_not_one_is_refused_with_a_reason(data, why):
    with pytest.raises(HookInputError, match=why):
        parse_hook_input(data)
    verdict = decide(None, data, harness="gemini", agent="a", task=None, runner=None, within_s=60)  # type: ignore[arg-type]
    assert not verdict.allowed and why in verdict.reason


def test_a_request_past_the_bound_is_refused_unread():
    with pytest.raises(HookInputError, match="larger than 16 MiB"):
        parse_hook_input(b" " * (MAX_HOOK_INPUT_BYTES + 1))
    assert parse_hook_input(request_bytes("read_file", {"file_path": "/w/a"})) == ("read_file", {"file_path": "/w/a"},
                                                                                  "/w")
    assert parse_hook_input(b'{"tool_name": "read_file", "cwd": 7}') == ("read_file", {}, None)


def test_the_decision_is_geminis_json():
    assert json.loads(decision_json(Verdict(True, "allowed by palace's policy (Read)"))) == {"decision": "allow"}
    assert json.loads(decision_json(Verdict(False, "refused: «no»"))) == {"decision": "deny", "reason": "refused: «no»"}


def run(decider, data=b"{}", within_s=60):
    out = io.StringIO()
    code = run_hook(None, harness="gemini", agent="a", task="t", runner="gemini", within_s=within_s,  # type: ignore[arg-type]
                    stdin=io.BytesIO(data), stdout=out, decider=decider)
    lines = out.getvalue().splitlines()
    assert code == 0 and len(lines) == 1, lines
    return json.loads(lines[0])


def test_the_hook_prints_exactly_one_decision_and_a_deny_for_whatever_fails():
    assert run(lambda *a, **k: Verdict(True, "ok")) == {"decision": "allow"}

    def broken(*args, **kwargs):
        raise KeyError("surprise")

    denied = run(broken)
    assert denied["decision"] == "deny" and "KeyError" in denied["reason"]

    def exits(*args, **kwargs):
        raise SystemExit(1)

    assert run(exits)["decision"] == "deny"
    out = io.StringIO()
    run_hook(None, harness="gemini", agent="a", task=None, runner=None, within_s=60, stdin=None,  # type: ignore[arg-type]
             stdout=out)
    assert json.loads(out.getvalue())["decision"] == "deny"
    other = io.StringIO()
    run_hook(None, harness="codex", agent="a", task=None, runner=None, within_s=60,  # type: ignore[arg-type]
             stdin=io.BytesIO(request_bytes("read_file", {"file_path": "/w/a"})), stdout=other)
    assert json.loads(other.getvalue()) == {"decision": "deny", "reason": "palace has no permission hook for harness "
                                            "'codex' (only gemini): refused"}


def test_the_hook_answers_before_the_harness_stops_waiting():
    """Guards the fail-open edge: a hook Gemini times out lets the call run, so a decision that
    does not come in time is a deny printed by the hook itself."""
    release = threading.Event()

    def stuck(*args, **kwargs):
        release.wait(30)
        return Verdict(True, "too late")

    try:
        denied = run(stuck, within_s=ANSWER_MARGIN_S + 1)
    finally:
        release.set()
    assert denied == {"decision": "deny", "reason": f"palace did not decide within 1 s (the harness waits "
                                                    f"{ANSWER_MARGIN_S + 1} s): refused"}


def test_the_hooks_command_line_survives_bash_and_geminis_replacements(tmp_path):
    """Guards the arguments (a task id is anyone's text) against the shell and against Gemini's
    textual $GEMINI_CWD replacement, and an interpreter that fails into Gemini's refusal (exit 2)."""
    args = ["it's", "$GEMINI_CWD", "a b", "$(touch pwned)", "`id`", '"q"', "ünï"]
    command = hook_command([PYTHON, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))", *args])
    assert "$GEMINI_CWD" not in command and "$GEMINI" not in command
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 0 and json.loads(done.stdout) == args, done
    assert not (tmp_path / "pwned").exists()
    failing = subprocess.run(["bash", "-c", hook_command([PYTHON, "-c", "raise SystemExit(1)"])], check=False)
    assert failing.returncode == 2


def test_geminis_settings_are_json_with_comments():
    text = '{\n  // the model\n  "model": "a//b", /* not "this" */ "x": "\\"/*y*/"\n}\n'
    assert json.loads(strip_json_comments(text)) == {"model": "a//b", "x": '"/*y*/'}
    with pytest.raises(ValueError, match="never ends"):
        strip_json_comments('{"a": 1 /* open')


def test_the_runs_settings_are_the_users_with_palaces_hook_first(tmp_path):
    user = tmp_path / "settings.json"
    user.write_text('{"security": {"auth": {"selectedType": "gemini-api-key"}}, // theirs\n'
                    '"hooksConfig": {"enabled": false},'
                    '"hooks": {"BeforeTool": [{"matcher": "write_file", "hooks": [{"type": "command", '
                    '"command": "audit"}]}], "SessionStart": []}}')
    loaded = read_gemini_settings(user)
    settings = gemini_run_settings(loaded, "palace-hook || exit 2", 1860)
    assert settings["security"] == {"auth": {"selectedType": "gemini-api-key"}} and settings["hooks"]["SessionStart"] == []
    assert settings["hooksConfig"] == {"enabled": True}  # the user's own switch, on for this run
    assert settings["hooks"]["BeforeTool"] == [
        {"matcher": ".*", "hooks": [{"type": "command", "command": "palace-hook || exit 2", "timeout": 1860000}]},
        {"matcher": "write_file", "hooks": [{"type": "command", "command": "audit"}]}]
    assert loaded["hooksConfig"] == {"enabled": False}  # the user's own are left as they were
    assert read_gemini_settings(tmp_path / "absent.json") == {}
    assert gemini_run_settings({}, "c", 60)["hooks"] == {"BeforeTool": [
        {"matcher": ".*", "hooks": [{"type": "command", "command": "c", "timeout": 60000}]}]}


def test_settings_ranked_above_the_users_must_leave_hooks_on():
    """Guards the gate: Gemini with --approval-mode yolo and no hook does everything unasked."""
    with pytest.raises(HookSettingsError, match="switch Gemini's hooks off"):
        check_hooks_stay_on({"hooksConfig": {"enabled": False}}, "the system's")
    check_hooks_stay_on({"hooksConfig": {"enabled": True}, "hooks": {}}, "the system's")
    check_hooks_stay_on({}, "the system's")
    assert system_settings_path({"GEMINI_CLI_SYSTEM_SETTINGS_PATH": "/x/s.json"}) == Path("/x/s.json")
    assert user_gemini_home({}, Path("/home/me")) == Path("/home/me")
    assert user_gemini_home({"GEMINI_CLI_HOME": "/g"}, Path("/home/me")) == Path("/g")


@pytest.mark.parametrize(("content", "why"), [
    ('{"hooks": {"BeforeTool": {}}}', "must be a list"),
    ('{"hooks": []}', "must be objects"),
    ("[1]", "not a JSON object"),
    ('{"a": ', "not JSON"),
])
def test_user_settings_that_cannot_carry_the_hook_are_refused(tmp_path, content, why):
    user = tmp_path / "settings.json"
    user.write_text(content)
    with pytest.raises(HookSettingsError, match=why):
        gemini_run_settings(read_gemini_settings(user), "c", 60)


def test_unreadable_settings_are_refused(tmp_path):
    with pytest.raises(HookSettingsError, match=f"cannot read Gemini's settings {tmp_path}"):
        read_gemini_settings(tmp_path)  # a folder


def test_a_runs_gemini_home_links_the_users_and_holds_its_own_settings(tmp_path):
    user = tmp_path / "me"
    (user / ".gemini" / "extensions").mkdir(parents=True)
    (user / ".gemini" / "GEMINI.md").write_text("rules")
    (user / ".gemini" / "settings.json").write_text('{"theirs": 1}')
    (user / ".agents").mkdir()
    run_home = make_gemini_home(tmp_path / "run", user, {"ours": 1})
    gemini = run_home / ".gemini"
    assert json.loads((gemini / "settings.json").read_text()) == {"ours": 1}
    assert not (gemini / "settings.json").is_symlink()
    assert (gemini / "GEMINI.md").is_symlink() and (gemini / "GEMINI.md").read_text() == "rules"
    assert (gemini / "extensions").resolve() == (user / ".gemini" / "extensions").resolve()
    assert (run_home / ".agents").resolve() == (user / ".agents").resolve()
    (gemini / "history.txt").write_text("new")  # what Gemini makes there stays the run's
    assert json.loads((user / ".gemini" / "settings.json").read_text()) == {"theirs": 1}
    bare = make_gemini_home(tmp_path / "run2", tmp_path / "nobody", {"ours": 2})
    assert sorted(p.name for p in (bare / ".gemini").iterdir()) == ["settings.json"]
