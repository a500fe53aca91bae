"""The MCP protocol layer (palacectl/mcp_server.py) over real pipes: a ``palacectl mcp`` process
(or a small server built on the same layer) spoken to line by line, as a harness does.

Guards issue 26: the first answers come before trio (or the daemon) is needed, both handshake
generations are answered, a bad line is answered and skipped, batches and cancellation work, and
arguments are coerced the lax way models need and refused when they cannot be.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

PYTHON = sys.executable

SERVER = textwrap.dedent('''
    import sys
    from palacectl.mcp_server import StdioServer
    server = StdioServer("probe", "1.0", "a probe")

    @server.tool("Echo what it was given, and whether trio was loaded to answer it.", read_only=True)
    async def echo(text: str, times: int = 1, loud: bool = False, tags: list[str] | None = None) -> dict:
        return {"text": text * times, "loud": loud, "tags": tags, "trio": "trio" in sys.modules}

    @server.tool("Sleep (cancellable).", read_only=False)
    async def nap(seconds: float) -> dict:
        import trio
        await trio.sleep(seconds)
        return {"slept": seconds}

    @server.resource("probe://item/{name}", name="item", mime_type="text/plain", description="An item.")
    async def item(name: str) -> str:
        return "item " + name

    server.serve_stdio()
''')


class Peer:
    """A server process spoken to over its stdin/stdout, one JSON message per line."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env)

    def send(self, message: Any) -> None:
        raw = message if isinstance(message, bytes) else json.dumps(message).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def receive(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read().decode() if self.proc.stderr else "no answer"
        return json.loads(line)

    def ask(self, message: Any) -> Any:
        self.send(message)
        return self.receive()

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=30)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()


@pytest.fixture
def peer(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    p = Peer([PYTHON, str(script)])
    yield p
    p.stop()


def request(message_id: int, method: str, params: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"jsonrpc": "2.0", "id": message_id, "method": method, "params": dict(params or {})}
    if meta:
        out["params"]["_meta"] = meta
    return out


def test_the_legacy_handshake_and_listing_are_answered_before_trio_is_imported(peer):
    init = peer.ask(request(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                              "clientInfo": {"name": "t", "version": "1"}}))
    assert init["result"]["protocolVersion"] == "2025-06-18" and init["result"]["serverInfo"]["name"] == "probe"
    peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    tools = peer.ask(request(2, "tools/list"))["result"]["tools"]
    (echo,) = [t for t in tools if t["name"] == "echo"]
    assert echo["inputSchema"] == {"type": "object", "required": ["text"], "properties": {
        "text": {"type": "string"}, "times": {"type": "integer", "default": 1},
        "loud": {"type": "boolean", "default": False}, "tags": {"type": "array", "items": {"type": "string"}}}}
    assert echo["annotations"] == {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True,
                                   "openWorldHint": False}
    assert next(t for t in tools if t["name"] == "nap")["annotations"] == {
        "readOnlyHint": False, "destructiveHint": False, "idempotentHint": False, "openWorldHint": False}
    # The first call needs the async server: trio comes in then, not before.
    called = peer.ask(request(3, "tools/call", {"name": "echo", "arguments": {"text": "a"}}))
    assert called["result"]["structuredContent"]["trio"] is True
    assert called["result"]["content"][0]["text"] == '{"text":"a","loud":false,"tags":null,"trio":true}'  # compact
    assert peer.close() == 0


def test_an_unknown_version_is_answered_with_the_newest_and_the_2026_generation_is_answered_too(peer):
    init = peer.ask(request(1, "initialize", {"protocolVersion": "1999-01-01"}))
    assert init["result"]["protocolVersion"] == "2025-11-25"
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    found = peer.ask(request(2, "server/discover", **meta))["result"]
    assert found["supportedVersions"] == ["2026-07-28"] and found["resultType"] == "complete"
    listed = peer.ask(request(3, "tools/list", **meta))["result"]
    assert listed["resultType"] == "complete" and listed["cacheScope"] == "private"


