"""What ``palacectl service`` asks systemd (``systemctl --user``) and launchd (``launchctl``).

Owns: whether the user's service manager is reachable here (and why not), whether it can build
the unit's filesystem sandbox, what it says about a service (``ManagerState``), and the commands
of install and uninstall as ``Step`` values, run in order by ``run_steps``. Each of those takes
the service (``host.ServiceName``): palaced's unless told, or an agent's worker. Every command
goes through ``runner.run_command``, looked up on the module at each call so a test's fake
manager stands in for all of them.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

# NamedTuple rather than dataclasses: a dataclass costs ~0.5 ms to create, and these are plain values.
from typing import Any, Final, Literal, NamedTuple

from ..output import CommandFailed
from . import host, runner
from .host import PALACED, Platform, ServiceName

__all__ = [
    "SANDBOX_PROBE", "Existing", "ManagerState", "Step", "filesystem_sandbox_problem", "install_steps",
    "launchd_loaded", "launchd_problem", "manager_problem", "manager_state", "query_state", "run_steps",
    "systemd_problem", "uninstall_steps",
]

# What install finds at the service file's place, compared with what it would write.
Existing = Literal["absent", "identical", "different"]

# A service is "running" in these is-active states (activating includes auto-restart waits).
SYSTEMD_RUNNING_STATES: Final = frozenset({"active", "activating", "reloading", "deactivating", "refreshing"})
# Can this user manager build the sandbox? A transient unit with the same options, running `true`.
SANDBOX_PROBE: Final = ("systemd-run", "--user", "--wait", "--quiet", "--collect", "-p", "PrivateUsers=yes",
                        "-p", "ProtectSystem=strict", "-p", "ProtectHome=read-only", "-p", "PrivateTmp=yes", "true")


class Step(NamedTuple):
    """One service-manager command; ``when`` is the run-time condition it depends on, if any."""

    argv: tuple[str, ...]
    when: Literal["loaded", "not loaded"] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"argv": list(self.argv), "when": self.when}

    def __str__(self) -> str:
        text = runner.command_text(self.argv)
        return text if self.when is None else f"{text}   (only if it is {self.when})"


def _first_word(text: str) -> str | None:
    words = text.split()
    return words[0] if words else None


# -- can it work here ---------------------------------------------------------------------------


def systemd_problem() -> str | None:
    """Why ``systemctl --user`` cannot manage palaced here, or None."""
    if not host.systemd_booted():
        return f"systemd is not running as the init system here (PID 1 is {host.pid1_name()})"
    if shutil.which("systemctl") is None:
        return "systemctl is not on PATH"
    probe = runner.run_command(("systemctl", "--user", "show", "--property=Version"))
    if probe.returncode != 0:
        return (f"the systemd user manager is not reachable (`systemctl --user show` failed: "
                f"{runner.one_line(probe.stderr) or 'no message'}); run this from your own login session, "
                "not su or sudo")
    return None


def launchd_problem() -> str | None:
    """Why ``launchctl`` cannot manage palaced here, or None."""
    if shutil.which("launchctl") is None:
        return "launchctl is not on PATH"
    probe = runner.run_command(("launchctl", "print", _launchd_domain()))
    if probe.returncode != 0:
        return (f"launchd has no login session for you ({_launchd_domain()}: "
                f"{runner.one_line(probe.stderr or probe.stdout) or 'not found'}); log in at the Mac itself: "
                f"a LaunchAgent runs in your login session")
    return None


def manager_problem(platform: Platform) -> str | None:
    return systemd_problem() if platform == "systemd" else launchd_problem()


def filesystem_sandbox_problem() -> str | None:
    """Why the unit's filesystem sandbox cannot work under this user manager, or None if it can
    (user namespaces restricted, e.g. Ubuntu 23.10+'s AppArmor default, fail the probe)."""
    try:
        proc = runner.run_command(SANDBOX_PROBE)
    except CommandFailed as exc:  # systemd-run missing or hanging: the sandbox is unproven
        return exc.message
    if proc.returncode != 0:
        return (f"`{runner.command_text(SANDBOX_PROBE)}` failed: "
                f"{runner.one_line(proc.stderr) or f'exit {proc.returncode}'}")
    return None


# -- what it says about a service ---------------------------------------------------------------


def _launchd_domain() -> str:
    return f"gui/{os.getuid()}"


def _launchd_service(service: ServiceName = PALACED) -> str:
    return f"{_launchd_domain()}/{service.label}"


def launchd_loaded(service: ServiceName = PALACED) -> bool:
    return runner.run_command(("launchctl", "print", _launchd_service(service))).returncode == 0


class ManagerState(NamedTuple):
    """What the service manager says about a service."""

    state: str  # systemd: is-active's word; launchd: launchctl's state, or "not loaded"; else "unknown"
    running: bool
    enabled: str | None = None  # systemd only: is-enabled's word
    reason: str | None = None  # why the state is unknown

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "running": self.running, "enabled": self.enabled, "reason": self.reason}


