"""The event fields a patch is announced with (``patch submit``, ``mempalace_patch_submit``).

Owns ``PATCH_FIELDS``: the append's fields (``palacectl.event_options``) that delivering a patch
takes, which the command and the MCP tool offer. Stdlib and ``palace_proto`` only.
"""

from __future__ import annotations

from typing import Final

from ...event_options import APPEND_FIELDS

__all__ = ["PATCH_FIELDS"]

# Why not these: the daemon's patch_submit writes the type and the status itself (patch.ready,
# ready), and attaches the patch it stores.
_WRITTEN_BY_SUBMIT: Final = frozenset({"type", "status", "artifact_ids"})
#: The fields a patch's announcement takes from its sender, in the append's order.
PATCH_FIELDS: Final = tuple(f for f in APPEND_FIELDS if f.option not in _WRITTEN_BY_SUBMIT)
