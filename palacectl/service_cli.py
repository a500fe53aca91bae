"""palacectl service: run palaced under your user's service manager (systemd --user, launchd).

Owns: the ``service`` commands (install, uninstall, status), rendering the service templates
shipped in ``palacectl/data/service/``, writing the result where the service manager looks, and
driving ``systemctl --user`` / ``launchctl``. The templates' readable twins are
``systemd/palaced.service`` and ``launchd/dev.palace.palaced.plist`` at the top of the
repository; a test keeps each pair identical. Registered on the main app by ``cli.py``.

Must not import palaced: the service runs the installed ``palaced`` console script, found beside
the running Python. The palace home's data is never touched: install only creates the home
folder (0700) when it is missing, and uninstall removes only the unit or plist file.

Error handling: every failure is one line through ``fail()`` (exit 1); a service-manager command
that fails or hangs is named, with its stderr. install checks all it can before it writes
anything (the service manager is reachable, an installed file that differs needs ``--force``, no
palaced already runs outside the service), so a failed check leaves no file behind. A manager
command that fails *after* the file is written leaves the file in place, and the lines printed so
far say what was done: fix the cause and rerun install (it is idempotent), or uninstall.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
# NamedTuple rather than dataclasses: this module loads with every palacectl command, and a
# dataclass costs ~0.5 ms to create.
from typing import Annotated, Any, Final, Literal, NamedTuple, Optional, cast

import typer

from .cli import JsonOpt, UsageProblem, _home, app
from .files import write_atomically
from .output import CommandFailed, emit_json, fail, note, write_stdout

__all__ = [
    "LAUNCHD_LABEL", "SYSTEMD_UNIT", "Step", "palaced_command", "render_launchd_plist",
    "render_systemd_unit", "service_app", "service_file",
]

service_app = typer.Typer(no_args_is_help=True,
                          help="Run palaced as your user's service (systemd --user on Linux, launchd on macOS).")
app.add_typer(service_app, name="service")

Platform = Literal["systemd", "launchd"]
Existing = Literal["absent", "identical", "different"]
PLATFORMS: Final[tuple[Platform, ...]] = ("systemd", "launchd")

SYSTEMD_UNIT: Final = "palaced.service"
LAUNCHD_LABEL: Final = "dev.palace.palaced"
# Why 30 s: systemctl and launchctl answer in milliseconds, and a start job (Type=exec) ends once
# palaced is exec'd; the limit only turns a hung service manager into an error line.
COMMAND_TIMEOUT_S: Final = 30.0
# Why 15 s: palaced answers on its socket well under a second after it starts; the margin is for
# a slow first start (opening a large database).
START_WAIT_S: Final = 15.0
# Why 0.1 s: a start is noticed within a tenth of a second, at ten cheap connection attempts a second.
START_POLL_S: Final = 0.1
# A service is "running" in these is-active states (activating includes auto-restart waits).
SYSTEMD_RUNNING_STATES: Final = frozenset({"active", "activating", "reloading", "deactivating", "refreshing"})


# -- where things are ---------------------------------------------------------------------------


def detect_platform() -> Platform | None:
    """The service manager palace supports on this operating system, if any."""
    if sys.platform == "darwin":
        return "launchd"
    if sys.platform.startswith("linux"):
        return "systemd"
    return None


def service_file(platform: Platform) -> Path:
    """Where the unit (systemd) or LaunchAgent plist (launchd) is installed for this user."""
    if platform == "systemd":
        # systemd --user reads $XDG_CONFIG_HOME/systemd/user; like the XDG spec, it ignores a
        # relative value. (The manager uses its own environment: we assume it matches ours.)
        config = os.environ.get("XDG_CONFIG_HOME", "")
        base = Path(config) if os.path.isabs(config) else Path.home() / ".config"
        return base / "systemd" / "user" / SYSTEMD_UNIT
    return Path.home() / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"


def launchd_log_dir() -> Path:
    return Path.home() / "Library" / "Logs" / "palace"


def palaced_command() -> list[str]:
    """The installed palaced as an absolute command: the console script beside this Python (the
    installation this palacectl belongs to), else the one on PATH, else ``python -m palaced``."""
    beside = Path(sys.executable).parent / "palaced"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside.absolute())]
    found = shutil.which("palaced")
    if found:
        return [str(Path(found).absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "palaced"]


def palace_home() -> Path:
    """The home in use (--home, $PALACE_HOME, ~/.palace), absolute: a service has no working directory of ours."""
    return _home().expanduser().absolute()


# -- rendering ----------------------------------------------------------------------------------

_TEMPLATE_NAMES: Final[dict[Platform, str]] = {"systemd": SYSTEMD_UNIT, "launchd": f"{LAUNCHD_LABEL}.plist"}
# Template-only notes, dropped at render time: "#:" lines (systemd), one "<!--: ... -->" block (plist).
_PLIST_NOTE: Final = re.compile(r"<!--:.*?-->\n", re.DOTALL)
# A word systemd reads literally without quotes (the rest is double-quoted).
_SYSTEMD_PLAIN_WORD: Final = re.compile(r"[A-Za-z0-9_./:@+,=~-]+")


def load_template(platform: Platform) -> str:
    """The packaged template, exactly as shipped."""
    from importlib import resources

    try:
        template = resources.files("palacectl") / "data" / "service" / _TEMPLATE_NAMES[platform]
        return template.read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"the {platform} template is missing from this palacectl installation: {exc.strerror or exc}")


def _check_path(value: str, what: str, *, systemd: bool) -> None:
    """Refuse what a service file cannot carry: control characters anywhere; in a systemd unit
    also $ (expanded in ExecStart only, so no one escape fits every line), quotes and backslashes."""
    forbidden = '$"\\' if systemd else ""
    bad = sorted({c for c in value if ord(c) < 32 or ord(c) == 127 or c in forbidden})
    if bad:
        fail(f"{what} {value!r} contains {', '.join(repr(c) for c in bad)}, which a "
             f"{'systemd unit' if systemd else 'launchd plist'} cannot carry safely; use another path")


def _systemd_word(value: str) -> str:
    """One argument as systemd reads it: % doubled (specifiers), double quotes around anything
    beyond plain path characters (spaces, quotes, ;)."""
    escaped = value.replace("%", "%%")
    return escaped if _SYSTEMD_PLAIN_WORD.fullmatch(value) else f'"{escaped}"'


# The filesystem-sandbox lines of the unit template: options commented out with no space ("#Key=").
_SANDBOX_LINE: Final = re.compile(r"^#(?=[A-Z][A-Za-z]+=)", re.MULTILINE)
# Can this user manager build the sandbox? A transient unit with the same options, running `true`.
SANDBOX_PROBE: Final = ("systemd-run", "--user", "--wait", "--quiet", "--collect", "-p", "PrivateUsers=yes",
                        "-p", "ProtectSystem=strict", "-p", "ProtectHome=read-only", "-p", "PrivateTmp=yes", "true")


def filesystem_sandbox_problem() -> str | None:
    """Why the unit's filesystem sandbox cannot work under this user manager, or None if it can
    (user namespaces restricted, e.g. Ubuntu 23.10+'s AppArmor default, fail the probe)."""
    try:
        proc = run_command(SANDBOX_PROBE)
    except CommandFailed as exc:  # systemd-run missing or hanging: the sandbox is unproven
        return exc.message
    if proc.returncode != 0:
        return f"`{_command_text(SANDBOX_PROBE)}` failed: {_one_line(proc.stderr) or f'exit {proc.returncode}'}"
    return None


def render_systemd_unit(palaced: Sequence[str], home: Path, *, filesystem_sandbox: bool = True) -> str:
    """The user unit for this palaced and home (template notes dropped, placeholders filled; the
    filesystem-sandbox lines on unless ``filesystem_sandbox`` is False)."""
    for word in palaced:
        _check_path(word, "the palaced command word", systemd=True)
    _check_path(str(home), "the palace home", systemd=True)
    values = {"@PALACED@": " ".join(_systemd_word(w) for w in palaced), "@HOME@": _systemd_word(str(home))}
    text = "".join(line for line in load_template("systemd").splitlines(keepends=True) if not line.startswith("#:"))
    if filesystem_sandbox:
        text = _SANDBOX_LINE.sub("", text)
    return re.sub("|".join(map(re.escape, values)), lambda m: values[m.group(0)], text)


def render_launchd_plist(palaced: Sequence[str], home: Path, log_dir: Path) -> str:
    """The LaunchAgent plist for this palaced, home and log folder (``@PALACED@`` becomes one
    ``<string>`` per word of the command)."""
    from xml.sax.saxutils import escape

    for word in palaced:
        _check_path(word, "the palaced command word", systemd=False)
    _check_path(str(home), "the palace home", systemd=False)
    _check_path(str(log_dir), "the log folder", systemd=False)
    words = "</string>\n\t\t<string>".join(escape(w) for w in palaced)
    values = {
        "<string>@PALACED@</string>": f"<string>{words}</string>",
        "@HOME@": escape(str(home)),
        "@LOGS@": escape(str(log_dir)),
    }
    text = _PLIST_NOTE.sub("", load_template("launchd"), count=1)
    return re.sub("|".join(map(re.escape, values)), lambda m: values[m.group(0)], text)


# -- running service-manager commands -----------------------------------------------------------


class Step(NamedTuple):
    """One service-manager command; ``when`` is the run-time condition it depends on, if any."""

    argv: tuple[str, ...]
    when: Literal["loaded", "not loaded"] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"argv": list(self.argv), "when": self.when}

    def __str__(self) -> str:
        import shlex

        text = shlex.join(self.argv)
        return text if self.when is None else f"{text}   (only if it is {self.when})"


