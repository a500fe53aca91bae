"""Where a palace home lives, shared by the daemon and its clients.

Pure: the environment is passed in, nothing is read from the OS here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

__all__ = ["SOCKET_FILENAME", "default_home", "socket_path"]

SOCKET_FILENAME: Final = "palaced.sock"


def default_home(environ: Mapping[str, str], user_home: Path) -> Path:
    """``$PALACE_HOME`` if set, else ``~/.palace``."""
    env = environ.get("PALACE_HOME")
    return Path(env).expanduser() if env else user_home / ".palace"


def socket_path(home: Path) -> Path:
    return home / SOCKET_FILENAME