def test_arguments_are_coerced_the_lax_way_and_refused_when_they_cannot_be(peer):
    got = peer.ask(request(1, "tools/call", {"name": "echo", "arguments": {
        "text": "ab", "times": "2", "loud": "true", "tags": ["x"]}}))["result"]
    assert got["isError"] is False and got["structuredContent"]["text"] == "abab" and got["structuredContent"]["loud"]
    bad = peer.ask(request(2, "tools/call", {"name": "echo", "arguments": {"text": "a", "times": "many"}}))["result"]
    assert bad["isError"] is True and "times must be an integer" in bad["content"][0]["text"]
    missing = peer.ask(request(3, "tools/call", {"name": "echo", "arguments": {}}))["result"]
    assert missing["isError"] is True and "Missing required parameter 'text' for tool echo" in missing["content"][0]["text"]
    unknown = peer.ask(request(4, "tools/call", {"name": "echo", "arguments": {"text": "a", "txet": 1}}))
    assert unknown["error"]["code"] == -32602 and "Unknown parameter 'txet' for tool echo" in unknown["error"]["message"]
    nope = peer.ask(request(5, "tools/call", {"name": "nope", "arguments": {}}))["result"]
    assert nope == {"content": [{"type": "text", "text": "Unknown tool: nope"}], "isError": True}


def test_bad_lines_are_answered_and_skipped_and_the_server_goes_on(peer):
    peer.send(b"{not json")
    assert peer.receive()["error"]["code"] == -32700
    peer.send([1, 2])
    assert all(r["error"]["code"] == -32600 for r in peer.receive())
    assert peer.ask(request(1, "bogus/method"))["error"] == {"code": -32601, "message": "Method not found",
                                                             "data": "bogus/method"}
    odd_id = {"jsonrpc": "2.0", "id": {"not": "hashable"}, "method": "ping"}
    assert peer.ask(odd_id)["error"] == {"code": -32600, "message": "Invalid request id"}
    batch = [request(2, "ping"), {"jsonrpc": "2.0", "method": "notifications/initialized"}, request(3, "ping")]
    assert [r["id"] for r in peer.ask(batch)] == [2, 3]
    # The same once the async server runs.
    assert peer.ask(request(4, "tools/call", {"name": "echo", "arguments": {"text": "a"}}))["result"]["isError"] is False
    peer.send(b"{not json")
    assert peer.receive()["error"]["code"] == -32700
    assert peer.ask({**request(6, "tools/call", {"name": "echo", "arguments": {"text": "a"}}), "id": [1]})["error"][
        "message"] == "Invalid request id"
    assert peer.ask(request(5, "ping"))["result"] == {}


def test_a_cancelled_call_is_not_answered_and_others_run_beside_a_long_one(peer):
    peer.send(request(1, "tools/call", {"name": "nap", "arguments": {"seconds": 60}}))
    started = time.monotonic()
    assert peer.ask(request(2, "tools/call", {"name": "echo", "arguments": {"text": "x"}}))["id"] == 2
    peer.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
    assert peer.ask(request(3, "ping"))["id"] == 3  # no answer to 1 came first
    assert time.monotonic() - started < 30


def test_resources_by_template(peer):
    read = peer.ask(request(1, "resources/read", {"uri": "probe://item/pen"}))["result"]
    assert read["contents"] == [{"uri": "probe://item/pen", "mimeType": "text/plain", "text": "item pen"}]
    templates = peer.ask(request(2, "resources/templates/list"))["result"]["resourceTemplates"]
    assert templates[0]["uriTemplate"] == "probe://item/{name}"
    missing = peer.ask(request(3, "resources/read", {"uri": "probe://item/a/b"}))
    assert missing["error"]["code"] == -32602


def test_palacectl_mcp_lists_its_tools_without_loading_trio_or_the_command_line(tmp_path):
    """The first answers of ``palacectl mcp`` need neither trio nor typer (their imports are most
    of what made Codex start sessions without palace's tools)."""
    probe = ("import sys; from pathlib import Path; from palacectl import __main__ as m; "
             "from palacectl.mcp_adapter import PalaceMCP; s = PalaceMCP(Path(sys.argv[1]), 'a'); "
             "listed = s.answer_static('tools/list', {}); "
             "print(len(listed['tools']), sorted(x for x in ('trio', 'typer', 'mcp') if x in sys.modules))")
    out = subprocess.run([PYTHON, "-c", probe, str(tmp_path)], capture_output=True, text=True, check=True)
    assert out.stdout.split(None, 1) == ["42", "[]\n"]


def test_palacectl_mcp_with_anything_else_goes_through_the_command_line(tmp_path):
    env = {**os.environ, "PALACE_HOME": str(tmp_path)}
    helped = subprocess.run([PYTHON, "-m", "palacectl", "mcp", "--help"], capture_output=True, text=True, env=env)
    assert helped.returncode == 0 and "--agent" in helped.stdout
    person = subprocess.run([PYTHON, "-m", "palacectl", "mcp", "--agent", "human:root"], capture_output=True,
                            text=True, env=env, stdin=subprocess.DEVNULL)
    assert person.returncode == 64 and "is a person's id" in person.stderr  # EXIT_USAGE
    p = Peer([PYTHON, "-m", "palacectl", "mcp", "--agent", "probe", "--home", str(tmp_path)])
    try:
        init = p.ask(request(1, "initialize", {"protocolVersion": "2025-06-18"}))
        assert init["result"]["serverInfo"]["name"] == "palace"
        called = p.ask(request(2, "tools/call", {"name": "mempalace_inbox", "arguments": {}}))["result"]
        assert "palaced is not running" in called["structuredContent"]["error"]
    finally:
        p.stop()


