"""The service feature's ``service`` group: run palaced under your user's service manager (systemd --user,
launchd), and with ``--worker``, an agent's worker (``palacectl worker``) beside it, or with
``--integrate`` an agent's integrator (``palacectl integrate``).

Owns: the commands install, uninstall and status (their flags, what they print, the order of
their checks), asking palaced whether it answers on the home (``daemon_status``,
``wait_for_daemon``), and the two things install writes: the home folder (0700, only when
missing; palaced's install only) and the unit or plist (through ``palacectl.files``). With
``--worker --agent ID`` each command works on that agent's worker service instead of palaced's:
install checks the workspace and the runner (the worker feature's ``launch.runner_command``) and writes a
unit or plist that runs ``palacectl --home HOME worker ...`` with your PATH; palaced need not
answer for it. The rest is ``palacectl.service``: ``host`` (platform, paths), ``templates``,
``runner`` (subprocesses), ``managers`` (systemctl, launchctl) and ``plan``; each command loads
those modules when it runs, so other commands start without them. The root registers what
``GROUPS`` names.

Must not import palaced: the service runs the installed ``palaced`` console script, found beside
the running Python. The palace home's data is never touched: install only creates the home
folder (0700) when it is missing, and uninstall removes only the unit or plist file.

Error handling: every failure is one line through ``fail()`` (exit 1); a service-manager command
that fails or hangs is named, with its stderr. install checks all it can before it writes
anything (the service manager is reachable, an installed file that differs needs ``--force``, no
palaced already runs outside the service; for a worker: its options, the workspace, the runner),
so a failed check leaves no file behind. A manager command that fails *after* the file is written
leaves the file in place, and the lines printed so far say what was done: fix the cause and rerun
install (it is idempotent), or uninstall.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Optional, cast

import typer

from ..cli.common import JsonOpt, UsageProblem, current_home
from ..output import emit, fail, note, write_stdout

if TYPE_CHECKING:
    from .host import Platform
    from .managers import Step
    from .plan import InstallPlan, Worker

__all__ = ["COMMANDS", "GROUPS", "daemon_status", "service_app", "wait_for_daemon", "write_service_file"]

service_app = typer.Typer(no_args_is_help=True,
                          help="Run palaced as your user's service (systemd --user on Linux, launchd on macOS).")

# Why 15 s: palaced answers on its socket well under a second after it starts; the margin is for
# a slow first start (opening a large database).
START_WAIT_S: Final = 15.0
# Why 0.1 s: a start is noticed within a tenth of a second, at ten cheap connection attempts a second.
START_POLL_S: Final = 0.1
# Why 200: the longest agent id a worker service takes; with "palace-worker-", the hash suffix and
# ".service" its unit name stays well under the 255 characters of a file name and a unit name.
MAX_AGENT_CHARS: Final = 200


# -- the daemon, files --------------------------------------------------------------------------


def palace_home() -> Path:
    """The home in use (--home, $PALACE_HOME, ~/.palace), absolute: a service has no working directory of ours."""
    return current_home().expanduser().absolute()


def daemon_status(home: Path) -> dict[str, Any]:
    """Whether palaced answers a ping on this home's socket (and if not, why)."""
    from palace_proto.errors import ApiError

    from ..client import Client, DaemonUnreachable, endpoint_for, socket_for

    try:  # where it listens: the Unix socket, or the TCP address its api.json names
        socket = endpoint_for(home).describe()
    except DaemonUnreachable:
        socket = str(socket_for(home))
    try:
        with Client(home) as client:
            client.call("ping")
    except DaemonUnreachable as exc:
        return {"answering": False, "socket": socket, "reason": str(exc)}
    except ApiError as exc:  # it answered, but refused us (e.g. a protocol version mismatch)
        return {"answering": True, "socket": socket, "reason": exc.message}
    return {"answering": True, "socket": socket, "reason": None}


