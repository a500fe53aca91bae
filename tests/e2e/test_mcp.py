"""`palacectl mcp` driven by the official MCP SDK client over stdio, against a real palaced: the
MemPalace tool surface, identity, read-only mode, push-woken waits, and a daemon restart under a
running adapter."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from palacectl.tool_sets import LISTING_ORDER
from tests.fleet import append, ctl_json
from tests.helpers import PYTHON, append_event, run_ctl

MEMPALACE_TOOLS = ["mempalace_event_append", "mempalace_event_list", "mempalace_event_wait", "mempalace_event_ack",
                   "mempalace_artifact_put", "mempalace_artifact_get", "mempalace_patch_submit",
                   "mempalace_task_create"]
PALACE_TOOLS = ["mempalace_task_status", "mempalace_task_list", "mempalace_task_ready", "mempalace_task_claim",
                "mempalace_task_release", "mempalace_task_reassign", "mempalace_task_review", "mempalace_who",
                "mempalace_peers"]
MEMORY_TOOLS = ["mempalace_search", "mempalace_add_drawer", "mempalace_kg_query", "mempalace_kg_add",
                "mempalace_kg_invalidate", "mempalace_diary_write", "mempalace_diary_read", "mempalace_list_agents",
                "mempalace_find_tunnels"]
LEASE_TOOLS = ["mempalace_lease_acquire", "mempalace_lease_renew", "mempalace_lease_release", "mempalace_lease_list",
               "mempalace_lease_check"]
SESSION_TOOLS = ["mempalace_inbox", "mempalace_inbox_mark_read", "mempalace_session_start"]
PEOPLE_TOOLS = ["mempalace_ask_human", "mempalace_questions", "mempalace_usage"]
ROOM_TOOLS = ["mempalace_room_open", "mempalace_room_read", "mempalace_room_say", "mempalace_room_close",
              "mempalace_room_list"]
#: what ``--tools all`` lists: every tool but the approve tool of palace's own runs, in listing order
ALL_LISTED = [name for name in LISTING_ORDER if name != "approve" and not name.startswith("palace_")]
MUTATING = {"mempalace_task_claim", "mempalace_task_release", "mempalace_task_reassign", "mempalace_task_review",
            "mempalace_lease_acquire",
            "mempalace_lease_renew", "mempalace_lease_release", "mempalace_event_append", "mempalace_event_ack",
            "mempalace_artifact_put", "mempalace_patch_submit",
            "mempalace_task_create", "mempalace_add_drawer", "mempalace_kg_add", "mempalace_kg_invalidate",
            "mempalace_diary_write", "mempalace_ask_human", "mempalace_room_open", "mempalace_room_say",
            "mempalace_room_close"}


@contextlib.asynccontextmanager
async def adapter(home: Path, agent: str = "mac-claude", *extra: str) -> AsyncIterator[Any]:
    # Every tool, every argument listed: these tests drive the whole surface (the default set,
    # `core`, is pinned on its own in tests/ctl/test_mcp_server.py).
    tools = () if "--tools" in extra else ("--tools", "all")
    params = StdioServerParameters(command=PYTHON, args=["-m", "palacectl", "mcp", "--agent", agent, "--home",
                                                         str(home), *tools, *extra])
    async with Client(params) as client:
        yield client


async def call(client: Any, tool: str, **args: Any) -> dict[str, Any]:
    with trio.fail_after(60):
        result = await client.call_tool(tool, args)
    assert result.is_error is False, result
    return result.structured_content


async def test_tools_are_listed_with_their_inputs(daemon):
    async with adapter(daemon.home) as client:
        listed = await client.list_tools()
    names = [t.name for t in listed.tools]
    assert names == ALL_LISTED  # the loop first, then each group
    assert set(names) == set(MEMPALACE_TOOLS + PALACE_TOOLS + MEMORY_TOOLS + LEASE_TOOLS + SESSION_TOOLS + PEOPLE_TOOLS
                      + ROOM_TOOLS)
    schemas = {t.name: t.input_schema for t in listed.tools}
    assert set(schemas["mempalace_event_append"]["required"]) == {"type", "stream", "room"}
    assert "since_event_id" in schemas["mempalace_event_list"]["properties"]
    assert "preview" in schemas["mempalace_event_list"]["properties"]
    assert schemas["mempalace_event_wait"]["properties"]["timeout_ms"]["default"] == 60000
    assert set(schemas["mempalace_event_ack"]["required"]) == {"event_id"}
    assert {"content", "content_base64"} <= set(schemas["mempalace_artifact_put"]["properties"])
    # Descriptions are short: they cost every agent tokens on every turn.
    assert all(len(t.description) <= 300 for t in listed.tools)
    size = len(json.dumps(listed.model_dump(mode="json", by_alias=True, exclude_none=True)))
    print(f"tools/list result: {size} bytes")


async def test_append_list_ack_round_trip_and_identity(daemon):
    async with adapter(daemon.home) as client:
        appended = await call(client, "mempalace_event_append", type="task.reply", stream="project/x",
                              room="delegation", body="done", to_agent="linux-codex", correlation_id="task_1")
        assert appended["success"] is True and appended["event"]["from_agent"] == "mac-claude"
        listed = await call(client, "mempalace_event_list", to_agent="linux-codex")
        assert listed["count"] == 1 and listed["events"][0]["id"] == appended["event"]["id"]
        acked = await call(client, "mempalace_event_ack", event_id=appended["event"]["id"], status="applied")
        assert acked["success"] is True and acked["event"]["ack_of"] == appended["event"]["id"]
        assert acked["event"]["correlation_id"] == "task_1" and acked["event"]["type"] == "event.ack"
        impostor = await call(client, "mempalace_event_append", type="note", stream="s", room="r",
                              from_agent="linux-codex")
        assert impostor["success"] is False and "speaks as 'mac-claude'" in impostor["error"]
        same = await call(client, "mempalace_event_ack", event_id=appended["event"]["id"], from_agent="mac-claude")
        assert same["success"] is True
        invalid = await call(client, "mempalace_event_append", type="Bad Type", stream="s", room="r")
        assert invalid == {"success": False, "error": invalid["error"]} and "is not a valid event type" in invalid["error"]
        missing = await call(client, "mempalace_event_ack", event_id="evt_nope")
        assert missing == {"success": False, "error": "event 'evt_nope' not found"}
        bad_cursor = await call(client, "mempalace_event_list", since_event_id="evt_nope")
        assert bad_cursor == {"error": "since_event_id 'evt_nope' not found"}
    assert ctl_json(daemon.home, "status")["events"] == 3  # the refused calls wrote nothing


async def test_preview_markers_and_order_defaults(daemon):
    first = append_event(lambda *a, **k: run_ctl(daemon.home, *a, **k), body="x" * 450)
    second = append_event(lambda *a, **k: run_ctl(daemon.home, *a, **k), body="short")
    async with adapter(daemon.home) as client:
        newest_first = await call(client, "mempalace_event_list")
        assert [e["id"] for e in newest_first["events"]] == [second["id"], first["id"]]
        after_cursor = await call(client, "mempalace_event_list", since_event_id=first["id"])
        assert [e["id"] for e in after_cursor["events"]] == [second["id"]]
        explicit = await call(client, "mempalace_event_list", order="asc")
        assert [e["id"] for e in explicit["events"]] == [first["id"], second["id"]]
        preview = await call(client, "mempalace_event_list", preview=True, order="asc")
        long, short = preview["events"]
        assert long["body"] == "x" * 200 and long["body_truncated"] is True and long["body_length"] == 450
        assert short["body"] == "short" and "body_truncated" not in short
        full = await call(client, "mempalace_event_list", order="asc")
        assert full["events"][0]["body"] == "x" * 450


async def test_wait_returns_at_once_times_out_and_wakes_on_an_append(daemon):
    existing = append_event(lambda *a, **k: run_ctl(daemon.home, *a, **k), to_agent="mac-claude")
    async with adapter(daemon.home) as client:
        at_once = await call(client, "mempalace_event_wait", to_agent="mac-claude", timeout_ms=5000)
        assert at_once["timed_out"] is False and [e["id"] for e in at_once["events"]] == [existing["id"]]
        started = time.monotonic()
        empty = await call(client, "mempalace_event_wait", to_agent="mac-claude", since_event_id=existing["id"],
                           timeout_ms=300)
        assert empty == {"timed_out": True, "events": [], "count": 0} and time.monotonic() - started < 10
        woken: dict[str, Any] = {}

        async def waiter() -> None:
            woken.update(await call(client, "mempalace_event_wait", to_agent="mac-claude",
                                    since_event_id=existing["id"], timeout_ms=60000))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.sleep(1.0)
            sent = await trio.to_thread.run_sync(
                lambda: append_event(lambda *a, **k: run_ctl(daemon.home, *a, **k), to_agent="mac-claude"))
        assert woken["timed_out"] is False and [e["id"] for e in woken["events"]] == [sent["id"]]


async def test_a_cancelled_wait_stops_promptly(daemon):
    async with adapter(daemon.home) as client:
        with trio.move_on_after(1.0) as scope:
            await client.call_tool("mempalace_event_wait", {"to_agent": "nobody", "timeout_ms": 300000})
        assert scope.cancelled_caught
        # The adapter is free at once and still serves calls.
        with trio.fail_after(10):
            listed = await call(client, "mempalace_event_list")
        assert listed["count"] == 0


async def test_artifacts_text_and_binary_with_their_sha256(daemon):
    text = "line one\r\nline two\n"
    blob = bytes(range(256)) * 10
    async with adapter(daemon.home) as client:
        put = await call(client, "mempalace_artifact_put", kind="file", content=text)
        assert put["success"] is True and put["artifact"]["sha256"] == hashlib.sha256(text.encode()).hexdigest()
        got = (await call(client, "mempalace_artifact_get", artifact_id=put["artifact"]["id"]))["artifact"]
        assert got["content"] == text and "content_is_base64" not in got
        put_bin = await call(client, "mempalace_artifact_put", kind="file",
                             content_base64=base64.b64encode(blob).decode())
        assert put_bin["artifact"]["sha256"] == hashlib.sha256(blob).hexdigest()
        got_bin = (await call(client, "mempalace_artifact_get", artifact_id=put_bin["artifact"]["sha256"]))["artifact"]
        assert "content" not in got_bin and got_bin["content_is_base64"] is True
        assert base64.b64decode(got_bin["content_base64"]) == blob
        both = await call(client, "mempalace_artifact_put", kind="file", content="a", content_base64="YQ==")
        assert both["success"] is False and "exactly one" in both["error"]
        bad_kind = await call(client, "mempalace_artifact_put", kind="binary", content="a")
        assert bad_kind == {"success": False, "error": "kind='binary' is not one of: file, json, log, note, patch"}
        missing = await call(client, "mempalace_artifact_get", artifact_id="art_nope")
        assert missing == {"error": "artifact 'art_nope' not found"}
        warned = await call(client, "mempalace_artifact_put", kind="patch", content="diff without newline")
        assert "trailing newline" in warned["artifact"]["warnings"][0]


async def test_task_create_validation_writes_nothing(daemon):
    async with adapter(daemon.home) as client:
        refused = await call(client, "mempalace_task_create", project="palace", to_agent="linux-codex",
                             goal="Fix it", branch="main", base_commit="main", done="tests pass")
        assert refused["success"] is False
        assert refused["error"] == ("task base commit must be a hexadecimal Git object id (at least 7 characters), "
                                    "not a branch or tag")
    assert ctl_json(daemon.home, "status")["events"] == 0


async def test_read_only_hides_and_refuses_mutating_tools(daemon):
    async with adapter(daemon.home, "mac-claude", "--read-only") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names.isdisjoint(MUTATING) and "mempalace_event_list" in names
        with pytest.raises(MCPError) as refused:
            await client.call_tool("mempalace_event_append", {"type": "note", "stream": "s", "room": "r"})
        assert refused.value.code == -32003
        assert (await call(client, "mempalace_event_list"))["count"] == 0
    assert ctl_json(daemon.home, "status")["events"] == 0


async def test_an_observer_daemon_makes_the_adapter_read_only(fleet):
    founder = await trio.to_thread.run_sync(fleet.found)
    observer = await trio.to_thread.run_sync(lambda: fleet.join("watcher", role="observer"))
    async with adapter(observer.home) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names.isdisjoint(MUTATING)
        with pytest.raises(MCPError) as refused:
            await client.call_tool("mempalace_event_ack", {"event_id": "evt_x"})
        assert refused.value.code == -32003
    del founder


async def test_the_adapter_survives_a_daemon_restart(daemon):
    async with adapter(daemon.home) as client:
        assert (await call(client, "mempalace_event_list"))["count"] == 0
        assert await trio.to_thread.run_sync(daemon.stop) == 0
        down = await call(client, "mempalace_event_list")
        assert "palaced is not running" in down["error"] and "start it with" in down["error"]
        write = await call(client, "mempalace_event_append", type="note", stream="s", room="r")
        assert write["success"] is False and "palaced is not running" in write["error"]
        await trio.to_thread.run_sync(daemon.start)
        back = await call(client, "mempalace_event_append", type="note", stream="s", room="r", body="back")
        assert back["success"] is True


async def test_the_delegation_loop_of_the_seed_runs_over_mcp(daemon):
    """Requester and worker each through their own adapter: delegate, sweep, claim, deliver a
    patch, wait, fetch and verify it, close the loop."""
    diff = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-old\n+new\n"
    async with adapter(daemon.home, "mac-claude") as requester, adapter(daemon.home, "linux-codex") as worker:
        task = await call(requester, "mempalace_task_create", project="palace", to_agent="linux-codex",
                          goal="Fix the flaky wait test", branch="main", base_commit="3f2a9c1",
                          done="pytest passes 20 runs in a row")
        assert task["success"] is True
        cid = task["task"]["correlation_id"]
        inbox = await call(worker, "mempalace_event_list", to_agent="linux-codex", preview=True)
        request = inbox["events"][0]
        assert request["type"] == "task.request" and request["correlation_id"] == cid
        claimed = await call(worker, "mempalace_event_ack", event_id=request["id"], status="claimed")
        assert claimed["success"] is True
        delivered = await call(worker, "mempalace_patch_submit", content=diff, to_agent="mac-claude",
                               correlation_id=cid, branch="main", base_commit="3f2a9c1")
        assert delivered["success"] is True and "warnings" not in delivered["artifact"]
        ready = await call(requester, "mempalace_event_wait", correlation_id=cid, type="patch.ready",
                           exclude_from_agent="mac-claude", timeout_ms=30000)
        patch_event = ready["events"][0]
        fetched = await call(requester, "mempalace_artifact_get", artifact_id=patch_event["artifact_ids"][0])
        artifact = fetched["artifact"]
        assert hashlib.sha256(artifact["content"].encode()).hexdigest() == artifact["sha256"]
        assert artifact["content"] == diff
        applied = await call(requester, "mempalace_event_ack", event_id=patch_event["id"], status="applied")
        assert applied["success"] is True
        status = await call(requester, "mempalace_task_status", correlation_id=cid)
        assert status["state"] == "applied" and status["terminal"] is True and status["claimed_by"] == "linux-codex"
        assert (await call(worker, "mempalace_task_list"))["count"] == 0  # no open loop left


def test_a_bad_agent_id_is_a_usage_error(daemon):
    result = subprocess.run([PYTHON, "-m", "palacectl", "--home", str(daemon.home), "mcp", "--agent", "two words"],
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 1 and "single token" in result.stderr and result.stdout == ""


async def test_the_adapter_starts_without_a_daemon_and_connects_once_it_runs(daemon_factory, home):
    d = daemon_factory(home, start=False)
    async with adapter(home) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert names == ALL_LISTED  # the loop first, then each group
        assert set(names) == set(MEMPALACE_TOOLS + PALACE_TOOLS + MEMORY_TOOLS + LEASE_TOOLS + SESSION_TOOLS
                                 + PEOPLE_TOOLS + ROOM_TOOLS)
        down = await call(client, "mempalace_event_wait", timeout_ms=100)
        assert "palaced is not running" in down["error"]
        await trio.to_thread.run_sync(d.start)
        assert (await call(client, "mempalace_event_list"))["count"] == 0


async def test_memory_tools_round_trip_with_one_identity(daemon):
    decision = "Decision 2026-11-30: the palace keeps memory in the replicated log.\n"
    async with adapter(daemon.home, "mac-claude") as client:
        filed = await call(client, "mempalace_add_drawer", wing="wing_palace", room="decisions", content=decision)
        assert filed["success"] is True and filed["duplicate"] is False
        again = await call(client, "mempalace_add_drawer", wing="wing_palace", room="decisions", content=decision)
        assert again["drawer_id"] == filed["drawer_id"] and again["duplicate"] is True
        found = await call(client, "mempalace_search", query="memory replicated log")
        assert found["results"][0]["content"] == decision and found["results"][0]["drawer_id"] == filed["drawer_id"]
        assert (await call(client, "mempalace_kg_add", subject="palace", predicate="stores memory in",
                           object="sqlite", valid_from="2026-01-01"))["success"] is True
        ended = await call(client, "mempalace_kg_invalidate", subject="palace", predicate="stores memory in",
                           object="sqlite", ended="2026-11-30")
        assert ended["success"] is True and ended["facts_ended"] == 1
        history = await call(client, "mempalace_kg_query", entity="palace", as_of="2026-06-01")
        assert [f["object"] for f in history["active_facts"]] == ["sqlite"]
        assert (await call(client, "mempalace_kg_query", entity="palace"))["historical_facts"][0]["object"] == "sqlite"
        wrote = await call(client, "mempalace_diary_write", entry="SESSION|memory tools|★★★", topic="palace")
        assert wrote["success"] is True and wrote["agent"] == "mac-claude"
        foreign = await call(client, "mempalace_diary_write", entry="not mine", agent_name="linux-codex")
        assert foreign["success"] is False and "speaks as" in foreign["error"]
        diary = await call(client, "mempalace_diary_read")
        assert diary["total"] == 1 and diary["entries"][0]["content"] == "SESSION|memory tools|★★★"
        agents = await call(client, "mempalace_list_agents")
        assert "mac-claude" in [a["agent"] for a in agents["agents"]]
        bad_date = await call(client, "mempalace_kg_add", subject="a", predicate="b", object="c", valid_from="soon")
        assert bad_date["success"] is False and "not a valid ISO-8601 date" in bad_date["error"]


@pytest.mark.slow
async def test_a_reviewer_on_another_machine_approves_or_sends_back_a_patch_over_mcp(fleet):
    """mempalace_task_review: the agent a task's review_by names, on another daemon than the
    patch's, approves it (the task may land) or requests changes (it goes back to its author)."""
    from tests.fleet import wait_converged, wait_until
    from tests.helpers import run_ctl

    alpha = await trio.to_thread.run_sync(fleet.found, "alpha")
    beta = await trio.to_thread.run_sync(fleet.join, "beta")
    diff = b"--- a/x.txt\n+++ b/x.txt\n@@ -1 +1 @@\n-a\n+b\n"

    def delivered(goal: str) -> str:
        cid = ctl_json(beta.home, "task", "create", "--project", "shop", "--from-agent", "boss", "--to-agent", "bob",
                       "--goal", goal, "--branch", "main", "--base-commit", "abc1234", "--done", "d",
                       "--review-by", "mac-claude")["task"]["correlation_id"]
        ctl_json(beta.home, "task", "claim", cid, "--agent", "bob")
        assert run_ctl(beta.home, "patch", "submit", "--from-agent", "bob", "--correlation-id", cid,
                       input=diff).returncode == 0
        wait_converged(alpha, beta)
        return cid

    approved, sent_back = await trio.to_thread.run_sync(lambda: (delivered("one"), delivered("two")))
    async with adapter(alpha.home) as client:
        done = await call(client, "mempalace_task_review", correlation_id=approved, verdict="approve")
        assert done["success"] is True and done["event"]["type"] == "task.review", done
        back = await call(client, "mempalace_task_review", correlation_id=sent_back, verdict="changes_requested",
                          message="name the test after what it checks")
        assert back["success"] is True, back
        again = await call(client, "mempalace_task_review", correlation_id=sent_back, verdict="approve")
        assert again["success"] is False and "no patch waiting for review" in again["error"], again
    await trio.to_thread.run_sync(lambda: wait_converged(alpha, beta))
    await trio.to_thread.run_sync(lambda: wait_until(
        lambda: ctl_json(beta.home, "task", "show", approved)["review"]["state"] == "approved", "the approval on beta"))
    assert ctl_json(beta.home, "task", "show", sent_back)["review"]["state"] == "changes_requested"


