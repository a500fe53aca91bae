"""palacectl.light: MemPalace 3.10's light commands read into palace's full tools (pure)."""

from __future__ import annotations

import pytest

from palacectl.light import LightCall, LightError, read_light_call, tokenize


def coordinate(command: str | None = None, **fields):
    return read_light_call("palace_coordinate", {**({"command": command} if command is not None else {}), **fields})


def test_tokens_quote_escape_and_split_arrows_and_pairs():
    assert tokenize('goal: "fix \\"the\\" bug"\tLIMIT 5 a->b x:y') == ["goal", ":", 'fix "the" bug', "LIMIT", "5",
                                                                       "a", "->", "b", "x:y"]
    assert tokenize("body: 'two\\nlines'") == ["body", ":", "two\nlines"]
    assert tokenize('"unclosed') == ["unclosed"]


def test_event_list_reads_every_spelling_of_a_pair_and_from_is_the_author():
    call = coordinate('EVENT LIST to: bob from:alice type : task.request STATUS open LIMIT 5 DESC PREVIEW')
    assert call == LightCall("mempalace_event_list", {"to_agent": "bob", "writer": "alice", "type": "task.request",
                                                      "status": "open", "limit": 5, "order": "desc", "preview": True})


def test_inbox_is_newest_first_with_previews_unless_a_cursor_or_an_order_is_given():
    assert coordinate("INBOX to: bob") == LightCall("mempalace_event_list",
                                                    {"to_agent": "bob", "order": "desc", "preview": True})
    assert coordinate("EVENT INBOX to: bob since_id: evt_1").arguments == {
        "to_agent": "bob", "since_event_id": "evt_1", "preview": True}
    assert coordinate("INBOX to: bob ASC").arguments["order"] == "asc"


def test_since_and_before_are_cursors_or_dates_and_anything_else_is_refused_in_mempalaces_words():
    assert coordinate("EVENTS since: evt_9").arguments == {"since_event_id": "evt_9"}
    assert coordinate("EVENTS since: 2026-12-01").arguments == {"since_created_at": "2026-12-01"}
    with pytest.raises(LightError, match=r"^EVENT LIST since: is ambiguous; use since_id:<event_id> or a YYYY-MM-DD "
                                         r"timestamp$"):
        coordinate("EVENTS since: yesterday")
    with pytest.raises(LightError, match=r"^EVENT LIST before: is not a resume cursor; use before_id:<event_id>$"):
        coordinate("EVENTS before: 2026-12-01")
    with pytest.raises(LightError, match=r"^Invalid order 'sideways'; must be 'asc' or 'desc'$"):
        coordinate("EVENTS order: sideways")


def test_event_wait_takes_a_timeout_and_from_filters_by_author():
    assert coordinate("EVENT WAIT to: bob from: alice since: evt_3 timeout: 5000").arguments == {
        "to_agent": "bob", "writer": "alice", "since_event_id": "evt_3", "timeout_ms": 5000}


def test_writes_name_the_caller_in_from_and_require_mempalaces_fields():
    assert coordinate('EVENT APPEND type: note stream: s room: r from: me to: bob body: "hi there"') == LightCall(
        "mempalace_event_append", {"type": "note", "stream": "s", "room": "r", "from_agent": "me", "to_agent": "bob",
                                   "body": "hi there"})
    with pytest.raises(LightError, match=r"^EVENT APPEND missing required field: 'room'$"):
        coordinate("EVENT APPEND type: note stream: s")
    task = coordinate('TASK CREATE project: shop to: bob goal: "add x" branch: main base: abc1234 done: "x exists"')
    assert task.tool == "mempalace_task_create" and task.arguments["base_commit"] == "abc1234"
    with pytest.raises(LightError, match=r"^TASK CREATE missing required field: 'done'$"):
        coordinate("TASK CREATE project: shop to: bob goal: g branch: main base: abc1234")
    assert coordinate("EVENT ACK id: evt_1 status: claimed").arguments == {"event_id": "evt_1", "status": "claimed"}
    assert coordinate("ARTIFACT GET art_1") == LightCall("mempalace_artifact_get", {"artifact_id": "art_1"})
    assert coordinate("ARTIFACT art_2").arguments == {"artifact_id": "art_2"}
    assert coordinate('PATCH SUBMIT diff: "--- a\\n" correlation: task_1').arguments == {
        "content": "--- a\n", "correlation_id": "task_1"}
    assert coordinate("MESH PEERS") == LightCall("mempalace_peers", {})


