"""Content-addressed artifacts and the patches delivered with them.

This package's declaration (``FEATURE``) is all the core reads of it; the modules it names are
imported when what they do is used. Standard library only (``palacectl.feature``).
"""

from __future__ import annotations

from typing import Final

from ...feature import Feature

__all__ = ["FEATURE"]

FEATURE: Final = Feature(
    name="artifacts", builds_on=(),
    cli=f"{__name__}.cli",
    tools={"core": ("mempalace_patch_submit", "mempalace_artifact_get"), "log": ("mempalace_artifact_put",)},
    tools_module=f"{__name__}.tools",
    light=f"{__name__}.light",
    ui=f"{__name__}.page",
)
