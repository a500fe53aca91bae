"""printable (palace_proto.text): values from peers and clients as one visible line in logs."""

from __future__ import annotations

import pytest

from palace_proto.text import printable


@pytest.mark.parametrize(("value", "expected"), [
    ("laptop", "laptop"),
    ("two\nlines", "two\\x0alines"),
    ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
    ("bidi\u202eevil", "bidi\\u202eevil"),
    ("zero\u200bwidth", "zero\\u200bwidth"),
    ("lone\ud800", "lone\\ud800"),
    ("ünïcode ✓", "ünïcode ✓"),
    ("no\u00a0break em\u2003space", "no\\xa0break em\\u2003space"),  # spaces that pass for " "
    (b"bytes", "b'bytes'"),
])
def test_unsafe_characters_are_escaped(value, expected):
    assert printable(value) == expected


def test_long_values_are_cut_with_a_mark():
    assert printable("x" * 500, 10) == "x" * 10 + "…"
    assert printable("\n" * 10, 9) == "\\x0a\\x0a…"  # an escape is never cut in half
