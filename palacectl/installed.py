"""Which ``palaced`` and ``palacectl`` this installation runs: for a service, a hook, a benchmark.

Owns: finding an installed console script as an absolute command — the one beside this Python
(the installation this palacectl belongs to), else the one on ``PATH``, else ``python -m NAME`` —
for what starts palace's programs later, elsewhere: a service unit (``palacectl service``), a
harness's session-start hook (``palacectl rules --hooks``), a benchmark's client processes. Reads
the file system and the environment only.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

__all__ = ["palacectl_command", "palaced_command"]


def _installed_command(name: str) -> list[str]:
    """An installed console script as an absolute command: the one beside this Python (the
    installation this palacectl belongs to), else the one on PATH, else ``python -m <name>``."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside.absolute())]
    found = shutil.which(name)
    if found:
        return [str(Path(found).absolute())]
    return [str(Path(sys.executable).absolute()), "-m", name]


def palaced_command() -> list[str]:
    """The installed palaced as an absolute command (see ``_installed_command``)."""
    return _installed_command("palaced")


def palacectl_command() -> list[str]:
    """The installed palacectl as an absolute command, for a service or a hook (see ``_installed_command``)."""
    return _installed_command("palacectl")