def wait_for_daemon(home: Path, timeout: float = START_WAIT_S) -> dict[str, Any]:
    """Poll until palaced answers or ``timeout`` passes; returns the last ``daemon_status``."""
    deadline = time.monotonic() + timeout
    while True:
        status = daemon_status(home)
        if status["answering"] or time.monotonic() >= deadline:
            return status
        time.sleep(START_POLL_S)


def write_service_file(path: Path, content: str) -> None:
    """Write the unit or plist atomically (palacectl.files: temporary file, fsync, rename, fsync
    the folder): the manager never reads half a file, and a power cut never leaves an empty one."""
    from ..files import write_atomically

    try:
        # 0644: no secrets inside; the usual mode for unit files and plists
        write_atomically(path, content.encode("utf-8"), 0o644, create_folder=True)
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror or exc}")


def make_private_dir(path: Path) -> bool:
    """Create a folder 0700 if it is missing (an existing one is left as it is); True if created."""
    if path.is_dir():
        return False
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        fail(f"{path} exists and is not a folder")
    except OSError as exc:
        fail(f"cannot create {path}: {exc.strerror or exc}")
    return True


# -- commands -----------------------------------------------------------------------------------


def _this_platform() -> Platform:
    from . import host

    platform = host.detect_platform()
    if platform is None:
        fail(f"palacectl service supports systemd (Linux) and launchd (macOS), not {sys.platform}; "
             "run `palaced` under your own supervisor")
    return platform


def _noun(platform: Platform) -> str:
    return "unit" if platform == "systemd" else "plist"


def _logs_hint(platform: Platform, agent: str | None = None, command: str = "worker") -> str:
    """Where the service's logs are: palaced's, or ``agent``'s worker's (or integrator's)."""
    from . import host

    if platform == "systemd":
        unit = "palaced" if agent is None else host.worker_service(agent, command).unit_stem
        return f"journalctl --user -u {unit} -f"
    return str(host.launchd_log_dir() / ("palaced.log" if agent is None
                                         else f"{command}-{host.worker_slug(agent)}.log"))


PlatformOpt = Annotated[Optional[str], typer.Option(
    "--platform", help="With --dry-run: show systemd's or launchd's file instead of this machine's.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the file and the exact commands; change nothing.")]
WorkerOpt = Annotated[bool, typer.Option(
    "--worker", help="An agent's worker (`palacectl worker`, one service per agent) instead of palaced.")]
AgentOpt = Annotated[Optional[str], typer.Option(
    "--agent", help="With --worker: the agent whose tasks it runs; with --integrate: the integrator's agent.")]
IntegrateOpt = Annotated[bool, typer.Option(
    "--integrate", help="An agent's integrator (`palacectl integrate`, one service per agent) instead of palaced.")]


def _which(worker: bool, integrate: bool) -> str:
    """``--worker`` or ``--integrate`` (the flag a command was given; both is a usage error)."""
    if worker and integrate:
        raise UsageProblem("--worker and --integrate are two services: give one of them")
    return "--integrate" if integrate else "--worker"


# -- the worker's options -----------------------------------------------------------------------


def _worker_agent(command: str, worker: bool, agent: str | None, worker_only: dict[str, Any],
                  flag: str = "--worker") -> str | None:
    """The agent of ``--worker --agent ID`` (or ``--integrate --agent ID``; checked), or None
    without the flag; one of its options without it, or the flag without ``--agent``, is a usage error."""
    what = "integrator" if flag == "--integrate" else "worker"
    if not worker:
        given = [name for name, value in {"--agent": agent, **worker_only}.items() if value is not None]
        if given:
            one = len(given) == 1
            raise UsageProblem(f"{', '.join(given)} only {'works' if one else 'work'} with {flag} (an agent's {what} "
                               f"service): add {flag}, or leave {'it' if one else 'them'} out")
        return None
    if agent is None:
        raise UsageProblem(f"{flag} needs --agent ID (whose {what}): palacectl service {command} {flag} --agent ID")
    agent = agent.strip()  # as `palacectl worker` reads it, so both agree on the service's name
    if not agent:
        raise UsageProblem("--agent is empty: give the agent id whose tasks the worker runs")
    if len(agent) > MAX_AGENT_CHARS:
        raise UsageProblem(f"--agent is {len(agent)} characters long; a worker's agent id has at most "
                           f"{MAX_AGENT_CHARS}")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in agent):
        raise UsageProblem(f"--agent {agent!r} contains control characters; give the agent id as palace knows it")
    return agent


