"""Runs of a headless harness on tasks: ``task launch``, and the worker that launches them.

This package's declaration (``FEATURE``) is all the core reads of it; the modules it names are
imported when what they do is used. Standard library only (``palacectl.feature``).
"""

from __future__ import annotations

from typing import Final

from ...feature import Feature

__all__ = ["FEATURE"]

FEATURE: Final = Feature(
    name="worker", builds_on=("tasks", "usage", "artifacts", "approvals"),
    cli=f"{__name__}.cli",
)
