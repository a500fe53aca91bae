"""Running one external command for ``palacectl service``: output captured, a bound on its time,
and every way it can fail turned into one error line.

Owns: ``run_command`` (the one place palacectl service starts a process; tests replace it with a
fake service manager), ``run_checked`` (a command that must succeed) and the text helpers that
name a command in messages. Knows nothing of systemd or launchd (that is ``managers``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Final

from ..output import fail

__all__ = ["COMMAND_TIMEOUT_S", "command_text", "one_line", "run_checked", "run_command"]

# Why 30 s: systemctl and launchctl answer in milliseconds, and a start job (Type=exec) ends once
# palaced is exec'd; the limit only turns a hung service manager into an error line.
COMMAND_TIMEOUT_S: Final = 30.0


def one_line(text: str, width: int = 300) -> str:
    """A command's output flattened to one line of at most ``width`` characters, for a message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def command_text(argv: Sequence[str]) -> str:
    """The command as a shell would show it (quoted where needed)."""
    import shlex

    return shlex.join(argv)


def run_command(argv: Sequence[str], *, timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run one command, capturing its output; a missing program or a hang becomes one error line."""
    try:
        return subprocess.run(list(argv), check=False, capture_output=True, text=True, errors="replace",
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        fail(f"`{argv[0]}` is not installed (or not on PATH)")
    except subprocess.TimeoutExpired:
        fail(f"`{command_text(argv)}` did not finish within {timeout:.0f} s")
    except OSError as exc:
        fail(f"cannot run `{command_text(argv)}`: {exc.strerror or exc}")


def run_checked(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run a command that must succeed; a failure is one line naming the command and its stderr."""
    proc = run_command(argv)
    if proc.returncode != 0:
        fail(f"`{command_text(argv)}` failed (exit {proc.returncode}): "
             f"{one_line(proc.stderr or proc.stdout) or 'no message'}")
    return proc
