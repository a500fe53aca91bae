"""Tests for palace_proto.validation: every data-model rule and its exact (MemPalace-compatible) message."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palace_proto.errors import ValidationError
from palace_proto.validation import (
    ARTIFACT_KINDS,
    EVENT_STATUSES,
    FILTER_FIELDS,
    MAX_WAIT_TIMEOUT_MS,
    AppendRequest,
    Limits,
    ListQuery,
    agent_id_from_parts,
    clean_optional,
    clean_required,
    parse_json_object,
    validate_agent_token,
    validate_artifact_ids,
    validate_artifact_kind,
    validate_body,
    validate_created_at_bound,
    validate_metadata,
    validate_page_limit,
    validate_status,
    validate_timeout_ms,
    validate_type,
)

LIMITS = Limits()
STATUS_LIST = "applied, blocked, claimed, failed, open, ready, superseded"
CREATED_AT_HINT = "is not a valid ISO-8601 date or UTC datetime (expected YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ)"
AGENT_HINT = ("must be a single token like mac-claude (machine-harness): letters, digits, '.', '_', '-', "
              "or host:harness:project like mac:claude:shop")


@contextmanager
def refused(message: str, field: str | None = None) -> Iterator[pytest.ExceptionInfo[ValidationError]]:
    """Expect a ValidationError with exactly this message (and this field, when given)."""
    with pytest.raises(ValidationError, match=f"^{re.escape(message)}$") as info:
        yield info
    if field is not None:
        assert info.value.field == field


def valid_append(**changes) -> dict:
    return {"type": "note", "stream": "work", "room": "backend", "from_agent": "mac-claude", **changes}


# --- errors carry field and code -------------------------------------------------------------


def test_validation_error_is_invalid_argument_with_field_detail():
    with pytest.raises(ValidationError) as info:
        clean_required("stream", "")
    err = info.value
    assert err.code == "invalid_argument"
    assert err.field == "stream"
    assert err.to_wire() == {"code": "invalid_argument", "message": "stream must be a non-empty string",
                             "detail": {"field": "stream"}}
    assert isinstance(err, ValueError)


# --- type ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["note", "task.claim", "a", "0", "x_y-z.1", "a" * 64, "  note  "])
def test_type_accepts_lowercase_tokens_up_to_64_chars(value):
    assert validate_type(value) == value.strip()


@pytest.mark.parametrize("value", [None, "", "   ", 5, ["note"]])
def test_type_must_be_a_non_empty_string(value):
    with refused("type must be a non-empty string", "type"):
        validate_type(value)


@pytest.mark.parametrize("value", ["Note", "-note", ".note", "_note", "no te", "note!", "a" * 65, "é", "a\nb"])
def test_type_refuses_anything_outside_the_pattern(value):
    with refused(
        f"type={value.strip()!r} is not a valid event type (lowercase letters, digits, '.', '_', '-'; max 64 chars)",
        "type",
    ):
        validate_type(value)


def test_type_drops_lone_surrogates():
    assert validate_type("no\ud800te") == "note"


# --- status ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", sorted(EVENT_STATUSES))
def test_status_accepts_every_known_status(value):
    assert validate_status(f" {value} ") == value


@pytest.mark.parametrize("value", [None, "", "  "])
def test_status_blank_means_absent(value):
    assert validate_status(value) is None


@pytest.mark.parametrize("value", ["Open", "done", 1, True, ["open"]])
def test_status_refuses_unknown_values_listing_the_sorted_set(value):
    with refused(f"status={value!r} is not one of: {STATUS_LIST}", "status"):
        validate_status(value)


def test_status_message_lists_the_statuses_sorted():
    assert STATUS_LIST == ", ".join(sorted(EVENT_STATUSES))


# --- routing fields --------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["stream", "room", "from_agent"])
@pytest.mark.parametrize("value", [None, "", "   ", "\t\n", 5, b"work", "\ud800"])
def test_required_routing_fields_must_be_non_empty_strings(field, value):
    with refused(f"{field} must be a non-empty string", field):
        clean_required(field, value)


def test_required_routing_field_is_stripped():
    assert clean_required("stream", "  work\n") == "work"


def test_routing_field_of_exactly_256_chars_is_accepted():
    assert clean_required("room", "r" * 256) == "r" * 256
    assert clean_optional("topic", "t" * 256) == "t" * 256


@pytest.mark.parametrize("clean", [clean_required, clean_optional])
def test_routing_field_over_256_chars_is_refused(clean):
    with refused("room exceeds maximum length of 256 characters", "room"):
        clean("room", "r" * 257)


def test_routing_length_is_counted_after_stripping():
    assert clean_required("room", "  " + "r" * 256 + "  ") == "r" * 256


@pytest.mark.parametrize("clean", [clean_required, clean_optional])
@pytest.mark.parametrize("value", ["a\x00b", "a\nb", "a\tb", "a\x1bb", "a\x7fb"])
def test_routing_field_with_inner_control_characters_is_refused(clean, value):
    with refused("topic contains control characters", "topic"):
        clean("topic", value)


def test_routing_fields_drop_lone_surrogates():
    """Guards storage: a lone surrogate cannot be encoded as UTF-8, so it is removed, not stored."""
    assert clean_required("stream", "wo\udc80rk") == "work"
    assert clean_optional("topic", "\ud800auth\udfff") == "auth"


@pytest.mark.parametrize("value", [None, "", "   ", "\ud800"])
def test_optional_routing_field_blank_means_absent(value):
    assert clean_optional("topic", value) is None


@pytest.mark.parametrize("value", [5, b"auth", ["auth"], True])
def test_optional_routing_field_must_be_a_string(value):
    with refused("topic must be a string", "topic"):
        clean_optional("topic", value)


def test_routing_fields_keep_non_ascii():
    assert clean_required("room", "  café ✓ ") == "café ✓"


# --- body ------------------------------------------------------------------------------------


def test_body_none_is_empty():
    assert validate_body(None, LIMITS) == ""


@pytest.mark.parametrize("value", [5, b"bytes", ["x"], {"a": 1}])
def test_body_must_be_a_string(value):
    with refused("body must be a string", "body"):
        validate_body(value, LIMITS)


def test_body_refuses_nul():
    with refused("body contains null bytes", "body"):
        validate_body("a\x00b", LIMITS)


def test_body_keeps_whitespace_and_other_control_characters():
    assert validate_body("  line1\n\tline2\r\n  ", LIMITS) == "  line1\n\tline2\r\n  "


def test_body_drops_lone_surrogates():
    assert validate_body("a\ud800b", LIMITS) == "ab"


def test_body_exactly_at_the_limit_is_accepted():
    assert validate_body("x" * LIMITS.max_body_bytes, LIMITS) == "x" * LIMITS.max_body_bytes


def test_body_one_byte_over_the_limit_is_refused():
    with refused(f"body is {LIMITS.max_body_bytes + 1} bytes; maximum is {LIMITS.max_body_bytes} bytes", "body"):
        validate_body("x" * (LIMITS.max_body_bytes + 1), LIMITS)


def test_body_limit_counts_utf8_bytes_not_characters():
    limits = Limits(max_body_bytes=10)
    assert validate_body("é" * 5, limits) == "é" * 5
    with refused("body is 12 bytes; maximum is 10 bytes", "body"):
        validate_body("é" * 6, limits)


def test_body_limit_is_measured_after_dropping_surrogates():
    limits = Limits(max_body_bytes=3)
    assert validate_body("abc\ud800", limits) == "abc"


# --- metadata --------------------------------------------------------------------------------


def test_metadata_none_is_an_empty_object():
    assert validate_metadata(None, LIMITS) == "{}"


def test_metadata_becomes_canonical_json():
    assert validate_metadata({"b": [1, 2], "a": "é"}, LIMITS) == '{"a":"é","b":[1,2]}'


@pytest.mark.parametrize("value", [[], "{}", 5, True, [("a", 1)]])
def test_metadata_must_be_an_object(value):
    with refused("metadata must be an object", "metadata"):
        validate_metadata(value, LIMITS)


@pytest.mark.parametrize(
    "value",
    [{"a": b"bytes"}, {"a": float("nan")}, {"a": {1, 2}}, {"a": object()}, {b"k": 1}, {1: "a", "b": 2}],
    ids=["bytes", "nan", "set", "object", "bytes-key", "mixed-keys"],
)
def test_metadata_must_be_json_serializable(value):
    with pytest.raises(ValidationError, match=r"^metadata is not JSON-serializable: ") as info:
        validate_metadata(value, LIMITS)
    assert info.value.field == "metadata"


def test_deeply_nested_metadata_is_a_validation_error():
    """Regression: ~1000-deep nesting fits in a frame; json raised RecursionError, which escaped
    as an 'internal' error instead of invalid_argument."""
    deep: dict = {}
    for _ in range(1100):
        deep = {"a": deep}
    with pytest.raises(ValidationError, match=r"^metadata is not JSON-serializable: "):
        validate_metadata(deep, LIMITS)


def test_metadata_exactly_at_the_limit_is_accepted_and_one_over_refused():
    text = validate_metadata({"k": "x" * 100}, LIMITS)
    size = len(text.encode())
    assert validate_metadata({"k": "x" * 100}, Limits(max_metadata_bytes=size)) == text
    with refused(f"metadata exceeds maximum size of {size - 1} bytes", "metadata"):
        validate_metadata({"k": "x" * 100}, Limits(max_metadata_bytes=size - 1))


def test_metadata_size_counts_utf8_bytes_of_the_canonical_text():
    text = validate_metadata({"k": "é"}, LIMITS)  # {"k":"é"} is 9 characters, 10 bytes
    assert len(text) == 9
    with refused("metadata exceeds maximum size of 9 bytes", "metadata"):
        validate_metadata({"k": "é"}, Limits(max_metadata_bytes=9))


# --- artifact ids and kinds ------------------------------------------------------------------

ART_A, ART_B, ART_C = "art_" + "a" * 32, "art_" + "b" * 32, "art_" + "c" * 32


def test_artifact_ids_none_is_empty():
    assert validate_artifact_ids(None) == ()


def test_artifact_ids_dedup_keeps_first_occurrence_order():
    assert validate_artifact_ids([ART_B, ART_A, ART_B, f" {ART_C} ", ART_A, ART_C]) == (ART_B, ART_A, ART_C)


def test_artifact_ids_accepts_a_tuple():
    assert validate_artifact_ids((ART_A,)) == (ART_A,)


@pytest.mark.parametrize(
    "value", [ART_A, {ART_A: 1}, [ART_A, 5], [""], ["  "], [None], 5],
    ids=["bare-string", "dict", "non-string-item", "empty-item", "blank-item", "none-item", "int"],
)
def test_artifact_ids_must_be_a_list_of_strings(value):
    with refused("artifact_ids must be a list of artifact id strings", "artifact_ids"):
        validate_artifact_ids(value)


def test_artifact_ids_apply_routing_rules_to_each_item():
    with refused("artifact_ids contains control characters", "artifact_ids"):
        validate_artifact_ids(["art\x01x"])
    with refused("artifact_ids exceeds maximum length of 256 characters", "artifact_ids"):
        validate_artifact_ids(["a" * 257])


@pytest.mark.parametrize("kind", sorted(ARTIFACT_KINDS))
def test_artifact_kind_accepts_every_known_kind(kind):
    assert validate_artifact_kind(f" {kind} ") == kind


@pytest.mark.parametrize("value", ["image", "Patch", "", None, 3])
def test_artifact_kind_refuses_others_listing_the_sorted_kinds(value):
    with refused(f"kind={value!r} is not one of: file, json, log, note, patch", "kind"):
        validate_artifact_kind(value)


# --- agent token -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["mac-claude", "a", "A.b_c-9", "  linux-codex\n"])
def test_agent_token_accepts_single_tokens(value):
    assert validate_agent_token(value) == value.strip()


@pytest.mark.parametrize(
    "value",
    ["", "   ", "two words", "tab\there", "\t", "x-->", "a{b}", "a/b", "é", "a\nb", None, 5, "*"],
)
def test_agent_token_refuses_anything_but_one_token(value):
    with refused(f"--agent {AGENT_HINT}", "agent"):
        validate_agent_token(value)


@pytest.mark.parametrize("value", ["mac:claude:shop", "windows:codex:palace.v2", "  linux:gemini:app_1 "])
def test_mempalace_host_harness_project_ids_are_agent_ids(value):
    """MemPalace RFC 005 / 3.10: host:harness:project, three stable lowercase tokens."""
    assert validate_agent_token(value) == value.strip()


@pytest.mark.parametrize("value", ["mac:claude", "a:b:c:d", "Mac:claude:shop", "mac::shop", "mac:claude:two words",
                                   "mac:claude:x-->", "mac:a{b}:shop", "mac:grok:tui:x", "mac:MemPalace:x",
                                   "mac:-x:shop", ":claude:shop"])
def test_an_id_with_colons_must_be_the_whole_tuple(value):
    with pytest.raises(ValidationError, match=re.escape("an id with colons is host:harness:project (MemPalace RFC 005)")):
        validate_agent_token(value)


def test_human_is_never_an_agents_host_so_a_persons_id_stays_unambiguous():
    with refused("--agent 'human:claude:shop': human: starts a person's id (human:NAME), never an agent's; name the "
                 "agent's machine instead", "agent"):
        validate_agent_token("human:claude:shop")


@pytest.mark.parametrize("bad", ["", " ", "two words", "tab\there", "x-->", "a{b}", "Windows", "grok:tui", "MemPalace"])
@pytest.mark.parametrize("part", ["host", "harness", "project"])
def test_rules_parts_are_refused_as_mempalace_refuses_them(part, bad):
    """MemPalace 3.10's `rules --host --harness --project`: each part a stable lowercase token,
    refused in every position with the same words."""
    parts = {"host": "mac", "harness": "claude", "project": "shop", part: bad}
    with pytest.raises(ValidationError, match=f"^--{part} must be a stable lowercase token like windows, grok, or "
                                              "mempalace ") as info:
        agent_id_from_parts(parts["host"], parts["harness"], parts["project"])
    assert info.value.field == part
    assert agent_id_from_parts(" mac ", "claude", "shop ") == "mac:claude:shop"


def test_agent_token_message_names_the_flag():
    with refused(f"--to {AGENT_HINT}", "agent"):
        validate_agent_token("two words", flag="--to")


# --- timeout ---------------------------------------------------------------------------------


def test_timeout_none_is_the_default():
    assert validate_timeout_ms(None) == 60_000


@pytest.mark.parametrize(("value", "expected"), [(0, 0), (1500, 1500), (1.9, 1), (300_000, 300_000)])
def test_timeout_accepts_non_negative_numbers(value, expected):
    assert validate_timeout_ms(value) == expected


@pytest.mark.parametrize("value", [300_001, 10**12, float("inf")])
def test_timeout_is_clamped_to_the_maximum(value):
    assert MAX_WAIT_TIMEOUT_MS == 300_000
    assert validate_timeout_ms(value) == 300_000


@pytest.mark.parametrize(
    "value", [-1, -0.5, float("nan"), True, False, "100", [100], float("-inf")],
    ids=["neg", "neg-float", "nan", "true", "false", "str", "list", "neg-inf"],
)
def test_timeout_refuses_negative_nan_bool_and_non_numbers(value):
    with refused("timeout_ms must be a non-negative number", "timeout_ms"):
        validate_timeout_ms(value)


def test_timeout_message_names_the_field():
    with refused("idle_ms must be a non-negative number", "idle_ms"):
        validate_timeout_ms(-1, field="idle_ms")


# --- since_created_at ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-30", "2026-11-30"),
        (" 2026-11-30 ", "2026-11-30"),
        ("2026-11-30T01:33:49Z", "2026-11-30T01:33:49.000000Z"),
        ("2026-11-30T01:33:49+00:00", "2026-11-30T01:33:49.000000Z"),
        ("2026-11-30T01:33:49.5Z", "2026-11-30T01:33:49.500000Z"),
        ("2026-11-30T01:33:49.123456+00:00", "2026-11-30T01:33:49.123456Z"),
    ],
)
def test_since_created_at_accepted_forms_normalize_to_created_at_shape(value, expected):
    assert validate_created_at_bound("since_created_at", value) == expected


@pytest.mark.parametrize("value", [None, "", "  "])
def test_since_created_at_blank_means_absent(value):
    assert validate_created_at_bound("since_created_at", value) is None


@pytest.mark.parametrize(
    "value",
    [
        "yesterday",
        "2026-11-30T01:33:49",  # no zone
        "2026-11-30T01:33:49+02:00",  # not UTC
        "2026-11-30 01:33:49Z",
        "2026-11-30T01:33:49.1234567Z",  # more than microseconds
        "2026/11/30",
        "２０２６-１１-３０",  # fullwidth digits
        "٢٠٢٦-١١-٣٠",  # Arabic-Indic digits
        1700000000,
        ["2026-11-30"],
    ],
)
def test_since_created_at_refuses_other_forms_with_the_hint(value):
    with refused(f"since_created_at={value!r} {CREATED_AT_HINT}", "since_created_at"):
        validate_created_at_bound("since_created_at", value)


def test_since_created_at_refuses_non_ascii_digits():
    """Regression: \\d matched other scripts' digits, accepting a bound that sorts after every
    created_at and so silently matched nothing."""
    with pytest.raises(ValidationError):
        validate_created_at_bound("since_created_at", "2026-11-30T01:33:4٩Z")


# --- AppendRequest ---------------------------------------------------------------------------


def test_append_request_minimal_gets_defaults():
    req = AppendRequest.from_wire(valid_append(), LIMITS)
    assert req == AppendRequest(type="note", stream="work", room="backend", from_agent="mac-claude")
    assert (req.body, req.metadata_json, req.artifact_ids, req.status, req.to_agent) == ("", "{}", (), None, None)


def test_append_request_cleans_every_field():
    req = AppendRequest.from_wire(
        valid_append(
            type=" task.claim ", stream=" work ", topic=" auth ", to_agent="*", correlation_id="c1",
            branch="main", base_commit="abc", status=" open ", ack_of="evt_x", artifact_ids=[ART_A, ART_A],
            body="hello", metadata={"b": 1, "a": 2},
        ),
        LIMITS,
    )
    assert req.type == "task.claim"
    assert req.stream == "work"
    assert req.topic == "auth"
    assert req.to_agent == "*"
    assert (req.correlation_id, req.branch, req.base_commit, req.ack_of) == ("c1", "main", "abc", "evt_x")
    assert req.status == "open"
    assert req.artifact_ids == (ART_A,)
    assert req.body == "hello"
    assert req.metadata_json == '{"a":2,"b":1}'


def test_append_request_blank_optionals_become_none():
    req = AppendRequest.from_wire(valid_append(topic="  ", to_agent="", status=""), LIMITS)
    assert (req.topic, req.to_agent, req.status) == (None, None, None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "type must be a non-empty string"),
        ({"type": "note"}, "stream must be a non-empty string"),
        ({"type": "note", "stream": "s"}, "room must be a non-empty string"),
        ({"type": "note", "stream": "s", "room": "r"}, "from_agent must be a non-empty string"),
        (valid_append(type="Bad", stream=""), "type='Bad' is not a valid event type"),
        (valid_append(topic=1, status="nope"), "topic must be a string"),
        (valid_append(status="nope", body=1), "status='nope' is not one of"),
        (valid_append(artifact_ids="x", body=1), "artifact_ids must be a list"),
        (valid_append(body=1, metadata=[]), "body must be a string"),
        (valid_append(metadata=[]), "metadata must be an object"),
    ],
)
def test_append_request_reports_the_first_broken_rule_in_mempalace_order(args, message):
    with pytest.raises(ValidationError, match=f"^{re.escape(message)}"):
        AppendRequest.from_wire(args, LIMITS)


def test_append_request_applies_the_given_limits():
    with refused("body is 6 bytes; maximum is 5 bytes", "body"):
        AppendRequest.from_wire(valid_append(body="abcdef"), Limits(max_body_bytes=5))


# --- ListQuery.from_wire ---------------------------------------------------------------------


def test_list_query_defaults():
    q = ListQuery.from_wire({})
    assert q == ListQuery()
    assert (q.order, q.limit, q.preview) == ("asc", 50, False)
    assert all(getattr(q, name) is None for name in FILTER_FIELDS)


@pytest.mark.parametrize(("value", "expected"), [(1, 1), (50, 50), (500, 500), (501, 500), (10**9, 500)])
def test_list_limit_is_capped_at_500(value, expected):
    assert ListQuery.from_wire({"limit": value}).limit == expected


@pytest.mark.parametrize("value", [0, -1, True, False, 1.0, "10", [10]])
def test_list_limit_must_be_a_positive_integer(value):
    with refused("limit must be a positive integer", "limit"):
        ListQuery.from_wire({"limit": value})


@pytest.mark.parametrize(("value", "expected"), [("asc", "asc"), ("DESC", "desc"), (" Desc ", "desc"), ("ASC", "asc")])
def test_list_order_is_case_insensitive(value, expected):
    assert ListQuery.from_wire({"order": value}).order == expected


@pytest.mark.parametrize("value", ["up", "", "ascending", 1, True])
def test_list_order_refuses_other_values(value):
    with refused(f"order={value!r} must be 'asc' or 'desc'", "order"):
        ListQuery.from_wire({"order": value})


@pytest.mark.parametrize("value", [1, "true", None], ids=["int", "str", "explicit-null"])
def test_list_preview_must_be_a_bool(value):
    with refused("preview must be true or false", "preview"):
        ListQuery.from_wire({"preview": value})


def test_list_preview_true_is_kept():
    assert ListQuery.from_wire({"preview": True}).preview is True


def test_list_filter_accepts_a_string_or_a_list():
    q = ListQuery.from_wire({"streams": "work", "rooms": ["a", " b ", "a"]})
    assert q.streams == frozenset({"work"})
    assert q.rooms == frozenset({"a", "b"})


def test_list_filter_all_blank_means_any():
    q = ListQuery.from_wire({"streams": ["", "  "], "rooms": "  ", "topics": [], "types": [" "], "statuses": [""]})
    assert (q.streams, q.rooms, q.topics, q.types, q.statuses) == (None, None, None, None, None)


@pytest.mark.parametrize("name", sorted(FILTER_FIELDS))
@pytest.mark.parametrize("value", [5, {"a": 1}, b"x", True])
def test_list_filter_must_be_string_or_list(name, value):
    with refused(f"{name} must be a string or a list of strings", name):
        ListQuery.from_wire({name: value})


def test_list_filter_items_are_validated_by_their_field_rules():
    assert ListQuery.from_wire({"types": [" task.claim ", "note"]}).types == frozenset({"task.claim", "note"})
    assert ListQuery.from_wire({"statuses": [" open ", "ready"]}).statuses == frozenset({"open", "ready"})
    with pytest.raises(ValidationError, match=r"^type='Bad' is not a valid event type"):
        ListQuery.from_wire({"types": ["Bad"]})
    with refused(f"status='done' is not one of: {STATUS_LIST}", "status"):
        ListQuery.from_wire({"statuses": ["done"]})
    with refused("stream must be a string", "stream"):
        ListQuery.from_wire({"streams": ["ok", 5]})
    with refused("type must be a string", "type"):
        ListQuery.from_wire({"types": [5]})
    with refused("room contains control characters", "room"):
        ListQuery.from_wire({"rooms": ["a\x01b"]})


def test_list_cursors_and_since_created_at_are_cleaned():
    q = ListQuery.from_wire(
        {"since_event_id": " evt_a ", "before_event_id": "", "since_created_at": "2026-11-30T01:33:49Z"}
    )
    assert q.since_event_id == "evt_a"
    assert q.before_event_id is None
    assert q.since_created_at == "2026-11-30T01:33:49.000000Z"


def test_list_since_created_at_error_names_the_field():
    with refused(f"since_created_at='soon' {CREATED_AT_HINT}", "since_created_at"):
        ListQuery.from_wire({"since_created_at": "soon"})


def test_list_query_to_wire_round_trips():
    q = ListQuery.from_wire(
        {
            "streams": ["b", "a"], "to_agents": "bob", "exclude_from_agents": ["eve"], "statuses": ["open"],
            "since_event_id": "evt_1", "since_created_at": "2026-11-30", "order": "DESC", "limit": 900,
            "preview": True,
        }
    )
    wire = q.to_wire()
    assert wire == {
        "streams": ["a", "b"], "to_agents": ["bob"], "exclude_from_agents": ["eve"], "statuses": ["open"],
        "since_event_id": "evt_1", "since_created_at": "2026-11-30", "order": "desc", "limit": 500,
        "preview": True,
    }
    assert ListQuery.from_wire(wire) == q


@settings(max_examples=200, deadline=None)
@given(
    filters=st.fixed_dictionaries(
        {},
        optional={
            name: st.lists(st.sampled_from(["a", "b", "c.d", "open", "ready"]), max_size=3)
            for name in FILTER_FIELDS
        },
    ),
    since=st.one_of(st.none(), st.sampled_from(["2026-11-30", "2026-11-30T01:33:49Z", "2026-11-30T01:33:49.5+00:00"])),
    order=st.sampled_from(["asc", "desc", "ASC"]),
    limit=st.integers(1, 1000),
)
def test_list_query_wire_round_trip_is_stable(filters, since, order, limit):
    args = {**filters, "order": order, "limit": limit}
    if "statuses" in args:
        args["statuses"] = [s for s in args["statuses"] if s in EVENT_STATUSES]
    if since is not None:
        args["since_created_at"] = since
    q = ListQuery.from_wire(args)
    assert ListQuery.from_wire(q.to_wire()) == q


def test_list_query_describe():
    assert ListQuery().describe() == "everything"
    q = ListQuery.from_wire({"streams": ["b", "a"], "to_agents": "bob"})
    assert q.describe() == "streams=a,b to_agents=bob"


# --- ListQuery.matches -----------------------------------------------------------------------


def event(**changes) -> dict:
    return {
        "stream": "work", "room": "backend", "topic": "auth", "type": "note", "to_agent": None,
        "from_agent": "alice", "correlation_id": None, "status": None,
        "created_at": "2026-11-30T01:33:49.123456Z", **changes,
    }


def q(**args) -> ListQuery:
    return ListQuery.from_wire(args)


def test_empty_query_matches_everything():
    assert q().matches(event())
    assert q().matches({})


@pytest.mark.parametrize(
    ("name", "field", "hit", "miss"),
    [
        ("streams", "stream", "work", "other"),
        ("rooms", "room", "backend", "frontend"),
        ("topics", "topic", "auth", "billing"),
        ("types", "type", "note", "task.claim"),
        ("from_agents", "from_agent", "alice", "bob"),
        ("correlation_ids", "correlation_id", "c1", "c2"),
        ("statuses", "status", "open", "ready"),
    ],
)
def test_each_filter_matches_its_field(name, field, hit, miss):
    query = q(**{name: [hit]})
    assert query.matches(event(**{field: hit}))
    assert not query.matches(event(**{field: miss}))


@pytest.mark.parametrize("name", ["topics", "correlation_ids", "statuses"])
def test_filter_on_optional_field_never_matches_none(name):
    field = FILTER_FIELDS[name]
    value = "open" if name == "statuses" else "x"
    assert not q(**{name: [value]}).matches(event(**{field: None}))


def test_values_within_a_filter_are_ored():
    query = q(rooms=["backend", "frontend"])
    assert query.matches(event(room="backend"))
    assert query.matches(event(room="frontend"))
    assert not query.matches(event(room="ops"))


def test_different_filters_are_anded():
    query = q(rooms=["backend"], types=["note"])
    assert query.matches(event(room="backend", type="note"))
    assert not query.matches(event(room="backend", type="task.claim"))
    assert not query.matches(event(room="ops", type="note"))


def test_to_agent_filter_matches_direct_and_broadcast():
    query = q(to_agents=["bob"])
    assert query.matches(event(to_agent="bob"))
    assert query.matches(event(to_agent="*")), "broadcast '*' reaches every recipient"
    assert not query.matches(event(to_agent="carol"))


def test_to_agent_none_never_matches_a_to_agent_filter():
    """Guards inbox semantics: an event addressed to nobody is not in anyone's inbox."""
    assert not q(to_agents=["bob"]).matches(event(to_agent=None))
    assert not q(to_agents=["bob"]).matches({k: v for k, v in event().items() if k != "to_agent"})


