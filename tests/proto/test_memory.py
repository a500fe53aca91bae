"""palace_proto.memory: ids, validation wording, fact states, and rank fusion (pure)."""

from __future__ import annotations

import pytest

from palace_proto.errors import ValidationError
from palace_proto.memory import (
    DiaryEntry, Drawer, FactAdd, diary_entry_id, diary_wing, drawer_id, fact_state, hybrid_score, validate_date,
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
