"""Synchronous client of palaced's local API (Unix socket, or loopback TCP with a token).

Owns: finding the daemon (its home's ``api.json`` if it listens on TCP, else its Unix socket:
proto/paths.py), connecting, and the socket IO of request/reply calls and subscription pushes.
What is sent when (the hello first, request ids, replies paired with requests, pushes told from
replies, the receive limit) is the ``ClientConnection`` state machine's (proto/apiconn.py).
Deliberately blocking and trio-free: palacectl runs in agents' loops, so a simple command must
start fast (stdlib socket + msgpack only). The daemon pushes watch events over the socket
(``Client.subscribe``: a ``Subscription`` of them); the client only blocks in ``recv`` (no polling
anywhere).

Error handling: what the daemon sends that the local API does not allow (a frame that is not a
message map, an undecodable or oversized one, a reply where only pushes may come) is a protocol
error, ``DaemonProtocolError``, naming it. It is never skipped: whatever came with it could be
what the caller waits for. ``aclient`` treats it the same way.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from palace_proto.apiconn import NEED_DATA, ClientConnection, Push, Reply, result_of
from palace_proto.errors import ProtocolError
from palace_proto.paths import ApiEndpoint, api_file, default_home, parse_api_file, socket_path

__all__ = [
    "Client", "DaemonProtocolError", "DaemonUnreachable", "IdleTimeout", "Subscription", "endpoint_for", "home_from",
    "socket_for",
]

# Why 10 s: connecting to loopback is instant or refused; only a wedged machine takes longer.
CONNECT_TIMEOUT_S: Final = 10.0

# Why 1 MiB: big receive calls keep large artifact replies to a few syscalls.
RECEIVE_CHUNK: Final = 1 << 20


class DaemonUnreachable(Exception):
    """palaced is not running on this home (or the connection broke)."""


class DaemonProtocolError(DaemonUnreachable):
    """palaced sent what the local API does not allow (module docstring, "Error handling"). A
    kind of ``DaemonUnreachable``: the connection cannot be trusted any more, and every caller
    already ends (or starts again) on that; its message names what was wrong."""


class IdleTimeout(Exception):
    """No message arrived within the requested time (watch idle exit)."""


def malformed(exc: ProtocolError) -> DaemonProtocolError:
    """The error for a frame the client's machine refused (``aclient`` says it the same way)."""
    return DaemonProtocolError(f"palaced sent a malformed reply: {exc.message}")


def home_from(home: str | os.PathLike[str] | None) -> Path:
    return Path(home).expanduser() if home else default_home(os.environ, Path.home(), sys.platform)


def socket_for(home: Path) -> Path:
    return socket_path(home)