def test_to_agent_filter_ors_its_values():
    query = q(to_agents=["bob", "carol"])
    assert query.matches(event(to_agent="carol"))
    assert not query.matches(event(to_agent="dave"))


def test_exclude_from_agents_drops_matching_senders():
    query = q(exclude_from_agents=["alice"])
    assert not query.matches(event(from_agent="alice"))
    assert query.matches(event(from_agent="bob"))


def test_exclude_wins_over_a_positive_match():
    query = q(from_agents=["alice", "bob"], to_agents=["alice"], exclude_from_agents=["alice"])
    assert not query.matches(event(from_agent="alice", to_agent="alice"))
    assert query.matches(event(from_agent="bob", to_agent="alice"))


def test_since_created_at_datetime_compares_against_microsecond_created_at():
    """Regression: a bound without fraction digits must not sort after same-second events."""
    query = q(since_created_at="2026-11-30T01:33:49Z")
    assert query.matches(event(created_at="2026-11-30T01:33:49.123456Z"))
    assert query.matches(event(created_at="2026-11-30T01:33:49.000000Z")), "the bound is inclusive"
    assert query.matches(event(created_at="2026-11-30T01:33:50.000000Z"))
    assert not query.matches(event(created_at="2026-11-30T01:33:48.999999Z"))


