"""A launched run's permission requests, answered by this machine's policy or by a person.

This package's declaration (``FEATURE``) is all the core reads of it; the modules it names are
imported when what they do is used. Standard library only (``palacectl.feature``).
"""

from __future__ import annotations

from typing import Final

from ...feature import Feature

__all__ = ["FEATURE"]

FEATURE: Final = Feature(
    name="approvals", builds_on=("questions",),
    cli=f"{__name__}.cli",
    # only for a launched run's harness (its --permission-prompt-tool): never part of "all"
    tools={"approvals": ("approve",)}, not_in_all=frozenset({"approvals"}),
    tools_module=f"{__name__}.tools",
)
