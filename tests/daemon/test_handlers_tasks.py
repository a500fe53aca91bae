"""Tasks (palaced/handlers/tasks.py): the request's validation and body, and the lifecycle derived
from the events on its correlation id, through the handlers on a real store."""

from __future__ import annotations

import json

import pytest

from palace_proto.errors import NotFound, ValidationError
from palace_proto.validation import Limits
from palaced.features import tasks
from palaced.handlers import log
from tests.daemon.handler_context import open_context

TASK = {"project": "My Project", "from_agent": "alice", "to_agent": "bob", "goal": "Fix the flaky build!",
        "branch": "main", "base_commit": "ABCDEF1", "done": "tests pass"}


@pytest.mark.parametrize(("change", "field"), [
    ({"goal": " "}, "goal"), ({"done": None}, "done"), ({"to_agent": ""}, "destination_agent"),
    ({"base_commit": "main"}, "base_commit"),
])
def test_a_task_request_names_what_is_missing(change, field):
    with pytest.raises(ValidationError) as refused:
        tasks.build_task_request({**TASK, **change}, "0123abcd", Limits())
    assert refused.value.field == field


def test_a_task_request_carries_its_delivery_line():
    req, handoff = tasks.build_task_request(TASK, "0123abcd", Limits())
    assert req.correlation_id == "task_fix_the_flaky_build_0123abcd" and req.stream == "project/my_project"
    assert req.base_commit == "abcdef1" and tasks.delivery_line(req.correlation_id) in req.body
    assert handoff.startswith(f"Open palace task {req.correlation_id} as bob.")


async def test_a_task_moves_from_open_to_claimed_to_terminal(tmp_path):
    async with open_context(tmp_path) as ctx:
        created = await tasks.task_create(ctx, TASK)
        cid = created["task"]["correlation_id"]
        assert (await tasks.task_show(ctx, {"correlation_id": cid}))["state"] == "open"
        await log.ack(ctx, {"event_id": created["task"]["id"], "from_agent": "bob", "status": "claimed"})
        shown = await tasks.task_show(ctx, {"correlation_id": cid})
        assert (shown["state"], shown["claimed_by"], shown["terminal"]) == ("claimed", "bob", False)
        assert [t["correlation_id"] for t in (await tasks.task_list(ctx, {"agent": "bob", "open": True}))["tasks"]] \
            == [cid]
        assert (await tasks.task_list(ctx, {"agent": "alice"}))["tasks"][0]["role"] == "requester"
        # the requester closes
        await log.ack(ctx, {"event_id": created["task"]["id"], "from_agent": "alice", "status": "applied"})
        assert (await tasks.task_show(ctx, {"correlation_id": cid}))["terminal"] is True
        assert (await tasks.task_list(ctx, {"open": True}))["count"] == 0
        assert (await tasks.task_list(ctx, {"agent": "carol"}))["count"] == 0
        with pytest.raises(NotFound):
            await tasks.task_show(ctx, {"correlation_id": "task_nothing_here"})


async def _task(ctx, n, to="bob"):
    created = await tasks.task_create(ctx, {**TASK, "goal": f"task number {n}", "to_agent": to})
    return created["task"]


async def test_an_open_task_behind_the_newest_requests_stays_ready_and_listed(tmp_path, monkeypatch):
    """Regression: only the newest 500 requests were derived, so an open task behind 500 newer
    ones left `task ready`, the board and the reconciler for good."""
    monkeypatch.setattr(tasks, "MAX_TASKS", 2)
    async with open_context(tmp_path) as ctx:
        old = await _task(ctx, 0)
        for n in range(1, 5):
            done = await _task(ctx, n)
            await log.ack(ctx, {"event_id": done["id"], "from_agent": "alice", "status": "applied"})
        ready = await tasks.task_ready(ctx, {"agent": "bob"})
        assert [t["correlation_id"] for t in ready["tasks"]] == [old["correlation_id"]]
        listed = [t["correlation_id"] for t in (await tasks.task_list(ctx, {}))["tasks"]]
        assert listed[-1] == old["correlation_id"] and len(listed) == 3  # the newest two, then the open one
        assert (await tasks.task_list(ctx, {"open": True}))["count"] == 1


