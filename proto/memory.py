"""The shared memory as log events: drawers, knowledge-graph facts and diary entries.

Owns: the reserved event types that carry memory writes, the validation of what an agent files
(MemPalace wording where MemPalace has it, reference §5), and the pure derivations the daemon's
materialised views rely on: content-derived drawer ids (filing the same content twice in one
wing and room yields the same drawer), triple ids, the diary wing of an agent, and the
temporal classification of facts (``as_of``). Every memory write is an ordinary signed event in
the replicated log, so memory reaches every peer; the views are derived state, rebuilt from the
log at will. Pure: no clock (dates come in), no IO.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final, final

from .errors import ValidationError
from .validation import Limits, clean_optional, clean_required, validate_body

__all__ = [
    "DIARY_EVENT",
    "DIARY_ROOM",
    "DRAWER_EVENT",
    "KG_ADD_EVENT",
    "KG_INVALIDATE_EVENT",
    "MEMORY_STREAM",
    "MEMORY_TYPES",
    "DiaryEntry",
    "Drawer",
    "FactAdd",
    "FactInvalidate",
    "diary_entry_id",
    "diary_wing",
    "drawer_id",
    "fact_state",
    "hybrid_score",
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
_DATE_RE: Final = re.compile(r"^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z)?$")


def diary_wing(agent: str) -> str:
    """``wing_<agent>``: lower-cased, spaces to underscores (the second seed's rule)."""
    return "wing_" + agent.strip().lower().replace(" ", "_")


def drawer_id(wing: str, room: str, content: str) -> str:
    """Content-derived: the same content filed twice in one wing and room is one drawer."""
    digest = hashlib.sha256(f"palace/drawer/v1\n{wing}\n{room}\n".encode() + content.encode("utf-8", "surrogatepass"))
    return "drw_" + digest.hexdigest()[:32]


def diary_entry_id(event_id: str) -> str:
    """A diary entry is identified by the event that wrote it (entries are never merged)."""
    return "dry_" + hashlib.sha256(b"palace/diary/v1\n" + event_id.encode("ascii")).hexdigest()[:32]


def triple_id(subject: str, predicate: str, obj: str, valid_from: str | None) -> str:
    key = "\n".join([subject.lower(), predicate.lower(), obj.lower(), valid_from or ""])
    return "kg_" + hashlib.sha256(b"palace/kg/v1\n" + key.encode("utf-8")).hexdigest()[:24]


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
        """The append request (wire form) that files this drawer."""
        return {"type": DRAWER_EVENT, "stream": MEMORY_STREAM, "room": self.room, "from_agent": self.added_by,
                "body": self.content,
                "metadata": {"drawer_id": self.id, "wing": self.wing, "room": self.room,
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
class FactAdd:
    """``subject — predicate → object``, valid from ``valid_from`` (None: always) to ``valid_to``."""

    subject: str
    predicate: str
    object: str
    added_by: str
    valid_from: str | None = None
    valid_to: str | None = None
    source_drawer_id: str | None = None
    source_file: str | None = None

    @property
    def id(self) -> str:
        return triple_id(self.subject, self.predicate, self.object, self.valid_from)

    @property
    def text(self) -> str:
        return f"{self.subject} → {self.predicate} → {self.object}"

    @classmethod
    def from_wire(cls, args: Mapping[str, Any]) -> FactAdd:
        fact = cls(subject=_name("subject", args.get("subject"), max_chars=MAX_FACT_PART_CHARS),
                   predicate=_name("predicate", args.get("predicate"), max_chars=MAX_FACT_PART_CHARS),
                   object=_name("object", args.get("object"), max_chars=MAX_FACT_PART_CHARS),
                   added_by=_name("added_by", args.get("added_by")),
                   valid_from=validate_date("valid_from", args.get("valid_from")),
                   valid_to=validate_date("valid_to", args.get("valid_to")),
                   source_drawer_id=clean_optional("source_drawer_id", args.get("source_drawer_id")),
                   source_file=clean_optional("source_file", args.get("source_file")))
        if fact.valid_from and fact.valid_to and fact.valid_to < fact.valid_from:
            raise ValidationError("valid_to must not be before valid_from", field="valid_to")
        return fact

    def event(self) -> dict[str, Any]:
        metadata = {"triple_id": self.id, "subject": self.subject, "predicate": self.predicate, "object": self.object}
        for key in ("valid_from", "valid_to", "source_drawer_id", "source_file"):
            if getattr(self, key):
                metadata[key] = getattr(self, key)
        return {"type": KG_ADD_EVENT, "stream": MEMORY_STREAM, "room": "knowledge", "from_agent": self.added_by,
                "body": self.text, "metadata": metadata}


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
        return {"type": KG_INVALIDATE_EVENT, "stream": MEMORY_STREAM, "room": "knowledge",
                "from_agent": self.added_by, "body": f"ended {self.ended}: {self.text}",
                "metadata": {"subject": self.subject, "predicate": self.predicate, "object": self.object,
                             "ended": self.ended}}


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
#: cross-validation on the project's retrieval evaluation (README "Memory search"): picked on
#: either half, these values beat vector-only and keyword-only on the other half.
HYBRID_VECTOR_WEIGHT: Final = 0.5
KEYWORD_SATURATION: Final = 20.0


def hybrid_score(cosine: float | None, keyword: float | None) -> float:
    """One relevance score from both rankings' raw scores (None: not found by that ranking)."""
    bm25 = max(keyword or 0.0, 0.0)
    return HYBRID_VECTOR_WEIGHT * (cosine or 0.0) + (1 - HYBRID_VECTOR_WEIGHT) * bm25 / (bm25 + KEYWORD_SATURATION)
