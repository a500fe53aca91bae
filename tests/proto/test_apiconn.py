"""The local API's sans-IO connection (proto/apiconn.py): both state machines, without a socket.

A ``ServerConnection`` and a ``ClientConnection`` are joined by handing bytes across (h11's
``ConnectionPair``); each rule of the module's theory of operation is checked on both sides, and
hypothesis splits valid byte streams at random boundaries.
"""

from __future__ import annotations

import itertools
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from palace_proto.apiconn import (
    NEED_DATA,
    NOT_GREETED,
    STREAMING,
    UNAUTHORIZED,
    ApiState,
    ClientConnection,
    ConnectionClosed,
    HelloRequest,
    MalformedReply,
    ProtocolViolation,
    Push,
    Reply,
    Request,
    ServerConnection,
    error_frame,
    result_of,
)
from palace_proto.control import PRE_HELLO_MAX_FRAME_BYTES, PROTOCOL_VERSION
from palace_proto.errors import ApiError, FrameTooLarge, LocalProtocolError, RemoteProtocolError
from palace_proto.framing import HEADER, encode_frame

TOKEN = "k3F9_token-from-api-json-0123456789abcdefghi"
FULL_LIMIT = 1 << 20


def events(server: ServerConnection) -> list[Any]:
    """Every event the server has ready, up to NEED_DATA or the end."""
    out: list[Any] = []
    while True:
        event = server.next_event()
        if event is NEED_DATA:
            return out
        out.append(event)
        if isinstance(event, ConnectionClosed) or (isinstance(event, ProtocolViolation) and event.fatal):
            return out


def client_events(client: ClientConnection) -> list[Any]:
    out: list[Any] = []
    while (event := client.next_event()) is not NEED_DATA:
        out.append(event)
    return out


def greeted_pair(token: str | None = None) -> tuple[ServerConnection, ClientConnection]:
    """A server and a client after a successful hello, the reply delivered."""
    server, client = ServerConnection(FULL_LIMIT, token=token), ClientConnection()
    rid, data = client.hello(client="test", pid=42, token=token)
    server.receive_data(data)
    [hello] = events(server)
    assert server.accept_hello(hello) is None
    client.receive_data(server.reply(hello.id, {"version": 1, "limits": {"max_frame_bytes": FULL_LIMIT}}))
    [reply] = client_events(client)
    assert reply.id == rid and reply.op == "hello"
    return server, client


def raw(message: Any) -> bytes:
    return encode_frame(message)


# -- the server: hello first -----------------------------------------------------------------


def test_a_new_connection_waits_for_hello_under_the_4_kib_limit():
    server = ServerConnection(FULL_LIMIT)
    assert server.state is ApiState.AWAITING_HELLO and not server.greeted
    assert server.frame_limit == PRE_HELLO_MAX_FRAME_BYTES
    assert repr(server) == "<ServerConnection AWAITING_HELLO buffered=0>"


def test_the_pre_hello_limit_never_exceeds_the_full_one():
    assert ServerConnection(100).frame_limit == 100


def test_a_request_before_hello_is_refused_and_the_connection_stays_usable():
    server = ServerConnection(FULL_LIMIT)
    server.receive_data(raw({"id": 3, "op": "status", "args": {}}) + raw({"id": 4, "op": "hello",
                                                                         "args": {"version": 1}}))
    refused, hello = events(server)
    assert refused == ProtocolViolation(3, refused.error) and not refused.fatal
    assert (refused.error.code, refused.error.message) == ("bad_request", NOT_GREETED)
    assert hello == HelloRequest(4, {"version": 1})
    assert server.state is ApiState.AWAITING_HELLO


def test_a_successful_hello_greets_and_raises_the_frame_limit():
    server = ServerConnection(FULL_LIMIT)
    server.receive_data(raw({"id": 1, "op": "hello", "args": {"version": PROTOCOL_VERSION}}))
    [hello] = events(server)
    assert server.accept_hello(hello) is None
    assert server.greeted and server.state is ApiState.OPEN and server.frame_limit == FULL_LIMIT
    # a second hello is judged again, and greets nothing new
    assert server.accept_hello(hello) is None and server.frame_limit == FULL_LIMIT


@pytest.mark.parametrize("version", [None, 2, 0, True, 1.0, "1"])
def test_a_hello_with_another_version_is_refused_and_changes_nothing(version):
    server = ServerConnection(FULL_LIMIT)
    error = server.accept_hello(HelloRequest(1, {"version": version}))
    assert error is not None and error.code == "version_mismatch"
    assert f"client speaks protocol version {version!r}" in error.message
    assert server.state is ApiState.AWAITING_HELLO and server.frame_limit == PRE_HELLO_MAX_FRAME_BYTES


