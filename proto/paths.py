"""Where a palace home lives and how its daemon is reached, shared by the daemon and its clients.

Pure: the environment and the platform are passed in, nothing is read from the OS here.

The local API is a Unix socket in the home (``palaced.sock``, mode 0600) wherever the platform
has them, or loopback TCP (``tcp://127.0.0.1:PORT``) where it does not (Windows) or when asked.
In TCP mode the daemon writes ``api.json`` in the home (readable by the user only): the address
and a random bearer token that the first request (``hello``) must carry. A port on loopback is
open to every local user; the token is what makes it the user's own, as the socket's file mode
does for the Unix socket.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Final, NamedTuple

__all__ = ["API_FILENAME", "CONFIG_FILENAME", "DATABASE_FILENAME", "LOCK_FILENAME", "SOCKET_FILENAME", "ApiEndpoint", "api_file",
           "api_file_text", "default_home", "host_port", "parse_api_file", "parse_api_listen", "socket_path"]

SOCKET_FILENAME: Final = "palaced.sock"
API_FILENAME: Final = "api.json"
#: the replica's database; palacectl restore works on it while the daemon is stopped
DATABASE_FILENAME: Final = "palace.sqlite3"
#: the optional settings file in the home (palaced reads it; palacectl reads its [runners])
CONFIG_FILENAME: Final = "config.toml"
#: held (flock) by the running daemon, and by palacectl restore while it replaces the database
LOCK_FILENAME: Final = "palaced.lock"


def default_home(environ: Mapping[str, str], user_home: Path, system: str = "posix") -> Path:
    """``$PALACE_HOME`` if set; else ``%LOCALAPPDATA%\\palace`` on Windows (``system == "win32"``:
    per-user, not roamed, the place for machine-local state) and ``~/.palace`` elsewhere (one
    dot-folder, the same on Linux and macOS, where agents and their docs expect it)."""
    env = environ.get("PALACE_HOME")
    if env:
        return Path(env).expanduser()
    if system == "win32":
        local = environ.get("LOCALAPPDATA")
        return Path(local) / "palace" if local else user_home / "AppData" / "Local" / "palace"
    return user_home / ".palace"


def socket_path(home: Path) -> Path:
    return home / SOCKET_FILENAME


def api_file(home: Path) -> Path:
    return home / API_FILENAME


class ApiEndpoint(NamedTuple):
    """How to reach a daemon: ``transport`` "unix" (``path``) or "tcp" (``host``, ``port``, ``token``)."""

    transport: str
    host: str | None = None
    port: int | None = None
    token: str | None = None
    path: Path | None = None

    def describe(self) -> str:
        return str(self.path) if self.transport == "unix" else f"tcp://{host_port(self.host or '', self.port or 0)}"


def host_port(host: str, port: int) -> str:
    """``HOST:PORT``, with an IPv6 host in brackets (the peer protocol's address form too)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_api_listen(text: str) -> ApiEndpoint:
    """``unix`` or ``tcp://HOST:PORT`` with HOST on loopback (``localhost``, 127.0.0.0/8, ``::1``)
    and PORT 0-65535 (0: any free port). Raises ValueError saying what is wrong."""
    if text == "unix":
        return ApiEndpoint("unix")
    if not text.startswith("tcp://"):
        raise ValueError(f"{text!r} is neither 'unix' nor 'tcp://127.0.0.1:PORT'")
    rest = text.removeprefix("tcp://")
    host, sep, port_text = rest.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r} needs a port: tcp://127.0.0.1:PORT (0 picks a free one)")
    host = host.removeprefix("[").removesuffix("]")
    if host == "localhost":
        host = "127.0.0.1"
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"{text!r}: the local API listens on loopback only (127.0.0.1 or ::1); "
                         "other machines reach palaced through its peer port")
    return ApiEndpoint("tcp", host, int(port_text))


def parse_api_file(text: str) -> ApiEndpoint:
    """The endpoint an ``api.json`` describes. Raises ValueError if it is not one palaced wrote."""
    try:
        data = json.loads(text)
    except ValueError:
        raise ValueError("is not JSON") from None
    if not isinstance(data, dict) or data.get("transport") != "tcp":
        raise ValueError("does not describe a TCP endpoint")
    host, port, token = data.get("host"), data.get("port"), data.get("token")
    if not isinstance(host, str) or type(port) is not int or not isinstance(token, str) or not token:
        raise ValueError("lacks host, port or token")
    return ApiEndpoint("tcp", host, port, token)


def api_file_text(host: str, port: int, token: str, pid: int) -> str:
    """What the daemon writes to ``api.json``."""
    return json.dumps({"transport": "tcp", "host": host, "port": port, "token": token, "pid": pid,
                       "address": f"tcp://{host_port(host, port)}"}) + "\n"
