"""The task commands (palacectl/cli/tasks.py) against a fake client: the lines of ``task
create``, ``show`` and ``list``, what each asks for, and how a refusal reads. The queue itself
(states, claims, who is told) is tests/e2e/test_cli_artifacts_tasks.py and test_task_queue.py."""

from __future__ import annotations

import copy
from typing import Any

from palace_proto.errors import ApiError
from tests.ctl.fake_client import FakeClient, invoke
from tests.ctl.replies import TASK_CREATED, TASK_VIEW

CID = TASK_VIEW["correlation_id"]
TASK_ARGS = ["--project", "palace", "--from-agent", "alice", "--to-agent", "bob", "--goal", "Do the thing",
             "--branch", "feat/thing", "--base-commit", "abcdef1", "--done", "it is done"]


def listed(view: dict[str, Any], role: str) -> dict[str, Any]:
    """A task as ``task_list`` gives it: its view without the events, and the asker's role."""
    left_out = {"events", "waiting_on", "questions", "waiting_for_person", "waiting_for_approval"}
    return {**{k: v for k, v in view.items() if k not in left_out}, "role": role}


def test_task_create_human_output(fake: FakeClient):
    fake.answers["task_create"] = TASK_CREATED
    task = TASK_CREATED["task"]
    result = invoke("task", "create", *TASK_ARGS)
    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    assert lines[:5] == [f"Task created: {task['correlation_id']}", f"Event: {task['id']}", "To: bob", "",
                         "Ready to paste:"]
    assert "\n".join(lines[5:]) == TASK_CREATED["handoff"]
    assert fake.requests == [("task_create", {"project": "palace", "from_agent": "alice", "to_agent": "bob",
                                              "goal": "Do the thing", "branch": "feat/thing",
                                              "base_commit": "abcdef1", "done": "it is done"})]


def test_task_show_human_output_names_state_claimant_and_every_event(fake: FakeClient):
    fake.answers["task_show"] = TASK_VIEW
    result = invoke("task", "show", CID)
    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    assert lines[:3] == [f"Task {CID}: claimed (claimed by bob)", "  requested by alice for bob, priority 2",
                         "2 event(s):"]
    request, _claim = TASK_VIEW["events"]
    assert lines[3].startswith(f"  {request['id']}  {request['created_at']}  task.request  project/palace/delegation"
                               f"  alice->bob [open] corr={CID} :: Goal: Do the thing Branch: feat/thing")
    assert lines[4].endswith(f"bob->alice [claimed] corr={CID} :: bob claims {CID}")
    assert invoke("task", "show", CID, "--json").json() == TASK_VIEW
    assert fake.requests == [("task_show", {"correlation_id": CID})] * 2


def test_task_show_says_what_holds_a_task_back(fake: FakeClient):
    """Blockers (waiting or applied), a second claim, and its questions, each on a line of its own."""
    view = copy.deepcopy(TASK_VIEW)
    view.update(blocked_by=["task_a", "task_b"], waiting_on=["task_b"],
                conflicts=[{"agent": "carol", "event_id": "evt_c", "claimant": "bob", "claim_event_id": "evt_b"}],
                questions=[{"question_id": "evt_q", "to": "human:ana", "question": "may I\ndrop it?", "status": "open",
                            "answer": None, "approval": None},
                           {"question_id": "evt_r", "to": "human:ana", "question": "and this?", "status": "answered",
                            "answer": {"by": "human:ana", "text": "yes"}}])
    fake.answers["task_show"] = view
    lines = invoke("task", "show", CID).stdout.splitlines()
    assert lines[2:6] == [
        "  blocked by task_a (applied), task_b (waiting)",
        "  double claim: carol claimed too (evt_c); the first claim, bob's, holds",
        "  question evt_q to human:ana: may I drop it? (waiting for a person)",
        "  question evt_r to human:ana: and this? (human:ana: yes)",
    ]


def test_task_show_of_an_unknown_task_is_one_line_and_exit_1(fake: FakeClient):
    fake.answers["task_show"] = ApiError("task 'x' not found", code="not_found")
    result = invoke("task", "show", "x")
    assert (result.returncode, result.stdout, result.stderr) == (1, "", "palacectl: task 'x' not found\n")
    as_json = invoke("task", "show", "x", "--json")
    assert as_json.returncode == 1
    assert as_json.json()["error"] == {"code": "not_found", "message": "task 'x' not found"}


def test_task_list_is_one_tab_separated_line_per_task(fake: FakeClient):
    fake.answers["task_list"] = {"tasks": [listed(TASK_VIEW, "assignee")], "count": 1, "newest": 500,
                                 "capped": False}
    result = invoke("task", "list", "--agent", "bob", "--open")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"{CID}\tclaimed\talice->bob\tbob\t{TASK_VIEW['last_activity']}\n"
    assert fake.requests == [("task_list", {"agent": "bob", "open": True})]


def test_an_empty_task_list_says_so_and_a_capped_one_warns(fake: FakeClient):
    fake.answers["task_list"] = {"tasks": [], "count": 0, "newest": 500, "capped": False}
    assert (invoke("task", "list").stderr, invoke("task", "list", "--open").stderr) == ("No tasks.\n",
                                                                                        "No open tasks.\n")
    assert invoke("task", "list", "--json").json() == {"tasks": [], "count": 0, "newest": 500, "capped": False}
    fake.answers["task_list"] = {"tasks": [listed(TASK_VIEW, "assignee")], "count": 1, "newest": 500, "capped": True}
    capped = invoke("task", "list")
    assert capped.returncode == 0 and capped.stderr.startswith(
        "Warning: more older unfinished tasks than a listing holds: the oldest are not listed (the newest 500")
