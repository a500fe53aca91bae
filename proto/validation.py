"""Validation of everything a client may send: events, list/wait/watch queries, artifacts.

Owns: the data-model rules and their exact error messages (MemPalace-compatible wording, reference
§1.4–1.6 and §3.1), shared by the daemon (which enforces them) and clients (which may pre-check).
Every failure raises ``ValidationError`` whose message names the field and the rule.
Pure: stdlib only, no clock, no IO.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, final

from .bounds import DEFAULT_LIST_LIMIT, DEFAULT_WAIT_TIMEOUT_MS, MAX_LIST_LIMIT, MAX_WAIT_TIMEOUT_MS
from .canonical import canonical_json
from .errors import ValidationError
from .event_content import EventContent
from .event_fields import AUTHOR_FIELDS, EventField
from .filters import FILTER_FIELDS

__all__ = [
    "ARTIFACT_KINDS",
    "EVENT_STATUSES",
    "FILTER_FIELDS",
    "MAX_WAIT_TIMEOUT_MS",
    "AppendRequest",
    "Limits",
    "ListQuery",
    "MAX_TEXT_QUERY_CHARS",
    "clean_optional",
    "clean_required",
    "check_replicated_artifact",
    "check_replicated_event",
    "validate_agent_token",
    "agent_id_from_parts",
    "validate_artifact_ids",
    "validate_artifact_kind",
    "validate_body",
    "validate_metadata",
    "validate_status",
    "validate_page_limit",
    "validate_timeout_ms",
    "validate_type",
    "text_match_expression",
]

EVENT_STATUSES: Final = frozenset({"open", "claimed", "ready", "applied", "blocked", "failed", "superseded"})
TERMINAL_STATUSES: Final = frozenset({"applied", "failed", "blocked", "superseded"})
ARTIFACT_KINDS: Final = frozenset({"patch", "file", "log", "json", "note"})
_TYPE_RE: Final = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_AGENT_TOKEN_RE: Final = re.compile(r"^[A-Za-z0-9._-]+$")
#: MemPalace RFC 005's identity tuple: ``host:harness:project``, each part a stable lowercase token
AGENT_TUPLE_PARTS: Final = ("host", "harness", "project")
_AGENT_TUPLE_PART_RE: Final = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
#: the host no agent may name: ``human:`` is the prefix of people's ids (``agents.HUMAN_PREFIX``)
HUMAN_HOST: Final = "human"
_CONTROL_RE: Final = re.compile(r"[\x00-\x1f\x7f]")
_SURROGATE_RE: Final = re.compile(r"[\ud800-\udfff]")
# Why these: MemPalace's defaults (reference §1.4-1.6, §3.1-3.2); agents already tuned to them.
MAX_ROUTING_CHARS: Final = 256
# Why 250 characters and 16 words: a search box's worth (the memory search's own cap); every word
# is one more term the full-text index intersects.
MAX_TEXT_QUERY_CHARS: Final = 250
MAX_TEXT_QUERY_WORDS: Final = 16


def _clean_text_query(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("text must be the words to search for", field="text")
    text = " ".join(value.split())
    if len(text) > MAX_TEXT_QUERY_CHARS:
        raise ValidationError(f"text is {len(text)} characters long; at most {MAX_TEXT_QUERY_CHARS}", field="text")
    if len(text.split()) > MAX_TEXT_QUERY_WORDS:
        raise ValidationError(f"text has more than {MAX_TEXT_QUERY_WORDS} words", field="text")
    if not text.isprintable():
        raise ValidationError("text must be visible characters", field="text")
    return text


def text_match_expression(text: str) -> str:
    """The full-text (FTS5) expression for a search text: every word must occur (each word quoted,
    so no character of it is query syntax; punctuation inside a word makes it a phrase)."""
    return " ".join('"' + word.replace('"', '""') + '"' for word in text.split())


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """Size limits, configurable per daemon (config.toml ``[limits]``)."""

    max_body_bytes: int = 262_144
    max_metadata_bytes: int = 65_536
    max_artifact_bytes: int = 64 * 1024 * 1024


def _strip(value: str) -> str:
    return _SURROGATE_RE.sub("", value).strip()


def clean_required(field: str, value: Any) -> str:
    """A required routing field: non-empty string, ≤256 characters, no control characters."""
    cleaned = _strip(value) if isinstance(value, str) else ""
    if not cleaned:
        raise ValidationError(f"{field} must be a non-empty string", field=field)
    return _check_routing(field, cleaned)


def clean_optional(field: str, value: Any) -> str | None:
    """An optional routing field: None or blank means absent."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string", field=field)
    cleaned = _strip(value)
    return _check_routing(field, cleaned) if cleaned else None


