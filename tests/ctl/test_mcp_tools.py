"""What palace's MCP tools declare they return, checked against what they return (palacectl/mcp_tools.py).

Guards issue 47 §3.4: every tool that answers with ``structuredContent`` declares an
``outputSchema`` (MCP 2025-06-18 and later) that its results validate against — the daemon's
answer, a refusal (``{"success": false, "error"}`` of a writing tool, ``{"error"}`` of a reading
one) and the daemon being away — and every tool sets the four annotations deliberately. Claude
Code and the MCP SDK check a result against the tool's declared schema and refuse one that does
not match, so a schema that drifts from the daemon's answer breaks the tool: each tool is called
here on a real daemon through a real ``palacectl mcp``.

The schemas are checked with ``jsonschema`` (the validator the pinned ``mcp`` test dependency
brings and its client uses for the same check).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from tests.fleet import ctl_json
from tests.helpers import run_ctl

PYTHON = sys.executable
ME = "mac-claude"
ANNOTATIONS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
DIFF = "--- a/x.txt\n+++ b/x.txt\n@@ -1 +1 @@\n-a\n+b\n"


class Mcp:
    """A ``palacectl mcp`` spoken to line by line."""

    def __init__(self, home: Any, *extra: str) -> None:
        self.proc = subprocess.Popen([PYTHON, "-m", "palacectl", "mcp", "--agent", ME, "--home", str(home),
                                      "--tools", "all,light,approvals", *extra],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.ids = 0
        self.ask("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})
        self.tools = {t["name"]: t for t in self.ask("tools/list")["tools"]}

    def ask(self, method: str, params: dict[str, Any] | None = None) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.ids += 1
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.ids, "method": method,
                                          "params": params or {}}).encode() + b"\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        assert answer["id"] == self.ids, answer
        return answer["result"]

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """The tool's structured result, checked against its declared output schema."""
        result = self.ask("tools/call", {"name": tool, "arguments": arguments})
        assert result["isError"] is False, (tool, result)
        content = result["structuredContent"]
        jsonschema.validate(content, self.tools[tool]["outputSchema"])
        assert json.loads(result["content"][0]["text"]) == content
        return content

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def mcp(daemon: Any) -> Iterator[Mcp]:
    client = Mcp(daemon.home)
    yield client
    client.close()


def test_every_tool_declares_its_annotations_and_each_with_structured_results_an_output_schema(mcp: Mcp) -> None:
    from palacectl.tool_sets import LISTING_ORDER

    assert set(mcp.tools) == set(LISTING_ORDER)
    for name, tool in mcp.tools.items():
        assert set(tool["annotations"]) == set(ANNOTATIONS), name
        assert all(isinstance(tool["annotations"][a], bool) for a in ANNOTATIONS), name
        # Every tool stays inside the palace: its log, its people and its daemons.
        assert tool["annotations"]["openWorldHint"] is False, name
        if tool["annotations"]["readOnlyHint"]:
            assert not tool["annotations"]["destructiveHint"] and tool["annotations"]["idempotentHint"], name
        if name == "approve":  # one text block, as Claude Code's permission prompt tool must answer
            assert "outputSchema" not in tool
            continue
        schema = tool["outputSchema"]
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object", name  # MCP: an outputSchema is an object's


