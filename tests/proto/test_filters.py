"""The event filters' one table (proto/filters.py): what clients build is what ListQuery reads."""

from __future__ import annotations

import dataclasses

import pytest

from palace_proto.filters import FILTER_FIELDS, FILTER_OPTIONS, filter_args
from palace_proto.validation import ListQuery


def test_every_filter_a_client_offers_is_a_field_of_the_query_the_daemon_reads():
    fields = {f.name for f in dataclasses.fields(ListQuery)}
    assert set(FILTER_OPTIONS.values()) <= set(FILTER_FIELDS) <= fields
    # Only the watch's own exclusion has no option of its own.
    assert set(FILTER_FIELDS) - set(FILTER_OPTIONS.values()) == {"exclude_types"}
    for option, wire in FILTER_OPTIONS.items():
        assert FILTER_FIELDS[wire] == option.removeprefix("exclude_")


def test_options_become_wire_filters_in_the_order_given_and_absent_ones_are_left_out():
    args = filter_args(to_agent="bob", stream=["a", "b"], room=None, topic="", type=[], status=("open",))
    assert args == {"to_agents": ["bob"], "streams": ["a", "b"], "statuses": ["open"]}
    assert list(args) == ["to_agents", "streams", "statuses"]
    assert filter_args() == {}


def test_the_daemon_reads_what_a_client_built():
    query = ListQuery.from_wire(filter_args(to_agent="bob", exclude_from_agent=["bob"], correlation_id="task_a"))
    assert (query.to_agents, query.exclude_from_agents, query.correlation_ids) == (
        frozenset({"bob"}), frozenset({"bob"}), frozenset({"task_a"}))
    assert query.matches({"to_agent": "*", "from_agent": "alice", "correlation_id": "task_a"})
    assert not query.matches({"to_agent": "*", "from_agent": "bob", "correlation_id": "task_a"})


def test_a_name_that_is_not_a_filter_is_a_callers_mistake():
    with pytest.raises(TypeError, match="'streams' is not an event filter"):
        filter_args(streams=["a"])
