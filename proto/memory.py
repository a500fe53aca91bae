"""The shared memory as log events: drawers, knowledge-graph facts and diary entries.

Owns: the reserved event types that carry memory writes, the validation of what an agent files
(MemPalace wording where MemPalace has it, reference §5), and the pure derivations the daemon's
materialised views rely on: content-derived drawer ids (filing the same content twice in one
wing and room yields the same drawer), triple ids, the diary wing of an agent, and the
temporal classification of facts (``as_of``), and the reading of memory events back from the log
(``read_memory_event``: the shape rules that local writes obey, applied to whatever a peer sent).
Every memory write is an ordinary signed event in the replicated log, so memory reaches every
peer; the views are derived state, rebuilt from the log at will. Pure: no clock (dates come in),
no IO.

What is remembered travels in the event's *body* only: a redaction can remove a body from every
replica, but never signed metadata. Metadata holds routing that is no secret (wing, room, a format
marker), never the remembered words nor a hash of them (a short secret is found again from its
hash by guessing).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final, final

from .authority import ANY_AGENT, Rule
from .canonical import canonical_json
from .errors import ValidationError
from .validation import Limits, clean_optional, clean_required, validate_body

__all__ = [
    "DIARY_EVENT",
    "DIARY_ROOM",
    "DRAWER_EVENT",
    "FACT_FORMAT",
    "KG_ADD_EVENT",
    "KG_INVALIDATE_EVENT",
    "MEMORY_STREAM",
    "MEMORY_TYPES",
    "DiaryEntry",
    "Drawer",
    "FactAdd",
    "FactAdded",
    "FactEnded",
    "FactInvalidate",
    "FiledText",
    "MemoryRecord",
    "check_memory_event",
    "diary_entry_id",
    "diary_wing",
    "drawer_id",
    "fact_key",
    "fact_state",
    "hybrid_score",
    "read_memory_event",
    "triple_id",
    "validate_date",
]

DRAWER_EVENT: Final = "memory.drawer"
DIARY_EVENT: Final = "memory.diary"
KG_ADD_EVENT: Final = "memory.kg.add"
KG_INVALIDATE_EVENT: Final = "memory.kg.invalidate"
MEMORY_TYPES: Final = frozenset({DRAWER_EVENT, DIARY_EVENT, KG_ADD_EVENT, KG_INVALIDATE_EVENT})
#: memory events live on their own stream, so log readers can leave them out (or ask for them)
MEMORY_STREAM: Final = "memory"
DIARY_ROOM: Final = "diary"
DEFAULT_DIARY_TOPIC: Final = "general"
MAX_NAME_CHARS: Final = 128
MAX_FACT_PART_CHARS: Final = 512
_SURROGATE_RE: Final = re.compile(r"[\ud800-\udfff]")
_DATE_RE: Final = re.compile(r"^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z)?$")
#: The format of knowledge-graph events written since schema 5: the fact is the body (canonical
#: JSON) and the metadata is exactly ``{"format": FACT_FORMAT}``. Events without the marker are
#: format 1 (before schema 5): the fact in the metadata, the body a readable line. Both are read.
FACT_FORMAT: Final = "fact/2"
_FACT_FIELDS: Final = ("subject", "predicate", "object")
_FACT_ADD_KEYS: Final = frozenset({*_FACT_FIELDS, "valid_from", "valid_to", "source_drawer_id", "source_file"})
_FACT_END_KEYS: Final = frozenset({*_FACT_FIELDS, "ended"})
# Metadata keys each event type may carry (format 1 kg events: the fact, and its triple id).
_DRAWER_META: Final = frozenset({"wing", "room", "source_file", "drawer_id"})  # drawer_id: before schema 5, unread
_DIARY_META: Final = frozenset({"agent", "wing", "room", "topic"})
_LEGACY_FACT_ADD_META: Final = _FACT_ADD_KEYS | {"triple_id"}


def diary_wing(agent: str) -> str:
    """``wing_<agent>``: lower-cased, spaces to underscores (the second seed's rule)."""
    return "wing_" + agent.strip().lower().replace(" ", "_")


def drawer_id(wing: str, room: str, content: str) -> str:
    """Content-derived: the same content filed twice in one wing and room is one drawer."""
    digest = hashlib.sha256(f"palace/drawer/v1\n{wing}\n{room}\n".encode() + content.encode("utf-8", "surrogatepass"))
    return "drw_" + digest.hexdigest()[:32]


def diary_entry_id(event_id: str) -> str:
    """A diary entry is identified by the event that wrote it (entries are never merged)."""
    # Event ids are ASCII (ids.EVENT_ID_RE), where UTF-8 is the same bytes; surrogatepass: never raise.
    return "dry_" + hashlib.sha256(b"palace/diary/v1\n" + event_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def triple_id(subject: str, predicate: str, obj: str, valid_from: str | None) -> str:
    key = "\n".join([subject.lower(), predicate.lower(), obj.lower(), valid_from or ""])
    return "kg_" + hashlib.sha256(b"palace/kg/v1\n" + key.encode("utf-8")).hexdigest()[:24]


def fact_key(subject: str, predicate: str, obj: str) -> str:
    """One key for every event about a fact, whatever its dates: its additions and invalidations.

    Lower-cased like ``triple_id``, so it groups at least what the views compare equal (SQLite's
    NOCASE folds ASCII letters only; two texts equal under it are equal lower-cased too).
    """
    key = "\n".join([subject.lower(), predicate.lower(), obj.lower()])
    return "fct_" + hashlib.sha256(b"palace/fact/v1\n" + key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def validate_date(field: str, value: Any) -> str | None:
    """``YYYY-MM-DD`` or ``YYYY-MM-DDTHH:MM:SSZ``; None passes."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not _DATE_RE.match(value.strip()):
        raise ValidationError(
            f"{field}={value!r} is not a valid ISO-8601 date or UTC datetime (expected YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ)",
            field=field,
        )
    return value.strip()


def _name(field: str, value: Any, *, max_chars: int = MAX_NAME_CHARS) -> str:
    cleaned = clean_required(field, value)
    if len(cleaned) > max_chars:
        raise ValidationError(f"{field} must be at most {max_chars} characters", field=field)
    return cleaned


def _content(field: str, value: Any, limits: Limits) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{field} must be a non-empty string", field=field)
    # Verbatim: the text is stored and returned exactly as given (no strip, no normalisation).
    return validate_body(value, limits)


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Drawer:
    """A verbatim piece of lasting knowledge filed in a wing and room."""

    wing: str
    room: str
    content: str
    added_by: str
    source_file: str | None = None

    @property
    def id(self) -> str:
        return drawer_id(self.wing, self.room, self.content)

    @classmethod
    def from_wire(cls, args: Mapping[str, Any], limits: Limits) -> Drawer:
        return cls(wing=_name("wing", args.get("wing")), room=_name("room", args.get("room")),
                   content=_content("content", args.get("content"), limits),
                   added_by=_name("added_by", args.get("added_by")),
                   source_file=clean_optional("source_file", args.get("source_file")))

    def event(self) -> dict[str, Any]:
        """The append request (wire form) that files this drawer. No drawer id in the metadata: it
        is a hash of the content, and the views derive it again from the body anyway."""
        return {"type": DRAWER_EVENT, "stream": MEMORY_STREAM, "room": self.room, "from_agent": self.added_by,
                "body": self.content,
                "metadata": {"wing": self.wing, "room": self.room,
                             **({"source_file": self.source_file} if self.source_file else {})}}


@final
@dataclasses.dataclass(frozen=True, slots=True)
class DiaryEntry:
    """An agent's diary entry: a drawer in ``wing_<agent>/diary`` with a topic."""

    agent: str
    entry: str
    topic: str = DEFAULT_DIARY_TOPIC
    wing: str = ""

    @classmethod
    def from_wire(cls, args: Mapping[str, Any], limits: Limits) -> DiaryEntry:
        agent = _name("agent_name", args.get("agent_name"))
        entry = args.get("entry") if args.get("entry") is not None else args.get("content")
        topic = clean_optional("topic", args.get("topic")) or DEFAULT_DIARY_TOPIC
        wing = clean_optional("wing", args.get("wing")) or diary_wing(agent)
        return cls(agent=agent.lower(), entry=_content("entry", entry, limits), topic=_name("topic", topic), wing=wing)

    def event(self, filed_by: str) -> dict[str, Any]:
        return {"type": DIARY_EVENT, "stream": MEMORY_STREAM, "room": DIARY_ROOM, "from_agent": filed_by,
                "topic": self.topic, "body": self.entry,
                "metadata": {"agent": self.agent, "wing": self.wing, "room": DIARY_ROOM, "topic": self.topic}}


@final
@dataclasses.dataclass(frozen=True, slots=True)
class FactAdded:
    """``subject — predicate → object``, valid from ``valid_from`` (None: always) to ``valid_to``:
    what a ``memory.kg.add`` event states (``read_memory_event``), and what a ``FactAdd`` writes."""

    subject: str
    predicate: str
    object: str
    valid_from: str | None = None
    valid_to: str | None = None
    source_drawer_id: str | None = None
    source_file: str | None = None

    @property
    def id(self) -> str:
        return triple_id(self.subject, self.predicate, self.object, self.valid_from)

    @property
    def key(self) -> str:
        return fact_key(self.subject, self.predicate, self.object)

    @property
    def text(self) -> str:
        return f"{self.subject} → {self.predicate} → {self.object}"

    def fields(self) -> dict[str, str]:
        """The fact as its event's body carries it (parts left empty are left out)."""
        fields = {"subject": self.subject, "predicate": self.predicate, "object": self.object}
        for key in ("valid_from", "valid_to", "source_drawer_id", "source_file"):
            if getattr(self, key):
                fields[key] = getattr(self, key)
        return fields


@final
@dataclasses.dataclass(frozen=True, slots=True)
class FactAdd:
    """A request to state ``fact``, written by ``added_by``."""

    fact: FactAdded
    added_by: str

    @classmethod
    def from_wire(cls, args: Mapping[str, Any]) -> FactAdd:
        subject, predicate, object_ = [_name(name, args.get(name), max_chars=MAX_FACT_PART_CHARS)
                                       for name in _FACT_FIELDS]
        added_by = _name("added_by", args.get("added_by"))
        fact = FactAdded(subject, predicate, object_, valid_from=validate_date("valid_from", args.get("valid_from")),
                         valid_to=validate_date("valid_to", args.get("valid_to")),
                         source_drawer_id=clean_optional("source_drawer_id", args.get("source_drawer_id")),
                         source_file=clean_optional("source_file", args.get("source_file")))
        if fact.valid_from and fact.valid_to and fact.valid_to < fact.valid_from:
            raise ValidationError("valid_to must not be before valid_from", field="valid_to")
        return cls(fact, added_by)

    @property
    def id(self) -> str:
        return self.fact.id

    @property
    def text(self) -> str:
        return self.fact.text

    def event(self) -> dict[str, Any]:
        """The append request: the fact in the body only (``FACT_FORMAT``), so a redaction removes it."""
        return {"type": KG_ADD_EVENT, "stream": MEMORY_STREAM, "room": "knowledge", "from_agent": self.added_by,
                "body": canonical_json(self.fact.fields()), "metadata": {"format": FACT_FORMAT}}


@final
@dataclasses.dataclass(frozen=True, slots=True)
class FactInvalidate:
    """The end of a fact's validity (append-only: the fact stays, as history)."""

    subject: str
    predicate: str
    object: str
    ended: str
    added_by: str

    @classmethod
    def from_wire(cls, args: Mapping[str, Any], today: str) -> FactInvalidate:
        return cls(subject=_name("subject", args.get("subject"), max_chars=MAX_FACT_PART_CHARS),
                   predicate=_name("predicate", args.get("predicate"), max_chars=MAX_FACT_PART_CHARS),
                   object=_name("object", args.get("object"), max_chars=MAX_FACT_PART_CHARS),
                   ended=validate_date("ended", args.get("ended")) or today,
                   added_by=_name("added_by", args.get("added_by")))

    @property
    def text(self) -> str:
        return f"{self.subject} → {self.predicate} → {self.object}"

    def event(self) -> dict[str, Any]:
        """The append request: like ``FactAdd.event``, the fact in the body only."""
        body = {"subject": self.subject, "predicate": self.predicate, "object": self.object, "ended": self.ended}
        return {"type": KG_INVALIDATE_EVENT, "stream": MEMORY_STREAM, "room": "knowledge",
                "from_agent": self.added_by, "body": canonical_json(body), "metadata": {"format": FACT_FORMAT}}


# -- reading memory events back from the log ------------------------------------------------------


@final
@dataclasses.dataclass(frozen=True, slots=True)
class FiledText:
    """What a ``memory.drawer`` (kind ``drawer``) or ``memory.diary`` (kind ``diary``) event files."""

    kind: str
    wing: str
    room: str
    content: str
    topic: str | None = None
    agent: str | None = None
    source_file: str | None = None


@final
@dataclasses.dataclass(frozen=True, slots=True)
class FactEnded:
    """What a ``memory.kg.invalidate`` event states: the fact's validity ends on ``ended``."""

    subject: str
    predicate: str
    object: str
    ended: str

    @property
    def key(self) -> str:
        return fact_key(self.subject, self.predicate, self.object)


MemoryRecord = FiledText | FactAdded | FactEnded


def check_memory_event(type: str, body: str | None, metadata_json: str) -> None:  # noqa: A002 (the event's field)
    """Refuse a signed memory event (from a peer, or a file) that a daemon would not have written.

    The same shape rules local writes obey, on the metadata and the body. Other event types pass
    (their rules live in ``validation``); a body of None (redacted) passes, its metadata is still
    checked.

    Raises:
        ValidationError: naming the part that is wrong (``metadata.wing``, ``body.subject``, ...).
    """
    read_memory_event(type, body, metadata_json)


def read_memory_event(type: str, body: str | None, metadata_json: str) -> MemoryRecord | None:  # noqa: A002
    """What a memory event files or states, checked as ``check_memory_event`` does.

    None for other event types and for a redacted event (body None): nothing to show. Both fact
    formats are read (``FACT_FORMAT``).

    Raises:
        ValidationError: naming the part that is wrong.
    """
    if not isinstance(type, str) or type not in MEMORY_TYPES:
        return None
    meta = _json_object("metadata", metadata_json)
    if type == DRAWER_EVENT:
        _only_keys("metadata", meta, _DRAWER_META)
        wing, room = _stored_name("metadata.wing", meta.get("wing")), _stored_name("metadata.room", meta.get("room"))
        source_file = _stored_optional("metadata.source_file", meta.get("source_file"))
        if "drawer_id" in meta and not isinstance(meta["drawer_id"], str):
            raise ValidationError("metadata.drawer_id must be a string", field="metadata.drawer_id")
        if body is None:
            return None
        return FiledText("drawer", wing, room, _stored_content(body), source_file=source_file)
    if type == DIARY_EVENT:
        _only_keys("metadata", meta, _DIARY_META)
        agent = _stored_name("metadata.agent", meta.get("agent"))
        if agent != agent.lower():
            raise ValidationError("metadata.agent must be lower-case (as a daemon stores it)", field="metadata.agent")
        wing, topic = _stored_name("metadata.wing", meta.get("wing")), _stored_name("metadata.topic", meta.get("topic"))
        if meta.get("room") != DIARY_ROOM:
            raise ValidationError(f"metadata.room of a diary entry must be {DIARY_ROOM!r}", field="metadata.room")
        if body is None:
            return None
        return FiledText("diary", wing, DIARY_ROOM, _stored_content(body), topic=topic, agent=agent)
    adding = type == KG_ADD_EVENT
    if "format" in meta:
        if meta != {"format": FACT_FORMAT}:
            raise ValidationError(f"metadata of a {type} event must be exactly {{\"format\": \"{FACT_FORMAT}\"}} "
                                  "(the fact travels in the body)", field="metadata")
        if body is None:
            return None
        fields, where = _json_object("body", body, canonical=True), "body"
        _only_keys(where, fields, _FACT_ADD_KEYS if adding else _FACT_END_KEYS)
    else:  # format 1: the fact in the metadata (written before schema 5; redaction cannot remove it)
        _only_keys("metadata", meta, _LEGACY_FACT_ADD_META if adding else _FACT_END_KEYS)
        if "triple_id" in meta and not isinstance(meta["triple_id"], str):
            raise ValidationError("metadata.triple_id must be a string", field="metadata.triple_id")
        fields, where = meta, "metadata"
        if body is not None and not isinstance(body, str):
            raise ValidationError("body must be a string", field="body")
    subject, predicate, object_ = [_stored_name(f"{where}.{name}", fields.get(name), max_chars=MAX_FACT_PART_CHARS)
                                   for name in _FACT_FIELDS]
    if adding:
        fact = FactAdded(subject, predicate, object_, valid_from=_stored_date(f"{where}.valid_from", fields.get("valid_from")),
                         valid_to=_stored_date(f"{where}.valid_to", fields.get("valid_to")),
                         source_drawer_id=_stored_optional(f"{where}.source_drawer_id", fields.get("source_drawer_id")),
                         source_file=_stored_optional(f"{where}.source_file", fields.get("source_file")))
        if fact.valid_from and fact.valid_to and fact.valid_to < fact.valid_from:
            raise ValidationError(f"{where}.valid_to must not be before valid_from", field=f"{where}.valid_to")
        result: MemoryRecord = fact
    else:
        ended = _stored_date(f"{where}.ended", fields.get("ended"))
        if ended is None:
            raise ValidationError(f"{where}.ended must be a date", field=f"{where}.ended")
        result = FactEnded(subject, predicate, object_, ended=ended)
    return None if body is None else result


def _json_object(field: str, text: Any, *, canonical: bool = False) -> dict[str, Any]:
    if not isinstance(text, str):
        raise ValidationError(f"{field} must be JSON text", field=field)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: deep nesting fits in a body
        raise ValidationError(f"{field} is not JSON", field=field) from None
    if not isinstance(value, dict):
        raise ValidationError(f"{field} must be a JSON object", field=field)
    # canonical: the form a daemon writes (and the only one two daemons agree on byte for byte). A
    # lone surrogate escaped in the text fails here too (it cannot be written back as UTF-8), and so
    # does NaN (json.loads accepts it; canonical JSON does not).
    try:
        same = not canonical or canonical_json(value) == text
    except (ValueError, RecursionError):
        same = False
    if not same:
        raise ValidationError(f"{field} is not canonical JSON (sorted keys, no spaces, no escapes)", field=field)
    return value


def _only_keys(field: str, value: Mapping[str, Any], allowed: frozenset[str]) -> None:
    extra = sorted(k for k in value if k not in allowed)
    if extra:
        raise ValidationError(f"{field} has unknown key(s) {', '.join(repr(k)[:40] for k in extra[:5])}", field=field)


def _stored_name(field: str, value: Any, *, max_chars: int = MAX_NAME_CHARS) -> str:
    """A name exactly as ``_name`` returns it (so as a daemon stores it)."""
    if _name(field, value, max_chars=max_chars) != value:
        raise ValidationError(f"{field} is not in the form a daemon stores (surrounding blanks or a lone surrogate)",
                              field=field)
    return value


def _stored_optional(field: str, value: Any) -> str | None:
    """Absent, or a non-empty routing string exactly as ``clean_optional`` returns it."""
    if value is None:
        return None
    if clean_optional(field, value) != value:
        raise ValidationError(f"{field} is not in the form a daemon stores (empty, surrounding blanks or a lone "
                              "surrogate)", field=field)
    return value


def _stored_date(field: str, value: Any) -> str | None:
    if value is None:
        return None
    if validate_date(field, value) != value:
        raise ValidationError(f"{field} is not in the form a daemon stores (a date without blanks)", field=field)
    return value


def _stored_content(body: Any) -> str:
    if not isinstance(body, str) or not body.strip():
        raise ValidationError("body must be a non-empty string", field="body")
    if "\x00" in body or _SURROGATE_RE.search(body):
        raise ValidationError("body contains null bytes or a lone surrogate", field="body")
    return body


def fact_state(valid_from: str | None, valid_to: str | None, as_of: str) -> str:
    """``active``, ``historical`` (ended on or before ``as_of``) or ``future`` (starts after it).

    Dates compare as text: ``YYYY-MM-DD`` sorts before any time on that day, so a fact valid
    from a day is valid all that day.
    """
    day = as_of[:10]
    if valid_from and valid_from[:10] > day:
        return "future"
    if valid_to and valid_to[:10] <= day:
        return "historical"
    return "active"


#: Hybrid search weighs the two signals evenly: cosine similarity (all-MiniLM: ~0.5+ for a real
#: paraphrase, ~0 for unrelated text) and the keyword score squashed into [0, 1) by ``s / (s + 20)``
#: (bm25 of a rare exact identifier is ~10-20, of one common word ~1-3). Chosen by two-fold
#: cross-validation on the project's retrieval evaluation (docs/benchmarks.md, "Memory search"): picked on
#: either half, these values beat vector-only and keyword-only on the other half.
HYBRID_VECTOR_WEIGHT: Final = 0.5
KEYWORD_SATURATION: Final = 20.0


def hybrid_score(cosine: float | None, keyword: float | None) -> float:
    """One relevance score from both rankings' raw scores (None: not found by that ranking)."""
    bm25 = max(keyword or 0.0, 0.0)
    return HYBRID_VECTOR_WEIGHT * (cosine or 0.0) + (1 - HYBRID_VECTOR_WEIGHT) * bm25 / (bm25 + KEYWORD_SATURATION)


# -- the feature's declaration (palace_proto.features puts every feature's together) ----------------

#: the local API's operations of the shared memory
OPS: Final = frozenset({"memory_add", "search", "drawer_get", "kg_add", "kg_invalidate", "kg_query", "diary_write",
                        "diary_read", "tunnels", "memory_rebuild"})
NAMESPACE: Final = "memory."
#: a memory event from a peer or a file is stored only if a daemon could have written it
STORED_CHECKS: Final = dict.fromkeys(MEMORY_TYPES, check_memory_event)
RULES: Final[tuple[Rule, ...]] = (
    Rule("memory.drawer", ("memory.drawer",), (), "memory", frozenset({ANY_AGENT}),
         "a wing and a room", "content-addressed: the first filing of a content makes the drawer",
         written_by="memory_add (palacectl remember)",
         test="tests/daemon/test_memory_views.py::test_malformed_memory_events_are_left_out_of_the_views_and_logged_once"),
    Rule("memory.diary", ("memory.diary",), (), "memory", frozenset({ANY_AGENT}),
         "an agent's diary wing", "entries are never merged", written_by="diary_write (palacectl diary write)",
         test="tests/daemon/test_memory_views.py::test_malformed_memory_events_are_left_out_of_the_views_and_logged_once"),
    Rule("memory.kg.add", ("memory.kg.add",), (), "memory", frozenset({ANY_AGENT}),
         "a fact", "facts stay as history", written_by="kg_add (palacectl kg add)",
         test="tests/daemon/test_memory_views.py::test_malformed_memory_events_are_left_out_of_the_views_and_logged_once"),
    Rule("memory.kg.invalidate", ("memory.kg.invalidate",), (), "memory", frozenset({ANY_AGENT}),
         "an open fact", "ends every open fact of that triple", written_by="kg_invalidate (palacectl kg invalidate)",
         test="tests/daemon/test_memory_views.py::test_malformed_memory_events_are_left_out_of_the_views_and_logged_once"),
)