async def test_memory_filed_over_mcp_on_one_daemon_is_found_over_mcp_on_another(fleet):
    """The issue's "done when", through the agents' own interface: an agent on machine A files a
    decision, a fact and a diary entry; an agent on machine B finds the decision by meaning, quotes
    it verbatim, sees the fact with its history, and reads A's diary newest first."""
    from tests.fleet import wait_converged

    a = await trio.to_thread.run_sync(fleet.found, "alpha")
    b = await trio.to_thread.run_sync(fleet.join, "beta")
    decision = "Decision: releases are cut from main every Thursday after the full test suite passes.\n"
    async with adapter(a.home, "mac-claude") as client:
        filed = await call(client, "mempalace_add_drawer", wing="wing_palace", room="decisions", content=decision)
        await call(client, "mempalace_kg_add", subject="release", predicate="happens on", object="tuesday",
                   valid_from="2026-01-01")
        await call(client, "mempalace_kg_invalidate", subject="release", predicate="happens on", object="tuesday",
                   ended="2026-11-01")
        await call(client, "mempalace_kg_add", subject="release", predicate="happens on", object="thursday",
                   valid_from="2026-11-01")
        for entry in ("moved releases to thursday", "told the team"):
            await call(client, "mempalace_diary_write", entry=entry, topic="release")
    await trio.to_thread.run_sync(wait_converged, a, b)
    with trio.fail_after(120):  # B embeds the drawer in its own background worker
        while not (ctl_json(b.home, "status")["memory"]["embedding"] or {}).get("indexed"):
            await trio.sleep(0.2)
    async with adapter(b.home, "linux-codex") as client:
        found = await call(client, "mempalace_search", query="when do we ship a new version?", wing="wing_palace")
        assert found["results"][0]["drawer_id"] == filed["drawer_id"]
        assert found["results"][0]["content"] == decision  # verbatim, byte for byte
        now = await call(client, "mempalace_kg_query", entity="release")
        assert [f["object"] for f in now["active_facts"]] == ["thursday"]
        assert [f["object"] for f in now["historical_facts"]] == ["tuesday"]
        then = await call(client, "mempalace_kg_query", entity="release", as_of="2026-06-01")
        assert [f["object"] for f in then["active_facts"]] == ["tuesday"]
        diary = await call(client, "mempalace_diary_read", agent_name="mac-claude")
        assert diary["total"] == 2 and [e["content"] for e in diary["entries"]] == ["told the team",
                                                                                     "moved releases to thursday"]
        agents = {a["agent"] for a in (await call(client, "mempalace_list_agents"))["agents"]}
        assert "mac-claude" in agents