def test_every_tool_returns_what_its_output_schema_says(mcp: Mcp, daemon: Any) -> None:
    ctl_json(daemon.home, "init", "--palace-name", "shop", "--daemon-name", "mac")  # peers: a palace's daemons
    called: set[str] = set()

    def call(tool: str, **arguments: Any) -> dict[str, Any]:
        called.add(tool)
        return mcp.call(tool, **arguments)

    # core: the loop
    call("mempalace_session_start")
    sent = call("mempalace_event_append", type="note", stream="s", room="r", to_agent=ME, body="hi")["event"]
    told = ctl_json(daemon.home, "append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "bob",
                    "--to-agent", ME, "--body", "for you")
    call("mempalace_inbox")
    assert call("mempalace_inbox_mark_read", upto_event_id=told["id"])["moved"] is True
    call("mempalace_event_ack", event_id=sent["id"], status="claimed")
    call("mempalace_event_wait", since_event_id=sent["id"], timeout_ms=0, from_agent=ME)
    call("mempalace_event_list", limit=2)
    call("mempalace_event_list", text="hi")
    # tasks, patches, artifacts
    task = call("mempalace_task_create", project="shop", to_agent=ME, goal="g", branch="main",
                base_commit="abc1234", done="d")
    cid = task["task"]["correlation_id"]
    call("mempalace_task_ready")
    call("mempalace_task_claim", correlation_id=cid)
    call("mempalace_task_status", correlation_id=cid)
    call("mempalace_task_list")
    patch = call("mempalace_patch_submit", content=DIFF, correlation_id=cid)
    call("mempalace_artifact_get", artifact_id=patch["artifact"]["id"])
    call("mempalace_artifact_put", kind="file", content_base64="AAE=")
    call("mempalace_task_release", correlation_id=cid, reason="later")
    call("mempalace_task_reassign", correlation_id=cid, to_agent="*")
    # a review asked of this agent, on bob's patch
    reviewed = ctl_json(daemon.home, "task", "create", "--project", "shop", "--from-agent", "boss", "--to-agent", "bob",
                        "--goal", "r", "--branch", "main", "--base-commit", "abc1234", "--done", "d",
                        "--review-by", ME)["task"]["correlation_id"]
    ctl_json(daemon.home, "task", "claim", reviewed, "--agent", "bob")
    run_ctl(daemon.home, "patch", "submit", "--from-agent", "bob", "--correlation-id", reviewed, input=DIFF.encode())
    assert call("mempalace_task_review", correlation_id=reviewed, verdict="sloppy")["success"] is False
    assert call("mempalace_task_review", correlation_id=reviewed, verdict="changes_requested")["success"] is False
    # One daemon wrote both: the table never lets its own agents review it (the approval: tests/e2e/test_mcp.py).
    refused = call("mempalace_task_review", correlation_id=reviewed, verdict="approve", message="reads well")
    assert refused["success"] is False and "never the patch's author" in refused["error"], refused
    # memory
    call("mempalace_add_drawer", wing="wing_shop", room="api", content="The orders API pages with cursors.")
    call("mempalace_search", query="orders cursors")
    call("mempalace_kg_add", subject="orders", predicate="uses", object="cursors")
    call("mempalace_kg_query", entity="orders")
    call("mempalace_kg_invalidate", subject="orders", predicate="uses", object="cursors")
    call("mempalace_diary_write", entry="reviewed the api")
    call("mempalace_diary_read")
    call("mempalace_list_agents")
    call("mempalace_find_tunnels")
    # leases
    lease = call("mempalace_lease_acquire", patterns=["src/**"], project="shop")
    call("mempalace_lease_renew", lease_id=lease["lease"]["id"])
    call("mempalace_lease_check", paths=["src/a.py"], project="shop")
    call("mempalace_lease_list")
    call("mempalace_lease_release", lease_id=lease["lease"]["id"])
    # people
    asked = call("mempalace_ask_human", question="May I?", to="human:ana", choices=["yes", "no"], wait_s=0)
    call("mempalace_ask_human", question_id=asked["question_id"], wait_s=0)
    call("mempalace_questions")
    call("mempalace_usage")
    # rooms
    room = call("mempalace_room_open", project="shop", name="api shape", agenda="agree")["room"]
    call("mempalace_room_say", room_id=room["room_id"], body="cursors")
    call("mempalace_room_read", room_id=room["room_id"])
    call("mempalace_room_list")
    call("mempalace_room_close", room_id=room["room_id"], outcome="cursors")
    call("mempalace_room_close", room_id=room["room_id"], outcome="again")
    # fleet
    call("mempalace_who")
    call("mempalace_peers")
    # light: whatever they route to, and what they refuse
    call("palace_query", query="FIND orders")
    call("palace_query", query="INBOX")
    call("palace_exec", command='ADD IN wing_shop/api "cursors are opaque"')
    call("palace_coordinate", command="INBOX")
    call("palace_coordinate", command="LAUNCH rockets")
    # refusals: a reading tool's {error}, a writing tool's {success: false, error}
    assert "error" in call("mempalace_artifact_get", artifact_id="art_nope")
    assert call("mempalace_artifact_put", kind="binary", content="a")["success"] is False
    assert call("mempalace_task_claim", correlation_id="task_nope")["success"] is False
    assert set(mcp.tools) - called == {"approve"}, "a tool this test does not call"
