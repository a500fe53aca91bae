"""palace_proto.workers: a worker's activity as a local client gives it (checked, one field named
per refusal) and as a peer's presence carries it (read leniently: a hostile or newer peer's text
yields what is valid, or nothing, never an exception)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from palace_proto.errors import ValidationError
from palace_proto.workers import (
    MAX_ACTIVITY_CHARS,
    MAX_CONCURRENCY,
    MAX_REPORTED_TASKS,
    MAX_TASK_ID_CHARS,
    check_activity,
    decode_activity,
    encode_activity,
    fit_activity,
)

GOOD = {"runner": "claude", "concurrency": 2, "project": "shop", "tasks": ["task_a_1", "task_b_2"]}


def test_an_activity_is_normalised_and_round_trips_through_its_text():
    assert check_activity({"runner": "codex"}) == {"runner": "codex", "concurrency": 1, "project": None, "tasks": []}
    checked = check_activity({**GOOD, "tasks": ["task_a_1", "task_a_1", "task_b_2"]})
    assert checked["tasks"] == ["task_a_1", "task_b_2"]  # duplicates once, order kept
    text = encode_activity(checked)
    assert len(text) <= MAX_ACTIVITY_CHARS and decode_activity(text) == checked
    assert encode_activity(None) == "" and decode_activity("") is None


@pytest.mark.parametrize(("change", "field"), [
    ({"runner": ""}, "worker.runner"),
    ({"runner": "rm -rf /"}, "worker.runner"),
    ({"runner": "x" * 65}, "worker.runner"),
    ({"concurrency": 0}, "worker.concurrency"),
    ({"concurrency": MAX_CONCURRENCY + 1}, "worker.concurrency"),
    ({"concurrency": True}, "worker.concurrency"),
    ({"concurrency": "2"}, "worker.concurrency"),
    ({"project": ""}, "worker.project"),
    ({"project": "a\x1b[2Jb"}, "worker.project"),
    ({"project": "p" * 201}, "worker.project"),
    ({"tasks": "task_a_1"}, "worker.tasks"),
    ({"tasks": [""]}, "worker.tasks"),
    ({"tasks": ["task_\u202etxt.exe"]}, "worker.tasks"),
    ({"tasks": ["t" * 257]}, "worker.tasks"),
    ({"tasks": [f"t{i}" * 100 for i in range(12)]}, "worker.tasks"),
    ({"tasks": [f"task_{i}" for i in range(MAX_REPORTED_TASKS + 1)]}, "worker.tasks"),
    ({"tasks": [7]}, "worker.tasks"),
    ({"permissions": ""}, "worker.permissions"),
    ({"permissions": "allow \x1b[2J everything"}, "worker.permissions"),
    ({"permissions": "p" * 513}, "worker.permissions"),
    ({"permissions": 3}, "worker.permissions"),
    ({"held": ""}, "worker.held"),
    ({"held": "over \x1b[2J budget"}, "worker.held"),
    ({"held": "h" * 513}, "worker.held"),
])
def test_a_bad_activity_names_its_field(change, field):
    with pytest.raises(ValidationError) as refused:
        check_activity({**GOOD, **change})
    assert refused.value.field == field


def test_an_activity_that_is_not_an_object_is_refused():
    for bad in (None, [], "claude", 3):
        with pytest.raises(ValidationError, match="worker must be an object"):
            check_activity(bad)


@pytest.mark.parametrize("text", [
    "not json", "[1, 2]", '"claude"', json.dumps({**GOOD, "runner": "a b"}), "x" * (MAX_ACTIVITY_CHARS + 1),
    "[" * 100_000, json.dumps({**GOOD, "tasks": ["task_\x07bell"]}),
])
def test_a_hostile_peers_activity_is_read_as_nothing(text):
    """Guards presence: another daemon's activity text never raises and never passes unchecked."""
    assert decode_activity(text) is None


@given(st.text(max_size=300))
def test_decoding_any_text_never_raises(text):
    result = decode_activity(text)
    assert result is None or check_activity(result) == result


def test_any_visible_correlation_id_names_a_task_and_what_a_worker_reports_always_fits():
    """Regression (issue 25, finding 5): a correlation id with a `/`, a space, or over 205
    characters made the daemon refuse the worker's report of its tasks, and the worker exit 1 with
    the task still claimed. Any visible id is a task id now, and ``fit_activity`` keeps what a
    worker reports within what the daemon accepts, however many long ids it runs."""
    odd = ["task_a/b", "task_with space", "fix-123", "t" * MAX_TASK_ID_CHARS]
    assert check_activity({**GOOD, "tasks": odd})["tasks"] == odd
    crowded = {**GOOD, "tasks": ["x" * MAX_TASK_ID_CHARS + str(i) for i in range(MAX_REPORTED_TASKS)]
                                + ["bad\x1b", ""] + odd}
    fitted = fit_activity(crowded)
    assert check_activity(fitted) == fitted and fitted["tasks"] and "bad\x1b" not in fitted["tasks"]


@given(st.lists(st.text(max_size=300), max_size=40))
def test_fit_activity_always_gives_what_check_activity_accepts(tasks):
    fitted = fit_activity({**GOOD, "tasks": tasks})
    assert check_activity(fitted)["tasks"] == list(dict.fromkeys(fitted["tasks"]))


def test_a_workers_permissions_line_is_kept_and_cut_to_fit():
    """Issue 28: `who` shows what a worker's runs may do without asking; a line too long is cut."""
    line = "allow 3 rule(s), deny 1 (Bash(git push*)), ask human:ana (timeout 600 s)"
    assert check_activity({**GOOD, "permissions": line})["permissions"] == line
    fitted = fit_activity({**GOOD, "permissions": "x" * 2000})
    assert len(fitted["permissions"]) <= 512 and fitted["permissions"].endswith("…")
    assert check_activity(fitted) == fitted
