"""The local control API: a Unix socket (mode 0600), or loopback TCP with a bearer token,
speaking framed msgpack requests.

Owns: accepting connections and each connection's IO: reading, queueing, timeouts, refusals,
dispatching requests to palaced/handlers, writing replies, and streaming subscriptions
(proto/PROTOCOL.md, "Local API"). What may be sent when is not decided here: framing, the hello
handshake (which, over TCP, must carry the token this daemon wrote to ``api.json``:
proto/paths.py), the frame limits and the streaming rule are the ``ServerConnection`` state
machine's (proto/apiconn.py), one per connection. One task reads
each connection (so a disconnect is noticed at once, even mid-wait) and one processes its
requests in order. Garbage never takes the daemon down: a malformed request gets an error reply,
an undecodable or oversized frame gets an error reply and the connection is closed, and every
other connection keeps being served.

Before a connection's hello has succeeded it is held to tighter limits, because over TCP its
sender may be any local user: frames of at most ``PRE_HELLO_MAX_FRAME_BYTES``, a hello within
``HELLO_TIMEOUT_S``, and at most ``MAX_PRE_HELLO_PER_CLIENT`` such connections per client (per
process on a Unix socket, per address over TCP) within ``MAX_CONNECTIONS`` in all. A limit that is
hit refuses that connection with an error frame and logs once (``ApiConnections``); the counts
show in ``palacectl status --json`` under ``api_connections``.

The second wall (house style, point 13): whatever exception escapes the serving of one
connection (its reader, its processor, a subscription, a send) ends that connection only. It is
logged once with its traceback, counted as ``failed``, and the socket is closed; a watcher is
released by ``handlers.log.subscribe``'s own ``finally``. Cancellation and KeyboardInterrupt are
never caught.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import secrets
import socket
import struct
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Final, NoReturn

import trio

from palace_proto.apiconn import (
    NEED_DATA,
    ConnectionClosed,
    HelloRequest,
    ProtocolViolation,
    Request,
    ServerConnection,
    error_frame,
)
from palace_proto.control import HELLO_TIMEOUT_S, PRE_HELLO_MAX_FRAME_BYTES
from palace_proto.errors import ApiError, LocalProtocolError
from palace_proto.features import OPS
from palace_proto.paths import ApiEndpoint, api_file, api_file_text, socket_path

from .files import write_atomically
from .handlers import BoundHandler, Context, api_error_for, hello_result, subscribe
from .limits import LimitLog

__all__ = ["ApiConnections", "ApiListenError", "SocketPathTooLong", "serve_api"]

LOGGER: Final = logging.getLogger("palaced.api")
# Why 64 KiB: large enough to take a body-sized request in a few reads, small enough per connection.
RECEIVE_CHUNK: Final = 65536
# The core's requests the connection's reader answers itself when nothing is queued before them
# (and the features' ``inline_ops``): each is short (no wait for a peer, a timeout or a stream;
# ``append`` and ``ack`` wait for one commit at most, and only without ``replicated``).
INLINE_OPS: Final = frozenset({"ping", "append", "append_many", "ack", "get_event", "list", "status", "digest"})
# Why 16: a client may pipeline a few requests (hello + one op); more just waits in the socket.
REQUEST_QUEUE: Final = 16
# Why 5 s: a reply to a client that stopped reading must not pin a handler forever.
SEND_TIMEOUT_S: Final = 5.0
# sun_path is 108 bytes on Linux (104 on macOS), including the terminating NUL.
MAX_SOCKET_PATH: Final = 107 if sys.platform == "linux" else 103
# Writing a reply straight to the socket's descriptor works on POSIX only (Windows sockets are
# not file descriptors).
_DIRECT_WRITE: Final = os.name == "posix"
# Why 512: generous after hello (the daemon's benchmark keeps 100 watchers connected, and a busy
# machine runs a few dozen agents, each with a watch and a few short calls), yet only half the usual
# 1024-descriptor soft limit: the other half stays for SQLite, the peer links and the log. Never
# more than half the process's soft limit where it is lower (``max_connections_for``).
MAX_CONNECTIONS: Final = 512
# Why 64: a client says hello in its first round trip, so its connections are "before hello" for
# milliseconds; 64 at once is a burst of 64 palacectl processes started together (over TCP every
# local client shares the address 127.0.0.1). Together with the deadline and the 4 KiB frame limit
# this bounds what an unauthenticated client holds: 64 descriptors for 10 s, each with one read
# buffer (a 64 KiB chunk at most, since no frame it may send is bigger than 4 KiB).
MAX_PRE_HELLO_PER_CLIENT: Final = 64
# Why 1 s: a refusal is one small frame into an empty socket buffer; if even that cannot be written
# the client is not reading, and the close alone tells it.
REFUSAL_SEND_TIMEOUT_S: Final = 1.0
# Why 0.5 s and 16: a refused client has usually just sent its hello, or is about to. Waiting for it
# (at most this long) before closing lets the client read the refusal: on a Unix socket its write
# would otherwise fail first ("connection closed"), and over TCP the unread hello would turn the
# close into a reset. At most 16 refusals wait at once, so a flood is closed at once, unread.
REFUSAL_LINGER_S: Final = 0.5
MAX_LINGERING_REFUSALS: Final = 16
# Why 64: one traceback per distinct failing place is enough to find the bug; the set stays small
# even if a client could reach many (the count in status keeps growing regardless).
MAX_LOGGED_FAILURE_SITES: Final = 64
# How a client's going away shows up as an OSError (rather than a trio BrokenResourceError).
_DISCONNECT_ERRNOS: Final = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ECONNABORTED, errno.ENOTCONN})
# Linux ``struct ucred`` (SO_PEERCRED): pid, uid, gid.
_UCRED: Final = struct.Struct("3i")

_connection_ids = itertools.count(1)


class SocketPathTooLong(Exception):
    pass


class ApiListenError(Exception):
    """The TCP API port cannot be bound (in use, or not permitted)."""


def max_connections_for(soft_limit: int | None) -> int:
    """``MAX_CONNECTIONS``, or half the process's descriptor soft limit if that is lower (the
    other half stays for SQLite, the peer links and the log); at least 16."""
    if soft_limit is None or soft_limit <= 0:
        return MAX_CONNECTIONS
    return max(16, min(MAX_CONNECTIONS, soft_limit // 2))


def _descriptor_soft_limit() -> int | None:
    try:
        import resource  # POSIX only
    except ImportError:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def client_of(sock: Any) -> str:
    """Who is at the other end of an accepted connection, as the key the per-client cap counts by
    (and the words the log uses). Never raises: a client already gone is "unknown".

    Unix socket: the peer process (Linux ``SO_PEERCRED``, macOS ``LOCAL_PEERPID``); where neither
    exists every Unix-socket client shares one key, so the cap then bounds them together. TCP: the
    remote address (on loopback every local client shares 127.0.0.1, so there the cap bounds all
    of them together too).
    """
    try:
        if sock.family == getattr(socket, "AF_UNIX", None):
            if hasattr(socket, "SO_PEERCRED"):
                pid, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
                return f"pid {pid} (uid {uid})"
            if hasattr(socket, "LOCAL_PEERPID"):
                return f"pid {sock.getsockopt(0, socket.LOCAL_PEERPID)}"  # level 0 is SOL_LOCAL
            return "a Unix-socket client"
        return f"address {sock.getpeername()[0]}"
    except (OSError, struct.error, IndexError, TypeError):
        return "unknown"


class ApiConnections:
    """What the API's connection limits admitted, refused and saw fail: its part of ``status``.

    Pure bookkeeping (no IO). ``admit`` decides whether a new connection may be served, ``greeted``
    moves it out of the "before hello" count, ``release`` forgets it. Each limit, and each other
    kind of hostile pre-hello client (a bad token, undecodable bytes), is logged through
    ``LimitLog`` (palaced/limits.py: the first time, then at most every ten minutes with the count),
    so a flood cannot flood the log; every hit is counted in ``statistics``.
    """

    #: the limits a connection can be refused or closed by, as ``statistics()["refused_by"]`` names them
    LIMITS: Final = ("max_connections", "max_pre_hello_per_client", "pre_hello_frame_bytes", "hello_timeout")

    def __init__(self, max_connections: int = MAX_CONNECTIONS,
                 max_pre_hello_per_client: int = MAX_PRE_HELLO_PER_CLIENT) -> None:
        self.max_connections = max_connections
        self.max_pre_hello_per_client = max_pre_hello_per_client
        self.open = 0
        self.greeted_open = 0
        self.accepted = 0
        self.failed = 0
        self.limit_log = LimitLog(LOGGER)
        # Bounded: a client has an entry only while it has a connection open, and at most
        # max_connections are open.
        self._pre_hello: Counter[str] = Counter()
        #: refused connections waiting (briefly) for their client's hello before being closed
        self.lingering = 0
        self._failure_sites: set[tuple[str, str, int]] = set()

    def __repr__(self) -> str:
        return (f"<ApiConnections open={self.open} greeted={self.greeted_open} accepted={self.accepted} "
                f"refused={self.statistics()['refused']} failed={self.failed}>")

    def admit(self, client: str) -> tuple[str, ApiError] | None:
        """Count a new connection from ``client`` in; or, when a limit refuses it, return that
        limit's name and the error to send (and count nothing: call ``refused`` once it is sent)."""
        if self.open >= self.max_connections:
            return "max_connections", ApiError(
                f"palaced already serves {self.open} connections, its limit; retry in a moment, and look for a "
                "client that holds many open", code="too_many_connections")
        if self._pre_hello[client] >= self.max_pre_hello_per_client:
            return "max_pre_hello_per_client", ApiError(
                f"{self.max_pre_hello_per_client} connections from {client} have not said hello yet, the limit; "
                "retry in a moment (and say hello on each connection as soon as it opens)",
                code="too_many_connections")
        self.open += 1
        self.accepted += 1
        self._pre_hello[client] += 1
        return None

    def greeted(self, client: str) -> None:
        self._pre_hello[client] -= 1
        if self._pre_hello[client] <= 0:
            del self._pre_hello[client]
        self.greeted_open += 1

    def release(self, client: str, *, greeted: bool) -> None:
        self.open -= 1
        if greeted:
            self.greeted_open -= 1
        else:
            self._pre_hello[client] -= 1
            if self._pre_hello[client] <= 0:
                del self._pre_hello[client]

    def refused(self, kind: str, message: str) -> None:
        """A connection was refused or closed: by one of ``LIMITS``, or for another kind of hostile
        input before hello ("unauthorized", "pre_hello_garbage"). Counted; logged sparingly."""
        self.limit_log.hit(kind, "%s", message)

    def failure(self, connection: str, client: str, exc: BaseException) -> None:
        """A connection ended by an unexpected exception: count it, and log its traceback once per
        place it was raised (the same bug hit a thousand times logs once)."""
        self.failed += 1
        leaf = exc
        while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
            leaf = leaf.exceptions[0]
        tb = leaf.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        site = (type(leaf).__name__, tb.tb_frame.f_code.co_filename if tb else "", tb.tb_lineno if tb else 0)
        if site in self._failure_sites or len(self._failure_sites) >= MAX_LOGGED_FAILURE_SITES:
            LOGGER.debug("%s from %s failed unexpectedly again (%s); closed", connection, client, type(leaf).__name__)
            return
        self._failure_sites.add(site)
        LOGGER.error("%s from %s failed unexpectedly and was closed; other connections are unaffected "
                     "(a bug: please report it with this traceback)", connection, client,
                     exc_info=(type(exc), exc, exc.__traceback__))

    def statistics(self) -> dict[str, Any]:
        hits = self.limit_log.statistics()
        refused_by = {limit: hits.get(limit, 0) for limit in self.LIMITS}
        return {
            "open": self.open, "greeted": self.greeted_open, "pre_hello": self.open - self.greeted_open,
            "accepted": self.accepted, "refused": sum(refused_by.values()), "refused_by": refused_by,
            "unauthorized": hits.get("unauthorized", 0), "failed": self.failed,
            "limits": {"max_connections": self.max_connections,
                       "max_pre_hello_per_client": self.max_pre_hello_per_client,
                       "pre_hello_max_frame_bytes": PRE_HELLO_MAX_FRAME_BYTES, "hello_timeout_s": HELLO_TIMEOUT_S},
        }


