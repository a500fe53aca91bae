"""palace_proto.usage: harness usage reports, the usage event's metadata, totals and budgets.

The fixtures are our own small samples in each harness's documented shape (field names as the
harnesses print them), not copies of real runs.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palace_proto.canonical import canonical_json
from palace_proto.errors import ValidationError
from palace_proto.usage import (
    MAX_COST_USD,
    MAX_FINAL_CHARS,
    MAX_SCAN_CHARS,
    MAX_TOKENS,
    USAGE_TYPE,
    AgentBudget,
    Breach,
    Budgets,
    Record,
    Total,
    Usage,
    blocking,
    check_usage_metadata,
    final_text,
    judge_budgets,
    parse_budgets,
    parse_claude,
    parse_codex,
    parse_custom_line,
    parse_gemini,
    parse_opencode,
    parse_usage,
    record_from_event,
    spending,
    totals,
    usage_metadata,
)

# --- fixtures: one realistic sample per format ------------------------------------------------

CLAUDE_JSON = json.dumps({
    "type": "result", "subtype": "success", "is_error": False, "duration_ms": 41250, "duration_api_ms": 39000,
    "num_turns": 7, "result": "Done: the tests pass.", "session_id": "5b0c-…", "total_cost_usd": 0.1834215,
    "usage": {"input_tokens": 12, "cache_creation_input_tokens": 9000, "cache_read_input_tokens": 51000,
              "output_tokens": 1400, "server_tool_use": {"web_search_requests": 0}, "service_tier": "standard"},
    "modelUsage": {
        "claude-sonnet-4-5-20250929": {"inputTokens": 12, "outputTokens": 1400, "cacheReadInputTokens": 51000,
                                       "cacheCreationInputTokens": 9000, "webSearchRequests": 0,
                                       "costUSD": 0.1791, "contextWindow": 200000},
        "claude-haiku-4-5-20251001": {"inputTokens": 2500, "outputTokens": 200, "cacheReadInputTokens": 0,
                                      "cacheCreationInputTokens": 0, "webSearchRequests": 0,
                                      "costUSD": 0.0043215, "contextWindow": 200000},
    },
    "permission_denials": [],
})

CLAUDE_STREAM = "\n".join([
    json.dumps({"type": "system", "subtype": "init", "model": "claude-sonnet-4-5-20250929", "tools": ["Bash"]}),
    json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": "the \"result\" is near"}],
                                                 "usage": {"input_tokens": 3, "output_tokens": 10}}}),
    json.dumps({"type": "result", "subtype": "success", "is_error": False, "duration_ms": 2000, "num_turns": 1,
                "total_cost_usd": 0.01, "usage": {"input_tokens": 3, "output_tokens": 10}}),
    json.dumps({"type": "result", "subtype": "success", "is_error": False, "duration_ms": 5000, "num_turns": 2,
                "total_cost_usd": 0.02, "usage": {"input_tokens": 5, "cache_read_input_tokens": 100,
                                                  "output_tokens": 30}}),
]) + "\n"

CODEX_JSONL = "\n".join(json.dumps(e) for e in [
    {"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"},
    {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "item_0", "type": "reasoning", "text": "**Reading the tests**"}},
    {"type": "item.completed", "item": {"id": "item_1", "type": "command_execution", "command": "pytest -q",
                                        "aggregated_output": "3 passed", "exit_code": 0, "status": "completed"}},
    {"type": "item.completed", "item": {"id": "item_2", "type": "agent_message", "text": "Fixed."}},
    {"type": "turn.completed", "usage": {"input_tokens": 24763, "cached_input_tokens": 24448,
                                         "output_tokens": 122}},
]) + "\n"

CODEX_LEGACY = "\n".join(json.dumps(e) for e in [
    {"id": "0", "msg": {"type": "task_started"}},
    {"id": "0", "msg": {"type": "token_count", "info": {
        "total_token_usage": {"input_tokens": 900, "cached_input_tokens": 100, "output_tokens": 50,
                              "reasoning_output_tokens": 20, "total_tokens": 950},
        "last_token_usage": {"input_tokens": 900, "cached_input_tokens": 100, "output_tokens": 50}}}},
    {"id": "0", "msg": {"type": "token_count", "info": {
        "total_token_usage": {"input_tokens": 2000, "cached_input_tokens": 800, "output_tokens": 90},
        "last_token_usage": {"input_tokens": 1100, "cached_input_tokens": 700, "output_tokens": 40}}}},
    {"id": "0", "msg": {"type": "task_complete", "last_agent_message": "done"}},
])

GEMINI_JSON = json.dumps({
    "response": "I updated the parser.",
    "stats": {
        "models": {
            "gemini-2.5-pro": {"api": {"totalRequests": 3, "totalErrors": 0, "totalLatencyMs": 9100},
                               "tokens": {"input": 4000, "prompt": 24000, "candidates": 600, "total": 24900,
                                          "cached": 20000, "thoughts": 300, "tool": 0}},
            "gemini-2.5-flash": {"api": {"totalRequests": 1, "totalErrors": 0, "totalLatencyMs": 800},
                                 "tokens": {"input": 1500, "prompt": 1500, "candidates": 40, "total": 1540,
                                            "cached": 0, "thoughts": 0, "tool": 0}},
        },
        "tools": {"totalCalls": 2, "totalSuccess": 2, "totalFail": 0, "totalDurationMs": 300},
        "files": {"totalLinesAdded": 4, "totalLinesRemoved": 1},
    },
})

GEMINI_STREAM = "\n".join(json.dumps(e) for e in [
    {"type": "init", "timestamp": "2025-10-10T12:00:00.000Z", "session_id": "s-1", "model": "gemini-2.5-pro"},
    {"type": "message", "timestamp": "2025-10-10T12:00:00.000Z", "role": "user", "content": "fix it"},
    {"type": "tool_use", "timestamp": "2025-10-10T12:00:01.000Z", "tool_name": "Read", "tool_id": "r-1",
     "parameters": {"file_path": "a.py"}},
    {"type": "result", "timestamp": "2025-10-10T12:00:09.000Z", "status": "success",
     "stats": {"total_tokens": 5200, "input_tokens": 5000, "output_tokens": 200, "cached": 3000, "input": 2000,
               "duration_ms": 9000, "tool_calls": 1}},
])


def _opencode_step(inp, out, reasoning, read, write, cost):
    return json.dumps({"type": "step_finish", "timestamp": 1758919898483, "sessionID": "ses_1",
                       "part": {"id": "prt_1", "messageID": "msg_1", "sessionID": "ses_1", "type": "step-finish",
                                "reason": "tool-calls",
                                "tokens": {"input": inp, "output": out, "reasoning": reasoning,
                                           "cache": {"read": read, "write": write}},
                                "cost": cost}})


OPENCODE_JSONL = "\n".join([
    json.dumps({"type": "step_start", "timestamp": 1758919896305, "sessionID": "ses_1",
                "part": {"id": "prt_0", "type": "step-start"}}),
    json.dumps({"type": "text", "timestamp": 1758919897000, "sessionID": "ses_1",
                "part": {"type": "text", "text": "step_finish is a word here"}}),
    _opencode_step(11087, 145, 0, 0, 0, 0.0070147),
    _opencode_step(200, 50, 25, 11000, 300, 0.002),
])


# --- Usage --------------------------------------------------------------------------------------

def test_usage_checks_its_fields_and_rounds_cost():
    u = Usage("claude", 10, 5, cache_read_tokens=4, cost_usd=0.12345678, duration_s=1.23456)
    assert u.cost_usd == 0.123457 and u.duration_s == 1.235 and u.tokens == 15
    assert repr(u) == "<Usage claude ? in=10 out=5 cost=$0.123457>"
    assert repr(Usage("codex", 1, 2, model="gpt-5")) == "<Usage codex gpt-5 in=1 out=2 cost=?>"
    assert isinstance(Usage("x", 0, 0, cost_usd=0).cost_usd, float)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"runner": "bad runner"}, "runner"),
    ({"tokens_in": -1}, "tokens_in"),
    ({"tokens_out": True}, "tokens_out"),
    ({"tokens_in": MAX_TOKENS + 1}, "tokens_in"),
    ({"tokens_in": 1.5}, "tokens_in"),
    ({"cache_read_tokens": 11}, "cache_read_tokens"),
    ({"cache_write_tokens": -2}, "cache_write_tokens"),
    ({"cost_usd": float("nan")}, "cost_usd"),
    ({"cost_usd": -0.01}, "cost_usd"),
    ({"cost_usd": MAX_COST_USD * 2}, "cost_usd"),
    ({"cost_usd": "1"}, "cost_usd"),
    ({"model": "has space"}, "model"),
    ({"model": "x" * 200}, "model"),
    ({"duration_s": float("inf")}, "duration_s"),
    ({"turns": -1}, "turns"),
])
def test_usage_refuses_bad_fields(kwargs, field):
    args = {"runner": "claude", "tokens_in": 10, "tokens_out": 1, **kwargs}
    with pytest.raises(ValidationError) as info:
        Usage(**args)
    assert info.value.field == field


# --- parsers ------------------------------------------------------------------------------------

def test_claude_json_sums_model_usage_and_adds_cache_back():
    u = parse_claude(CLAUDE_JSON)
    assert u == Usage("claude", tokens_in=12 + 9000 + 51000 + 2500, tokens_out=1600, cache_read_tokens=51000,
                      cache_write_tokens=9000, cost_usd=round(0.1834215, 6), model="claude-sonnet-4-5-20250929",
                      duration_s=41.25, turns=7)


def test_claude_json_without_model_usage_reads_usage():
    doc = json.loads(CLAUDE_JSON)
    del doc["modelUsage"]
    doc["total_cost_usd"] = None
    doc["cost_usd"] = 0.5  # older releases' name
    u = parse_claude(json.dumps(doc, indent=2))
    assert (u.tokens_in, u.tokens_out, u.cache_read_tokens, u.cache_write_tokens) == (60012, 1400, 51000, 9000)
    assert u.cost_usd == 0.5 and u.model is None


def test_claude_verbose_json_array_takes_the_result_message():
    array = json.dumps([{"type": "system", "subtype": "init"}, {"type": "assistant", "message": {}},
                        json.loads(CLAUDE_JSON)])
    assert parse_claude(array) == parse_claude(CLAUDE_JSON)
    assert parse_claude(json.dumps([{"type": "system"}])) is None


def test_claude_stream_json_last_result_wins():
    u = parse_usage("claude", CLAUDE_STREAM)
    assert (u.tokens_in, u.tokens_out, u.cache_read_tokens, u.cost_usd, u.duration_s, u.turns) == \
        (105, 30, 100, 0.02, 5.0, 2)


def test_claude_error_result_still_counts():
    doc = {"type": "result", "subtype": "error_max_budget_usd", "is_error": True, "total_cost_usd": 0.42,
           "usage": {"input_tokens": 7, "output_tokens": 3}, "modelUsage": {}}
    assert parse_claude(json.dumps(doc)).cost_usd == 0.42


def test_claude_nothing_usable():
    assert parse_claude("Done: the tests pass.\n") is None
    assert parse_claude(json.dumps({"type": "result", "usage": {}, "total_cost_usd": 1})) is None
    assert parse_claude(json.dumps({"type": "result", "usage": "lots"})) is None


def test_claude_hostile_fields_are_ignored():
    doc = {"type": "result", "total_cost_usd": -5, "duration_ms": "soon", "num_turns": 10**12,
           "usage": {"input_tokens": 100, "output_tokens": 2**70, "cache_read_input_tokens": True},
           "modelUsage": {"bad name!": {"inputTokens": 999}, "m-1": "not an object", "m-2": {"costUSD": "1"}}}
    u = parse_claude(json.dumps(doc))
    assert u == Usage("claude", 100, 0, model="m-2")  # an entry without counts still names its model


def test_claude_model_ties_break_on_tokens_then_name():
    doc = {"type": "result", "modelUsage": {"b": {"inputTokens": 5, "outputTokens": 1},
                                           "a": {"inputTokens": 5, "outputTokens": 1},
                                           "c": {"inputTokens": 1, "outputTokens": 1}}}
    assert parse_claude(json.dumps(doc)).model == "a"


def test_codex_last_turn_completed_wins():
    u = parse_usage("codex", CODEX_JSONL)
    assert u == Usage("codex", tokens_in=24763, tokens_out=122, cache_read_tokens=24448)
    second = CODEX_JSONL + json.dumps({"type": "turn.completed", "usage": {"input_tokens": 30000,
                                                                         "cached_input_tokens": 25000,
                                                                         "output_tokens": 400}})
    assert parse_codex(second).tokens_in == 30000


def test_codex_legacy_token_count_events():
    u = parse_codex(CODEX_LEGACY)
    assert (u.tokens_in, u.tokens_out, u.cache_read_tokens, u.cost_usd, u.model) == (2000, 90, 800, None, None)
    session_file = json.dumps({"type": "event_msg", "payload": {"type": "token_count", "info": {
        "total_token_usage": {"input_tokens": 7, "output_tokens": 2}}}})
    assert parse_codex(session_file) == Usage("codex", 7, 2)


def test_codex_hostile():
    assert parse_codex("") is None
    assert parse_codex('{"type":"turn.completed","usage":[1,2]}') is None
    assert parse_codex('{"type":"turn.completed","usage":{"input_tokens":-4}}') is None
    assert parse_codex('{"msg":{"type":"token_count","info":null}}') is None
    lying = '{"type":"turn.completed","usage":{"input_tokens":5,"cached_input_tokens":50,"output_tokens":1}}'
    assert parse_codex(lying) == Usage("codex", 5, 1)  # cache larger than the input: dropped


def test_gemini_json_sums_models():
    u = parse_usage("gemini", GEMINI_JSON)
    assert u == Usage("gemini", tokens_in=25500, tokens_out=940, cache_read_tokens=20000, model="gemini-2.5-pro",
                      turns=4)


def test_gemini_stream_json():
    u = parse_gemini(GEMINI_STREAM)
    assert u == Usage("gemini", 5000, 200, cache_read_tokens=3000, model="gemini-2.5-pro", duration_s=9.0)


def test_gemini_hostile():
    assert parse_gemini(json.dumps({"response": "hi", "stats": {"models": "many"}})) is None
    assert parse_gemini(json.dumps({"response": "hi", "stats": {"models": {}}})) is None
    odd = {"stats": {"models": {"g": {"tokens": {"prompt": 10, "cached": 50, "candidates": 1},
                                      "api": {"totalRequests": -3}},
                                "bad model name": {"tokens": {"prompt": 9}}, "h": {"tokens": 5}}}}
    assert parse_gemini(json.dumps(odd)) == Usage("gemini", 10, 1, model="g")
    assert parse_gemini('{"type":"result","status":"error"}') is None


def test_opencode_sums_steps():
    u = parse_usage("opencode", OPENCODE_JSONL)
    assert u == Usage("opencode", tokens_in=11087 + 200 + 11000 + 300, tokens_out=145 + 50 + 25,
                      cache_read_tokens=11000, cache_write_tokens=300, cost_usd=0.009015, turns=2)


def test_opencode_without_json_format_reports_nothing():
    assert parse_opencode("I fixed the bug in parser.py.\n") is None
    assert parse_usage("opencode", "I fixed it.\n") is None


def test_opencode_hostile_steps_are_skipped():
    text = "\n".join([json.dumps({"type": "step_finish", "part": "x"}),
                      json.dumps({"type": "step_finish", "part": {"tokens": [1]}}),
                      json.dumps({"type": "step_finish", "part": {"tokens": {"input": "many"}}}),
                      json.dumps({"type": "step_finish", "part": {"tokens": {"input": 5, "cache": 3},
                                                                  "cost": -1}})])
    assert parse_opencode(text) == Usage("opencode", 5, 0, turns=1)


@pytest.mark.parametrize("runner", ["claude", "codex", "gemini", "opencode"])
def test_builtin_runners_fall_back_to_the_custom_line(runner):
    text = "some text\npalace-usage: tokens_in=10 tokens_out=2 cost_usd=0.5\n"
    assert parse_usage(runner, text) == Usage(runner, 10, 2, cost_usd=0.5)


# --- the custom line ----------------------------------------------------------------------------

def test_custom_line_all_fields():
    line = ("  palace-usage: tokens_in=1200 tokens_out=340 cache_read_tokens=1000 cache_write_tokens=100 "
            "cost_usd=0.0123 duration_s=12.5 turns=3 model=my-model:7b future_key=whatever\n")
    assert parse_usage("my-runner", "work...\n" + line) == Usage(
        "my-runner", 1200, 340, cache_read_tokens=1000, cache_write_tokens=100, cost_usd=0.0123, duration_s=12.5,
        turns=3, model="my-model:7b")


def test_custom_line_last_well_formed_wins():
    text = ("palace-usage: tokens_in=1 tokens_out=1\n"
            "palace-usage: tokens_in=5 tokens_out=6\n"
            "palace-usage: tokens_in=oops tokens_out=6\n")
    assert parse_custom_line(text) == Usage("custom", 5, 6)


@pytest.mark.parametrize("line", [
    "palace-usage: tokens_in=1",                                  # tokens_out missing
    "palace-usage: tokens_in=1 tokens_out=2 tokens_in=3",         # repeated key
    "palace-usage: tokens_in=1 tokens_out=2 cost_usd=1e3",        # exponent
    "palace-usage: tokens_in=1 tokens_out=2 cost_usd=nan",
    "palace-usage: tokens_in=-1 tokens_out=2",
    "palace-usage: tokens_in=1 tokens_out=2 cost_usd=999999999",  # over MAX_COST_USD
    "palace-usage: tokens_in=1 tokens_out=2 junk",
    "palace-usage: tokens_in=1 tokens_out=2 Bad=1",
    "palace-usage: tokens_in=1 tokens_out=2 model=a;b",
    "palace-usage: tokens_in=1 tokens_out=2 cache_read_tokens=5",  # more cache than input
    "palace-usage: tokens_in=1 tokens_out=2 x=" + "y" * 1100,      # too long
    "palace-usage: tokens_in=١ tokens_out=2",                      # non-ASCII digit
    "echo palace-usage: tokens_in=1 tokens_out=2",                 # not at the start of a line
])
def test_custom_line_refused(line):
    assert parse_custom_line(line) is None


def test_dispatcher_refuses_bad_input():
    assert parse_usage("bad runner", "palace-usage: tokens_in=1 tokens_out=2") is None
    assert parse_usage("custom", b"palace-usage: tokens_in=1 tokens_out=2") is None  # type: ignore[arg-type]
    assert parse_custom_line("palace-usage: tokens_in=1 tokens_out=2", runner="no good") is None
    assert parse_usage("custom", "") is None


# --- hostile and huge input ---------------------------------------------------------------------

def test_only_the_tail_is_read():
    padding = "x" * (MAX_SCAN_CHARS + 10) + "\n"
    early = "palace-usage: tokens_in=1 tokens_out=1\n"
    assert parse_custom_line(early + padding + "palace-usage: tokens_in=2 tokens_out=2\n") == Usage("custom", 2, 2)
    assert parse_custom_line(early + padding) is None
    assert parse_codex(CODEX_JSONL.replace("\n", "\n" + "y" * 100, 1) + padding) is None
    assert parse_codex(padding + CODEX_JSONL) is not None
    # one document longer than the window: no usage, not an error
    huge = json.loads(CLAUDE_JSON)
    huge["result"] = "z" * MAX_SCAN_CHARS
    assert parse_claude(json.dumps(huge)) is None
    assert parse_claude("q" * (MAX_SCAN_CHARS + 5)) is None


@pytest.mark.parametrize("text", [
    "[" * 100_000,
    '{"type":"result","usage":{"input_tokens":' + "9" * 5000 + "}}",
    '{"type":"result","usage":{"input_tokens":NaN,"output_tokens":Infinity}}',
    '{"type":"result","total_cost_usd":1e999,"usage":{"input_tokens":1}}',
    "\x00\x01\ud800{}\n",
    '{"type":"turn.completed","usage":{"input_tokens":1e400}}',
])
@pytest.mark.parametrize("runner", ["claude", "codex", "gemini", "opencode", "custom"])
def test_hostile_documents_never_raise(text, runner):
    result = parse_usage(runner, text)
    assert result is None or isinstance(result, Usage)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["claude", "codex", "gemini", "opencode", "custom"]),
       st.lists(st.one_of(st.text(max_size=80),
                          st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                                                 st.text(max_size=10)),
                                       lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                              st.dictionaries(st.sampled_from(
                                                                  ["type", "usage", "input_tokens", "output_tokens",
                                                                   "stats", "models", "tokens", "prompt", "part",
                                                                   "cache", "read", "modelUsage", "result",
                                                                   "total_cost_usd", "cost", "step_finish",
                                                                   "turn.completed", "inputTokens"]), kids,
                                                                  max_size=5)),
                                       max_leaves=20).map(lambda v: json.dumps(v, allow_nan=True))),
                max_size=6))
def test_parsers_never_raise_on_anything(runner, lines):
    result = parse_usage(runner, "\n".join(lines))
    assert result is None or isinstance(result, Usage)


_counts = st.integers(min_value=0, max_value=10**9)


@settings(max_examples=100, deadline=None)
@given(_counts, _counts, _counts, _counts, st.one_of(st.none(), st.floats(min_value=0, max_value=1000)),
       st.one_of(st.none(), st.integers(min_value=0, max_value=1000)))
def test_claude_stream_round_trip(inp, out, read, write, cost, turns):
    line = json.dumps({"type": "result", "total_cost_usd": cost, "num_turns": turns,
                       "usage": {"input_tokens": inp, "output_tokens": out, "cache_read_input_tokens": read,
                                 "cache_creation_input_tokens": write}})
    u = parse_usage("claude", "noise\n" + line + "\n")
    assert (u.tokens_in, u.tokens_out, u.cache_read_tokens, u.cache_write_tokens) == (inp + read + write, out, read,
                                                                                      write)
    assert u.cost_usd == (None if cost is None else round(cost, 6)) and u.turns == turns


# --- metadata -----------------------------------------------------------------------------------

def test_metadata_round_trip_and_canonical():
    u = parse_claude(CLAUDE_JSON)
    meta = usage_metadata(u, task_id="fix-parser-1", machine="mac-studio")
    assert set(meta) == {"runner", "tokens_in", "tokens_out", "cache_read_tokens", "cache_write_tokens",
                         "cost_usd", "model", "duration_s", "turns", "task_id", "machine"}
    assert check_usage_metadata(json.loads(canonical_json(meta))) == u
    bare = usage_metadata(Usage("codex", 3, 4), task_id="t", machine="m")
    assert bare["cost_usd"] is None and check_usage_metadata(bare) == Usage("codex", 3, 4)
    assert check_usage_metadata({**bare, "cost_usd": 0}).cost_usd == 0.0


@settings(max_examples=100, deadline=None)
@given(st.builds(Usage, runner=st.from_regex(r"\A[a-z][a-z0-9_.-]{0,10}\Z"), tokens_in=_counts, tokens_out=_counts,
                 cost_usd=st.one_of(st.none(), st.floats(min_value=0, max_value=MAX_COST_USD)),
                 model=st.one_of(st.none(), st.from_regex(r"\A[a-z][a-z0-9.:/-]{0,20}\Z")),
                 duration_s=st.one_of(st.none(), st.floats(min_value=0, max_value=86400)),
                 turns=st.one_of(st.none(), st.integers(min_value=0, max_value=1000))))
def test_metadata_round_trips_through_json(u):
    meta = json.loads(canonical_json(usage_metadata(u, task_id="t-1", machine="box")))
    assert check_usage_metadata(meta) == u


@pytest.mark.parametrize(("change", "field"), [
    ({"tokens_in": "12"}, "tokens_in"),
    ({"tokens_out": None}, "tokens_out"),
    ({"runner": ""}, "runner"),
    ({"task_id": "a\nb"}, "task_id"),
    ({"task_id": "x" * 300}, "task_id"),
    ({"machine": ""}, "machine"),
    ({"machine": "evil\x1b[2J"}, "machine"),
    ({"cost_usd": -1}, "cost_usd"),
    ({"cost_usd": True}, "cost_usd"),
    ({"model": 5}, "model"),
    ({"turns": 2.5}, "turns"),
    ({"cache_read_tokens": 10**6}, "cache_read_tokens"),
    ({"extra": 1}, "extra"),
])
def test_check_metadata_names_the_field(change, field):
    meta = {**usage_metadata(Usage("claude", 100, 5), task_id="t", machine="m"), **change}
    with pytest.raises(ValidationError) as info:
        check_usage_metadata(meta)
    assert info.value.field == field
    assert "\n" not in info.value.message


def test_check_metadata_not_an_object():
    with pytest.raises(ValidationError):
        check_usage_metadata([1, 2])
    with pytest.raises(ValidationError) as info:
        usage_metadata(Usage("claude", 1, 1), task_id="", machine="m")
    assert info.value.field == "task_id"


def test_record_from_event():
    meta = usage_metadata(Usage("claude", 10, 5, cost_usd=0.1), task_id="t1", machine="box")
    event = {"type": USAGE_TYPE, "created_at": "2025-06-01T10:00:00.000000Z", "from_agent": "mac-claude",
             "metadata": canonical_json(meta)}
    record = record_from_event(event)
    assert record == Record("2025-06-01T10:00:00.000000Z", "mac-claude", "box", "t1", Usage("claude", 10, 5,
                                                                                             cost_usd=0.1))
    assert record_from_event({**event, "metadata": meta}) == record
    assert record_from_event({**event, "type": "task.request"}) is None
    assert record_from_event({**event, "created_at": "yesterday"}) is None
    assert record_from_event({**event, "metadata": "{not json"}) is None
    assert record_from_event({**event, "metadata": {**meta, "tokens_in": -1}}) is None
    assert record_from_event("nope") is None  # type: ignore[arg-type]


# --- totals -------------------------------------------------------------------------------------

def _r(at, agent, machine, task, tin, tout, cost=None, model=None):
    return (at, agent, machine, task, Usage("claude", tin, tout, cost_usd=cost, model=model))


RECORDS = [
    _r("2025-06-01T10:00:00.000000Z", "a1", "m1", "t1", 100, 10, 0.1, "sonnet"),
    _r("2025-06-01T23:59:59.999999Z", "a1", "m1", "t2", 200, 20, None, "sonnet"),
    _r("2025-06-02T00:00:00.000000Z", "a2", "m2", "t2", 300, 30, 0.2, None),
    _r("2025-06-02T08:00:00Z", "a2", "m2", None, 400, 40, 0.3, "opus"),
]


def test_totals_by_each_field():
    by_task = totals(RECORDS, "task")
    assert [(t.key, t.runs, t.tokens_in, t.cost_usd, t.unpriced_runs) for t in by_task] == [
        ("t1", 1, 100, 0.1, 0), ("t2", 2, 500, 0.2, 1), (None, 1, 400, 0.3, 0)]
    assert [(t.key, t.tokens) for t in totals(RECORDS, "day")] == [("2025-06-01", 330), ("2025-06-02", 770)]
    assert [t.key for t in totals(RECORDS, "model")] == ["opus", "sonnet", None]
    assert [t.key for t in totals(RECORDS, "agent")] == ["a1", "a2"]
    assert [t.key for t in totals(RECORDS, "machine")] == ["m1", "m2"]
    assert totals([], "task") == []


def test_unknown_cost_stays_distinguishable_from_zero():
    [unknown] = totals([_r("2025-06-01T10:00:00Z", "a", "m", "t", 1, 1)], "task")
    [zero] = totals([_r("2025-06-01T10:00:00Z", "a", "m", "t", 1, 1, 0.0)], "task")
    assert unknown.cost_usd is None and unknown.unpriced_runs == 1
    assert zero.cost_usd == 0.0 and zero.unpriced_runs == 0
    assert unknown.to_wire()["cost_usd"] is None and zero.to_wire()["cost_usd"] == 0.0
    assert repr(unknown) == "<Total task=t runs=1 tokens=2 cost=?>"
    assert repr(totals(RECORDS, "task")[1]) == "<Total task=t2 runs=2 tokens=550 cost=$0.20+>"


def test_totals_refuses_unknown_by():
    with pytest.raises(ValueError):
        totals(RECORDS, "week")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.floats(min_value=0, max_value=10)), max_size=20),
       st.randoms())
def test_totals_do_not_depend_on_order(rows, rnd):
    records = [_r("2025-06-01T10:00:00Z", agent, "m", "t", 1, 1, cost) for agent, cost in rows]
    shuffled = list(records)
    rnd.shuffle(shuffled)
    assert totals(records, "agent") == totals(shuffled, "agent")


# --- budgets ------------------------------------------------------------------------------------

def test_parse_budgets():
    b = parse_budgets({"agent_daily_usd": 20, "task_tokens": 2_000_000, "palace_monthly_usd": 500.5,
                       "warn_at": 0.9, "agents": {"mac-claude": {"daily_usd": 50}}})
    assert b == Budgets(agent_daily_usd=20.0, task_tokens=2_000_000, palace_monthly_usd=500.5, warn_at=0.9,
                        agents={"mac-claude": AgentBudget(daily_usd=50.0)})
    assert b.agent("mac-claude") == (50.0, None) and b.agent("other") == (20.0, None)
    assert parse_budgets(None) == Budgets() and parse_budgets({}) == Budgets()


@pytest.mark.parametrize(("table", "field"), [
    ({"agent_daily_usd": "20"}, "budgets.agent_daily_usd"),
    ({"agent_daily_usd": 0}, "budgets.agent_daily_usd"),
    ({"task_usd": True}, "budgets.task_usd"),
    ({"task_usd": float("nan")}, "budgets.task_usd"),
    ({"task_tokens": 1.5}, "budgets.task_tokens"),
    ({"palace_monthly_tokens": -3}, "budgets.palace_monthly_tokens"),
    ({"warn_at": 80}, "budgets.warn_at"),
    ({"warn_at": 0}, "budgets.warn_at"),
    ({"daily_usd": 5}, "budgets.daily_usd"),
    ({"agents": 5}, "budgets.agents"),
    ({"agents": {"a": 5}}, "budgets.agents.a"),
    ({"agents": {"a": {"weekly_usd": 5}}}, "budgets.agents.a.weekly_usd"),
    ({"agents": {"a": {"daily_tokens": "lots"}}}, "budgets.agents.a.daily_tokens"),
    ({"agents": {"a\nb": {"daily_usd": 1}}}, "budgets.agents.a\\x0ab"),
])
def test_parse_budgets_names_the_key(table, field):
    with pytest.raises(ValidationError) as info:
        parse_budgets(table)
    assert info.value.field == field and field in info.value.message


def test_parse_budgets_not_a_table():
    with pytest.raises(ValueError):
        parse_budgets([1])


NOW = "2025-06-02T12:00:00.000000Z"


def test_spending_windows():
    s = spending(RECORDS, NOW)
    assert (s.day, s.month) == ("2025-06-02", "2025-06")
    assert [(t.key, t.tokens) for t in s.agents_today] == [("a2", 770)]
    assert [t.key for t in s.tasks] == ["t1", "t2"]
    assert s.palace_month.tokens == 1100 and s.palace_month.cost_usd == 0.6
    july = spending(RECORDS, "2025-07-01T00:00:00Z")
    assert july.palace_month.runs == 0 and july.agents_today == ()
    with pytest.raises(ValidationError):
        spending(RECORDS, "now")


def test_judge_ok_warn_over():
    budgets = Budgets(agent_daily_usd=0.625, agent_daily_tokens=10_000, task_usd=0.2, palace_monthly_usd=10.0,
                      palace_monthly_tokens=1000)
    judged = {(b.budget, b.subject): b for b in judge_budgets(budgets, spending(RECORDS, NOW))}
    assert judged[("palace_monthly_usd", "palace")].state == "ok"
    assert judged[("palace_monthly_tokens", "palace")].state == "over"
    assert judged[("agent_daily_usd", "a2")].state == "warn"         # $0.50 of $0.625 = exactly 80 %
    assert judged[("agent_daily_tokens", "a2")].state == "ok"
    assert judged[("task_usd", "t1")].state == "ok"                   # $0.10 of $0.20: 50 %
    assert judged[("task_usd", "t2")].state == "over"
    assert judged[("task_usd", "t2")].unpriced_runs == 1
    assert ("task_tokens", "t1") not in judged


def test_judge_boundaries_exact():
    rec = [_r("2025-06-02T01:00:00Z", "a", "m", "t", 79, 0)]
    assert judge_budgets(Budgets(task_tokens=100), spending(rec, NOW))[0].state == "ok"
    rec = [_r("2025-06-02T01:00:00Z", "a", "m", "t", 80, 0)]
    assert judge_budgets(Budgets(task_tokens=100), spending(rec, NOW))[0].state == "warn"
    rec = [_r("2025-06-02T01:00:00Z", "a", "m", "t", 100, 0)]
    [b] = judge_budgets(Budgets(task_tokens=100), spending(rec, NOW))
    assert b.state == "over" and b.fraction == 1.0
    rec = [_r("2025-06-02T01:00:00Z", "a", "m", "t", 1, 0, 0.7), _r("2025-06-02T02:00:00Z", "a", "m", "t", 1, 0, 0.1)]
    [b] = judge_budgets(Budgets(task_usd=1.0), spending(rec, NOW))
    assert b.state == "warn" and b.spent == 0.8  # micro-dollars: 0.7 + 0.1 is exactly 0.8 here


def test_agent_override_and_describe():
    budgets = Budgets(agent_daily_usd=0.1, agents={"a2": AgentBudget(daily_usd=5.0)})
    [b] = [b for b in judge_budgets(budgets, spending(RECORDS, NOW)) if b.subject == "a2"]
    assert b.state == "ok" and b.limit == 5.0
    assert b.describe() == "agent a2 is within its $5.00 daily budget (2025-06-02): $0.50 spent, 10%"
    assert b.key == ("agent_daily_usd", "a2", "2025-06-02")
    assert b.to_wire()["state"] == "ok"
    assert repr(b) == "<Breach agent_daily_usd a2 ok 0.5/5.0>"


def test_describe_each_scope():
    s = spending(RECORDS, NOW)
    judged = judge_budgets(Budgets(task_usd=0.15, palace_monthly_tokens=1000), s)
    lines = [b.describe() for b in judged]
    assert lines[0] == "the palace is over its 1,000 tokens monthly budget (2025-06): 1,100 tokens spent, 110%"
    assert "task t2 is over its $0.15 budget: $0.20 spent, 133%; 1 run(s) reported no cost" in lines


def test_blocking():
    budgets = Budgets(agent_daily_tokens=100, task_tokens=400, palace_monthly_usd=100.0)
    judged = judge_budgets(budgets, spending(RECORDS, NOW))
    assert [(b.budget, b.subject) for b in blocking(judged, agent="a2")] == [("agent_daily_tokens", "a2")]
    assert blocking(judged, agent="a1") == []
    assert [(b.budget, b.subject) for b in blocking(judged, task="t2")] == [("task_tokens", "t2")]
    assert blocking(judged) == []
    over_palace = judge_budgets(Budgets(palace_monthly_tokens=10), spending(RECORDS, NOW))
    assert [b.scope for b in blocking(over_palace, agent="anyone")] == ["palace"]
    assert blocking(over_palace, task="t1") == []


def test_judge_without_budgets_is_empty():
    assert judge_budgets(Budgets(), spending(RECORDS, NOW)) == []


def test_breach_is_a_value():
    b = Breach("task_usd", "task", "t", "all runs", "usd", 1.0, 2.0, "ok")
    assert b.fraction == 0.5 and b.unpriced_runs == 0


def test_total_add_is_exact_in_micros():
    t = Total("task", "t")
    for _ in range(10):
        t = t.add(Usage("x", 0, 0, cost_usd=0.1))
    assert t.cost_usd == 1.0 and t.cost_micros == 1_000_000


def test_spending_built_by_hand_skips_unnamed_groups():
    from palace_proto.usage import Spending

    unnamed = Total("agent", None).add(Usage("x", 10**6, 0))
    s = Spending(day="2025-06-02", month="2025-06", agents_today=(unnamed,),
                 tasks=(Total("task", None).add(Usage("x", 10**6, 0)),), palace_month=Total("month", "2025-06"))
    assert [b.scope for b in judge_budgets(Budgets(agent_daily_tokens=1, task_tokens=1), s)] == []


def test_parsers_take_only_text_and_whole_floats():
    assert parse_claude(None) is None  # type: ignore[arg-type]
    assert parse_codex('{"type":"turn.completed","usage":{"input_tokens":12.0,"output_tokens":3.5}}') == \
        Usage("codex", 12, 0)


def test_a_json_document_after_lines_of_warnings_is_still_read():
    """Guards what the real Gemini CLI printed in the harness rig: two warning lines on stdout
    (no 256 colours, no ripgrep) before its JSON result."""
    stdout = ("color support not detected. Using a terminal with at least 256-color support is recommended.\n"
              "Ripgrep is not available. Falling back to GrepTool.\n"
              '{"session_id": "s", "response": "done", "stats": {"models": {"gemini-3.8-flash": {"api": '
              '{"totalRequests": 2}, "tokens": {"input": 200, "prompt": 200, "candidates": 20, "total": 220, '
              '"cached": 0, "thoughts": 0, "tool": 0}}}}}\n')
    usage = parse_gemini(stdout)
    assert usage is not None and (usage.tokens_in, usage.tokens_out, usage.model) == (200, 20, "gemini-3.8-flash")


# -- final_text: a run's last message in words (what a failed reply quotes) ---------------------

@pytest.mark.parametrize(("runner", "stdout", "words"), [
    ("claude", '{"type": "result", "is_error": false, "result": "  feature.txt is written.\\n"}', "feature.txt is written."),
    ("claude", '[{"type": "system"}, {"type": "assistant"}, {"type": "result", "result": "done"}]', "done"),
    ("claude", '{"type":"system"}\n{"type":"result","result":"streamed"}\n', "streamed"),
    ("claude", '{"type": "result", "subtype": "error_during_execution", "errors": ["rate limited"]}',
     "error: rate limited"),
    ("codex", '{"type":"thread.started"}\n{"type":"item.completed","item":{"type":"agent_message","text":"first"}}\n'
              '{"type":"item.completed","item":{"type":"agent_message","text":"last"}}\n'
              '{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}\n', "last"),
    ("codex", '{"msg": {"type": "agent_message", "message": "old protocol"}}\n', "old protocol"),
    ("codex", '{"type":"turn.failed","error":{"message":"stream disconnected"}}\n', "error: stream disconnected"),
    ("gemini", 'Warning: 256-color support not detected.\n{"response": "ok then", "stats": {}}', "ok then"),
    ("gemini", '{"error": {"type": "FatalToolExecutionError", "message": "no such file"}}', "error: no such file"),
    ("opencode", '{"type":"text","part":{"type":"text","text":"one"}}\n{"type":"step_finish","part":{}}\n'
                 '{"type":"text","part":{"type":"text","text":"two"}}\n', "two"),
    ("opencode", '{"type":"error","error":{"name":"APIError","data":{"message":"bad key"}}}\n', "error: bad key"),
])
def test_the_last_message_of_each_harness_is_read_from_its_json(runner, stdout, words):
    assert final_text(runner, stdout) == words


@pytest.mark.parametrize(("runner", "stdout"), [
    ("custom", '{"type": "result", "result": "a custom runner is quoted verbatim instead"}'),
    ("claude", "plain text, no JSON"),
    ("claude", '{"type": "result", "result": 42}'),
    ("claude", "[" * 100_000),
    ("codex", '{"item": {"type": "agent_message", "text": ["not", "text"]}, "message": 1}\n'),
    ("gemini", '{"response": "   "}'),
    ("opencode", '{"type":"text","part":"not an object"}\n'),
    ("claude", None),
])
def test_no_last_message_is_none_never_an_exception(runner, stdout):
    assert final_text(runner, stdout) is None


def test_a_long_last_message_is_cut():
    said = final_text("gemini", json.dumps({"response": "x" * (MAX_FINAL_CHARS * 3)}))
    assert said == "x" * MAX_FINAL_CHARS
