"""What a feature of palacectl declares, and what the core asks of all of them together.

Owns: ``Feature`` — one object per feature (``palacectl/features/<name>/__init__.py``, the
daemon's nine and palacectl's own), naming everything it adds: its commands (the module holding
them), its MCP tools by group (and the module defining them) and what it runs beside them for a
client of a capability, its MemPalace "light" verbs, its
commands on the loop's quick path, its dashboard pages (the module answering their routes, the
script drawing them, the nav entries) and the features it builds on; ``Quick`` and ``Page``, two
of those parts; and ``Features``, the set palacectl runs with (``palacectl.features.features()``),
checked once and handed to the core, with the orders people and models see things in.

The core never imports a feature: the command line's root, the MCP server, ``tool_sets``,
``light``, the loop and the dashboard each ask ``Features`` for what the features declared and
put it together themselves (each checks its part: two features claiming one command or tool fail
there, at import). A feature may import one it builds on (worker → tasks), named in its
``builds_on``; ``Features`` checks each is there.

A declaration is data, and cheap: this module and every ``features/<name>/__init__.py`` import
the standard library only, so ``tool_sets`` answers ``--tools`` and the loop its quick commands
before anything heavy is loaded. What a declaration names — a module, a ``module:function`` — is
imported by the one part of palacectl that runs it, when it does (``load``).

Must not import: any other palacectl module (everything imports this), typer, trio.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, NamedTuple

__all__ = ["Feature", "Features", "Page", "Quick", "load"]

_NONE: Final[Mapping[Any, Any]] = types.MappingProxyType({})


class Quick(NamedTuple):
    """A command the loop runs without typer (``palacectl.loop``): its words, options and body.

    ``options`` maps each option (``--agent``) to its name in the parsed options and its kind
    (``str``, ``int``, ``multi``, ``flag``); ``--json`` is every quick command's. ``run`` is the
    body, ``"module:function"`` (home, parsed options) -> exit code, imported when it runs.
    """

    options: Mapping[str, tuple[str, str]]
    positionals: tuple[str, ...]
    required: tuple[str, ...]
    run: str


class Page(NamedTuple):
    """A dashboard page in the nav: ``#/<name>``, drawn by its feature's script, titled ``title``."""

    name: str
    title: str


class Feature(NamedTuple):
    """One feature of palacectl, as it declares itself to the core (see the module docstring).

    Every module is named in full (``palacectl.features.rooms.cli``), so a test's feature can live
    anywhere; a ``"module:function"`` names one function of a module.
    """

    name: str
    #: the features it uses (it imports them, or draws with their pages' parts)
    builds_on: tuple[str, ...] = ()
    #: its typer commands: a module with ``COMMANDS`` (name -> function), ``GROUPS`` (name ->
    #: typer app) and, where it has them, ``HIDDEN`` (commands left out of --help) and
    #: ``SUBCOMMANDS`` (a group another feature or the core declares -> name -> function)
    cli: str | None = None
    #: its MCP tools: group -> their names, in the order they are listed (``tool_sets``)
    tools: Mapping[str, tuple[str, ...]] = _NONE
    #: the module defining them (``mcp_tools.tool``) and its resources (``mcp_tools.resource``)
    tools_module: str | None = None
    #: its groups ``--tools all`` leaves out (they serve palace's own runs)
    not_in_all: frozenset[str] = frozenset()
    #: its MemPalace light verbs: a module (``palacectl.light`` says what it may hold)
    light: str | None = None
    #: its commands on the loop's quick path: their words -> how to run them
    quick: Mapping[tuple[str, ...], Quick] = _NONE
    #: its dashboard part: a module with ``ROUTES`` (``palacectl.ui.app`` says what they are)
    ui: str | None = None
    #: its pages' script, ``"package:file"``: served as ``/static/<name>.js`` after the frame's
    script: str | None = None
    #: its pages in the dashboard's nav
    pages: tuple[Page, ...] = ()
    #: ``"module:function"``: (agent) -> the other addressees a watch of ``agent`` wakes for
    watch_also: str | None = None
    #: what it runs beside its tools for an MCP session whose client declared a capability: the
    #: capability (``elicitation``) -> ``"module:function"``, an async (the server) -> None, run
    #: until the session ends (``mcp_adapter.PalaceMCP.serve_background``)
    mcp_services: Mapping[str, str] = _NONE


def load(ref: str) -> Any:
    """The module ``ref`` names, or its function when ``ref`` is ``"module:function"``."""
    module, _, name = ref.partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, name) if name else loaded


class Features:
    """The features palacectl runs with, in the order they answer the core's questions, and the
    orders of what people and models see: ``help_order`` (commands and groups of ``--help``),
    ``nav_order`` (the dashboard's pages), ``tool_groups`` (the MCP groups). What an order does
    not name follows what it names, in the features' order.

    Raises:
        ValueError: two features of one name, a feature building on one that is not there, or
            two claiming one quick command or one page.
    """

    def __init__(self, features: Sequence[Feature], *, help_order: Sequence[str] = (),
                 nav_order: Sequence[str] = (), tool_groups: Sequence[str] = ()) -> None:
        self.all: tuple[Feature, ...] = tuple(features)
        self.help_order, self.nav_order, self.tool_groups = tuple(help_order), tuple(nav_order), tuple(tool_groups)
        self._by_name: dict[str, Feature] = {}
        self._memo: dict[str, Any] = {}
        for feature in self.all:
            if feature.name in self._by_name:
                raise ValueError(f"two features are named {feature.name!r}")
            self._by_name[feature.name] = feature
        for feature in self.all:
            missing = [base for base in feature.builds_on if base not in self._by_name or base == feature.name]
            if missing:
                raise ValueError(f"feature {feature.name} builds on {', '.join(missing)}: not a feature here")
        self._claimed("quick command", lambda f: [" ".join(words) for words in f.quick])
        self._claimed("page", lambda f: [page.name for page in f.pages])

    def __repr__(self) -> str:
        return f"<Features {' '.join(self._by_name)}>"

    def __iter__(self) -> Iterator[Feature]:
        return iter(self.all)

    def __getitem__(self, name: str) -> Feature:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def _claimed(self, what: str, names_of: Callable[[Feature], Sequence[str]]) -> None:
        owner: dict[str, str] = {}
        for feature in self.all:
            for name in names_of(feature):
                if name in owner:
                    raise ValueError(f"features {owner[name]} and {feature.name} both declare the {what} {name!r}")
                owner[name] = feature.name

    def memo(self, key: str, build: Callable[[Features], Any]) -> Any:
        """What ``build`` makes of these features, made once (each part of the core keeps what it
        put together here: the tool sets, the light verbs, the quick commands)."""
        if key not in self._memo:
            self._memo[key] = build(self)
        return self._memo[key]

    @staticmethod
    def ordered(names: Sequence[str], order: Sequence[str]) -> list[str]:
        """``names`` in ``order``'s order; the ones it does not name after, as they came."""
        rank = {name: i for i, name in enumerate(order)}
        return sorted(names, key=lambda n: (rank.get(n, len(rank)), names.index(n)))

    def pages(self) -> list[tuple[Feature, Page]]:
        """Every feature's pages, in the nav's order."""
        found = [(feature, page) for feature in self.all for page in feature.pages]
        order = self.ordered([page.name for _, page in found], self.nav_order)
        return sorted(found, key=lambda pair: order.index(pair[1].name))
