"""The API's numeric bounds that clients apply too: list page sizes and wait timeouts.

Owns: these four numbers, and nothing else. ``validation`` enforces them (and re-exports them);
a client caps what it sends by them before a request, so a huge ``--limit`` is not a number
msgpack cannot carry. Its own module so that a client's start-up needs no more than this
(issue 26: palacectl's loop commands). Pure, imports nothing.
"""

from __future__ import annotations

# Why these: MemPalace's defaults (reference §1.4-1.6, §3.1-3.2); agents already tuned to them.
DEFAULT_LIST_LIMIT = 50
MAX_LIST_LIMIT = 500
DEFAULT_WAIT_TIMEOUT_MS = 60_000
MAX_WAIT_TIMEOUT_MS = 300_000
