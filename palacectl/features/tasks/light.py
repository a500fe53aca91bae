"""The tasks feature's light verb: ``TASK CREATE`` on ``palace_coordinate`` (``mempalace_task_create``).

Owns its first word, its ``Verb`` (its actions, required fields and when a call of fields means
it), its words in the tool's description and its fields in the tool's schema, as
``palacectl.light.Tables`` reads them. Pure.
"""

from __future__ import annotations

from typing import Any, Final

from ...light import Verb, pairs
from .request import ARGUMENTS, GIT_FIELDS

__all__ = ["FIELDS", "USAGE", "VERBS", "WORDS"]


def _task_words(tokens: list[str]) -> tuple[str, dict[str, Any]] | None:
    """``TASK CREATE|REQUEST pairs…``."""
    second = tokens[1].upper() if len(tokens) > 1 else ""
    if second in ("CREATE", "REQUEST"):
        return "task_create", pairs(tokens[2:])
    return None


WORDS: Final = {"TASK": _task_words}
# Why these JSON types: the schema's type of each argument type a light call may give.
_JSON_TYPES: Final = {str: "string", int: "integer"}
VERBS: Final = (
    # A call of fields alone means a task when it gives a goal or says where the work starts in git.
    Verb("task_create", ("task", "create_task", "task_create"), (),
         tuple(a.name for a in ARGUMENTS if a.required),
         (frozenset({"goal"}), *(frozenset({name}) for name in GIT_FIELDS))),
)
USAGE: Final = ("'TASK CREATE project: to: goal: branch: base: done:'",)
FIELDS: Final = {"palace_coordinate": {a.name: _JSON_TYPES[a.type] for a in ARGUMENTS if a.required}}
