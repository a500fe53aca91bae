"""Tasks (palaced/handlers/tasks.py): the request's validation and body, and the lifecycle derived
from the events on its correlation id, through the handlers on a real store."""

from __future__ import annotations

import pytest

from palace_proto.errors import NotFound, ValidationError
from palace_proto.validation import Limits
from palaced.handlers import log, tasks
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
        await log.ack(ctx, {"event_id": created["task"]["id"], "from_agent": "bob", "status": "applied"})
        assert (await tasks.task_show(ctx, {"correlation_id": cid}))["terminal"] is True
        assert (await tasks.task_list(ctx, {"open": True}))["count"] == 0
        assert (await tasks.task_list(ctx, {"agent": "carol"}))["count"] == 0
        with pytest.raises(NotFound):
            await tasks.task_show(ctx, {"correlation_id": "task_nothing_here"})
