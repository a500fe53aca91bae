"""Smoke test of the fixtures: a daemon starts, takes an append, lists it, and stops with exit 0."""

from tests.helpers import append_event


def test_append_then_list_round_trip(ctl):
    event = append_event(ctl, body="hello")
    listed = ctl("list", "--json").json()
    assert listed["count"] == 1 and listed["events"][0]["id"] == event["id"]
