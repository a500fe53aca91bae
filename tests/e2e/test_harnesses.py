"""Real harnesses, not our reading of their docs: Claude Code, Gemini CLI, Codex and OpenCode
installed from the npm registry into a temporary prefix. Claude Code and Gemini CLI are configured
exactly as the README says (the MCP server, the rules, the session-start hook), then asked
themselves: `mcp list` must report palace connected, and starting a session must run palace's
hook (seen by the daemon: the agent's inbox was listed). All four are asked for their own help,
which must name every option (and option value) `palacectl task launch` passes them.

The harnesses run in a network namespace of their own with loopback only (`unshare -n`): their
update checks and telemetry, and Gemini's model call, fail there instead of leaving the machine;
palaced is reached over its Unix socket, which needs no network. Skipped, with the reason, where
npm or unshare is missing or the registry cannot be reached.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import apsw
import pytest

from palacectl.features.worker.launch import BUILTIN_RUNNERS, PLACEHOLDERS, RUN_MCP_SERVER
from tests.fleet import append, ctl_json, wait_until
from tests.harness_rig.install import QUIET, harnesses  # noqa: F401 - the install fixture, shared with the rig
from tests.helpers import PYTHON, run_ctl_process

pytestmark = [pytest.mark.slow, pytest.mark.transport_fixed]

def palacectl_words() -> list[str]:
    """palacectl as the README has harnesses start it: the console script beside this Python."""
    script = Path(PYTHON).parent / "palacectl"
    return [str(script)] if script.exists() else [PYTHON, "-m", "palacectl"]


def offline(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in a new network namespace with only loopback up."""
    inner = "ip link set lo up 2>/dev/null; exec \"$@\""
    return subprocess.run(["unshare", "-n", "sh", "-c", inner, "sh", *argv], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def listed_seq(home: Path, agent: str) -> int:
    """How far the daemon has listed the agent's inbox (what `session start` does), read-only."""
    conn = apsw.Connection(str(home / "palace.sqlite3"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        row = conn.execute("SELECT listed_seq FROM inbox_cursors WHERE agent=?", (agent,)).fetchone()
        return row[0] if row else 0
    finally:
        conn.close()


def test_claude_code_and_gemini_cli_connect_to_palace_and_run_its_session_hook(harnesses, daemon_factory, short_tmp):
    user = short_tmp / "user"
    project = short_tmp / "project"
    user.mkdir()
    project.mkdir()
    home = daemon_factory(user / ".palace").home  # the default home: the README's commands name none
    env = {k: v for k, v in os.environ.items() if k != "PALACE_HOME"}
    env.update(HOME=str(user), **QUIET)
    env["PATH"] = f"{harnesses}{os.pathsep}{Path(PYTHON).parent}{os.pathsep}{env['PATH']}"
    palacectl = palacectl_words()

    # -- Claude Code, as the README says ------------------------------------------------------
    added = offline(["claude", "mcp", "add", "--scope", "user", "palace", "--", *palacectl, "mcp", "--agent",
                     "mac-claude"], env, project)
    assert added.returncode == 0, added
    rules = run_ctl_process(home, "rules", "--agent", "mac-claude", "--harness", "claude", "--tools", "mcp",
                            "--hooks", env=env)
    assert rules.returncode == 0, rules
    listed = offline(["claude", "mcp", "list"], env, project)
    assert "palace:" in listed.stdout and "Connected" in listed.stdout, listed
    mail = append(home, "for claude", from_agent="boss", to_agent="mac-claude")
    assert listed_seq(home, "mac-claude") < mail["seq"]
    started = offline(["claude", "-p", "hello"], env, project)  # not logged in: it stops after the hooks
    assert listed_seq(home, "mac-claude") >= mail["seq"], (started, "palace's SessionStart hook did not run")

    # -- Gemini CLI, as the README says (its folder trust included) ----------------------------
    settings = user / ".gemini" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"mcpServers": {"palace": {
        "command": palacectl[0], "args": [*palacectl[1:], "mcp", "--agent", "linux-gemini"], "timeout": 310000,
        "trust": True}}, "privacy": {"usageStatisticsEnabled": False}}))
    untrusted = offline(["gemini", "mcp", "list"], env, project)
    assert "Disabled" in untrusted.stdout + untrusted.stderr, untrusted  # what the README warns about
    (user / ".gemini" / "trustedFolders.json").write_text(json.dumps({str(project): "TRUST_FOLDER"}))
    rules = run_ctl_process(home, "rules", "--agent", "linux-gemini", "--harness", "gemini", "--tools", "mcp",
                            "--hooks", env=env)
    assert rules.returncode == 0, rules
    # Where Gemini CLI reads its instructions (~/.gemini/config/ is the Antigravity IDE's: issue 26).
    assert "palace-shared-brain:start" in (user / ".gemini" / "GEMINI.md").read_text()
    listed = offline(["gemini", "mcp", "list"], env, project)
    said = listed.stdout + listed.stderr  # Gemini CLI writes its listing to stderr
    assert "palace" in said and "Connected" in said, listed
    mail = append(home, "for gemini", from_agent="boss", to_agent="linux-gemini")
    # Gemini runs its session hooks once it has credentials; its model call then retries offline
    # for minutes, so it is stopped once the hook has been seen.
    inner = "ip link set lo up 2>/dev/null; exec \"$@\""
    gemini = subprocess.Popen(["unshare", "-n", "sh", "-c", inner, "sh", "gemini", "-p", "hello"],
                              env={**env, "GEMINI_API_KEY": "offline-test-key"}, cwd=project, start_new_session=True,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: listed_seq(home, "linux-gemini") >= mail["seq"], "palace's Gemini SessionStart hook to run",
                   timeout=90)
    finally:
        os.killpg(gemini.pid, signal.SIGKILL)
        gemini.wait()
    assert ctl_json(home, "inbox", "--agent", "linux-gemini")["unread"] == 1  # listed, not marked read