def test_rooms_take_the_room_id_first_or_as_a_pair():
    assert coordinate('ROOM SAY room_api_1a2b3c4d body: "agreed"') == LightCall(
        "mempalace_room_say", {"room_id": "room_api_1a2b3c4d", "body": "agreed"})
    assert coordinate('ROOM OPEN project: shop name: "api shape" agenda: "agree on it"').arguments == {
        "project": "shop", "name": "api shape", "agenda": "agree on it"}
    assert coordinate("ROOM CLOSE id: room_api_1a2b3c4d outcome: done").arguments == {
        "room_id": "room_api_1a2b3c4d", "outcome": "done"}


def test_structured_fields_name_the_action_or_it_is_inferred_and_fields_beside_a_command_win():
    assert coordinate(action="inbox", to="bob").arguments == {"to_agent": "bob", "order": "desc", "preview": True}
    assert coordinate(goal="g", project="p", to="b", branch="m", base="abc1234", done="d").tool == "mempalace_task_create"
    assert coordinate(stream="s", room="r", type="note", body="x").tool == "mempalace_event_append"
    assert coordinate(**{"from": "alice"}).arguments == {"writer": "alice"}  # a list: from is the author
    assert coordinate("EVENT LIST to: bob LIMIT 5", limit=2).arguments["limit"] == 2
    assert coordinate('{"action": "event_wait", "to": "bob"}').arguments == {"to_agent": "bob"}
    with pytest.raises(LightError, match=r"^Unknown palace_coordinate action: 'fly'$"):
        coordinate(action="fly")


def test_an_unknown_verb_is_named():
    with pytest.raises(LightError, match=r"^Unrecognized palace_coordinate command: 'LAUNCH'$"):
        coordinate("LAUNCH rockets")


# Issue 47 §1.3: a command written for another light tool is refused naming the tool that takes it
# (palace_query read "INBOX to: me" as words to find and answered with unrelated drawers).
@pytest.mark.parametrize(("tool", "command", "taker"), [
    ("palace_query", "INBOX to: me", "palace_coordinate"),
    ("palace_query", "EVENT LIST from: bob LIMIT 5", "palace_coordinate"),
    ("palace_query", "TASK CREATE project: shop", "palace_coordinate"),
    ("palace_query", "ROOM READ room_1", "palace_coordinate"),
    ("palace_query", 'ADD IN backend/auth "tokens expire"', "palace_exec"),
    ("palace_query", "KG ADD a -> b -> c", "palace_exec"),
    ("palace_query", "DIARY WRITE me reviewed it", "palace_exec"),
    ("palace_exec", "INBOX", "palace_coordinate"),
    ("palace_exec", "FIND auth token", "palace_query"),
    ("palace_exec", "KG orders", "palace_query"),
    ("palace_coordinate", "FIND auth token", "palace_query"),
    ("palace_coordinate", "TUNNELS BETWEEN a AND b", "palace_query"),
    ("palace_coordinate", 'ADD IN a/b "x"', "palace_exec"),
])
def test_a_command_of_another_light_tool_is_refused_naming_the_tool_that_takes_it(tool, command, taker):
    key = "query" if tool == "palace_query" else "command"
    with pytest.raises(LightError) as refused:
        read_light_call(tool, {key: command})
    word = " ".join(command.split()[:2]) if command.startswith(("KG ADD", "DIARY WRITE")) else command.split()[0]
    assert str(refused.value).startswith(f"{word} is {taker}'s command, not {tool}'s: call {taker}")


def test_an_action_of_another_light_tool_is_refused_naming_the_tool_that_takes_it():
    with pytest.raises(LightError, match=r"^inbox is palace_coordinate's action, not palace_query's: call "
                                         r"palace_coordinate"):
        read_light_call("palace_query", {"target": "inbox"})
    with pytest.raises(LightError, match=r"^search is palace_query's action, not palace_coordinate's"):
        coordinate(action="search", wing="w")
    with pytest.raises(LightError, match=r"^kg_add is palace_exec's action, not palace_query's"):
        read_light_call("palace_query", {"action": "kg_add", "subject": "a"})


