"""The service feature: palaced (and an agent's worker) under the user's service manager
(systemd --user on Linux, launchd on macOS).

Its folder is ``palacectl/service/`` rather than ``palacectl/features/service/``: the benchmarks
find palacectl's console script through ``service.host`` (tests/test_layering.py). The parts of
``palacectl service``, one concern a module; the commands themselves (typer, what they print,
asking palaced whether it answers) are ``cli``:

* ``host``: which service manager this operating system has, where its files go, and which
  ``palaced`` to run;
* ``templates``: the unit and plist templates shipped in ``palacectl/data/service/``, rendered
  for a home and a command;
* ``runner``: running one external command, a failure or a hang as one error line;
* ``managers``: what ``systemctl --user`` and ``launchctl`` are asked (probes, state, the steps of
  install and uninstall);
* ``plan``: what install will do (the file, its content, the steps), worked out by reading only.

Callers reach a sibling's functions through its module (``runner.run_command(...)``), never a
copied name, so a test replaces one function in one place. Must not import palaced (the service
runs the installed ``palaced`` console script) nor typer. This ``__init__`` holds the feature's
declaration (``FEATURE``) and imports nothing else: each command loads only the parts it uses.
"""

from __future__ import annotations

from typing import Final

from ..feature import Feature

__all__ = ["FEATURE"]

FEATURE: Final = Feature(name="service", builds_on=("worker",), cli=f"{__name__}.cli")