def test_after_a_successful_hello_requests_come_out_as_requests():
    server, _ = greeted_pair()
    server.receive_data(raw({"id": 7, "op": "ping", "args": None}))
    [request] = events(server)
    assert type(request) is Request and (request.id, request.op, request.args) == (7, "ping", {})


def test_unknown_ops_are_left_to_the_daemon():
    server, _ = greeted_pair()
    server.receive_data(raw({"id": 7, "op": "no_such_op", "args": {}}))
    [request] = events(server)
    assert type(request) is Request and request.op == "no_such_op"


# -- the server: the token -------------------------------------------------------------------


@pytest.mark.parametrize("offered", [None, "", TOKEN[:-1], TOKEN.encode(), 5, "a\ud800b"], ids=repr)
def test_a_connection_that_needs_a_token_refuses_any_other_and_closes(offered):
    server = ServerConnection(FULL_LIMIT, token=TOKEN)
    args: dict[str, Any] = {"version": 1} if offered is None else {"version": 1, "token": offered}
    error = server.accept_hello(HelloRequest(1, args))
    assert error is not None and (error.code, error.message) == ("unauthorized", UNAUTHORIZED)
    assert server.state is ApiState.CLOSED and not server.greeted
    assert server.frame_limit == PRE_HELLO_MAX_FRAME_BYTES
    server.receive_data(raw({"id": 2, "op": "ping", "args": {}}))
    assert server.next_event() == ConnectionClosed()


def test_the_right_token_greets():
    server, client = greeted_pair(token=TOKEN)
    assert server.greeted and client.hello_result is not None


def test_the_version_is_judged_before_the_token():
    server = ServerConnection(FULL_LIMIT, token=TOKEN)
    error = server.accept_hello(HelloRequest(1, {"version": 9}))
    assert error is not None and error.code == "version_mismatch" and server.state is ApiState.AWAITING_HELLO


def test_a_unix_socket_connection_needs_no_token():
    server = ServerConnection(FULL_LIMIT)
    assert server.accept_hello(HelloRequest(1, {"version": 1, "token": "anything"})) is None


# -- the server: frame limits and garbage ----------------------------------------------------


def test_a_frame_over_4_kib_before_hello_is_fatal_and_names_the_pre_hello_limit():
    server = ServerConnection(FULL_LIMIT)
    server.receive_data(HEADER.pack(PRE_HELLO_MAX_FRAME_BYTES + 1))
    [violation] = events(server)
    assert violation.fatal and violation.id is None and violation.limit == "pre_hello_frame_bytes"
    assert violation.error.code == "frame_too_large"
    assert violation.reason == f"frame of {PRE_HELLO_MAX_FRAME_BYTES + 1} bytes exceeds the 4096-byte limit"
    assert violation.error.message == (
        f"{violation.reason} before hello: until a hello succeeds a frame may be at most 4096 bytes; "
        "send hello first and wait for its reply")
    assert server.state is ApiState.ERROR
    with pytest.raises(LocalProtocolError):
        server.next_event()
    with pytest.raises(LocalProtocolError):
        server.receive_data(b"more")


def test_after_hello_the_full_limit_applies():
    server, _ = greeted_pair()
    server.receive_data(raw({"id": 2, "op": "append", "args": {"body": "x" * 10_000}}))
    [request] = events(server)
    assert request.op == "append"
    server.receive_data(HEADER.pack(FULL_LIMIT + 1))
    [violation] = events(server)
    assert violation.fatal and violation.limit is None and violation.error.code == "frame_too_large"
    assert violation.error.message == violation.reason == f"frame of {FULL_LIMIT + 1} bytes exceeds the " \
                                                          f"{FULL_LIMIT}-byte limit"


def test_frames_pipelined_behind_a_hello_are_judged_after_it():
    server = ServerConnection(FULL_LIMIT)
    big = raw({"id": 2, "op": "append", "args": {"body": "x" * 10_000}})
    server.receive_data(raw({"id": 1, "op": "hello", "args": {"version": 1}}) + big)
    hello = server.next_event()
    assert isinstance(hello, HelloRequest)
    assert server.accept_hello(hello) is None
    [request] = events(server)
    assert request.op == "append"


