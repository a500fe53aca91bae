"""A toy feature of palacectl, a test's: toys counted in boxes (the daemon's op ``toy_count``).

Everything it adds — a command group, an MCP tool in a group of its own, a light verb, a command on
the loop's quick path, a dashboard page — is declared here and defined in this package, and
``palacectl.features.features(extra=(FEATURE,))`` is all it takes to have palacectl serve it
(tests/ctl/test_features.py). Standard library only, as every declaration.
"""

from __future__ import annotations

from typing import Final

from palacectl.feature import Feature, Page, Quick

__all__ = ["FEATURE"]

FEATURE: Final = Feature(
    name="toy", builds_on=(),
    cli=f"{__name__}.cli",
    tools={"toys": ("mempalace_toy_count",)},
    tools_module=f"{__name__}.tools",
    light=f"{__name__}.light",
    quick={("toy", "count"): Quick({"--box": ("box", "str")}, (), ("box",), f"{__name__}.cli:count_body")},
    ui=f"{__name__}.page",
    script=f"{__name__}:page.js",
    pages=(Page("toys", "Toys"),),
)