def test_words_to_find_are_searched_whatever_verb_they_begin_with_unless_it_is_written_as_one():
    """Only a verb written as the language writes it (upper case) is another tool's command: a
    question in words is searched."""
    assert read_light_call("palace_query", {"query": "inbox zero and the event list"}) == LightCall(
        "mempalace_search", {"query": "inbox zero and the event list"})
    assert read_light_call("palace_query", {"query": '"INBOX" handling'}).tool == "mempalace_search"
    # A verb both tools take stays with the one called.
    assert read_light_call("palace_query", {"query": "DIARY me"}).tool == "mempalace_diary_read"
    assert read_light_call("palace_exec", {"command": "DIARY me did it"}).tool == "mempalace_diary_write"


@pytest.mark.parametrize(("command", "tool", "arguments"), [
    ('FIND "auth token" IN backend/auth LIMIT 3 SINCE 2026-01-01', "mempalace_search",
     {"query": "auth token", "wing": "backend", "room": "auth", "limit": 3, "since": "2026-01-01"}),
    ("why did the build break", "mempalace_search", {"query": "why did the build break"}),
    ("SEARCH retries STRATEGY union", "mempalace_search", {"query": "retries"}),
    ("KG Max Planck AS OF 2026-04-01", "mempalace_kg_query", {"entity": "Max Planck", "as_of": "2026-04-01"}),
    ("KG orders DIRECTION incoming", "mempalace_kg_query", {"entity": "orders", "direction": "incoming"}),
    ("DIARY mac-claude LAST 5", "mempalace_diary_read", {"agent_name": "mac-claude", "last_n": 5}),
    ("TUNNELS BETWEEN wing_a AND wing_b", "mempalace_find_tunnels", {"wing_a": "wing_a", "wing_b": "wing_b"}),
])
def test_queries_route_to_search_kg_diary_and_tunnels(command, tool, arguments):
    assert read_light_call("palace_query", {"query": command}) == LightCall(tool, arguments)


@pytest.mark.parametrize("command", ["STATUS", "", "TAXONOMY", "WINGS", "DRAWERS IN a/b", "TRAVERSE x", "KG STATS",
                                     "GRAPH STATS"])
def test_a_mempalace_query_palace_does_not_offer_says_what_to_use_instead(command):
    with pytest.raises(LightError, match=r"palace"):
        read_light_call("palace_query", {"query": command})


@pytest.mark.parametrize(("command", "tool", "arguments"), [
    ('ADD IN backend/auth "tokens expire after 1h" SOURCE notes.md', "mempalace_add_drawer",
     {"wing": "backend", "room": "auth", "content": "tokens expire after 1h", "source_file": "notes.md"}),
    ("KG ADD orders table -> owned by -> team data FROM 2026-01-01", "mempalace_kg_add",
     {"subject": "orders table", "predicate": "owned by", "object": "team data", "valid_from": "2026-01-01"}),
    ("KG INVALIDATE orders -> owned_by -> data ENDED 2026-06-01", "mempalace_kg_invalidate",
     {"subject": "orders", "predicate": "owned_by", "object": "data", "ended": "2026-06-01"}),
    ('DIARY WRITE mac-claude "reviewed the api" TOPIC review', "mempalace_diary_write",
     {"agent_name": "mac-claude", "entry": "reviewed the api", "topic": "review"}),
])
def test_exec_routes_memory_writes(command, tool, arguments):
    assert read_light_call("palace_exec", {"command": command}) == LightCall(tool, arguments)


@pytest.mark.parametrize(("command", "message"), [
    ('ADD "no place"', "ADD requires wing and room (e.g. 'ADD IN backend/auth \"content\"')"),
    ("ADD IN a/b", "ADD requires content to store"),
    ("KG ADD only two", "KG ADD requires 'subject -> predicate -> object' or 'subject predicate object'"),
    ("KG SUPERSEDE a -> b: c => d", "KG SUPERSEDE: palace has no supersede"),
    ("DELETE DRAWER d1", "DELETE: palace's log and drawers are append-only"),
    ("MINE /repo", "MINE: palace has no miner"),
])
def test_exec_refusals_say_why(command, message):
    with pytest.raises(LightError) as refused:
        read_light_call("palace_exec", {"command": command})
    assert str(refused.value).startswith(message)


def test_hostile_input_is_a_light_error_never_a_crash():
    with pytest.raises(LightError, match="at most 20,000"):
        coordinate("EVENT LIST " + "x" * 30_000)
    with pytest.raises(LightError):
        read_light_call("palace_query", {"query": "KG"})
    # Deep JSON in a value stays text (or a refused argument downstream), never a crash here.
    assert coordinate("EVENTS type: " + "[" * 5000).tool == "mempalace_event_list"
