"""palacectl/tool_sets.py: what ``--tools`` means (pure)."""

from __future__ import annotations

import pytest

from palacectl.tool_sets import ALL, GROUPS, LISTING_ORDER, ToolSetError, parse_tool_sets


def test_the_default_is_core_with_compact_schemas() -> None:
    assert parse_tool_sets(None) == (frozenset(GROUPS["core"]), False)


def test_groups_and_tool_names_add_up_and_all_lists_every_argument() -> None:
    names, full = parse_tool_sets("core, leases kg_query,mempalace_who")
    assert names == frozenset({*GROUPS["core"], *GROUPS["leases"], "mempalace_kg_query", "mempalace_who"})
    assert full is False
    # `all` is every tool an agent's loop may use: not the approve tool of palace's own runs, nor
    # the light tools (MemPalace's other surface over the same tools).
    assert parse_tool_sets(ALL) == (frozenset(LISTING_ORDER) - set(GROUPS["approvals"]) - set(GROUPS["light"]), True)
    assert parse_tool_sets("approvals")[0] == frozenset({"approve"})
    assert parse_tool_sets("light")[0] == frozenset({"palace_query", "palace_exec", "palace_coordinate"})
    assert parse_tool_sets("CORE")[0] == frozenset(GROUPS["core"])


def test_every_tool_is_in_exactly_one_group() -> None:
    every = [name for names in GROUPS.values() for name in names]
    assert len(every) == len(set(every)) == 46


@pytest.mark.parametrize("bad", ["", " , ", "bogus", "core,mempalace_nope", "event_"])
def test_a_word_that_is_no_group_or_tool_is_refused_by_name(bad: str) -> None:
    with pytest.raises(ToolSetError, match="--tools"):
        parse_tool_sets(bad)