def test_since_created_at_with_fraction_compares_exactly():
    query = q(since_created_at="2026-11-30T01:33:49.123456+00:00")
    assert query.matches(event(created_at="2026-11-30T01:33:49.123456Z"))
    assert not query.matches(event(created_at="2026-11-30T01:33:49.123455Z"))
    query = q(since_created_at="2026-11-30T01:33:49.5Z")
    assert query.matches(event(created_at="2026-11-30T01:33:49.500000Z"))
    assert not query.matches(event(created_at="2026-11-30T01:33:49.499999Z"))


def test_since_created_at_date_includes_that_whole_day():
    query = q(since_created_at="2026-11-30")
    assert query.matches(event(created_at="2026-11-30T00:00:00.000000Z"))
    assert query.matches(event(created_at="2026-11-30T23:59:59.999999Z"))
    assert not query.matches(event(created_at="2026-11-29T23:59:59.999999Z"))


def test_since_created_at_excludes_events_without_created_at():
    assert not q(since_created_at="2026-11-30").matches({"stream": "work"})


# --- parse_json_object -----------------------------------------------------------------------


def test_parse_json_object_accepts_an_object():
    assert parse_json_object('{"a": [1, "é"]}', "--metadata") == {"a": [1, "é"]}


def test_parse_json_object_refuses_invalid_json():
    with pytest.raises(ValidationError, match=r"^--metadata is not valid JSON: ") as info:
        parse_json_object("{nope", "--metadata")
    assert info.value.field == "metadata"