async def test_lease_tools_acquire_check_renew_release_with_one_identity(daemon):
    async with adapter(daemon.home, "mac-claude") as mine, adapter(daemon.home, "linux-codex") as theirs:
        taken = await call(mine, "mempalace_lease_acquire", patterns=["src/api/**"], project="demo", ttl="30m",
                           reason="refactor")
        assert taken["success"] is True and taken["lease"]["agent"] == "mac-claude"
        lease_id = taken["lease"]["id"]
        refused = await call(theirs, "mempalace_lease_acquire", patterns=["src/api/x.py"], project="demo")
        assert refused["success"] is False and "mac-claude holds src/api/** exclusively (refactor)" in refused["error"]
        blocked = await call(theirs, "mempalace_lease_check", paths=["src/api/x.py", "docs/a.md"], project="demo")
        assert blocked["ok"] is False and [b["path"] for b in blocked["blocked"]] == ["src/api/x.py"]
        assert (await call(mine, "mempalace_lease_check", paths=["src/api/x.py"]))["ok"] is True
        impostor = await call(theirs, "mempalace_lease_acquire", patterns=["x"], project="demo", agent="mac-claude")
        assert impostor["success"] is False and "would impersonate" in impostor["error"]
        not_theirs = await call(theirs, "mempalace_lease_release", lease_id=lease_id)
        assert not_theirs["success"] is False and "held by mac-claude" in not_theirs["error"]
        renewed = await call(mine, "mempalace_lease_renew", lease_id=lease_id, ttl="2h")
        assert renewed["success"] is True and renewed["lease"]["renewals"] == 1
        listed = await call(theirs, "mempalace_lease_list", project="demo")
        assert [x["id"] for x in listed["leases"]] == [lease_id]
        released = await call(mine, "mempalace_lease_release", all=True)
        assert released["success"] is True and released["released"] == [lease_id]
        assert (await call(theirs, "mempalace_lease_check", paths=["src/api/x.py"]))["ok"] is True


