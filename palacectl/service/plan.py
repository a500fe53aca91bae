"""What ``palacectl service install`` will do, worked out before anything is touched.

Owns: ``InstallPlan`` (the platform, the file and its rendered content, how it compares with what
is installed, the home, the palaced command, the log folder, and the service-manager steps) and
``plan_install``, which builds one by reading only: a dry run prints it, install carries it out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
# NamedTuple rather than dataclasses: a dataclass costs ~0.5 ms to create, and this is a plain value.
from typing import Any, NamedTuple

from ..output import fail
from . import host, managers, templates
from .host import Platform
from .managers import Existing, Step

__all__ = ["InstallPlan", "existing_file", "plan_install"]


class InstallPlan(NamedTuple):
    """Everything install will do, worked out without touching anything."""

    platform: Platform
    path: Path
    content: str
    existing: Existing
    home: Path
    palaced: list[str]
    log_dir: Path | None
    steps: list[Step]

    def to_json(self, *, dry_run: bool, steps: Sequence[Step]) -> dict[str, Any]:
        return {"platform": self.platform, "dry_run": dry_run, "path": str(self.path), "existing": self.existing,
                "home": str(self.home), "palaced": self.palaced,
                "log_dir": None if self.log_dir is None else str(self.log_dir),
                "commands": [s.to_json() for s in steps], "content": self.content}


def existing_file(path: Path, content: str) -> Existing:
    """How the file at ``path`` compares with ``content`` (a read failure is one error line)."""
    try:
        current = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}")
    return "identical" if current == content else "different"


def plan_install(platform: Platform, home: Path, *, filesystem_sandbox: bool = True) -> InstallPlan:
    """The plan for running palaced on ``home`` (absolute) under ``platform``'s service manager."""
    palaced, path = host.palaced_command(), host.service_file(platform)
    log_dir = host.launchd_log_dir() if platform == "launchd" else None
    content = (templates.render_systemd_unit(palaced, home, filesystem_sandbox=filesystem_sandbox)
               if log_dir is None else templates.render_launchd_plist(palaced, home, log_dir))
    existing = existing_file(path, content)
    return InstallPlan(platform, path, content, existing, home, palaced, log_dir,
                       managers.install_steps(platform, existing, path))