def endpoint_for(home: Path) -> ApiEndpoint:
    """Where palaced on ``home`` listens: what its ``api.json`` says (TCP) if there is one, else
    its Unix socket. Raises DaemonUnreachable if ``api.json`` cannot be used."""
    path = api_file(home)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ApiEndpoint("unix", path=socket_path(home))
    except (OSError, UnicodeDecodeError) as exc:
        raise DaemonUnreachable(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return parse_api_file(text)
    except ValueError as exc:
        raise DaemonUnreachable(f"{path} {exc}; restart palaced to write it again") from None


def open_socket(endpoint: ApiEndpoint) -> socket.socket:
    """A connected socket to ``endpoint`` (OSError if it cannot be reached)."""
    if endpoint.transport == "tcp":
        assert endpoint.host is not None and endpoint.port is not None
        sock = socket.create_connection((endpoint.host, endpoint.port), timeout=CONNECT_TIMEOUT_S)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # requests are small: no Nagle delay
        return sock
    if not hasattr(socket, "AF_UNIX"):
        raise FileNotFoundError("no api.json (on this system palaced listens on TCP and writes one)")
    assert endpoint.path is not None, "endpoint_for names the socket of every unix endpoint"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(os.fspath(endpoint.path))
    except BaseException:
        sock.close()
        raise
    return sock


class Client:
    """One connection to palaced. Use as a context manager."""

    def __init__(self, home: Path, *, client_name: str = "palacectl") -> None:
        self.home = home
        self.path = socket_for(home)
        self.endpoint: ApiEndpoint | None = None
        self._client_name = client_name
        self._sock: socket.socket | None = None
        self._conn = ClientConnection()
        self.hello: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"<Client {self.path} connected={self._sock is not None}>"

    def __enter__(self) -> Client:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unreachable(self, why: str) -> DaemonUnreachable:
        where = self.endpoint.describe() if self.endpoint is not None else str(self.path)
        return DaemonUnreachable(
            f"palaced is not running on {where} ({why}); start it with `palaced --home {self.home}`"
            if self.home != default_home(os.environ, Path.home(), sys.platform)
            else f"palaced is not running on {where} ({why}); start it with `palaced`"
        )

    def connect(self) -> None:
        """Connect and say hello.

        Raises:
            DaemonUnreachable: no socket, connection refused, or the daemon hung up.
            ApiError: the daemon refused the hello (``version_mismatch``).
        """
        self.endpoint = endpoint = endpoint_for(self.home)
        try:
            sock = open_socket(endpoint)
        except FileNotFoundError as exc:
            raise self._unreachable("no socket" if endpoint.transport == "unix" else str(exc)) from None
        except ConnectionRefusedError:
            raise self._unreachable("connection refused") from None
        except PermissionError:
            raise self._unreachable("permission denied: the socket belongs to another user") from None
        except OSError as exc:
            raise self._unreachable(exc.strerror or str(exc)) from None
        self._sock = sock
        self._sock_timeout = sock.gettimeout()
        self._conn = ClientConnection()
        try:
            rid, data = self._conn.hello(client=self._client_name, pid=os.getpid(), token=endpoint.token)
            self._sendall(data)
            self.hello = self._result(rid)  # the machine raised its receive limit to the daemon's
        except BaseException:
            self.close()  # refused (a limit, a bad token, another version): no socket left behind
            raise

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _sendall(self, data: bytes) -> None:
        assert self._sock is not None, "not connected"
        try:
            self._sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            raise self._unreachable("connection closed by the daemon") from None

    def send(self, op: str, **args: Any) -> int:
        """Send one request without waiting; returns its id.

        Raises:
            LocalProtocolError: ``args`` is not encodable as msgpack.
        """
        assert self._sock is not None, "not connected"
        rid, data = self._conn.send_request(op, args)
        self._sendall(data)
        return rid

    def _next_event(self, timeout: float | None) -> Reply | Push:
        """The next reply or push, reading as needed (see ``receive`` for the errors)."""
        assert self._sock is not None, "not connected"
        conn = self._conn
        while True:
            try:
                event = conn.next_event()
            except ProtocolError as exc:  # MalformedReply too: a frame that is not a message map
                raise malformed(exc) from None
            if event is not NEED_DATA:
                return event
            if timeout != self._sock_timeout:  # settimeout is two fcntl calls: only when it changes
                self._sock.settimeout(timeout)
                self._sock_timeout = timeout
            try:
                data = self._sock.recv(RECEIVE_CHUNK)
            except TimeoutError:
                raise IdleTimeout() from None
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            if not data:
                raise self._unreachable("connection closed by the daemon")
            conn.receive_data(data)

    def receive(self, timeout: float | None = None) -> dict[str, Any]:
        """Read the next message (reply or push).

        Raises:
            IdleTimeout: nothing arrived within ``timeout`` seconds.
            DaemonUnreachable: the daemon closed the connection.
            DaemonProtocolError: the daemon sent what is not a message.
        """
        return dict(self._next_event(timeout).message)

    def _result(self, rid: int) -> Any:
        """Read until the reply to ``rid`` (or a connection-level error, id null); its result."""
        while True:
            event = self._next_event(None)
            if event.id == rid or event.id is None:
                return result_of(event.message)

    def call(self, op: str, **args: Any) -> Any:
        """Send a request and return its result.

        Raises:
            ApiError: the daemon answered with an error (``code`` says which).
            DaemonUnreachable: the connection failed (``DaemonProtocolError``: the daemon sent
                what is not a message).
        """
        return self._result(self.send(op, **args))

    def subscribe(self, **args: Any) -> Subscription:
        """Start a subscription (``subscribe``, proto/PROTOCOL.md §3.2) on this connection, which
        then belongs to it (open another for requests). Its ``started`` push is read before this
        returns, so a bad filter or an unknown cursor raises here, before anything was promised.

        Args:
            args: the subscription's arguments: filters (``palace_proto.filters.filter_args``),
                ``start``, ``since_event_id``, ``limit``, ``preview``, ``agent``, ``worker``;
                ``pid`` is this process's unless given.

        Raises:
            ApiError: the daemon refused the subscription (its message, word for word).
            DaemonUnreachable: the connection failed, or the daemon sent what is not a push.
        """
        args.setdefault("pid", os.getpid())
        subscription = Subscription(self, self.send("subscribe", **args))
        subscription.started = subscription.next_push()
        return subscription


class Subscription:
    """The pushes of one subscription, on the ``Client`` connection it owns (``Client.subscribe``):
    ``started`` (the daemon's first push), then ``next_push()`` for each ``batch`` or ``cursor``
    push, in order; iterating it yields the same, waiting as long as it takes. Closing it (or
    leaving its ``with`` block) closes the connection, which ends the subscription."""

    def __init__(self, client: Client, rid: int) -> None:
        self.client = client
        self._rid = rid
        self.started: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"<Subscription {self.client.path} cursor={self.started.get('cursor')!r}>"

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while True:
            yield self.next_push()

    def close(self) -> None:
        self.client.close()

    def next_push(self, timeout: float | None = None) -> dict[str, Any]:
        """The next push of this subscription (its message map: ``push`` names its kind).

        Raises:
            IdleTimeout: nothing arrived within ``timeout`` seconds.
            ApiError: the daemon refused or ended the subscription with an error.
            DaemonUnreachable: the daemon closed the connection (it stopped, or restarted).
            DaemonProtocolError: the daemon sent what is not a message, or a reply where only
                this subscription's pushes may come.
        """
        while True:
            event = self.client._next_event(timeout)
            if isinstance(event, Push):
                if event.id == self._rid:
                    return dict(event.message)
                continue
            if event.id in (self._rid, None):
                result_of(event.message)  # an error reply: raises ApiError
                raise DaemonProtocolError("palaced answered a subscription with a reply")
