"""``TlsStream`` (palaced/tls_stream.py) over real TCP sockets on loopback with the palace's own
TLS contexts: data both ways in order, failures as ``BrokenResourceError``, closes, and the
property it exists for: a record reaches the socket before the scheduler runs anything else."""

from __future__ import annotations

import contextlib
import datetime
import os

import pytest
import trio

from palace_proto.pki import new_palace
from palaced.tls import client_context, enrolment_client_context, peer_certificate, server_context
from palaced.tls_stream import TlsStream
from tests.daemon.test_tls_membership import member  # a member's certificate and key, as there

NOW = datetime.datetime.now(datetime.UTC)


@pytest.fixture
def palace(tmp_path):
    ca_key, ca_pem, _ = new_palace("lab", NOW)
    return {"ca_pem": ca_pem, "a": member(tmp_path, "a", ca_key, ca_pem), "b": member(tmp_path, "b", ca_key, ca_pem)}


@contextlib.asynccontextmanager
async def tcp_pair():
    """Two ends of one real loopback TCP connection."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        accepted = []

        async def accept():
            accepted.append(await listeners[0].accept())

        nursery.start_soon(accept)
        client = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        yield accepted[0], client
    finally:
        for stream in (accepted[0], client, *listeners):
            await trio.aclose_forcefully(stream)


@contextlib.asynccontextmanager
async def tls_pair(palace, client_ctx=None):
    async with tcp_pair() as (server_tcp, client_tcp):
        server = TlsStream(server_tcp, server_context(*palace["a"], palace["ca_pem"], allow_enrolment=False),
                           server_side=True)
        client = TlsStream(client_tcp, client_ctx or client_context(*palace["b"], palace["ca_pem"]), server_side=False)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.do_handshake)
            nursery.start_soon(client.do_handshake)
        yield server, client


async def receive_exactly(stream, count):
    data = bytearray()
    while len(data) < count:
        chunk = await stream.receive_some()
        assert chunk, "the stream ended early"
        data += chunk
    return bytes(data)


async def test_both_sides_authenticate_and_data_flows_both_ways_at_once_in_order(palace):
    async with tls_pair(palace) as (server, client):
        assert peer_certificate(server, palace["ca_pem"], NOW).name == "b"
        assert peer_certificate(client, palace["ca_pem"], NOW).name == "a"
        # Both send 2 MiB at once in pieces of every size, while the other reads: no deadlock,
        # every byte in order (the kernel buffers are far smaller than what crosses).
        payloads = {side: os.urandom(2 << 20) for side in ("server", "client")}
        received = {}

        async def send(stream, data):
            position, size = 0, 1
            while position < len(data):
                await stream.send_all(data[position:position + size])
                position += size
                size = size * 3 % 70_001 + 1

        async def receive(stream, side):
            received[side] = await receive_exactly(stream, 2 << 20)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send, server, payloads["server"])
                nursery.start_soon(send, client, payloads["client"])
                nursery.start_soon(receive, client, "server")
                nursery.start_soon(receive, server, "client")
        assert received == payloads


async def test_a_record_reaches_the_socket_before_the_scheduler_runs_another_task(palace):
    """Guards the reason TlsStream exists (issue 27): ``trio.SSLStream.send_all`` yields (its lock)
    before writing, so a task woken at the same moment ran first (a reply before a push)."""
    async with tls_pair(palace) as (server, client):
        passes = 0

        async def count_passes():
            nonlocal passes
            while True:
                passes += 1
                await trio.lowlevel.checkpoint()

        sent_after = []
        transport = client.transport_stream
        real_send_all = transport.send_all

        async def spying_send_all(data):
            sent_after.append(passes)
            await real_send_all(data)

        transport.send_all = spying_send_all
        async with trio.open_nursery() as nursery:
            nursery.start_soon(count_passes)
            await trio.sleep(0.01)
            for _ in range(5):
                before = passes
                await client.send_all(b"event")
                assert sent_after[-1] == before
            nursery.cancel_scope.cancel()
        assert await receive_exactly(server, 25) == b"event" * 5


async def test_a_stranger_fails_the_handshake_with_broken_resource_on_both_sides(palace, tmp_path):
    other_key, other_pem, _ = new_palace("elsewhere", NOW)
    stranger = member(tmp_path, "s", other_key, other_pem)
    async with tcp_pair() as (server_tcp, client_tcp):
        server = TlsStream(server_tcp, server_context(*palace["a"], palace["ca_pem"], allow_enrolment=False),
                           server_side=True)
        client = TlsStream(client_tcp, client_context(*stranger, palace["ca_pem"]), server_side=False)
        outcomes = {}

        async def handshake(name, stream):
            try:
                await stream.do_handshake()
                await stream.send_all(b"hello")  # TLS 1.3: a refused client learns it on first use
                await stream.receive_some()
                outcomes[name] = "ok"
            except trio.BrokenResourceError as exc:
                outcomes[name] = exc

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(handshake, "server", server)
                nursery.start_soon(handshake, "client", client)
        assert isinstance(outcomes["server"], trio.BrokenResourceError)
        assert "TLS failed" in str(outcomes["server"])
        assert isinstance(outcomes["client"], trio.BrokenResourceError)
        with pytest.raises(trio.BrokenResourceError, match="broken"):
            await server.send_all(b"more")


async def test_a_proper_close_reads_as_the_end_and_a_dropped_connection_as_broken(palace):
    async with tls_pair(palace) as (server, client):
        await client.send_all(b"last words")
        await client.aclose()
        assert await receive_exactly(server, 10) == b"last words"
        assert await server.receive_some() == b""
        with pytest.raises(trio.ClosedResourceError):
            await client.send_all(b"after close")
        await client.aclose()  # twice: harmless
    async with tls_pair(palace) as (server, client):
        await client.transport_stream.send_eof()  # the connection ends with no close_notify (a crash)
        with pytest.raises(trio.BrokenResourceError, match="without closing TLS"):
            await server.receive_some()
    async with tls_pair(palace) as (server, client):
        await trio.aclose_forcefully(client.transport_stream)  # a reset, unread data and all
        with pytest.raises(trio.BrokenResourceError):
            await server.receive_some()


async def test_garbage_after_the_handshake_breaks_the_stream_without_a_traceback_of_its_own(palace):
    async with tls_pair(palace) as (server, client):
        await client.transport_stream.send_all(b"\x17\x03\x03\x00\x20" + os.urandom(32))  # a forged record
        with pytest.raises(trio.BrokenResourceError, match="TLS failed"):
            await server.receive_some()
        with pytest.raises(trio.BrokenResourceError):
            await server.receive_some()


async def test_one_receiver_at_a_time_and_a_close_ends_a_waiting_receive(palace):
    async with tls_pair(palace) as (server, _client):
        errors = []

        async def receive():
            try:
                await server.receive_some()
            except (trio.ClosedResourceError, trio.BrokenResourceError) as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(trio.BusyResourceError):
                await server.receive_some()
            await server.aclose()
        assert len(errors) == 1


async def test_the_enrolment_context_connects_without_a_client_certificate(palace):
    """The joiner's side (enrolment.py) runs on TlsStream too: no client certificate, and the
    server (with invites pending) lets it through to check the invite itself."""
    async with tcp_pair() as (server_tcp, client_tcp):
        server = TlsStream(server_tcp, server_context(*palace["a"], palace["ca_pem"], allow_enrolment=True),
                           server_side=True)
        client = TlsStream(client_tcp, enrolment_client_context(), server_side=False)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.do_handshake)
            nursery.start_soon(client.do_handshake)
        assert peer_certificate(server, palace["ca_pem"], NOW) is None
        assert peer_certificate(client, palace["ca_pem"], NOW).name == "a"
        await client.send_all(b"enrol")
        assert await receive_exactly(server, 5) == b"enrol"
