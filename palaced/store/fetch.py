"""Rows out of apsw cursors, typed by their callers.

Owns: ``one_row`` (the row a query must return) and ``all_rows`` (every row). apsw types a fetched
row as a tuple of any SQLite values (``fetchone()`` as maybe None); the store's STRICT schema fixes
each column's type, so the function that runs a query says, in its own annotations, what its rows
hold. Synchronous and a leaf of the store: imports nothing of palace.
"""

from __future__ import annotations

from typing import Any

import apsw

__all__ = ["all_rows", "one_row"]


def one_row(cursor: apsw.Cursor) -> Any:
    """The row a query must return: an aggregate's (``count(*)``, ``max(...)``) or one the caller
    knows is there; no row is a broken invariant, not an answer."""
    row = cursor.fetchone()
    if row is None:  # pragma: no cover - an aggregate without GROUP BY returns exactly one row
        raise AssertionError("the query returned no row")
    return row


def all_rows(cursor: apsw.Cursor) -> list[Any]:
    """Every row of the query (``fetchall()``), each as the caller's annotation types it."""
    return cursor.fetchall()