@pytest.mark.parametrize("text", ["[]", "1", '"x"', "null"])
def test_parse_json_object_refuses_non_objects(text):
    with refused("--meta must be a JSON object", "metadata"):
        parse_json_object(text, "--meta")


# -- events that arrive signed (issue 11, finding 9) ---------------------------------------------

import dataclasses as _dataclasses  # noqa: E402

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey as _Key  # noqa: E402

from palace_proto.envelope import GENESIS_HASH as _GENESIS  # noqa: E402
from palace_proto.envelope import seal_event as _seal  # noqa: E402
from palace_proto.validation import check_replicated_artifact, check_replicated_event  # noqa: E402

_SIGNER = _Key.generate()


def _signed(**overrides):
    fields = {"origin": "ori_" + "a" * 26, "origin_seq": 1, "prev_hash": _GENESIS,
              "created_at": "2026-12-01T01:02:03.000004Z", "type": "note", "stream": "s", "room": "r", "from_agent": "a",
              "body": "hello"}
    fields.update(overrides)
    return _seal(_SIGNER, **fields)


def test_a_sound_replicated_event_passes():
    check_replicated_event(_signed(), LIMITS)
    check_replicated_event(_dataclasses.replace(_signed(), body=None), LIMITS)  # redacted: no body to check


