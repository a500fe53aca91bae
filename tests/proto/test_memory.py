"""palace_proto.memory: ids, validation wording, fact states, rank fusion, and memory events read
back from the log (what they carry where, both fact formats, the rules a peer's event must obey)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palace_proto.canonical import canonical_json
from palace_proto.errors import ValidationError
from palace_proto.memory import (
    FACT_FORMAT,
    MEMORY_TYPES,
    DiaryEntry,
    Drawer,
    FactAdd,
    FactAdded,
    FactEnded,
    FactInvalidate,
    FiledText,
    check_memory_event,
    diary_entry_id,
    diary_wing,
    drawer_id,
    fact_key,
    fact_state,
    hybrid_score,
    read_memory_event,
    validate_date,
)
from palace_proto.validation import Limits


def test_ids_are_content_derived_and_diaries_are_per_event():
    assert drawer_id("w", "r", "text") == drawer_id("w", "r", "text") != drawer_id("w", "r2", "text")
    assert diary_entry_id("evt_1") != diary_entry_id("evt_2")
    assert diary_wing("Mac Claude") == "wing_mac_claude"


def test_drawers_keep_content_verbatim_and_explain_bad_input():
    text = "  spaced\r\nand CRLF  "
    assert Drawer.from_wire({"wing": "w", "room": "r", "content": text, "added_by": "a"}, Limits()).content == text
    with pytest.raises(ValidationError, match="content must be a non-empty string"):
        Drawer.from_wire({"wing": "w", "room": "r", "content": "   ", "added_by": "a"}, Limits())
    with pytest.raises(ValidationError, match="wing"):
        Drawer.from_wire({"room": "r", "content": "x", "added_by": "a"}, Limits())
    entry = DiaryEntry.from_wire({"agent_name": "Reviewer", "content": "PR#42"}, Limits())
    assert (entry.agent, entry.wing, entry.topic, entry.entry) == ("reviewer", "wing_reviewer", "general", "PR#42")


def test_dates_and_fact_states():
    assert validate_date("as_of", "2026-11-30") == "2026-11-30"
    assert validate_date("as_of", "2026-11-30T01:02:03Z") == "2026-11-30T01:02:03Z"
    with pytest.raises(ValidationError, match="not a valid ISO-8601 date"):
        validate_date("as_of", "yesterday")
    assert fact_state("2026-01-01", "2026-06-01", "2026-03-01") == "active"
    assert fact_state("2026-01-01", "2026-06-01", "2026-06-01") == "historical"  # ended that day
    assert fact_state("2026-01-01", None, "2025-12-31") == "future"
    assert fact_state(None, None, "1999-01-01") == "active"
    with pytest.raises(ValidationError, match="valid_to must not be before valid_from"):
        FactAdd.from_wire({"subject": "a", "predicate": "b", "object": "c", "added_by": "x",
                           "valid_from": "2026-02-01", "valid_to": "2026-01-01"})


def test_hybrid_score_lets_either_signal_lead():
    paraphrase = hybrid_score(0.6, None)          # found by meaning only
    exact_id = hybrid_score(0.15, 18.0)           # a rare identifier matched, weakly similar
    noise = hybrid_score(0.05, 1.5)               # one common word, unrelated
    assert exact_id > noise and paraphrase > noise
    assert hybrid_score(0.6, 18.0) > max(paraphrase, exact_id)  # agreement wins
    assert hybrid_score(None, None) == 0.0 and hybrid_score(0.2, None) == 0.1


def read(event):
    return read_memory_event(event["type"], event["body"], json.dumps(event["metadata"], sort_keys=True,
                                                                     separators=(",", ":")))


def test_what_is_remembered_travels_in_the_body_only():
    """Guards finding 4: a redaction removes bodies, never signed metadata; memory.kg.add kept the
    fact (and its triple id, a hash of it) in the metadata, memory.drawer the drawer id (a hash of
    the content: a short secret is found again from it by guessing)."""
    drawer = Drawer("wing_p", "room", "the token is s3cr3t", "a", source_file="notes.md").event()
    assert drawer["metadata"] == {"wing": "wing_p", "room": "room", "source_file": "notes.md"}
    stated = FactAdded("deploy", "uses", "s3cr3t", valid_from="2026-01-01", source_drawer_id="drw_1")
    fact = FactAdd(stated, "a").event()
    ended = FactInvalidate("deploy", "uses", "s3cr3t", "2026-02-01", "a").event()
    for event in (fact, ended):
        assert event["metadata"] == {"format": FACT_FORMAT} and "s3cr3t" in event["body"]
    assert read(drawer) == FiledText("drawer", "wing_p", "room", "the token is s3cr3t", source_file="notes.md")
    assert read(fact) == stated
    assert read(ended) == FactEnded("deploy", "uses", "s3cr3t", ended="2026-02-01")
    diary = DiaryEntry.from_wire({"agent_name": "Rev", "entry": "PR#42"}, Limits()).event("rev")
    assert read(diary) == FiledText("diary", "wing_rev", "diary", "PR#42", topic="general", agent="rev")
    for event in (drawer, fact, ended, diary):  # redacted: nothing to show, and it passes
        assert read({**event, "body": None}) is None
        check_memory_event(event["type"], None, json.dumps(event["metadata"]))
    assert read_memory_event("note", "anything", "not even json") is None  # other types: not memory's to judge


def test_facts_in_the_format_before_schema_5_are_still_read():
    """Format 1, as the release before schema 5 wrote it: the fact in the metadata."""
    meta = {"triple_id": "kg_1", "subject": "palace", "predicate": "uses", "object": "sqlite",
            "valid_from": "2026-01-01"}
    assert read_memory_event("memory.kg.add", "palace → uses → sqlite", json.dumps(meta)) == \
        FactAdded("palace", "uses", "sqlite", valid_from="2026-01-01")
    end = {"subject": "palace", "predicate": "uses", "object": "sqlite", "ended": "2026-06-01"}
    assert read_memory_event("memory.kg.invalidate", "ended …", json.dumps(end)) == \
        FactEnded("palace", "uses", "sqlite", "2026-06-01")
    assert read_memory_event("memory.kg.add", None, json.dumps(meta)) is None  # redacted: out of the views
    old_drawer = {"drawer_id": "drw_x", "wing": "w", "room": "r"}
    assert read_memory_event("memory.drawer", "text", json.dumps(old_drawer)) == FiledText("drawer", "w", "r", "text")


FACT = '{"object":"c","predicate":"b","subject":"a"}'
F2 = json.dumps({"format": FACT_FORMAT})


@pytest.mark.parametrize(("type_", "body", "metadata", "named"), [
    ("memory.drawer", "text", "{", "metadata is not JSON"),
    ("memory.drawer", "text", "[" * 100_000, "metadata is not JSON"),  # nesting deep enough to recurse
    ("memory.drawer", "text", "[]", "metadata must be a JSON object"),
    ("memory.drawer", "text", '{"room":"r"}', "metadata.wing must be a non-empty string"),
    ("memory.drawer", "text", '{"room":"r","wing":7}', "metadata.wing must be a non-empty string"),
    ("memory.drawer", "text", '{"room":"r","wing":" w"}', "metadata.wing is not in the form a daemon stores"),
    ("memory.drawer", "text", '{"room":"r","wing":"' + "w" * 129 + '"}', "metadata.wing must be at most 128"),
    ("memory.drawer", "text", '{"room":"r","wing":"w","extra":1}', "metadata has unknown key(s) 'extra'"),
    ("memory.drawer", "text", '{"room":"r","source_file":"","wing":"w"}', "metadata.source_file is not in the form"),
    ("memory.drawer", "  \n", '{"room":"r","wing":"w"}', "body must be a non-empty string"),
    ("memory.drawer", "a\x00b", '{"room":"r","wing":"w"}', "body contains null bytes"),
    ("memory.diary", "e", '{"agent":"Rev","room":"diary","topic":"t","wing":"w"}', "metadata.agent must be lower-case"),
    ("memory.diary", "e", '{"agent":"rev","room":"r","topic":"t","wing":"w"}', "metadata.room of a diary entry"),
    ("memory.kg.add", FACT, '{"format":"fact/3"}', 'must be exactly {"format": "fact/2"}'),
    ("memory.kg.add", FACT, '{"format":"fact/2","subject":"a"}', 'must be exactly {"format": "fact/2"}'),
    ("memory.kg.add", "a → b → c", F2, "body is not JSON"),
    ("memory.kg.add", '["a"]', F2, "body must be a JSON object"),
    ("memory.kg.add", '{"subject": "a"}', F2, "body is not canonical JSON"),
    ("memory.kg.add", '{"object":"c","predicate":"b","subject":"\\ud800"}', F2, "body is not canonical JSON"),
    ("memory.kg.add", '{"object":"c","predicate":"b","subject":NaN}', F2, "body is not canonical JSON"),
    ("memory.kg.add", '{"object":"c","predicate":"b"}', F2, "body.subject must be a non-empty string"),
    ("memory.kg.add", '{"object":"c","predicate":"b","subject":["a"]}', F2, "body.subject must be a non-empty"),
    ("memory.kg.add", '{"object":"c","predicate":"b","subject":"a","valid_from":"soon"}', F2,
     "body.valid_from='soon' is not a valid ISO-8601 date"),
    ("memory.kg.add", '{"object":"c","predicate":"b","subject":"a","valid_from":"2026-02-01",'
     '"valid_to":"2026-01-01"}', F2, "body.valid_to must not be before valid_from"),
    ("memory.kg.add", '{"object":"c","predicate":"b","subject":"a","why":"x"}', F2, "body has unknown key(s) 'why'"),
    ("memory.kg.invalidate", FACT, F2, "body.ended must be a date"),
    ("memory.kg.add", "x", '{"object":"c","predicate":"b","subject":{"a":1}}', "metadata.subject must be a non-empty"),
    ("memory.kg.add", "x", '{"object":"c","predicate":"b","subject":"a","triple_id":5}',
     "metadata.triple_id must be a string"),
    ("memory.kg.invalidate", "x", '{"object":"c","predicate":"b","subject":"a"}', "metadata.ended must be a date"),
])
def test_a_memory_event_a_daemon_would_not_write_is_refused_naming_what_is_wrong(type_, body, metadata, named):
    """Guards finding 4/9: what a peer sends is checked by the rules local writes obey (the views
    then never see it; before, materialise raised KeyError/TypeError on such events)."""
    with pytest.raises(ValidationError) as caught:
        check_memory_event(type_, body, metadata)
    assert named in str(caught.value)


def test_the_fact_key_groups_every_event_about_one_fact_whatever_its_case_and_dates():
    assert fact_key("Palace", "USES", "SQLite") == fact_key("palace", "uses", "sqlite")
    assert fact_key("palace", "uses", "sqlite") != fact_key("palace", "uses", "x")
    added = read(FactAdd(FactAdded("Palace", "uses", "sqlite", valid_from="2026-01-01"), "a").event())
    ended = read(FactInvalidate("palace", "Uses", "SQLITE", "2026-02-01", "a").event())
    assert added.key == ended.key


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12)
_fact_like = st.fixed_dictionaries({}, optional={k: _json_values | st.text(max_size=20) for k in (
    "subject", "predicate", "object", "valid_from", "valid_to", "ended", "source_file", "wing", "room", "agent",
    "topic", "format", "triple_id", "drawer_id")})


def _text_of(value):
    try:
        return canonical_json(value)
    except ValueError:  # NaN: sent as the JSON a peer may write anyway
        return json.dumps(value)


@settings(max_examples=400, deadline=None)
@given(type_=st.sampled_from(sorted(MEMORY_TYPES)), body=st.none() | st.text(max_size=40) | _fact_like.map(_text_of),
       metadata=_fact_like.map(_text_of) | st.just(json.dumps({"format": FACT_FORMAT})) | st.text(max_size=20))
def test_reading_any_memory_event_either_succeeds_or_names_what_is_wrong(type_, body, metadata):
    """The views rely on it: whatever a peer puts in a memory event, reading it raises nothing but
    ValidationError (which leaves the event out), never KeyError, TypeError or a Unicode error."""
    try:
        read_memory_event(type_, body, metadata)
    except ValidationError as exc:
        assert str(exc)
