"""The toy feature's light verb: ``TOY COUNT box: NAME`` on ``palace_coordinate``."""

from __future__ import annotations

from typing import Any, Final

from palacectl.light import Verb, pairs


def _toy_words(tokens: list[str]) -> tuple[str, dict[str, Any]] | None:
    second = tokens[1].upper() if len(tokens) > 1 else ""
    return ("toy_count", pairs(tokens[2:])) if second == "COUNT" else None


WORDS: Final = {"TOY": _toy_words}
VERBS: Final = (Verb("toy_count", ("toy_count",), required=("box",), infer=(frozenset({"box"}),)),)
USAGE: Final = ("'TOY COUNT box:'",)
FIELDS: Final = {"palace_coordinate": {"box": "string"}}
