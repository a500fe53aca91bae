"""Synchronous client of palaced's Unix-socket API.

Owns: connecting, the hello handshake, request/reply calls and reading subscription pushes.
Deliberately blocking and trio-free: palacectl runs in agents' loops, so a simple command must
start fast (stdlib socket + msgpack only). The daemon pushes watch events over the socket; the
client only blocks in ``recv`` (no polling anywhere).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from palace_proto.control import PROTOCOL_VERSION, api_error_from_wire, request
from palace_proto.errors import ProtocolError
from palace_proto.framing import DEFAULT_MAX_FRAME_BYTES, NEED_DATA, FrameBuffer, encode_frame
from palace_proto.paths import default_home, socket_path

__all__ = ["Client", "DaemonUnreachable", "IdleTimeout", "home_from", "socket_for"]

# Why 1 MiB: big receive calls keep large artifact replies to a few syscalls.
RECEIVE_CHUNK: Final = 1 << 20


class DaemonUnreachable(Exception):
    """palaced is not running on this home (or the connection broke)."""


class IdleTimeout(Exception):
    """No message arrived within the requested time (watch idle exit)."""


def home_from(home: str | os.PathLike[str] | None) -> Path:
    return Path(home).expanduser() if home else default_home(os.environ, Path.home())


def socket_for(home: Path) -> Path:
    return socket_path(home)


class Client:
    """One connection to palaced. Use as a context manager."""

    def __init__(self, home: Path, *, client_name: str = "palacectl") -> None:
        self.home = home
        self.path = socket_for(home)
        self._client_name = client_name
        self._sock: socket.socket | None = None
        self._buffer = FrameBuffer(DEFAULT_MAX_FRAME_BYTES)
        self._next_id = 1
        self.hello: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"<Client {self.path} connected={self._sock is not None}>"

    def __enter__(self) -> Client:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unreachable(self, why: str) -> DaemonUnreachable:
        return DaemonUnreachable(
            f"palaced is not running on {self.path} ({why}); start it with `palaced --home {self.home}`"
            if self.home != default_home(os.environ, Path.home())
            else f"palaced is not running on {self.path} ({why}); start it with `palaced`"
        )

    def connect(self) -> None:
        """Connect and say hello.

        Raises:
            DaemonUnreachable: no socket, connection refused, or the daemon hung up.
            ApiError: the daemon refused the hello (``version_mismatch``).
        """
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(os.fspath(self.path))
        except FileNotFoundError:
            sock.close()
            raise self._unreachable("no socket") from None
        except ConnectionRefusedError:
            sock.close()
            raise self._unreachable("connection refused") from None
        except PermissionError:
            sock.close()
            raise self._unreachable("permission denied: the socket belongs to another user") from None
        except OSError as exc:
            sock.close()
            raise self._unreachable(exc.strerror or str(exc)) from None
        self._sock = sock
        self.hello = self.call("hello", version=PROTOCOL_VERSION, client=self._client_name, pid=os.getpid())
        limit = self.hello.get("limits", {}).get("max_frame_bytes")
        if isinstance(limit, int) and limit > 0:
            # Replies can carry an artifact of up to the daemon's limit.
            self._buffer.max_frame_bytes = limit + (1 << 20)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def send(self, op: str, **args: Any) -> int:
        """Send one request without waiting; returns its id."""
        assert self._sock is not None, "not connected"
        rid = self._next_id
        self._next_id += 1
        try:
            self._sock.sendall(encode_frame(request(rid, op, **args), max_frame_bytes=1 << 40))
        except (BrokenPipeError, ConnectionResetError):
            raise self._unreachable("connection closed by the daemon") from None
        return rid

    def receive(self, timeout: float | None = None) -> dict[str, Any]:
        """Read the next message (reply or push).

        Raises:
            IdleTimeout: nothing arrived within ``timeout`` seconds.
            DaemonUnreachable: the daemon closed the connection.
        """
        assert self._sock is not None, "not connected"
        while True:
            try:
                message = self._buffer.next_frame()
            except ProtocolError as exc:
                raise DaemonUnreachable(f"palaced sent a malformed reply: {exc.message}") from None
            if message is not NEED_DATA:
                if not isinstance(message, Mapping):
                    raise DaemonUnreachable("palaced sent a malformed reply")
                return dict(message)
            self._sock.settimeout(timeout)
            try:
                data = self._sock.recv(RECEIVE_CHUNK)
            except TimeoutError:
                raise IdleTimeout() from None
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            if not data:
                raise self._unreachable("connection closed by the daemon")
            self._buffer.feed(data)

    def call(self, op: str, **args: Any) -> Any:
        """Send a request and return its result.

        Raises:
            ApiError: the daemon answered with an error (``code`` says which).
            DaemonUnreachable: the connection failed.
        """
        rid = self.send(op, **args)
        while True:
            reply = self.receive()
            if reply.get("id") == rid or reply.get("id") is None:
                break
        if reply.get("ok"):
            return reply.get("result")
        raise api_error_from_wire(reply.get("error"))
