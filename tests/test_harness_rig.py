"""The harness rig's pure parts (tests/harness_rig): SSE framing, each provider dialect's reading
and writing, script stepping, result unwrapping, tool-name matching, and reading the README's
harness blocks. No harness, no network: the e2e tests that use the rig are test_harness_loop.py and
test_harness_launch.py."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tests.harness_rig import sse
from tests.harness_rig.dialects import Anthropic, ChatCompletions, Gemini, Responses, schema_example
from tests.harness_rig.readme import SnippetError, harness_setups
from tests.harness_rig.script import Call, Script, Text, ToolCall, ToolResult, palace_json, resolve_tool

README = Path(__file__).resolve().parent.parent / "README.md"


# -- SSE ------------------------------------------------------------------------------------------

def test_sse_frames_named_and_unnamed_records_and_parses_them_back():
    stream = sse.frames([("message_start", {"a": 1}), (None, {"b": "x y"}), (None, "[DONE]")])
    assert stream == b'event: message_start\ndata: {"a":1}\n\ndata: {"b":"x y"}\n\ndata: [DONE]\n\n'
    assert sse.parse(stream) == [("message_start", '{"a":1}'), (None, '{"b":"x y"}'), (None, "[DONE]")]


def test_sse_keeps_each_record_on_one_data_line_and_parse_drops_an_unfinished_record():
    with pytest.raises(ValueError):
        sse.frame("two\nlines")
    assert sse.frame({"text": "a\nb"}) == b'data: {"text":"a\\nb"}\n\n'  # JSON escapes the newline
    assert sse.parse(b": comment\ndata: 1\n\ndata: 2") == [(None, "1")]


# -- the dialects -----------------------------------------------------------------------------------

def events_of(reply):
    assert reply.content_type == "text/event-stream"
    return [(name, json.loads(data) if data != "[DONE]" else data) for name, data in sse.parse(reply.body)]


def test_anthropic_streams_a_tool_use_then_reads_its_result_back():
    d = Anthropic()
    body = {"model": "m", "stream": True, "system": [{"type": "text", "text": "SYSTEM"}],
            "tools": [{"name": "Bash"}, {"name": "mcp__palace__mempalace_inbox"}],
            "messages": [{"role": "user", "content": "go"}]}
    assert d.route("POST", "/v1/messages", body) == "generate"
    assert d.route("POST", "/v1/messages/count_tokens", body).status == 200
    assert d.tools(body) == ["Bash", "mcp__palace__mempalace_inbox"]
    events = events_of(d.render(ToolCall("toolu_1", "mcp__palace__mempalace_inbox", {"limit": 2}), body, "/v1/messages"))
    assert [n for n, _ in events] == ["message_start", "content_block_start", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop"]
    assert events[1][1]["content_block"] == {"type": "tool_use", "id": "toolu_1", "name": "mcp__palace__mempalace_inbox",
                                             "input": {}}
    assert json.loads(events[2][1]["delta"]["partial_json"]) == {"limit": 2}
    assert events[4][1]["delta"]["stop_reason"] == "tool_use"
    body["messages"] += [{"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1"}]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                       "content": [{"type": "text", "text": '{"count":0}'}]}]}]
    assert d.results(body) == [ToolResult("toolu_1", [{"type": "text", "text": '{"count":0}'}], False)]
    assert "SYSTEM" in d.prompt_text(body) and '{"count":0}' in d.prompt_text(body)
    final = json.loads(d.render(Text("done"), {**body, "stream": False}, "/v1/messages").body)
    assert final["content"] == [{"type": "text", "text": "done"}] and final["stop_reason"] == "end_turn"


def test_responses_names_namespaced_tools_and_calls_them_by_both_parts():
    d = Responses()
    body = {"stream": True, "input": [{"type": "message", "role": "user", "content": [{"type": "input_text",
                                                                                      "text": "hello"}]}],
            "tools": [{"type": "function", "name": "exec_command"}, {"type": "web_search"},
                      {"type": "namespace", "name": "mcp__palace", "tools": [{"type": "function",
                                                                              "name": "mempalace_inbox"}]}]}
    assert d.tools(body) == ["exec_command", "mcp__palace__mempalace_inbox"]
    events = events_of(d.render(ToolCall("call_1", "mcp__palace__mempalace_inbox", {}), body, "/v1/responses"))
    assert [n for n, _ in events] == ["response.created", "response.output_item.added", "response.output_item.done",
                                      "response.completed"]
    item = events[2][1]["item"]
    assert (item["type"], item["namespace"], item["name"], item["call_id"]) == (
        "function_call", "mcp__palace", "mempalace_inbox", "call_1")
    plain = events_of(d.render(ToolCall("call_2", "exec_command", {"cmd": "ls"}), body, "/v1/responses"))
    assert "namespace" not in plain[2][1]["item"] and json.loads(plain[2][1]["item"]["arguments"]) == {"cmd": "ls"}
    body["input"].append({"type": "function_call_output", "call_id": "call_1", "output": "Output:\n{}"})
    assert d.results(body) == [ToolResult("call_1", "Output:\n{}", False)]
    assert d.prompt_text(body).startswith("hello")


def test_responses_calls_a_freeform_tool_with_its_text_input():
    body = {"stream": True, "tools": [{"type": "custom", "name": "apply_patch"}]}
    events = events_of(Responses().render(ToolCall("c", "apply_patch", {"input": "*** Begin Patch"}), body, "/"))
    assert events[2][1]["item"] == {"type": "custom_tool_call", "id": "ctc_c", "call_id": "c", "name": "apply_patch",
                                    "input": "*** Begin Patch", "status": "completed"}


def test_chat_completions_streams_tool_call_deltas_and_ends_with_done():
    d = ChatCompletions()
    body = {"stream": True, "tools": [{"type": "function", "function": {"name": "palace_mempalace_inbox"}}],
            "messages": [{"role": "system", "content": "SYS"}, {"role": "tool", "tool_call_id": "call_0",
                                                                "content": '{"ok":1}'}]}
    events = events_of(d.render(ToolCall("call_1", "palace_mempalace_inbox", {"limit": 1}), body, "/v1/chat/completions"))
    assert events[-1] == (None, "[DONE]")
    call = events[0][1]["choices"][0]["delta"]["tool_calls"][0]
    assert call["index"] == 0 and call["id"] == "call_1" and json.loads(call["function"]["arguments"]) == {"limit": 1}
    assert events[1][1]["choices"][0]["finish_reason"] == "tool_calls"
    assert d.tools(body) == ["palace_mempalace_inbox"] and d.results(body) == [ToolResult("call_0", '{"ok":1}')]
    assert "SYS" in d.prompt_text(body)


def test_gemini_streams_a_function_call_and_answers_json_side_requests_from_their_schema():
    d = Gemini()
    path = "/v1beta/models/gemini-x:streamGenerateContent"
    body = {"systemInstruction": {"parts": [{"text": "SYS"}]},
            "tools": [{"functionDeclarations": [{"name": "mcp_palace_mempalace_inbox"}]}],
            "contents": [{"role": "user", "parts": [{"functionResponse": {"id": "call_0", "name": "x",
                                                                          "response": {"output": "{}"}}}]}]}
    assert d.route("POST", path, body) == "generate" and d.route("POST", "/v1beta/models/m:countTokens", {}).status == 200
    (_, document), = events_of(d.render(ToolCall("call_1", "mcp_palace_mempalace_inbox", {}), body, path))
    assert document["candidates"][0]["content"]["parts"] == [
        {"functionCall": {"id": "call_1", "name": "mcp_palace_mempalace_inbox", "args": {}}}]
    assert document["modelVersion"] == "gemini-x"
    assert d.results(body) == [ToolResult("call_0", {"output": "{}"}, False)] and "SYS" in d.prompt_text(body)
    routing = {"generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": {
        "type": "OBJECT", "properties": {"reasoning": {"type": "STRING"}, "score": {"type": "INTEGER"},
                                         "model": {"type": "STRING", "enum": ["flash", "pro"]}},
        "required": ["reasoning", "score", "model"]}}}
    assert json.loads(d.side_text(routing)) == {"reasoning": "", "score": 1, "model": "flash"}
    assert d.side_text({}) == "OK"


def test_schema_example_fills_what_a_schema_requires():
    assert schema_example({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "boolean"},
                                                                  "minItems": 2}, "b": {"type": "number", "minimum": 5}},
                           "required": ["a"]}) == {"a": [False, False]}
    assert schema_example({"type": "number", "minimum": 5}) == 5


# -- scripts ----------------------------------------------------------------------------------------

def test_a_script_issues_one_call_per_turn_from_the_results_so_far_and_then_its_final_words():
    issued = []
    script = Script([
        Call("mempalace_event_append", {"body": "hi"}, label="ask", on_issue=lambda: issued.append("ask")),
        lambda p: Call("mempalace_event_ack", {"event_id": p.result("ask")["event"]["id"]}, label="ack"),
    ], final="bye", id_prefix="c")
    offered = ["Bash", "mcp__palace__mempalace_event_append", "mcp__palace__mempalace_event_ack"]
    first = script.turn(offered, [], now=1.0)
    assert first == ToolCall("c0", "mcp__palace__mempalace_event_append", {"body": "hi"}) and issued == ["ask"]
    assert script.turn(offered, [], now=1.5) == first and issued == ["ask"]  # a retried request: the same call
    answer = ToolResult("c0", '{"success": true, "event": {"id": "evt_1"}}')
    second = script.turn(offered, [answer], now=3.0)
    assert second == ToolCall("c1", "mcp__palace__mempalace_event_ack", {"event_id": "evt_1"})
    assert script.outcomes[0].seconds == 2.0 and script.outcomes[0].error is None and not script.finished
    done = script.turn(offered, [answer, ToolResult("c1", '{"success": false, "error": "no such event"}')], now=4.0)
    assert done == Text("bye") and script.finished
    assert script.outcomes[1].error == "palace refused it: no such event"


def test_a_step_that_cannot_be_issued_ends_the_run_and_says_why():
    script = Script([lambda p: Call("x", {"id": p.result("missing")})], id_prefix="c")
    turn = script.turn(["Bash"], [], now=0.0)
    assert isinstance(turn, Text) and "no call labelled 'missing'" in turn.text and script.failure
    script = Script([Call("mempalace_inbox", {})], id_prefix="c")
    assert "offered 0 times" in script.turn(["Bash"], [], now=0.0).text


def test_outcome_errors_cover_harness_flags_and_non_json():
    script = Script([Call("t", {}), Call("t", {})], id_prefix="c")
    script.turn(["t"], [], now=0.0)
    script.turn(["t"], [ToolResult("c0", "MCP error -32602: bad", is_error=True)], now=1.0)
    assert script.outcomes[0].error.startswith("the harness marked the result an error")
    script.turn(["t"], [ToolResult("c0", "x"), ToolResult("c1", "timed out")], now=2.0)
    assert script.outcomes[1].error == "not palace's JSON: timed out"


def test_palace_json_unwraps_each_harness_result_form():
    inner = {"timed_out": True, "events": [], "count": 0}
    text = json.dumps(inner)
    assert palace_json(text) == inner  # Claude Code, OpenCode
    assert palace_json(f"Wall time: 0.1 seconds\nOutput:\n{text}") == inner  # Codex
    assert palace_json({"output": f"<untrusted_context>\n{text}\n</untrusted_context>"}) == inner  # Gemini CLI
    assert palace_json([{"type": "text", "text": text}]) == inner  # MCP content blocks
    assert palace_json({"content": [{"type": "text", "text": text}], "isError": False}) == inner
    assert palace_json({"success": True, "event": {"content": "x"}}) == {"success": True, "event": {"content": "x"}}
    assert palace_json("no json here") == "no json here"


def test_resolve_tool_matches_the_harness_prefix_or_exact_names():
    offered = ["Write", "mcp__palace__mempalace_event_wait", "mcp_palace_mempalace_event_waiter", "write_file"]
    assert resolve_tool("mempalace_event_wait", offered) == "mcp__palace__mempalace_event_wait"
    assert resolve_tool(("write", "write_file"), offered) == "write_file"
    with pytest.raises(ValueError, match="offered 0 times"):
        resolve_tool("event_wait", ["xevent_wait"])
    with pytest.raises(ValueError, match="offered 2 times"):
        resolve_tool("mempalace_inbox", ["a_mempalace_inbox", "b.mempalace_inbox"])


# -- the README's blocks ------------------------------------------------------------------------------

def test_the_readme_configures_each_harness_in_blocks_the_rig_can_read():
    setups = harness_setups(README.read_text(), "/opt/palace/bin/palacectl")
    claude, codex, opencode, gemini = (setups[n] for n in ("claude", "codex", "opencode", "gemini"))
    assert claude.commands[0][:6] == ["claude", "mcp", "add", "--scope", "user", "palace"]
    assert claude.commands[0][claude.commands[0].index("--") + 1] == "/opt/palace/bin/palacectl"
    assert "mcp__palace" in claude.json_file("~/.claude/settings.json")["permissions"]["allow"]
    config = tomllib.loads(codex.files["~/.codex/config.toml"][1])
    assert config["mcp_servers"]["palace"]["command"] == "/opt/palace/bin/palacectl"
    assert opencode.json_file("~/.config/opencode/opencode.json")["mcp"]["palace"]["command"][0] == \
        "/opt/palace/bin/palacectl"
    assert gemini.json_file("~/.gemini/settings.json")["mcpServers"]["palace"]["command"] == "/opt/palace/bin/palacectl"
    for setup in setups.values():
        assert setup.rules[:5] == ["rules", "--agent", setup.agent, "--harness", setup.harness], setup
        assert setup.agent.endswith(setup.harness)


def test_a_readme_missing_a_harness_block_is_refused_by_name():
    text = README.read_text()
    start = text.index("// OpenCode:")
    cut = text[:text.rindex("```json", 0, start)] + text[text.index("```", start) + 3:]
    with pytest.raises(SnippetError, match="opencode setup lacks its MCP server"):
        harness_setups(cut, "palacectl")
    with pytest.raises(SnippetError, match="no '## Use palace from your agent' section"):
        harness_setups("# palace\n", "palacectl")
