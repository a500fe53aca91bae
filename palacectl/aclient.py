"""Asynchronous (trio) client of palaced's local API, for the MCP adapter and the dashboard.

Owns: one request/reply call per connection — connect, hello, one request, its reply, close —
and subscriptions, each on a connection of its own (``subscribe``: the daemon's pushes, read as
they come). The MCP adapter and the dashboard hold no state of their own and must survive the
daemon restarting under them, so a fresh connection per call is the simplest correct shape (a
local connect + hello costs about a millisecond). A long ``wait`` is just a request whose reply
comes late; cancelling the call closes the connection, and the daemon stops the wait (or the
subscription) when its client goes away.

The plain CLI keeps using the blocking ``client.Client`` (no trio import on its start-up path).
Both drive the same ``ClientConnection`` state machine (proto/apiconn.py): this module only reads
and writes the trio stream. Both treat what the daemon sends that the API does not allow the same
way: a ``DaemonProtocolError`` naming it (client.py's "Error handling"), never a skipped frame.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Final

import trio

from palace_proto.apiconn import NEED_DATA, ClientConnection, Push, Reply, result_of
from palace_proto.errors import ProtocolError
from palace_proto.paths import default_home

from .client import DaemonProtocolError, DaemonUnreachable, endpoint_for, malformed, socket_for

__all__ = ["AsyncDaemon", "Subscription"]

# Why 1 MiB: big receive calls keep large artifact replies to a few syscalls.
RECEIVE_CHUNK: Final = 1 << 20


class AsyncDaemon:
    """Calls to the palaced of one home, each on its own connection."""

    def __init__(self, home: Path, *, client_name: str = "palacectl-mcp") -> None:
        self.home = home
        self.path = socket_for(home)
        self._client_name = client_name

    def __repr__(self) -> str:
        return f"<AsyncDaemon {self.path}>"

    def _unreachable(self, why: str, where: str | None = None) -> DaemonUnreachable:
        start = ("palaced" if self.home == default_home(os.environ, Path.home(), sys.platform)
                 else f"palaced --home {self.home}")
        return DaemonUnreachable(f"palaced is not running on {where or self.path} ({why}); start it with `{start}`")

    @contextlib.asynccontextmanager
    async def _open(self) -> AsyncIterator[tuple[trio.abc.Stream, ClientConnection]]:
        """A greeted connection (connect, hello); closed when the block ends.

        Raises:
            DaemonUnreachable: no daemon, or the connection broke.
        """
        endpoint = endpoint_for(self.home)  # read each call: the daemon may restart on another port
        where = endpoint.describe()
        try:
            if endpoint.transport == "tcp":
                assert endpoint.host is not None and endpoint.port is not None
                stream: trio.abc.Stream = await trio.open_tcp_stream(endpoint.host, endpoint.port)
            else:
                stream = await trio.open_unix_socket(os.fspath(self.path))
        except FileNotFoundError:
            raise self._unreachable("no socket", where) from None
        except ConnectionRefusedError:
            raise self._unreachable("connection refused", where) from None
        except OSError as exc:
            raise self._unreachable(exc.strerror or str(exc), where) from None
        async with stream:
            conn = ClientConnection()
            try:
                hello_id, data = conn.hello(client=self._client_name, pid=os.getpid(), token=endpoint.token)
                await stream.send_all(data)
                await self._reply(stream, conn, hello_id)  # the machine raised its receive limit to the daemon's
                yield stream, conn
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                raise self._unreachable("connection closed by the daemon") from None

    async def call(self, op: str, **args: Any) -> Any:
        """Send one request and return its result.

        Raises:
            ApiError: the daemon answered with an error (its message, word for word).
            DaemonUnreachable: no daemon, or the connection broke.
        """
        async with self._open() as (stream, conn):
            call_id, data = conn.send_request(op, args)
            await stream.send_all(data)
            return await self._reply(stream, conn, call_id)

    @contextlib.asynccontextmanager
    async def subscribe(self, **args: Any) -> AsyncIterator[Subscription]:
        """A subscription (``subscribe``, proto/PROTOCOL.md §3.2) on a connection of its own, open
        for the block: its ``started`` push is read before the block starts, so a bad filter or
        an unknown cursor raises here, before anything was promised to whoever reads it.

        Raises:
            ApiError: the daemon refused the subscription (its message, word for word).
            DaemonUnreachable: no daemon, or the connection broke.
        """
        async with self._open() as (stream, conn):
            rid, data = conn.send_request("subscribe", args)
            await stream.send_all(data)
            subscription = Subscription(self, stream, conn, rid)
            first = await subscription.next_push()
            subscription.started = dict(first)
            yield subscription

    async def _next_event(self, stream: trio.abc.Stream, conn: ClientConnection) -> Reply | Push:
        """The next reply or push on ``conn``, reading ``stream`` as needed.

        Raises:
            DaemonUnreachable: the daemon closed the connection.
            DaemonProtocolError: the daemon sent what is not a message (a frame that is not a
                message map included: what came with it could be what the caller waits for).
        """
        while True:
            try:
                event = conn.next_event()
            except ProtocolError as exc:  # MalformedReply too
                raise malformed(exc) from None
            if event is not NEED_DATA:
                return event
            try:
                data = await stream.receive_some(RECEIVE_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                raise self._unreachable("connection closed by the daemon")
            conn.receive_data(data)

    async def _reply(self, stream: trio.abc.Stream, conn: ClientConnection, rid: int) -> Any:
        while True:
            event = await self._next_event(stream, conn)
            if event.id == rid:  # anything else is not ours (no pushes on a plain request connection)
                return result_of(event.message)


class Subscription:
    """The pushes of one subscription: ``started`` (the daemon's first push), then
    ``next_push()`` for each ``batch`` or ``cursor`` push, in order."""

    def __init__(self, daemon: AsyncDaemon, stream: trio.abc.Stream, conn: ClientConnection, rid: int) -> None:
        self._daemon = daemon
        self._stream = stream
        self._conn = conn
        self._rid = rid
        self.started: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"<Subscription {self._daemon.path} cursor={self.started.get('cursor')!r}>"

    async def next_push(self) -> Mapping[str, Any]:
        """The next push of this subscription (its message map).

        Raises:
            ApiError: the daemon ended the subscription with an error.
            DaemonUnreachable: the daemon closed the connection (it stopped, or restarted).
            DaemonProtocolError: the daemon sent what is not a message, or a reply where only
                this subscription's pushes may come.
        """
        while True:
            event = await self._daemon._next_event(self._stream, self._conn)
            if isinstance(event, Push):
                if event.id == self._rid:
                    return event.message
                continue
            if event.id in (self._rid, None):
                result_of(event.message)  # an error reply: raises ApiError
                raise DaemonProtocolError("palaced answered a subscription with a reply")
