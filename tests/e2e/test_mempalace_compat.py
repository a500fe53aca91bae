"""MemPalace compatibility of the eight logstream MCP tools, field by field.

Written from the reference (``shared/reference/mempalace-semantics.md``: §1.2-1.7 events and
their rules, §2 artifacts, §3.1-3.2 list and wait, §4 ack, submit_patch, tasks and the MCP
surface), and driven the way a MemPalace skill drives MemPalace: the official MCP SDK client
talking to ``palacectl mcp`` over stdio, against a real palaced. Each test pins one tool's
arguments, its result shape and its error wording, so that a prompt or skill written for
MemPalace keeps working unchanged and a shape can never drift again.

Where palace differs on purpose, the test pins palace's behaviour and names the README section
("Differences from MemPalace") that says so; anything else here is MemPalace's contract.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from tests.fleet import ctl_json
from tests.helpers import PYTHON, RawClient, run_ctl_process

ME = "mac-claude"
# MemPalace's eight logstream tools (reference §4, "MCP tool surface"): each argument, and those
# MemPalace requires. A call MemPalace accepts must be accepted here: every argument must exist,
# and palace may require no more than MemPalace does.
MEMPALACE_ARGUMENTS: dict[str, tuple[set[str], set[str]]] = {
    "mempalace_event_append": (
        {"type", "stream", "room", "from_agent"},
        {"to_agent", "correlation_id", "branch", "base_commit", "status", "body", "metadata", "artifact_ids",
         "topic"}),
    "mempalace_event_list": (
        set(),
        {"stream", "room", "topic", "type", "to_agent", "from_agent", "writer", "correlation_id", "status",
         "since_event_id", "before_event_id", "since_created_at", "limit", "order", "preview"}),
    "mempalace_event_wait": (
        set(),
        {"stream", "room", "topic", "type", "to_agent", "from_agent", "writer", "correlation_id", "status",
         "since_event_id", "since_created_at", "timeout_ms", "limit"}),
    "mempalace_event_ack": ({"event_id", "from_agent"}, {"status", "body", "topic"}),
    "mempalace_artifact_put": ({"kind", "content", "created_by"}, {"metadata"}),
    "mempalace_artifact_get": ({"artifact_id"}, set()),
    "mempalace_patch_submit": (
        {"content", "from_agent", "stream"},
        {"room", "to_agent", "correlation_id", "branch", "base_commit", "body", "metadata", "topic"}),
    "mempalace_task_create": ({"project", "from_agent", "to_agent", "goal", "branch", "base_commit", "done"}, set()),
}
# What palace requires of them: MemPalace's list without the caller's identity (from_agent,
# created_by: the adapter's --agent), patch_submit's stream (taken from the task on its
# correlation_id) and artifact_put's content (or content_base64, for bytes).
PALACE_REQUIRED: dict[str, set[str]] = {
    "mempalace_event_append": {"type", "stream", "room"},
    "mempalace_event_list": set(),
    "mempalace_event_wait": set(),
    "mempalace_event_ack": {"event_id"},
    "mempalace_artifact_put": {"kind"},
    "mempalace_artifact_get": {"artifact_id"},
    "mempalace_patch_submit": {"content"},
    "mempalace_task_create": {"project", "to_agent", "goal", "branch", "base_commit", "done"},
}
# Reference §4: exactly these are mutating (hidden and refused, -32003, in read-only mode).
MEMPALACE_MUTATING = {"mempalace_event_append", "mempalace_event_ack", "mempalace_artifact_put",
                      "mempalace_patch_submit", "mempalace_task_create"}
# Reference §1.2, minus what palace has instead (README "Differences from MemPalace": the origin is
# `origin`, a key-derived id, and there is no `hlc`; `ack_of` is palace's link of an ack).
MEMPALACE_EVENT_KEYS = {"id", "seq", "origin_replica", "origin_seq", "hlc", "type", "stream", "room", "topic",
                        "from_agent", "to_agent", "correlation_id", "branch", "base_commit", "status",
                        "artifact_ids", "body", "created_at", "metadata"}
EVENT_KEYS = (MEMPALACE_EVENT_KEYS - {"origin_replica", "hlc"}) | {"origin", "ack_of"}
# Reference §2: what put returns (no content, no metadata; warnings only when there are some) and
# what get returns (origin_replica is optional there; palace has none).
PUT_KEYS = {"id", "kind", "sha256", "size_bytes", "created_by", "created_at"}
GET_KEYS = PUT_KEYS | {"content", "metadata"}
EVENT_ID_RE = re.compile(r"^evt_\d{8}T\d{6}_[0-9a-f]+$")
# Second precision in MemPalace; palace adds microseconds (README "Differences from MemPalace").
CREATED_AT_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{6})?Z$")
STATUS_ERROR = "status='bogus' is not one of: applied, blocked, claimed, failed, open, ready, superseded"
NO_NEWLINE = ("patch content does not end with a trailing newline; git apply will reject the final hunk as corrupt — "
              "store the diff byte-exactly including its trailing newline")
CRLF = ("patch content contains carriage returns (CRLF line endings); git apply often rejects CRLF diffs — generate "
        "the diff with LF endings")
# Why 8: appends sent before their replies are read; the daemon refuses more than 16 waiting.
SEED_WINDOW = 8
DIFF = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-old\n+new\n"


@contextlib.asynccontextmanager
async def adapter(home: Path, agent: str = ME, *extra: str) -> AsyncIterator[Any]:
    # Every tool, every argument listed: these tests drive the whole surface (the default set,
    # `core`, is pinned on its own in tests/ctl/test_mcp_server.py).
    tools = () if "--tools" in extra else ("--tools", "all")
    params = StdioServerParameters(command=PYTHON, args=["-m", "palacectl", "mcp", "--agent", agent, "--home",
                                                         str(home), *tools, *extra])
    async with Client(params) as client:
        yield client


async def call(client: Any, tool: str, **args: Any) -> dict[str, Any]:
    """One tool call; MemPalace answers every call with a JSON object, never a protocol error."""
    with trio.fail_after(60):
        result = await client.call_tool(tool, args)
    assert result.is_error is False, result
    return result.structured_content


def counts(home: Path) -> tuple[int, int]:
    status = ctl_json(home, "status")
    return status["events"], status["artifacts"]


# -- the tool surface ---------------------------------------------------------------------------


async def test_every_mempalace_argument_is_accepted_and_none_more_is_required(daemon):
    """Guards the argument rules of all eight tools: a MemPalace call names only arguments palace
    knows, and palace requires nothing MemPalace does not (issue 12: patch_submit required
    to_agent and correlation_id). ``from_agent``/``created_by`` are optional here because the
    adapter speaks as its ``--agent`` (README "Differences from MemPalace")."""
    async with adapter(daemon.home) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    for name, (required, optional) in MEMPALACE_ARGUMENTS.items():
        schema = tools[name].input_schema
        properties = set(schema.get("properties", {}))
        assert required | optional <= properties, (name, (required | optional) - properties)
        assert set(schema.get("required", [])) == PALACE_REQUIRED[name], name
        assert PALACE_REQUIRED[name] <= required, name
    props = {name: tools[name].input_schema["properties"] for name in MEMPALACE_ARGUMENTS}
    assert props["mempalace_event_wait"]["timeout_ms"]["default"] == 60000
    assert props["mempalace_patch_submit"]["room"]["default"] == "patches"
    assert props["mempalace_event_list"]["preview"]["default"] is False


async def test_read_only_hides_exactly_the_mempalace_mutating_tools(daemon):
    """Reference §4 and §6.1: a read-only server keeps list, wait and artifact_get, hides the five
    mutating logstream tools and refuses them with JSON-RPC -32003."""
    async with adapter(daemon.home, ME, "--read-only") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert set(MEMPALACE_ARGUMENTS) - names == MEMPALACE_MUTATING
        for tool in sorted(MEMPALACE_MUTATING):
            with pytest.raises(MCPError) as refused:
                await client.call_tool(tool, {})
            assert refused.value.code == -32003, tool


async def test_an_argument_a_tool_does_not_have_is_refused_not_ignored(daemon):
    """A misspelt filter (``to_agents`` for ``to_agent``) must not silently widen a list or a wait:
    like MemPalace (-32602 "Unknown parameter …"), the call is refused, naming the argument."""
    async with adapter(daemon.home) as client:
        for tool, unknown, args in (("mempalace_event_list", "to_agents", {"to_agents": "bob"}),
                                    ("mempalace_event_wait", "writers", {"writers": "bob", "timeout_ms": 0}),
                                    ("mempalace_event_append", "bogus",
                                     {"type": "note", "stream": "s", "room": "r", "bogus": 1})):
            with pytest.raises(MCPError) as refused:
                await client.call_tool(tool, args)
            assert refused.value.code == -32602, refused.value
            assert f"Unknown parameter '{unknown}' for tool {tool} " in str(refused.value), refused.value
        assert counts(daemon.home)[0] == 0  # nothing was written
        assert (await call(client, "mempalace_event_list", to_agent="bob"))["count"] == 0  # the right name works


async def test_the_arguments_a_harness_adds_to_every_tool_are_accepted_and_dropped(daemon):
    """Issue 26, harness 1: Gemini CLI adds ``wait_for_previous`` to every tool's schema and
    forwards it; refusing it refused every call. It is dropped; a misspelt filter still is not."""
    async with adapter(daemon.home) as client:
        listed = await call(client, "mempalace_event_list", to_agent="bob", wait_for_previous=True)
        assert listed["count"] == 0
        appended = await call(client, "mempalace_event_append", type="note", stream="s", room="r", body="hi",
                              wait_for_previous=False)
        assert appended["success"] is True and "wait_for_previous" not in appended["event"]["metadata"]
        with pytest.raises(MCPError) as refused:
            await client.call_tool("mempalace_event_list", {"to_agents": "bob", "wait_for_previous": True})
        assert refused.value.code == -32602
        assert "Unknown parameter 'to_agents' for tool mempalace_event_list " in str(refused.value)


# -- mempalace_event_append ---------------------------------------------------------------------


async def test_event_append_result_and_fields(daemon):
    """Reference §1.2-1.6: {success, event}; the event dict's keys; routing values stripped;
    body and metadata verbatim; None becomes "" and {}; artifact_ids deduplicated in the caller's
    order; created_at, id and seq set by the server; from_agent accepted when it is the caller."""
    async with adapter(daemon.home) as client:
        a = (await call(client, "mempalace_artifact_put", kind="note", content="a\n"))["artifact"]["id"]
        b = (await call(client, "mempalace_artifact_put", kind="note", content="b\n"))["artifact"]["id"]
        result = await call(client, "mempalace_event_append", type=" task.request ", stream="  project/x ",
                            room="delegation", from_agent=ME, to_agent="linux-codex", correlation_id="task_1",
                            topic="t", branch="feat/x", base_commit="abc1234", status="open",
                            body="line one\r\nünï 🧠\n", metadata={"k": [1, "v"], "z": None},
                            artifact_ids=[b, a, b])
        assert set(result) == {"success", "event"} and result["success"] is True
        event = result["event"]
        assert set(event) == EVENT_KEYS
        assert EVENT_ID_RE.match(event["id"]) and CREATED_AT_RE.match(event["created_at"])
        assert isinstance(event["seq"], int) and isinstance(event["origin_seq"], int) and event["origin_seq"] >= 1
        assert (event["type"], event["stream"], event["room"]) == ("task.request", "project/x", "delegation")
        assert (event["from_agent"], event["to_agent"], event["correlation_id"]) == (ME, "linux-codex", "task_1")
        assert (event["topic"], event["branch"], event["base_commit"], event["status"]) == (
            "t", "feat/x", "abc1234", "open")
        assert event["body"] == "line one\r\nünï 🧠\n" and event["metadata"] == {"k": [1, "v"], "z": None}
        assert event["artifact_ids"] == [b, a]
        plain = (await call(client, "mempalace_event_append", type="note", stream="s", room="r", body=None,
                            metadata=None, artifact_ids=None))["event"]
        assert (plain["body"], plain["metadata"], plain["artifact_ids"]) == ("", {}, [])
        assert plain["to_agent"] is plain["correlation_id"] is plain["status"] is plain["topic"] is None
        # Listed events keep the writer's artifact order: it is part of the signed event (MemPalace sorts them).
        listed = await call(client, "mempalace_event_list", type="task.request")
        assert listed["events"] == [event]
    assert counts(daemon.home) == (2, 2)


APPEND_ERRORS: list[tuple[dict[str, Any], str]] = [
    ({"status": "bogus"}, STATUS_ERROR),
    ({"type": "Not A Type!"}, "type='Not A Type!' is not a valid event type (lowercase letters, digits, '.', '_', "
                              "'-'; max 64 chars)"),
    ({"type": "   "}, "type must be a non-empty string"),
    ({"stream": ""}, "stream must be a non-empty string"),
    ({"room": " \t "}, "room must be a non-empty string"),
    ({"room": "r" * 257}, "room exceeds maximum length of 256 characters"),
    ({"to_agent": "a\x01b"}, "to_agent contains control characters"),
    ({"correlation_id": "c\x7f"}, "correlation_id contains control characters"),
    ({"body": "a\x00b"}, "body contains null bytes"),
    ({"body": "x" * 262_145}, "body is 262145 bytes; maximum is 262144 bytes"),
    ({"body": "é" * 131_073}, "body is 262146 bytes; maximum is 262144 bytes"),  # UTF-8 bytes, not characters
    ({"metadata": {"big": "m" * 65_536}}, "metadata exceeds maximum size of 65536 bytes"),
    ({"artifact_ids": ["art_x"]}, "artifact_ids references unknown artifact 'art_x'"),
    ({"artifact_ids": [""]}, "artifact_ids must be a list of artifact id strings"),
]


async def test_event_append_errors(daemon):
    """Reference §1.4-1.6: every rule's wording, as {success: false, error}; nothing written."""
    async with adapter(daemon.home) as client:
        for args, message in APPEND_ERRORS:
            result = await call(client, "mempalace_event_append", **{"type": "note", "stream": "s", "room": "r", **args})
            assert result == {"success": False, "error": message}, args
    assert counts(daemon.home) == (0, 0)