async def test_queue_tools_ready_claim_release_reassign_with_one_identity(daemon):
    async with adapter(daemon.home, "mac-claude") as requester, adapter(daemon.home, "linux-codex") as worker, \
            adapter(daemon.home, "win-codex") as other:
        first = await call(requester, "mempalace_task_create", project="shop", to_agent="linux-codex", goal="base",
                           branch="main", base_commit="0123abc", done="tests pass", priority=1)
        cid = first["task"]["correlation_id"]
        second = await call(requester, "mempalace_task_create", project="shop", to_agent="linux-codex", goal="next",
                            branch="main", base_commit="0123abc", done="tests pass", blocked_by=[cid], priority=0,
                            stall_after="2h")
        assert second["success"] is True and second["task"]["metadata"]["blocked_by"] == [cid]
        queue = await call(worker, "mempalace_task_ready")
        assert [t["correlation_id"] for t in queue["tasks"]] == [cid]  # the other waits for its blocker
        claimed = await call(worker, "mempalace_task_claim", correlation_id=cid)
        assert claimed["success"] is True and claimed["task"]["claimed_by"] == "linux-codex"
        refused = await call(other, "mempalace_task_claim", correlation_id=cid)
        assert refused["success"] is False and "already claimed by linux-codex" in refused["error"]
        released = await call(worker, "mempalace_task_release", correlation_id=cid, reason="wrong machine")
        assert released["success"] is True and released["task"]["state"] == "open"
        moved = await call(requester, "mempalace_task_reassign", correlation_id=cid, to_agent="win-codex")
        assert moved["success"] is True and moved["task"]["assigned_to"] == "win-codex"
        not_requester = await call(worker, "mempalace_task_reassign", correlation_id=cid, to_agent="linux-codex")
        assert not_requester["success"] is False and "only the requester" in not_requester["error"]
        assert [t["correlation_id"] for t in (await call(other, "mempalace_task_ready"))["tasks"]] == [cid]


