"""The socket API survives garbage and crashes (issue 2 §5), against real palaced processes.

Every abuse is done with a raw ``socket.socket(AF_UNIX)`` client, byte for byte, and is followed
by the same check: the daemon process is still running, a bystander connection opened *before*
the abuse still gets answers, and a fresh connection (or palacectl) still works. The crash tests
SIGKILL a daemon under an append storm and check the log afterwards: every acknowledged append
is there, per-origin sequences have no gaps, and the hash chain links.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palace_proto.envelope import GENESIS_HASH
from palace_proto.errors import API_ERROR_CODES, ProtocolError
from palace_proto.features import OPS
from palace_proto.framing import encode_frame
from tests.helpers import IO_TIMEOUT_S, PYTHON, Daemon, PeerClosed, RawClient, connect_api, run_ctl

HEADER = struct.Struct(">I")


# -- a raw client ------------------------------------------------------------------------------


def assert_error(reply: Any, code: str, *, rid: Any = "any") -> None:
    assert isinstance(reply, dict), reply
    assert reply.get("ok") is False, reply
    assert reply["error"]["code"] == code, reply
    assert isinstance(reply["error"]["message"], str) and reply["error"]["message"], reply
    if rid != "any":
        assert reply.get("id") == rid, reply


def greeted(daemon: Daemon) -> RawClient:
    client = RawClient(daemon.socket_path)
    try:
        client.hello()
    except BaseException:
        client.close()
        raise
    return client


def assert_serving(daemon: Daemon, *bystanders: RawClient) -> None:
    """The daemon is alive, connections opened before the abuse still work, and new ones do too."""
    assert daemon.running, f"palaced died: {daemon.log()}"
    for bystander in bystanders:
        assert bystander.call("ping") == {"pong": True}
    with greeted(daemon) as fresh:
        assert fresh.call("ping") == {"pong": True}
    assert "Traceback" not in daemon.log(), daemon.log()


def assert_ctl_works(daemon: Daemon) -> None:
    """A normal palacectl append and list still work."""
    appended = run_ctl(daemon.home, "append", "--json", "--type", "note", "--stream", "project/faults",
                       "--room", "general", "--from-agent", "survivor", "--body", "still here")
    assert appended.returncode == 0, appended
    event = appended.json()
    listed = run_ctl(daemon.home, "list", "--json", "--from-agent", "survivor", "--order", "desc", "--limit", "5")
    assert listed.returncode == 0, listed
    assert event["id"] in [e["id"] for e in listed.json()["events"]]


def poll(predicate: Callable[[], bool], timeout: float = 5.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def watcher_agents(client: RawClient) -> list[str | None]:
    return [w["agent"] for w in client.call("who")["watchers"]]


@contextlib.contextmanager
def running_daemon() -> Iterator[Daemon]:
    """A palaced on its own short temporary home, for tests that cannot take function fixtures."""
    tmp = Path(tempfile.mkdtemp(prefix="palf", dir="/tmp"))
    daemon = Daemon(tmp / "home").start()
    try:
        yield daemon
    finally:
        try:
            if daemon.running:
                assert daemon.stop() == 0, daemon.log()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def note_args(**overrides: Any) -> dict[str, Any]:
    return {"type": "note", "stream": "project/faults", "room": "general", "from_agent": "raw", **overrides}


# -- garbage on the wire -----------------------------------------------------------------------


RANDOM_LENGTHS = [1, 2, 3, 4, 5, 8, 13, 64, 1000, 65_543]


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("after_hello", [False, True], ids=["before-hello", "after-hello"])
def test_random_bytes_get_an_error_or_a_close(daemon, seed, after_hello):
    rng = random.Random(seed)
    with greeted(daemon) as bystander:
        for length in RANDOM_LENGTHS:
            garbage = rng.randbytes(length)
            with RawClient(daemon.socket_path) as client:
                if after_hello:
                    client.hello()
                client.send_bytes(garbage)
                with contextlib.suppress(OSError):
                    client.sock.shutdown(socket.SHUT_WR)
                frames = client.drain_until_closed()
            for frame in frames:
                assert isinstance(frame, dict) and frame.get("ok") is False, (length, frame)
                assert frame["error"]["code"] in API_ERROR_CODES, frame
            assert daemon.running, f"palaced died on {length} random bytes (seed {seed}): {daemon.log()}"
            assert bystander.call("ping") == {"pong": True}
        assert_serving(daemon, bystander)
    assert_ctl_works(daemon)


def test_random_bytes_on_many_concurrent_connections(daemon):
    """Garbage from many clients at once while a bystander keeps appending."""
    errors: list[Exception] = []

    def abuse(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(20):
                with RawClient(daemon.socket_path) as client:
                    client.send_bytes(rng.randbytes(rng.randrange(1, 3000)))
                    with contextlib.suppress(OSError):
                        client.sock.shutdown(socket.SHUT_WR)
                    client.drain_until_closed()
        except Exception as exc:  # noqa: BLE001 -- reported below, in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=abuse, args=(seed,)) for seed in range(100, 108)]
    with greeted(daemon) as bystander:
        for t in threads:
            t.start()
        appended = [bystander.call("append", **note_args(body=f"n{i}"))["id"] for i in range(50)]
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors
        listed = bystander.call("list", from_agents=["raw"], limit=500)
        assert [e["id"] for e in listed["events"]] == appended
        assert_serving(daemon, bystander)


def test_oversized_header_is_refused_before_the_payload(daemon):
    with greeted(daemon) as bystander:
        for greet in (False, True):
            with RawClient(daemon.socket_path) as client:
                if greet:
                    client.hello()
                client.send_bytes(b"\xff\xff\xff\xff")  # announces 4 GiB; no payload follows
                reply = client.recv_message(timeout=5.0)
                assert_error(reply, "frame_too_large", rid=None)
                client.expect_closed(timeout=5.0)
        assert_serving(daemon, bystander)


def test_frame_limit_is_exact(daemon):
    """After hello, a header of exactly the limit waits for its payload; one byte more is refused at
    once. (Before hello the limit is 4 KiB: tests/e2e/test_api_hostile.py.)"""
    with greeted(daemon) as bystander:
        limit = bystander.hello()["limits"]["max_frame_bytes"]
        with greeted(daemon) as client:
            client.send_bytes(HEADER.pack(limit + 1))
            assert_error(client.recv_message(timeout=5.0), "frame_too_large", rid=None)
            client.expect_closed(timeout=5.0)
        with greeted(daemon) as client:
            client.send_bytes(HEADER.pack(limit) + b"\x00" * 1000)
            with pytest.raises(TimeoutError):
                client.recv_message(timeout=0.5)  # still waiting for the rest of the frame
        assert_serving(daemon, bystander)


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # the one byte msgpack never uses
        b"\x82\xa2id",  # a map cut short inside the frame
        msgpack.packb({"id": 1, "op": "hello", "args": {"version": 1}}) + b"\x00",  # trailing bytes
        b"\xd9\x05ab",  # str8 announcing more than the frame holds
        b"\xa3\xff\xfe\xfd",  # a str that is not UTF-8 (surrogatepass does not rescue it)
        b"",  # an empty frame
    ],
    ids=["reserved-byte", "truncated-map", "extra-data", "short-str8", "bad-utf8", "empty"],
)
def test_undecodable_payload_gets_bad_request_then_close(daemon, payload):
    with greeted(daemon) as bystander:
        with RawClient(daemon.socket_path) as client:
            client.hello()
            client.send_bytes(HEADER.pack(len(payload)) + payload)
            assert_error(client.recv_message(), "bad_request", rid=None)
            client.expect_closed()
        assert_serving(daemon, bystander)


@pytest.mark.parametrize("message", [[1, 2, 3], "hello", 42, None, b"bytes", 1.5, True])
def test_non_map_message_gets_bad_request_and_connection_stays_usable(daemon, message):
    with greeted(daemon) as bystander:
        with RawClient(daemon.socket_path) as client:
            client.send_message(message)  # before hello
            assert_error(client.recv_message(), "bad_request", rid=None)
            client.hello()
            client.send_message(message)  # and after
            assert_error(client.recv_message(), "bad_request", rid=None)
            assert client.call("ping") == {"pong": True}
        assert_serving(daemon, bystander)


def test_request_before_hello_and_wrong_versions(daemon):
    with RawClient(daemon.socket_path) as client:
        assert_error(client.request("ping"), "bad_request", rid=1)
        assert_error(client.request("append", **note_args()), "bad_request", rid=2)
        assert_error(client.request("subscribe"), "bad_request", rid=3)
        for version in (2, 0, -1, "1", 1.0, True, None, [1]):
            assert_error(client.request("hello", version=version), "version_mismatch")
        assert_error(client.request("hello"), "version_mismatch")
        assert_error(client.request("list"), "bad_request")  # a failed hello does not greet
        hello = client.hello()
        assert hello["version"] == 1
        assert client.call("list")["count"] == 0  # nothing was written before the hello
    assert_serving(daemon)


@pytest.mark.parametrize("op", ["frobnicate", "", "APPEND", "append ", "op_append", "hello_result",
                                "_get_event_or_404", "__init__", "x" * 10_000])
def test_unknown_op_and_connection_stays_usable(daemon, op):
    assert op not in OPS
    with greeted(daemon) as client:
        assert_error(client.request(op), "unknown_op", rid=2)
        assert client.call("ping") == {"pong": True}
        assert_error(client.request(op, **note_args()), "unknown_op")
        assert client.call("list")["count"] == 0
    assert_serving(daemon)


# (raw request map, acceptable error codes): wrong shapes are bad_request, wrong argument types
# are invalid_argument; either way the connection stays usable and nothing is written.
WRONG_TYPES: list[tuple[str, dict[str, Any], set[str]]] = [
    ("id-str", {"id": "x", "op": "ping", "args": {}}, {"bad_request"}),
    ("id-float", {"id": 1.5, "op": "ping", "args": {}}, {"bad_request"}),
    ("id-bool", {"id": True, "op": "ping", "args": {}}, {"bad_request"}),
    ("id-missing", {"op": "ping", "args": {}}, {"bad_request"}),
    ("id-list", {"id": [1], "op": "ping", "args": {}}, {"bad_request"}),
    ("op-int", {"id": 7, "op": 5, "args": {}}, {"bad_request"}),
    ("op-missing", {"id": 7, "args": {}}, {"bad_request"}),
    ("op-bytes", {"id": 7, "op": b"ping", "args": {}}, {"bad_request"}),
    ("args-list", {"id": 7, "op": "ping", "args": [1]}, {"bad_request"}),
    ("args-str", {"id": 7, "op": "append", "args": "type=note"}, {"bad_request"}),
    ("args-int", {"id": 7, "op": "list", "args": 3}, {"bad_request"}),
    ("args-bytes-keys", {"id": 7, "op": "list", "args": {b"limit": 3}}, {"bad_request"}),
    ("append-stream-int", {"id": 7, "op": "append", "args": note_args(stream=123)}, {"invalid_argument"}),
    ("append-type-list", {"id": 7, "op": "append", "args": note_args(type=["note"])}, {"invalid_argument"}),
    ("append-body-int", {"id": 7, "op": "append", "args": note_args(body=5)}, {"invalid_argument"}),
    ("append-body-bytes", {"id": 7, "op": "append", "args": note_args(body=b"hi")}, {"invalid_argument"}),
    ("append-metadata-str", {"id": 7, "op": "append", "args": note_args(metadata="{}")}, {"invalid_argument"}),
    ("append-metadata-binary", {"id": 7, "op": "append", "args": note_args(metadata={"a": b"\x00"})},
     {"invalid_argument"}),
    ("append-artifacts-str", {"id": 7, "op": "append", "args": note_args(artifact_ids="art_x")},
     {"invalid_argument"}),
    ("append-status-int", {"id": 7, "op": "append", "args": note_args(status=1)}, {"invalid_argument"}),
    ("append-to-agent-map", {"id": 7, "op": "append", "args": note_args(to_agent={"x": 1})}, {"invalid_argument"}),
    ("list-limit-str", {"id": 7, "op": "list", "args": {"limit": "x"}}, {"invalid_argument"}),
    ("list-limit-negative", {"id": 7, "op": "list", "args": {"limit": -1}}, {"invalid_argument"}),
    ("list-limit-float", {"id": 7, "op": "list", "args": {"limit": 2.5}}, {"invalid_argument"}),
    ("list-order-int", {"id": 7, "op": "list", "args": {"order": 1}}, {"invalid_argument"}),
    ("list-streams-int", {"id": 7, "op": "list", "args": {"streams": 5}}, {"invalid_argument"}),
    ("list-streams-nested", {"id": 7, "op": "list", "args": {"streams": [["a"]]}}, {"invalid_argument"}),
    ("list-since-int", {"id": 7, "op": "list", "args": {"since_event_id": 5}}, {"invalid_argument"}),
    ("list-created-at-int", {"id": 7, "op": "list", "args": {"since_created_at": 5}}, {"invalid_argument"}),
    ("list-preview-str", {"id": 7, "op": "list", "args": {"preview": "yes"}}, {"invalid_argument"}),
    ("wait-timeout-str", {"id": 7, "op": "wait", "args": {"timeout_ms": "x"}}, {"invalid_argument"}),
    ("wait-timeout-nan", {"id": 7, "op": "wait", "args": {"timeout_ms": float("nan")}}, {"invalid_argument"}),
    ("subscribe-start-int", {"id": 7, "op": "subscribe", "args": {"start": 5}}, {"invalid_argument"}),
    ("subscribe-limit-str", {"id": 7, "op": "subscribe", "args": {"limit": "x"}}, {"invalid_argument"}),
    ("get-event-id-int", {"id": 7, "op": "get_event", "args": {"event_id": 5}}, {"invalid_argument"}),
    ("ack-event-id-list", {"id": 7, "op": "ack", "args": {"event_id": [], "from_agent": "a"}}, {"invalid_argument"}),
    ("redact-from-agent-int", {"id": 7, "op": "redact", "args": {"event_id": "x", "from_agent": 1}},
     {"invalid_argument"}),
    ("artifact-put-content-int", {"id": 7, "op": "artifact_put",
                                  "args": {"kind": "note", "created_by": "a", "content": 5}}, {"invalid_argument"}),
    ("artifact-get-id-map", {"id": 7, "op": "artifact_get", "args": {"artifact_id": {}}}, {"invalid_argument"}),
    ("patch-submit-content-list", {"id": 7, "op": "patch_submit",
                                   "args": {"from_agent": "a", "to_agent": "b", "correlation_id": "c",
                                            "content": [1]}}, {"invalid_argument"}),
    ("task-create-goal-int", {"id": 7, "op": "task_create", "args": {"goal": 5}}, {"invalid_argument"}),
    ("task-show-id-int", {"id": 7, "op": "task_show", "args": {"correlation_id": 5}}, {"invalid_argument"}),
    ("task-list-agent-int", {"id": 7, "op": "task_list", "args": {"agent": 5}}, {"invalid_argument"}),
]


@pytest.mark.parametrize("message,codes", [
    pytest.param(m, c, id=i) for i, m, c in WRONG_TYPES
])
def test_wrong_field_types_get_error_replies_and_connection_stays_usable(daemon, message, codes):
    with greeted(daemon) as bystander:
        with greeted(daemon) as client:
            client.send_message(message)
            reply = client.recv_message()
            assert isinstance(reply, dict) and reply.get("ok") is False, reply
            assert reply["error"]["code"] in codes, reply
            rid = message.get("id")
            assert reply.get("id") == (rid if isinstance(rid, int) and not isinstance(rid, bool) else None), reply
            assert client.call("ping") == {"pong": True}
            assert client.call("status")["events"] == 0, "a rejected request wrote something"
        assert_serving(daemon, bystander)


def test_pipelined_garbage_and_good_requests_are_answered_in_order(daemon):
    """Bad requests in the middle of a pipeline do not disturb the good ones around them."""
    with greeted(daemon) as client:
        frames = [
            encode_frame({"id": 10, "op": "append", "args": note_args(body="a")}),
            encode_frame([1, 2]),
            encode_frame({"id": 11, "op": "frobnicate", "args": {}}),
            encode_frame({"id": 12, "op": "list", "args": {"limit": "x"}}),
            encode_frame({"id": 13, "op": "append", "args": note_args(body="b")}),
        ]
        client.send_bytes(b"".join(frames))
        replies = [client.recv_message() for _ in frames]
        by_id = {r.get("id"): r for r in replies}
        assert by_id[10]["ok"] and by_id[13]["ok"], replies
        assert_error(by_id[None], "bad_request")
        assert_error(by_id[11], "unknown_op")
        assert_error(by_id[12], "invalid_argument")
        assert [e["body"] for e in client.call("list")["events"]] == ["a", "b"]
    assert_serving(daemon)


# A lone surrogate: not valid UTF-8, but the framing decodes str with surrogatepass, so a client
# can smuggle one into any string field. It must be refused or dropped, never an internal error.
LONE = "a\ud800b"
SURROGATE_CASES = [
    pytest.param("append", note_args(stream=LONE), id="append-stream"),
    pytest.param("append", note_args(to_agent=LONE), id="append-to-agent"),
    pytest.param("append", note_args(body=LONE), id="append-body"),
    pytest.param("append", note_args(status=LONE), id="append-status"),
    pytest.param("append", note_args(artifact_ids=[LONE]), id="append-artifact-ids"),
    pytest.param("append", note_args(metadata={"k": LONE}), id="append-metadata-value"),
    pytest.param("append", note_args(metadata={LONE: 1}), id="append-metadata-key"),
    pytest.param("list", {"streams": [LONE]}, id="list-streams"),
    pytest.param("list", {"since_event_id": LONE}, id="list-since"),
    pytest.param("list", {"since_created_at": LONE}, id="list-created-at"),
    pytest.param("get_event", {"event_id": LONE}, id="get-event"),
    pytest.param("artifact_put", {"kind": "note", "created_by": "a", "content": LONE}, id="artifact-content"),
    pytest.param("artifact_put", {"kind": "note", "created_by": "a", "content": "x", "metadata": {"k": LONE}},
                 id="artifact-metadata"),
    pytest.param("task_create", {"project": LONE, "from_agent": "a", "to_agent": "b", "goal": LONE,
                                 "branch": "main", "base_commit": "abcdef1", "done": LONE}, id="task-create"),
    pytest.param("task_list", {"agent": LONE}, id="task-list"),
    pytest.param("wait", {"streams": [LONE], "timeout_ms": 0}, id="wait"),
]


@pytest.mark.parametrize("op,args", SURROGATE_CASES)
def test_lone_surrogates_never_cause_internal_errors(daemon, op, args):
    with greeted(daemon) as client:
        reply = client.request(op, **args)
        assert reply["ok"] or reply["error"]["code"] != "internal", reply
        assert client.call("ping") == {"pong": True}
    assert_serving(daemon)


def test_ack_with_unencodable_metadata_keeps_the_daemon_serving(daemon_factory, home):
    daemon = daemon_factory(home)
    healthy = False
    try:
        with greeted(daemon) as client:
            target = client.call("append", **note_args(body="target"))
            client.send_message({"id": 70, "op": "ack",
                                 "args": {"event_id": target["id"], "from_agent": "acker", "metadata": {"k": LONE}}})
            reply = client.recv_message(timeout=5.0)
            assert reply["id"] == 70 and (reply["ok"] or reply["error"]["code"] != "internal"), reply
        assert daemon.running and daemon.api_path.exists()
        with greeted(daemon) as probe:
            assert probe.call("append", **note_args(body="after"))["origin_seq"] >= 2
        healthy = True
    finally:
        if not healthy and daemon.running:
            daemon.kill9()  # a wedged daemon ignores SIGTERM; do not let the fixture wait on it


# -- clients that vanish -----------------------------------------------------------------------


@pytest.mark.parametrize("greet", [False, True], ids=["before-hello", "after-hello"])
def test_disconnect_mid_frame(daemon, greet):
    payload = msgpack.packb({"id": 5, "op": "append", "args": note_args(body="x" * 200)})
    with greeted(daemon) as bystander:
        for cut in (1, 2, 3, 4 + len(payload) // 2, 4 + len(payload) - 1):
            with RawClient(daemon.socket_path) as client:
                if greet:
                    client.hello()
                client.send_bytes((HEADER.pack(len(payload)) + payload)[:cut])
            assert bystander.call("ping") == {"pong": True}
        # Half a frame then a half-close: the daemon closes its side without an answer.
        with RawClient(daemon.socket_path) as client:
            client.send_bytes((HEADER.pack(len(payload)) + payload)[:40])
            client.sock.shutdown(socket.SHUT_WR)
            client.expect_closed()
        assert_serving(daemon, bystander)
        assert bystander.call("status")["events"] == 0  # the half append never happened
    assert_ctl_works(daemon)


def test_disconnect_mid_watch_removes_the_watcher(daemon):
    with greeted(daemon) as bystander, greeted(daemon) as steady:
        # A second watcher stays connected throughout and must keep receiving events.
        steady.send_message({"id": 50, "op": "subscribe", "args": {"agent": "steady", "to_agents": ["steady"]}})
        assert steady.recv_message()["push"] == "started"
        for round_ in range(3):
            agent = f"ghost-{round_}"
            with greeted(daemon) as ghost:
                ghost.send_message({"id": 2, "op": "subscribe",
                                    "args": {"agent": agent, "to_agents": [agent], "exclude_from_agents": [agent]}})
                started = ghost.recv_message()
                assert started["id"] == 2 and started["push"] == "started", started
                assert agent in watcher_agents(bystander)
                if round_ == 1:
                    # Leave an unread push behind: the daemon is writing when the client vanishes.
                    bystander.call("append", **note_args(to_agent=agent, body="unread"))
                if round_ == 2:
                    ghost.sock.shutdown(socket.SHUT_RDWR)
            assert poll(lambda agent=agent: agent not in watcher_agents(bystander)), watcher_agents(bystander)
        event = bystander.call("append", **note_args(to_agent="steady", body="for steady"))
        push = steady.recv_message()
        while push.get("push") == "cursor":  # progress over the ghosts' events, not a match
            push = steady.recv_message()
        assert push["push"] == "batch" and [e["id"] for e in push["events"]] == [event["id"]], push
        assert watcher_agents(bystander) == ["steady"]
        assert_serving(daemon, bystander)  # (steady is busy streaming: a subscription owns its connection)
    assert_ctl_works(daemon)


def test_watcher_that_pipelined_requests_then_vanished_is_removed(daemon):
    with greeted(daemon) as bystander:
        with greeted(daemon) as client:
            client.send_message({"id": 2, "op": "subscribe", "args": {"agent": "chatty"}})
            assert client.recv_message()["push"] == "started"
            client.send_bytes(b"".join(encode_frame({"id": 10 + i, "op": "ping", "args": {}}) for i in range(40)))
            time.sleep(0.2)
        gone = poll(lambda: "chatty" not in watcher_agents(bystander), timeout=5)
        assert_serving(daemon, bystander)
        assert gone, watcher_agents(bystander)


def test_watcher_that_stops_reading_is_dropped_and_others_are_served(daemon):
    with greeted(daemon) as bystander, greeted(daemon) as sloth:
        sloth.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sloth.send_message({"id": 2, "op": "subscribe", "args": {"agent": "sloth"}})
        assert sloth.recv_message()["push"] == "started"
        for _ in range(40):  # ~4 MB of pushes the sloth never reads
            bystander.call("append", **note_args(body="z" * 100_000))
        worst = 0.0
        deadline = time.monotonic() + 15
        while "sloth" in watcher_agents(bystander) and time.monotonic() < deadline:
            started = time.monotonic()
            assert bystander.call("ping") == {"pong": True}
            worst = max(worst, time.monotonic() - started)
            time.sleep(0.1)
        assert "sloth" not in watcher_agents(bystander), "a watcher that stopped reading was never dropped"
        assert worst < 1.0, f"a stalled watcher slowed everyone else down ({worst:.3f}s ping)"
        assert_serving(daemon, bystander)


def test_killed_palacectl_watch_is_removed_from_who(daemon):
    proc = subprocess.Popen(
        [PYTHON, "-m", "palacectl", "--home", str(daemon.home), "watch", "--agent", "victim", "--state-file", ""],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )
    try:
        with greeted(daemon) as bystander:
            assert poll(lambda: "victim" in watcher_agents(bystander), timeout=15), daemon.log()
            proc.kill()
            proc.wait(10)
            assert poll(lambda: "victim" not in watcher_agents(bystander)), watcher_agents(bystander)
            assert_serving(daemon, bystander)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert_ctl_works(daemon)


def test_disconnect_mid_wait(daemon):
    with greeted(daemon) as bystander:
        for _ in range(3):
            with greeted(daemon) as waiter:
                waiter.send_message({"id": 9, "op": "wait", "args": {"to_agents": ["nobody"], "timeout_ms": 60_000}})
                with pytest.raises(TimeoutError):
                    waiter.recv_message(timeout=0.3)  # really waiting
        # The abandoned waits do not stop anyone else from waiting and being woken.
        with greeted(daemon) as waiter:
            waiter.send_message({"id": 3, "op": "wait", "args": {"to_agents": ["someone"], "timeout_ms": 10_000}})
            with pytest.raises(TimeoutError):
                waiter.recv_message(timeout=0.3)
            event = bystander.call("append", **note_args(to_agent="someone"))
            reply = waiter.recv_message()
            assert reply["ok"] and [e["id"] for e in reply["result"]["events"]] == [event["id"]], reply
        assert_serving(daemon, bystander)
    assert_ctl_works(daemon)


# -- fuzzing a live daemon ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_daemon() -> Iterator[Daemon]:
    with running_daemon() as daemon:
        yield daemon


_msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
_request_like = st.fixed_dictionaries(
    {"id": st.one_of(st.integers(-(2**63), 2**63 - 1), _msgpack_values),
     "op": st.one_of(st.sampled_from(sorted(OPS - {"wait", "subscribe"})), st.text(max_size=10), _msgpack_values),
     "args": st.one_of(st.dictionaries(st.sampled_from(["stream", "limit", "type", "room", "from_agent", "body",
                                                        "version", "event_id", "metadata", "content", "kind"]),
                                       _msgpack_values, max_size=5), _msgpack_values)},
)
_chunks = st.one_of(
    st.binary(max_size=300),
    _msgpack_values.map(lambda v: encode_frame(v)),
    _request_like.map(lambda v: encode_frame(v)),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunks=st.lists(_chunks, min_size=1, max_size=5), greet=st.booleans())
def test_live_daemon_survives_arbitrary_bytes(shared_daemon, chunks, greet):
    daemon = shared_daemon
    with RawClient(daemon.socket_path) as client:
        if greet:
            client.hello()
        for chunk in chunks:
            if not client.send_bytes(chunk):
                break
        with contextlib.suppress(OSError):
            client.sock.shutdown(socket.SHUT_WR)
        for frame in client.drain_until_closed():
            assert isinstance(frame, dict) and "id" in frame, frame
    assert daemon.running, f"palaced died: {daemon.log()}"
    with greeted(daemon) as probe:
        assert probe.call("ping") == {"pong": True}


def test_shared_daemon_still_healthy_after_fuzzing(shared_daemon):
    assert_serving(shared_daemon)
    assert_ctl_works(shared_daemon)


# -- crashes and the WAL -----------------------------------------------------------------------


def _append_storm(path: Path, worker: int, acked: list[dict[str, Any]], stop: threading.Event,
                  refused: list[dict[str, Any]]) -> None:
    """Append on one connection until the daemon goes away; record every acknowledged event."""
    try:
        with RawClient(path) as client:
            client.hello()
            i = 0
            while not stop.is_set():
                reply = client.request("append", **note_args(stream="project/storm", from_agent=f"storm-{worker}",
                                                             body=f"{worker}:{i}"))
                if reply["ok"]:
                    acked.append(reply["result"])  # list.append is atomic under the GIL
                else:
                    refused.append(reply)
                    if reply["error"]["code"] == "shutting_down":
                        return
                i += 1
    except (PeerClosed, ProtocolError, OSError, AssertionError):
        return  # the daemon went away mid-request: that append was not acknowledged


def read_all_events(daemon: Daemon) -> list[dict[str, Any]]:
    """Every event, oldest first, paged with the since_event_id cursor."""
    events: list[dict[str, Any]] = []
    with greeted(daemon) as client:
        cursor = None
        while True:
            args: dict[str, Any] = {"limit": 500}
            if cursor:
                args["since_event_id"] = cursor
            page = client.call("list", **args)["events"]
            if not page:
                return events
            events.extend(page)
            cursor = page[-1]["id"]


def verify_chain(db_path: Path) -> dict[str, int]:
    """Per origin: origin_seq is 1..N and each prev_hash is the previous event_hash. Returns {origin: N}."""
    conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        heads: dict[str, tuple[int, bytes]] = {}
        for origin, origin_seq, prev_hash, event_hash in conn.execute(
            "SELECT origin, origin_seq, prev_hash, event_hash FROM events ORDER BY origin, origin_seq"
        ):
            last_seq, last_hash = heads.get(origin, (0, GENESIS_HASH))
            assert origin_seq == last_seq + 1, f"gap in {origin}: {last_seq} then {origin_seq}"
            assert bytes(prev_hash) == last_hash, f"broken chain at {origin}/{origin_seq}"
            heads[origin] = (origin_seq, bytes(event_hash))
        # Our own origin's row is caught up from its chain when the store opens, not at each append
        # (schema 0015): it may stand behind, never ahead nor elsewhere.
        (own,) = conn.execute("SELECT value FROM meta WHERE key='origin'").fetchone()
        for origin, max_seq, head_hash in conn.execute("SELECT origin, max_seq, head_hash FROM origins"):
            seq, head = heads.get(origin, (0, GENESIS_HASH))
            if origin == own and max_seq < seq:
                continue
            assert (max_seq, bytes(head_hash)) == (seq, head), f"version vector of {origin} disagrees with rows"
        return {origin: seq for origin, (seq, _) in heads.items()}
    finally:
        conn.close()


def test_kill9_during_append_storm_loses_no_acknowledged_append(daemon_factory, home):
    daemon = daemon_factory(home)
    acked: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    stop = threading.Event()
    threads = [threading.Thread(target=_append_storm, args=(daemon.socket_path, n, acked, stop, refused))
               for n in range(6)]
    for t in threads:
        t.start()
    try:
        # Past one list page (500), so reading back exercises the since_event_id cursor.
        assert poll(lambda: len(acked) >= 600, timeout=60), f"storm too slow: {len(acked)} acks"
        time.sleep(0.5)
        daemon.kill9()
    finally:
        stop.set()
        for t in threads:
            t.join(IO_TIMEOUT_S + 5)
    assert not any(t.is_alive() for t in threads)
    assert not refused, refused[:3]
    assert daemon.api_path.exists(), "a SIGKILLed daemon cannot have removed its socket (or api.json)"

    restarted = daemon_factory(home)
    events = read_all_events(restarted)
    by_id = {e["id"]: e for e in events}
    missing = [e["id"] for e in acked if e["id"] not in by_id]
    assert not missing, f"{len(missing)} acknowledged appends lost, e.g. {missing[:3]}"
    for ack in acked[:: max(1, len(acked) // 200)]:
        stored = by_id[ack["id"]]
        assert (stored["origin_seq"], stored["body"], stored["from_agent"]) == (
            ack["origin_seq"], ack["body"], ack["from_agent"])
    origins = {e["origin"] for e in events}
    assert len(origins) == 1
    assert sorted(e["origin_seq"] for e in events) == list(range(1, len(events) + 1))
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)
    with greeted(restarted) as client:
        status = client.call("status")
        assert status["events"] == len(events)
        assert status["latest_event_id"] == events[-1]["id"]
        # The chain continues where the crash left it.
        after = client.call("append", **note_args(body="after the crash"))
        assert after["origin_seq"] == len(events) + 1 and after["origin"] == origins.pop()
    assert restarted.stop() == 0, restarted.log()
    assert verify_chain(home / "palace.sqlite3") == {after["origin"]: len(events) + 1}


def test_waiting_watcher_does_not_pin_the_wal(daemon):
    db_path = daemon.home / "palace.sqlite3"
    wal_path = daemon.home / "palace.sqlite3-wal"
    watch = subprocess.Popen(
        [PYTHON, "-m", "palacectl", "--home", str(daemon.home), "watch", "--agent", "idle-watcher",
         "--state-file", "", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )
    try:
        with greeted(daemon) as writer, greeted(daemon) as waiter:
            assert poll(lambda: "idle-watcher" in watcher_agents(writer), timeout=15), daemon.log()
            # A pending wait must not hold a read transaction either.
            waiter.send_message({"id": 4, "op": "wait", "args": {"to_agents": ["idle-waiter"], "timeout_ms": 60_000}})
            for i in range(2000):
                writer.call("append", **note_args(from_agent="busy", to_agent="someone-else", body=f"{i}"))
            assert wal_path.stat().st_size > 0
            assert watch.poll() is None, "the watcher exited although nothing matched"
            with pytest.raises(TimeoutError):
                waiter.recv_message(timeout=0.05)

            conn = apsw.Connection(str(db_path))
            try:
                conn.set_busy_timeout(5000)
                busy, log_frames, checkpointed = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                conn.close()
            assert busy == 0, f"a reader pins the WAL ({log_frames} frames, {checkpointed} checkpointed)"
            assert wal_path.stat().st_size == 0

            # Both are still live and are woken by a matching event.
            event = writer.call("append", **note_args(from_agent="busy", to_agent="idle-watcher", body="wake"))
            out, err = watch.communicate(timeout=15)
            assert watch.returncode == 0, err
            assert [e["id"] for e in json.loads(out)["events"]] == [event["id"]]
            other = writer.call("append", **note_args(from_agent="busy", to_agent="idle-waiter", body="wake"))
            reply = waiter.recv_message()
            assert reply["ok"] and [e["id"] for e in reply["result"]["events"]] == [other["id"]], reply
            assert writer.call("status")["events"] == 2002
        assert_serving(daemon)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.communicate(timeout=10)
        for stream in (watch.stdout, watch.stderr):
            if stream is not None and not stream.closed:
                stream.close()


def test_connection_flood_without_a_byte(daemon):
    """A connection flood (open and close without a byte) neither leaks nor stops the daemon."""
    socks = []
    try:
        for _ in range(200):
            s, _ = connect_api(daemon.home)
            socks.append(s)
    finally:
        for s in socks:
            s.close()
    assert_serving(daemon)
    assert os.stat(daemon.api_path).st_mode & 0o777 == 0o600  # the socket, or api.json with its token
    assert daemon.stop(signal.SIGTERM) == 0, daemon.log()
