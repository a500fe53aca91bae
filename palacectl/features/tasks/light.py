"""The tasks feature's light verb: ``TASK CREATE`` on ``palace_coordinate`` (``mempalace_task_create``).

Owns its first word, its ``Verb`` (its actions, required fields and when a call of fields means
it), its words in the tool's description and its fields in the tool's schema, as
``palacectl.light.Tables`` reads them. Pure.
"""

from __future__ import annotations

from typing import Any, Final

from ...light import Verb, pairs

__all__ = ["FIELDS", "USAGE", "VERBS", "WORDS"]


def _task_words(tokens: list[str]) -> tuple[str, dict[str, Any]] | None:
    """``TASK CREATE|REQUEST pairs…``."""
    second = tokens[1].upper() if len(tokens) > 1 else ""
    if second in ("CREATE", "REQUEST"):
        return "task_create", pairs(tokens[2:])
    return None


WORDS: Final = {"TASK": _task_words}
VERBS: Final = (
    Verb("task_create", ("task", "create_task", "task_create"), (),
         ("project", "to_agent", "goal", "branch", "base_commit", "done"),
         (frozenset({"goal"}), frozenset({"branch"}), frozenset({"base_commit"}))),
)
USAGE: Final = ("'TASK CREATE project: to: goal: branch: base: done:'",)
FIELDS: Final = {"palace_coordinate": {"project": "string", "goal": "string", "branch": "string",
                                       "base_commit": "string", "done": "string"}}