def query_state(platform: Platform, service: ServiceName = PALACED) -> ManagerState:
    """Ask a reachable service manager about ``service`` (see ``manager_problem`` first)."""
    if platform == "systemd":
        active = runner.run_command(("systemctl", "--user", "is-active", service.unit))
        word = _first_word(active.stdout)
        if word is None:
            return ManagerState("unknown", False, reason=f"`systemctl --user is-active {service.unit}` failed: "
                                                         f"{runner.one_line(active.stderr) or 'no message'}")
        enabled = runner.run_command(("systemctl", "--user", "is-enabled", service.unit))
        return ManagerState(word, word in SYSTEMD_RUNNING_STATES, enabled=_first_word(enabled.stdout))
    probe = runner.run_command(("launchctl", "print", _launchd_service(service)))
    if probe.returncode != 0:
        return ManagerState("not loaded", False)
    match = re.search(r"^\s*state = (\S+)", probe.stdout, re.MULTILINE)
    state = match.group(1) if match else "loaded"
    return ManagerState(state, state == "running")


def manager_state(platform: Platform | None, service: ServiceName = PALACED) -> ManagerState:
    """``query_state`` where a manager is reachable; otherwise "unknown" and why."""
    if platform is None:
        return ManagerState("unknown", False, reason=f"no supported service manager on {sys.platform}")
    problem = manager_problem(platform)
    return ManagerState("unknown", False, reason=problem) if problem else query_state(platform, service)


# -- the steps of install and uninstall ---------------------------------------------------------


def run_steps(steps: Sequence[Step], on_ran: Callable[[Step], None] = lambda step: None, *,
              service: ServiceName = PALACED) -> list[Step]:
    """Run the steps in order, a conditional one only if its condition held before the first step
    (whether ``service``, the one the steps are about, was loaded); ``on_ran`` hears of each as it
    completes (so a human sees what was done before a failure)."""
    loaded: bool | None = None
    ran: list[Step] = []
    for step in steps:
        if step.when is not None:
            if loaded is None:
                loaded = launchd_loaded(service)
            if loaded != (step.when == "loaded"):
                continue
        runner.run_checked(step.argv)
        ran.append(step)
        on_ran(step)
    return ran


def install_steps(platform: Platform, existing: Existing, path: Path, service: ServiceName = PALACED) -> list[Step]:
    """The commands that load and start the installed file of ``service``."""
    if platform == "systemd":
        ctl, unit = ("systemctl", "--user"), service.unit
        if existing == "different":
            # `enable --now` would leave a running palaced (or worker) on the old unit; restart
            # starts the new one.
            return [Step((*ctl, "daemon-reload")), Step((*ctl, "enable", unit)), Step((*ctl, "restart", unit))]
        return [Step((*ctl, "daemon-reload")), Step((*ctl, "enable", "--now", unit))]
    target, bootstrap = _launchd_service(service), ("launchctl", "bootstrap", _launchd_domain(), str(path))
    if existing == "identical":
        # Already as wanted: load it if it is not, else make sure it runs (kickstart without -k
        # leaves a running palaced alone).
        return [Step(("launchctl", "enable", target)), Step(bootstrap, "not loaded"),
                Step(("launchctl", "kickstart", target), "loaded")]
    # A loaded agent keeps its old definition until booted out; `enable` clears an earlier
    # `launchctl disable`, which would make bootstrap fail.
    return [Step(("launchctl", "bootout", target), "loaded"), Step(("launchctl", "enable", target)), Step(bootstrap)]


def uninstall_steps(platform: Platform, service: ServiceName = PALACED) -> tuple[list[Step], list[Step]]:
    """The commands to run before and after the file of ``service`` is removed."""
    if platform == "systemd":
        return ([Step(("systemctl", "--user", "disable", "--now", service.unit))],
                [Step(("systemctl", "--user", "daemon-reload"))])
    return [Step(("launchctl", "bootout", _launchd_service(service)), "loaded")], []
