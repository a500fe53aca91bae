"""The rooms feature's light verbs on ``palace_coordinate``: ``ROOM OPEN|READ|SAY|CLOSE``
(``mempalace_room_open``, ``…_read``, ``…_say``, ``…_close``).

Owns their first word (a room's id may follow the verb: ``ROOM SAY room_x_1a2b3c4d body: "…"``),
their verbs (``Verb``), their words in the tool's description and their fields in the tool's schema,
as ``palacectl.light.Tables`` reads them. Pure.
"""

from __future__ import annotations

from typing import Any, Final

from ...light import Quoted, Verb, pairs

__all__ = ["FIELDS", "USAGE", "VERBS", "WORDS"]


def _room_words(tokens: list[str]) -> tuple[str, dict[str, Any]] | None:
    second = tokens[1].upper() if len(tokens) > 1 else ""
    rest = tokens[2:]
    if second not in ("OPEN", "READ", "SAY", "CLOSE"):
        return None
    args = pairs(rest)
    if second != "OPEN" and rest and not isinstance(rest[0], Quoted) and str(rest[0]).startswith("room_"):
        args.setdefault("room_id", str(rest[0]))  # ROOM SAY room_x_1a2b3c4d body: "…"
    return f"room_{second.lower()}", args


_ROOM_ID: Final = (("id", "room_id"), ("room", "room_id"))
WORDS: Final = {"ROOM": _room_words}
VERBS: Final = (
    Verb("room_open", ("room_open",), required=("project", "name")),
    Verb("room_read", ("room_read",), _ROOM_ID, ("room_id",)),
    Verb("room_say", ("room_say",), _ROOM_ID, ("room_id", "body")),
    Verb("room_close", ("room_close",), _ROOM_ID, ("room_id",)),
)
USAGE: Final = ("'ROOM OPEN|READ|SAY|CLOSE'",)
FIELDS: Final = {"palace_coordinate": {"room_id": "string", "name": "string", "agenda": "string", "outcome": "string"}}
