"""Daemon configuration: the home directory, its files, and the optional ``config.toml``.

Owns: where everything lives (``$PALACE_HOME``, else ``~/.palace``) and which settings exist: the
core's, and the sections the features add (``Extensions``: a feature's ``Section`` — ``[tasks]``,
``[agents]`` — and the kinds of notification a person's ``on`` may name). No config file is needed;
a file with an unknown key or a wrong type is refused with a message naming the key, rather than
silently ignored. Pure apart from reading the file.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, TypeVar

from palace_proto import paths
from palace_proto.errors import ValidationError
from palace_proto.framing import DEFAULT_MAX_FRAME_BYTES
from palace_proto.peer import DEFAULT_PEER_PORT, parse_peer_address
from palace_proto.validation import Limits

from .notify.settings import NotifyConfigError, NotifySettings, parse_notify

__all__ = ["CONFIG_FILENAME", "Config", "ConfigError", "Extensions", "Section", "default_home", "load_config"]

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


S = TypeVar("S")


@dataclasses.dataclass(frozen=True, slots=True)
class Section:
    """A table of config.toml a feature reads (``[tasks]``): its keys with their types, and
    ``read(values) -> settings``, which gets the table's values (checked for type; empty when the
    table is absent) and raises ``ValidationError`` (its message names the key) on a bad one."""

    name: str
    keys: Mapping[str, type]
    read: Callable[[Mapping[str, Any]], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Extensions:
    """What the daemon's features add to config.toml (``palaced.feature.Features.config_extensions``)."""

    sections: tuple[Section, ...] = ()
    #: the kinds of notification a person's ``[notify.people.X] on`` may name
    notify_kinds: tuple[str, ...] = ()


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
    #: dial the addresses other daemons gossip about themselves (off: only static, remembered, mDNS
    #: and invite peers; this daemon still announces and relays addresses)
    gossip_dial: bool = True
    #: embedding model for memory search: the built-in offline model, a fastembed name or a local directory
    memory_model: str = DEFAULT_MEMORY_MODEL
    #: embed drawers for meaning-based search (off: keyword search only, no model loaded)
    memory_embed: bool = True
    #: drawers up to which vector search is exact; above, an IVF index (~1-2 ms instead of ~17 ms at 100k)
    memory_exact_index_max: int = 50_000
    #: who is told of what, through which channels ([notify]; docs/notifications.md); None: nobody
    notify: NotifySettings | None = None
    #: the features' sections as their ``Section.read`` made them, by section name
    sections: Mapping[str, Any] = dataclasses.field(default_factory=lambda: MappingProxyType({}))

    def section(self, name: str, default: S) -> S:
        """A feature's settings from its section (``default`` for a config made without it)."""
        found: S = self.sections.get(name, default)
        return found

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


#: sections of config.toml that palacectl reads (`task launch` runners, `worker`'s accept_from, `integrate`, what
#: launched runs may do without asking: palacectl/permission_policy.py; budgets: palace_proto.usage)
PALACECTL_SECTIONS: Final = frozenset({"runners", "worker", "permissions", "budgets", "integrate"})

_SCHEMA: Final[dict[str, dict[str, type]]] = {
    "limits": {"max_body_bytes": int, "max_metadata_bytes": int, "max_artifact_bytes": int},
    "log": {"level": str},
    "api": {"listen": str},
    "network": {"listen": str, "mdns": bool, "gossip_dial": bool},
    "memory": {"model": str, "embed": bool, "exact_index_max": int},
}


def load_config(home: Path, extensions: Extensions) -> Config:
    """Read ``home/config.toml`` if present: the core's sections, and those ``extensions`` add.

    Raises:
        ConfigError: unreadable or invalid TOML, unknown section or key, wrong type or range.
    """
    path = home / CONFIG_FILENAME
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raw = {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    schema = {**_SCHEMA, **{s.name: dict(s.keys) for s in extensions.sections}}
    values: dict[str, dict[str, Any]] = {}
    notify = None
    for section, table in raw.items():
        if section in PALACECTL_SECTIONS:
            continue  # palacectl's (runners, the worker's policy): it checks them when it uses them
        if section == "notify":  # nested tables (people, channels): checked by palaced/notify/settings.py
            try:
                notify = parse_notify(table, home, extensions.notify_kinds)
            except NotifyConfigError as exc:
                raise ConfigError(f"{path}: {exc}") from None
            continue
        if section not in schema or not isinstance(table, dict):
            raise ConfigError(f"{path}: unknown section [{section}] (known: {', '.join(sorted({*schema, 'notify'}))})")
        for key, value in table.items():
            expected = schema[section].get(key)
            if expected is None:
                raise ConfigError(
                    f"{path}: unknown key {section}.{key} (known: {', '.join(sorted(schema[section]))})"
                )
            if expected is bool:
                if not isinstance(value, bool):
                    raise ConfigError(f"{path}: {section}.{key} must be true or false")
                continue
            if not isinstance(value, expected) or isinstance(value, bool):
                raise ConfigError(f"{path}: {section}.{key} must be {'an integer' if expected is int else 'a string'}")
            if isinstance(value, int) and value < 1:  # (an int where one is expected: bools are refused above)
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
    sections: dict[str, Any] = {}
    for extension in extensions.sections:
        try:
            sections[extension.name] = extension.read(values.get(extension.name, {}))
        except ValidationError as exc:
            raise ConfigError(f"{path}: {exc.message}") from None
    return Config(home=home, limits=Limits(**values.get("limits", {})), log_level=level, listen=listen, api=api,
                  sections=MappingProxyType(sections), mdns=network.get("mdns", True),
                  gossip_dial=network.get("gossip_dial", True),
                  memory_model=memory.get("model", DEFAULT_MEMORY_MODEL),
                  memory_embed=memory.get("embed", True),
                  memory_exact_index_max=memory.get("exact_index_max", 50_000), notify=notify)