@pytest.mark.parametrize("greeted", [False, True])
def test_undecodable_bytes_are_fatal(greeted):
    server = greeted_pair()[0] if greeted else ServerConnection(FULL_LIMIT)
    server.receive_data(HEADER.pack(1) + b"\xc1")  # 0xc1 is never used in msgpack
    [violation] = events(server)
    assert violation.fatal and violation.error.code == "bad_request"
    assert violation.limit == (None if greeted else "pre_hello_garbage")
    assert violation.error.message == violation.reason and "not valid msgpack" in violation.reason


@pytest.mark.parametrize(("message", "rid", "words"), [
    ([1, 2], None, "must be a map"),
    ({"id": "7", "op": "ping"}, None, "'id' must be an integer"),
    ({"id": True, "op": "ping"}, None, "'id' must be an integer"),
    ({"id": 7, "op": 5}, 7, "'op' must be a string"),
    ({"id": 7, "op": "ping", "args": [1]}, 7, "'args' must be a map"),
])
def test_a_frame_that_is_not_a_request_is_refused_and_the_connection_stays(message, rid, words):
    server, _ = greeted_pair()
    server.receive_data(raw(message) + raw({"id": 8, "op": "ping", "args": {}}))
    violation, request = events(server)
    assert not violation.fatal and violation.id == rid and violation.error.code == "bad_request"
    assert words in violation.error.message
    assert request.id == 8 and server.state is ApiState.OPEN


def test_eof_is_connection_closed_and_mid_frame_eof_is_truncated():
    server, _ = greeted_pair()
    server.receive_data(b"")
    assert server.next_event() == ConnectionClosed() and server.state is ApiState.CLOSED
    assert server.next_event() == ConnectionClosed()
    cut = ServerConnection(FULL_LIMIT)
    cut.receive_data(raw({"id": 1, "op": "hello", "args": {"version": 1}})[:-2])
    assert cut.next_event() is NEED_DATA
    cut.receive_data(b"")
    assert cut.next_event() == ConnectionClosed(truncated=True)
    header_only = ServerConnection(FULL_LIMIT)
    header_only.receive_data(b"\x00\x00")
    header_only.receive_data(b"")
    assert header_only.next_event() == ConnectionClosed(truncated=True)


def test_a_frame_too_large_is_reported_even_at_eof():
    server = ServerConnection(FULL_LIMIT)
    server.receive_data(HEADER.pack(PRE_HELLO_MAX_FRAME_BYTES + 1))
    server.receive_data(b"")
    [violation] = events(server)
    assert violation.fatal and violation.error.code == "frame_too_large"


# -- the server: streaming -------------------------------------------------------------------


def test_while_a_subscription_streams_requests_are_refused_and_pushes_are_legal():
    server, client = greeted_pair()
    server.start_stream()
    assert server.state is ApiState.STREAMING
    server.receive_data(raw({"id": 5, "op": "ping", "args": {}}) + raw({"id": 6, "op": "hello",
                                                                       "args": {"version": 1}}))
    for violation, rid in zip(events(server), (5, 6), strict=True):
        assert not violation.fatal and violation.id == rid
        assert (violation.error.code, violation.error.message) == ("bad_request", STREAMING)
    client.receive_data(server.push(4, {"push": "started", "cursor": None}))
    [push] = client_events(client)
    assert isinstance(push, Push) and (push.id, push.kind) == (4, "started")
    server.end_stream()
    assert server.state is ApiState.OPEN
    server.receive_data(raw({"id": 7, "op": "ping", "args": {}}))
    assert [e.op for e in events(server)] == ["ping"]


def test_a_push_outside_a_stream_and_a_second_stream_are_our_misuse():
    server = ServerConnection(FULL_LIMIT)
    with pytest.raises(LocalProtocolError):
        server.start_stream()  # not greeted
    assert server.state is ApiState.AWAITING_HELLO
    server, _ = greeted_pair()
    with pytest.raises(LocalProtocolError):
        server.push(1, {"push": "batch"})
    server.start_stream()
    with pytest.raises(LocalProtocolError):
        server.start_stream()
    assert server.state is ApiState.STREAMING


# -- the server: frames out ------------------------------------------------------------------


def test_replies_and_errors_are_the_wire_shapes():
    server = ServerConnection(FULL_LIMIT)
    assert server.reply(3, {"pong": True}) == raw({"id": 3, "ok": True, "result": {"pong": True}})
    error = ApiError("nope", code="not_found", detail={"id": "x"})
    assert server.error(3, error) == error_frame(3, error) == raw({"id": 3, "ok": False, "error": error.to_wire()})
    assert server.error(None, error) == raw({"id": None, "ok": False, "error": error.to_wire()})


