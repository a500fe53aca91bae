"""The command line's own layer (palacectl/cli, palacectl/loop.py) against a fake client: what each
command asks the daemon for, how it renders the answer (human or ``--json``), and its exit code.

Unit tests: no daemon. ``loop.open_client``, where every command's request gets its client, is
given a ``FakeClient`` (tests/ctl/fake_client.py) that answers from a table; more of each command
group's rendering is in tests/ctl/test_cli_*.py, and the tests against a real palaced are in
tests/e2e/ (test_cli_log, test_cli_quick, test_inbox_session, test_cli_artifacts_tasks).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from palace_proto.errors import ApiError
from palacectl import loop
from palacectl.cli import app, main
from palacectl.client import DaemonUnreachable
from palacectl.output import event_line
from tests.ctl.fake_client import FakeClient

EVENT = {"id": "evt_20260101T000000_0001", "created_at": "2026-01-01T00:00:00.000000Z", "type": "note",
         "stream": "project/x", "room": "general", "from_agent": "alice", "to_agent": "bob", "body": "hello",
         "correlation_id": "task_a", "status": None, "topic": None, "artifact_ids": []}
OTHER = {**EVENT, "id": "evt_20260101T000001_0002", "body": "again", "correlation_id": None}


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every command here works on a home of its own (no --home: $PALACE_HOME)."""
    monkeypatch.setenv("PALACE_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    fake = FakeClient()

    def open_client(home: Path) -> FakeClient:
        fake.homes.append(home)
        return fake

    monkeypatch.setattr(loop, "open_client", open_client)
    return fake


def invoke(*args: str, stdin: str | None = None) -> Any:
    return CliRunner().invoke(app, list(args), input=stdin, catch_exceptions=False)


# -- list ----------------------------------------------------------------------------------------


def test_list_prints_each_event_on_a_line_and_asks_with_the_filters_given(daemon: FakeClient, home: Path):
    daemon.answers["list"] = {"events": [EVENT, OTHER], "count": 2}
    result = invoke("list", "--to-agent", "bob", "--type", "note", "--type", "task.reply", "--limit", "900")
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == f"2 event(s):\n{event_line(EVENT)}\n{event_line(OTHER)}\n"
    assert event_line(EVENT).startswith("  evt_20260101T000000_0001  2026-01-01T00:00:00.000000Z  note")
    # The filters by their wire names (palace_proto.filters); the limit capped; absent options left out.
    assert daemon.requests == [("list", {"types": ["note", "task.reply"], "to_agents": ["bob"], "limit": 500,
                                         "preview": False})]
    assert daemon.homes == [home]


def test_list_json_is_the_daemons_answer_as_one_document(daemon: FakeClient):
    daemon.answers["list"] = {"events": [EVENT], "count": 1}
    result = invoke("list", "--json", "--since-event-id", "evt_0", "--preview")
    assert result.exit_code == 0 and json.loads(result.stdout) == {"events": [EVENT], "count": 1}
    assert result.stdout.endswith("}\n") and result.stdout.startswith('{\n  "events"')
    assert daemon.requests[0][1] == {"since_event_id": "evt_0", "preview": True}


def test_an_empty_list_prints_nothing_off_a_terminal_and_exits_0(daemon: FakeClient):
    daemon.answers["list"] = {"events": [], "count": 0}
    result = invoke("list")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


def test_list_text_with_an_order_is_a_usage_error_before_any_request(daemon: FakeClient,
                                                                   capsys: pytest.CaptureFixture[str]):
    assert main(["list", "--text", "x", "--order", "asc"]) == 64
    assert capsys.readouterr().err == "palacectl: --text lists the best matches first; leave out --order\n"
    assert daemon.requests == []


# -- append --------------------------------------------------------------------------------------


def test_append_prints_the_stored_event_under_a_heading(daemon: FakeClient):
    daemon.answers["append"] = EVENT
    result = invoke("append", "--type", "note", "--stream", "project/x", "--room", "general", "--from-agent",
                    "alice", "--to-agent", "bob", "--body-file", "-", stdin="hello")
    assert (result.exit_code, result.stdout) == (0, f"Appended:\n{event_line(EVENT)}\n")
    assert daemon.requests == [("append", {"type": "note", "stream": "project/x", "room": "general",
                                           "from_agent": "alice", "to_agent": "bob", "body": "hello"})]


def test_append_json_and_metadata(daemon: FakeClient):
    daemon.answers["append"] = EVENT
    result = invoke("append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "alice",
                    "--metadata", '{"k": [1]}', "--artifact-id", "art_1", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == EVENT
    args = daemon.requests[0][1]
    assert (args["metadata"], args["artifact_ids"]) == ({"k": [1]}, ["art_1"])


def test_append_without_its_routing_is_a_usage_error(daemon: FakeClient, capsys: pytest.CaptureFixture[str]):
    assert main(["append", "--type", "note", "--stream", "s", "--room", "r", "--json"]) == 64
    out, err = capsys.readouterr()
    assert json.loads(out)["error"]["code"] == "usage" and "--from-agent" in json.loads(out)["error"]["message"]
    assert err == "" and daemon.requests == []


def test_a_refusal_is_one_line_and_exit_1_and_an_absent_daemon_exit_3(daemon: FakeClient,
                                                                      capsys: pytest.CaptureFixture[str]):
    daemon.answers["append"] = ApiError("type='X' is not a valid event type", code="invalid_argument")
    assert main(["append", "--type", "X", "--stream", "s", "--room", "r", "--from-agent", "a"]) == 1
    assert capsys.readouterr() == ("", "palacectl: type='X' is not a valid event type\n")
    daemon.answers["list"] = DaemonUnreachable("palaced is not running on /x (no socket); start it with `palaced`")
    assert main(["list", "--json"]) == 3
    out, _err = capsys.readouterr()
    assert json.loads(out) == {"error": {"code": "unreachable", "message": "palaced is not running on /x (no socket); "
                                                                           "start it with `palaced`"}}


# -- wait ----------------------------------------------------------------------------------------


def test_wait_prints_the_match_and_exits_0(daemon: FakeClient):
    daemon.answers["wait"] = {"events": [EVENT], "count": 1, "timed_out": False}
    result = invoke("wait", "--correlation-id", "task_a", "--timeout-ms", "999999")
    assert (result.exit_code, result.stdout, result.stderr) == (0, f"1 event(s):\n{event_line(EVENT)}\n", "")
    assert daemon.requests == [("wait", {"correlation_ids": ["task_a"], "preview": False, "timeout_ms": 300_000})]


def test_a_wait_that_times_out_exits_2_and_says_when_no_event_carries_the_correlation(daemon: FakeClient):
    daemon.answers["wait"] = {"events": [], "count": 0, "timed_out": True}
    daemon.answers["list"] = lambda args: {"events": [], "count": 0 if args["correlation_ids"] == ["task_nope"] else 1}
    result = invoke("wait", "--correlation-id", "task_nope", "--correlation-id", "task_a", "--timeout-ms", "10")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == ("Timed out; no matching events.\n"
                             "No event carries correlation task_nope here: check the id (`palacectl task list` shows "
                             "tasks' ids; `task create` printed yours).\n")
    assert daemon.requests[1:] == [("list", {"correlation_ids": ["task_nope"], "limit": 1}),
                                   ("list", {"correlation_ids": ["task_a"], "limit": 1})]


def test_wait_json_is_the_document_with_exit_2_on_a_timeout(daemon: FakeClient):
    daemon.answers["wait"] = {"events": [], "count": 0, "timed_out": True}
    result = invoke("wait", "--type", "nothing", "--json")
    assert result.exit_code == 2 and json.loads(result.stdout) == {"events": [], "count": 0, "timed_out": True}
    assert result.stderr == "" and [op for op, _ in daemon.requests] == ["wait"]


# -- inbox ---------------------------------------------------------------------------------------


def test_inbox_lists_what_is_unread_and_says_how_to_see_more(daemon: FakeClient):
    daemon.answers["inbox"] = {"events": [EVENT], "count": 1, "more": True, "unread": 7, "unread_capped": True}
    result = invoke("inbox", "--agent", "bob", "--limit", "1")
    assert (result.exit_code, result.stdout) == (0, f"1 event(s):\n{event_line(EVENT)}\n")
    assert result.stderr == (f"7+ unread in all; mark these read to see the next: palacectl inbox mark-read "
                             f"--agent bob --upto {EVENT['id']}\n")
    assert daemon.requests == [("inbox", {"agent": "bob", "limit": 1})]


def test_an_empty_inbox_says_so_and_json_is_the_document(daemon: FakeClient):
    empty = {"events": [], "count": 0, "more": False, "unread": 0, "unread_capped": False}
    daemon.answers["inbox"] = empty
    result = invoke("inbox", "--agent", "bob")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "Nothing unread for bob.\n")
    result = invoke("inbox", "--agent", "bob", "--preview", "--json")
    assert (result.exit_code, json.loads(result.stdout), result.stderr) == (0, empty, "")
    assert daemon.requests[-1] == ("inbox", {"agent": "bob", "preview": True})


def test_inbox_without_an_agent_is_a_usage_error(daemon: FakeClient, capsys: pytest.CaptureFixture[str]):
    assert main(["inbox"]) == 64
    assert capsys.readouterr().err == "palacectl: inbox needs --agent ID (whose inbox): palacectl inbox --agent ID\n"


# -- task create ---------------------------------------------------------------------------------

TASK = {"task": {**EVENT, "type": "task.request", "correlation_id": "task_b", "to_agent": "linux-codex"},
        "handoff": "Task task_b for linux-codex:\ngoal ..."}


def test_task_create_prints_the_task_and_its_hand_off(daemon: FakeClient):
    daemon.answers["task_create"] = TASK
    result = invoke("task", "create", "--project", "palace", "--from-agent", "alice", "--to-agent", "linux-codex",
                    "--branch", "main", "--base-commit", "abc1234", "--goal", "Fix it", "--done-file", "-",
                    stdin="tests pass\n")
    assert result.exit_code == 0
    assert result.stdout == (f"Task created: task_b\nEvent: {EVENT['id']}\nTo: linux-codex\n\n"
                             f"Ready to paste:\n{TASK['handoff']}\n")
    assert daemon.requests == [("task_create", {"project": "palace", "from_agent": "alice", "to_agent": "linux-codex",
                                                "goal": "Fix it", "branch": "main", "base_commit": "abc1234",
                                                "done": "tests pass\n"})]


def test_task_create_json_and_its_queue_options(daemon: FakeClient):
    daemon.answers["task_create"] = TASK
    result = invoke("task", "create", "--project", "p", "--from-agent", "a", "--to-agent", "*", "--branch", "b",
                    "--base-commit", "abc1234", "--blocked-by", "task_a", "--priority", "0", "--stall-after", "2h",
                    "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == TASK
    args = daemon.requests[0][1]
    assert (args["goal"], args["done"], args["blocked_by"], args["priority"], args["stall_after"]) == (
        "", "", ["task_a"], 0, "2h")


def test_task_create_with_goal_text_and_file_is_a_usage_error(daemon: FakeClient, capsys: pytest.CaptureFixture[str]):
    argv = ["task", "create", "--project", "p", "--from-agent", "a", "--to-agent", "b", "--branch", "b",
            "--base-commit", "abc1234", "--goal", "x", "--goal-file", "-"]
    assert main(argv) == 64
    assert capsys.readouterr().err == "palacectl: pass inline text or a file, not both (--goal or --goal-file)\n"
    assert daemon.requests == []


# -- the quick path renders through the same bodies --------------------------------------------


@pytest.mark.parametrize("argv", [
    ["list", "--to-agent", "bob"], ["list", "--json"], ["wait", "--timeout-ms", "5"], ["inbox", "--agent", "bob"],
    ["append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "a", "--body", "hi"],
    ["task", "claim", "task_b", "--agent", "bob"], ["task", "ready", "--agent", "bob", "--json"],
])
def test_the_quick_path_and_typer_answer_the_same(daemon: FakeClient, capsys: pytest.CaptureFixture[str],
                                                   argv: list[str]):
    daemon.answers.update({
        "list": {"events": [EVENT], "count": 1}, "wait": {"events": [EVENT], "count": 1, "timed_out": False},
        "inbox": {"events": [OTHER], "count": 1, "more": False, "unread": 1, "unread_capped": False},
        "append": EVENT, "task_claim": {"already": False}, "task_ready": {"tasks": []},
    })
    quick = loop.run_quick(argv)
    quick_out = capsys.readouterr()
    full = main(argv)
    assert (quick, quick_out) == (full, capsys.readouterr())
    assert daemon.requests[: len(daemon.requests) // 2] == daemon.requests[len(daemon.requests) // 2:]