def _worker_spec(agent: str, runner: str, workspace: Path, concurrency: int | None, project: str | None,
                 timeout: str | None) -> Worker:
    """The worker to install, checked as install needs it: the timeout is a duration, the
    workspace is a folder (made absolute), the runner is known on this home. Reads only."""
    import shutil

    from palace_proto.errors import ValidationError
    from palace_proto.stamps import parse_duration

    from ..features.worker.launch import LaunchRefused, runner_command
    from .plan import Worker

    if concurrency is not None:
        from palace_proto.workers import MAX_CONCURRENCY

        if not 1 <= concurrency <= MAX_CONCURRENCY:  # the worker's own bound: caught here, not at each start
            raise UsageProblem(f"--concurrency must be from 1 to {MAX_CONCURRENCY}")
    if timeout is not None:
        try:
            parse_duration(timeout, field="--timeout")
        except ValidationError as exc:
            raise UsageProblem(exc.message) from None
    if project is not None and not project.strip():
        raise UsageProblem("--project is empty: give a project name, or leave --project out")
    folder = workspace.expanduser().absolute()
    if not folder.exists():
        fail(f"the workspace {folder} does not exist; create it (or clone the repository there), then rerun install",
             code="refused")
    if not folder.is_dir():
        fail(f"the workspace {folder} is not a folder; give the folder the agent works in", code="refused")
    folder = folder.resolve()
    try:
        command = runner_command(runner, palace_home())
    except LaunchRefused as exc:
        fail(str(exc), code="refused")
    path_env = os.environ.get("PATH", os.defpath)
    if "/" not in command[0] and shutil.which(command[0], path=path_env) is None:
        note(f"Note: runner {runner!r} runs `{command[0]}`, which is not on your PATH; the worker looks for it "
             "on this PATH, so install it (then rerun install with --force) or every task it takes will fail.")
    return Worker(agent, runner, folder, path_env, concurrency, project, timeout)


def _integrate_spec(agent: str, repo: Path | None, branch: str | None, project: str | None, check: str | None,
                    check_timeout: str | None) -> Worker:
    """The integrator to install, checked as install needs it (its repository a folder, its
    options what ``palacectl integrate`` takes). Reads only; the branch itself is checked by the
    integrator at each start (it says why in its log if it cannot work)."""
    from palace_proto.errors import ValidationError
    from palace_proto.stamps import parse_duration

    from .plan import Worker

    missing = [flag for flag, value in (("--repo DIR", repo), ("--branch NAME", branch), ("--project P", project))
               if value is None or not str(value).strip()]
    if missing or repo is None:
        raise UsageProblem(f"--integrate needs {' and '.join(missing)}: palacectl service install --integrate "
                           "--agent ID --repo DIR --branch NAME --project P [--check 'COMMAND']")
    if agent.startswith("human:"):
        raise UsageProblem("--agent must be an agent id, not a person's human:NAME")
    if check_timeout is not None:
        try:
            parse_duration(check_timeout, field="--check-timeout")
        except ValidationError as exc:
            raise UsageProblem(exc.message) from None
    if check is not None and (not check.strip() or any(c in check for c in '$"\\') or not check.isprintable()):
        raise UsageProblem("--check holds what a service file cannot carry ($, quotes, backslashes, control "
                           "characters) or nothing: put the command in [integrate] check in config.toml and leave "
                           "--check out")
    folder = repo.expanduser().absolute()
    if not (folder / ".git").exists():
        fail(f"the repository {folder} is not a git repository (no .git there); give the clone the integrator lands "
             "on", code="refused")
    extra = ["--branch", str(branch).strip(), "--project", str(project).strip()]
    for flag, value in (("--check", check), ("--check-timeout", check_timeout)):
        if value is not None:
            extra += [flag, value]
    return Worker(agent, "", folder.resolve(), os.environ.get("PATH", os.defpath), command="integrate",
                  integrate=tuple(extra))