@pytest.mark.parametrize(("overrides", "field"), [
    ({"type": "Not A Type"}, "type"),
    ({"stream": " padded "}, "stream"),
    ({"room": "tab\there"}, "room"),
    ({"from_agent": ""}, "from_agent"),
    ({"to_agent": "x" * 257}, "to_agent"),
    ({"topic": "bell\x07"}, "topic"),
    ({"status": "maybe"}, "status"),
    ({"created_at": "2026-12-01"}, "created_at"),
    ({"created_at": "yesterday"}, "created_at"),
    ({"artifact_ids": ("not-an-artifact",)}, "artifact_ids"),
    ({"artifact_ids": ("art_" + "0" * 32,) * 2}, "artifact_ids"),
    ({"artifact_ids": tuple(f"art_{i:032x}" for i in range(257))}, "artifact_ids"),
    ({"body": "nul\x00"}, "body"),
    ({"body": "x" * (LIMITS.max_body_bytes + 1)}, "body"),
    ({"metadata_json": "[1, 2]"}, "metadata"),
    ({"metadata_json": '{"b":1, "a":2}'}, "metadata"),
    ({"metadata_json": "{not json"}, "metadata"),
    ({"metadata_json": '{"k":"' + "x" * LIMITS.max_metadata_bytes + '"}'}, "metadata"),
    ({"origin": "ori_short"}, "origin"),
])
def test_a_replicated_event_breaking_a_rule_is_refused_naming_the_field(overrides, field):
    with pytest.raises(ValidationError) as caught:
        check_replicated_event(_signed(**overrides), LIMITS)
    assert caught.value.field == field


