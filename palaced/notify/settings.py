"""The ``[notify]`` section of ``config.toml``: limits, people, and the channels that reach them.

Owns: ``NotifySettings`` (and ``PersonSettings``, ``ChannelSettings``) and ``parse_notify``, which
refuses an unknown key, a wrong type or a value out of range with one line naming the key
(``notify.channels.mail.port must be an integer between 1 and 65535``), as config.py does for
every other section. A secret never sits in config text: an SMTP password or a webhook's bearer
token is read from a file named by ``password_file`` / ``token_file``, when it is used.

Shape (docs/notifications.md has the reference)::

    [notify]
    rate_per_minute = 4        # grouped messages per person per minute
    group_window = "10s"       # things within this window go out as one message
    max_pending = 500          # things waiting, all people together (the oldest is dropped)
    preview_chars = 200
    timeout = "10s"            # one delivery attempt
    attempts = 5               # tries per message and channel (back-off between them)

    [notify.people.ana]        # human:ana
    channels = ["laptop", "team"]
    on = ["question", "task_failed"]   # default: every kind
    scope = "palace"                   # or "addressed"

    [notify.channels.team]
    kind = "webhook"           # desktop | webhook | email
    format = "slack"           # generic | slack | discord | ntfy
    url = "https://hooks.slack.com/services/..."

Pure apart from checking that a named secret file exists; no trio.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from palace_proto.identity import HUMAN_PREFIX

from .triggers import DEFAULT_PREVIEW_CHARS

__all__ = ["ChannelSettings", "NotifyConfigError", "NotifySettings", "PersonSettings", "parse_notify"]

CHANNEL_KINDS: Final = ("desktop", "webhook", "email")
WEBHOOK_FORMATS: Final = ("generic", "slack", "discord", "ntfy")
SCOPES: Final = ("palace", "addressed")
_NAME_RE: Final = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_DURATION_RE: Final = re.compile(r"^\s*(\d+)\s*([smh]?)\s*$")
_UNIT_S: Final = {"": 1, "s": 1, "m": 60, "h": 3600}
# Why 64 each: a daemon is one machine; its people and their channels are a handful. The bound
# keeps a pasted config from spawning thousands of senders.
MAX_PEOPLE: Final = 64
MAX_CHANNELS: Final = 64
MAX_RECIPIENTS: Final = 32

_TOP_KEYS: Final = {"rate_per_minute", "group_window", "max_pending", "preview_chars", "timeout", "attempts",
                    "people", "channels"}
_PERSON_KEYS: Final = {"channels", "on", "scope"}
_CHANNEL_KEYS: Final = {
    "desktop": {"kind"},
    "webhook": {"kind", "url", "format", "token_file"},
    "email": {"kind", "host", "port", "starttls", "ssl", "username", "password_file", "from", "to"},
}


class NotifyConfigError(ValueError):
    """One line naming the key and the rule (config.py prefixes the file's path)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ChannelSettings:
    name: str
    kind: str
    #: webhook
    url: str | None = None
    format: str = "generic"
    token_file: Path | None = None
    #: email
    host: str | None = None
    port: int = 0
    starttls: bool = True
    ssl: bool = False
    username: str | None = None
    password_file: Path | None = None
    sender: str | None = None
    recipients: tuple[str, ...] = ()

    def describe(self) -> str:
        """Where it goes, without a secret (for ``notify test`` and status)."""
        if self.kind == "webhook":
            parts = urlsplit(self.url or "")
            return f"{self.format} webhook to {parts.scheme}://{parts.hostname}"
        if self.kind == "email":
            return f"mail via {self.host}:{self.port} to {', '.join(self.recipients)}"
        return "desktop notification"


@dataclasses.dataclass(frozen=True, slots=True)
class PersonSettings:
    person: str
    channels: tuple[str, ...]
    #: the kinds of thing they are told of (all there are, unless their ``on`` names some)
    on: frozenset[str] = frozenset()
    scope: str = "palace"


@dataclasses.dataclass(frozen=True, slots=True)
class NotifySettings:
    rate_per_minute: int = 4
    group_window_s: float = 10.0
    max_pending: int = 500
    preview_chars: int = DEFAULT_PREVIEW_CHARS
    timeout_s: float = 10.0
    attempts: int = 5
    people: Mapping[str, PersonSettings] = dataclasses.field(default_factory=dict)
    channels: Mapping[str, ChannelSettings] = dataclasses.field(default_factory=dict)

    @property
    def configured(self) -> bool:
        return bool(self.people)


def _unknown(where: str, table: Mapping[str, Any], known: set[str]) -> None:
    for key in table:
        if key not in known:
            if key == "password":
                raise NotifyConfigError(f"{where}.password: a password is never written in config text; put it in a "
                                        "file only you can read (chmod 600) and name it with password_file")
            raise NotifyConfigError(f"unknown key {where}.{key} (known: {', '.join(sorted(known))})")


def _int(where: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise NotifyConfigError(f"{where} must be an integer between {low} and {high}")
    return value


def _str(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise NotifyConfigError(f"{where} must be a non-empty string")
    return value.strip()


def _bool(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise NotifyConfigError(f"{where} must be true or false")
    return value


def _seconds(where: str, value: Any, low: int, high: int) -> int:
    """``"30s"``, ``"2m"``, ``"1h"`` or an integer of seconds, within ``low..high``."""
    if isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    else:
        match = _DURATION_RE.match(value) if isinstance(value, str) else None
        if match is None:
            raise NotifyConfigError(f"{where} must be a duration like \"30s\", \"2m\" or \"1h\" (or seconds)")
        seconds = int(match.group(1)) * _UNIT_S[match.group(2)]
    if not low <= seconds <= high:
        raise NotifyConfigError(f"{where} must be between {low} s and {high} s")
    return seconds


def _list(where: str, value: Any, *, allow_str: bool = False) -> list[str]:
    if allow_str and isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise NotifyConfigError(f"{where} must be a non-empty list of strings")
    return [v.strip() for v in value]


def _secret_file(where: str, value: Any, home: Path) -> Path:
    path = Path(_str(where, value)).expanduser()
    path = path if path.is_absolute() else home / path
    if not path.is_file():
        raise NotifyConfigError(f"{where}: {path} is not a file (it holds the secret, read when it is used)")
    return path


def _table(where: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise NotifyConfigError(f"{where} must be a table ([{where}])")
    return value


def _channel(name: str, table: Mapping[str, Any], home: Path) -> ChannelSettings:
    where = f"notify.channels.{name}"
    if not _NAME_RE.match(name):
        raise NotifyConfigError(f"{where}: a channel's name is letters, digits, '.', '_' or '-' (at most 64)")
    kind = table.get("kind")
    if kind not in CHANNEL_KINDS:
        raise NotifyConfigError(f"{where}.kind must be one of {', '.join(CHANNEL_KINDS)}")
    _unknown(where, table, _CHANNEL_KEYS[kind])
    if kind == "desktop":
        return ChannelSettings(name, kind)
    if kind == "webhook":
        url = _str(f"{where}.url", table.get("url"))
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise NotifyConfigError(f"{where}.url must be an http:// or https:// URL")
        fmt = table.get("format", "generic")
        if fmt not in WEBHOOK_FORMATS:
            raise NotifyConfigError(f"{where}.format must be one of {', '.join(WEBHOOK_FORMATS)}")
        if fmt == "ntfy" and not parts.path.strip("/"):
            raise NotifyConfigError(f"{where}.url of an ntfy channel names the topic: https://ntfy.sh/TOPIC")
        token = _secret_file(f"{where}.token_file", table["token_file"], home) if "token_file" in table else None
        return ChannelSettings(name, kind, url=url, format=fmt, token_file=token)
    host = _str(f"{where}.host", table.get("host"))
    starttls = _bool(f"{where}.starttls", table.get("starttls", True))
    ssl = _bool(f"{where}.ssl", table.get("ssl", False))
    if starttls and ssl:
        raise NotifyConfigError(f"{where}: ssl (TLS from the start, port 465) and starttls (port 587) exclude "
                                "each other; set one to false")
    port = _int(f"{where}.port", table.get("port", 465 if ssl else 587 if starttls else 25), 1, 65535)
    username = _str(f"{where}.username", table["username"]) if "username" in table else None
    password = _secret_file(f"{where}.password_file", table["password_file"], home) if "password_file" in table else None
    if password is not None and username is None:
        raise NotifyConfigError(f"{where}.password_file needs {where}.username")
    sender = _str(f"{where}.from", table.get("from"))
    recipients = _list(f"{where}.to", table.get("to"), allow_str=True)
    if len(recipients) > MAX_RECIPIENTS:
        raise NotifyConfigError(f"{where}.to lists more than {MAX_RECIPIENTS} addresses")
    for address in (sender, *recipients):
        if "@" not in address or any(c in address for c in "\r\n"):
            raise NotifyConfigError(f"{where}: {address!r} is not a mail address")
    return ChannelSettings(name, kind, host=host, port=port, starttls=starttls, ssl=ssl, username=username,
                           password_file=password, sender=sender, recipients=tuple(recipients))


def _person(key: str, table: Mapping[str, Any], channels: Mapping[str, ChannelSettings],
            kinds: tuple[str, ...]) -> PersonSettings:
    where = f"notify.people.{key}"
    name = key[len(HUMAN_PREFIX):] if key.startswith(HUMAN_PREFIX) else key
    if not _NAME_RE.match(name):
        raise NotifyConfigError(f"{where}: a person is named as in human:NAME, the name letters, digits, '.', '_' "
                                "or '-' (at most 64)")
    _unknown(where, table, _PERSON_KEYS)
    names = _list(f"{where}.channels", table.get("channels"))
    for channel in names:
        if channel not in channels:
            raise NotifyConfigError(f"{where}.channels names {channel!r}, which no [notify.channels.{channel}] "
                                    "defines")
    on = _list(f"{where}.on", table["on"]) if "on" in table else list(kinds)
    for kind in on:
        if kind not in kinds:
            raise NotifyConfigError(f"{where}.on: {kind!r} is not one of {', '.join(kinds)}")
    scope = table.get("scope", "palace")
    if scope not in SCOPES:
        raise NotifyConfigError(f"{where}.scope must be one of {', '.join(SCOPES)}")
    return PersonSettings(HUMAN_PREFIX + name, tuple(dict.fromkeys(names)), frozenset(on), scope)


def parse_notify(table: Any, home: Path, kinds: tuple[str, ...]) -> NotifySettings:
    """The ``[notify]`` table as settings (relative secret files are under ``home``; ``kinds``: the
    kinds of thing there are, ``palaced.feature.Features.notify_kinds``).

    Raises:
        NotifyConfigError: one line naming the key.
    """
    table = _table("notify", table)
    _unknown("notify", table, _TOP_KEYS)
    raw_channels = _table("notify.channels", table.get("channels", {}))
    raw_people = _table("notify.people", table.get("people", {}))
    if len(raw_channels) > MAX_CHANNELS or len(raw_people) > MAX_PEOPLE:
        raise NotifyConfigError(f"notify: at most {MAX_PEOPLE} people and {MAX_CHANNELS} channels")
    channels = {name: _channel(name, _table(f"notify.channels.{name}", value), home)
                for name, value in raw_channels.items()}
    people: dict[str, PersonSettings] = {}
    for key, value in raw_people.items():
        person = _person(key, _table(f"notify.people.{key}", value), channels, kinds)
        if person.person in people:
            raise NotifyConfigError(f"notify.people.{key}: {person.person} is configured twice")
        people[person.person] = person
    return NotifySettings(
        rate_per_minute=_int("notify.rate_per_minute", table.get("rate_per_minute", 4), 1, 60),
        group_window_s=_seconds("notify.group_window", table.get("group_window", 10), 0, 3600),
        max_pending=_int("notify.max_pending", table.get("max_pending", 500), 10, 10_000),
        preview_chars=_int("notify.preview_chars", table.get("preview_chars", DEFAULT_PREVIEW_CHARS), 40, 1000),
        timeout_s=_seconds("notify.timeout", table.get("timeout", 10), 1, 120),
        attempts=_int("notify.attempts", table.get("attempts", 5), 1, 10),
        people=people, channels=channels)
