"""The artifacts feature's light verbs on ``palace_coordinate``: ``ARTIFACT PUT|GET`` and ``PATCH
SUBMIT`` (``mempalace_artifact_put``, ``mempalace_artifact_get``, ``mempalace_patch_submit``).

Owns their first words, their verbs (``Verb``), their words in the tool's description and their fields
in the tool's schema, as ``palacectl.light.Tables`` reads them. Pure.
"""

from __future__ import annotations

from typing import Any, Final

from ...light import LightError, Verb, pairs

__all__ = ["FIELDS", "USAGE", "VERBS", "WORDS"]


def _artifact_words(tokens: list[str]) -> tuple[str, dict[str, Any]] | None:
    """``ARTIFACT PUT|ADD pairs…``, ``ARTIFACT GET id``, ``ARTIFACT id``."""
    second = tokens[1].upper() if len(tokens) > 1 else ""
    rest = tokens[2:]
    if second in ("PUT", "ADD"):
        return "artifact_put", pairs(rest)
    if second == "GET":
        if not rest:
            raise LightError("ARTIFACT GET requires artifact_id")
        return "artifact_get", {"artifact_id": str(rest[0])}
    if not second:
        raise LightError("ARTIFACT requires PUT or GET (or artifact_id)")
    return "artifact_get", {"artifact_id": str(tokens[1])}


def _patch_words(tokens: list[str]) -> tuple[str, dict[str, Any]] | None:
    """``PATCH SUBMIT|READY pairs…``."""
    second = tokens[1].upper() if len(tokens) > 1 else ""
    if second in ("SUBMIT", "READY"):
        return "patch_submit", pairs(tokens[2:])
    return None


WORDS: Final = {"ARTIFACT": _artifact_words, "PATCH": _patch_words}
VERBS: Final = (
    Verb("artifact_get", ("artifact_get",), infer=(frozenset({"artifact_id"}),)),
    Verb("artifact_put", ("artifact_put",), (("by", "created_by"),), ("kind", "content"),
         (frozenset({"kind", "content", "created_by"}),)),
    Verb("patch_submit", ("patch_submit",), (("diff", "content"),), ("content",), (frozenset({"diff"}),)),
)
USAGE: Final = ("'PATCH SUBMIT content: correlation_id:'", "'ARTIFACT PUT|GET'")
FIELDS: Final = {"palace_coordinate": {"artifact_id": "string", "kind": "string", "content": "string"}}
