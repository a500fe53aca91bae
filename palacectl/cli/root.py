"""The palacectl application: every command put together, and ``main`` (exit codes, no tracebacks).

Owns: the root typer app and its global ``--home`` option, the command table (which function is
which top-level command, in the order ``palacectl --help`` lists them), the groups added under
their names, and ``main``: run one command line and turn every expected failure into one line
(or one JSON error) and a documented exit code (``palacectl.output``). The command modules know
nothing of this one: each imports ``cli.common`` and defines plain functions (a top-level
command) or a typer app of its own (a group), and this module registers them explicitly.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from .. import output
from ..loop import guarded
from ..output import EXIT_OK, EXIT_USAGE
from . import (agents, artifacts, backup, bench, common, export, guard, harness, leases, log, memory, notify, palace,
               permissions, questions, service, session, tasks, ui, usage)
from . import rooms

__all__ = ["app", "main"]

app = typer.Typer(
    name="palacectl", add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    rich_markup_mode=None, help="Talk to the local palaced: the coordination log of a fleet of agents.",
)


@app.callback()
def _global_options(
    home: Annotated[Optional[Path], typer.Option("--home", help="Palace home (default: $PALACE_HOME, else ~/.palace).")] = None,
) -> None:
    common.set_home(home)


# Top-level commands, in the order `palacectl --help` lists them (the groups follow).
COMMANDS: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("status", palace.status),
    ("append", log.append),
    ("list", log.list_),
    ("wait", log.wait),
    ("watch", log.watch),
    ("ack", log.ack),
    ("redact", log.redact),
    ("ask", questions.ask),
    ("answer", questions.answer),
    ("questions", questions.questions),
    ("usage", usage.usage),
    ("init", palace.init),
    ("invite", palace.invite),
    ("join", palace.join),
    ("revoke", palace.revoke),
    ("doctor", palace.doctor),
    ("digest", palace.digest),
    ("who", palace.who),
    ("rules", harness.rules),
    ("mcp", harness.mcp),
    ("backup", backup.backup),
    ("restore", backup.restore),
    ("export", export.export),
    ("import", export.import_),
    ("remember", memory.remember),
    ("search", memory.search),
    ("agents", agents.agents),
    ("tunnels", memory.tunnels),
    ("worker", tasks.worker),
    ("ui", ui.ui),
)
# Commands that programs run, never people: left out of `palacectl --help`.
HIDDEN_COMMANDS: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("approve-hook", permissions.approve_hook),
)
# Groups of sub-commands, each a typer app of its module.
GROUPS: tuple[tuple[str, typer.Typer], ...] = (
    ("artifact", artifacts.artifact_app),
    ("patch", artifacts.patch_app),
    ("task", tasks.task_app),
    ("agent", agents.agent_app),
    ("inbox", session.inbox_app),
    ("session", session.session_app),
    ("lease", leases.lease_app),
    ("guard", guard.guard_app),
    ("peers", palace.peers_app),
    ("bench", bench.bench_app),
    ("kg", memory.kg_app),
    ("diary", memory.diary_app),
    ("memory", memory.memory_app),
    ("service", service.service_app),
    ("notify", notify.notify_app),
    ("room", rooms.room_app),
)


def _assemble() -> None:
    for name, function in COMMANDS:
        app.command(name)(function)
    for name, function in HIDDEN_COMMANDS:
        app.command(name, hidden=True)(function)
    for name, group in GROUPS:
        app.add_typer(group, name=name)


_assemble()


# -- entry point --------------------------------------------------------------------------------

_UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def main(argv: list[str] | None = None) -> int:
    """Run palacectl; returns the exit code (never a traceback for expected failures)."""
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in args
    command = typer.main.get_command(app)

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