#: how each harness prints the help of the command palace's runner uses
RUNNER_HELP = {"claude": ["claude", "--help"], "codex": ["codex", "exec", "--help"], "gemini": ["gemini", "--help"],
               "opencode": ["opencode", "run", "--help"]}


#: options a harness accepts but leaves out of its --help, each run for real by another test (a
#: rename fails there): Claude Code hides --permission-prompt-tool; tests/e2e/test_harness_approvals.py
#: runs the installed release with it, and its permission requests reach palace's approve tool.
HIDDEN_BUT_RUN: dict[str, set[str]] = {"claude": {"--permission-prompt-tool"}}


def test_task_launch_runners_pass_only_what_each_installed_harness_documents(harnesses, short_tmp):
    """Guards the built-in runners (palacectl.features.worker.launch.BUILTIN_RUNNERS) against a harness renaming an
    option: each one's own --help, from the release npm has today, names every word palace passes."""
    assert set(RUNNER_HELP) == set(BUILTIN_RUNNERS)
    env = {**{k: v for k, v in os.environ.items() if k != "PALACE_HOME"}, "HOME": str(short_tmp), **QUIET}
    env["PATH"] = f"{harnesses}{os.pathsep}{env['PATH']}"
    for name, argv in BUILTIN_RUNNERS.items():
        shown = offline(RUNNER_HELP[name], env, short_tmp)
        assert shown.returncode == 0, shown
        text = shown.stdout + shown.stderr
        # Palace's own values are not the harness's words: the placeholders it fills in, and the
        # name of its approve tool as Claude Code addresses it.
        ours = {*PLACEHOLDERS, f"mcp__{RUN_MCP_SERVER}__approve"}
        for word in argv[1:]:
            if word in HIDDEN_BUT_RUN.get(name, ()):
                continue
            if word not in ours:
                assert word in text, f"`{' '.join(RUNNER_HELP[name])}` does not mention {word!r}: {text[:3000]}"
