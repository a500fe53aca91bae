"""Artifacts and patches (palaced/handlers/artifacts.py) without a socket: bytes stored exactly,
bad content refused with nothing written, and a patch that takes its routing from the task it
answers."""

from __future__ import annotations

import hashlib

import pytest

from palace_proto.errors import NotFound, ValidationError
from palace_proto.validation import Limits
from palaced.features import artifacts, tasks
from palaced.handlers import log
from tests.daemon.handler_context import open_context

TASK = {"project": "palace", "from_agent": "alice", "to_agent": "bob", "goal": "Fix the build", "branch": "main",
        "base_commit": "abcdef1", "done": "tests pass"}


async def test_an_artifact_is_stored_byte_exact_and_read_back(tmp_path):
    content = b"\x00binary\r\n\xff"
    async with open_context(tmp_path) as ctx:
        record = await artifacts.artifact_put(ctx, {"content": content, "kind": "file", "created_by": "alice"})
        assert record["sha256"] == hashlib.sha256(content).hexdigest() and "warnings" not in record
        stored = await artifacts.artifact_get(ctx, {"artifact_id": record["id"]})
        assert stored["content"] == content and stored["created_by"] == "alice"
        assert "content" not in await artifacts.artifact_get(ctx, {"artifact_id": record["sha256"],
                                                                   "with_content": False})
        with pytest.raises(NotFound):
            await artifacts.artifact_get(ctx, {"artifact_id": "art_" + "0" * 32})


@pytest.mark.parametrize(("content", "message"), [
    (b"", "must not be empty"), (None, "must be bytes or a string"), (b"x" * 101, "maximum is 100 bytes"),
])
async def test_bad_content_is_refused_and_nothing_is_stored(tmp_path, content, message):
    async with open_context(tmp_path, limits=Limits(max_artifact_bytes=100)) as ctx:
        with pytest.raises(ValidationError, match=message):
            await artifacts.artifact_put(ctx, {"content": content, "kind": "file", "created_by": "alice"})
        assert (await ctx.store.counts())["artifacts"] == 0


async def test_a_patch_takes_its_stream_and_recipient_from_the_task_it_answers(tmp_path):
    async with open_context(tmp_path) as ctx:
        task = (await tasks.task_create(ctx, TASK))["task"]
        result = await artifacts.patch_submit(ctx, {"content": "diff --git a b", "from_agent": "bob",
                                                    "correlation_id": task["correlation_id"]})
        event, artifact = result["event"], result["artifact"]
        assert (event["type"], event["stream"], event["to_agent"], event["room"]) == (
            "patch.ready", task["stream"], "alice", "patches")
        assert event["artifact_ids"] == [artifact["id"]]
        assert artifact["warnings"][0].startswith("patch content does not end with a trailing newline")
        shown = await tasks.task_show(ctx, {"correlation_id": task["correlation_id"]})
        assert shown["state"] == "ready"


async def test_a_patch_with_nowhere_to_go_is_refused_and_stores_nothing(tmp_path):
    async with open_context(tmp_path) as ctx:
        with pytest.raises(ValidationError, match="stream must be a non-empty string"):
            await artifacts.patch_submit(ctx, {"content": "diff\n", "from_agent": "bob"})
        with pytest.raises(ValidationError, match="no event on correlation 'task_x'"):
            await artifacts.patch_submit(ctx, {"content": "diff\n", "from_agent": "bob", "correlation_id": "task_x"})
        counts = await ctx.store.counts()
        assert (counts["artifacts"], counts["events"]) == (0, 0)
        assert (await log.list_events(ctx, {}))["count"] == 0


async def test_a_patch_and_a_release_carry_the_run_log_they_name(tmp_path):
    """Issue 26, first contact 2: a run's log was named in the patch's body only, so no replica
    ever fetched it. The patch and the release name it in ``artifact_ids``; one that is not held
    here is refused with nothing written."""
    async with open_context(tmp_path) as ctx:
        task = (await tasks.task_create(ctx, TASK))["task"]
        cid = task["correlation_id"]
        log_id = (await artifacts.artifact_put(ctx, {"kind": "log", "content": b"ran\n", "created_by": "bob"}))["id"]
        await tasks.task_claim(ctx, {"correlation_id": cid, "agent": "bob"})
        released = await tasks.task_release(ctx, {"correlation_id": cid, "agent": "bob", "artifact_ids": [log_id]})
        assert released["event"]["artifact_ids"] == [log_id]
        result = await artifacts.patch_submit(ctx, {"content": "diff --git a b\n", "from_agent": "bob",
                                                    "correlation_id": cid, "artifact_ids": [log_id]})
        assert result["event"]["artifact_ids"] == [result["artifact"]["id"], log_id]
        before = await ctx.store.counts()
        with pytest.raises(ValidationError, match=r"unknown artifact .art_missing."):
            await artifacts.patch_submit(ctx, {"content": "diff --git c d\n", "from_agent": "bob",
                                               "correlation_id": cid, "artifact_ids": ["art_missing"]})
        assert await ctx.store.counts() == before
