"""Write the benchmark tables into the docs from the saved results (``benchmarks/results/``).

Usage: ``python benchmarks/render_tables.py [--check]`` from a checkout with palace installed.
The tables and the figures quoted from them are ``palace_bench.tables``' renderers; this script
only puts them between their markers (``palacectl.reference.update_docs``): a script because the
benchmark package and palacectl's modules must not import each other. ``--check`` changes nothing
and exits 1 naming each stale part, as ``tests/test_docs_generated.py`` does.
"""

from __future__ import annotations

import argparse
import sys

from palace_bench.tables import REGENERATE, RENDERERS, RESULTS
from palacectl.reference import update_docs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=REGENERATE, description=(
        f"Write the benchmark tables into the docs (between their generated:bench-… markers) from {RESULTS}."))
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a part is stale")
    args = parser.parse_args(argv)
    stale = update_docs(RENDERERS, check=args.check)
    for part in stale:
        sys.stdout.write(f"{'stale' if args.check else 'rewritten'}: {part}\n")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