def _check_routing(field: str, value: str) -> str:
    if len(value) > MAX_ROUTING_CHARS:
        raise ValidationError(f"{field} exceeds maximum length of {MAX_ROUTING_CHARS} characters", field=field)
    if _CONTROL_RE.search(value):
        raise ValidationError(f"{field} contains control characters", field=field)
    return value


def validate_type(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("type must be a non-empty string", field="type")
    cleaned = _strip(value)
    if not _TYPE_RE.match(cleaned):
        raise ValidationError(
            f"type={cleaned!r} is not a valid event type (lowercase letters, digits, '.', '_', '-'; max 64 chars)",
            field="type",
        )
    return cleaned


def validate_status(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str) or value.strip() not in EVENT_STATUSES:
        raise ValidationError(
            f"status={value!r} is not one of: {', '.join(sorted(EVENT_STATUSES))}", field="status"
        )
    return value.strip()


def validate_body(value: Any, limits: Limits) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationError("body must be a string", field="body")
    if "\x00" in value:
        raise ValidationError("body contains null bytes", field="body")
    value = _SURROGATE_RE.sub("", value)
    size = len(value.encode("utf-8"))
    if size > limits.max_body_bytes:
        raise ValidationError(f"body is {size} bytes; maximum is {limits.max_body_bytes} bytes", field="body")
    return value


def validate_metadata(value: Any, limits: Limits) -> str:
    """Return the canonical JSON text of a metadata object."""
    if value is None:
        return "{}"
    if not isinstance(value, Mapping):
        raise ValidationError("metadata must be an object", field="metadata")
    try:
        text = canonical_json(dict(value))
    except (TypeError, ValueError, RecursionError) as exc:  # RecursionError: ~1000-deep nesting fits a frame
        raise ValidationError(f"metadata is not JSON-serializable: {exc}", field="metadata") from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError("metadata contains invalid Unicode (a lone surrogate)", field="metadata") from None
    if size > limits.max_metadata_bytes:
        raise ValidationError(
            f"metadata exceeds maximum size of {limits.max_metadata_bytes} bytes", field="metadata"
        )
    return text


def validate_artifact_ids(value: Any) -> tuple[str, ...]:
    """Shape check and order-keeping dedup; existence is the store's check (same transaction)."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValidationError("artifact_ids must be a list of artifact id strings", field="artifact_ids")
    if len(value) > MAX_ARTIFACT_IDS:
        raise ValidationError(f"artifact_ids names more than {MAX_ARTIFACT_IDS} artifacts", field="artifact_ids")
    return tuple(dict.fromkeys(_check_routing("artifact_ids", _strip(v)) for v in value))


def validate_artifact_kind(value: Any) -> str:
    if not isinstance(value, str) or value.strip() not in ARTIFACT_KINDS:
        raise ValidationError(f"kind={value!r} is not one of: {', '.join(sorted(ARTIFACT_KINDS))}", field="kind")
    return value.strip()


def validate_agent_token(value: Any, flag: str = "--agent") -> str:
    """An agent id an agent may take: a single token like ``mac-claude``, or MemPalace's
    ``host:harness:project`` (RFC 005), three stable lowercase tokens like ``mac:claude:shop``.
    ``human:`` stays a person's prefix only: no agent's host is ``human``. (Where an id names a
    file, palacectl escapes its colons: ``watch.sanitise_agent``, ``service.host.worker_slug``.)"""
    cleaned = value.strip() if isinstance(value, str) else ""
    if ":" in cleaned:
        parts = cleaned.split(":")
        if len(parts) != len(AGENT_TUPLE_PARTS) or not all(_AGENT_TUPLE_PART_RE.fullmatch(p) for p in parts):
            raise ValidationError(
                f"{flag} {cleaned[:80]!r}: an id with colons is host:harness:project (MemPalace RFC 005), three "
                "lowercase tokens of letters, digits, '.', '_', '-' like mac:claude:shop", field="agent")
        if parts[0] == HUMAN_HOST:
            raise ValidationError(f"{flag} {cleaned!r}: human: starts a person's id (human:NAME), never an agent's; "
                                  "name the agent's machine instead", field="agent")
        return cleaned
    if not _AGENT_TOKEN_RE.fullmatch(cleaned):
        raise ValidationError(
            f"{flag} must be a single token like mac-claude (machine-harness): letters, digits, '.', '_', '-', "
            "or host:harness:project like mac:claude:shop",
            field="agent",
        )
    return cleaned


def agent_id_from_parts(host: Any, harness: Any, project: Any) -> str:
    """``host:harness:project`` from MemPalace 3.10's ``rules --host --harness --project``, each
    part checked (stripped) as MemPalace checks it.

    Raises:
        ValidationError: naming the part (``--host``...) and what a part must be.
    """
    cleaned = []
    for part, value in zip(AGENT_TUPLE_PARTS, (host, harness, project), strict=True):
        text = value.strip() if isinstance(value, str) else ""
        if not _AGENT_TUPLE_PART_RE.fullmatch(text):
            raise ValidationError(f"--{part} must be a stable lowercase token like windows, grok, or mempalace "
                                  f"(letters, digits, '.', '_', '-'; got {text[:40]!r})", field=part)
        cleaned.append(text)
    return validate_agent_token(":".join(cleaned), "--host/--harness/--project")


def validate_page_limit(value: Any, default: int, maximum: int, field: str = "limit") -> int:
    """A page size an operation takes: ``default`` when absent (None), else an integer from 1 to
    ``maximum`` (refused beyond, never silently capped: that is ``ListQuery``'s MemPalace rule)."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise ValidationError(f"{field} must be an integer from 1 to {maximum}", field=field)
    return value


def validate_timeout_ms(value: Any, field: str = "timeout_ms") -> int:
    """A non-negative number of milliseconds, clamped to ``MAX_WAIT_TIMEOUT_MS``."""
    if value is None:
        return DEFAULT_WAIT_TIMEOUT_MS
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
        raise ValidationError(f"{field} must be a non-negative number", field=field)
    return int(min(value, MAX_WAIT_TIMEOUT_MS))


# re.ASCII: a bare \d also matches other scripts' digits, which never compare right against created_at.
_DATE_RE: Final = re.compile(r"^\d{4}-\d{2}-\d{2}$", re.ASCII)
_DATETIME_RE: Final = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d{1,6})?(Z|\+00:00)$", re.ASCII)


def validate_created_at_bound(field: str, value: Any) -> str | None:
    """``YYYY-MM-DD`` or a UTC datetime (``Z`` or ``+00:00``); returned comparable to created_at."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    text = value.strip() if isinstance(value, str) else ""
    if _DATE_RE.match(text):
        return text
    m = _DATETIME_RE.match(text)
    if not m:
        raise ValidationError(
            f"{field}={value!r} is not a valid ISO-8601 date or UTC datetime "
            "(expected YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ)",
            field=field,
        )
    # created_at always carries six fraction digits; pad the bound so text comparison is exact.
    return m.group(1) + (m.group(2) or ".").ljust(7, "0") + "Z"


def _author_check(field: EventField) -> Callable[[Any, Limits], Any]:
    """The rule an author's field is checked by in an append (MemPalace's wording)."""
    if field.name == "type":
        return lambda value, _limits: validate_type(value)
    if field.name == "status":
        return lambda value, _limits: validate_status(value)
    if field.wire == "text":
        clean = clean_optional if field.optional else clean_required
        return lambda value, _limits: clean(field.name, value)
    if field.wire == "ids":
        return lambda value, _limits: validate_artifact_ids(value)
    if field.wire == "body":
        return validate_body
    if field.wire == "json":
        return validate_metadata
    raise AssertionError(f"no append rule for {field.name}'s wire type {field.wire}")


#: (attribute, append argument, rule) of every field an author writes, in the order they are checked.
_AUTHOR_CHECKS: Final = tuple((f.name, f.option, _author_check(f)) for f in AUTHOR_FIELDS)


@final
@dataclasses.dataclass(frozen=True, slots=True)
class AppendRequest(EventContent):
    """A validated append, before the store assigns origin_seq, created_at and the signature."""

    body: str = ""

    @classmethod
    def from_wire(cls, args: Mapping[str, Any], limits: Limits) -> AppendRequest:
        """Validate append arguments in MemPalace's order; the first broken rule is reported."""
        return cls(**{name: check(args.get(option), limits) for name, option, check in _AUTHOR_CHECKS})


