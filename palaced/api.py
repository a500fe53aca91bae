"""The local control API: a Unix socket (mode 0600), or loopback TCP with a bearer token,
speaking framed msgpack requests.

Owns: accepting connections, framing, the hello handshake (which, over TCP, must carry the token
this daemon wrote to ``api.json``: proto/paths.py), dispatching requests to the service,
writing replies, and streaming subscriptions (proto/PROTOCOL.md, "Local API"). One task reads
each connection (so a disconnect is noticed at once, even mid-wait) and one processes its
requests in order. Garbage never takes the daemon down: a malformed request gets an error reply,
an undecodable or oversized frame gets an error reply and the connection is closed, and every
other connection keeps being served.
"""

from __future__ import annotations

import errno
import hmac
import itertools
import logging
import os
import secrets
import socket
import sys
from pathlib import Path
from typing import Any, Final, NoReturn

import trio

from palace_proto.control import OPS, Request, check_hello, error_reply, ok_reply, parse_request
from palace_proto.errors import ApiError, FrameTooLarge, LocalProtocolError, ProtocolError, VersionMismatch
from palace_proto.framing import NEED_DATA, FrameBuffer, encode_frame
from palace_proto.paths import ApiEndpoint, api_file, api_file_text, socket_path

from .files import write_atomically
from .service import Service, api_error_for, op_table

__all__ = ["ApiListenError", "SocketPathTooLong", "serve_api"]

LOGGER: Final = logging.getLogger("palaced.api")
# Why 64 KiB: large enough to take a body-sized request in a few reads, small enough per connection.
RECEIVE_CHUNK: Final = 65536
# Why 16: a client may pipeline a few requests (hello + one op); more just waits in the socket.
REQUEST_QUEUE: Final = 16
# Why 5 s: a reply to a client that stopped reading must not pin a handler forever.
SEND_TIMEOUT_S: Final = 5.0
# sun_path is 108 bytes on Linux (104 on macOS), including the terminating NUL.
MAX_SOCKET_PATH: Final = 107 if sys.platform == "linux" else 103
# Writing a reply straight to the socket's descriptor works on POSIX only (Windows sockets are
# not file descriptors).
_DIRECT_WRITE: Final = os.name == "posix"

_connection_ids = itertools.count(1)


class SocketPathTooLong(Exception):
    pass


class ApiListenError(Exception):
    """The TCP API port cannot be bound (in use, or not permitted)."""


class _Connection:
    """One client connection: a reader task and a request processor sharing a send lock."""

    def __init__(self, stream: trio.SocketStream, service: Service, max_frame_bytes: int,
                 token: str | None = None) -> None:
        self.id = next(_connection_ids)
        self.token = token  # over TCP: what hello must carry
        self.stream = stream
        self.service = service
        self.ops = op_table(service)
        self.buffer = FrameBuffer(max_frame_bytes)
        self.send_lock = trio.Lock()
        self.greeted = False
        self.streaming = False
        self.requests = 0

    def __repr__(self) -> str:
        return f"<Connection #{self.id} greeted={self.greeted} requests={self.requests}>"

    async def send(self, message: dict[str, Any]) -> None:
        """Write one whole frame; shielded so a cancel cannot leave half a frame on the socket."""
        data = encode_frame(message, max_frame_bytes=1 << 40)
        async with self.send_lock:
            # Fast path: a reply nearly always fits in the socket buffer, and writing it directly
            # skips two scheduler passes per reply (a third of the per-request cost under load).
            sent = 0
            if _DIRECT_WRITE:
                try:
                    sent = os.write(self.stream.socket.fileno(), data)
                except BlockingIOError:
                    sent = 0
                except OSError as exc:  # EPIPE, ECONNRESET, or a socket already closed
                    raise trio.BrokenResourceError(f"cannot write to the client: {exc.strerror}") from None
            if sent == len(data):
                return
            with trio.CancelScope(shield=True), trio.move_on_after(SEND_TIMEOUT_S) as scope:
                await self.stream.send_all(data[sent:])
            if scope.cancelled_caught:
                raise trio.BrokenResourceError("client stopped reading")

    async def run(self) -> None:
        send_req, recv_req = trio.open_memory_channel[Request](REQUEST_QUEUE)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._process, recv_req)
            await self._read(send_req)
            # EOF or a fatal frame error: nothing more can arrive, so stop whatever is running
            # (a wait or a watch for a client that is gone must not linger).
            nursery.cancel_scope.cancel(reason="client connection closed")

    async def _read(self, send_req: trio.MemorySendChannel[Request]) -> None:
        async with send_req:
            while True:
                try:
                    data = await self.stream.receive_some(RECEIVE_CHUNK)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                self.buffer.feed(data)
                while True:
                    try:
                        message = self.buffer.next_frame()
                    except FrameTooLarge as exc:
                        LOGGER.warning("connection #%d: %s; closing", self.id, exc)
                        await self._send_error(None, ApiError(exc.message, code=exc.code))
                        return
                    except ProtocolError as exc:
                        if data:
                            LOGGER.warning("connection #%d: %s; closing", self.id, exc.message)
                            await self._send_error(None, ApiError(exc.message, code="bad_request"))
                        return
                    if message is NEED_DATA:
                        break
                    try:
                        request = parse_request(message)
                    except ProtocolError as exc:
                        rid = message.get("id") if isinstance(message, dict) else None
                        await self._send_error(rid if type(rid) is int else None, ApiError(exc.message, code="bad_request"))
                        continue
                    # Never block here: the reader must keep reading to notice EOF (a client that
                    # leaves mid-watch), so a request that cannot be queued is refused instead.
                    if self.streaming:
                        await self._send_error(request.id, ApiError(
                            "this connection is streaming a subscription; open another connection for requests",
                            code="bad_request"))
                        continue
                    try:
                        send_req.send_nowait(request)
                    except trio.WouldBlock:
                        await self._send_error(request.id, ApiError(
                            f"too many pipelined requests (at most {REQUEST_QUEUE} waiting); wait for replies",
                            code="bad_request"))
                if not data:
                    return

    async def _send_error(self, rid: int | None, error: ApiError) -> None:
        try:
            await self.send(error_reply(rid, error))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _process(self, recv_req: trio.MemoryReceiveChannel[Request]) -> None:
        async for request in recv_req:
            self.requests += 1
            try:
                await self._handle(request)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return

    async def _handle(self, request: Request) -> None:
        if request.op == "hello":
            try:
                check_hello(request.args)
            except VersionMismatch as exc:
                await self.send(error_reply(request.id, ApiError(exc.message, code=exc.code)))
                return
            if self.token is not None:
                offered = request.args.get("token")
                if not isinstance(offered, str) or not hmac.compare_digest(offered.encode(), self.token.encode()):
                    LOGGER.warning("connection #%d: refused, its hello carried no valid token", self.id)
                    await self.send(error_reply(request.id, ApiError(
                        "this palaced's TCP API needs the token from its home's api.json (palacectl reads it "
                        "by itself: is --home right?)", code="unauthorized")))
                    # Close it: the reader task then stops, and nothing more is answered.
                    await trio.aclose_forcefully(self.stream)
                    return
            self.greeted = True
            await self.send(ok_reply(request.id, self.service.hello_result()))
            return
        if not self.greeted:
            await self.send(error_reply(request.id, ApiError(
                "the first request on a connection must be 'hello' with the protocol version", code="bad_request")))
            return
        if request.op == "subscribe":
            await self._subscribe(request)
            return
        handler = self.ops.get(request.op)
        if handler is None:
            await self.send(error_reply(request.id, ApiError(
                f"unknown operation {request.op!r} (known: {', '.join(sorted(OPS))})", code="unknown_op")))
            return
        try:
            result = await handler(request.args)
        except ApiError as exc:
            reply = error_reply(request.id, exc)
        except LocalProtocolError:
            raise
        except Exception as exc:  # a bug in a handler: log it loudly, answer, keep serving others
            LOGGER.exception("connection #%d: %s failed", self.id, request.op)
            reply = error_reply(request.id, api_error_for(exc))
        else:
            reply = ok_reply(request.id, result)
        try:
            await self.send(reply)
        except (TypeError, ValueError) as exc:  # a result msgpack cannot encode: a bug, never fatal
            LOGGER.exception("connection #%d: the reply to %s could not be encoded", self.id, request.op)
            await self.send(error_reply(request.id, api_error_for(exc)))

    async def _subscribe(self, request: Request) -> None:
        async def push(message: dict[str, Any]) -> None:
            await self.send({"id": request.id, **message})

        self.streaming = True
        try:
            await self.service.op_subscribe(request.args, push, self.id)
        except ApiError as exc:
            await self.send(error_reply(request.id, exc))
        finally:
            self.streaming = False


