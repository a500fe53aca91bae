"""Write the benchmark tables into the docs from the saved results (``benchmarks/results/``).

Usage: ``python benchmarks/render_tables.py [--check]`` from a checkout with palace installed.
The tables and the figures quoted from them are ``palace_bench.tables``' renderers; this script
only puts them between their markers (``palacectl.reference.regenerate``): a script because the
benchmark package and palacectl's modules must not import each other. ``--check`` changes nothing
and exits 1 naming each stale part, as ``tests/test_docs_generated.py`` does.
"""

from __future__ import annotations

import sys

from palace_bench.tables import REGENERATE, RENDERERS, RESULTS
from palacectl.reference import regenerate


def main(argv: list[str] | None = None) -> int:
    return regenerate(REGENERATE, "Write the benchmark tables into the docs (between their generated:bench-… "
                      f"markers) from {RESULTS}.", RENDERERS, argv)


if __name__ == "__main__":
    sys.exit(main())