def test_an_unencodable_result_is_a_local_protocol_error():
    with pytest.raises(LocalProtocolError):
        ServerConnection().reply(1, {"too_big": 2**70})


def test_large_replies_are_not_limited_by_the_receive_limit():
    assert len(ServerConnection(100).reply(1, "x" * 1000)) > 1000


# -- the client ------------------------------------------------------------------------------


def test_the_client_says_hello_first_with_version_client_pid_and_token():
    client = ClientConnection()
    with pytest.raises(LocalProtocolError):
        client.send_request("ping", {})
    rid, data = client.hello(client="palacectl", pid=42, token=TOKEN)
    assert rid == 1
    assert data == raw({"id": 1, "op": "hello", "args": {"version": PROTOCOL_VERSION, "client": "palacectl",
                                                           "pid": 42, "token": TOKEN}})
    with pytest.raises(LocalProtocolError):
        client.hello(client="palacectl", pid=42)
    assert client.send_request("ping", {})[0] == 2 and client.send_request("status", {})[0] == 3


def test_no_token_means_no_token_field():
    _, data = ClientConnection().hello(client="c", pid=1, token=None)
    assert "token" not in msgpack.unpackb(data[HEADER.size:])["args"]


def test_replies_pair_with_their_requests_and_pushes_stand_apart():
    _, client = greeted_pair()
    ping, _ = client.send_request("ping", {})
    sub, _ = client.send_request("subscribe", {"start": "tip"})
    server = ServerConnection()
    client.receive_data(server.reply(ping, {"pong": True}) + raw({"id": sub, "push": "batch", "events": []})
                        + server.error(sub, ApiError("gone", code="not_found")) + server.reply(99, 1)
                        + server.error(None, ApiError("full", code="too_many_connections")))
    pong, batch, failed, stray, refusal = client_events(client)
    assert type(pong) is Reply and (pong.id, pong.op, pong.result()) == (ping, "ping", {"pong": True})
    assert type(batch) is Push and batch.kind == "batch" and batch.message["events"] == []
    assert (failed.id, failed.op) == (sub, "subscribe")
    with pytest.raises(ApiError) as raised:
        failed.result()
    assert (raised.value.code, raised.value.message) == ("not_found", "gone")
    assert (stray.id, stray.op) == (99, None)
    assert refusal.id is None and refusal.op is None
    assert repr(pong) == f"<Reply #{ping} ping ok=True>" and repr(batch) == f"<Push #{sub} batch>"
    assert repr(client) == "<ClientConnection OPEN pending=0>"


def test_the_hello_reply_raises_the_receive_limit_to_the_daemons():
    client = ClientConnection(1000)
    rid, _ = client.hello(client="c", pid=1)
    assert repr(client) == "<ClientConnection AWAITING_HELLO pending=1>"
    client.receive_data(raw({"id": rid, "ok": True, "result": {"limits": {"max_frame_bytes": 5000}}}))
    client_events(client)
    assert client.frame_limit == 5000 + (1 << 20)
    assert client.hello_result == {"limits": {"max_frame_bytes": 5000}}


@pytest.mark.parametrize("result", [None, [], {"limits": None}, {"limits": {"max_frame_bytes": True}},
                                    {"limits": {"max_frame_bytes": -1}}, {"limits": {"max_frame_bytes": "9"}}])
def test_an_odd_hello_result_leaves_the_limit_alone(result):
    client = ClientConnection(1000)
    rid, _ = client.hello(client="c", pid=1)
    client.receive_data(raw({"id": rid, "ok": True, "result": result}))
    client_events(client)
    assert client.frame_limit == 1000 and client.hello_result is not None


def test_a_refused_hello_greets_nothing():
    client = ClientConnection(1000)
    rid, _ = client.hello(client="c", pid=1)
    client.receive_data(error_frame(rid, ApiError("v", code="version_mismatch")))
    [reply] = client_events(client)
    assert client.hello_result is None and client.frame_limit == 1000
    with pytest.raises(ApiError, match=r"^v$"):
        reply.result()


@pytest.mark.parametrize("odd", [[1, 2], "text", 5, None])
def test_a_frame_that_is_not_a_map_is_malformed_but_consumed(odd):
    _, client = greeted_pair()
    client.receive_data(raw(odd) + ServerConnection().reply(2, "after"))
    with pytest.raises(MalformedReply):
        client.next_event()
    assert client.next_event().message["result"] == "after"  # the stream stayed in sync