async def test_event_append_body_of_exactly_the_limit_and_another_identity(daemon):
    """Reference §1.6: a body of exactly max_body_bytes is accepted. The adapter speaks only as
    its --agent: a from_agent naming someone else is refused (README "Differences from MemPalace")."""
    async with adapter(daemon.home) as client:
        exact = await call(client, "mempalace_event_append", type="note", stream="s", room="r", body="x" * 262_144)
        assert exact["success"] is True and len(exact["event"]["body"]) == 262_144
        other = await call(client, "mempalace_event_append", type="note", stream="s", room="r", from_agent="bob")
        assert other["success"] is False and "speaks as 'mac-claude'" in other["error"]
    assert counts(daemon.home) == (1, 0)


# -- mempalace_event_list -----------------------------------------------------------------------


def seed(home: Path, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Append events straight through the local API, a window of requests at a time (the daemon
    reads no further while a client leaves its replies unread)."""
    results: list[dict[str, Any]] = []
    with RawClient(home / "palaced.sock") as api:
        api.hello()
        for start in range(0, len(events), SEED_WINDOW):
            window = events[start:start + SEED_WINDOW]
            first = api.next_id
            api.next_id += len(window)
            for i, fields in enumerate(window):
                api.send_message({"id": first + i, "op": "append", "args": {
                    "type": "note", "stream": "s", "room": "r", "from_agent": "tester", **fields}})
            replies = sorted((api.recv_message() for _ in window), key=lambda r: r["id"])
            assert all(r["ok"] for r in replies), [r for r in replies if not r["ok"]][:1]
            results += [r["result"] for r in replies]
    return results


async def test_event_list_result_order_cursors_and_limits(daemon):
    """Reference §3.1 and §1.7: {events, count}; newest first without since_event_id, oldest first
    with it, an explicit order always wins (any case); both cursors exclusive; limit default 50,
    at least 1, silently capped at 500; every error as {error}, word for word."""
    events = await trio.to_thread.run_sync(seed, daemon.home, [{"body": str(i)} for i in range(502)])
    ids = [e["id"] for e in events]
    async with adapter(daemon.home) as client:
        newest = await call(client, "mempalace_event_list")
        assert set(newest) == {"events", "count"} and newest["count"] == 50
        assert [e["id"] for e in newest["events"]] == ids[::-1][:50]
        after = await call(client, "mempalace_event_list", since_event_id=ids[9], limit=3)
        assert [e["id"] for e in after["events"]] == ids[10:13]
        after_desc = await call(client, "mempalace_event_list", since_event_id=ids[498], order="DESC")
        assert [e["id"] for e in after_desc["events"]] == ids[:498:-1]
        asc = await call(client, "mempalace_event_list", order="Asc", limit=2)
        assert [e["id"] for e in asc["events"]] == ids[:2]
        before = await call(client, "mempalace_event_list", before_event_id=ids[5], order="asc")
        assert [e["id"] for e in before["events"]] == ids[:5]
        capped = await call(client, "mempalace_event_list", limit=1000)
        assert capped["count"] == 500 and len(capped["events"]) == 500
        since_date = await call(client, "mempalace_event_list", since_created_at="2000-01-01", limit=1)
        assert since_date["count"] == 1
        stamp = events[-1]["created_at"][:19] + "Z"  # second precision, as MemPalace writes it: inclusive
        assert ids[-1] in [e["id"] for e in (await call(client, "mempalace_event_list", since_created_at=stamp))["events"]]
        offset = stamp.removesuffix("Z") + "+00:00"
        assert (await call(client, "mempalace_event_list", since_created_at=offset))["count"] >= 1
        future = await call(client, "mempalace_event_list", since_created_at="2999-01-01")
        assert future == {"events": [], "count": 0}
        errors = {
            "since_event_id 'evt_nope' not found": {"since_event_id": "evt_nope"},
            "before_event_id 'evt_nope' not found": {"before_event_id": "evt_nope"},
            "limit must be a positive integer": {"limit": 0},
            "order='sideways' must be 'asc' or 'desc'": {"order": "sideways"},
            "since_created_at='yesterday' is not a valid ISO-8601 date or UTC datetime (expected YYYY-MM-DD or "
            "YYYY-MM-DDTHH:MM:SSZ)": {"since_created_at": "yesterday"},
            STATUS_ERROR: {"status": "bogus"},
        }
        for message, args in errors.items():
            assert await call(client, "mempalace_event_list", **args) == {"error": message}, args


async def test_event_list_filters_broadcast_and_preview(daemon):
    """Reference §1.5, §3.1 and §1.7: equality filters; to_agent=X matches X and '*' but never an
    event without to_agent; preview cuts bodies over 200 characters (not bytes) and marks them,
    shorter ones come back untouched; preview is off by default."""
    events = await trio.to_thread.run_sync(seed, daemon.home, [
        {"to_agent": ME, "type": "task.request", "stream": "project/a", "room": "delegation", "topic": "t1",
         "correlation_id": "c1", "status": "open", "from_agent": "linux-codex", "body": "é" * 250},
        {"to_agent": "*", "type": "status", "body": "short"},
        {"type": "note", "body": "untargeted"},
        {"to_agent": "linux-codex", "from_agent": ME, "type": "task.reply", "correlation_id": "c1",
         "status": "blocked"},
    ])
    ids = [e["id"] for e in events]
    async with adapter(daemon.home) as client:
        async def listed(**args: Any) -> list[str]:
            return [e["id"] for e in (await call(client, "mempalace_event_list", order="asc", **args))["events"]]

        assert await listed(to_agent=ME) == ids[:2]
        assert await listed(to_agent="nobody") == [ids[1]]
        assert await listed(stream="project/a") == await listed(room="delegation") == await listed(topic="t1") == [ids[0]]
        assert await listed(type="task.reply") == await listed(status="blocked") == [ids[3]]
        assert await listed(correlation_id="c1") == [ids[0], ids[3]]
        assert await listed(writer="linux-codex") == [ids[0]]
        assert await listed(type="task.request", status="blocked") == []
        # palace's extra filter (README "Differences from MemPalace"), and several values mean OR.
        assert await listed(to_agent=ME, exclude_from_agent="linux-codex") == [ids[1]]
        assert await listed(type=["status", "note"]) == ids[1:3]
        full = await call(client, "mempalace_event_list", to_agent=ME, order="asc")
        assert full["events"][0]["body"] == "é" * 250 and "body_truncated" not in full["events"][0]
        preview = await call(client, "mempalace_event_list", to_agent=ME, order="asc", preview=True)
        long, short = preview["events"]
        assert long["body"] == "é" * 200 and long["body_truncated"] is True and long["body_length"] == 250
        assert set(long) == EVENT_KEYS | {"body_truncated", "body_length"}
        assert {k: v for k, v in long.items() if k not in ("body", "body_truncated", "body_length")} == {
            k: v for k, v in full["events"][0].items() if k != "body"}
        assert short == full["events"][1]


async def test_from_agent_is_the_caller_and_writer_filters_by_author_as_in_mempalace_3_11(daemon):
    """MemPalace 3.11 (#2616, reference "Changes" A): on event_list and event_wait, from_agent is
    the caller and never narrows; writer filters by author; a note (after count) says so when
    from_agent comes without writer. The 3.11 inbox sweep (to_agent=me, from_agent=me) returns
    my mail, which a writer filter would have emptied."""
    events = await trio.to_thread.run_sync(seed, daemon.home, [
        {"to_agent": ME, "from_agent": "linux-codex", "type": "task.request", "body": "for me"},
        {"to_agent": "*", "from_agent": "win-gemini", "type": "status", "body": "to everyone"},
        {"to_agent": "linux-codex", "from_agent": ME, "type": "task.reply", "body": "mine, to codex"},
    ])
    ids = [e["id"] for e in events]
    async with adapter(daemon.home) as client:
        sweep = await call(client, "mempalace_event_list", to_agent=ME, from_agent=ME, order="asc")
        assert [e["id"] for e in sweep["events"]] == ids[:2]
        assert list(sweep) == ["events", "count", "note"] and "writer=" in sweep["note"]
        by_author = await call(client, "mempalace_event_list", writer="linux-codex", from_agent=ME)
        assert [e["id"] for e in by_author["events"]] == [ids[0]] and "note" not in by_author
        assert "note" not in await call(client, "mempalace_event_list", to_agent=ME)
        assert "note" in await call(client, "mempalace_event_list", from_agent=ME, writer="  ")  # empty: no filter
        assert (await call(client, "mempalace_event_list", writer=["linux-codex", "win-gemini"], order="asc"))[
            "count"] == 2
        waited = await call(client, "mempalace_event_wait", to_agent=ME, from_agent=ME, timeout_ms=0)
        assert [e["id"] for e in waited["events"]] == ids[:2] and list(waited) == ["timed_out", "events", "count", "note"]
        mine = await call(client, "mempalace_event_wait", writer=ME, from_agent=ME, timeout_ms=0)
        assert [e["id"] for e in mine["events"]] == [ids[2]] and "note" not in mine
    # The CLI keeps its own flags: `palacectl list --from-agent` filters by author (docs/mempalace.md).
    listed = await trio.to_thread.run_sync(lambda: ctl_json(daemon.home, "list", "--from-agent", ME))
    assert [e["id"] for e in listed["events"]] == [ids[2]]


async def test_a_mempalace_host_harness_project_id_works_end_to_end(daemon):
    """MemPalace RFC 005 (3.10): agents named host:harness:project. palace accepts the grammar in
    the adapter, the rules, the log and the inbox, escapes the colons where the id names a file,
    keeps the id bound to its daemon, and keeps human: a person's prefix only."""
    me, peer = "mac:claude:shop", "win:codex:shop"
    async with adapter(daemon.home, me) as client:
        sent = await call(client, "mempalace_event_append", type="task.request", stream="project/shop", room="r",
                          to_agent=peer, body="please review")
        assert sent["event"]["from_agent"] == me
        refused = await call(client, "mempalace_event_append", type="note", stream="s", room="r", from_agent=peer)
        assert "this adapter speaks as 'mac:claude:shop'" in refused["error"]
    async with adapter(daemon.home, peer) as client:
        inbox = await call(client, "mempalace_event_list", to_agent=peer, from_agent=peer)
        assert [e["id"] for e in inbox["events"]] == [sent["event"]["id"]]
        started = await call(client, "mempalace_session_start")
        assert sent["event"]["id"] in str(started)

    def by_cli() -> None:
        rules = run_ctl_process(daemon.home, "rules", "--host", "win", "--harness", "codex", "--project", "shop")
        assert rules.returncode == 0 and "win:codex:shop" in rules.stdout, rules
        watched = run_ctl_process(daemon.home, "watch", "--agent", peer, "--from-start", "--idle-exit-ms", "2000",
                                  "--json")
        assert watched.returncode == 0 and sent["event"]["id"] in watched.stdout, watched
        assert (daemon.home / "watch" / "win_codex_shop.json").exists()  # colons escaped in the file name
        person = run_ctl_process(daemon.home, "mcp", "--agent", "human:claude:shop")
        assert person.returncode != 0 and "person's id" in person.stderr, person
        bad = run_ctl_process(daemon.home, "rules", "--host", "Windows", "--harness", "codex", "--project", "shop")
        assert bad.returncode != 0 and "--host must be a stable lowercase token" in bad.stderr, bad
        held = {a["agent"]: a for a in ctl_json(daemon.home, "agents")["agents"]}
        assert me in held  # a writer: on the roster, bound to this daemon like any id

    await trio.to_thread.run_sync(by_cli)


# -- mempalace_event_wait -----------------------------------------------------------------------


async def test_event_wait_result_timeout_and_arguments(daemon):
    """Reference §3.2: {timed_out, events, count} at once when something matches; a timeout is
    {timed_out: true, events: [], count: 0}, never an error; timeout_ms must be a non-negative
    number and is clamped (a huge one is no error); wait takes list's limit (MemPalace once
    rejected it) and its cursor errors word for word."""
    events = await trio.to_thread.run_sync(seed, daemon.home, [{"to_agent": ME}, {"to_agent": ME}])
    async with adapter(daemon.home) as client:
        hit = await call(client, "mempalace_event_wait", to_agent=ME, timeout_ms=10**12)
        assert set(hit) == {"timed_out", "events", "count"}
        assert hit["timed_out"] is False and hit["count"] == 2 and hit["events"] == events
        one = await call(client, "mempalace_event_wait", to_agent=ME, limit=1, timeout_ms=1000)
        assert one["count"] == 1 and one["events"] == events[:1]
        after = await call(client, "mempalace_event_wait", to_agent=ME, since_event_id=events[0]["id"], timeout_ms=0)
        assert after["events"] == events[1:]
        assert await call(client, "mempalace_event_wait", to_agent=ME, since_event_id=events[1]["id"],
                          timeout_ms=200) == {"timed_out": True, "events": [], "count": 0}
        assert await call(client, "mempalace_event_wait", to_agent="nobody", timeout_ms=0) == {
            "timed_out": True, "events": [], "count": 0}
        assert await call(client, "mempalace_event_wait", timeout_ms=-1) == {
            "error": "timeout_ms must be a non-negative number"}
        assert await call(client, "mempalace_event_wait", since_event_id="evt_nope", timeout_ms=0) == {
            "error": "since_event_id 'evt_nope' not found"}
        assert await call(client, "mempalace_event_wait", type="Bad", timeout_ms=0) == {
            "error": "type='Bad' is not a valid event type (lowercase letters, digits, '.', '_', '-'; max 64 chars)"}


# -- mempalace_event_ack ------------------------------------------------------------------------


async def test_event_ack_links_a_new_event_and_never_changes_the_target(daemon):
    """Reference §4 ack_event: a new event.ack with stream and room copied, topic the override or
    the target's, to_agent the target's author, correlation_id the target's (or the target's id
    when it has none), metadata {"ack_of": target}; the target is untouched; errors as
    {success: false, error}."""
    target, bare = await trio.to_thread.run_sync(seed, daemon.home, [
        {"from_agent": "linux-codex", "to_agent": ME, "stream": "project/a", "room": "delegation", "topic": "t",
         "correlation_id": "task_9", "status": "open", "type": "task.request"},
        {"from_agent": "linux-codex", "type": "note"},
    ])
    async with adapter(daemon.home) as client:
        result = await call(client, "mempalace_event_ack", event_id=target["id"], from_agent=ME, status="claimed",
                            body="on it")
        assert set(result) == {"success", "event"} and result["success"] is True
        ack = result["event"]
        assert set(ack) == EVENT_KEYS
        assert (ack["type"], ack["stream"], ack["room"], ack["topic"]) == ("event.ack", "project/a", "delegation", "t")
        assert (ack["from_agent"], ack["to_agent"], ack["correlation_id"]) == (ME, "linux-codex", "task_9")
        assert (ack["status"], ack["body"], ack["metadata"], ack["ack_of"]) == ("claimed", "on it",
                                                                                 {"ack_of": target["id"]}, target["id"])
        retopic = (await call(client, "mempalace_event_ack", event_id=target["id"], topic="other"))["event"]
        assert retopic["topic"] == "other" and retopic["status"] is None and retopic["body"] == ""
        on_bare = (await call(client, "mempalace_event_ack", event_id=bare["id"]))["event"]
        assert on_bare["correlation_id"] == bare["id"] and on_bare["to_agent"] == "linux-codex"
        unchanged = await call(client, "mempalace_event_list", type="task.request")
        assert unchanged["events"] == [target]
        assert await call(client, "mempalace_event_ack", event_id="evt_nope") == {
            "success": False, "error": "event 'evt_nope' not found"}
        assert await call(client, "mempalace_event_ack", event_id=target["id"], status="bogus") == {
            "success": False, "error": STATUS_ERROR}
    assert counts(daemon.home) == (5, 0)


# -- mempalace_artifact_put / mempalace_artifact_get -------------------------------------------


async def test_artifact_put_and_get_shapes(daemon):
    """Reference §2: put answers {success, artifact} without content or metadata, sha256 and
    size_bytes of the UTF-8 bytes; get answers {"artifact": {…, content, sha256}} — the shape
    MemPalace skills read as result["artifact"]["content"] (issue 12: it was flat) — with the
    exact content and the metadata given at put; an unknown id is {error}, word for word."""
    text = "crlf\r\nünïcødé 🧠\nno final newline"
    raw = text.encode()
    async with adapter(daemon.home) as client:
        put = await call(client, "mempalace_artifact_put", kind="file", content=text, created_by=ME,
                         metadata={"path": "a/b.txt"})
        assert set(put) == {"success", "artifact"} and put["success"] is True
        record = put["artifact"]
        assert set(record) == PUT_KEYS
        assert record["sha256"] == hashlib.sha256(raw).hexdigest() and record["size_bytes"] == len(raw)
        assert (record["kind"], record["created_by"]) == ("file", ME) and CREATED_AT_RE.match(record["created_at"])
        got = await call(client, "mempalace_artifact_get", artifact_id=record["id"])
        assert set(got) == {"artifact"}
        artifact = got["artifact"]
        assert set(artifact) == GET_KEYS
        assert artifact["content"] == text and artifact["metadata"] == {"path": "a/b.txt"}
        assert {k: artifact[k] for k in PUT_KEYS} == record
        assert hashlib.sha256(artifact["content"].encode()).hexdigest() == artifact["sha256"]
        assert await call(client, "mempalace_artifact_get", artifact_id="art_nope") == {
            "error": "artifact 'art_nope' not found"}
        # Content addressing (README "Differences from MemPalace"): the same bytes are one artifact,
        # and its sha256 finds it too.
        again = await call(client, "mempalace_artifact_put", kind="note", content=text)
        assert again["artifact"] == record
        assert (await call(client, "mempalace_artifact_get", artifact_id=record["sha256"]))["artifact"] == artifact


async def test_artifact_binary_content_comes_base64_inside_the_artifact(daemon):
    """palace's binary artifacts (README "Differences from MemPalace"): bytes that are not UTF-8
    go in as content_base64 and come back, inside "artifact", as content_base64 with
    content_is_base64 true instead of content."""
    blob = bytes(range(256)) + b"\x00\xff"
    async with adapter(daemon.home) as client:
        put = await call(client, "mempalace_artifact_put", kind="file", content_base64=base64.b64encode(blob).decode())
        assert put["artifact"]["sha256"] == hashlib.sha256(blob).hexdigest()
        got = (await call(client, "mempalace_artifact_get", artifact_id=put["artifact"]["id"]))["artifact"]
        assert set(got) == PUT_KEYS | {"metadata", "content_base64", "content_is_base64"}
        assert got["content_is_base64"] is True and base64.b64decode(got["content_base64"]) == blob


async def test_artifact_put_errors(daemon):
    """Reference §2: the closed kind set and the other rules, as {success: false, error}; nothing
    stored. Empty content is refused in palace's words (MemPalace: "content must be a non-empty
    string"); a created_by naming someone else is refused (the adapter speaks as its --agent)."""
    errors = [
        ({"kind": "binary", "content": "x"}, "kind='binary' is not one of: file, json, log, note, patch"),
        ({"kind": "file", "content": ""}, "content must not be empty"),
        ({"kind": "file", "content": "x", "metadata": {"m": "m" * 65_536}},
         "metadata exceeds maximum size of 65536 bytes"),
    ]
    async with adapter(daemon.home) as client:
        for args, message in errors:
            assert await call(client, "mempalace_artifact_put", **args) == {"success": False, "error": message}, args
        other = await call(client, "mempalace_artifact_put", kind="file", content="x", created_by="bob")
        assert other["success"] is False and "speaks as 'mac-claude'" in other["error"]
    assert counts(daemon.home) == (0, 0)


async def test_artifact_size_limit_wording(daemon_factory, short_tmp):
    """Reference §2: over the artifact limit, "content is N bytes; maximum is M bytes" (palace's
    default limit is 64 MiB, not 4 MiB: README "Differences from MemPalace")."""
    home = short_tmp / "limited"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text("[limits]\nmax_artifact_bytes = 1024\n")
    d = daemon_factory(home)
    async with adapter(d.home) as client:
        assert await call(client, "mempalace_artifact_put", kind="log", content="é" * 513) == {
            "success": False, "error": "content is 1026 bytes; maximum is 1024 bytes"}
        assert (await call(client, "mempalace_artifact_put", kind="log", content="y" * 1024))["success"] is True


async def test_patch_artifacts_warn_and_keep_every_byte(daemon):
    """Reference §2: kind patch only; a missing final newline and carriage returns each give the
    advisory warning, word for word, in artifact.warnings; a clean patch has no warnings key; the
    bytes are stored unchanged."""
    async with adapter(daemon.home) as client:
        bad = await call(client, "mempalace_artifact_put", kind="patch", content="-a\r\n+b")
        assert bad["artifact"]["warnings"] == [NO_NEWLINE, CRLF] and set(bad["artifact"]) == PUT_KEYS | {"warnings"}
        got = (await call(client, "mempalace_artifact_get", artifact_id=bad["artifact"]["id"]))["artifact"]
        assert got["content"] == "-a\r\n+b"
        clean = await call(client, "mempalace_artifact_put", kind="patch", content=DIFF)
        assert set(clean["artifact"]) == PUT_KEYS
        note = await call(client, "mempalace_artifact_put", kind="note", content="no newline\r")
        assert "warnings" not in note["artifact"]


# -- mempalace_patch_submit ---------------------------------------------------------------------


async def test_patch_submit_with_only_what_mempalace_requires(daemon):
    """Reference §4 submit_patch and issue 12: content, from_agent and stream are all MemPalace
    requires — routing is optional, and a patch without to_agent or correlation_id is still a
    valid patch.ready ({success, artifact, event}; status ready, room patches, the artifact
    linked, the metadata on both)."""
    async with adapter(daemon.home) as client:
        result = await call(client, "mempalace_patch_submit", content=DIFF, from_agent=ME, stream="project/x",
                            metadata={"tests": "pass"})
        assert set(result) == {"success", "artifact", "event"} and result["success"] is True
        artifact, event = result["artifact"], result["event"]
        assert set(artifact) == PUT_KEYS
        assert (artifact["kind"], artifact["created_by"]) == ("patch", ME)
        assert artifact["sha256"] == hashlib.sha256(DIFF.encode()).hexdigest()
        assert set(event) == EVENT_KEYS
        assert (event["type"], event["status"], event["stream"], event["room"]) == (
            "patch.ready", "ready", "project/x", "patches")
        assert event["to_agent"] is None and event["correlation_id"] is None
        assert event["artifact_ids"] == [artifact["id"]] and event["from_agent"] == ME
        assert event["metadata"] == {"tests": "pass"}
        got = (await call(client, "mempalace_artifact_get", artifact_id=artifact["id"]))["artifact"]
        assert got["content"] == DIFF and got["metadata"] == {"tests": "pass"}
        routed = await call(client, "mempalace_patch_submit", content=DIFF + "\n", stream="project/x",
                            room="review", to_agent="linux-codex", correlation_id="free-form", topic="t",
                            branch="feat/x", base_commit="abc1234", body="fixed")
        e = routed["event"]
        assert (e["room"], e["to_agent"], e["correlation_id"], e["topic"], e["branch"], e["base_commit"],
                e["body"]) == ("review", "linux-codex", "free-form", "t", "feat/x", "abc1234", "fixed")
    assert counts(daemon.home) == (2, 2)


async def test_patch_submit_takes_missing_routing_from_the_task(daemon):
    """palace's defaults when routing is missing (README "Differences from MemPalace"): with the
    task's correlation_id, the stream is the task's and the patch goes to its requester (so the
    requester's `watch --agent` wakes); with neither stream nor a correlation the error names the
    missing field and nothing is written; warnings pass through in artifact.warnings."""
    async with adapter(daemon.home, "linux-codex") as worker, adapter(daemon.home, ME) as requester:
        task = (await call(requester, "mempalace_task_create", project="Palace", to_agent="linux-codex", goal="Fix",
                           branch="main", base_commit="abc1234", done="green"))["task"]
        result = await call(worker, "mempalace_patch_submit", content=DIFF.rstrip("\n"),
                            correlation_id=task["correlation_id"])
        assert result["success"] is True and result["artifact"]["warnings"] == [NO_NEWLINE]
        event = result["event"]
        assert (event["stream"], event["to_agent"], event["correlation_id"]) == (
            "project/palace", ME, task["correlation_id"])
        missing = await call(worker, "mempalace_patch_submit", content="other\n")
        assert missing["success"] is False and missing["error"].startswith("stream must be a non-empty string")
        unknown = await call(worker, "mempalace_patch_submit", content="other\n", correlation_id="nothing-here")
        assert unknown["success"] is False and "nothing-here" in unknown["error"]
        # Validated as a whole before anything is stored: a bad field leaves no artifact behind.
        invalid = await call(worker, "mempalace_patch_submit", content="other\n", stream="s", topic="t" * 257)
        assert invalid == {"success": False, "error": "topic exceeds maximum length of 256 characters"}
    assert counts(daemon.home) == (2, 1)


# -- mempalace_task_create ----------------------------------------------------------------------


async def test_task_create_result_request_and_delivery(daemon):
    """Reference §4 tasks: {success, task, handoff}; the task.request on project/<slug>, room
    delegation, status open, correlation task_<slug(goal)>_<8 hex>, base commit lower-cased; the
    body keeps MemPalace's sections (Goal, Definition of done, Delivery) verbatim, and its
    delivery line names the MCP tool mempalace_patch_submit as well as the command (issue 12: an
    MCP-only worker was told to run palacectl only)."""
    goal, done = "Fix: the WATCH   test!\nwith details", "- tests pass\n- bench unchanged"
    async with adapter(daemon.home) as client:
        result = await call(client, "mempalace_task_create", project="Palace Core", from_agent=ME,
                            to_agent="linux-codex", goal=goal, branch="fix/watch", base_commit="ABCDEF1234",
                            done=done)
    assert set(result) == {"success", "task", "handoff"} and result["success"] is True
    task = result["task"]
    assert set(task) == EVENT_KEYS
    cid = task["correlation_id"]
    assert re.fullmatch(r"task_fix_the_watch_test_with_details_[0-9a-f]{8}", cid), cid
    assert (task["type"], task["stream"], task["room"], task["status"]) == (
        "task.request", "project/palace_core", "delegation", "open")
    assert (task["from_agent"], task["to_agent"], task["branch"], task["base_commit"]) == (
        ME, "linux-codex", "fix/watch", "abcdef1234")
    body = task["body"]
    assert body.startswith(f"Goal:\n{goal}\n\n")
    assert f"\n\nDefinition of done:\n{done}\n\nDelivery:\n" in body
    delivery = body.split("\n\nDelivery:\n", 1)[1]
    assert "mempalace_patch_submit" in delivery and "palacectl patch submit" in delivery
    assert "mempalace_event_ack" in delivery and cid in delivery and "blocked/failed" in delivery
    assert cid in result["handoff"] and "linux-codex" in result["handoff"]
    assert "mempalace_task_status" in result["handoff"] and "palacectl task show" in result["handoff"]


async def test_task_create_rules(daemon):
    """Reference §4 create_task: every field required, each with its own wording; the base commit
    a hex object id; as {success: false, error}, nothing written."""
    args = {"project": "palace", "to_agent": "linux-codex", "goal": "g", "branch": "main", "base_commit": "abc1234",
            "done": "d"}
    empty = {"project": "task project must not be empty", "to_agent": "task destination agent must not be empty",
             "goal": "task goal must not be empty", "branch": "task branch must not be empty",
             "base_commit": "task base commit must not be empty", "done": "task definition of done must not be empty"}
    async with adapter(daemon.home) as client:
        for field, message in empty.items():
            assert await call(client, "mempalace_task_create", **{**args, field: "  "}) == {
                "success": False, "error": message}, field
        for base in ("main", "abc123", "v1.2.3", "a" * 65):
            assert await call(client, "mempalace_task_create", **{**args, "base_commit": base}) == {
                "success": False, "error": "task base commit must be a hexadecimal Git object id (at least 7 "
                                           "characters), not a branch or tag"}, base
    assert counts(daemon.home) == (0, 0)


# -- the light tool set (MemPalace 3.10's mempalace-light-mcp) --------------------------------------


async def test_the_light_tool_set_has_mempalaces_three_tools_under_palaces_schema_budget(daemon):
    """Reference "Changes" B: palace_query, palace_exec, palace_coordinate, in that order; their
    schemas (compact JSON) under palace's 6 KB budget (MemPalace's weigh ~10 KB); each takes its
    command string (query / command) and the fields MemPalace's tests pin."""
    async with adapter(daemon.home, ME, "--tools", "light") as client:
        listed = (await client.list_tools()).tools
        assert [t.name for t in listed] == ["palace_query", "palace_exec", "palace_coordinate"]
        wire = [t.model_dump(mode="json", exclude_none=True) for t in listed]
        assert len(json.dumps(wire, separators=(",", ":"))) <= 6 * 1024
        schemas = {t.name: t.input_schema["properties"] for t in listed}
        assert "query" in schemas["palace_query"] and "command" in schemas["palace_exec"]
        assert {"command", "order", "limit", "preview", "since_created_at", "writer", "to_agent", "stream", "room",
                "correlation_id"} <= set(schemas["palace_coordinate"])
        assert [t.annotations.read_only_hint for t in listed] == [True, False, False]


async def test_a_light_skill_coordinates_and_remembers_through_palaces_full_tools(daemon):
    """Each verb runs the full tool of the same meaning and answers with that tool's result; a
    parse error or an unknown verb is a result ({success: false, error}); keys a tool does not
    take are dropped."""
    async with adapter(daemon.home, ME, "--tools", "light") as client:
        sent = await call(client, "palace_coordinate", command='EVENT APPEND type: task.request stream: project/shop '
                          'room: delegation to: linux-codex body: "review the api" from: mac-claude')
        assert sent["success"] is True and sent["event"]["to_agent"] == "linux-codex"
    async with adapter(daemon.home, "linux-codex", "--tools", "light") as client:
        inbox = await call(client, "palace_coordinate", command="INBOX to: linux-codex")
        assert [e["id"] for e in inbox["events"]] == [sent["event"]["id"]] and set(inbox) == {"events", "count"}
        by_author = await call(client, "palace_coordinate", command="EVENT LIST from: mac-claude", bogus_key=1)
        assert by_author["count"] == 1
        assert (await call(client, "palace_coordinate", command="EVENT LIST from: nobody"))["count"] == 0
        acked = await call(client, "palace_coordinate", command=f"EVENT ACK id: {sent['event']['id']} status: claimed")
        assert acked["success"] is True and acked["event"]["status"] == "claimed"
        waited = await call(client, "palace_coordinate", command=f"EVENT WAIT since: {sent['event']['id']} timeout: 0")
        assert waited["timed_out"] is False and waited["events"][0]["status"] == "claimed"
        filed = await call(client, "palace_exec", command='ADD IN wing_shop/api "The orders API pages with cursors."')
        assert filed["success"] is True
        found = await call(client, "palace_query", query='FIND "orders API cursors" IN wing_shop/api LIMIT 3')
        assert found["results"] and "cursors" in found["results"][0]["content"]
        fact = await call(client, "palace_exec", command="KG ADD orders-api -> uses -> cursor paging FROM 2026-12-01")
        assert fact["success"] is True
        facts = await call(client, "palace_query", query="KG orders-api")
        assert any(f["object"] == "cursor paging" for f in facts["facts"]), facts
        wrote = await call(client, "palace_exec", command='DIARY WRITE linux-codex "reviewed the api" TOPIC review')
        assert wrote["success"] is True
        diary = await call(client, "palace_query", query="DIARY linux-codex LAST 1")
        assert diary["entries"][0]["content"] == "reviewed the api"
        assert await call(client, "palace_coordinate", command="LAUNCH rockets") == {
            "success": False, "error": "PQL coordinate parse error: Unrecognized palace_coordinate command: 'LAUNCH'"}
        bad = await call(client, "palace_coordinate", command="EVENT APPEND type: note stream: s")
        assert bad == {"success": False, "error": "PQL coordinate parse error: EVENT APPEND missing required field: 'room'"}
        status = await call(client, "palace_query", query="STATUS")
        assert status["success"] is False and "mempalace_session_start" in status["error"]
        # The full tool's own rules hold: the adapter speaks as its agent.
        other = await call(client, "palace_coordinate", command="EVENT APPEND type: note stream: s room: r from: bob")
        assert other["success"] is False and "would impersonate" in other["error"]


async def test_a_read_only_light_server_lists_only_palace_query_and_refuses_writes_naming_the_tool(daemon):
    """Reference B, read-only: tools/list shows palace_query alone; a write through the hidden
    palace_coordinate is -32003 naming the full tool; its reads are still served."""
    await trio.to_thread.run_sync(seed, daemon.home, [{"to_agent": ME, "body": "hello"}])
    async with adapter(daemon.home, ME, "--tools", "light", "--read-only") as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["palace_query"]
        listed = await call(client, "palace_coordinate", command=f"INBOX to: {ME}")
        assert listed["count"] == 1
        with pytest.raises(MCPError) as refused:
            await client.call_tool("palace_coordinate", {"command": "EVENT APPEND type: note stream: s room: r"})
        assert refused.value.code == -32003 and refused.value.data == {"tool": "mempalace_event_append"}


# -- agent rooms (RFC 006, MemPalace's develop branch) -------------------------------------------


async def test_rooms_through_the_mcp_tools_with_mempalaces_names_and_shapes(daemon):
    """Reference "Changes" H: open {success, room, event, handoff}; read {room, events, more,
    count} with compact events, the reader's own turns left out after the first read; say
    {success, event, unread}; close {success, room, event, already_closed, filed, already_filed,
    wing, palace_room}, once; say after the close refused; the transcript found by search; the
    same verbs through the light tool set."""
    async with adapter(daemon.home, ME) as alice:
        opened = await call(alice, "mempalace_room_open", project="shop", name="Orders API shape",
                            agenda="Agree on the paging of /orders before anyone codes it.")
        assert set(opened) == {"success", "room", "event", "handoff"} and opened["success"] is True
        room_id = opened["room"]["room_id"]
        # MemPalace draws 8 hex digits; palace's 20 bind the id to its opening (docs/mempalace.md, H).
        assert re.fullmatch(r"room_orders-api-shape_[0-9a-f]{20}", room_id), room_id
        assert room_id in opened["handoff"]
        said = await call(alice, "mempalace_room_say", room_id=room_id, body="I propose cursor paging.")
        assert set(said) == {"success", "event", "unread"} and said["unread"] == 0
    async with adapter(daemon.home, "linux-codex") as bob:
        first = await call(bob, "mempalace_room_read", room_id=room_id)
        assert set(first) == {"room", "events", "more", "count"} and first["count"] == 2 and first["more"] is False
        assert set(first["events"][0]) >= {"id", "type", "from_agent", "to_agent", "body", "created_at"}
        reply = await call(bob, "mempalace_room_say", room_id=room_id, body="Agreed: cursors, 100 per page.")
        assert reply["success"] is True
        assert (await call(bob, "mempalace_room_read", room_id=room_id))["count"] == 0  # own turn left out
        listed = await call(bob, "mempalace_room_list", status="open")
        assert [r["room_id"] for r in listed["rooms"]] == [room_id]
    async with adapter(daemon.home, ME) as alice:
        assert (await call(alice, "mempalace_room_say", room_id=room_id, body="Done."))["unread"] == 1
        closed = await call(alice, "mempalace_room_close", room_id=room_id, outcome="Cursor paging, 100 per page.")
        assert set(closed) >= {"success", "room", "event", "already_closed", "filed", "already_filed", "wing",
                               "palace_room"}
        assert closed["success"] is True and closed["already_closed"] is False and closed["filed"] >= 3
        again = await call(alice, "mempalace_room_close", room_id=room_id)
        assert again["already_closed"] is True and again["event"]["id"] == closed["event"]["id"]
        late = await call(alice, "mempalace_room_say", room_id=room_id, body="one more thing")
        assert late == {"success": False, "error": f"room {room_id!r} is closed"}
        found = await call(alice, "mempalace_search", query="cursor paging 100 per page",
                           wing=closed["wing"], room=closed["palace_room"])
        assert any("Agreed: cursors, 100 per page." in hit["content"] for hit in found["results"]), found
        bad = await call(alice, "mempalace_room_read", room_id="orders")
        assert bad == {"error": "room_id='orders' is not a room id (expected room_<name>_<hex>)"}
    async with adapter(daemon.home, ME, "--tools", "light") as light:
        opened = await call(light, "palace_coordinate", command='ROOM OPEN project: shop name: "review" agenda: "x"')
        other = opened["room"]["room_id"]
        assert (await call(light, "palace_coordinate", command=f'ROOM SAY {other} body: "looks good"'))["success"]
        assert (await call(light, "palace_coordinate", command=f"ROOM READ {other}"))["count"] == 2
        assert (await call(light, "palace_coordinate", command=f'ROOM CLOSE {other} outcome: "merged"'))["success"]


# -- MemPalace's logstream cases over one correlation (issue 43 §2) ------------------------------
#
# MemPalace's own tests (tests/test_logstream.py, tests/test_mcp_logstream.py and
# tests/test_cli_logstream.py of its 3.x line) put several task.requests on one correlation id
# (the requester's corrected request, listed, paged, waited on and watched) and let the agent a
# request is addressed to close it with `applied`. The coordination protocol says the same: a
# correction is a new event on the same correlation, and a claimed request ends with the
# claimant's applied, failed or blocked. Each case below drives palace the way that test drives
# MemPalace: same agents, same arguments, same expectations (every write succeeds; which events
# come back, in which order). Where the case implies the task's state, `palacectl task show`
# must agree: the newest request is the task's wording and the earlier ones read as superseded;
# the closing `applied` closes the task.

# MemPalace's fixtures: requests from mac-codex to windows-codex ("_append" in its core tests,
# APPEND_ARGS in its MCP tests, on task_123 and task_mcp), from mac-fable in its CLI tests, from
# windows-grok to mac-claude in its watch tests (both on task_cli).
MP_REQUESTER, MP_ADDRESSEE = "mac-codex", "windows-codex"
MP_REQUEST: dict[str, Any] = {"type": "task.request", "stream": "project/mempalace", "room": "delegation",
                              "to_agent": MP_ADDRESSEE, "body": "Please fix search echo ranking."}
MP_CLI_REQUEST = ("--type", "task.request", "--stream", "project/mempalace", "--room", "delegation",
                  "--correlation-id", "task_cli")


async def accepted(client: Any, tool: str, **args: Any) -> dict[str, Any]:
    """A write MemPalace accepts ({success: true, event}): its event; a refusal fails the test
    with palace's words."""
    result = await call(client, tool, **args)
    assert result.get("success") is True, f"{tool} was refused: {result.get('error')}"
    return result["event"]


async def requests_on(client: Any, correlation_id: str, *changes: dict[str, Any]) -> list[dict[str, Any]]:
    """One request per ``changes`` (MP_REQUEST with them), all on ``correlation_id``, in order."""
    return [await accepted(client, "mempalace_event_append", **{**MP_REQUEST, "correlation_id": correlation_id,
                                                                **change}) for change in changes]


def ctl_accepted(home: Path, *args: str) -> dict[str, Any]:
    """A palacectl write MemPalace's CLI accepts (exit 0, the event on stdout)."""
    result = run_ctl_process(home, *args, "--json")
    assert result.returncode == 0, f"palacectl {args[0]} was refused: {result.stdout or result.stderr}"
    return json.loads(result.stdout)


def ids(events: list[dict[str, Any]]) -> list[str]:
    return [e["id"] for e in events]


def _event_id_of(node: dict[str, Any]) -> str | None:
    """The event a dict of a task view stands for (an event, or an entry naming one)."""
    for key in ("id", "event_id"):
        if isinstance(node.get(key), str) and node[key].startswith("evt_"):
            return node[key]
    return None


def superseded_in(view: Any) -> set[str]:
    """The event ids a task view marks superseded, whatever it calls the mark: listed under a key
    that names it (``superseded…: [ids or events]``), or an entry of the view standing for one
    event (``id`` or ``event_id``) that carries it (``superseded…: true`` or the superseding id,
    or ``state: superseded``)."""
    found: set[str] = set()

    def listed(value: Any) -> None:
        if isinstance(value, str) and value.startswith("evt_"):
            found.add(value)
        elif isinstance(value, dict):
            if _event_id_of(value):
                found.add(_event_id_of(value))  # type: ignore[arg-type]
            else:
                found.update(k for k in value if isinstance(k, str) and k.startswith("evt_"))
        elif isinstance(value, list):
            for item in value:
                listed(item)

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        if not isinstance(node, dict):
            return
        own_id = _event_id_of(node)
        for key, value in node.items():
            if "supersed" in str(key).lower():
                if isinstance(value, (list, dict)):
                    listed(value)
                elif value and own_id:
                    found.add(own_id)
            walk(value)
        if own_id and node.get("state") == "superseded":
            found.add(own_id)

    walk(view)
    return found


def assert_newest_request_stands(home: Path, correlation_id: str, requests: list[dict[str, Any]]) -> None:
    """`task show` of a corrected task: the newest request is its wording, the earlier ones read
    as superseded, and none of them is out of its writer's role."""
    view = ctl_json(home, "task", "show", correlation_id)
    newest, earlier = requests[-1], requests[:-1]
    assert (view["request"]["id"], view["request"]["body"]) == (newest["id"], newest["body"]), view["request"]
    assert view["state"] == "open" and view["out_of_role"] == [], (view["state"], view["out_of_role"])
    marked = superseded_in(view)
    assert set(ids(earlier)) <= marked and newest["id"] not in marked, (ids(earlier), marked)


def assert_closed(home: Path, correlation_id: str, status: str) -> None:
    """`task show` of a task its worker closed: that status, terminal, nothing out of role."""
    view = ctl_json(home, "task", "show", correlation_id)
    assert (view["state"], view["terminal"], view["out_of_role"]) == (status, True, []), (
        view["state"], view["out_of_role"])


# -- append order, limits and the newest event, over one correlation


async def test_mp_requests_on_one_correlation_list_in_append_order(daemon):
    """MemPalace tests/test_logstream.py::TestAppendList::test_events_are_ordered_by_append_order.
    Guards list order = append order (seq rising) for five requests on task_123; the core lists
    oldest first (order="asc" here: MCP's default without a cursor is newest first)."""
    async with adapter(daemon.home, MP_REQUESTER) as client:
        requests = await requests_on(client, "task_123", *({"body": f"event {i}"} for i in range(5)))
        listed = (await call(client, "mempalace_event_list", stream="project/mempalace", limit=10,
                             order="asc"))["events"]
        assert ids(listed) == ids(requests)
        assert [e["seq"] for e in listed] == sorted(e["seq"] for e in listed)
    await trio.to_thread.run_sync(assert_newest_request_stands, daemon.home, "task_123", requests)


async def test_mp_limit_and_default_over_one_correlation(daemon):
    """MemPalace tests/test_logstream.py::TestAppendList::test_limit_and_default. Guards limit
    (3 of 7) and the default page (all 7, under 50) over seven requests on task_123."""
    async with adapter(daemon.home, MP_REQUESTER) as client:
        requests = await requests_on(client, "task_123", *({"body": f"event {i}"} for i in range(7)))
        assert ids((await call(client, "mempalace_event_list", limit=3, order="asc"))["events"]) == ids(requests[:3])
        assert (await call(client, "mempalace_event_list", order="asc"))["count"] == 7
    await trio.to_thread.run_sync(assert_newest_request_stands, daemon.home, "task_123", requests)


async def test_mp_the_newest_event_is_the_second_request(daemon):
    """MemPalace tests/test_logstream.py::TestFilters::test_latest_event_id_tracks_newest. Guards
    the tip (what a watch or SSE starts at): nothing on an empty log, then the second of two
    requests on task_123 (through MCP: the first event of a newest-first list)."""
    async with adapter(daemon.home, MP_REQUESTER) as client:
        assert (await call(client, "mempalace_event_list", limit=1))["events"] == []
        requests = await requests_on(client, "task_123", {"body": "first"}, {"body": "second"})
        assert ids((await call(client, "mempalace_event_list", limit=1))["events"]) == [requests[1]["id"]]
    await trio.to_thread.run_sync(assert_newest_request_stands, daemon.home, "task_123", requests)


# -- order and cursors over one correlation


async def test_mp_order_asc_and_desc_over_one_correlation(daemon):
    """MemPalace tests/test_logstream.py::TestTopicAndOrder::test_order_asc_and_desc. Guards
    order asc / desc, desc with a limit (the tail), and the error for any other order, over three
    requests on task_123."""
    async with adapter(daemon.home, MP_REQUESTER) as client:
        e1, e2, e3 = await requests_on(client, "task_123", {"body": "First"}, {"body": "Second"}, {"body": "Third"})
        assert ids((await call(client, "mempalace_event_list", order="asc"))["events"]) == ids([e1, e2, e3])
        assert ids((await call(client, "mempalace_event_list", order="desc"))["events"]) == ids([e3, e2, e1])
        assert ids((await call(client, "mempalace_event_list", order="desc", limit=2))["events"]) == ids([e3, e2])
        assert await call(client, "mempalace_event_list", order="sideways") == {
            "error": "order='sideways' must be 'asc' or 'desc'"}
    await trio.to_thread.run_sync(assert_newest_request_stands, daemon.home, "task_123", [e1, e2, e3])


async def test_mp_since_event_id_is_exclusive_in_either_order(daemon):
    """MemPalace tests/test_logstream.py::TestTopicAndOrder::test_since_event_id_cursor_invariance_with_order.
    Guards the cursor rule: since_event_id selects strictly after the anchor, whatever the order
    (three requests on task_123)."""
    async with adapter(daemon.home, MP_REQUESTER) as client:
        e1, e2, e3 = await requests_on(client, "task_123", {"body": "1"}, {"body": "2"}, {"body": "3"})
        asc = await call(client, "mempalace_event_list", since_event_id=e1["id"], order="asc")
        assert ids(asc["events"]) == ids([e2, e3])
        desc = await call(client, "mempalace_event_list", since_event_id=e1["id"], order="desc")
        assert ids(desc["events"]) == ids([e3, e2])
    await trio.to_thread.run_sync(assert_newest_request_stands, daemon.home, "task_123", [e1, e2, e3])


async def test_mp_before_event_id_is_exclusive_in_either_order(daemon):
    """MemPalace tests/test_logstream.py::TestTopicAndOrder::test_before_event_id_filtering.
    Guards before_event_id (strictly before the anchor, in either order) and its unknown-anchor
    error, over three requests on task_123."""
    async with adapter(daemon.home, MP_REQUESTER) as client:
        e1, e2, e3 = await requests_on(client, "task_123", {"body": "1"}, {"body": "2"}, {"body": "3"})
        before_asc = await call(client, "mempalace_event_list", before_event_id=e3["id"], order="asc")
        assert ids(before_asc["events"]) == ids([e1, e2])
        before_desc = await call(client, "mempalace_event_list", before_event_id=e3["id"], order="desc")
        assert ids(before_desc["events"]) == ids([e2, e1])
        assert await call(client, "mempalace_event_list", before_event_id="evt_nope") == {
            "error": "before_event_id 'evt_nope' not found"}
    await trio.to_thread.run_sync(assert_newest_request_stands, daemon.home, "task_123", [e1, e2, e3])


async def test_mp_mcp_order_follows_the_cursor_and_any_case(daemon):
    """MemPalace tests/test_mcp_logstream.py::TestDispatch::test_context_aware_order_and_case_insensitivity.
    Guards MCP event_list's default order (newest first without a cursor, oldest first with
    since_event_id) and an explicit order in capitals winning, over three requests on task_mcp."""
    async with adapter(daemon.home, MP_REQUESTER) as client:
        ev1, ev2, ev3 = await requests_on(client, "task_mcp", {"body": "first"}, {"body": "second"},
                                          {"body": "third"})

        async def listed(**args: Any) -> list[str]:
            return ids((await call(client, "mempalace_event_list", correlation_id="task_mcp", **args))["events"])

        assert await listed() == ids([ev3, ev2, ev1])
        assert await listed(since_event_id=ev1["id"]) == ids([ev2, ev3])
        assert await listed(order="ASC") == ids([ev1, ev2, ev3])
        assert await listed(since_event_id=ev1["id"], order="DESC") == ids([ev3, ev2])
    await trio.to_thread.run_sync(assert_newest_request_stands, daemon.home, "task_mcp", [ev1, ev2, ev3])


def test_mp_cli_list_order_and_before_event_id(daemon):
    """MemPalace tests/test_cli_logstream.py::TestTopicAndOrderCli::test_list_order_and_before_event_id.
    Guards `list --order desc` and `--before-event-id` on the command line, over three requests
    from mac-fable on task_cli."""
    e1, e2, e3 = (ctl_accepted(daemon.home, "append", *MP_CLI_REQUEST, "--from-agent", "mac-fable", "--to-agent",
                               MP_ADDRESSEE, "--body", body) for body in ("1", "2", "3"))
    desc = ctl_json(daemon.home, "list", "--order", "desc")
    assert ids(desc["events"]) == ids([e3, e2, e1])
    before = ctl_json(daemon.home, "list", "--before-event-id", e3["id"], "--order", "desc")
    assert ids(before["events"]) == ids([e2, e1])
    assert_newest_request_stands(daemon.home, "task_cli", [e1, e2, e3])


# -- topics among the requests of one correlation


async def test_mp_topic_filters_the_requests_of_one_correlation(daemon):
    """MemPalace tests/test_logstream.py::TestTopicAndOrder::test_topic_append_and_list_filtering.
    Guards topic on append (a value, or none) and the topic filter, over three requests on
    task_123 (auth-v2, ui-v2, none)."""
    async with adapter(daemon.home, MP_REQUESTER) as client:
        e1, e2, e3 = await requests_on(client, "task_123", {"topic": "auth-v2", "body": "Auth work"},
                                       {"topic": "ui-v2", "body": "UI work"}, {"topic": None, "body": "General work"})
        assert (e1["topic"], e2["topic"], e3["topic"]) == ("auth-v2", "ui-v2", None)
        assert ids((await call(client, "mempalace_event_list", topic="auth-v2"))["events"]) == [e1["id"]]
        assert ids((await call(client, "mempalace_event_list", topic="ui-v2"))["events"]) == [e2["id"]]
        assert (await call(client, "mempalace_event_list", topic="nonexistent"))["events"] == []
    await trio.to_thread.run_sync(assert_newest_request_stands, daemon.home, "task_123", [e1, e2, e3])


async def test_mp_mcp_topic_order_before_ack_and_patch(daemon):
    """MemPalace tests/test_mcp_logstream.py::TestTopicAndOrderMcp::test_mcp_topic_and_order_dispatch.
    Guards, over three requests on task_mcp (topics feature-x, feature-y, feature-x): the topic
    filter newest first, then asc; the whole log desc; before_event_id desc; the addressee's ack
    with a topic override (no status); patch_submit with a topic."""
    async with adapter(daemon.home, MP_REQUESTER) as requester, adapter(daemon.home, MP_ADDRESSEE) as addressee:
        e1, e2, e3 = await requests_on(requester, "task_mcp", {"topic": "feature-x", "body": "1"},
                                       {"topic": "feature-y", "body": "2"}, {"topic": "feature-x", "body": "3"})
        assert (e1["topic"], e2["topic"]) == ("feature-x", "feature-y")
        assert ids((await call(requester, "mempalace_event_list", topic="feature-x"))["events"]) == ids([e3, e1])
        assert ids((await call(requester, "mempalace_event_list", topic="feature-x", order="asc"))["events"]) == ids(
            [e1, e3])
        assert ids((await call(requester, "mempalace_event_list", order="desc"))["events"]) == ids([e3, e2, e1])
        before = await call(requester, "mempalace_event_list", before_event_id=e3["id"], order="desc")
        assert ids(before["events"]) == ids([e2, e1])
        ack = await accepted(addressee, "mempalace_event_ack", event_id=e1["id"], from_agent=MP_ADDRESSEE,
                             topic="feature-override")
        assert ack["topic"] == "feature-override"
        patch = await accepted(requester, "mempalace_patch_submit", content="diff --git a/a b/b\n",
                               from_agent=MP_REQUESTER, stream="project/mempalace", topic="feature-patch")
        assert patch["topic"] == "feature-patch"
    await trio.to_thread.run_sync(assert_newest_request_stands, daemon.home, "task_mcp", [e1, e2, e3])


def test_mp_cli_topic_filters_the_requests_of_one_correlation(daemon):
    """MemPalace tests/test_cli_logstream.py::TestTopicAndOrderCli::test_append_and_list_topic.
    Guards `append --topic` and `list --topic` over two requests from mac-fable on task_cli."""
    e1 = ctl_accepted(daemon.home, "append", *MP_CLI_REQUEST, "--from-agent", "mac-fable", "--to-agent", MP_ADDRESSEE,
                      "--topic", "infra", "--body", "Infra task")
    assert e1["topic"] == "infra"
    e2 = ctl_accepted(daemon.home, "append", *MP_CLI_REQUEST, "--from-agent", "mac-fable", "--to-agent", MP_ADDRESSEE,
                      "--topic", "billing", "--body", "Billing task")
    assert e2["topic"] == "billing"
    listed = ctl_json(daemon.home, "list", "--topic", "infra")
    assert listed["count"] == 1 and listed["events"][0]["id"] == e1["id"]
    assert_newest_request_stands(daemon.home, "task_cli", [e1, e2])


# -- waits with a limit, and watch cursors, over one correlation


async def test_mp_wait_takes_a_limit_over_one_correlation(daemon):
    """MemPalace tests/test_mcp_logstream.py::TestDispatch::test_wait_accepts_limit_like_list.
    Guards event_wait taking list's limit (windows-codex once got -32602 for it): three requests
    on task_mcp, a wait with limit 2 returns two at once."""
    async with adapter(daemon.home, MP_REQUESTER) as client:
        requests = await requests_on(client, "task_mcp", *({"body": f"event {i}"} for i in range(3)))
        result = await call(client, "mempalace_event_wait", correlation_id="task_mcp", timeout_ms=5000, limit=2)
        assert result["timed_out"] is False and result["count"] == 2
    await trio.to_thread.run_sync(assert_newest_request_stands, daemon.home, "task_mcp", requests)


async def test_mp_a_resumed_cursor_does_not_replay(daemon):
    """MemPalace tests/test_logstream.py::TestWatchEvents::test_cursor_resumes_without_replaying.
    Guards resuming a watch at its cursor (here the MCP way, an event_wait loop): the first wait
    gets the first request, the wait after its cursor only the second (both on task_123)."""
    async with adapter(daemon.home, MP_REQUESTER) as client:
        (first,) = await requests_on(client, "task_123", {"body": "first"})
        woke = await call(client, "mempalace_event_wait", timeout_ms=100)
        assert ids(woke["events"]) == [first["id"]]
        cursor = woke["events"][-1]["id"]
        (second,) = await requests_on(client, "task_123", {"body": "second"})
        resumed = await call(client, "mempalace_event_wait", since_event_id=cursor, timeout_ms=100)
        assert ids(resumed["events"]) == [second["id"]]
    await trio.to_thread.run_sync(assert_newest_request_stands, daemon.home, "task_123", [first, second])


def watched(home: Path, *args: str) -> tuple[int, str]:
    """`palacectl watch --agent mac-claude ARGS --json`, run to its exit: (exit code, stdout)."""
    result = run_ctl_process(home, "watch", "--agent", "mac-claude", *args, "--json", timeout=60)
    return result.returncode, result.stdout


def grok_request(home: Path, body: str = "Please fix the thing.") -> dict[str, Any]:
    """MemPalace's watch-test request: windows-grok to mac-claude on task_cli."""
    return ctl_accepted(home, "append", *MP_CLI_REQUEST, "--from-agent", "windows-grok", "--to-agent", "mac-claude",
                        "--body", body)


def test_mp_watch_since_event_id_overrides_the_state_file(daemon, short_tmp):
    """MemPalace tests/test_cli_logstream.py::TestLogstreamWatch::test_since_event_id_overrides_the_state_file.
    Guards an explicit --since-event-id winning over the stored cursor: after a watch stored the
    first request, a second request on task_cli arrives, and rewinding to the first delivers one."""
    state = short_tmp / "watch.json"
    first = grok_request(daemon.home)
    code, _ = watched(daemon.home, "--state-file", str(state), "--from-start", "--idle-exit-ms", "400")
    assert code == 0
    second = grok_request(daemon.home)
    code, out = watched(daemon.home, "--state-file", str(state), "--from-start", "--since-event-id", first["id"],
                        "--idle-exit-ms", "400")
    assert code == 0 and json.loads(out)["count"] == 1
    assert_newest_request_stands(daemon.home, "task_cli", [first, second])


def test_mp_watch_tip_default_does_not_override_an_explicit_cursor(daemon):
    """MemPalace tests/test_cli_logstream.py::TestLogstreamWatch::test_tip_default_does_not_override_an_explicit_cursor.
    Guards a first run's start at the tip giving way to --since-event-id: two requests on
    task_cli, a watch from the first delivers the second."""
    first = grok_request(daemon.home)
    second = grok_request(daemon.home)
    code, out = watched(daemon.home, "--state-file", "", "--since-event-id", first["id"], "--idle-exit-ms", "400")
    assert code == 0 and json.loads(out)["count"] == 1
    assert_newest_request_stands(daemon.home, "task_cli", [first, second])


def test_mp_watch_follow_json_is_ndjson(daemon):
    """MemPalace tests/test_cli_logstream.py::TestLogstreamWatch::test_follow_json_is_ndjson_not_concatenated_documents.
    Guards `watch --follow --json` printing one parseable document per line, over two requests
    on task_cli."""
    requests = [grok_request(daemon.home), grok_request(daemon.home)]
    _, out = watched(daemon.home, "--state-file", "", "--from-start", "--follow", "--idle-exit-ms", "300")
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines, "follow mode printed nothing"
    for line in lines:
        json.loads(line)
    assert_newest_request_stands(daemon.home, "task_cli", requests)


# -- the addressee closes the request with applied


async def test_mp_the_addressee_acks_applied_with_a_new_event(daemon):
    """MemPalace tests/test_logstream.py::TestAck::test_ack_creates_new_event_and_does_not_mutate_target.
    Guards ack = a new event.ack (correlation, to_agent the requester, status applied, ack_of the
    target) leaving the open request untouched; windows-codex, the agent the request is addressed
    to, closes task_123 with it."""
    async with adapter(daemon.home, MP_REQUESTER) as requester, adapter(daemon.home, MP_ADDRESSEE) as addressee:
        (target,) = await requests_on(requester, "task_123", {"status": "open"})
        ack = await accepted(addressee, "mempalace_event_ack", event_id=target["id"], from_agent=MP_ADDRESSEE,
                             status="applied", body="Done.")
        assert ack["id"] != target["id"] and ack["type"] == "event.ack"
        assert (ack["correlation_id"], ack["to_agent"], ack["status"]) == ("task_123", MP_REQUESTER, "applied")
        assert ack["metadata"] == {"ack_of": target["id"]}
        (original,) = (await call(requester, "mempalace_event_list", type="task.request"))["events"]
        assert (original["status"], original["body"]) == ("open", target["body"])
    await trio.to_thread.run_sync(assert_closed, daemon.home, "task_123", "applied")


def test_mp_cli_ack_round_trip(daemon):
    """MemPalace tests/test_cli_logstream.py::TestLogstreamCli::test_ack_round_trip. Guards
    `ack --status applied` from windows-codex, the agent mac-fable's request on task_cli is
    addressed to: an event.ack back to the requester on the same correlation."""
    target = ctl_accepted(daemon.home, "append", *MP_CLI_REQUEST, "--from-agent", "mac-fable", "--to-agent",
                          MP_ADDRESSEE, "--body", "Please fix the thing.")
    ack = ctl_accepted(daemon.home, "ack", target["id"], "--from-agent", MP_ADDRESSEE, "--status", "applied",
                       "--body", "Done.")
    assert (ack["type"], ack["to_agent"], ack["correlation_id"]) == ("event.ack", "mac-fable", "task_cli")
    assert_closed(daemon.home, "task_cli", "applied")


# -- acks over one correlation that palace takes already


async def test_mp_a_claim_inherits_the_request_topic_or_overrides_it(daemon):
    """MemPalace tests/test_logstream.py::TestTopicAndOrder::test_ack_topic_inheritance_and_override.
    Guards an ack's topic (the target's, or the override) over two `claimed` acks by
    windows-codex on one request (task_123): the second claim is the claimant's own, no conflict."""
    async with adapter(daemon.home, MP_REQUESTER) as requester, adapter(daemon.home, MP_ADDRESSEE) as addressee:
        (request,) = await requests_on(requester, "task_123", {"topic": "compiler-team"})
        first = await accepted(addressee, "mempalace_event_ack", event_id=request["id"], status="claimed")
        assert first["topic"] == "compiler-team"
        second = await accepted(addressee, "mempalace_event_ack", event_id=request["id"], status="claimed",
                                topic="custom-override")
        assert second["topic"] == "custom-override"
    view = await trio.to_thread.run_sync(lambda: ctl_json(daemon.home, "task", "show", "task_123"))
    assert (view["state"], view["claimed_by"], view["conflicts"], view["out_of_role"]) == (
        "claimed", MP_ADDRESSEE, [], [])
