"""This host, as ``palacectl service`` sees it: its service manager, where that manager looks for
palaced's file, and which ``palaced`` to run.

Owns: platform detection (systemd on Linux, launchd on macOS), whether systemd is the init
system, the per-user install paths, and finding the installed ``palaced``. Reads the file system
and the environment only; runs no command (that is ``runner``).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Final, Literal

__all__ = [
    "LAUNCHD_LABEL", "PLATFORMS", "SYSTEMD_UNIT", "Platform", "detect_platform", "launchd_log_dir",
    "palaced_command", "pid1_name", "service_file", "systemd_booted",
]

Platform = Literal["systemd", "launchd"]
PLATFORMS: Final[tuple[Platform, ...]] = ("systemd", "launchd")

SYSTEMD_UNIT: Final = "palaced.service"
LAUNCHD_LABEL: Final = "dev.palace.palaced"


def detect_platform() -> Platform | None:
    """The service manager palace supports on this operating system, if any."""
    if sys.platform == "darwin":
        return "launchd"
    if sys.platform.startswith("linux"):
        return "systemd"
    return None


def systemd_booted() -> bool:
    """systemd is the init system (sd_booted(): the test systemd itself uses)."""
    return Path("/run/systemd/system").is_dir()


def pid1_name() -> str:
    """The init system's process name, for messages."""
    try:
        return Path("/proc/1/comm").read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def service_file(platform: Platform) -> Path:
    """Where the unit (systemd) or LaunchAgent plist (launchd) is installed for this user."""
    if platform == "systemd":
        # systemd --user reads $XDG_CONFIG_HOME/systemd/user; like the XDG spec, it ignores a
        # relative value. (The manager uses its own environment: we assume it matches ours.)
        config = os.environ.get("XDG_CONFIG_HOME", "")
        base = Path(config) if os.path.isabs(config) else Path.home() / ".config"
        return base / "systemd" / "user" / SYSTEMD_UNIT
    return Path.home() / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"


def launchd_log_dir() -> Path:
    return Path.home() / "Library" / "Logs" / "palace"


def palaced_command() -> list[str]:
    """The installed palaced as an absolute command: the console script beside this Python (the
    installation this palacectl belongs to), else the one on PATH, else ``python -m palaced``."""
    beside = Path(sys.executable).parent / "palaced"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside.absolute())]
    found = shutil.which("palaced")
    if found:
        return [str(Path(found).absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "palaced"]