def test_undecodable_or_oversized_frames_break_the_client_for_good():
    client = ClientConnection(100)
    client.receive_data(HEADER.pack(101))
    with pytest.raises(FrameTooLarge):
        client.next_event()
    with pytest.raises(FrameTooLarge):
        client.next_event()
    assert repr(client).startswith("<ClientConnection ERROR")
    garbage = ClientConnection()
    garbage.receive_data(HEADER.pack(1) + b"\xc1" + ServerConnection().reply(1, "x"))
    for _ in range(2):
        with pytest.raises(RemoteProtocolError, match="not valid msgpack"):
            garbage.next_event()


@pytest.mark.parametrize(("code", "detail"), [("not_found", None), ("invalid_argument", {"field": "room"}),
                                              ("unauthorized", None), ("disk_full", None)])
def test_error_replies_raise_the_api_error_word_for_word(code, detail):
    error = ApiError("what went wrong", code=code, detail=detail)
    with pytest.raises(ApiError) as raised:
        result_of({"id": 1, "ok": False, "error": error.to_wire()})
    assert raised.value.to_wire() == error.to_wire() and str(raised.value) == "what went wrong"
    with pytest.raises(ApiError, match="malformed error reply"):
        result_of({"id": 1, "ok": False, "error": "boom"})
    assert result_of({"id": 1, "ok": True, "result": [1]}) == [1]


# -- both ends, bytes split at random --------------------------------------------------------

_ARGS = st.dictionaries(st.text(max_size=5), st.one_of(st.integers(-2**63, 2**63 - 1), st.text(max_size=40),
                                                        st.binary(max_size=40), st.none()), max_size=4)
_REQUESTS = st.lists(st.tuples(st.sampled_from(["ping", "append", "list", "no_such_op"]), _ARGS), max_size=8)


def _describe(event: Any) -> Any:
    if type(event) is Request:
        return ("request", event.id, event.op, event.args)
    if type(event) is ProtocolViolation:
        return ("violation", event.id, event.error.code, event.error.message, event.fatal)
    return event


def _server_events(stream: bytes, cuts: list[int]) -> list[Any]:
    """Feed ``stream`` cut at ``cuts``, judging each hello before asking for the next event (as
    the daemon does), then EOF."""
    server = ServerConnection(FULL_LIMIT)
    seen: list[Any] = []
    bounds = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    for start, end in [*itertools.pairwise(bounds), (len(stream), len(stream))]:
        server.receive_data(stream[start:end])  # the last slice is b"": EOF
        while (event := server.next_event()) is not NEED_DATA:
            if isinstance(event, HelloRequest):
                assert server.accept_hello(event) is None
            seen.append(_describe(event))
            if isinstance(event, ConnectionClosed):
                return seen
    raise AssertionError("no ConnectionClosed after EOF")


@given(requests=_REQUESTS, cuts=st.lists(st.integers(min_value=0), max_size=30))
def test_the_server_sees_the_same_events_however_the_bytes_are_split(requests, cuts):
    client = ClientConnection()
    chunks = [client.hello(client="fuzz", pid=1)[1]]
    chunks += [client.send_request(op, args)[1] for op, args in requests]
    stream = b"".join(chunks)
    whole = _server_events(stream, [])
    assert _server_events(stream, cuts) == whole
    assert whole[0] == HelloRequest(1, {"version": PROTOCOL_VERSION, "client": "fuzz", "pid": 1})
    assert whole[1:-1] == [("request", i + 2, op, args) for i, (op, args) in enumerate(requests)]
    assert whole[-1] == ConnectionClosed()


@given(results=st.lists(st.one_of(st.integers(0, 10), st.text(max_size=30)), max_size=8),
       cuts=st.lists(st.integers(min_value=0), max_size=30))
def test_the_client_sees_the_same_replies_however_the_bytes_are_split(results, cuts):
    def run(split: list[int]) -> list[Any]:
        client = ClientConnection()
        client.hello(client="fuzz", pid=1)
        ids = [client.send_request("ping", {})[0] for _ in results]
        server = ServerConnection()
        stream = b"".join(server.reply(rid, result) if i % 3 else raw({"id": rid, "push": "cursor", "cursor": result})
                          for i, (rid, result) in enumerate(zip(ids, results, strict=True)))
        bounds = sorted({c % (len(stream) + 1) for c in split} | {0, len(stream)})
        seen = []
        for start, end in itertools.pairwise(bounds):
            client.receive_data(stream[start:end])
            seen += [(type(e).__name__, e.id, dict(e.message)) for e in client_events(client)]
        return seen

    whole = run([])
    assert run(cuts) == whole and len(whole) == len(results)
