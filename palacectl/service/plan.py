"""What ``palacectl service install`` will do, worked out before anything is touched.

Owns: ``InstallPlan`` (the platform, the file and its rendered content, how it compares with what
is installed, the home, the command, the log folder, and the service-manager steps), ``Worker``
(what an agent's worker service runs) and ``plan_install``, which builds a plan for palaced or for
a worker by reading only: a dry run prints it, install carries it out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

# NamedTuple rather than dataclasses: a dataclass costs ~0.5 ms to create, and this is a plain value.
from typing import Any, Literal, NamedTuple

from ..output import fail
from . import host, managers, templates
from .host import Platform
from .managers import Existing, Step

__all__ = ["InstallPlan", "Worker", "existing_file", "plan_install", "worker_json"]


def worker_json(platform: Platform | None, agent: str, command: str = "worker") -> dict[str, Any]:
    """Which worker (or integrator) service (the ``"worker"`` of ``--json``): the agent, its slug,
    what it runs, and the unit (systemd) or label (launchd); neither where no service manager is
    supported."""
    service = host.worker_service(agent, command)
    names = {"systemd": {"unit": service.unit}, "launchd": {"label": service.label}}
    what = {} if command == "worker" else {"command": command}
    return {"agent": agent, "slug": host.worker_slug(agent), **what, **names.get(platform or "", {})}


class Worker(NamedTuple):
    """What an agent's worker service runs: ``palacectl worker`` with these options, in
    ``workspace`` (absolute), with ``path_env`` (the PATH at install) as its PATH; or, with
    ``command`` ``integrate``, its integrator: ``palacectl integrate --agent ID --repo WORKSPACE``
    and ``integrate`` (its other options, as "--flag value" pairs)."""

    agent: str
    runner: str
    workspace: Path
    path_env: str
    concurrency: int | None = None
    project: str | None = None
    timeout: str | None = None
    command: Literal["worker", "integrate"] = "worker"
    integrate: tuple[str, ...] = ()

    @property
    def service(self) -> host.ServiceName:
        return host.worker_service(self.agent, self.command)

    def args(self) -> list[str]:
        """The options after ``palacectl --home HOME worker`` (or ``integrate``), as "--flag value" pairs."""
        if self.command == "integrate":
            return ["--agent", self.agent, "--repo", str(self.workspace), *self.integrate]
        words = ["--agent", self.agent, "--runner", self.runner, "--workspace", str(self.workspace)]
        for flag, value in (("--concurrency", self.concurrency), ("--project", self.project),
                            ("--timeout", self.timeout)):
            if value is not None:
                words += [flag, str(value)]
        return words

    def to_json(self, platform: Platform) -> dict[str, Any]:
        if self.command == "integrate":
            return {**worker_json(platform, self.agent, self.command), "repo": str(self.workspace),
                    "args": self.args(), "env": {"PATH": self.path_env}}
        return {**worker_json(platform, self.agent), "runner": self.runner, "workspace": str(self.workspace),
                "concurrency": self.concurrency, "project": self.project, "timeout": self.timeout,
                "args": self.args(), "env": {"PATH": self.path_env}}


class InstallPlan(NamedTuple):
    """Everything install will do, worked out without touching anything. ``command`` is the
    program the service runs (palaced's, or palacectl's for a ``worker``)."""

    platform: Platform
    path: Path
    content: str
    existing: Existing
    home: Path
    command: list[str]
    log_dir: Path | None
    steps: list[Step]
    worker: Worker | None = None

    @property
    def service(self) -> host.ServiceName:
        return host.PALACED if self.worker is None else self.worker.service

    def to_json(self, *, dry_run: bool, steps: Sequence[Step]) -> dict[str, Any]:
        program = {"palaced": self.command} if self.worker is None else {"palacectl": self.command}
        return {"platform": self.platform, "dry_run": dry_run, "path": str(self.path), "existing": self.existing,
                "home": str(self.home), **program,
                "log_dir": None if self.log_dir is None else str(self.log_dir),
                "commands": [s.to_json() for s in steps], "content": self.content,
                **({} if self.worker is None else {"worker": self.worker.to_json(self.platform)})}


def existing_file(path: Path, content: str) -> Existing:
    """How the file at ``path`` compares with ``content`` (a read failure is one error line)."""
    try:
        current = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}")
    return "identical" if current == content else "different"


def plan_install(platform: Platform, home: Path, *, filesystem_sandbox: bool = True,
                 worker: Worker | None = None) -> InstallPlan:
    """The plan for running palaced, or ``worker`` when given, on ``home`` (absolute) under
    ``platform``'s service manager (``filesystem_sandbox`` concerns palaced's unit only)."""
    log_dir = host.launchd_log_dir() if platform == "launchd" else None
    if worker is None:
        command, service = host.palaced_command(), host.PALACED
        content = (templates.render_systemd_unit(command, home, filesystem_sandbox=filesystem_sandbox)
                   if log_dir is None else templates.render_launchd_plist(command, home, log_dir))
    else:
        command, service = host.palacectl_command(), worker.service
        agent, workspace, path_env = worker.agent, worker.workspace, worker.path_env
        content = (templates.render_worker_unit(command, home, worker.args(), agent=agent, workspace=workspace,
                                                path_env=path_env, command=worker.command)
                   if log_dir is None else
                   templates.render_worker_plist(command, home, worker.args(), agent=agent, workspace=workspace,
                                                 path_env=path_env, log_dir=log_dir, command=worker.command))
    path = host.service_file(platform, service)
    existing = existing_file(path, content)
    return InstallPlan(platform, path, content, existing, home, command, log_dir,
                       managers.install_steps(platform, existing, path, service), worker)