class _Connection:
    """One client connection's IO: a reader task and a request processor sharing a send lock,
    plus a watchdog that closes it if no hello succeeds in time. What may be sent when, the frame
    limits and the hello's verdict are the ``ServerConnection`` state machine's (proto/apiconn.py);
    this class reads, writes, times out, queues and keeps the books."""

    def __init__(self, stream: trio.SocketStream, ctx: Context, ops: dict[str, BoundHandler], max_frame_bytes: int,
                 token: str | None = None, *, client: str = "unknown",
                 connections: ApiConnections | None = None) -> None:
        self.id = next(_connection_ids)
        self.stream = stream
        self.ctx = ctx
        self.client = client
        self.connections = connections if connections is not None else ApiConnections()
        self.ops = ops
        self.inline_ops = INLINE_OPS | ctx.features.inline_ops
        self.conn = ServerConnection(max_frame_bytes, token=token)
        self.send_lock = trio.Lock()
        self.greeted_event = trio.Event()
        # Set by the processor when the hello the reader handed it has been answered.
        self._hello_answered: trio.Event | None = None
        self.requests = 0
        #: requests handed to the processor and not yet answered
        self._queued = 0

    @property
    def greeted(self) -> bool:
        return self.conn.greeted

    def __repr__(self) -> str:
        return f"<Connection #{self.id} {self.client} {self.conn.state.name} requests={self.requests}>"

    async def send(self, data: bytes, *, timeout: float = SEND_TIMEOUT_S) -> None:
        """Write one whole frame; shielded so a cancel cannot leave half a frame on the socket.

        Raises:
            trio.BrokenResourceError: the client is gone or stopped reading for ``timeout`` s.
        """
        lock = self.send_lock
        if _DIRECT_WRITE and not lock.locked():
            # Fast path: a reply nearly always fits in the socket buffer, and writing it directly
            # skips the scheduler passes of send_all and of taking the lock (issue 27: one pass per
            # reply was a tenth of an append's cost). Nobody else is mid-frame (the lock is free),
            # and nothing below yields before the lock is held, so frames never interleave.
            try:
                sent = os.write(self.stream.socket.fileno(), data)
            except BlockingIOError:
                sent = 0
            except OSError as exc:  # EPIPE, ECONNRESET, or a socket already closed
                raise trio.BrokenResourceError(f"cannot write to the client: {exc.strerror}") from None
            if sent == len(data):
                return
            lock.acquire_nowait()  # free, and not a yield since it was seen free: the rest is ours
            try:
                await self._send_rest(data[sent:], timeout)
            finally:
                lock.release()
            return
        async with lock:
            await self._send_rest(data, timeout)

    async def _send_rest(self, data: bytes, timeout: float) -> None:
        """Send what the socket did not take at once (the send lock held)."""
        with trio.CancelScope(shield=True), trio.move_on_after(timeout) as scope:
            await self.stream.send_all(data)
        if scope.cancelled_caught:
            raise trio.BrokenResourceError("client stopped reading")

    async def run(self) -> None:
        send_req, recv_req = trio.open_memory_channel[Request | HelloRequest](REQUEST_QUEUE)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._hello_deadline, nursery.cancel_scope)
            nursery.start_soon(self._process, recv_req, nursery.cancel_scope)
            await self._read(send_req)
            # EOF or a fatal frame error: nothing more can arrive, so stop whatever is running
            # (a wait or a watch for a client that is gone must not linger).
            nursery.cancel_scope.cancel(reason="client connection closed")

    async def _hello_deadline(self, scope: trio.CancelScope) -> None:
        with trio.move_on_after(HELLO_TIMEOUT_S):
            await self.greeted_event.wait()
            return
        self.connections.refused("hello_timeout", f"local API: closed a connection from {self.client} that had not "
                                 f"said hello {HELLO_TIMEOUT_S:g} s after connecting (a stuck or hostile client)")
        await self._send_final(ApiError(f"no successful hello within {HELLO_TIMEOUT_S:g} s of connecting; closing "
                                        "(send hello with the protocol version first)", code="hello_timeout"))
        scope.cancel(reason="no hello in time")

    async def _read(self, send_req: trio.MemorySendChannel[Request | HelloRequest]) -> None:
        conn = self.conn
        async with send_req:
            while True:
                try:
                    data = await self.stream.receive_some(RECEIVE_CHUNK)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                conn.receive_data(data)
                while True:
                    event = conn.next_event()
                    if event is NEED_DATA:
                        break
                    if type(event) is Request:
                        if self._queued == 0 and event.op in self.inline_ops and not event.args.get("replicated"):
                            # Short, and nothing queued for the processor before it (replies keep
                            # their order): answered here, one scheduler pass sooner than through
                            # the processor (most requests of an agent's loop). Only ops that
                            # cannot wait long: the reader must get back to reading soon, to
                            # notice a client that leaves.
                            self.requests += 1
                            try:
                                await self._handle(event)
                            except (trio.BrokenResourceError, trio.ClosedResourceError):
                                return
                            continue
                    elif type(event) is ProtocolViolation:
                        if event.fatal:
                            await self._fatal(event)
                            return
                        await self._send_error(event.id, event.error)
                        continue
                    elif type(event) is ConnectionClosed:
                        return
                    # Never block here: the reader must keep reading to notice EOF (a client that
                    # leaves mid-watch), so a request that cannot be queued is refused instead.
                    try:
                        self._queued += 1
                        send_req.send_nowait(event)
                    except trio.WouldBlock:
                        self._queued -= 1
                        await self._send_error(event.id, ApiError(
                            f"too many pipelined requests (at most {REQUEST_QUEUE} waiting); wait for replies",
                            code="bad_request"))
                        continue
                    if type(event) is HelloRequest and not conn.greeted:
                        # The one wait of the reader, for microseconds: frames after a hello are
                        # judged by its outcome (their size limit rises only once it succeeded), so
                        # a client that pipelines after its hello is not at the mercy of a race.
                        # (send_nowait did not yield: the processor cannot have answered it yet.)
                        self._hello_answered = trio.Event()
                        await self._hello_answered.wait()

    async def _fatal(self, violation: ProtocolViolation) -> None:
        """An oversized or undecodable frame: answer it (the stream is out of sync) and close."""
        if violation.limit == "pre_hello_frame_bytes":
            self.connections.refused("pre_hello_frame_bytes", f"local API: closed a connection from {self.client} "
                                     f"that sent a frame over {PRE_HELLO_MAX_FRAME_BYTES} bytes before hello "
                                     f"({violation.reason})")
            await self._send_final(violation.error)
            return
        if violation.limit == "pre_hello_garbage":
            self.connections.refused("pre_hello_garbage", f"local API: closed a connection from {self.client} that "
                                     f"sent undecodable bytes before hello ({violation.reason})")
        else:
            LOGGER.warning("connection #%d: %s; closing", self.id, violation.reason)
        await self._send_error(None, violation.error)

    async def _send_error(self, rid: int | None, error: ApiError) -> None:
        try:
            await self.send(self.conn.error(rid, error))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _send_final(self, error: ApiError, rid: int | None = None) -> None:
        """The last frame before the daemon closes the connection: tried briefly, never waited on."""
        try:
            await self.send(self.conn.error(rid, error), timeout=REFUSAL_SEND_TIMEOUT_S)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _process(self, recv_req: trio.MemoryReceiveChannel[Request | HelloRequest],
                       scope: trio.CancelScope) -> None:
        async for event in recv_req:
            self.requests += 1
            try:
                if type(event) is HelloRequest:
                    await self._hello(event)
                else:
                    await self._handle(event)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                # Nothing more can be answered: end the connection (the reader too).
                scope.cancel(reason="cannot write to the client")
                return
            finally:
                self._queued -= 1
                if type(event) is HelloRequest and self._hello_answered is not None:
                    self._hello_answered.set()

    async def _hello(self, hello: HelloRequest) -> None:
        error = self.conn.accept_hello(hello)
        if error is None:
            if not self.greeted_event.is_set():
                self.connections.greeted(self.client)
                self.greeted_event.set()
            await self.send(self.conn.reply(hello.id, hello_result(self.ctx)))
        elif error.code == "unauthorized":
            self.connections.refused("unauthorized", f"local API: refused a connection from {self.client}: its hello "
                                     "carried no valid token")
            await self._send_final(error, hello.id)
            # Close it: the reader task then stops, and nothing more is answered.
            await trio.aclose_forcefully(self.stream)
        else:
            await self.send(self.conn.error(hello.id, error))

    async def _handle(self, request: Request) -> None:
        if request.op == "subscribe":
            await self._subscribe(request)
            return
        handler = self.ops.get(request.op)
        if handler is None:
            await self.send(self.conn.error(request.id, ApiError(
                f"unknown operation {request.op!r} (known: {', '.join(sorted(OPS))})", code="unknown_op")))
            return
        result: Any = None
        error: ApiError | None = None
        try:
            result = await handler(request.args)
        except ApiError as exc:
            error = exc
        except LocalProtocolError:
            raise
        except Exception as exc:  # a bug in a handler: log it loudly, answer, keep serving others
            LOGGER.exception("connection #%d: %s failed", self.id, request.op)
            error = api_error_for(exc)
        try:
            data = self.conn.reply(request.id, result) if error is None else self.conn.error(request.id, error)
        except LocalProtocolError as exc:  # a result msgpack cannot encode: a bug, never fatal
            LOGGER.exception("connection #%d: the reply to %s could not be encoded", self.id, request.op)
            data = self.conn.error(request.id, api_error_for(exc))
        await self.send(data)

    async def _subscribe(self, request: Request) -> None:
        conn = self.conn

        async def push(message: dict[str, Any]) -> None:
            await self.send(conn.push(request.id, message))

        conn.start_stream()
        try:
            await subscribe(self.ctx, request.args, push, self.id)
        except ApiError as exc:
            await self.send(conn.error(request.id, exc))
        finally:
            conn.end_stream()