async def test_a_finished_task_is_not_derived_again_until_an_event_on_it_arrives(tmp_path, monkeypatch):
    monkeypatch.setattr(tasks, "MAX_TASKS", 1)
    async with open_context(tmp_path) as ctx:
        first = await _task(ctx, 0)
        await log.ack(ctx, {"event_id": first["id"], "from_agent": "alice", "status": "failed"})
        await _task(ctx, 1)
        assert (await tasks.task_list(ctx, {}))["count"] == 2  # derived once more: it finished since
        assert (await tasks.task_list(ctx, {}))["count"] == 1  # settled: the newest only
        await log.ack(ctx, {"event_id": first["id"], "from_agent": "alice", "status": "open"})  # its requester opens it again
        shown = (await tasks.task_list(ctx, {"agent": "bob", "open": True}))["tasks"]
        assert {t["correlation_id"]: t["state"] for t in shown}[first["correlation_id"]] == "open"


async def test_more_unfinished_old_tasks_than_the_bound_keeps_the_newest_of_them_and_says_so(
        tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(tasks, "MAX_TASKS", 1)
    monkeypatch.setattr(tasks, "MAX_UNSETTLED", 2)
    async with open_context(tmp_path) as ctx:
        made = [await _task(ctx, n) for n in range(4)]
        with caplog.at_level("WARNING", logger="palaced.features.tasks"):
            listed = [t["correlation_id"] for t in (await tasks.task_list(ctx, {}))["tasks"]]
            await tasks.task_list(ctx, {})
        assert listed == [t["correlation_id"] for t in reversed(made[1:])]
        assert len([r for r in caplog.records if "are not finished" in r.message]) == 1  # once, not per call


def test_a_request_names_its_reviewer_and_integrator_or_takes_the_projects_defaults(tmp_path):
    """Issue 46: ``review_by`` and ``integrator`` go into the request's metadata, checked; a project's
    defaults come from ``[tasks]`` / ``[tasks.projects.NAME]``, and ``none`` turns one off."""
    from palaced.config import ConfigError, load_config
    from palaced.features import features

    req, _ = tasks.build_task_request({**TASK, "review_by": "human:ana", "integrator": "lander"}, "0123abcd", Limits())
    assert json.loads(req.metadata_json)["review_by"] == "human:ana" and json.loads(req.metadata_json)["integrator"] == "lander"
    with pytest.raises(ValidationError, match="is a person"):
        tasks.build_task_request({**TASK, "integrator": "human:ana"}, "0123abcd", Limits())
    with pytest.raises(ValidationError) as refused:
        tasks.build_task_request({**TASK, "review_by": "two words"}, "0123abcd", Limits())
    assert refused.value.field == "review_by"
    (tmp_path / "config.toml").write_text('[tasks]\nreview_by = "any-other-agent"\nintegrator = "lander"\n'
                                          '[tasks.projects.web]\nreview_by = "human:ana"\n'
                                          '[tasks.projects.scratch]\nreview_by = "none"\n')
    settings = load_config(tmp_path, features().config_extensions).section("tasks", None)
    assert settings.for_project("web") == {"review_by": "human:ana", "integrator": "lander"}
    assert settings.for_project("other") == {"review_by": "any-other-agent", "integrator": "lander"}
    req, _ = tasks.build_task_request(TASK, "0123abcd", Limits(), settings.for_project("scratch"))
    assert "review_by" not in json.loads(req.metadata_json) and json.loads(req.metadata_json)["integrator"] == "lander"
    req, _ = tasks.build_task_request({**TASK, "review_by": "none", "integrator": "none"}, "0123abcd", Limits(),
                                      settings.for_project("web"))
    assert "review_by" not in json.loads(req.metadata_json) and "integrator" not in json.loads(req.metadata_json)
    (tmp_path / "config.toml").write_text('[tasks.projects.web]\nreviewer = "human:ana"\n')
    with pytest.raises(ConfigError, match=r"unknown key tasks.projects.web.reviewer \(known: review_by, integrator\)"):
        load_config(tmp_path, features().config_extensions)
    (tmp_path / "config.toml").write_text('[tasks]\nintegrator = "human:ana"\n')
    with pytest.raises(ConfigError, match="is a person"):
        load_config(tmp_path, features().config_extensions)
