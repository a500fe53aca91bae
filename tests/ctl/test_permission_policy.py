"""``palacectl.permission_policy``: which of a launched run's tool calls palace allows, refuses,
or asks a person about, and how ``[permissions]`` is read (every mistake named in one line)."""

from __future__ import annotations

import pytest

from palacectl.permission_policy import PermissionPolicy, PolicyError, main_argument


def verdict(policy, tool, **tool_input):
    return policy.decide(tool, tool_input).verdict


def test_the_default_lets_a_run_read_and_edit_refuses_pushing_and_asks_the_rest():
    policy = PermissionPolicy()
    assert verdict(policy, "Edit", file_path="/w/src/a.py") == "allow"
    assert verdict(policy, "Read", file_path="/etc/hosts") == "allow"
    assert verdict(policy, "Bash", command="git diff --stat") == "allow"
    assert verdict(policy, "Bash", command="git push origin main") == "deny"
    assert verdict(policy, "Bash", command="cd build && rm -rf /") == "deny"
    assert verdict(policy, "Bash", command="sudo apt-get install x") == "deny"
    assert verdict(policy, "Bash", command="make deploy") == "ask"
    assert verdict(policy, "WebFetch", url="https://example.com") == "ask"
    assert verdict(policy, "mcp__other__tool", anything=1) == "ask"
    assert policy.ask_to == "human:*" and policy.timeout_s == 1800


def test_deny_rules_come_before_allow_rules_and_say_why():
    policy = PermissionPolicy.parse({"allow": ["Bash"], "deny": ["Bash(*--force*)"]})
    assert verdict(policy, "Bash", command="npm test") == "allow"
    decision = policy.decide("Bash", {"command": "git push --force"})
    assert decision.verdict == "deny" and decision.rule == "Bash(*--force*)"
    assert "refused by palace's policy (Bash(*--force*))" in decision.reason


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