def _is_disconnect(exc: BaseException) -> bool:
    """The client went away (or we closed its stream): how connections normally end."""
    if isinstance(exc, (trio.BrokenResourceError, trio.ClosedResourceError)):
        return True
    return isinstance(exc, OSError) and exc.errno in _DISCONNECT_ERRNOS


def _discard_unread(stream: trio.SocketStream) -> None:
    """Drop what a refused client already sent (usually its hello), without waiting: closing a TCP
    socket with unread data sends a reset, which may destroy the refusal frame before it is read."""
    if not _DIRECT_WRITE:
        return
    for _ in range(4):  # a refused client has sent a hello at most; never read without bound
        try:
            if not os.read(stream.socket.fileno(), RECEIVE_CHUNK):
                return
        except OSError:  # BlockingIOError: nothing (more) to read
            return


async def _refuse(stream: trio.SocketStream, error: ApiError, connections: ApiConnections) -> None:
    """Send a refused client its error frame, give it a moment to send its hello, and close."""
    try:
        with trio.move_on_after(REFUSAL_SEND_TIMEOUT_S):
            await stream.send_all(error_frame(None, error))
        if connections.lingering < MAX_LINGERING_REFUSALS:
            connections.lingering += 1
            try:
                with trio.move_on_after(REFUSAL_LINGER_S):
                    await stream.receive_some(RECEIVE_CHUNK)
            finally:
                connections.lingering -= 1
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    _discard_unread(stream)
    await trio.aclose_forcefully(stream)


