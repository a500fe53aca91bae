"""Typer options built from tables: an event's fields (``palacectl.event_options``), the event
filters (``palace_proto.filters``) and a feature's arguments, added to a command's own.

Owns: ``with_options``, which gives a command the options of a table besides its own (typer reads
a command's parameters from ``inspect.signature``, which honours ``__signature__``); the command
gets them in its ``**`` parameter, under their names. And the two tables' options: ``field_option``
(an event field's: ``--to-agent``; a list one value at a time, ``--artifact-id``) and
``EVENT_FILTERS`` (``--stream``, …, each repeatable for OR). Imports ``cli.common`` and
``palacectl.event_options`` only.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Final, Optional, TypeVar

import typer

from palace_proto.event_fields import EventField
from palace_proto.filters import FILTER_OPTIONS as _FILTERS

from ..event_options import dest, flag
from .common import Multi

__all__ = ["EVENT_FILTERS", "field_option", "option", "with_options"]

F = TypeVar("F", bound=Callable[..., Any])
_KEYWORD: Final = inspect.Parameter.KEYWORD_ONLY


def option(name: str, annotation: Any, default: Any = None, *, required: bool = False) -> inspect.Parameter:
    """A command's parameter ``name``, of ``annotation`` (an ``Annotated[…, typer.Option(…)]``)."""
    return inspect.Parameter(name, _KEYWORD, default=inspect.Parameter.empty if required else default,
                             annotation=annotation)


def field_option(field: EventField, *, help: str | None = None, required: bool = False,
                 default: str | None = None) -> inspect.Parameter:
    """An event field's option, kept under ``event_options.dest``: text (a JSON object's too), or a
    list given one value at a time. ``help``: by default the table's."""
    said = field.help if help is None else help
    if field.wire == "ids":
        return option(dest(field), Annotated[Multi, typer.Option(flag(field), help=said)])
    kind = str if required else Optional[str]
    return option(dest(field), Annotated[kind, typer.Option(flag(field), help=said)], default, required=required)


# Why these helps: the filters' own words, as `list --help` has always said them.
_FILTER_HELP: Final = {"stream": "Repeat for OR.", "to_agent": "Matches the agent or * (broadcast)."}
#: The event filter options of list, wait and watch, by their names in ``palace_proto.filters``.
EVENT_FILTERS: Final = tuple(
    option(name, Annotated[Multi, typer.Option("--" + name.replace("_", "-"), help=_FILTER_HELP.get(name))])
    for name in _FILTERS)


def with_options(options: Iterable[inspect.Parameter], *, after: int = 0) -> Callable[[F], F]:
    """Give a command ``options`` besides its own parameters (placed after the first ``after`` of
    them), in its ``**`` parameter under their names; typer reads them from its signature."""
    def declare(fn: F) -> F:
        own = [p.replace(kind=_KEYWORD) for p in inspect.signature(fn, eval_str=True).parameters.values()
               if p.kind is not inspect.Parameter.VAR_KEYWORD]
        parameters = [*own[:after], *options, *own[after:]]
        fn.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        fn.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
        return fn
    return declare