# created_at exactly as a daemon writes it (store.utc_now): microseconds, UTC.
_CREATED_AT_RE: Final = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$", re.ASCII)
_ARTIFACT_ID_RE: Final = re.compile(r"^art_[0-9a-f]{32}$")
_ORIGIN_RE: Final = re.compile(r"^ori2?_[a-z2-7]{26}$")
# Why 256: far more artifacts than one event ever names (a patch names one); a cap keeps an event's
# artifact fetches bounded on every receiver.
MAX_ARTIFACT_IDS: Final = 256
# The routing an event carries (its text fields but the type and the status, which have rules of their own).
_REQUIRED_ROUTING: Final = tuple(f.name for f in AUTHOR_FIELDS if f.wire == "text" and not f.optional and f.name != "type")
_OPTIONAL_ROUTING: Final = tuple(f.name for f in AUTHOR_FIELDS if f.wire == "text" and f.optional and f.name != "status")


def _stored_routing(field: str, value: Any, *, required: bool) -> None:
    """A routing field as an honest daemon stores it: what clean_required/clean_optional return."""
    if value is None and not required:
        return
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{field} must be a non-empty string", field=field)
    if _SURROGATE_RE.search(value) or value != value.strip():
        raise ValidationError(f"{field} is not in the form a daemon stores (surrounding blanks or a lone "
                              "surrogate)", field=field)
    _check_routing(field, value)


