"""This host, as ``palacectl service`` sees it: its service manager, where that manager looks for
a service's file, and which ``palaced`` or ``palacectl`` to run.

Owns: platform detection (systemd on Linux, launchd on macOS), whether systemd is the init
system, the names of the services (``ServiceName``: palaced's, and one per agent for workers), the
per-user install paths, and which ``palaced`` and ``palacectl`` a service runs (``palacectl.installed``'s). Reads
the file system and the environment only; runs no command (that is ``runner``).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path

# NamedTuple rather than dataclasses: a dataclass costs ~0.5 ms to create, and this is a plain value.
from typing import Final, Literal, NamedTuple

from ..installed import palacectl_command, palaced_command

__all__ = [
    "LAUNCHD_LABEL", "PALACED", "PLATFORMS", "SYSTEMD_UNIT", "Platform", "ServiceName", "detect_platform",
    "launchd_log_dir", "palacectl_command", "palaced_command", "pid1_name", "service_file", "systemd_booted",
    "worker_service", "worker_slug",
]

Platform = Literal["systemd", "launchd"]
PLATFORMS: Final[tuple[Platform, ...]] = ("systemd", "launchd")

SYSTEMD_UNIT: Final = "palaced.service"
LAUNCHD_LABEL: Final = "dev.palace.palaced"
# What a worker's slug keeps of its agent id: characters safe in a unit name, a launchd label and
# a file name; any other becomes '-'.
_SLUG_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_.-]")


class ServiceName(NamedTuple):
    """Which service: its systemd unit (file name) and its launchd label (the plist is ``<label>.plist``)."""

    unit: str
    label: str

    @property
    def unit_stem(self) -> str:
        """The unit without ``.service``, as ``journalctl -u`` and ``systemctl`` accept it."""
        return self.unit.removesuffix(".service")


PALACED: Final = ServiceName(SYSTEMD_UNIT, LAUNCHD_LABEL)


def worker_slug(agent: str) -> str:
    """The agent id as it appears in its worker's unit name, label and log file: every character
    outside [A-Za-z0-9_.-] replaced by '-', and then, only if one was, '-' and the first 8 hex
    digits of the id's sha256, so ids that differ only there (``ops:bot``, ``ops/bot``) never
    share a service."""
    slug = _SLUG_UNSAFE.sub("-", agent)
    if slug == agent:
        return slug
    return f"{slug}-{hashlib.sha256(agent.encode('utf-8')).hexdigest()[:8]}"


def worker_service(agent: str, command: str = "worker") -> ServiceName:
    """The service of one agent's ``palacectl`` process: its worker (``palace-worker-<slug>.service``,
    ``dev.palace.worker.<slug>``), or with ``command="integrate"`` its integrator
    (``palace-integrate-<slug>.service``, ``dev.palace.integrate.<slug>``)."""
    slug = worker_slug(agent)
    return ServiceName(f"palace-{command}-{slug}.service", f"dev.palace.{command}.{slug}")


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


def service_file(platform: Platform, service: ServiceName = PALACED) -> Path:
    """Where the unit (systemd) or LaunchAgent plist (launchd) of ``service`` (palaced's unless
    told) is installed for this user."""
    if platform == "systemd":
        # systemd --user reads $XDG_CONFIG_HOME/systemd/user; like the XDG spec, it ignores a
        # relative value. (The manager uses its own environment: we assume it matches ours.)
        config = os.environ.get("XDG_CONFIG_HOME", "")
        base = Path(config) if os.path.isabs(config) else Path.home() / ".config"
        return base / "systemd" / "user" / service.unit
    return Path.home() / "Library" / "LaunchAgents" / f"{service.label}.plist"


def launchd_log_dir() -> Path:
    return Path.home() / "Library" / "Logs" / "palace"

