"""The local API's limits and its second wall (palaced/api.py), in-process.

The bookkeeping of the connection limits (``ApiConnections``), the token check and how a client
is identified are tested directly. The second wall, "an exception while serving one connection
ends that connection only", needs an exception no real input raises any more: those tests run the
real ``serve_api`` over a real Unix socket, store and handlers, with one fault injected into the
handlers, and check that only the faulty connection ends, that it is counted and logged once, that
a subscription's watcher is released, and that cancellation and KeyboardInterrupt still propagate.
(What real clients can send is attacked in tests/e2e/test_api_hostile.py.)
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

import palaced.api
from palace_proto.control import PRE_HELLO_MAX_FRAME_BYTES, token_matches
from palace_proto.framing import NEED_DATA, FrameBuffer, encode_frame
from palace_proto.paths import ApiEndpoint
from palaced.api import MAX_CONNECTIONS, ApiConnections, client_of, max_connections_for, serve_api
from palaced.bus import EventBus
from palaced.config import Config
from palaced.features import STORE_PARTS, features
from palaced.handlers import BoundHandler, Context, op_table
from palaced.store import Store
from palaced.store.aio import AsyncStore

TOKEN = "k3F9_token-from-api-json-0123456789abcdefghi"


# -- the token -----------------------------------------------------------------------------------


def test_the_right_token_matches():
    assert token_matches(TOKEN, TOKEN)


@pytest.mark.parametrize("offered", [
    "a\ud800b", TOKEN + "\ud800", "\udfff" + TOKEN[1:], TOKEN.encode(), bytearray(TOKEN.encode()), None, 0, 2**70,
    -1, 1.5, True, [TOKEN], {"token": TOKEN}, "", TOKEN[:-1], TOKEN + " ",
], ids=repr)
def test_every_other_token_is_refused_without_raising(offered):
    """Guards finding 3 at its root: a lone surrogate made ``str.encode`` raise."""
    assert token_matches(offered, TOKEN) is False


@given(st.one_of(st.text(alphabet=st.one_of(st.characters(), st.integers(0xD800, 0xDFFF).map(chr))),
                 st.binary(), st.integers(), st.floats(), st.none(), st.lists(st.text())))
def test_token_matches_never_raises(offered):
    assert token_matches(offered, TOKEN) is (offered == TOKEN)


# -- who a client is -------------------------------------------------------------------------------


@pytest.mark.skipif(sys.platform != "linux", reason="SO_PEERCRED is Linux's")
def test_a_unix_socket_client_is_its_process():
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        assert client_of(left) == f"pid {os.getpid()} (uid {os.getuid()})"


def test_a_tcp_client_is_its_address():
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()) as client:
        accepted, _ = server.accept()
        with accepted:
            assert client_of(accepted) == "address 127.0.0.1"
            client.close()
    assert client_of(accepted) == "unknown"  # closed: never raises


@pytest.mark.parametrize("soft,expected", [(None, MAX_CONNECTIONS), (0, MAX_CONNECTIONS), (1 << 20, MAX_CONNECTIONS),
                                           (1024, 512), (256, 128), (10, 16)])
def test_the_connection_cap_leaves_half_the_descriptors(soft, expected):
    assert max_connections_for(soft) == expected


# -- the bookkeeping -----------------------------------------------------------------------------


def test_connections_before_hello_are_capped_per_client():
    book = ApiConnections(max_connections=100, max_pre_hello_per_client=3)
    for _ in range(3):
        assert book.admit("pid 1") is None
    limit, error = book.admit("pid 1")
    assert limit == "max_pre_hello_per_client" and error.code == "too_many_connections"
    assert book.admit("pid 2") is None  # another client has its own allowance
    book.greeted("pid 1")  # a hello frees its slot: greeted connections count only against the total
    assert book.admit("pid 1") is None
    assert book.statistics()["open"] == 5 and book.statistics()["greeted"] == 1 and book.statistics()["pre_hello"] == 4
    book.release("pid 1", greeted=True)
    for _ in range(3):
        book.release("pid 1", greeted=False)
    book.release("pid 2", greeted=False)
    assert book.statistics()["open"] == 0 and not book._pre_hello  # nothing kept for clients that left


def test_all_connections_are_capped():
    book = ApiConnections(max_connections=4, max_pre_hello_per_client=64)
    for i in range(4):
        assert book.admit(f"pid {i}") is None
        book.greeted(f"pid {i}")
    limit, error = book.admit("pid 9")
    assert limit == "max_connections" and "already serves 4 connections" in error.message
    book.release("pid 0", greeted=True)
    assert book.admit("pid 9") is None
    assert book.statistics()["accepted"] == 5


def test_each_limit_is_logged_once_and_counted_always(caplog):
    book = ApiConnections()
    with caplog.at_level(logging.WARNING, logger="palaced.api"):
        for _ in range(50):
            book.refused("hello_timeout", "local API: closed a slow one")
            book.refused("max_connections", "local API: refused one")
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["local API: closed a slow one",
                                                                      "local API: refused one"]
    stats = book.statistics()
    assert stats["refused"] == 100 and stats["refused_by"]["hello_timeout"] == 50


def _raise(exc: BaseException) -> None:
    raise exc


def test_a_failure_is_logged_with_its_traceback_once_per_place(caplog):
    book = ApiConnections()
    with caplog.at_level(logging.DEBUG, logger="palaced.api"):
        for _ in range(3):
            try:
                _raise(RuntimeError("boom"))
            except RuntimeError as exc:
                book.failure("connection #1", "pid 1", ExceptionGroup("serving", [exc]))
        try:
            _raise(KeyError("elsewhere"))
        except KeyError as exc:
            book.failure("connection #2", "pid 1", exc)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2 and all(r.exc_info for r in errors)
    assert book.statistics()["failed"] == 4


# -- the second wall, in-process -------------------------------------------------------------------


@pytest.fixture
def short_home() -> Iterator[Path]:
    """A home whose socket path fits in sun_path (pytest's tmp_path may not)."""
    path = Path(tempfile.mkdtemp(prefix="pal", dir="/tmp"))
    try:
        home = path / "h"
        home.mkdir(mode=0o700)
        yield home
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Client:
    """A raw trio client of the API."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = FrameBuffer(1 << 30)

    async def send(self, rid: int, op: str, **args: Any) -> None:
        await self.stream.send_all(encode_frame({"id": rid, "op": op, "args": args}))

    async def receive(self) -> Any:
        """The next frame, or None once the daemon has closed the connection."""
        with trio.fail_after(10):
            while (message := self.buffer.next_frame()) is NEED_DATA:
                try:
                    data = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    data = b""
                if not data:
                    return None
                self.buffer.feed(data)
        return message

    async def call(self, op: str, **args: Any) -> Any:
        await self.send(1, op, **args)
        reply = await self.receive()
        assert reply is not None and reply["ok"], reply
        return reply["result"]


class Api:
    """The real API served in-process; ``connect`` opens clients that are closed with it. ``ops``
    is the op table it dispatches to (a test may replace an entry to inject a fault)."""

    def __init__(self, ctx: Context, ops: dict[str, BoundHandler], path: Path) -> None:
        self.ctx, self.ops, self.path = ctx, ops, path
        self.clients: list[Client] = []

    def statistics(self) -> dict[str, Any]:
        assert self.ctx.api_statistics is not None
        return self.ctx.api_statistics()

    async def connect(self, *, hello: bool = True) -> Client:
        client = Client(await trio.open_unix_socket(os.fspath(self.path)))
        self.clients.append(client)
        if hello:
            assert (await client.call("hello", version=1))["version"] == 1
        return client


@asynccontextmanager
async def serving(home: Path) -> AsyncIterator[Api]:
    """The real API on a Unix socket in ``home``, over a real store; cancelled on exit."""
    config = Config(home=home, mdns=False, memory_embed=False)
    key = Ed25519PrivateKey.generate()
    store = Store(home / "palace.sqlite3", key, config.limits, parts=STORE_PARTS)
    api: Api | None = None
    try:
        bus = EventBus(store.latest()[0])
        astore = AsyncStore(store, bus.publish)
        ctx = Context(config, astore, bus, key, features())
        ops = op_table(ctx)
        async with trio.open_nursery() as nursery:
            await nursery.start(astore.serve_writer)
            where = await nursery.start(serve_api, ApiEndpoint("unix"), home, ctx, ops, config.max_frame_bytes)
            api = Api(ctx, ops, Path(where))
            yield api
            nursery.cancel_scope.cancel(reason="test done")
    finally:
        for client in api.clients if api else []:
            client.stream.socket.close()
        store.close()


def _errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "palaced.api" and r.levelno >= logging.ERROR]


async def test_an_exception_while_serving_one_connection_ends_that_connection_only(short_home, caplog, monkeypatch):
    async with serving(short_home) as api:
        bystander = await api.connect()
        with monkeypatch.context() as patch:
            patch.setattr(palaced.api, "hello_result", lambda ctx: _raise(RuntimeError("injected fault")))
            for _ in range(3):
                victim = await api.connect(hello=False)
                await victim.send(1, "hello", version=1)
                assert await victim.receive() is None  # closed, nothing half-written
        assert await bystander.call("ping") == {"pong": True}
        fresh = await api.connect()
        assert await fresh.call("ping") == {"pong": True}
        stats = api.statistics()
        assert stats["failed"] == 3 and stats["open"] == 2 and stats["pre_hello"] == 0, stats
        assert (await bystander.call("status"))["api_connections"]["failed"] == 3
        errors = _errors(caplog)
        assert len(errors) == 1 and errors[0].exc_info and "injected fault" in caplog.text  # once, with its traceback


async def test_a_failing_subscription_ends_its_connection_and_releases_its_watcher(short_home, caplog, monkeypatch):
    real_subscribe = palaced.api.subscribe

    async def subscribe_then_fail(ctx: Context, args: Any, push: Any, conn_id: int) -> None:
        async def failing_push(message: dict[str, Any]) -> None:
            if message["push"] != "started":
                raise RuntimeError("injected fault in a push")
            await push(message)

        await real_subscribe(ctx, args, failing_push, conn_id)

    monkeypatch.setattr(palaced.api, "subscribe", subscribe_then_fail)
    async with serving(short_home) as api:
        bystander = await api.connect()
        watcher = await api.connect()
        await watcher.send(2, "subscribe", start="tip", agent="doomed")
        assert (await watcher.receive())["push"] == "started"
        assert [w["agent"] for w in (await bystander.call("who"))["watchers"]] == ["doomed"]
        await bystander.call("append", type="note", stream="s", room="r", from_agent="a", body="wakes the watcher")
        assert await watcher.receive() is None
        assert api.ctx.watchers == {} and (await bystander.call("who"))["count"] == 0
        assert api.statistics()["failed"] == 1
        assert len(_errors(caplog)) == 1


async def test_a_reply_that_cannot_be_encoded_is_an_internal_error_and_the_connection_stays(short_home):
    async with serving(short_home) as api:
        async def unencodable(args: Any) -> dict[str, Any]:
            return {"too_big": 2**70}  # msgpack has no integer this large

        api.ops["digest"] = unencodable
        client = await api.connect()
        await client.send(5, "digest")
        reply = await client.receive()
        assert reply["id"] == 5 and reply["error"]["code"] == "internal", reply
        assert await client.call("ping") == {"pong": True}
        assert api.statistics()["failed"] == 0


async def test_keyboard_interrupt_is_never_swallowed(short_home, monkeypatch):
    monkeypatch.setattr(palaced.api, "hello_result", lambda ctx: _raise(KeyboardInterrupt()))
    with pytest.raises(BaseExceptionGroup) as raised:
        async with serving(short_home) as api:
            client = await api.connect(hello=False)
            await client.send(1, "hello", version=1)
            await trio.sleep_forever()
    assert raised.value.subgroup(KeyboardInterrupt) is not None
    assert raised.value.subgroup(lambda e: not isinstance(e, (BaseExceptionGroup, KeyboardInterrupt))) is None


async def test_cancellation_ends_busy_connections_without_counting_failures(short_home):
    async with serving(short_home) as api:
        waiter = await api.connect()
        await waiter.send(3, "wait", to_agents=["nobody"], timeout_ms=60_000)
        watcher = await api.connect()
        await watcher.send(4, "subscribe", start="tip")
        assert (await watcher.receive())["push"] == "started"
        pending = await api.connect(hello=False)
        await pending.stream.send_all(b"\x00\x00")  # half a frame header
    # serving() cancelled the API while all three were busy: the cancel went through every
    # connection (a swallowed Cancelled would have hung here or counted a failure).
    stats = api.statistics()
    assert stats["failed"] == 0 and stats["open"] == 0, stats
    assert api.ctx.watchers == {}


async def test_a_frame_before_hello_is_held_to_4_kib(short_home):
    async with serving(short_home) as api:
        client = await api.connect(hello=False)
        await client.stream.send_all((PRE_HELLO_MAX_FRAME_BYTES + 1).to_bytes(4, "big"))
        reply = await client.receive()
        assert reply["error"]["code"] == "frame_too_large" and await client.receive() is None
        assert api.statistics()["refused_by"]["pre_hello_frame_bytes"] == 1