def check_replicated_event(event: Any, limits: Limits) -> None:
    """The data-model rules for an event that arrives already signed (from a peer or a file).

    A local append is validated by ``AppendRequest.from_wire`` before it is signed; an event that
    arrives signed must obey the same rules — the receiver's configured size limits included —
    or it is refused on its own (its signature proves only who wrote it, not that it is sound).
    ``event`` is a ``palace_proto.envelope.SignedEvent`` (duck-typed here: validation must not
    import the signature library).

    Raises:
        ValidationError: naming the first broken rule.
    """
    if not isinstance(event.origin, str) or not _ORIGIN_RE.match(event.origin):
        raise ValidationError("origin is not an origin id", field="origin")
    if not isinstance(event.type, str) or not _TYPE_RE.match(event.type):
        raise ValidationError(f"type={str(event.type)[:80]!r} is not a valid event type", field="type")
    for name in _REQUIRED_ROUTING:
        _stored_routing(name, getattr(event, name), required=True)
    for name in _OPTIONAL_ROUTING:
        _stored_routing(name, getattr(event, name), required=False)
    if event.status is not None and event.status not in EVENT_STATUSES:
        raise ValidationError(f"status={str(event.status)[:80]!r} is not one of: {', '.join(sorted(EVENT_STATUSES))}",
                              field="status")
    if not isinstance(event.created_at, str) or not _CREATED_AT_RE.match(event.created_at):
        raise ValidationError("created_at is not a UTC timestamp with microseconds (YYYY-MM-DDTHH:MM:SS.ffffffZ)",
                              field="created_at")
    ids = event.artifact_ids
    if len(ids) > MAX_ARTIFACT_IDS or len(set(ids)) != len(ids) or not all(
            isinstance(a, str) and _ARTIFACT_ID_RE.match(a) for a in ids):
        raise ValidationError(f"artifact_ids must be at most {MAX_ARTIFACT_IDS} distinct artifact ids",
                              field="artifact_ids")
    body = event.body
    if body is not None:
        if not isinstance(body, str) or "\x00" in body or _SURROGATE_RE.search(body):
            raise ValidationError("body contains null bytes or a lone surrogate", field="body")
        size = len(body.encode("utf-8"))
        if size > limits.max_body_bytes:
            raise ValidationError(f"body is {size} bytes; this daemon's maximum is {limits.max_body_bytes} bytes",
                                  field="body")
    text = event.metadata_json
    if not isinstance(text, str) or _SURROGATE_RE.search(text):
        raise ValidationError("metadata contains a lone surrogate", field="metadata")
    size = len(text.encode("utf-8"))
    if size > limits.max_metadata_bytes:
        raise ValidationError(f"metadata is {size} bytes; this daemon's maximum is {limits.max_metadata_bytes} bytes",
                              field="metadata")
    try:
        value = json.loads(text)
        canonical = canonical_json(value)
    except (ValueError, TypeError, RecursionError):
        raise ValidationError("metadata is not JSON", field="metadata") from None
    if not isinstance(value, dict) or canonical != text:
        raise ValidationError("metadata is not a JSON object in canonical form", field="metadata")


