"""palacectl.hooks and `palacectl rules --hooks`: palace's session-start hook goes into a harness's
settings beside the hooks already there, once however often it is installed, and comes out
leaving them as they were; a settings file palace cannot read safely is left alone."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from palacectl.hooks import HOOK_HARNESSES, HooksError, hook_command, hook_output, install_hooks, remove_hooks
from tests.helpers import run_ctl_process

THEIRS = {
    "model": "opus",
    "hooks": {
        "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "echo hello"}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./check.sh"}]}],
    },
}


def command(harness: str = "claude", agent: str = "mac-claude") -> str:
    return hook_command(["/opt/palace bin/palacectl"], Path("/home/me/.palace"), agent, harness)


@pytest.mark.parametrize("harness", sorted(HOOK_HARNESSES))
def test_the_hook_goes_in_beside_other_hooks_once_and_comes_out_leaving_them(tmp_path, harness):
    spec = HOOK_HARNESSES[harness]
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(THEIRS, indent=4))
    path.chmod(0o640)
    assert install_hooks(spec, path, command(harness)) == "installed"
    data = json.loads(path.read_text())
    assert data["model"] == "opus" and data["hooks"]["PreToolUse"] == THEIRS["hooks"]["PreToolUse"]
    groups = data["hooks"]["SessionStart"]
    assert groups[0] == THEIRS["hooks"]["SessionStart"][0] and groups[1]["matcher"] == spec.matcher
    hook = groups[1]["hooks"][0]
    assert hook["command"] == command(harness) and hook["timeout"] == (20_000 if spec.timeout_ms else 20)
    assert ("name" in hook) == spec.named
    before = path.read_bytes()
    assert install_hooks(spec, path, command(harness)) == "unchanged" and path.read_bytes() == before
    assert install_hooks(spec, path, command(harness, "other-agent")) == "updated"
    assert len(json.loads(path.read_text())["hooks"]["SessionStart"]) == 2  # replaced, not added
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # the file keeps its mode
    assert remove_hooks(spec, path) == "removed"
    assert json.loads(path.read_text()) == THEIRS
    assert remove_hooks(spec, path) == "absent"


def test_a_new_settings_file_is_made_and_emptied_again(tmp_path):
    spec = HOOK_HARNESSES["claude"]
    path = tmp_path / "deep" / "settings.json"
    assert install_hooks(spec, path, command()) == "installed"
    assert remove_hooks(spec, path) == "removed"
    assert json.loads(path.read_text()) == {}
    assert remove_hooks(spec, tmp_path / "none.json") == "absent"


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"hooks": []}', '{"hooks": {"SessionStart": {}}}'])
def test_a_settings_file_palace_cannot_read_safely_is_left_alone(tmp_path, content):
    path = tmp_path / "settings.json"
    path.write_text(content)
    with pytest.raises(HooksError, match=r"nothing was written|Nothing was written"):
        install_hooks(HOOK_HARNESSES["claude"], path, command())
    assert path.read_text() == content


def test_a_symlinked_settings_file_is_edited_where_it_lives(tmp_path):
    real = tmp_path / "dotfiles" / "settings.json"
    real.parent.mkdir()
    real.write_text("{}")
    link = tmp_path / "settings.json"
    link.symlink_to(real)
    install_hooks(HOOK_HARNESSES["claude"], link, command())
    assert link.is_symlink() and "SessionStart" in json.loads(real.read_text())["hooks"]


def test_the_command_is_quoted_for_a_shell_and_the_output_is_the_documented_json():
    assert command() == "'/opt/palace bin/palacectl' --home /home/me/.palace session start --agent mac-claude " \
                        "--hook claude"
    assert json.loads(hook_output("gemini", "ctx")) == {
        "hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "ctx"}}


def test_rules_hooks_installs_rules_and_hook_and_remove_hooks_keeps_the_rules(tmp_path, home):
    env = {**os.environ, "HOME": str(tmp_path)}
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(THEIRS))
    for _ in range(2):
        result = run_ctl_process(home, "rules", "--agent", "mac-claude", "--harness", "claude", "--hooks", env=env)
        assert result.returncode == 0, result
    groups = json.loads(settings.read_text())["hooks"]["SessionStart"]
    assert len(groups) == 2 and "session start --agent mac-claude --hook claude" in groups[1]["hooks"][0]["command"]
    assert "palace-shared-brain:start" in (tmp_path / ".claude" / "CLAUDE.md").read_text()
    removed = run_ctl_process(home, "rules", "--agent", "mac-claude", "--harness", "claude", "--remove-hooks", env=env)
    assert removed.returncode == 0 and json.loads(settings.read_text()) == THEIRS
    assert (tmp_path / ".claude" / "CLAUDE.md").exists()
    for args, code, words in ((["--hooks"], 64, "--harness"), (["--harness", "opencode", "--hooks"], 1, "no session-start hook"),
                              (["--harness", "claude", "--hooks", "--remove-hooks"], 64, "not both")):
        result = run_ctl_process(home, "rules", "--agent", "mac-claude", *args, env=env)
        assert result.returncode == code and words in result.stderr and result.stderr.count("\n") == 1, result


@pytest.mark.parametrize("content, why", [
    ('{\n  "n": 1e400\n}\n', "1e400 is out of range"),
    ('{\n  "a": 1,\n  "a": 2\n}\n', "appears twice"),
    ('{\n  "n": NaN\n}\n', "NaN is not JSON"),
    ('{\n  "s": "\\ud800"\n}\n', "laid out"),
    ('{\n      "model": "opus"\n}\n', "laid out"),
    ('{\n  "n": 1E5\n}\n', "laid out"),
])
def test_a_settings_file_palace_could_not_write_back_unchanged_is_refused_and_kept(tmp_path, content, why):
    """Guards issue 25 finding 10: `rules --hooks` once turned 1e400 into Infinity, dropped a
    duplicate key and crashed on a lone surrogate. Everything outside palace's entry stays byte
    for byte, or nothing is written."""
    path = tmp_path / "settings.json"
    path.write_text(content)
    with pytest.raises(HooksError, match=why):
        install_hooks(HOOK_HARNESSES["claude"], path, command())
    assert path.read_text() == content


@pytest.mark.parametrize("layout", [{"indent": 2}, {"indent": 4}, {"indent": "\t"}, {},
                                    {"separators": (",", ":")}])
def test_other_entries_stay_byte_for_byte_whatever_the_usual_layout(tmp_path, layout):
    path = tmp_path / "settings.json"
    theirs = {**THEIRS, "price": 1.5, "name": "café ✓", "escaped": "a\"b\\c"}
    original = json.dumps(theirs, ensure_ascii=False, **layout)
    path.write_text(original)
    install_hooks(HOOK_HARNESSES["claude"], path, command())
    assert remove_hooks(HOOK_HARNESSES["claude"], path) == "removed"
    assert path.read_text() == original


def test_installing_the_codex_hook_says_codex_must_trust_it(tmp_path):
    """Guards issue 26: Codex skips an untrusted hook without a word, so installing it says how
    to trust it (once: nothing changed, nothing to say)."""
    home = tmp_path / "palace"
    env = {**os.environ, "HOME": str(tmp_path)}
    first = run_ctl_process(home, "rules", "--agent", "win-codex", "--harness", "codex", "--hooks", env=env)
    assert first.returncode == 0, first
    assert "Codex runs it only once you trust it" in first.stderr
    assert "session start --agent win-codex --hook codex" in (tmp_path / ".codex" / "hooks.json").read_text()
    again = run_ctl_process(home, "rules", "--agent", "win-codex", "--harness", "codex", "--hooks", env=env)
    assert again.returncode == 0 and "trust" not in again.stderr
