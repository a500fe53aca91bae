"""What every palacectl command module shares: the home in use, one request to the daemon, the
common options, reading a file or stdin byte-exactly, and printing a page of events.

Owns: the ``--home`` chosen by the root callback (``set_home`` / ``current_home``), ``call_daemon``
(one request; absent arguments left out), the ``--json`` option and the other ``Annotated``
aliases more than one group uses; ``UsageProblem`` (exit 64) and the input helpers
(``read_input``, ``decode_utf8``, ``text_or_file``, ``parse_metadata``) are ``palacectl.loop``'s,
named here for the command modules (the loop's quick path shares them without typer); and the
options built from tables (issue 44 §3): ``with_options`` gives a command a table's options
besides its own (typer reads a command's parameters from ``inspect.signature``, which honours
``__signature__``), ``field_option`` an event field's (``palacectl.event_options``: ``--to-agent``;
a list one value at a time, ``--artifact-id``), ``EVENT_FILTERS`` the event filters of list, wait
and watch (``palace_proto.filters``: ``--stream``, …, each repeatable for OR). Command modules import
this module and ``palacectl.output``; none imports another command module or ``cli.root`` (the
root imports them all, so an import back would be a cycle).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, Final, Optional, TypeVar

import typer

from palace_proto.event_fields import EventField
from palace_proto.filters import FILTER_OPTIONS

from ..client import home_from
from ..event_options import dest, flag
from ..loop import (
    UsageProblem,
    call,
    capped,
    decode_utf8,
    parse_metadata,
    print_events,
    read_input,
    text_or_file,
)

__all__ = [
    "EVENT_FILTERS", "JsonOpt", "Multi", "UsageProblem", "call_daemon", "capped", "current_home", "decode_utf8",
    "field_option", "option", "parse_metadata", "print_events", "read_input", "set_home", "text_or_file",
    "with_options",
]

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
# A repeatable option: each value is one more alternative (OR).
Multi = Optional[list[str]]

# The global --home of this invocation (None: $PALACE_HOME, else ~/.palace). main() runs once per
# process, or once per call in tests: the root callback sets it every time.
_state: dict[str, Path | None] = {"home": None}


def set_home(home: Path | None) -> None:
    """Record the global ``--home`` (the root callback's job)."""
    _state["home"] = home_from(home)


def current_home() -> Path:
    """The palace home this invocation works on."""
    return _state["home"] or home_from(None)


def call_daemon(op: str, **args: Any) -> Any:
    """One request to the daemon on the current home; arguments that are None are left out (the
    daemon applies its defaults). Its errors propagate to ``main``, which maps them to exit codes."""
    return call(current_home(), op, **args)


# -- options from tables ------------------------------------------------------------------------

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
    for name in FILTER_OPTIONS)


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