def check_replicated_artifact(*, kind: Any, created_by: Any, created_at: Any, metadata_json: Any,
                              limits: Limits) -> None:
    """The descriptive fields of an artifact that arrives from a peer or a file (its bytes are
    checked against the sha256 elsewhere): the rules ``artifact_put`` enforces locally.

    Raises:
        ValidationError: naming the first broken rule.
    """
    if kind not in ARTIFACT_KINDS:
        raise ValidationError(f"kind={str(kind)[:40]!r} is not one of: {', '.join(sorted(ARTIFACT_KINDS))}",
                              field="kind")
    _stored_routing("created_by", created_by, required=True)
    if not isinstance(created_at, str) or not _CREATED_AT_RE.match(created_at):
        raise ValidationError("created_at is not a UTC timestamp with microseconds", field="created_at")
    if not isinstance(metadata_json, str) or _SURROGATE_RE.search(metadata_json):
        raise ValidationError("metadata is not text", field="metadata")
    if len(metadata_json.encode("utf-8")) > limits.max_metadata_bytes:
        raise ValidationError(f"metadata exceeds maximum size of {limits.max_metadata_bytes} bytes", field="metadata")
    try:
        value = json.loads(metadata_json)
    except (ValueError, RecursionError):
        raise ValidationError("metadata is not JSON", field="metadata") from None
    if not isinstance(value, dict):
        raise ValidationError("metadata is not a JSON object", field="metadata")


def _filter_values(field: str, value: Any) -> frozenset[str] | None:
    """One filter: a string or a list of strings (OR). Blanks are dropped; all-blank means any."""
    if value is None:
        return None
    items: Iterable[Any] = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise ValidationError(f"{field} must be a string or a list of strings", field=field)
    event_field = FILTER_FIELDS[field]
    cleaned = set()
    for item in items:
        if event_field == "type" and isinstance(item, str) and item.strip():
            cleaned.add(validate_type(item))
        elif event_field == "status" and (status := validate_status(item)) is not None:
            cleaned.add(status)
        else:
            v = clean_optional(event_field, item)
            if v is not None:
                cleaned.add(v)
    return frozenset(cleaned) or None