def test_a_lone_surrogate_in_a_replicated_body_is_refused():
    event = _dataclasses.replace(_signed(), body="a\ud800b")
    with pytest.raises(ValidationError):
        check_replicated_event(event, LIMITS)


@pytest.mark.parametrize(("fields", "field"), [
    ({"kind": "virus"}, "kind"),
    ({"created_by": ""}, "created_by"),
    ({"created_by": "ctl\x1b"}, "created_by"),
    ({"created_at": ""}, "created_at"),
    ({"metadata_json": "not json"}, "metadata"),
    ({"metadata_json": "[]"}, "metadata"),
])
def test_replicated_artifact_records_obey_the_local_rules(fields, field):
    good = {"kind": "patch", "created_by": "alice", "created_at": "2026-12-01T01:02:03.000004Z", "metadata_json": "{}"}
    check_replicated_artifact(**good, limits=LIMITS)
    with pytest.raises(ValidationError) as caught:
        check_replicated_artifact(**{**good, **fields}, limits=LIMITS)
    assert caught.value.field == field


# --- page limit ------------------------------------------------------------------------------


def test_a_page_limit_is_its_default_when_absent_and_refused_beyond_its_range():
    assert validate_page_limit(None, 50, 500) == 50
    assert validate_page_limit(1, 50, 500) == 1 and validate_page_limit(500, 50, 500) == 500
    for bad in (0, 501, -1, True, 2.0, "5"):
        with refused("limit must be an integer from 1 to 500", "limit"):
            validate_page_limit(bad, 50, 500)
