"""The event filters of list, wait and subscribe (watch): one table of their names.

Owns: which filters there are and what each is called: on the wire (plural, each a list meaning
OR: ``to_agents``), as clients offer it (singular: ``--to-agent``, the dashboard's ``to_agent``
query parameter) and the event field it tests; and ``filter_args``, which builds a request's
filter arguments from the options given. ``validation.ListQuery`` reads the same table on the
daemon's side (``from_wire``, ``to_wire``, ``matches``, ``describe``), so list, wait and watch
share one definition at both ends (proto/PROTOCOL.md §3.1).

Its own module, like ``bounds``: a client's loop step builds its filters without importing
``validation`` (its dataclasses and regular expressions are a good part of a step's start-up;
issue 26, tests/e2e/test_cli_quick.py). Pure: imports nothing that does IO, and nothing heavy.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from .event_fields import FILTERED_FIELDS

__all__ = ["FILTER_FIELDS", "FILTER_OPTIONS", "filter_args"]

#: list/wait/watch filters: wire name (plural, each a list meaning OR) -> event field: the table's
#: filters (``palace_proto.event_fields``), and two that exclude instead.
FILTER_FIELDS: Final = {**FILTERED_FIELDS, "exclude_from_agents": "from_agent", "exclude_types": "type"}

#: a filter as clients offer it (singular: ``--to-agent``, MCP's ``to_agent``) -> its wire name.
#: ``exclude_types`` has no option: only ``watch --agent`` sets it (a fleet watcher sleeps through
#: status announcements), never a person.
FILTER_OPTIONS: Final = {**{field: plural for plural, field in FILTERED_FIELDS.items()},
                         "exclude_from_agent": "exclude_from_agents"}


def filter_args(**given: str | Iterable[str] | None) -> dict[str, list[str]]:
    """The filter arguments of a ``list``, ``wait`` or ``subscribe`` request.

    Args:
        given: options by their singular names (``FILTER_OPTIONS``), each one value or several
            (OR). ``None``, ``""`` and no values leave the filter out: it matches any event.

    Returns:
        wire name -> the values as given (the daemon cleans and checks them), in the order given.

    Raises:
        TypeError: an option that is not a filter (a caller's mistake).
    """
    out: dict[str, list[str]] = {}
    for name, value in given.items():
        wire = FILTER_OPTIONS.get(name)
        if wire is None:
            raise TypeError(f"{name!r} is not an event filter; the filters are {', '.join(FILTER_OPTIONS)}")
        if value is None or value == "":
            continue
        values = [value] if isinstance(value, str) else list(value)
        if values:
            out[wire] = values
    return out
