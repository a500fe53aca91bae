"""One local-API connection's IO (palaced/api.py ``_Connection``) on fakes: a socket pair instead
of a listener, a fake op table instead of the handlers and their store, trio's autojump clock for
the hello deadline. What the state machine decides is tested in tests/proto/test_apiconn.py; these
check that the reader, the processor and the books act on it.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import pytest
import trio

import palaced.api
from palace_proto.apiconn import NOT_GREETED, STREAMING, UNAUTHORIZED
from palace_proto.control import HELLO_TIMEOUT_S
from palace_proto.framing import NEED_DATA, FrameBuffer, encode_frame
from palaced.api import REQUEST_QUEUE, ApiConnections, _Connection, _is_disconnect

TOKEN = "k3F9_token-from-api-json-0123456789abcdefghi"
FAKE_CTX: Any = SimpleNamespace(
    store=SimpleNamespace(origin_id="o" * 16),
    limits=SimpleNamespace(max_body_bytes=1, max_metadata_bytes=2, max_artifact_bytes=3),
    config=SimpleNamespace(max_frame_bytes=1 << 20),
    features=SimpleNamespace(inline_ops=frozenset()),
)


class Peer:
    """The client's end of the socket pair, speaking raw frames."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = FrameBuffer(1 << 30)

    async def send(self, rid: int, op: str, **args: Any) -> None:
        await self.stream.send_all(encode_frame({"id": rid, "op": op, "args": args}))

    async def receive(self) -> Any:
        """The next frame, or None once the daemon closed the connection."""
        while (message := self.buffer.next_frame()) is NEED_DATA:
            try:
                data = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                data = b""
            if not data:
                return None
            self.buffer.feed(data)
        return message


class Served:
    def __init__(self, connection: _Connection, peer: Peer, books: ApiConnections) -> None:
        self.connection, self.peer, self.books = connection, peer, books


@asynccontextmanager
async def serving(ops: dict[str, Any], *, token: str | None = None) -> AsyncIterator[Served]:
    """A ``_Connection`` serving one end of a socket pair; the test holds the other end."""
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server_stream = trio.SocketStream(trio.socket.from_stdlib_socket(left))
    peer = Peer(trio.SocketStream(trio.socket.from_stdlib_socket(right)))
    books = ApiConnections()
    assert books.admit("pid 1") is None
    connection = _Connection(server_stream, FAKE_CTX, ops, 1 << 20, token, client="pid 1", connections=books)
    async def run() -> None:
        try:
            await connection.run()
        finally:  # as _serve_connection does: the socket closes when the connection ends
            await trio.aclose_forcefully(server_stream)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        try:
            yield Served(connection, peer, books)
        finally:
            nursery.cancel_scope.cancel(reason="test done")
    right.close()
    left.close()


async def _pong(args: dict[str, Any]) -> dict[str, Any]:
    return {"pong": True}


async def test_requests_before_hello_are_refused_in_order_and_hello_greets():
    async with serving({"ping": _pong}) as served:
        peer = served.peer
        await peer.send(1, "ping")
        await peer.send(2, "hello", version=1)
        await peer.send(3, "ping")
        refused, hello, pong = [await peer.receive() for _ in range(3)]
        assert refused["id"] == 1 and refused["error"] == {"code": "bad_request", "message": NOT_GREETED}
        assert hello["id"] == 2 and hello["result"]["limits"]["max_frame_bytes"] == 1 << 20
        assert pong == {"id": 3, "ok": True, "result": {"pong": True}}
        assert served.connection.greeted and served.books.statistics()["greeted"] == 1
        assert repr(served.connection).endswith("pid 1 OPEN requests=2>")


async def test_queued_and_inline_replies_keep_request_order():
    release = trio.Event()

    async def slow(args: dict[str, Any]) -> str:
        await release.wait()
        return "slow"

    async with serving({"ping": _pong, "slow": slow}) as served:
        peer = served.peer
        await peer.send(1, "hello", version=1)
        assert (await peer.receive())["ok"]
        await peer.send(2, "slow")
        await peer.send(3, "ping")  # an inline op, but queued behind the slow one
        await trio.testing.wait_all_tasks_blocked()
        release.set()
        assert [(await peer.receive())["id"] for _ in range(2)] == [2, 3]