async def test_the_inbox_and_session_start_over_mcp(daemon):
    """The daemon keeps the agent's cursor: after a restart of the harness (or a compaction) the
    inbox starts where it was marked read."""
    home = daemon.home
    first = append(home, "first for you", from_agent="boss", to_agent="mac-claude")
    second = append(home, "for everyone", from_agent="boss", to_agent="*")
    async with adapter(home) as client:
        page = await call(client, "mempalace_inbox")
        assert [e["id"] for e in page["events"]] == [first["id"], second["id"]] and page["unread"] == 2
        moved = await call(client, "mempalace_inbox_mark_read", upto_event_id=first["id"])
        assert moved["moved"] is True and moved["unread"] == 1
    async with adapter(home) as client:  # a new session
        session = await call(client, "mempalace_session_start")
        assert [e["id"] for e in session["inbox"]["items"]] == [second["id"]]
        assert session["text"].startswith("# palace session for mac-claude")
        refused = await call(client, "mempalace_inbox_mark_read", upto_event_id="evt_nope")
        assert "unknown event" in refused["error"]


async def test_resources_are_read_through_the_official_client(daemon):
    home = daemon.home
    task = ctl_json(home, "task", "create", "--project", "shop", "--from-agent", "boss", "--to-agent", "mac-claude",
                    "--goal", "Add the orders table", "--branch", "main", "--base-commit", "abc1234", "--done",
                    "done")["task"]
    ctl_json(home, "lease", "acquire", "src/**", "--agent", "boss", "--project", "shop")
    async with adapter(home) as client:
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        assert listed == {"palace://tasks/open", "palace://leases", "palace://who"}
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert templates == {"palace://inbox/{agent}", "palace://task/{correlation_id}"}

        async def read(uri: str) -> Any:
            with trio.fail_after(30):
                result = await client.read_resource(uri)
            (content,) = result.contents
            assert content.mime_type == "application/json"
            return json.loads(content.text)

        assert [e["correlation_id"] for e in (await read("palace://inbox/mac-claude"))["events"]] == \
            [task["correlation_id"]]
        assert [t["correlation_id"] for t in (await read("palace://tasks/open"))["tasks"]] == [task["correlation_id"]]
        assert (await read(f"palace://task/{task['correlation_id']}"))["state"] == "open"
        assert [lease["agent"] for lease in (await read("palace://leases"))["leases"]] == ["boss"]
        assert (await read("palace://who"))["count"] == 0
        with pytest.raises(MCPError, match="not found"):
            await client.read_resource("palace://task/task_nope_1")