@final
@dataclasses.dataclass(frozen=True, slots=True)
class ListQuery:
    """Filters and paging shared by list, wait and watch. Each filter set means OR; None means any.

    The filters' names are ``palace_proto.filters``'s table, the one clients build their requests
    with (``filter_args``)."""

    streams: frozenset[str] | None = None
    rooms: frozenset[str] | None = None
    topics: frozenset[str] | None = None
    types: frozenset[str] | None = None
    to_agents: frozenset[str] | None = None
    from_agents: frozenset[str] | None = None
    exclude_from_agents: frozenset[str] | None = None
    #: types that never match (a fleet watcher sleeps through ``status`` announcements)
    exclude_types: frozenset[str] | None = None
    correlation_ids: frozenset[str] | None = None
    statuses: frozenset[str] | None = None
    since_event_id: str | None = None
    before_event_id: str | None = None
    since_created_at: str | None = None
    order: str = "asc"
    limit: int = DEFAULT_LIST_LIMIT
    preview: bool = False
    #: full-text search over bodies (list only: the results are ranked, best first)
    text: str | None = None

    @classmethod
    def from_wire(cls, args: Mapping[str, Any]) -> ListQuery:
        filters = {name: _filter_values(name, args.get(name)) for name in FILTER_FIELDS}
        order = args.get("order")
        if order is None:
            order = "asc"
        elif not isinstance(order, str) or order.strip().lower() not in ("asc", "desc"):
            raise ValidationError(f"order={order!r} must be 'asc' or 'desc'", field="order")
        limit = args.get("limit")
        if limit is None:
            limit = DEFAULT_LIST_LIMIT
        elif isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValidationError("limit must be a positive integer", field="limit")
        preview = args.get("preview", False)
        if not isinstance(preview, bool):
            raise ValidationError("preview must be true or false", field="preview")
        return cls(
            **filters,
            since_event_id=clean_optional("since_event_id", args.get("since_event_id")),
            before_event_id=clean_optional("before_event_id", args.get("before_event_id")),
            since_created_at=validate_created_at_bound("since_created_at", args.get("since_created_at")),
            order=order.strip().lower(),
            limit=min(limit, MAX_LIST_LIMIT),
            preview=preview,
            text=_clean_text_query(args.get("text")),
        )

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in FILTER_FIELDS:
            values = getattr(self, name)
            if values:
                out[name] = sorted(values)
        for name in ("since_event_id", "before_event_id", "since_created_at"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        out.update(order=self.order, limit=self.limit, preview=self.preview)
        if self.text:
            out["text"] = self.text
        return out

    def matches(self, event: Mapping[str, Any]) -> bool:
        """Does a public event pass the filters? (Cursors are the caller's business.)"""
        frm = event.get("from_agent")
        if self.exclude_from_agents and frm in self.exclude_from_agents:
            return False
        if self.exclude_types and event.get("type") in self.exclude_types:
            return False
        if self.to_agents is not None:
            to = event.get("to_agent")
            if to is None or (to not in self.to_agents and to != "*"):
                return False
        for name, field in FILTER_FIELDS.items():
            if name in ("to_agents", "exclude_from_agents", "exclude_types"):
                continue
            values = getattr(self, name)
            if values is not None and event.get(field) not in values:
                return False
        if self.since_created_at is not None and event.get("created_at", "") < self.since_created_at:
            return False
        return True

    def describe(self) -> str:
        """Short human summary of the filters, for logs, ``who`` and watch announcements."""
        parts = [f"{name}={','.join(sorted(v))}" for name in FILTER_FIELDS if (v := getattr(self, name))]
        if self.text:
            parts.append(f"text={self.text!r}")
        return " ".join(parts) or "everything"


def parse_json_object(text: str, flag: str) -> dict[str, Any]:
    """Parse a ``--metadata``-style JSON object given on the command line."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValidationError(f"{flag} is not valid JSON: {exc}", field="metadata") from None
    except RecursionError:
        raise ValidationError(f"{flag} is nested too deeply", field="metadata") from None
    if not isinstance(value, dict):
        raise ValidationError(f"{flag} must be a JSON object", field="metadata")
    return value