async def test_too_many_pipelined_requests_are_refused_not_queued():
    async def never(args: dict[str, Any]) -> None:
        await trio.sleep_forever()

    async with serving({"never": never}) as served:
        peer = served.peer
        await peer.send(1, "hello", version=1)
        assert (await peer.receive())["ok"]
        for rid in range(2, REQUEST_QUEUE + 4):
            await peer.send(rid, "never")
        refused = await peer.receive()
        assert refused["error"]["code"] == "bad_request" and "too many pipelined requests" in refused["error"]["message"]


async def test_a_streaming_connection_refuses_requests(monkeypatch):
    async def fake_subscribe(ctx: Any, args: Any, push: Any, conn_id: int) -> None:
        await push({"push": "started", "cursor": None})
        await trio.sleep_forever()

    monkeypatch.setattr(palaced.api, "subscribe", fake_subscribe)
    async with serving({"ping": _pong}) as served:
        peer = served.peer
        await peer.send(1, "hello", version=1)
        assert (await peer.receive())["ok"]
        await peer.send(2, "subscribe")
        assert await peer.receive() == {"id": 2, "push": "started", "cursor": None}
        await peer.send(3, "ping")
        assert (await peer.receive())["error"] == {"code": "bad_request", "message": STREAMING}
        assert served.connection.conn.streaming


async def test_unknown_ops_and_handler_errors_are_answered_and_the_connection_stays(caplog):
    async def broken(args: dict[str, Any]) -> None:
        raise RuntimeError("a bug")

    async with serving({"ping": _pong, "broken": broken}) as served:
        peer = served.peer
        await peer.send(1, "hello", version=1)
        assert (await peer.receive())["ok"]
        await peer.send(2, "frobnicate")
        unknown = await peer.receive()
        assert unknown["error"]["code"] == "unknown_op" and "'frobnicate'" in unknown["error"]["message"]
        await peer.send(3, "broken")
        assert (await peer.receive())["error"]["code"] == "internal"
        await peer.send(4, "ping")
        assert (await peer.receive())["result"] == {"pong": True}


async def test_a_wrong_token_is_unauthorized_counted_and_closed():
    async with serving({"ping": _pong}, token=TOKEN) as served:
        peer = served.peer
        await peer.send(1, "hello", version=1, token="wrong")
        reply = await peer.receive()
        assert reply["id"] == 1 and reply["error"] == {"code": "unauthorized", "message": UNAUTHORIZED}
        assert await peer.receive() is None
        assert served.books.statistics()["unauthorized"] == 1 and not served.connection.greeted


async def test_the_right_token_greets():
    async with serving({"ping": _pong}, token=TOKEN) as served:
        await served.peer.send(1, "hello", version=1, token=TOKEN)
        assert (await served.peer.receive())["ok"] and served.connection.greeted


async def test_no_hello_in_time_is_refused_and_closed(autojump_clock):
    async with serving({}) as served:
        await trio.sleep(HELLO_TIMEOUT_S + 1)
        reply = await served.peer.receive()
        assert reply["id"] is None and reply["error"]["code"] == "hello_timeout"
        assert await served.peer.receive() is None
        assert served.books.statistics()["refused_by"]["hello_timeout"] == 1


@pytest.mark.parametrize("greeted", [False, True])
async def test_undecodable_bytes_are_answered_then_closed(greeted):
    async with serving({}) as served:
        peer = served.peer
        if greeted:
            await peer.send(1, "hello", version=1)
            assert (await peer.receive())["ok"]
        await peer.stream.send_all(b"\x00\x00\x00\x01\xc1")
        reply = await peer.receive()
        assert reply["id"] is None and reply["error"]["code"] == "bad_request"
        assert await peer.receive() is None
        assert served.books.limit_log.statistics().get("pre_hello_garbage", 0) == (0 if greeted else 1)


def test_disconnects_are_told_from_failures():
    assert _is_disconnect(trio.BrokenResourceError())
    assert _is_disconnect(trio.ClosedResourceError())
    assert _is_disconnect(BrokenPipeError(32, "broken pipe"))
    assert not _is_disconnect(OSError(2, "no such file"))
    assert not _is_disconnect(RuntimeError("a bug"))
