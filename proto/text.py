"""Text from elsewhere, made safe to print: names and reasons that peers, clients or files supply.

Owns: ``printable``, which every log line and human message uses for a value it did not write
itself (a peer's daemon name, a goodbye reason, an mDNS instance name, an id it was sent). A
hostile value must not forge log lines (newlines), rewrite a terminal (ANSI escapes), hide in
invisible characters or fill the log (length). Pure: stdlib only.
"""

from __future__ import annotations

import unicodedata
from typing import Any, Final

__all__ = ["printable"]

# Why 120: a daemon name, an id or a short reason fits; anything longer is cut with a mark.
DEFAULT_MAX_CHARS: Final = 120
# Unicode categories shown escaped: controls, format characters (bidi overrides, zero-width),
# surrogates, private use, unassigned, line/paragraph separators, and every space but " " (a
# no-break or an em space passes for a plain one: str.isprintable says no to them too).
_UNSAFE_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})


def printable(value: Any, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """``value`` as one line of visible text: unsafe characters as ``\\xNN``/``\\uNNNN`` escapes,
    cut to ``max_chars`` characters (marked with ``…``). Bytes are shown as their repr."""
    text = value if isinstance(value, str) else repr(value)
    out: list[str] = []
    length = 0
    for ch in text:
        piece = ch
        if ch != " " and unicodedata.category(ch) in _UNSAFE_CATEGORIES:
            code = ord(ch)
            piece = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
        if length + len(piece) > max_chars:
            out.append("…")
            break
        out.append(piece)
        length += len(piece)
    return "".join(out)