def _one_line(text: str, width: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _command_text(argv: Sequence[str]) -> str:
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
        fail(f"`{_command_text(argv)}` did not finish within {timeout:.0f} s")
    except OSError as exc:
        fail(f"cannot run `{_command_text(argv)}`: {exc.strerror or exc}")


def run_checked(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run a command that must succeed; a failure is one line naming the command and its stderr."""
    proc = run_command(argv)
    if proc.returncode != 0:
        fail(f"`{_command_text(argv)}` failed (exit {proc.returncode}): "
             f"{_one_line(proc.stderr or proc.stdout) or 'no message'}")
    return proc


def _first_word(text: str) -> str | None:
    words = text.split()
    return words[0] if words else None


# -- the service managers -----------------------------------------------------------------------


def _pid1_name() -> str:
    try:
        return Path("/proc/1/comm").read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def systemd_booted() -> bool:
    """systemd is the init system (sd_booted(): the test systemd itself uses)."""
    return Path("/run/systemd/system").is_dir()


def systemd_problem() -> str | None:
    """Why ``systemctl --user`` cannot manage palaced here, or None."""
    if not systemd_booted():
        return f"systemd is not running as the init system here (PID 1 is {_pid1_name()})"
    if shutil.which("systemctl") is None:
        return "systemctl is not on PATH"
    probe = run_command(("systemctl", "--user", "show", "--property=Version"))
    if probe.returncode != 0:
        return (f"the systemd user manager is not reachable (`systemctl --user show` failed: "
                f"{_one_line(probe.stderr) or 'no message'}); run this from your own login session, not su or sudo")
    return None


def _launchd_domain() -> str:
    return f"gui/{os.getuid()}"


def _launchd_service() -> str:
    return f"{_launchd_domain()}/{LAUNCHD_LABEL}"


def launchd_problem() -> str | None:
    """Why ``launchctl`` cannot manage palaced here, or None."""
    if shutil.which("launchctl") is None:
        return "launchctl is not on PATH"
    probe = run_command(("launchctl", "print", _launchd_domain()))
    if probe.returncode != 0:
        return (f"launchd has no login session for you ({_launchd_domain()}: "
                f"{_one_line(probe.stderr or probe.stdout) or 'not found'}); log in at the Mac itself: "
                f"a LaunchAgent runs in your login session")
    return None


def manager_problem(platform: Platform) -> str | None:
    return systemd_problem() if platform == "systemd" else launchd_problem()


def launchd_loaded() -> bool:
    return run_command(("launchctl", "print", _launchd_service())).returncode == 0


class ManagerState(NamedTuple):
    """What the service manager says about palaced."""

    state: str  # systemd: is-active's word; launchd: launchctl's state, or "not loaded"; else "unknown"
    running: bool
    enabled: str | None = None  # systemd only: is-enabled's word
    reason: str | None = None  # why the state is unknown

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "running": self.running, "enabled": self.enabled, "reason": self.reason}


def query_state(platform: Platform) -> ManagerState:
    """Ask a reachable service manager about palaced (see ``manager_problem`` first)."""
    if platform == "systemd":
        active = run_command(("systemctl", "--user", "is-active", SYSTEMD_UNIT))
        word = _first_word(active.stdout)
        if word is None:
            return ManagerState("unknown", False, reason=f"`systemctl --user is-active {SYSTEMD_UNIT}` failed: "
                                                         f"{_one_line(active.stderr) or 'no message'}")
        enabled = run_command(("systemctl", "--user", "is-enabled", SYSTEMD_UNIT))
        return ManagerState(word, word in SYSTEMD_RUNNING_STATES, enabled=_first_word(enabled.stdout))
    probe = run_command(("launchctl", "print", _launchd_service()))
    if probe.returncode != 0:
        return ManagerState("not loaded", False)
    match = re.search(r"^\s*state = (\S+)", probe.stdout, re.MULTILINE)
    state = match.group(1) if match else "loaded"
    return ManagerState(state, state == "running")


def manager_state(platform: Platform | None) -> ManagerState:
    if platform is None:
        return ManagerState("unknown", False, reason=f"no supported service manager on {sys.platform}")
    problem = manager_problem(platform)
    return ManagerState("unknown", False, reason=problem) if problem else query_state(platform)


def run_steps(steps: Sequence[Step], on_ran: Callable[[Step], None] = lambda step: None) -> list[Step]:
    """Run the steps in order, a conditional one only if its condition held before the first step;
    ``on_ran`` hears of each as it completes (so a human sees what was done before a failure)."""
    loaded: bool | None = None
    ran: list[Step] = []
    for step in steps:
        if step.when is not None:
            if loaded is None:
                loaded = launchd_loaded()
            if loaded != (step.when == "loaded"):
                continue
        run_checked(step.argv)
        ran.append(step)
        on_ran(step)
    return ran


def install_steps(platform: Platform, existing: Existing, path: Path) -> list[Step]:
    """The commands that load and start the installed file."""
    if platform == "systemd":
        ctl = ("systemctl", "--user")
        if existing == "different":
            # `enable --now` would leave a running palaced on the old unit; restart starts the new one.
            return [Step((*ctl, "daemon-reload")), Step((*ctl, "enable", SYSTEMD_UNIT)),
                    Step((*ctl, "restart", SYSTEMD_UNIT))]
        return [Step((*ctl, "daemon-reload")), Step((*ctl, "enable", "--now", SYSTEMD_UNIT))]
    service, bootstrap = _launchd_service(), ("launchctl", "bootstrap", _launchd_domain(), str(path))
    if existing == "identical":
        # Already as wanted: load it if it is not, else make sure it runs (kickstart without -k
        # leaves a running palaced alone).
        return [Step(("launchctl", "enable", service)), Step(bootstrap, "not loaded"),
                Step(("launchctl", "kickstart", service), "loaded")]
    # A loaded agent keeps its old definition until booted out; `enable` clears an earlier
    # `launchctl disable`, which would make bootstrap fail.
    return [Step(("launchctl", "bootout", service), "loaded"), Step(("launchctl", "enable", service)), Step(bootstrap)]


def uninstall_steps(platform: Platform) -> tuple[list[Step], list[Step]]:
    """The commands to run before and after the file is removed."""
    if platform == "systemd":
        return ([Step(("systemctl", "--user", "disable", "--now", SYSTEMD_UNIT))],
                [Step(("systemctl", "--user", "daemon-reload"))])
    return [Step(("launchctl", "bootout", _launchd_service()), "loaded")], []


# -- the daemon, files --------------------------------------------------------------------------


def daemon_status(home: Path) -> dict[str, Any]:
    """Whether palaced answers a ping on this home's socket (and if not, why)."""
    from palace_proto.errors import ApiError

    from .client import Client, DaemonUnreachable, endpoint_for, socket_for

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


def existing_file(path: Path, content: str) -> Existing:
    try:
        current = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}")
    return "identical" if current == content else "different"


def write_file(path: Path, content: str) -> None:
    """Write atomically (palacectl.files: temporary file, fsync, rename, fsync the folder): the
    manager never reads half a file, and a power cut never leaves an empty one."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # 0644: no secrets inside; the usual mode for unit files and plists
        write_atomically(path, content.encode("utf-8"), 0o644)
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
    platform = detect_platform()
    if platform is None:
        fail(f"palacectl service supports systemd (Linux) and launchd (macOS), not {sys.platform}; "
             "run `palaced` under your own supervisor")
    return platform


def _noun(platform: Platform) -> str:
    return "unit" if platform == "systemd" else "plist"


def _logs_hint(platform: Platform) -> str:
    if platform == "systemd":
        return "journalctl --user -u palaced -f"
    return str(launchd_log_dir() / "palaced.log")


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


def plan_install(platform: Platform, *, filesystem_sandbox: bool = True) -> InstallPlan:
    home, palaced, path = palace_home(), palaced_command(), service_file(platform)
    log_dir = launchd_log_dir() if platform == "launchd" else None
    content = (render_systemd_unit(palaced, home, filesystem_sandbox=filesystem_sandbox) if log_dir is None
               else render_launchd_plist(palaced, home, log_dir))
    existing = existing_file(path, content)
    return InstallPlan(platform, path, content, existing, home, palaced, log_dir,
                       install_steps(platform, existing, path))


PlatformOpt = Annotated[Optional[str], typer.Option(
    "--platform", help="With --dry-run: show systemd's or launchd's file instead of this machine's.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the file and the exact commands; change nothing.")]


@service_app.command("install")
def install(
    dry_run: DryRunOpt = False,
    force: Annotated[bool, typer.Option("--force", help="Replace an installed file that differs.")] = False,
    platform: PlatformOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Install palaced as your user service and start it (systemd --user, or a launchd LaunchAgent)."""
    if platform is not None:
        if not dry_run:
            raise UsageProblem("--platform only previews another system's file; add --dry-run")
        if platform not in PLATFORMS:
            raise UsageProblem(f"--platform must be one of: {', '.join(PLATFORMS)}")
    kind = _this_platform() if platform is None else cast(Platform, platform)
    if dry_run:
        # No probe here (a dry run starts nothing): the unit is shown with its sandbox on.
        _print_dry_run(plan_install(kind), force=force, preview=platform is not None, as_json=json_)
        return

    problem = manager_problem(kind)
    if problem:
        fail(f"{problem}; use `palacectl service install --dry-run` to see the {_noun(kind)}, "
             "or run `palaced` directly")
    sandbox_problem = filesystem_sandbox_problem() if kind == "systemd" else None
    plan = plan_install(kind, filesystem_sandbox=sandbox_problem is None)
    if plan.existing == "different" and not force:
        fail(f"a different {plan.path.name} is already installed at {plan.path}; pass --force to replace it "
             "(`palacectl service install --dry-run` shows the new one)")
    if not query_state(kind).running:
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
    if plan.log_dir is not None and make_private_dir(plan.log_dir):
        say(f"Created the log folder {plan.log_dir}")
    if plan.existing == "identical":
        say(f"Unchanged {plan.path}")
    else:
        write_file(plan.path, plan.content)
        say(f"{'Replaced' if plan.existing == 'different' else 'Wrote'} {plan.path}")
    ran = run_steps(plan.steps, lambda step: say(f"Ran: {step}"))
    daemon = wait_for_daemon(plan.home)
    if not daemon["answering"]:
        fail(f"{plan.path.name} is installed and started, but palaced did not answer on {daemon['socket']} "
             f"within {START_WAIT_S:.0f} s; see {_logs_hint(kind)}")
    if json_:
        emit_json({**plan.to_json(dry_run=False, steps=ran), "home_created": home_created, "daemon": daemon,
                   "filesystem_sandbox": None if kind != "systemd" else sandbox_problem is None,
                   "filesystem_sandbox_problem": sandbox_problem})
    else:
        say(f"palaced answers on {daemon['socket']}. Logs: {_logs_hint(kind)}")


def _print_dry_run(plan: InstallPlan, *, force: bool, preview: bool, as_json: bool) -> None:
    if plan.existing == "different" and not force:
        note(f"Note: a different {plan.path.name} is installed at {plan.path}; install would refuse without --force.")
    if not preview and plan.platform == "systemd" and not systemd_booted():
        note(f"Note: systemd is not running as the init system here (PID 1 is {_pid1_name()}), so install would fail.")
    if plan.platform == "systemd":
        note("Note: install first checks that this user manager can build the filesystem sandbox "
             f"(`{_command_text(SANDBOX_PROBE)}`) and leaves those lines commented out if it cannot.")
    if as_json:
        emit_json(plan.to_json(dry_run=True, steps=plan.steps))
        return
    lines = []
    if not plan.home.is_dir():
        lines.append(f"Would create the palace home {plan.home} (0700)")
    if plan.log_dir is not None and not plan.log_dir.is_dir():
        lines.append(f"Would create the log folder {plan.log_dir}")
    action = {"absent": "write", "identical": "keep (unchanged)", "different": "replace"}[plan.existing]
    lines.append(f"Would {action} {plan.path}:\n")
    write_stdout("\n".join(lines) + "\n" + plan.content + "\nWould run:\n"
                 + "".join(f"  {step}\n" for step in plan.steps))


@service_app.command("uninstall")
def uninstall(dry_run: DryRunOpt = False, json_: JsonOpt = False) -> None:
    """Stop and disable the service and remove its file. The palace home and its data are never touched."""
    kind = _this_platform()
    path, home = service_file(kind), palace_home()
    installed = path.exists() or path.is_symlink()
    before, after = uninstall_steps(kind) if installed else ([], [])
    if installed and kind == "systemd" and not systemd_booted():
        # No systemd here, so nothing can be running from this unit: just remove the file.
        before, after = [], []
    result: dict[str, Any] = {"platform": kind, "dry_run": dry_run, "path": str(path), "installed": installed,
                              "removed": False, "home": str(home), "commands": [s.to_json() for s in (*before, *after)]}
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
            problem = manager_problem(kind)
            if problem:
                fail(f"{problem}; cannot stop palaced, so {path} stays")
        ran = run_steps(before, lambda step: say(f"Ran: {step}"))
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            fail(f"cannot remove {path}: {exc.strerror or exc}")
        say(f"Removed {path}")
        ran += run_steps(after, lambda step: say(f"Ran: {step}"))
        result.update(removed=True, commands=[s.to_json() for s in ran])
    if json_:
        emit_json(result)
    elif installed:
        say(f"The palace home {home} and its data were not touched.")


@service_app.command("status")
def status(json_: JsonOpt = False) -> None:
    """Is the service installed, what does the service manager say, and does palaced answer?"""
    kind, home = detect_platform(), palace_home()
    path = None if kind is None else service_file(kind)
    installed = path is not None and path.exists()
    manager = manager_state(kind)
    daemon = daemon_status(home)
    if json_:
        emit_json({"platform": kind, "path": None if path is None else str(path), "installed": installed,
                   "manager": manager.to_json(), "daemon": daemon, "home": str(home)})
        return
    file_line = "-" if path is None else f"{path} ({'installed' if installed else 'not installed'})"
    manager_line = f"{kind or '-'}: {manager.state}"
    if manager.enabled:
        manager_line += f" ({manager.enabled})"
    if manager.reason:
        manager_line += f": {manager.reason}"
    daemon_line = (f"answering on {daemon['socket']}" if daemon["answering"] and not daemon["reason"]
                   else f"{'answering' if daemon['answering'] else 'not answering'}: {daemon['reason']}")
    write_stdout(f"file      {file_line}\nmanager   {manager_line}\ndaemon    {daemon_line}\nhome      {home}\n")