async def _bind_unix_socket(path: Path) -> trio.socket.SocketType:
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise SocketPathTooLong(
            f"socket path {path} is {len(os.fsencode(path))} bytes, longer than the {MAX_SOCKET_PATH} the OS allows; "
            "use a shorter --home"
        )
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # Create with 0600 from the start (umask), so no other user can connect in between.
        old_umask = os.umask(0o177)
        try:
            await sock.bind(os.fspath(path))
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


async def _bind_tcp(endpoint: ApiEndpoint) -> trio.socket.SocketType:
    assert endpoint.host is not None and endpoint.port is not None
    family = socket.AF_INET6 if ":" in endpoint.host else socket.AF_INET
    sock = trio.socket.socket(family, socket.SOCK_STREAM)
    try:
        if os.name == "posix":  # reuse a port in TIME_WAIT after a restart (on Windows this would allow theft)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        await sock.bind((endpoint.host, endpoint.port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ApiListenError(f"cannot listen for the local API on {endpoint.describe()}: {exc.strerror or exc} "
                             "(another palaced? choose another port with --api tcp://127.0.0.1:PORT)") from None
    return sock


async def serve_api(
    endpoint: ApiEndpoint,
    home: Path,
    service: Service,
    max_frame_bytes: int,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve the control API until cancelled (a Unix socket in ``home``, or loopback TCP with a
    token published in ``home/api.json``); reports where it listens once it does."""
    token: str | None = None
    if endpoint.transport == "unix":
        published = socket_path(home)
        sock = await _bind_unix_socket(published)
        where = str(published)
    else:
        sock = await _bind_tcp(endpoint)
        host, port = sock.getsockname()[:2]
        token = secrets.token_urlsafe(32)
        published = api_file(home)
        # Readable by this user only: the token is what makes the loopback port theirs.
        text = api_file_text(host, port, token, os.getpid())
        await trio.to_thread.run_sync(write_atomically, published, text.encode("utf-8"), 0o600)
        where = ApiEndpoint("tcp", host, port).describe()
    listener = trio.SocketListener(sock)

    async def handle(stream: trio.SocketStream) -> None:
        connection = _Connection(stream, service, max_frame_bytes, token)
        try:
            await connection.run()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET):
                raise
        finally:
            await trio.aclose_forcefully(stream)

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, handle, [listener])
            LOGGER.info("local API listening on %s", where)
            task_status.started(where)
            await trio.sleep_forever()
    finally:
        try:
            published.unlink()
        except FileNotFoundError:
            pass
    raise AssertionError("unreachable")  # pragma: no cover
