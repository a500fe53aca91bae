"""Artifacts as a feature of the local API: content-addressed bytes (patches, logs) and the patch a
run delivers.

Owns: the declaration of the artifacts feature (its operations); what an artifact and a patch are
is ``palace_proto.validation`` and ``palace_proto.ids`` (the core's: every event may name
artifacts). Artifacts have no event type of their own (a patch is ``patch.ready``, the agents'
words: its status on a task is the task's rows'), so no row of the authority table. Pure.
"""

from __future__ import annotations

from typing import Final

from .authority import Rule

__all__ = ["NAMESPACE", "OPS", "RULES"]

#: the local API's operations of artifacts
OPS: Final = frozenset({"artifact_put", "artifact_get", "patch_submit"})
#: none: artifacts have no event type of their own
NAMESPACE: Final = None
RULES: Final[tuple[Rule, ...]] = ()