async def test_the_default_set_accepts_every_mempalace_argument_it_does_not_list(daemon):
    """Guards the compact listing (issue 26): an argument a `core` tool names only in its
    description (a MemPalace skill's `topic`, `branch`, `metadata`…) is still taken, and a
    misspelt one is still refused."""
    async with adapter(daemon.home, "mac-claude", "--tools", "core") as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert "topic" not in listed["mempalace_event_append"].input_schema["properties"]
        appended = await call(client, "mempalace_event_append", type="note", stream="project/x", room="general",
                              topic="compat", branch="main", base_commit="3f2a9c1", metadata={"k": 1})
        assert appended["success"] is True
        event = appended["event"]
        assert (event["topic"], event["branch"], event["metadata"]) == ("compat", "main", {"k": 1})
        waited = await call(client, "mempalace_event_wait", topic="compat", exclude_from_agent="nobody",
                            timeout_ms=1000)
        assert waited["count"] == 1
        with pytest.raises(MCPError) as misspelt:
            await client.call_tool("mempalace_event_wait", {"topik": "compat", "timeout_ms": 10})
        assert misspelt.value.code == -32602 and "Unknown parameter 'topik'" in str(misspelt.value)


async def test_an_agent_asks_a_person_over_mcp_and_keeps_waiting_by_question_id(daemon, ctl):
    """Questions through the official MCP client: the agent asks (bounded by wait_s, then keeps
    waiting by question_id); the person answers with palacectl (never through an agent's tools:
    a model must not be able to answer for a person)."""
    async with adapter(daemon.home, "mac-claude") as agent:
        asked = await call(agent, "mempalace_ask_human", question="Ship v2 today?", to="human:ana",
                           choices=["yes", "no"], wait_s=0)
        assert asked["status"] == "open" and asked["timed_out"] is True and asked["asked_by"] == "mac-claude"
        [listed] = (await call(agent, "mempalace_questions", to="human:ana", status="open"))["questions"]
        assert listed["question_id"] == asked["question_id"] and listed["choices"] == ["yes", "no"]
        tools = {t.name for t in (await agent.list_tools()).tools}
        assert "mempalace_ask_human" in tools and not any("answer" in name for name in tools)
        answered = ctl("answer", asked["question_id"], "No", "--as", "human:ana", "--json")
        assert answered.returncode == 0, answered
        waited = await call(agent, "mempalace_ask_human", question_id=asked["question_id"], wait_s=5)
        assert waited["status"] == "answered" and waited["answer"]["by"] == "human:ana"
        assert waited["answer"]["text"] == "no"
        missing = await call(agent, "mempalace_ask_human", to="human:ana")
        assert missing["success"] is False and "question is required" in missing["error"]
        cost = await call(agent, "mempalace_usage", by="agent")
        assert cost["totals"] == [] and cost["by"] == "agent"


