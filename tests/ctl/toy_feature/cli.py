"""The toy feature's commands: ``palacectl toy count --box NAME`` (also on the loop's quick path)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Final

import typer

from palacectl.cli.common import JsonOpt, current_home
from palacectl.loop import call
from palacectl.output import EXIT_OK, emit

toy_app = typer.Typer(no_args_is_help=True, help="Toys: count the toys in a box.")


def count_body(home: Path, o: dict[str, Any]) -> int:
    result = call(home, "toy_count", box=o["box"])
    emit(result, o.get("json"), f"{result['count']} toys in {result['box']}")
    return EXIT_OK


@toy_app.command("count")
def count(box: Annotated[str, typer.Option("--box", help="Which box.")], json_: JsonOpt = False) -> None:
    """How many toys a box holds."""
    raise typer.Exit(count_body(current_home(), {"box": box, "json": json_}))


COMMANDS: Final = {}
GROUPS: Final = {"toy": toy_app}
