"""Daemon configuration: the home directory, its files, and the optional ``config.toml``.

Owns: where everything lives (``$PALACE_HOME``, else ``~/.palace``) and which settings exist. No
config file is needed; a file with an unknown key or a wrong type is refused with a message naming
the key, rather than silently ignored. Pure apart from reading the file.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tomllib
from pathlib import Path
from typing import Any, Final

from palace_proto import paths
from palace_proto.framing import DEFAULT_MAX_FRAME_BYTES
from palace_proto.peer import DEFAULT_PEER_PORT, parse_peer_address
from palace_proto.errors import ValidationError
from palace_proto.agents import DEFAULT_STALE_AFTER_S, check_stale_after
from palace_proto.tasks import DEFAULT_STALL_AFTER_S, check_stall_after
from palace_proto.validation import Limits

from .notify.settings import NotifyConfigError, NotifySettings, parse_notify

__all__ = ["CONFIG_FILENAME", "Config", "ConfigError", "default_home", "load_config"]

CONFIG_FILENAME: Final = paths.CONFIG_FILENAME
LOCK_FILENAME: Final = paths.LOCK_FILENAME
KEY_FILENAME: Final = "identity.key"
_LOG_LEVELS: Final = ("debug", "info", "warning", "error")
DEFAULT_LISTEN: Final = f"0.0.0.0:{DEFAULT_PEER_PORT}"
DEFAULT_MEMORY_MODEL: Final = "builtin:all-MiniLM-L6-v2-int8"
# Windows has no AF_UNIX in Python: the local API is loopback TCP there (any free port; clients
# find it, with its token, in the home's api.json).
DEFAULT_API: Final = "tcp://127.0.0.1:0" if sys.platform == "win32" else "unix"


class ConfigError(Exception):
    """The configuration cannot be used; the message says which key and how to fix it."""


def default_home() -> Path:
    return paths.default_home(os.environ, Path.home(), sys.platform)


@dataclasses.dataclass(frozen=True, slots=True)
class Config:
    home: Path
    limits: Limits = Limits()
    #: the local API: "unix" (a socket in the home) or "tcp://127.0.0.1:PORT" (token in api.json)
    api: str = DEFAULT_API
    log_level: str = "info"
    #: where peers connect (HOST:PORT); used once this daemon belongs to a palace
    listen: str = DEFAULT_LISTEN
    #: advertise and browse with mDNS (turn off where multicast must not leave the machine)
    mdns: bool = True
    #: embedding model for memory search: the built-in offline model, a fastembed name or a local directory
    memory_model: str = DEFAULT_MEMORY_MODEL
    #: embed drawers for meaning-based search (off: keyword search only, no model loaded)
    memory_embed: bool = True
    #: drawers up to which vector search is exact; above, an IVF index (~1-2 ms instead of ~17 ms at 100k)
    memory_exact_index_max: int = 50_000
    #: a claimed task with no word from its claimant for this long is stalled ([tasks] stall_after)
    tasks_stall_after_s: int = DEFAULT_STALL_AFTER_S
    #: an agent silent for this long is marked stale in `agents` ([agents] stale_after)
    agents_stale_after_s: int = DEFAULT_STALE_AFTER_S
    #: who is told of what, through which channels ([notify]; docs/notifications.md); None: nobody
    notify: NotifySettings | None = None

    @property
    def socket_path(self) -> Path:
        return paths.socket_path(self.home)

    @property
    def api_endpoint(self) -> paths.ApiEndpoint:
        return paths.parse_api_listen(self.api)

    @property
    def api_file(self) -> Path:
        return paths.api_file(self.home)

    @property
    def lock_path(self) -> Path:
        return self.home / LOCK_FILENAME

    @property
    def key_path(self) -> Path:
        return self.home / KEY_FILENAME

    @property
    def max_frame_bytes(self) -> int:
        # The largest request is an artifact put: content plus metadata plus a small envelope.
        return max(DEFAULT_MAX_FRAME_BYTES, self.limits.max_artifact_bytes + self.limits.max_metadata_bytes + (1 << 20))


#: sections of config.toml that palacectl reads (`task launch` runners, `worker`'s accept_from, what
#: launched runs may do without asking: palacectl/permission_policy.py; budgets: palace_proto.usage)
PALACECTL_SECTIONS: Final = frozenset({"runners", "worker", "permissions", "budgets"})

_SCHEMA: Final[dict[str, dict[str, type]]] = {
    "limits": {"max_body_bytes": int, "max_metadata_bytes": int, "max_artifact_bytes": int},
    "log": {"level": str},
    "api": {"listen": str},
    "network": {"listen": str, "mdns": bool},
    "memory": {"model": str, "embed": bool, "exact_index_max": int},
    "tasks": {"stall_after": str},
    "agents": {"stale_after": str},
}


def load_config(home: Path) -> Config:
    """Read ``home/config.toml`` if present.

    Raises:
        ConfigError: unreadable or invalid TOML, unknown section or key, wrong type or range.
    """
    path = home / CONFIG_FILENAME
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Config(home=home)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    values: dict[str, dict[str, Any]] = {}
    notify = None
    for section, table in raw.items():
        if section in PALACECTL_SECTIONS:
            continue  # palacectl's (runners, the worker's policy): it checks them when it uses them
        if section == "notify":  # nested tables (people, channels): checked by palaced/notify/settings.py
            try:
                notify = parse_notify(table, home)
            except NotifyConfigError as exc:
                raise ConfigError(f"{path}: {exc}") from None
            continue
        if section not in _SCHEMA or not isinstance(table, dict):
            raise ConfigError(f"{path}: unknown section [{section}] (known: {', '.join(sorted({*_SCHEMA, 'notify'}))})")
        for key, value in table.items():
            expected = _SCHEMA[section].get(key)
            if expected is None:
                raise ConfigError(
                    f"{path}: unknown key {section}.{key} (known: {', '.join(sorted(_SCHEMA[section]))})"
                )
            if expected is bool:
                if not isinstance(value, bool):
                    raise ConfigError(f"{path}: {section}.{key} must be true or false")
                continue
            if not isinstance(value, expected) or isinstance(value, bool):
                raise ConfigError(f"{path}: {section}.{key} must be {'an integer' if expected is int else 'a string'}")
            if expected is int and value < 1:
                raise ConfigError(f"{path}: {section}.{key} must be a positive integer")
        values[section] = table
    level = values.get("log", {}).get("level", "info").lower()
    if level not in _LOG_LEVELS:
        raise ConfigError(f"{path}: log.level must be one of {', '.join(_LOG_LEVELS)}")
    network = values.get("network", {})
    listen = network.get("listen", DEFAULT_LISTEN)
    try:
        parse_peer_address(listen)
    except ValueError as exc:
        raise ConfigError(f"{path}: network.listen: {exc}") from None
    api = values.get("api", {}).get("listen", DEFAULT_API)
    try:
        paths.parse_api_listen(api)
    except ValueError as exc:
        raise ConfigError(f"{path}: api.listen: {exc}") from None
    memory = values.get("memory", {})
    if memory.get("exact_index_max", 50_000) < 1_000:
        raise ConfigError(f"{path}: memory.exact_index_max must be at least 1000 (an approximate index only pays "
                          "off for large palaces)")
    stall_after = values.get("tasks", {}).get("stall_after")
    try:
        stall_after_s = (check_stall_after(stall_after, field="tasks.stall_after")
                         if stall_after is not None else DEFAULT_STALL_AFTER_S)
    except ValidationError as exc:
        raise ConfigError(f"{path}: tasks.stall_after: {exc.message}") from None
    stale_after = values.get("agents", {}).get("stale_after")
    try:
        stale_after_s = check_stale_after(stale_after) if stale_after is not None else DEFAULT_STALE_AFTER_S
    except ValidationError as exc:
        raise ConfigError(f"{path}: {exc.message}") from None
    return Config(home=home, limits=Limits(**values.get("limits", {})), log_level=level, listen=listen, api=api,
                  tasks_stall_after_s=stall_after_s, agents_stale_after_s=stale_after_s,
                  mdns=network.get("mdns", True), memory_model=memory.get("model", DEFAULT_MEMORY_MODEL),
                  memory_embed=memory.get("embed", True),
                  memory_exact_index_max=memory.get("exact_index_max", 50_000), notify=notify)
