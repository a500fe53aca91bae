"""The one mapping between an event and its row of the ``events`` table.

Owns: the events columns, named once in the order every read selects them and every insert
writes them; a row read back as the public object (``SignedEvent.to_public``'s shape, with the
local ``seq``) or as the signed event itself; and a signed event as the parameters of its insert.
The chain columns come last, so a public read selects a prefix of the same list and never pays
for the hashes and signature it does not show.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Sequence
from typing import Any, Final

from palace_proto.envelope import SignedEvent
from palace_proto.event_fields import COLUMNS, EVENT_FIELDS, PUBLIC_KEYS, PublicEvent

__all__ = [
    "BODILESS_PUBLIC_COLUMNS", "INSERT_EVENT", "PUBLIC_COLUMNS", "SIGNED_COLUMNS", "insert_params", "row_to_public",
    "row_to_signed",
]

#: Every column of ``events``, in row order (``palace_proto.event_fields.COLUMNS``): what the
#: public object shows (``seq`` first: SQLite assigns it, the local arrival order), then the chain
#: (shown by no public object).
_COLUMNS: Final = COLUMNS
#: How many columns a public read selects: those through the body's hash (which a redacted
#: event's public object shows), never the chain's after it.
_PUBLIC_COUNT: Final = _COLUMNS.index("body_sha256") + 1

#: SELECT list of a row for ``row_to_public``
PUBLIC_COLUMNS: Final = ", ".join(_COLUMNS[:_PUBLIC_COUNT])
#: SELECT list of a row for ``row_to_public`` whose body reads as "": for a derivation that never
#: reads one (a task's judge of its usage reports), so that no body is read from disk
BODILESS_PUBLIC_COLUMNS: Final = ", ".join("'' AS body" if column == "body" else column
                                           for column in _COLUMNS[:_PUBLIC_COUNT])
#: SELECT list of a row for ``row_to_signed`` (and ``row_to_public``: the same prefix)
SIGNED_COLUMNS: Final = ", ".join(_COLUMNS)
#: the insert of one event; its parameters are ``insert_params(event)``
INSERT_EVENT: Final = (f"INSERT INTO events ({', '.join(_COLUMNS[1:])}) "
                       f"VALUES ({','.join('?' * (len(_COLUMNS) - 1))})")

_BY_COLUMN: Final = {f.column: f for f in EVENT_FIELDS}
# A row's values in the public object's order (the row leads with seq, the object with the id).
_shown: Final = operator.itemgetter(*(_COLUMNS.index(f.column) for f in EVENT_FIELDS if f.public is not None))
_BODY_AT: Final = _COLUMNS.index("body")
_BODY_HASH_AT: Final = _COLUMNS.index("body_sha256")
# A SignedEvent's attributes (not the id, not the seq), the row's values for them, and which of
# them a column holds in another form: artifact ids as JSON text, bytes as a blob.
_ATTRIBUTES: Final = tuple(f for f in EVENT_FIELDS if f.role not in ("derived", "local"))
_ATTRIBUTE_NAMES: Final = tuple(f.name for f in _ATTRIBUTES)
_attribute_values: Final = operator.itemgetter(*(_COLUMNS.index(f.column) for f in _ATTRIBUTES))
_IDS_ATTRIBUTE: Final = "artifact_ids"
_BINARY_ATTRIBUTES: Final = tuple(f.name for f in _ATTRIBUTES if f.wire in ("hash", "signature"))
# Every column but seq, in row order, as the attribute holding it (the id is SignedEvent's property).
_insert_values: Final = operator.attrgetter(*(_BY_COLUMN[column].name for column in _COLUMNS[1:]))
_IDS_PARAM: Final = _COLUMNS.index(_BY_COLUMN[_IDS_ATTRIBUTE].column) - 1
assert {f.wire for f in EVENT_FIELDS} == {"text", "int", "hash", "signature", "ids", "json", "body"}, \
    "a new wire type needs its column form here"


def row_to_public(row: Sequence[Any]) -> PublicEvent:
    """The public object of a row selected with ``PUBLIC_COLUMNS`` (or ``SIGNED_COLUMNS``)."""
    out: dict[str, Any] = dict(zip(PUBLIC_KEYS, _shown(row), strict=True))
    out["artifact_ids"] = json.loads(out["artifact_ids"])
    out["metadata"] = json.loads(out["metadata"])
    if row[_BODY_AT] is None:
        out["body"] = ""
        out["body_redacted"] = True
        out["body_sha256"] = bytes(row[_BODY_HASH_AT]).hex()
    return out  # type: ignore[return-value]  # PUBLIC_KEYS are PublicEvent's keys (event_fields checks)


def row_to_signed(row: Sequence[Any]) -> SignedEvent:
    """The signed event of a row selected with ``SIGNED_COLUMNS`` (its ``seq`` and ``id`` are not
    part of it: the id is derived from the signed fields)."""
    fields = dict(zip(_ATTRIBUTE_NAMES, _attribute_values(row), strict=True))
    fields[_IDS_ATTRIBUTE] = tuple(json.loads(fields[_IDS_ATTRIBUTE]))
    for name in _BINARY_ATTRIBUTES:
        fields[name] = bytes(fields[name])
    return SignedEvent(**fields)


def insert_params(ev: SignedEvent) -> tuple[Any, ...]:
    """The parameters of ``INSERT_EVENT`` for ``ev`` (every column but ``seq``, in row order)."""
    params = list(_insert_values(ev))
    ids = params[_IDS_PARAM]
    params[_IDS_PARAM] = json.dumps(list(ids)) if ids else "[]"
    return tuple(params)