async def _serve_connection(stream: trio.SocketStream, ctx: Context, ops: dict[str, BoundHandler], max_frame_bytes: int,
                            token: str | None, connections: ApiConnections) -> None:
    """Serve one accepted connection to its end; nothing it does can raise out of here except
    cancellation and KeyboardInterrupt (the second wall)."""
    client = "unknown"
    name = "connection"
    try:
        client = client_of(stream.socket)
        refusal = connections.admit(client)
        if refusal is not None:
            limit, error = refusal
            await _refuse(stream, error, connections)
            # Counted once the refusal is on its way, so a count in status means the client has it.
            connections.refused(limit, f"local API: refused a connection: {error.message}")
            return
        connection: _Connection | None = None
        try:
            connection = _Connection(stream, ctx, ops, max_frame_bytes, token, client=client, connections=connections)
            name = f"connection #{connection.id}"
            await connection.run()
        finally:
            connections.release(client, greeted=connection is not None and connection.greeted)
    except* Exception as group:
        unexpected = group.subgroup(lambda e: not isinstance(e, BaseExceptionGroup) and not _is_disconnect(e))
        if unexpected is not None:
            connections.failure(name, client, unexpected)
    finally:
        await trio.aclose_forcefully(stream)


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
    ctx: Context,
    ops: dict[str, BoundHandler],
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
    connections = ApiConnections(max_connections_for(_descriptor_soft_limit()))
    # Read by the status handler (``api_connections``); the handlers cannot import this module.
    ctx.api_statistics = connections.statistics

    async def handle(stream: trio.SocketStream) -> None:
        await _serve_connection(stream, ctx, ops, max_frame_bytes, token, connections)

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