def test_a_line_past_the_bound_is_refused_without_being_kept(tmp_path):
    from palacectl import mcp_server

    script = tmp_path / "server.py"
    script.write_text("import palacectl.mcp_server as m\nm.MAX_LINE_BYTES = 1000\n" + SERVER)
    p = Peer([PYTHON, str(script)])
    try:
        p.send(b'{"jsonrpc":"2.0","id":1,"method":"ping","pad":"' + b"x" * 5000 + b'"}')
        assert "over 1000 bytes" in p.receive()["error"]["message"]
        assert p.ask(request(2, "ping"))["id"] == 2
        # The same once the async server reads (one reader of lines serves both).
        assert p.ask(request(3, "tools/call", {"name": "echo", "arguments": {"text": "a"}}))["id"] == 3
        p.send(b'{"jsonrpc":"2.0","id":4,"method":"ping","pad":"' + b"x" * 5000 + b'"}')
        assert "over 1000 bytes" in p.receive()["error"]["message"]
        assert p.ask(request(5, "ping"))["id"] == 5
    finally:
        p.stop()
    assert mcp_server.MAX_LINE_BYTES == 64 * 1024 * 1024


# -- what a harness is offered (palacectl/tool_sets.py) -------------------------------------------

def palacectl_mcp(tmp_path: Any, *tools: str) -> Peer:
    return Peer([PYTHON, "-m", "palacectl", "mcp", "--agent", "probe", "--home", str(tmp_path), *tools])


def listing(tmp_path: Any, *tools: str) -> tuple[list[dict[str, Any]], int]:
    """The tools a ``palacectl mcp`` lists, and the bytes of what of them reaches the model: each
    tool's name, description and input schema, compact JSON. A harness gives its model no more of
    a tool (Claude Code keeps the output schema and the annotations to itself: anthropics/claude-code
    #54197, #90150; an OpenAI function tool is a name, a description and its parameters)."""
    p = palacectl_mcp(tmp_path, *tools)
    try:
        p.ask(request(1, "initialize", {"protocolVersion": "2025-06-18"}))
        p.send(request(2, "tools/list"))
        assert p.proc.stdout is not None
        line = p.proc.stdout.readline()
    finally:
        p.stop()
    result = json.loads(line)["result"]
    seen = [{key: tool[key] for key in ("name", "description", "inputSchema")} for tool in result["tools"]]
    return result["tools"], len(json.dumps(seen, ensure_ascii=False, separators=(",", ":")).encode())


def test_the_default_tool_set_is_the_delegation_loop_within_its_budget(tmp_path):
    """Guards issue 26's budget: every turn of every agent pays for the listed schemas. The
    default set covers the whole loop and weighs at most 6 KB; a tool or argument added to it
    that pushes it past the budget fails here (move it to a group, or name it as an extra)."""
    from palacectl.tool_sets import CORE_BUDGET_BYTES, GROUPS

    tools, size = listing(tmp_path)
    names = [t["name"] for t in tools]
    assert names == list(GROUPS["core"])
    loop = {"session_start", "inbox", "event_append", "event_ack", "event_wait", "patch_submit", "artifact_get",
            "task_create", "task_ready", "task_claim", "search", "add_drawer"}
    assert {f"mempalace_{n}" for n in loop} <= set(names)
    assert size <= CORE_BUDGET_BYTES, f"the model's part of the default tools/list is {size} bytes, over {CORE_BUDGET_BYTES}"
    everything, full_size = listing(tmp_path, "--tools", "all")
    assert len(everything) == 42 and full_size > 2 * size
    # What a compact listing leaves out of a schema, its description names (and calls accept).
    wait = next(t for t in tools if t["name"] == "mempalace_event_wait")
    assert "exclude_from_agent" not in wait["inputSchema"]["properties"]
    assert "exclude_from_agent" in wait["description"]
    full_wait = next(t for t in everything if t["name"] == "mempalace_event_wait")
    assert "exclude_from_agent" in full_wait["inputSchema"]["properties"]


