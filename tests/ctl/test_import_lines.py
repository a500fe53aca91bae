"""How ``palacectl import`` reads a file (palacectl/cli/export.py): one bounded line at a time, so
a hostile or broken file cannot make it hold more than ``MAX_LINE_BYTES`` at once (issue 11,
finding 10: the whole file is read twice instead of held)."""

from __future__ import annotations

import io

import pytest

from palacectl.features.archive import export as export_cli


def test_a_line_over_the_bound_is_read_past_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export_cli, "MAX_LINE_BYTES", 16)
    source = io.BytesIO(b"short\n" + b"x" * 100 + b"\n" + b"after\n" + b"y" * 40)
    reads: list[int] = []
    real_readline = source.readline

    def bounded(limit: int = -1) -> bytes:
        reads.append(limit)
        return real_readline(limit)

    source.readline = bounded  # type: ignore[method-assign]
    assert list(export_cli._lines(source)) == [(1, b"short\n"), (2, None), (3, b"after\n"), (4, None)]
    assert all(0 < limit for limit in reads)  # never an unbounded readline
