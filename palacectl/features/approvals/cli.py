"""palacectl's command behind a launched run's permission hook: ``approve-hook`` (not for people).

Owns the command line of ``approve_hook`` — what Gemini CLI runs before each tool call of a run
palace launched (its settings file names it, with the run's agent, task, runner and the harness's
limit on the hook) — and nothing else: the hook reads the request on stdin and prints one decision,
a deny whenever anything fails. Hidden from ``palacectl --help``. The root registers what
``COMMANDS`` and ``GROUPS`` name."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Final, Optional

import typer

from ...cli.common import current_home

__all__ = ["COMMANDS", "GROUPS", "HIDDEN", "approve_hook"]


def approve_hook(
    harness: Annotated[str, typer.Option("--harness", help="The harness running the hook: gemini.")],
    agent: Annotated[str, typer.Option("--agent", help="The run's agent (who asks a person).")],
    task: Annotated[Optional[str], typer.Option("--task", help="The task the run works on.")] = None,
    runner: Annotated[Optional[str], typer.Option("--runner", help="Whose [permissions.RUNNER] applies.")] = None,
    within: Annotated[int, typer.Option("--within", min=1, help="Seconds the harness waits for the hook; palace "
                                                                "answers before (default: Gemini's 60).")] = 60,
) -> None:
    """What a launched run's permission hook runs (not for people): read the request, print the decision."""
    from .approve_hook import run_hook

    stdin = None if sys.stdin is None else getattr(sys.stdin, "buffer", None)
    raise typer.Exit(run_hook(current_home(), harness=harness, agent=agent, task=task, runner=runner,
                              within_s=within, stdin=stdin, stdout=sys.stdout))


COMMANDS: Final[dict[str, Callable[..., None]]] = {}
GROUPS: Final[dict[str, typer.Typer]] = {}
HIDDEN: Final = {"approve-hook": approve_hook}