async def approve(client: Any, **args: Any) -> dict[str, Any]:
    """What Claude Code reads of the approve tool: exactly one text block holding the JSON."""
    with trio.fail_after(90):
        result = await client.call_tool("approve", args)
    assert result.is_error is False and result.structured_content is None and len(result.content) == 1, result
    return json.loads(result.content[0].text)


async def test_the_approve_tool_answers_a_runs_permission_requests_by_policy_or_by_a_person(daemon, ctl):
    """Issue 28: what Claude Code's --permission-prompt-tool calls in a launched run. The policy
    allows and refuses on its own; the rest is a question on the task that the run waits on,
    and the person's answer (or the timeout, as a deny) is what the harness is told."""
    import os

    (daemon.home / "config.toml").write_text('[permissions]\nask_to = "human:ana"\n'
                                              '[permissions.claude]\ntimeout = 60\n', encoding="utf-8")
    worktree = daemon.home.parent / "worktree"  # the run's: the server's working directory (issue 43)
    worktree.mkdir()
    task = ctl_json(daemon.home, "task", "create", "--project", "rig", "--from-agent", "boss", "--to-agent",
                    "linux-claude", "--goal", "Deploy", "--branch", "main", "--base-commit", "a" * 40, "--done",
                    "deployed")["task"]["correlation_id"]
    ctl_json(daemon.home, "task", "claim", task, "--agent", "linux-claude")  # a run asks on the task it holds
    params = StdioServerParameters(command=PYTHON, args=["-m", "palacectl", "mcp", "--agent", "linux-claude", "--home",
                                                         str(daemon.home), "--tools", "approvals"],
                                   env={**os.environ, "PALACE_TASK_ID": task, "PALACE_RUNNER": "claude"},
                                   cwd=worktree)
    async with Client(params) as run:
        assert [t.name for t in (await run.list_tools()).tools] == ["approve"]
        inside = str(worktree / "a.py")
        read = await approve(run, tool_name="Read", input={"file_path": inside}, tool_use_id="t1")
        assert read == {"behavior": "allow", "updatedInput": {"file_path": inside}}
        push = await approve(run, tool_name="Bash", input={"command": "git push origin main"})
        assert push["behavior"] == "deny" and "Bash(git push*)" in push["message"]
        outcomes = {}

        async def request(name, command):
            outcomes[name] = await approve(run, tool_name="Bash", input={"command": command})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(request, "deploy", "make deploy")
            with trio.fail_after(30):
                while not (asked := ctl_json(daemon.home, "questions", "--status", "open")["questions"]):
                    await trio.sleep(0.1)
            [question] = asked
            assert question["to"] == "human:ana" and question["correlation_id"] == task
            assert "linux-claude asks to run Bash: make deploy" in question["question"]
            assert ctl("answer", question["question_id"], "allow", "--as", "human:ana").returncode == 0
        assert outcomes["deploy"] == {"behavior": "allow", "updatedInput": {"command": "make deploy"}}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(request, "drop", "psql -c 'drop table orders'")
            with trio.fail_after(30):
                while not (asked := ctl_json(daemon.home, "questions", "--status", "open")["questions"]):
                    await trio.sleep(0.1)
            assert ctl("answer", asked[0]["question_id"], "deny", "--as", "human:ana").returncode == 0
        assert outcomes["drop"]["behavior"] == "deny" and "human:ana said no" in outcomes["drop"]["message"]
    (daemon.home / "config.toml").write_text('[permissions]\ntimeout = 1\n', encoding="utf-8")
    async with Client(params) as run:
        silent = await approve(run, tool_name="Bash", input={"command": "make deploy"})
        assert silent["behavior"] == "deny" and "silence is never a yes" in silent["message"]
    (daemon.home / "config.toml").write_text('[permissions]\nallow = "Bash"\n', encoding="utf-8")
    async with Client(params) as run:
        broken = await approve(run, tool_name="Read", input={"file_path": "x"})
        assert broken["behavior"] == "deny" and "must be a list of rules" in broken["message"]
