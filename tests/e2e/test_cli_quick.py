"""The agent loop's commands without typer (palacectl/loop.py) against the full command line.

Guards issue 26's shortcut: every command line the quick parser takes must give what typer's
gives — the same stdout, stderr and exit code, errors included — and anything it does not fully
understand must go to typer. Each case runs as two real processes against one real palaced:
``run_quick`` alone (failing if it would fall back) and ``palacectl.cli.main``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from palacectl.loop import run_quick
from tests.fleet import ctl_json
from tests.helpers import PYTHON, append_event

QUICK = "import sys; from palacectl.loop import run_quick; rc = run_quick(sys.argv[1:]); sys.exit(99 if rc is None else rc)"
FULL = "import sys; from palacectl.cli import main; sys.exit(main())"
# What differs between two appends of the same event: its id, time and sequence numbers.
_VOLATILE = re.compile(r"evt_\d{8}T\d{6}_[0-9a-f]+|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z|"
                       r"\"(seq|origin_seq)\": \d+")


def run(code: str, home: Path, args: list[str], stdin: str = "") -> tuple[int, str, str]:
    done = subprocess.run([PYTHON, "-c", code, "--home", str(home), *args], capture_output=True, text=True,
                          input=stdin, timeout=60)
    return done.returncode, _VOLATILE.sub("<v>", done.stdout), _VOLATILE.sub("<v>", done.stderr)


def both(home: Path, args: list[str]) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    quick = run(QUICK, home, args)
    assert quick[0] != 99, f"the quick parser gave {args} to typer"
    return quick, run(FULL, home, args)


@pytest.fixture
def loop_home(daemon, ctl) -> Path:
    home = daemon.home
    for body in ("first", "second"):
        append_event(ctl, type="note", stream="project/x", room="general", from_agent="mac-claude",
                     to_agent="linux-codex", body=body, correlation_id="task_a")
    return home


def test_read_commands_answer_the_same_both_ways(loop_home):
    for args in (
        ["list"], ["list", "--limit", "1", "--json"], ["list", "--type", "note", "--type", "x", "--preview"],
        ["list", "--correlation-id=task_a", "--order", "desc"], ["list", "--text", "second"],
        ["list", "--text", "x", "--order", "asc"],  # a usage error, the same way
        ["wait", "--correlation-id", "task_a", "--timeout-ms", "100"],
        ["wait", "--correlation-id", "task_nope", "--timeout-ms", "100"],  # a timeout and why: exit 2
        ["wait", "--type", "nothing", "--timeout-ms", "50", "--json"],
        ["inbox", "--agent", "linux-codex"], ["inbox", "--agent", "linux-codex", "--json", "--limit", "1"],
        ["inbox"],  # --agent missing: the same usage error
        ["list", "--type", "\udcff"],  # a byte that is not UTF-8 in argv: the same refusal, no traceback
        ["task", "ready", "--agent", "linux-codex"], ["task", "ready", "--agent", "linux-codex", "--json"],
    ):
        quick, full = both(loop_home, args)
        assert quick == full, args


def test_write_commands_and_their_errors_answer_the_same_both_ways(loop_home):
    first = ctl_json(loop_home, "list", "--limit", "1")["events"][0]["id"]
    for args in (
        ["append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "a", "--body", "hi"],
        ["append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "a", "--metadata", '{"k": 1}',
         "--json"],
        ["append", "--type", "note", "--stream", "s", "--from-agent", "a"],  # --room missing
        ["append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "a", "--metadata", "[1]"],
        ["append", "--type", "Bad Type", "--stream", "s", "--room", "r", "--from-agent", "a"],  # the daemon's refusal
        ["ack", first, "--from-agent", "linux-codex", "--status", "claimed"],
        ["ack", "evt_nope", "--from-agent", "linux-codex", "--json"],
        ["inbox", "mark-read", "--agent", "linux-codex", "--upto", first],
    ):
        quick, full = both(loop_home, args)
        assert quick == full, args


def test_task_claim_answers_the_same_both_ways(loop_home):
    cids = []
    for goal in ("one", "two"):
        task = ctl_json(loop_home, "task", "create", "--project", "p", "--from-agent", "mac-claude", "--to-agent",
                        "linux-codex", "--goal", goal, "--branch", "main", "--base-commit", "3f2a9c1", "--done", "ok")
        cids.append(task["task"]["correlation_id"])
    quick = run(QUICK, loop_home, ["task", "claim", cids[0], "--agent", "linux-codex"])
    full = run(FULL, loop_home, ["task", "claim", cids[1], "--agent", "linux-codex"])
    assert (quick[0], quick[1].replace(cids[0], "CID"), quick[2]) == (full[0], full[1].replace(cids[1], "CID"), full[2])
    assert quick[1].startswith("Claimed: ")
    assert both(loop_home, ["task", "claim", cids[0], "--agent", "someone-else"])[0][0] == 1


def test_an_unreachable_daemon_is_the_same_exit_both_ways(tmp_path):
    quick, full = both(tmp_path / "nowhere", ["list", "--json"])
    assert quick == full and quick[0] == 3


@pytest.mark.parametrize("args", [
    ["list", "--limit", "many"], ["list", "--bogus"], ["list", "--help"], ["list", "--limit"],
    ["list", "--type", "-x"], ["ack"], ["ack", "a", "b", "--from-agent", "x"], ["ack", "evt_1"],
    ["wait", "--replicated", "1", "--event-id", "evt_1"], ["append", "--ndjson", "-"], ["status"],
    ["task", "create"], ["inbox", "mark-read"], ["--home"], ["--json", "list"],
    ["list", "--preview=yes"], [],
])
def test_what_the_quick_parser_does_not_fully_understand_goes_to_typer(args):
    """None means the full command line runs it, with its own message for a mistake."""
    assert run_quick(args) is None


def test_a_fallen_back_command_line_still_gets_typers_answer(tmp_path):
    done = subprocess.run([PYTHON, "-m", "palacectl", "--home", str(tmp_path), "list", "--limit", "many"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 64 and done.stderr == "palacectl: Invalid value for '--limit': 'many' is not a valid int.\n"
    assert "Traceback" not in done.stderr


def test_the_quick_path_loads_neither_typer_nor_the_command_modules(loop_home):
    probe = ("import sys, runpy; sys.argv = ['palacectl', '--home', sys.argv[1], 'list', '--limit', '1']; "
             "import palacectl.__main__ as m; rc = m.main(); "
             "print(rc, sorted(x for x in ('typer', 'click', 'palacectl.cli', 'trio', 'palace_proto.validation', "
             "'dataclasses') if x in sys.modules), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe, str(loop_home)], capture_output=True, text=True, timeout=60)
    assert done.stderr.strip().splitlines()[-1] == "0 []"