def test_groups_add_to_the_default_and_a_tool_outside_the_set_is_refused_naming_its_group(tmp_path):
    from palacectl.tool_sets import GROUPS

    tools, _ = listing(tmp_path, "--tools", "core,leases")
    assert [t["name"] for t in tools] == [*GROUPS["core"], *GROUPS["leases"]]
    alone, _ = listing(tmp_path, "--tools", "kg_query")
    assert [t["name"] for t in alone] == ["mempalace_kg_query"]
    p = palacectl_mcp(tmp_path)
    try:
        p.ask(request(1, "initialize", {"protocolVersion": "2025-06-18"}))
        refused = p.ask(request(2, "tools/call", {"name": "mempalace_kg_query", "arguments": {"entity": "x"}}))
        assert refused["result"]["isError"] is True
        text = refused["result"]["content"][0]["text"]
        assert "mempalace_kg_query is not offered here" in text and "--tools core,memory" in text
    finally:
        p.stop()


def test_an_unknown_argument_to_a_tool_without_any_says_it_takes_none(tmp_path):
    """Guards issue 47 §1.6: the refusal of an unknown argument listed what the tool takes, and for
    a tool of no arguments said "it takes: )"."""
    p = palacectl_mcp(tmp_path, "--tools", "all")
    try:
        p.ask(request(1, "initialize", {"protocolVersion": "2025-06-18"}))
        none = p.ask(request(2, "tools/call", {"name": "mempalace_who", "arguments": {"agent": "x"}}))
        assert none["error"] == {"code": -32602, "message": (
            "Unknown parameter 'agent' for tool mempalace_who (it takes no arguments)")}
        some = p.ask(request(3, "tools/call", {"name": "mempalace_inbox_mark_read", "arguments": {"upto": "x"}}))
        assert some["error"]["message"] == ("Unknown parameter 'upto' for tool mempalace_inbox_mark_read (it takes: "
                                            "upto_event_id)")
    finally:
        p.stop()


def test_a_bad_tools_value_is_a_usage_error(tmp_path):
    env = {**os.environ, "PALACE_HOME": str(tmp_path)}
    bad = subprocess.run([PYTHON, "-m", "palacectl", "mcp", "--agent", "probe", "--tools", "core,bogus"],
                         capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=60)
    assert bad.returncode == 64 and bad.stdout == ""
    assert bad.stderr.splitlines() == [
        "palacectl: --tools: 'bogus' is not a group (core, log, memory, leases, people, rooms, light, approvals, all) "
        "or a tool name (e.g. "
        "mempalace_kg_query)"]


# -- the light tools over a real daemon (palacectl/light.py) --------------------------------------


def call_tool(p: Peer, message_id: int, tool: str, **arguments: Any) -> dict[str, Any]:
    return p.ask(request(message_id, "tools/call", {"name": tool, "arguments": arguments}))["result"]


def test_a_light_call_that_cannot_run_is_a_result_saying_so_naming_the_tool_that_takes_it(daemon):
    """Guards issue 47 §1.3: palace_query read "INBOX to: me" as words to find (unrelated drawers,
    no error), and a light call whose arguments the routed tool refused was an MCP tool error;
    MemPalace's light server answers both with {success: false, error}."""
    p = palacectl_mcp(daemon.home, "--tools", "light,core")
    try:
        p.ask(request(1, "initialize", {"protocolVersion": "2025-06-18"}))
        answers = {
            "inbox": call_tool(p, 2, "palace_query", query="INBOX to: probe"),
            "limit": call_tool(p, 3, "palace_query", query="FIND auth LIMIT many"),
            "missing": call_tool(p, 4, "palace_query", target="kg"),
            "typed": call_tool(p, 5, "palace_coordinate", command="EVENT LIST LIMIT lots"),
        }
        assert all(a["isError"] is False for a in answers.values()), answers
        got = {name: a["structuredContent"] for name, a in answers.items()}
        assert got["inbox"] == {"success": False, "error": (
            "PQL query parse error: INBOX is palace_coordinate's command, not palace_query's: call "
            "palace_coordinate with command: \"INBOX to: probe\"")}
        assert got["limit"] == {"success": False,
                                "error": 'PQL query parse error: limit must be an integer, not "many"'}
        assert got["missing"] == {"success": False, "error": (
            "PQL query parse error: Missing required parameter 'entity' for tool mempalace_kg_query")}
        assert got["typed"] == {"success": False,
                                "error": 'PQL coordinate parse error: limit must be an integer, not "lots"'}
        # The full tool called by itself answers as before: a tool error.
        direct = call_tool(p, 6, "mempalace_search", query="auth", limit="many")
        assert direct["isError"] is True and "limit must be an integer" in direct["content"][0]["text"]
    finally:
        p.stop()