@service_app.command("install")
def install(
    dry_run: DryRunOpt = False,
    force: Annotated[bool, typer.Option("--force", help="Replace an installed file that differs.")] = False,
    platform: PlatformOpt = None,
    worker: WorkerOpt = False,
    integrate: IntegrateOpt = False,
    agent: AgentOpt = None,
    runner: Annotated[Optional[str], typer.Option(
        "--runner", help="With --worker: the harness to run (claude, codex, gemini, opencode, or [runners.NAME] "
                         "in config.toml).")] = None,
    workspace: Annotated[Optional[Path], typer.Option(
        "--workspace", help="With --worker: the git repository the agent works in.")] = None,
    concurrency: Annotated[Optional[int], typer.Option(
        "--concurrency", help="With --worker: how many tasks it runs at once (1-16).")] = None,
    project: Annotated[Optional[str], typer.Option(
        "--project", help="With --worker: it works only this project's tasks; with --integrate: the project whose "
                          "tasks it lands.")] = None,
    timeout: Annotated[Optional[str], typer.Option(
        "--timeout", help="With --worker: stop a run that takes longer: 90s, 30m, 2h.")] = None,
    repo: Annotated[Optional[Path], typer.Option(
        "--repo", help="With --integrate: the repository whose branch it moves.")] = None,
    branch: Annotated[Optional[str], typer.Option(
        "--branch", help="With --integrate: the integration branch (checked out nowhere).")] = None,
    check: Annotated[Optional[str], typer.Option(
        "--check", help="With --integrate: the check each patch must pass (default: [integrate] check).")] = None,
    check_timeout: Annotated[Optional[str], typer.Option(
        "--check-timeout", help="With --integrate: stop a check that takes longer: 90s, 30m, 2h.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Install palaced (or with --worker, an agent's worker; with --integrate, an agent's
    integrator) as your user service and start it (systemd --user, or a launchd LaunchAgent)."""
    from . import host, managers
    from .plan import plan_install

    flag = _which(worker, integrate)
    integrate_only = {"--repo": repo, "--branch": branch, "--check": check, "--check-timeout": check_timeout}
    if not integrate and any(value is not None for value in integrate_only.values()):
        given = ", ".join(name for name, value in integrate_only.items() if value is not None)
        raise UsageProblem(f"{given} only with --integrate (an agent's integrator service): add --integrate, or "
                           "leave them out")
    if integrate:
        worker_only = {"--runner": runner, "--workspace": workspace, "--concurrency": concurrency, "--timeout": timeout}
        given = ", ".join(name for name, value in worker_only.items() if value is not None)
        if given:
            raise UsageProblem(f"{given} only with --worker: the integrator takes --repo, --branch, --project, "
                               "--check and --check-timeout")
        integrator = _worker_agent("install", True, agent, {}, flag=flag)
        assert integrator is not None
        if platform is not None and (not dry_run or platform not in host.PLATFORMS):
            raise UsageProblem("--platform only previews another system's file: add --dry-run, and name systemd or "
                               "launchd")
        spec = _integrate_spec(integrator, repo, branch, project, check, check_timeout)
        _install_worker(_this_platform() if platform is None else platform, spec, dry_run=dry_run, force=force,
                        preview=platform is not None, as_json=json_)
        return

    worker_agent = _worker_agent("install", worker, agent, {
        "--runner": runner, "--workspace": workspace, "--concurrency": concurrency, "--project": project,
        "--timeout": timeout})
    if worker_agent is not None and (runner is None or workspace is None):
        missing = " and ".join(flag for flag, value in (("--runner NAME", runner), ("--workspace DIR", workspace))
                               if value is None)
        raise UsageProblem(f"--worker needs {missing}: palacectl service install --worker --agent ID "
                           "--runner NAME --workspace DIR")
    if platform is not None:
        if not dry_run:
            raise UsageProblem("--platform only previews another system's file; add --dry-run")
        if platform not in host.PLATFORMS:
            raise UsageProblem(f"--platform must be one of: {', '.join(host.PLATFORMS)}")
    kind = _this_platform() if platform is None else platform
    if worker_agent is not None:
        spec = _worker_spec(worker_agent, cast("str", runner), cast("Path", workspace), concurrency, project, timeout)
        _install_worker(kind, spec, dry_run=dry_run, force=force, preview=platform is not None, as_json=json_)
        return
    if dry_run:
        # No probe here (a dry run starts nothing): the unit is shown with its sandbox on.
        _print_dry_run(plan_install(kind, palace_home()), force=force, preview=platform is not None, as_json=json_)
        return

    problem = managers.manager_problem(kind)
    if problem:
        fail(f"{problem}; use `palacectl service install --dry-run` to see the {_noun(kind)}, "
             "or run `palaced` directly")
    sandbox_problem = managers.filesystem_sandbox_problem() if kind == "systemd" else None
    plan = plan_install(kind, palace_home(), filesystem_sandbox=sandbox_problem is None)
    if plan.existing == "different" and not force:
        fail(f"a different {plan.path.name} is already installed at {plan.path}; pass --force to replace it "
             "(`palacectl service install --dry-run` shows the new one)")
    if not managers.query_state(kind).running:
        outside = daemon_status(plan.home)
        if outside["answering"]:
            fail(f"a palaced outside the service manager already answers on {outside['socket']}; stop it "
                 "(Ctrl-C, or SIGTERM to its pid), then rerun install")

    say = (lambda line: None) if json_ else (lambda line: write_stdout(line + "\n"))
    if kind == "systemd":
        say("Filesystem sandbox: on (ProtectSystem=strict, ProtectHome=read-only, the home writable, PrivateTmp)"
            if sandbox_problem is None else
            f"Filesystem sandbox: off, because {sandbox_problem}; the other restrictions stay on")
    home_created = make_private_dir(plan.home)
    if home_created:
        say(f"Created the palace home {plan.home} (0700)")
    ran = _write_and_start(plan, say)
    daemon = wait_for_daemon(plan.home)
    if not daemon["answering"]:
        fail(f"{plan.path.name} is installed and started, but palaced did not answer on {daemon['socket']} "
             f"within {START_WAIT_S:.0f} s; see {_logs_hint(kind)}")
    emit({**plan.to_json(dry_run=False, steps=ran), "home_created": home_created, "daemon": daemon,
          "filesystem_sandbox": None if kind != "systemd" else sandbox_problem is None,
          "filesystem_sandbox_problem": sandbox_problem}, json_,
         f"palaced answers on {daemon['socket']}. Logs: {_logs_hint(kind)}")


def _write_and_start(plan: InstallPlan, say: Callable[[str], None]) -> list[Step]:
    """What install does once every check passed: the log folder, the file (unless it is already
    as wanted), then the service manager's steps; each said as it is done."""
    from . import managers

    if plan.log_dir is not None and make_private_dir(plan.log_dir):
        say(f"Created the log folder {plan.log_dir}")
    if plan.existing == "identical":
        say(f"Unchanged {plan.path}")
    else:
        write_service_file(plan.path, plan.content)
        say(f"{'Replaced' if plan.existing == 'different' else 'Wrote'} {plan.path}")
    return managers.run_steps(plan.steps, lambda step: say(f"Ran: {step}"), service=plan.service)


def _install_worker(kind: Platform, spec: Worker, *, dry_run: bool, force: bool, preview: bool,
                    as_json: bool) -> None:
    """install --worker (or --integrate): the agent's worker (or integrator) service, written and
    started once every check passed."""
    from . import managers
    from .plan import plan_install

    what, flag = ("integrator", "--integrate") if spec.command == "integrate" else ("worker", "--worker")
    if dry_run:
        _print_dry_run(plan_install(kind, palace_home(), worker=spec), force=force, preview=preview, as_json=as_json)
        return
    plan = plan_install(kind, palace_home(), worker=spec)  # first: a value the file cannot carry is refused here
    problem = managers.manager_problem(kind)
    if problem:
        fail(f"{problem}; use `palacectl service install {flag} ... --dry-run` to see the {_noun(kind)}, "
             f"or run `palacectl {spec.command}` directly")
    if plan.existing == "different" and not force:
        fail(f"a different {plan.path.name} is already installed at {plan.path}; pass --force to replace it "
             f"(`palacectl service install {flag} ... --dry-run` shows the new one)")

    say = (lambda line: None) if as_json else (lambda line: write_stdout(line + "\n"))
    ran = _write_and_start(plan, say)
    state = managers.query_state(kind, plan.service)
    daemon = daemon_status(plan.home)
    if not daemon["answering"]:
        note(f"Note: palaced does not answer on {daemon['socket']}; the {what} waits for it "
             "(`palacectl service install` runs palaced as a service too).")
    emit({**plan.to_json(dry_run=False, steps=ran), "manager": state.to_json(), "daemon": daemon}, as_json,
         f"The {what} for {spec.agent} is {'running' if state.running else 'not running'} "
         f"({kind}: {state.state}). Logs: {_logs_hint(kind, spec.agent, spec.command)}")


def _print_dry_run(plan: InstallPlan, *, force: bool, preview: bool, as_json: bool) -> None:
    from . import host, managers, runner

    if plan.existing == "different" and not force:
        note(f"Note: a different {plan.path.name} is installed at {plan.path}; install would refuse without --force.")
    if not preview and plan.platform == "systemd" and not host.systemd_booted():
        note("Note: systemd is not running as the init system here "
             f"(PID 1 is {host.pid1_name()}), so install would fail.")
    if plan.platform == "systemd" and plan.worker is None:
        note("Note: install first checks that this user manager can build the filesystem sandbox "
             f"(`{runner.command_text(managers.SANDBOX_PROBE)}`) and leaves those lines commented out if it cannot.")
    if emit(plan.to_json(dry_run=True, steps=plan.steps), as_json):
        return
    lines = []
    if plan.worker is None and not plan.home.is_dir():
        lines.append(f"Would create the palace home {plan.home} (0700)")
    if plan.log_dir is not None and not plan.log_dir.is_dir():
        lines.append(f"Would create the log folder {plan.log_dir}")
    action = {"absent": "write", "identical": "keep (unchanged)", "different": "replace"}[plan.existing]
    lines.append(f"Would {action} {plan.path}:\n")
    write_stdout("\n".join(lines) + "\n" + plan.content + "\nWould run:\n"
                 + "".join(f"  {step}\n" for step in plan.steps))


@service_app.command("uninstall")
def uninstall(dry_run: DryRunOpt = False, worker: WorkerOpt = False, integrate: IntegrateOpt = False,
              agent: AgentOpt = None, json_: JsonOpt = False) -> None:
    """Stop and disable the service (palaced's, or with --worker / --integrate --agent ID that
    agent's worker or integrator) and remove its file. The palace home and its data are never touched."""
    from . import host, managers
    from .plan import worker_json

    flag = _which(worker, integrate)
    command = "integrate" if integrate else "worker"
    worker_agent = _worker_agent("uninstall", worker or integrate, agent, {}, flag=flag)
    kind = _this_platform()
    service = host.PALACED if worker_agent is None else host.worker_service(worker_agent, command)
    path, home = host.service_file(kind, service), palace_home()
    installed = path.exists() or path.is_symlink()
    before, after = managers.uninstall_steps(kind, service) if installed else ([], [])
    if installed and kind == "systemd" and not host.systemd_booted():
        # No systemd here, so nothing can be running from this unit: just remove the file.
        before, after = [], []
    result: dict[str, Any] = {"platform": kind, "dry_run": dry_run, "path": str(path), "installed": installed,
                              "removed": False, "home": str(home), "commands": [s.to_json() for s in (*before, *after)]}
    if worker_agent is not None:
        result["worker"] = worker_json(kind, worker_agent, command)
    say = (lambda line: None) if json_ else (lambda line: write_stdout(line + "\n"))
    if not installed:
        say(f"Nothing to uninstall: no {path}")
    elif dry_run:
        for step in before:
            say(f"Would run: {step}")
        say(f"Would remove {path}")
        for step in after:
            say(f"Would run: {step}")
    else:
        if before or after:
            problem = managers.manager_problem(kind)
            if problem:
                what = ("palaced" if worker_agent is None
                        else f"the {'integrator' if integrate else 'worker'} for {worker_agent}")
                fail(f"{problem}; cannot stop {what}, so {path} stays")
        ran = managers.run_steps(before, lambda step: say(f"Ran: {step}"), service=service)
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            fail(f"cannot remove {path}: {exc.strerror or exc}")
        say(f"Removed {path}")
        ran += managers.run_steps(after, lambda step: say(f"Ran: {step}"), service=service)
        result.update(removed=True, commands=[s.to_json() for s in ran])
    if emit(result, json_):
        return
    if installed and worker_agent is None:
        say(f"The palace home {home} and its data were not touched.")
    elif installed:
        left = "repository" if integrate else "worker's workspace"
        say(f"The palace home {home}, its data and the {left} were not touched.")


@service_app.command("status")
def status(worker: WorkerOpt = False, integrate: IntegrateOpt = False, agent: AgentOpt = None,
           json_: JsonOpt = False) -> None:
    """Is the service (palaced's, or with --worker / --integrate --agent ID that agent's worker or
    integrator) installed, what does the service manager say, and does palaced answer?"""
    from . import host, managers
    from .plan import worker_json

    flag = _which(worker, integrate)
    command = "integrate" if integrate else "worker"
    worker_agent = _worker_agent("status", worker or integrate, agent, {}, flag=flag)
    service = host.PALACED if worker_agent is None else host.worker_service(worker_agent, command)
    kind, home = host.detect_platform(), palace_home()
    path = None if kind is None else host.service_file(kind, service)
    installed = path is not None and path.exists()
    manager = managers.manager_state(kind, service)
    daemon = daemon_status(home)
    if emit({"platform": kind, "path": None if path is None else str(path), "installed": installed,
             "manager": manager.to_json(), "daemon": daemon, "home": str(home),
             **({} if worker_agent is None else {"worker": worker_json(kind, worker_agent, command)})}, json_):
        return
    file_line = "-" if path is None else f"{path} ({'installed' if installed else 'not installed'})"
    manager_line = f"{kind or '-'}: {manager.state}"
    if manager.enabled:
        manager_line += f" ({manager.enabled})"
    if manager.reason:
        manager_line += f": {manager.reason}"
    daemon_line = (f"answering on {daemon['socket']}" if daemon["answering"] and not daemon["reason"]
                   else f"{'answering' if daemon['answering'] else 'not answering'}: {daemon['reason']}")
    worker_line = ""
    if worker_agent is not None:
        logs = "" if kind is None else f" (logs: {_logs_hint(kind, worker_agent, command)})"
        worker_line = f"{'integrator' if integrate else 'worker   '} {worker_agent}{logs}\n"
    write_stdout(f"{worker_line}file      {file_line}\nmanager   {manager_line}\ndaemon    {daemon_line}\n"
                 f"home      {home}\n")


COMMANDS: Final[dict[str, Callable[..., None]]] = {}
GROUPS: Final = {"service": service_app}
