"""The palacectl application: the core's commands and every feature's put together, and ``main``
(exit codes, no tracebacks).

Owns: the root typer app and its global ``--home`` option; the core's commands and groups (the
log's, the daemon's status and digest, the harness's rules and mcp, inbox and session, bench,
notify); ``build_app``, which adds each feature's (``palacectl.features``: a feature's ``cli``
module names its commands, hidden commands, groups and sub-commands of another's group) in the
order ``palacectl --help`` lists them (``Features.help_order``), refusing a name claimed twice;
and ``main``: run one command line and turn every expected failure into one line (or one JSON
error) and a documented exit code (``palacectl.output``). The command modules know nothing of
this one: each imports ``cli.common`` and defines plain functions (a top-level command) or a typer
app of its own (a group). This module names no feature.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Final, Optional, cast

import typer

from .. import output
from ..feature import Features, load
from ..features import features as registry
from ..loop import guarded
from ..output import EXIT_OK, EXIT_USAGE
from . import bench, common, harness, log, notify, session, status

__all__ = ["CORE_COMMANDS", "CORE_GROUPS", "application", "build_app", "main"]  # and ``app``

#: the core's top-level commands (each feature's are its ``cli`` module's ``COMMANDS``)
CORE_COMMANDS: Final[dict[str, Callable[..., Any]]] = {
    "status": status.status, "append": log.append, "list": log.list_, "wait": log.wait, "watch": log.watch,
    "ack": log.ack, "redact": log.redact, "digest": status.digest, "rules": harness.rules, "mcp": harness.mcp,
}
#: the core's groups of sub-commands, each a typer app of its module
CORE_GROUPS: Final[dict[str, typer.Typer]] = {
    "inbox": session.inbox_app, "session": session.session_app, "bench": bench.bench_app, "notify": notify.notify_app,
}


def _global_options(
    home: Annotated[Optional[Path], typer.Option("--home", help="Palace home (default: $PALACE_HOME, else ~/.palace).")] = None,
) -> None:
    common.set_home(home)


def build_app(features: Features) -> typer.Typer:
    """palacectl's typer app: the core's commands and ``features``'.

    Raises:
        ValueError: two features (or a feature and the core) declare one command or group, or a
            feature adds a sub-command to a group nobody declares.
    """
    app = typer.Typer(
        name="palacectl", add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
        rich_markup_mode=None, help="Talk to the local palaced: the coordination log of a fleet of agents.",
    )
    app.callback()(_global_options)
    commands: dict[str, Callable[..., Any]] = dict(CORE_COMMANDS)
    groups: dict[str, typer.Typer] = dict(CORE_GROUPS)
    hidden: dict[str, Callable[..., Any]] = {}
    owner = dict.fromkeys([*commands, *groups], "the core")
    added: list[tuple[str, str, dict[str, Callable[..., Any]]]] = []
    for feature in features:
        if feature.cli is None:
            continue
        module = load(feature.cli)
        tables = ((module.COMMANDS, commands), (getattr(module, "HIDDEN", {}), hidden), (module.GROUPS, groups))
        for table, into in tables:
            for name, thing in table.items():
                if name in owner:
                    raise ValueError(f"{owner[name]} and feature {feature.name} both declare the command {name!r}")
                owner[name] = f"feature {feature.name}"
                into[name] = thing
        added.extend((feature.name, group, subs) for group, subs in getattr(module, "SUBCOMMANDS", {}).items())
    for name in features.ordered(list(commands), features.help_order):
        app.command(name)(commands[name])
    for name, function in hidden.items():
        app.command(name, hidden=True)(function)
    for feature_name, group, subs in added:
        if group not in groups:
            raise ValueError(f"feature {feature_name} adds to the group {group!r}, which nobody declares")
        _add_subcommands(groups[group], subs, feature_name)
    for name in features.ordered(list(groups), features.help_order):
        app.add_typer(groups[name], name=name)
    return app


def _add_subcommands(group: typer.Typer, subs: dict[str, Callable[..., Any]], feature_name: str) -> None:
    """``subs`` added to another's ``group`` (once: a second app built from the same features finds
    them there already)."""
    present = {info.name: info.callback for info in group.registered_commands}
    for name, function in subs.items():
        if name not in present:
            group.command(name)(function)
        elif present[name] is not function:
            raise ValueError(f"feature {feature_name} adds {name!r} to a group that has one")


_built: list[typer.Typer] = []


def application() -> typer.Typer:
    """palacectl's app, with palacectl's features (``palacectl.features``), built at its first use:
    a feature's command module imports ``cli.common``, so the app cannot be built while this
    package is first imported (by that very module, in a test)."""
    if not _built:
        _built.append(build_app(registry()))
    return _built[0]


def __getattr__(name: str) -> Any:
    if name == "app":  # ``app`` is ``application()``'s
        return application()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- entry point --------------------------------------------------------------------------------

_UsageError = cast("type[Exception]", next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"))


def main(argv: list[str] | None = None, *, app: typer.Typer | None = None) -> int:
    """Run palacectl (``app``: another one ``build_app`` made, a test's); returns the exit code
    (never a traceback for expected failures)."""
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in args
    command = typer.main.get_command(app or application())

    def run() -> int:
        # What only the framework raises is mapped here; the rest as for the loop's quick path.
        try:
            rv = command.main(args=args, prog_name="palacectl", standalone_mode=False)
        except _UsageError as exc:
            output.report_error(exc.format_message() if hasattr(exc, "format_message") else str(exc), "usage",
                                as_json=as_json)
            return EXIT_USAGE
        except typer.Abort:
            sys.stderr.write("Stopped.\n")
            return output.EXIT_INTERRUPTED
        if rv == output.EXIT_INTERRUPTED:
            # typer turns Ctrl-C into exit 130 itself; say so, as the watch contract promises.
            sys.stderr.write("Stopped.\n")
        return rv if isinstance(rv, int) else EXIT_OK

    return guarded(run, as_json=as_json)
