"""Pipelined requests on one local-API connection (palaced/api.py): replies come back in request
order whichever task answers them — the connection's reader answers short requests itself when
nothing is queued before them, the processor everything else. Real daemon, real socket."""

from __future__ import annotations

from tests.helpers import RawClient

NOTE = {"type": "note", "stream": "s", "room": "r", "from_agent": "a"}


def test_a_short_request_behind_a_wait_is_answered_after_it(daemon):
    """Guards the reader's inline answers (issue 13): a ``ping`` and an ``append`` pipelined behind
    a ``wait`` must not overtake it; the wait is woken by an append from another connection."""
    with RawClient(daemon.socket_path) as waiter, RawClient(daemon.socket_path) as writer:
        waiter.hello()
        writer.hello()
        waiter.send_message({"id": 10, "op": "wait", "args": {"to_agent": "bob", "timeout_ms": 30_000}})
        waiter.send_message({"id": 11, "op": "ping", "args": {}})
        waiter.send_message({"id": 12, "op": "append", "args": {**NOTE, "body": "behind the wait"}})
        woke = writer.call("append", **NOTE, to_agent="bob", body="wake up")
        replies = [waiter.recv_message() for _ in range(3)]
    assert [r["id"] for r in replies] == [10, 11, 12], replies
    assert all(r["ok"] for r in replies), replies
    assert [e["id"] for e in replies[0]["result"]["events"]] == [woke["id"]]
    assert replies[2]["result"]["body"] == "behind the wait"


def test_pipelined_appends_are_answered_in_order_and_numbered_in_order(daemon):
    """Many appends sent before reading any reply: one reply each, in order, and the log holds
    them in the order they were sent."""
    with RawClient(daemon.socket_path) as client:
        client.hello()
        for i in range(12):  # within the 16 requests a connection may have waiting
            client.send_message({"id": 100 + i, "op": "append", "args": {**NOTE, "body": f"pipelined {i}"}})
        replies = [client.recv_message() for _ in range(12)]
        listed = client.call("list", stream=["s"], order="asc", limit=50)["events"]
    assert [r["id"] for r in replies] == list(range(100, 112))
    assert [r["result"]["body"] for r in replies] == [f"pipelined {i}" for i in range(12)]
    assert [e["body"] for e in listed] == [f"pipelined {i}" for i in range(12)]
    assert [e["origin_seq"] for e in listed] == sorted(e["origin_seq"] for e in listed)
