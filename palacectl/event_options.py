"""The event's fields as palacectl's clients offer them, derived from ``palace_proto.event_fields``.

Owns: which of an author's fields an append offers (``APPEND_FIELDS``: the command line's
``append``, the loop's quick ``append``, MCP's ``mempalace_event_append``; a feature's writing
tool offers a part of them: ``patch submit``), which of them route an event (``ROUTING``: one text
value each, ``append --ndjson``'s defaults for every line), the rare ones a compact MCP listing
only names (``RARE``), a light call's short names for them (``SHORT_NAMES``), and each field's
option (``flag``, ``dest``) and types (``JSON_TYPES``, ``PY_TYPES``). A field added to the table
is offered everywhere from here (issue 44 §3: one event, one table).

Stdlib and ``palace_proto.event_fields`` only: no typer, no trio, no dataclasses (the loop's quick
path imports it: tests/e2e/test_cli_quick.py; the MCP tools and the light tools read it too).
"""

from __future__ import annotations

from typing import Any, Final

from palace_proto.event_fields import AUTHOR_FIELDS, EventField

__all__ = ["APPEND_FIELDS", "JSON_TYPES", "PY_TYPES", "RARE", "ROUTING", "SHORT_NAMES", "dest", "flag"]

# Why left out: ``ack_of`` links an acknowledgement to the event it acknowledges, and ``ack`` writes
# it (``palacectl ack``, ``mempalace_event_ack``); an append has never offered it.
_NOT_OFFERED: Final = frozenset({"ack_of"})

#: The author's fields an append offers, in the order they are checked (the required ones first).
APPEND_FIELDS: Final[tuple[EventField, ...]] = tuple(f for f in AUTHOR_FIELDS if f.name not in _NOT_OFFERED)
#: The fields that route an event (one text value each: where it goes, what it belongs to), by
#: their append arguments' names.
ROUTING: Final[tuple[str, ...]] = tuple(f.option for f in APPEND_FIELDS if f.option and f.wire == "text")
# Why: a compact MCP listing (issue 26) names these only in a tool's description, every agent pays
# for a schema's every argument on every turn, and these are rarely given.
RARE: Final = frozenset({"topic", "branch", "base_commit", "metadata"})
#: A light call's short names for fields (MemPalace's ``to:``, ``base:``, ``correlation:``).
SHORT_NAMES: Final = {"to": "to_agent", "base": "base_commit", "correlation": "correlation_id"}
#: An append argument's JSON schema type, by the field's wire type.
JSON_TYPES: Final = {"text": "string", "body": "string", "json": "object", "ids": "array"}
#: An append argument's Python type (an MCP tool's parameter), by the field's wire type.
PY_TYPES: Final[dict[str, Any]] = {"text": str, "body": str, "json": dict[str, Any], "ids": list[str]}


def dest(field: EventField) -> str:
    """The name a command line keeps a field's option under: its append argument's, but a list's is
    singular (given one value at a time: ``artifact_id``)."""
    assert field.option, f"{field.name} is not an author's field"
    return field.option.removesuffix("s") if field.wire == "ids" else field.option


def flag(field: EventField) -> str:
    """A field's command-line option: ``--to-agent``, ``--artifact-id`` (repeatable)."""
    return "--" + dest(field).replace("_", "-")
