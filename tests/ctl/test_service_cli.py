"""palacectl service (the ``palacectl.service`` package and its commands in ``palacectl.service.cli``):
the templates, their rendering, and install / uninstall / status, for palaced and for an agent's
worker (``--worker``), without ever reaching the real user's service manager.

Real palacectl processes run with HOME and XDG_CONFIG_HOME in a temporary folder. Where a test
needs systemd or launchd to answer, it runs palacectl in-process with a fake service manager
(``FakeManager``) in place of ``runner.run_command``: it records every command and plays systemd or
launchd just far enough. No test starts a service, and nothing touches the network.
"""

from __future__ import annotations

import os
import plistlib
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from palacectl.cli import main
from palacectl.output import CommandFailed
from palacectl.service import cli as service_commands
from palacectl.service import host, managers, runner, templates
from tests.helpers import CtlResult, run_ctl

REPO = Path(__file__).resolve().parents[2]
# The console scripts beside the test's Python: what install must put in the unit.
VENV_PALACED = Path(sys.executable).parent / "palaced"
VENV_PALACECTL = Path(sys.executable).parent / "palacectl"
SYSTEMD_IS_INIT = Path("/run/systemd/system").is_dir()
needs_no_systemd = pytest.mark.skipif(
    SYSTEMD_IS_INIT, reason="systemd is the init system here: this test would reach the real user manager")


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A throwaway user home: HOME and XDG_CONFIG_HOME point into it, PALACE_HOME is unset."""
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.delenv("PALACE_HOME", raising=False)
    return home


def ctl(user_home: Path, palace: Path, *args: str) -> CtlResult:
    """palacectl as a real process, on this palace home, for this throwaway user."""
    return run_ctl(palace, "service", *args, timeout=30,
                   env={"HOME": str(user_home), "XDG_CONFIG_HOME": str(user_home / ".config")})


def unit_path(user_home: Path) -> Path:
    return user_home / ".config" / "systemd" / "user" / "palaced.service"


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*"))


# -- the templates ------------------------------------------------------------------------------


TEMPLATES = ["systemd/palaced.service", "launchd/dev.palace.palaced.plist", "systemd/palace-worker.service",
             "launchd/dev.palace.worker.plist", "systemd/palace-integrate.service", "launchd/dev.palace.integrate.plist"]


@pytest.mark.parametrize("top_level", TEMPLATES)
def test_packaged_templates_are_the_top_level_files(top_level: str) -> None:
    """install renders the copy inside the package; the top-level file is the one people read."""
    packaged = REPO / "palacectl" / "data" / "service" / Path(top_level).name
    assert packaged.read_bytes() == (REPO / top_level).read_bytes()


def test_every_template_file_is_a_twin() -> None:
    """A template added to one folder and not the list above (or to the package only) fails here."""
    shipped = {p.name for p in (REPO / "palacectl" / "data" / "service").iterdir()}
    readable = {p.name for folder in ("systemd", "launchd") for p in (REPO / folder).iterdir()}
    assert shipped == readable == {Path(t).name for t in TEMPLATES}


@pytest.mark.parametrize("plist", ["dev.palace.palaced.plist", "dev.palace.worker.plist", "dev.palace.integrate.plist"])
def test_plist_templates_are_well_formed_xml(plist: str) -> None:
    """The readable templates parse as they are, notes and placeholders included (an XML comment
    may not hold "--", so the notes spell no command-line flags)."""
    import xml.parsers.expat

    xml.parsers.expat.ParserCreate().Parse((REPO / "launchd" / plist).read_bytes(), True)


@pytest.mark.parametrize("unit", ["palaced.service", "palace-worker.service", "palace-integrate.service"])
def test_every_sandboxing_line_says_why(unit: str) -> None:
    """Each option of the unit's [Service] section follows a comment line (house rule: say why)."""
    lines = (REPO / "systemd" / unit).read_text().splitlines()
    service = lines[lines.index("[Service]") + 1: lines.index("[Install]")]
    for i, line in enumerate(service):
        if re.match(r"#?[A-Z][A-Za-z]+=", line) and not service[i - 1].startswith("#"):
            raise AssertionError(f"no comment above {line!r}")


# -- rendering ----------------------------------------------------------------------------------


def test_unit_runs_the_installed_palaced_on_the_home() -> None:
    unit = templates.render_systemd_unit([str(VENV_PALACED)], Path("/srv/palace"))
    assert f"ExecStart={VENV_PALACED} --home /srv/palace\n" in unit
    assert "\nReadWritePaths=/srv/palace\n" in unit  # the one writable place under the sandbox
    assert "@" not in unit.replace("@system-service", "")  # every placeholder filled
    assert not any(line.startswith("#:") for line in unit.splitlines())  # template notes dropped


def test_unit_quotes_spaces_and_escapes_percent() -> None:
    unit = templates.render_systemd_unit(["/opt/my tools/palaced"], Path("/home/a b/100%"))
    assert 'ExecStart="/opt/my tools/palaced" --home "/home/a b/100%%"\n' in unit


@pytest.mark.parametrize("home", ["/home/a$b", '/home/a"b', "/home/a\\b", "/home/a\nb"])
def test_unit_refuses_paths_it_cannot_carry(home: str) -> None:
    with pytest.raises(CommandFailed, match="cannot carry safely"):
        templates.render_systemd_unit([str(VENV_PALACED)], Path(home))


def systemd_analyze_verify(unit_text: str, where: Path, name: str = "palaced.service") -> tuple[int, list[str]]:
    """``systemd-analyze --user verify`` on the text saved as ``name``; the output lines that
    concern our file (verify may also grumble about unrelated units of the host)."""
    folder = where / "verify"
    runtime = folder / "run"
    runtime.mkdir(parents=True, mode=0o700)
    unit = folder / name
    unit.write_text(unit_text)
    # A user-mode verify needs XDG_RUNTIME_DIR; everything it creates stays in the tmp folder.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder), "XDG_RUNTIME_DIR": str(runtime),
           "XDG_CONFIG_HOME": str(folder / "config"), "LC_ALL": "C"}
    proc = subprocess.run(["systemd-analyze", "--user", "verify", str(unit)], check=False, capture_output=True,
                          text=True, timeout=30, env=env, cwd=folder)
    ours = [line for line in (proc.stdout + proc.stderr).splitlines() if name in line]
    return proc.returncode, ours


needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                           reason="systemd-analyze is not installed here")


@needs_systemd_analyze
@pytest.mark.parametrize("variant", ["filesystem sandbox on", "filesystem sandbox off", "home with spaces and %"])
def test_rendered_unit_passes_systemd_analyze_verify(variant: str, tmp_path: Path) -> None:
    assert VENV_PALACED.is_file(), "verify checks that ExecStart exists: the venv must have its palaced script"
    home = tmp_path / ("pal home 100%" if variant == "home with spaces and %" else "pal")
    unit = templates.render_systemd_unit([str(VENV_PALACED)], home,
                                           filesystem_sandbox=variant != "filesystem sandbox off")
    if variant == "filesystem sandbox off":
        assert "\n#ProtectSystem=strict\n" in unit and "\nProtectSystem" not in unit
    else:
        assert "\nPrivateUsers=yes\n" in unit and "\nProtectSystem=strict\n" in unit
        assert "\nProtectHome=read-only\n" in unit and "\nPrivateTmp=yes\n" in unit
    returncode, complaints = systemd_analyze_verify(unit, tmp_path)
    assert (returncode, complaints) == (0, [])


@needs_systemd_analyze
def test_systemd_analyze_verify_would_catch_a_broken_unit(tmp_path: Path) -> None:
    """The control for the test above: verify does complain about our file when it is wrong."""
    unit = templates.render_systemd_unit(["/nonexistent/palaced"], tmp_path / "pal")
    returncode, complaints = systemd_analyze_verify(unit.replace("RestartSec=2", "RestartSecs=2"), tmp_path)
    assert returncode != 0
    assert any("RestartSecs" in line for line in complaints)
    assert any("/nonexistent/palaced" in line for line in complaints)


@pytest.mark.parametrize("palaced", [[str(VENV_PALACED)], ["/usr/bin/python3", "-m", "palaced"]])
def test_launchd_plist_renders_and_parses(palaced: list[str]) -> None:
    home, logs = Path("/Users/me/a & <b>"), Path("/Users/me/Library/Logs/palace")
    plist = plistlib.loads(templates.render_launchd_plist(palaced, home, logs).encode())
    assert plist["Label"] == "dev.palace.palaced"
    assert plist["ProgramArguments"] == [*palaced, "--home", str(home)]
    assert plist["RunAtLoad"] is True
    assert plist["KeepAlive"] == {"SuccessfulExit": False, "Crashed": True}
    assert plist["ProcessType"] == "Standard"
    assert plist["StandardOutPath"] == plist["StandardErrorPath"] == f"{logs}/palaced.log"
    assert plist["Umask"] == 0o077


def test_palaced_falls_back_to_python_m_palaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No console script beside Python and none on PATH: the unit runs `python -m palaced`."""
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python3"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert host.palaced_command() == [str(tmp_path / "python3"), "-m", "palaced"]


# -- subprocesses -------------------------------------------------------------------------------


def test_command_timeout_is_one_error_line() -> None:
    with pytest.raises(CommandFailed, match=r"^`sleep 5` did not finish within 0 s$"):
        runner.run_command(["sleep", "5"], timeout=0.2)


def test_missing_program_is_one_error_line() -> None:
    with pytest.raises(CommandFailed, match="`no-such-systemctl` is not installed"):
        runner.run_command(["no-such-systemctl", "--user"])


# -- the real CLI, as a process -----------------------------------------------------------------


def test_dry_run_prints_the_unit_and_commands_and_touches_nothing(user_home: Path, tmp_path: Path) -> None:
    palace = tmp_path / "palace"
    result = ctl(user_home, palace, "install", "--dry-run")
    assert result.returncode == 0, result
    assert f"Would write {unit_path(user_home)}:\n" in result.stdout
    assert f"\nExecStart={VENV_PALACED} --home {palace}\n" in result.stdout
    assert result.stdout.endswith("Would run:\n  systemctl --user daemon-reload\n"
                                  "  systemctl --user enable --now palaced.service\n")
    assert files_under(user_home) == [] and not palace.exists()


def test_dry_run_json_is_the_plan(user_home: Path, tmp_path: Path) -> None:
    palace = tmp_path / "palace"
    plan = ctl(user_home, palace, "install", "--dry-run", "--json").json()
    assert plan["platform"] == "systemd" and plan["dry_run"] is True and plan["existing"] == "absent"
    assert plan["palaced"] == [str(VENV_PALACED)] and plan["home"] == str(palace)
    assert plan["path"] == str(unit_path(user_home))
    assert plan["commands"] == [{"argv": ["systemctl", "--user", "daemon-reload"], "when": None},
                                {"argv": ["systemctl", "--user", "enable", "--now", "palaced.service"], "when": None}]
    assert plan["content"] == templates.render_systemd_unit([str(VENV_PALACED)], palace)
    assert files_under(user_home) == []


def test_dry_run_previews_the_launchd_plist_anywhere(user_home: Path, tmp_path: Path) -> None:
    palace = tmp_path / "palace"
    plan = ctl(user_home, palace, "install", "--dry-run", "--platform", "launchd", "--json").json()
    assert plan["path"] == str(user_home / "Library" / "LaunchAgents" / "dev.palace.palaced.plist")
    assert plan["log_dir"] == str(user_home / "Library" / "Logs" / "palace")
    assert plistlib.loads(plan["content"].encode())["ProgramArguments"] == [str(VENV_PALACED), "--home", str(palace)]
    assert [c["argv"][1] for c in plan["commands"]] == ["bootout", "enable", "bootstrap"]
    assert plan["commands"][0]["when"] == "loaded"
    assert files_under(user_home) == []


def test_platform_is_a_preview_option_only(user_home: Path, tmp_path: Path) -> None:
    result = ctl(user_home, tmp_path / "palace", "install", "--platform", "launchd")
    assert result.returncode == 64 and "add --dry-run" in result.stderr


@needs_no_systemd
def test_install_without_systemd_fails_in_one_line_and_leaves_nothing(user_home: Path, tmp_path: Path) -> None:
    palace = tmp_path / "palace"
    result = ctl(user_home, palace, "install")
    assert result.returncode == 1, result
    assert result.stdout == ""
    assert re.fullmatch(r"palacectl: systemd is not running as the init system here \(PID 1 is .+\); use "
                        r"`palacectl service install --dry-run` to see the unit, or run `palaced` directly\n",
                        result.stderr), result.stderr
    assert files_under(user_home) == [] and not palace.exists()

    as_json = ctl(user_home, palace, "install", "--json")
    assert as_json.returncode == 1 and as_json.json()["error"]["message"].startswith("systemd is not running")


def test_uninstall_with_nothing_installed_says_so_and_succeeds(user_home: Path, tmp_path: Path) -> None:
    result = ctl(user_home, tmp_path / "palace", "uninstall")
    assert result.returncode == 0, result
    assert result.stdout == f"Nothing to uninstall: no {unit_path(user_home)}\n"


@needs_no_systemd
def test_uninstall_without_systemd_removes_only_the_unit(user_home: Path, tmp_path: Path) -> None:
    palace = tmp_path / "palace"
    palace.mkdir()
    (palace / "palace.sqlite3").write_bytes(b"the log")
    unit_path(user_home).parent.mkdir(parents=True)
    unit_path(user_home).write_text("[Service]\nExecStart=/bin/true\n")
    result = ctl(user_home, palace, "uninstall")
    assert result.returncode == 0, result
    assert not unit_path(user_home).exists()
    assert (palace / "palace.sqlite3").read_bytes() == b"the log"
    assert f"The palace home {palace} and its data were not touched." in result.stdout


def test_status_reports_not_installed_and_daemon_unreachable(user_home: Path, short_tmp: Path) -> None:
    palace = short_tmp / "palace"
    report = ctl(user_home, palace, "status", "--json").json()
    assert report["installed"] is False and report["path"] == str(unit_path(user_home))
    assert report["daemon"]["answering"] is False
    assert report["daemon"]["socket"] == str(palace / "palaced.sock")
    assert "palaced is not running" in report["daemon"]["reason"]
    if not SYSTEMD_IS_INIT:
        assert report["manager"]["state"] == "unknown"
        assert report["manager"]["reason"].startswith("systemd is not running as the init system here")
    human = ctl(user_home, palace, "status")
    assert human.returncode == 0
    assert f"file      {unit_path(user_home)} (not installed)\n" in human.stdout
    assert "daemon    not answering: palaced is not running" in human.stdout


def test_a_home_path_the_unit_cannot_carry_is_refused(user_home: Path, tmp_path: Path) -> None:
    result = ctl(user_home, tmp_path / "pal$HOME", "install", "--dry-run")
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "contains '$', which a systemd unit cannot carry safely" in result.stderr


# -- install and uninstall against a fake service manager --------------------------------------


class FakeManager:
    """systemctl --user / launchctl, just far enough: records every command, tracks which services
    (units, or launchd labels) run and are loaded, and fails a command on request. ``running`` and
    ``loaded`` are palaced's; ``outside`` is a palaced it did not start."""

    def __init__(self, platform: str = "systemd") -> None:
        self.calls: list[list[str]] = []
        self.palaced = "palaced.service" if platform == "systemd" else "dev.palace.palaced"
        self.up: set[str] = set()
        self.loaded_jobs: set[str] = set()
        self.outside = False
        self.failures: dict[str, tuple[int, str]] = {}  # verb -> (exit code, stderr)
        self.sandbox_ok = True  # whether the filesystem-sandbox probe (systemd-run) succeeds
        self.probes = 0

    @property
    def running(self) -> bool:
        return self.palaced in self.up

    @running.setter
    def running(self, value: bool) -> None:
        (self.up.add if value else self.up.discard)(self.palaced)

    @property
    def loaded(self) -> bool:
        return self.palaced in self.loaded_jobs

    @loaded.setter
    def loaded(self, value: bool) -> None:
        (self.loaded_jobs.add if value else self.loaded_jobs.discard)(self.palaced)

    @staticmethod
    def target(argv: list[str]) -> str:
        """The unit or launchd label a command is about (bootstrap names the plist file)."""
        if argv[:2] == ["launchctl", "bootstrap"]:
            return Path(argv[-1]).name.removesuffix(".plist")
        return argv[-1].rsplit("/", 1)[-1]

    def run(self, argv: Sequence[str], *, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        if argv[0] == "systemd-run":
            assert tuple(argv) == managers.SANDBOX_PROBE
            self.probes += 1
            return subprocess.CompletedProcess(argv, 0 if self.sandbox_ok else 1, "",
                                               "" if self.sandbox_ok else "Failed to set up user namespacing")
        verb, target = argv[2] if argv[:2] == ["systemctl", "--user"] else argv[1], self.target(argv)
        if verb == "is-active":
            state = "active" if target in self.up else "inactive"
            return subprocess.CompletedProcess(argv, 0 if target in self.up else 3, f"{state}\n", "")
        if verb == "is-enabled":
            return subprocess.CompletedProcess(argv, 0, "enabled\n", "")
        if verb == "print":  # launchctl print gui/UID/LABEL: 0 when loaded
            state = "running" if target in self.up else "not running"
            return subprocess.CompletedProcess(argv, 0 if target in self.loaded_jobs else 113,
                                               f"\tstate = {state}\n", "")
        self.calls.append(argv)
        if verb in self.failures:
            code, stderr = self.failures[verb]
            return subprocess.CompletedProcess(argv, code, "", stderr)
        if verb in ("restart", "kickstart") or (verb == "enable" and "--now" in argv):
            self.up.add(target)
        if verb == "bootstrap":
            self.up.add(target)
            self.loaded_jobs.add(target)
        if verb in ("disable", "bootout"):
            self.up.discard(target)
            self.loaded_jobs.discard(target)
        return subprocess.CompletedProcess(argv, 0, "", "")

    def daemon(self, home: Path, timeout: float = 0.0) -> dict[str, Any]:
        answering = self.running or self.outside
        return {"answering": answering, "socket": str(home / "palaced.sock"),
                "reason": None if answering else "palaced is not running"}


@pytest.fixture(params=["systemd"])
def fake(request: pytest.FixtureRequest, user_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeManager]:
    manager = FakeManager(request.param)
    monkeypatch.setattr(host, "detect_platform", lambda: request.param)
    monkeypatch.setattr(host, "systemd_booted", lambda: True)
    monkeypatch.setattr(managers, "systemd_problem", lambda: None)
    monkeypatch.setattr(managers, "launchd_problem", lambda: None)
    monkeypatch.setattr(runner, "run_command", manager.run)
    monkeypatch.setattr(service_commands, "daemon_status", manager.daemon)
    monkeypatch.setattr(service_commands, "wait_for_daemon", manager.daemon)
    yield manager


def test_the_fake_replaces_every_way_to_the_service_manager() -> None:
    """Guards the fixture above: each replaced function is looked up on its module at call time.
    A ``from .runner import run_command`` in another module would copy the real one past the
    fake, and a test would drive this machine's own systemctl or launchctl."""
    replaced = {"detect_platform", "systemd_booted", "systemd_problem", "launchd_problem", "run_command",
                "daemon_status", "wait_for_daemon"}
    import ast

    sources = sorted((REPO / "palacectl" / "service").glob("*.py"))  # its commands too (service/cli.py)
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                copied = {alias.name for alias in node.names} & replaced
                assert not copied, f"{path.name}:{node.lineno} imports {sorted(copied)} by name"


def service(palace: Path, *args: str) -> int:
    """palacectl in-process (so the fake manager stands in for systemctl/launchctl)."""
    return main(["--home", str(palace), "service", *args])


SYSTEMCTL = ["systemctl", "--user"]


def test_install_writes_the_unit_and_starts_it(fake: FakeManager, user_home: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    palace = tmp_path / "palace"
    assert service(palace, "install") == 0
    out = capsys.readouterr().out
    assert unit_path(user_home).read_text() == templates.render_systemd_unit([str(VENV_PALACED)], palace)
    assert stat.S_IMODE(palace.stat().st_mode) == 0o700
    assert fake.calls == [[*SYSTEMCTL, "daemon-reload"], [*SYSTEMCTL, "enable", "--now", "palaced.service"]]
    assert out == ("Filesystem sandbox: on (ProtectSystem=strict, ProtectHome=read-only, the home writable, "
                   f"PrivateTmp)\nCreated the palace home {palace} (0700)\nWrote {unit_path(user_home)}\n"
                   "Ran: systemctl --user daemon-reload\nRan: systemctl --user enable --now palaced.service\n"
                   f"palaced answers on {palace / 'palaced.sock'}. Logs: journalctl --user -u palaced -f\n")


def test_install_again_is_idempotent(fake: FakeManager, user_home: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    palace = tmp_path / "palace"
    assert service(palace, "install") == 0
    fake.calls.clear()
    capsys.readouterr()
    assert service(palace, "install", "--json") == 0
    report = json_out(capsys)
    assert report["existing"] == "identical" and report["home_created"] is False
    assert report["daemon"]["answering"] is True
    assert fake.calls == [[*SYSTEMCTL, "daemon-reload"], [*SYSTEMCTL, "enable", "--now", "palaced.service"]]


def test_install_refuses_a_different_unit_without_force(fake: FakeManager, user_home: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    unit_path(user_home).parent.mkdir(parents=True)
    unit_path(user_home).write_text("[Service]\nExecStart=/old/palaced\n")
    assert service(tmp_path / "palace", "install") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is already installed at" in err and "pass --force to replace it" in err
    assert unit_path(user_home).read_text() == "[Service]\nExecStart=/old/palaced\n"
    assert fake.calls == [] and not (tmp_path / "palace").exists()


def test_install_force_replaces_the_unit_and_restarts(fake: FakeManager, user_home: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    palace = tmp_path / "palace"
    unit_path(user_home).parent.mkdir(parents=True)
    unit_path(user_home).write_text("[Service]\nExecStart=/old/palaced\n")
    fake.running = True  # the old unit's palaced
    assert service(palace, "install", "--force") == 0
    assert f"Replaced {unit_path(user_home)}\n" in capsys.readouterr().out
    assert unit_path(user_home).read_text() == templates.render_systemd_unit([str(VENV_PALACED)], palace)
    assert fake.calls == [[*SYSTEMCTL, "daemon-reload"], [*SYSTEMCTL, "enable", "palaced.service"],
                          [*SYSTEMCTL, "restart", "palaced.service"]]


def test_install_refuses_while_a_palaced_runs_outside_the_service(fake: FakeManager, user_home: Path,
                                                                  tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Two daemons on one home: the service's would fail "already running" and restart in a loop."""
    fake.outside = True
    assert service(tmp_path / "palace", "install") == 1
    assert "a palaced outside the service manager already answers on" in capsys.readouterr().err
    assert not unit_path(user_home).exists() and fake.calls == []


def test_a_failing_systemctl_is_one_line_naming_the_command(fake: FakeManager, user_home: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    fake.failures["enable"] = (1, "Failed to enable unit: Unit file palaced.service is masked.\n")
    assert service(tmp_path / "palace", "install") == 1
    captured = capsys.readouterr()
    assert captured.err == ("palacectl: `systemctl --user enable --now palaced.service` failed (exit 1): "
                            "Failed to enable unit: Unit file palaced.service is masked.\n")
    # What was done is on stdout; the unit stays, so a rerun (idempotent) or uninstall finishes the job.
    assert "Ran: systemctl --user daemon-reload\n" in captured.out and unit_path(user_home).exists()


def test_install_fails_when_palaced_never_answers(fake: FakeManager, user_home: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(service_commands, "wait_for_daemon", lambda home: {
        "answering": False, "socket": str(home / "palaced.sock"), "reason": "no socket"})
    assert service(tmp_path / "palace", "install") == 1
    assert "palaced.service is installed and started, but palaced did not answer on" in capsys.readouterr().err


def test_uninstall_stops_disables_and_removes_only_the_unit(fake: FakeManager, user_home: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    palace = tmp_path / "palace"
    assert service(palace, "install") == 0
    (palace / "palace.sqlite3").write_bytes(b"the log")
    fake.calls.clear()
    capsys.readouterr()
    assert service(palace, "uninstall") == 0
    assert fake.calls == [[*SYSTEMCTL, "disable", "--now", "palaced.service"], [*SYSTEMCTL, "daemon-reload"]]
    assert not unit_path(user_home).exists() and (palace / "palace.sqlite3").read_bytes() == b"the log"
    assert capsys.readouterr().out == (
        f"Ran: systemctl --user disable --now palaced.service\nRemoved {unit_path(user_home)}\n"
        f"Ran: systemctl --user daemon-reload\nThe palace home {palace} and its data were not touched.\n")


def test_dry_runs_run_no_command(fake: FakeManager, user_home: Path, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def no_command(argv: Sequence[str], **_: Any) -> subprocess.CompletedProcess[str]:
        raise AssertionError(f"a dry run ran {argv}")

    monkeypatch.setattr(runner, "run_command", no_command)
    palace = tmp_path / "palace"
    assert service(palace, "install", "--dry-run") == 0
    assert service(palace, "install", "--dry-run", "--platform", "launchd") == 0
    unit_path(user_home).parent.mkdir(parents=True)
    unit_path(user_home).write_text("[Service]\n")
    assert service(palace, "uninstall", "--dry-run") == 0
    assert "Would run: systemctl --user disable --now palaced.service\n" in capsys.readouterr().out
    assert unit_path(user_home).read_text() == "[Service]\n" and not palace.exists()


@pytest.mark.parametrize("fake", ["launchd"], indirect=True)
def test_launchd_install_and_uninstall(fake: FakeManager, user_home: Path, tmp_path: Path) -> None:
    palace = tmp_path / "palace"
    plist = user_home / "Library" / "LaunchAgents" / "dev.palace.palaced.plist"
    service_target = f"gui/{os.getuid()}/dev.palace.palaced"
    assert service(palace, "install") == 0
    assert plistlib.loads(plist.read_bytes())["ProgramArguments"] == [str(VENV_PALACED), "--home", str(palace)]
    assert (user_home / "Library" / "Logs" / "palace").is_dir()
    assert fake.calls == [["launchctl", "enable", service_target],
                          ["launchctl", "bootstrap", f"gui/{os.getuid()}", str(plist)]]  # bootout: not loaded
    fake.calls.clear()
    assert service(palace, "install") == 0  # identical and loaded: only make sure it runs
    assert fake.calls == [["launchctl", "enable", service_target], ["launchctl", "kickstart", service_target]]
    fake.calls.clear()
    assert service(palace, "uninstall") == 0
    assert fake.calls == [["launchctl", "bootout", service_target]] and not plist.exists()


@pytest.mark.parametrize("command", [["install"], ["uninstall"]])
def test_unsupported_platform_says_what_to_do(command: list[str], user_home: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(host, "detect_platform", lambda: None)
    assert service(tmp_path / "palace", *command) == 1
    assert "run `palaced` under your own supervisor" in capsys.readouterr().err
    assert service(tmp_path / "palace", "status", "--json") == 0
    report = json_out(capsys)
    assert report["platform"] is None and report["installed"] is False
    assert report["manager"]["reason"].startswith("no supported service manager")


def json_out(capsys: pytest.CaptureFixture[str]) -> Any:
    import json

    return json.loads(capsys.readouterr().out)


def test_install_leaves_the_filesystem_sandbox_off_where_the_user_manager_cannot_build_it(
        fake: FakeManager, user_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Regression guard: where user namespaces are restricted (Ubuntu 23.10+), a unit with
    ProtectSystem= fails every start with 226/NAMESPACE; install must notice and leave it out."""
    fake.sandbox_ok = False
    palace = tmp_path / "palace"
    assert service(palace, "install") == 0
    out = capsys.readouterr().out
    assert "Filesystem sandbox: off, because `systemd-run --user" in out and "user namespacing" in out
    unit = unit_path(user_home).read_text()
    assert unit == templates.render_systemd_unit([str(VENV_PALACED)], palace, filesystem_sandbox=False)
    assert "\n#ProtectSystem=strict\n" in unit and "\nNoNewPrivileges=yes\n" in unit
    assert fake.probes == 1


# -- an agent's worker (install --worker) -------------------------------------------------------

WORKER_SANDBOX_OPTIONS = ("PrivateUsers", "ProtectSystem", "ProtectHome", "ReadWritePaths", "PrivateTmp",
                          "PrivateDevices", "NoNewPrivileges", "RestrictAddressFamilies", "SystemCallFilter",
                          "MemoryDenyWriteExecute", "RestrictNamespaces", "LockPersonality", "UMask")


def worker_unit_path(user_home: Path, agent: str = "bot") -> Path:
    return user_home / ".config" / "systemd" / "user" / host.worker_service(agent).unit


@pytest.fixture
def harness_path(tmp_path: Path) -> str:
    """A PATH whose first folder holds a stand-in `claude` (so install finds the harness), then the system's."""
    folder = tmp_path / "bin"
    folder.mkdir()
    claude = folder / "claude"
    claude.write_text("#!/bin/sh\nexit 0\n")
    claude.chmod(0o755)
    return f"{folder}:/usr/bin:/bin"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder.resolve()


def worker_ctl(user_home: Path, palace: Path, path: str, *args: str) -> CtlResult:
    """``ctl`` with this PATH (the one install writes into the worker's file)."""
    return run_ctl(palace, "service", *args, timeout=30,
                   env={"HOME": str(user_home), "XDG_CONFIG_HOME": str(user_home / ".config"), "PATH": path})


def worker_args(workspace: Path, *extra: str, agent: str = "bot") -> list[str]:
    return ["--agent", agent, "--runner", "claude", "--workspace", str(workspace), *extra]


def test_worker_slug_keeps_safe_ids_and_hashes_the_rest() -> None:
    assert host.worker_slug("mac-claude_2.x") == "mac-claude_2.x"
    colon, slash = host.worker_slug("ops:bot"), host.worker_slug("ops/bot")
    assert colon != slash  # the collision the hash suffix exists for
    assert re.fullmatch(r"ops-bot-[0-9a-f]{8}", colon) and re.fullmatch(r"ops-bot-[0-9a-f]{8}", slash)
    assert host.worker_slug("ops-bot") == "ops-bot"  # and neither collides with the id that is already safe
    assert host.worker_service("ops:bot") == (f"palace-worker-{colon}.service", f"dev.palace.worker.{colon}")
    assert host.worker_service("x" * 200).unit == f"palace-worker-{'x' * 200}.service"


def test_worker_unit_renders_each_word_escaped() -> None:
    args = ["--agent", "a b%", "--runner", "claude", "--workspace", "/w s/100%", "--project", "p"]
    unit = templates.render_worker_unit(["/opt/bin/palacectl"], Path("/home/me/pal"), args, agent="a b%",
                                        workspace=Path("/w s/100%"), path_env="/a b:/usr/bin")
    assert ('ExecStart=/opt/bin/palacectl --home /home/me/pal worker --agent "a b%%" --runner claude '
            '--workspace "/w s/100%%" --project p\n') in unit
    assert "\nWorkingDirectory=/w s/100%%\n" in unit  # WorkingDirectory= takes no quotes
    assert '\nEnvironment="PATH=/a b:/usr/bin"\n' in unit
    assert "\nDescription=palace worker for agent a b%%\n" in unit
    assert "@" not in unit and not any(line.startswith("#:") for line in unit.splitlines())


@pytest.mark.parametrize(("agent", "path_env", "message"), [
    ("a$b", "/usr/bin", "the --agent value 'a$b' contains '$', which a systemd unit cannot carry safely; "
                        "choose another"),
    ("bot", '/usr/bin:/opt/"x"', "your PATH '/usr/bin:/opt/\"x\"' contains '\"', which a systemd unit cannot "
                                 "carry safely; remove that folder from PATH, then rerun install"),
])
def test_worker_unit_refuses_what_it_cannot_carry(agent: str, path_env: str, message: str) -> None:
    with pytest.raises(CommandFailed) as caught:
        templates.render_worker_unit(["/opt/bin/palacectl"], Path("/pal"), ["--agent", agent], agent=agent,
                                     workspace=Path("/w"), path_env=path_env)
    assert caught.value.message == message


@needs_systemd_analyze
def test_rendered_worker_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    assert VENV_PALACECTL.is_file(), "verify checks that ExecStart exists: the venv must have its palacectl script"
    work = tmp_path / "my ws 100%"
    work.mkdir()
    agent = "ops:bot 50%"
    args = ["--agent", agent, "--runner", "claude", "--workspace", str(work), "--concurrency", "2"]
    unit = templates.render_worker_unit([str(VENV_PALACECTL)], tmp_path / "pal", args, agent=agent, workspace=work,
                                        path_env="/usr/local/bin:/usr/bin:/bin")
    returncode, complaints = systemd_analyze_verify(unit, tmp_path, host.worker_service(agent).unit)
    assert (returncode, complaints) == (0, [])


def test_worker_dry_run_prints_its_unit_and_touches_nothing(user_home: Path, tmp_path: Path, workspace: Path,
                                                            harness_path: str) -> None:
    palace = tmp_path / "palace"
    result = worker_ctl(user_home, palace, harness_path, "install", "--worker",
                        *worker_args(workspace, "--concurrency", "2", "--project", "web", "--timeout", "30m"),
                        "--dry-run")
    assert result.returncode == 0, result
    assert "not on your PATH" not in result.stderr  # the stand-in claude is on this PATH
    unit = worker_unit_path(user_home)
    assert unit.name == "palace-worker-bot.service"
    assert result.stdout.startswith(f"Would write {unit}:\n")  # and no "Would create the palace home"
    lines = result.stdout.splitlines()
    assert (f"ExecStart={VENV_PALACECTL} --home {palace} worker --agent bot --runner claude --workspace {workspace} "
            "--concurrency 2 --project web --timeout 30m") in lines
    for line in (f"WorkingDirectory={workspace}", f'Environment="PATH={harness_path}"', "After=palaced.service",
                 "Wants=palaced.service", "Type=exec", "Restart=on-failure", "RestartSec=5", "KillMode=mixed",
                 "TimeoutStopSec=90", "WantedBy=default.target", "Description=palace worker for agent bot",
                 "# Logs: journalctl --user -u palace-worker-bot -f"):
        assert line in lines, line
    options = {line.split("=", 1)[0].lstrip("#") for line in lines if re.match(r"#?[A-Z][A-Za-z]+=", line)}
    assert not options & set(WORKER_SANDBOX_OPTIONS)  # no sandbox, not even commented out
    assert result.stdout.endswith("Would run:\n  systemctl --user daemon-reload\n"
                                  "  systemctl --user enable --now palace-worker-bot.service\n")
    assert files_under(user_home) == [] and not palace.exists()


def test_worker_dry_run_previews_its_launchd_plist(user_home: Path, tmp_path: Path, workspace: Path,
                                                   harness_path: str) -> None:
    palace = tmp_path / "palace"
    plan = worker_ctl(user_home, palace, harness_path, "install", "--worker", *worker_args(workspace, agent="ops/bot"),
                      "--dry-run", "--platform", "launchd", "--json").json()
    slug = host.worker_slug("ops/bot")
    assert plan["path"] == str(user_home / "Library" / "LaunchAgents" / f"dev.palace.worker.{slug}.plist")
    assert plan["palacectl"] == [str(VENV_PALACECTL)] and "palaced" not in plan
    assert plan["worker"] == {"agent": "ops/bot", "slug": slug, "label": f"dev.palace.worker.{slug}",
                              "runner": "claude", "workspace": str(workspace), "concurrency": None, "project": None,
                              "timeout": None, "args": worker_args(workspace, agent="ops/bot"),
                              "env": {"PATH": harness_path}}
    plist = plistlib.loads(plan["content"].encode())
    logs = user_home / "Library" / "Logs" / "palace"
    assert plist["Label"] == f"dev.palace.worker.{slug}"
    assert plist["ProgramArguments"] == [str(VENV_PALACECTL), "--home", str(palace), "worker",
                                         *worker_args(workspace, agent="ops/bot")]
    assert plist["WorkingDirectory"] == str(workspace)
    assert plist["EnvironmentVariables"] == {"PATH": harness_path}
    assert plist["RunAtLoad"] is True and plist["KeepAlive"]["SuccessfulExit"] is False
    assert plist["ExitTimeOut"] == 90
    assert plist["StandardOutPath"] == plist["StandardErrorPath"] == f"{logs}/worker-{slug}.log"  # its own log
    assert [c["argv"][1] for c in plan["commands"]] == ["bootout", "enable", "bootstrap"]
    assert plan["commands"][1]["argv"][-1].endswith(f"/dev.palace.worker.{slug}")
    assert files_under(user_home) == []


def test_agents_that_differ_only_in_unsafe_characters_get_different_services(
        user_home: Path, tmp_path: Path, workspace: Path, harness_path: str) -> None:
    paths = {worker_ctl(user_home, tmp_path / "palace", harness_path, "install", "--worker",
                        *worker_args(workspace, agent=agent), "--dry-run", "--json").json()["path"]
             for agent in ("a:b", "a/b", "a-b")}
    assert len(paths) == 3


@pytest.mark.parametrize(("args", "message"), [
    (["install", "--agent", "bot"], "--agent only works with --worker (an agent's worker service): add --worker, "
                                    "or leave it out"),
    (["install", "--runner", "claude", "--concurrency", "2"], "--runner, --concurrency only work with --worker"),
    (["uninstall", "--agent", "bot"], "--agent only works with --worker"),
    (["status", "--agent", "bot"], "--agent only works with --worker"),
    (["install", "--worker", "--runner", "claude"], "--worker needs --agent ID"),
    (["uninstall", "--worker"], "--worker needs --agent ID (whose worker): palacectl service uninstall --worker"),
    (["status", "--worker"], "--worker needs --agent ID"),
    (["install", "--worker", "--agent", "bot"], "--worker needs --runner NAME and --workspace DIR"),
    (["install", "--worker", "--agent", "", "--runner", "claude", "--workspace", "."], "--agent is empty"),
    (["status", "--worker", "--agent", "a\tb"], "contains control characters"),
    (["uninstall", "--worker", "--agent", "x" * 201], "--agent is 201 characters long"),
    (["install", "--worker", "--agent", "bot", "--runner", "claude", "--workspace", ".", "--timeout", "soon"],
     "--timeout 'soon' is not a duration"),
    (["install", "--worker", "--agent", "bot", "--runner", "claude", "--workspace", ".", "--concurrency", "0"],
     "--concurrency must be from 1 to 16"),
    (["install", "--worker", "--agent", "bot", "--runner", "claude", "--workspace", ".", "--concurrency", "17"],
     "--concurrency must be from 1 to 16"),
    (["install", "--worker", "--agent", "  ", "--runner", "claude", "--workspace", "."], "--agent is empty"),
])
def test_worker_usage_errors_are_one_line(args: list[str], message: str, user_home: Path, tmp_path: Path) -> None:
    result = ctl(user_home, tmp_path / "palace", *args)
    assert result.returncode == 64, result
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert files_under(user_home) == []


@pytest.mark.parametrize("case", ["unknown runner", "bad runner config", "missing workspace", "workspace is a file",
                                  "agent a unit cannot carry"])
def test_worker_install_refusals_are_one_line_and_leave_nothing(case: str, user_home: Path, tmp_path: Path,
                                                                workspace: Path, harness_path: str) -> None:
    palace = tmp_path / "palace"
    args, agent, runner = workspace, "bot", "claude"
    if case == "unknown runner":
        runner, message = "nope", "unknown runner 'nope': use one of claude, codex, gemini, opencode"
    elif case == "bad runner config":
        palace.mkdir()
        (palace / "config.toml").write_text('[runners.mine]\ncommand = "not a list"\n')
        runner, message = "mine", "[runners.mine] command must be a non-empty list of strings"
    elif case == "missing workspace":
        args, message = tmp_path / "nowhere", f"the workspace {tmp_path / 'nowhere'} does not exist"
    elif case == "workspace is a file":
        args = tmp_path / "file"
        args.write_text("")
        message = "is not a folder"
    else:
        agent, message = "a$b", "contains '$', which a systemd unit cannot carry safely"
    before = files_under(tmp_path)
    for dry_run in (["--dry-run"], []):
        result = worker_ctl(user_home, palace, harness_path, "install", "--worker", "--agent", agent,
                            "--runner", runner, "--workspace", str(args), *dry_run)
        assert result.returncode == 1, result
        assert result.stdout == "" and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert files_under(tmp_path) == before


def test_a_custom_runner_from_config_toml_is_accepted(user_home: Path, tmp_path: Path, workspace: Path) -> None:
    palace = tmp_path / "palace"
    palace.mkdir()
    (palace / "config.toml").write_text('[runners.mine]\ncommand = ["my-agent", "--prompt", "{handoff}"]\n')
    result = worker_ctl(user_home, palace, "/usr/bin:/bin", "install", "--worker", "--agent", "bot",
                        "--runner", "mine", "--workspace", str(workspace), "--dry-run", "--json")
    assert result.returncode == 0, result
    assert result.json()["worker"]["runner"] == "mine"
    # The harness is not on that PATH: a note, not a refusal (it may be installed later).
    assert "runner 'mine' runs `my-agent`, which is not on your PATH" in result.stderr


@needs_no_systemd
def test_worker_install_without_systemd_fails_in_one_line_and_leaves_nothing(
        user_home: Path, tmp_path: Path, workspace: Path, harness_path: str) -> None:
    result = worker_ctl(user_home, tmp_path / "palace", harness_path, "install", "--worker", *worker_args(workspace))
    assert result.returncode == 1 and result.stdout == ""
    assert re.fullmatch(r"palacectl: systemd is not running as the init system here \(PID 1 is .+\); use "
                        r"`palacectl service install --worker \.\.\. --dry-run` to see the unit, or run "
                        r"`palacectl worker` directly\n", result.stderr), result.stderr
    assert files_under(user_home) == []


# In-process, against the fake service manager.


@pytest.fixture
def on_harness_path(harness_path: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """This process's PATH is ``harness_path`` (in-process install reads it for the worker's file)."""
    monkeypatch.setenv("PATH", harness_path)
    return harness_path


def render_worker(palace: Path, workspace: Path, *, agent: str = "bot") -> str:
    return templates.render_worker_unit([str(VENV_PALACECTL)], palace, worker_args(workspace, agent=agent),
                                        agent=agent, workspace=workspace, path_env=os.environ["PATH"])


@pytest.mark.usefixtures("on_harness_path")
def test_install_worker_writes_its_unit_and_starts_only_it(fake: FakeManager, user_home: Path, tmp_path: Path,
                                                           workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    palace = tmp_path / "palace"
    assert service(palace, "install", "--worker", *worker_args(workspace)) == 0
    captured = capsys.readouterr()
    unit = worker_unit_path(user_home)
    assert unit.read_text() == render_worker(palace, workspace)
    assert fake.calls == [[*SYSTEMCTL, "daemon-reload"], [*SYSTEMCTL, "enable", "--now", "palace-worker-bot.service"]]
    assert fake.up == {"palace-worker-bot.service"} and fake.probes == 0  # no sandbox to probe
    assert not unit_path(user_home).exists() and not palace.exists()  # palaced's unit and home: not ours to make
    assert captured.out == (f"Wrote {unit}\nRan: systemctl --user daemon-reload\n"
                            "Ran: systemctl --user enable --now palace-worker-bot.service\n"
                            "The worker for bot is running (systemd: active). "
                            "Logs: journalctl --user -u palace-worker-bot -f\n")
    # palaced does not answer (the fake runs no palaced): install still succeeds, and says so.
    assert captured.err == (f"Note: palaced does not answer on {palace / 'palaced.sock'}; the worker waits for it "
                            "(`palacectl service install` runs palaced as a service too).\n")


@pytest.mark.usefixtures("on_harness_path")
def test_install_worker_again_is_unchanged(fake: FakeManager, user_home: Path, tmp_path: Path, workspace: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    palace = tmp_path / "palace"
    fake.running = True  # palaced runs as a service: no note
    assert service(palace, "install", "--worker", *worker_args(workspace)) == 0
    fake.calls.clear()
    capsys.readouterr()
    assert service(palace, "install", "--worker", *worker_args(workspace)) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"Unchanged {worker_unit_path(user_home)}\n") and captured.err == ""
    assert service(palace, "install", "--worker", *worker_args(workspace), "--json") == 0
    report = json_out(capsys)
    assert report["existing"] == "identical" and report["manager"]["state"] == "active"
    assert report["daemon"]["answering"] is True
    assert report["worker"]["unit"] == "palace-worker-bot.service" and report["worker"]["agent"] == "bot"
    start = [[*SYSTEMCTL, "daemon-reload"], [*SYSTEMCTL, "enable", "--now", "palace-worker-bot.service"]]
    assert fake.calls == 2 * start


@pytest.mark.usefixtures("on_harness_path")
def test_install_worker_needs_force_for_a_different_unit(fake: FakeManager, user_home: Path, tmp_path: Path,
                                                         workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    palace = tmp_path / "palace"
    unit = worker_unit_path(user_home)
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\nExecStart=/old/palacectl worker\n")
    assert service(palace, "install", "--worker", *worker_args(workspace)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a different palace-worker-bot.service is already installed" in err
    assert "pass --force to replace it" in err
    assert unit.read_text() == "[Service]\nExecStart=/old/palacectl worker\n" and fake.calls == []

    assert service(palace, "install", "--worker", *worker_args(workspace, "--concurrency", "4"), "--force") == 0
    assert f"Replaced {unit}\n" in capsys.readouterr().out
    assert " --concurrency 4\n" in unit.read_text()
    assert fake.calls == [[*SYSTEMCTL, "daemon-reload"], [*SYSTEMCTL, "enable", "palace-worker-bot.service"],
                          [*SYSTEMCTL, "restart", "palace-worker-bot.service"]]


@pytest.mark.usefixtures("on_harness_path")
def test_install_worker_refuses_when_the_manager_is_unreachable(fake: FakeManager, user_home: Path,
                                                                tmp_path: Path, workspace: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(managers, "systemd_problem", lambda: "the systemd user manager is not reachable")
    assert service(tmp_path / "palace", "install", "--worker", *worker_args(workspace)) == 1
    assert capsys.readouterr().err == ("palacectl: the systemd user manager is not reachable; use `palacectl service "
                                       "install --worker ... --dry-run` to see the unit, or run `palacectl worker` "
                                       "directly\n")
    assert not worker_unit_path(user_home).exists() and fake.calls == []


@pytest.mark.usefixtures("on_harness_path")
def test_uninstall_worker_removes_only_its_unit(fake: FakeManager, user_home: Path, tmp_path: Path, workspace: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    palace = tmp_path / "palace"
    assert service(palace, "install") == 0  # palaced's own service
    assert service(palace, "install", "--worker", *worker_args(workspace)) == 0
    assert service(palace, "install", "--worker", *worker_args(workspace, agent="other")) == 0
    fake.calls.clear()
    capsys.readouterr()
    assert service(palace, "uninstall", "--worker", "--agent", "bot") == 0
    assert fake.calls == [[*SYSTEMCTL, "disable", "--now", "palace-worker-bot.service"], [*SYSTEMCTL, "daemon-reload"]]
    assert not worker_unit_path(user_home).exists()
    assert unit_path(user_home).exists() and worker_unit_path(user_home, "other").exists()
    assert fake.up == {"palaced.service", "palace-worker-other.service"}
    assert capsys.readouterr().out == (
        f"Ran: systemctl --user disable --now palace-worker-bot.service\nRemoved {worker_unit_path(user_home)}\n"
        f"Ran: systemctl --user daemon-reload\n"
        f"The palace home {palace}, its data and the worker's workspace were not touched.\n")
    assert service(palace, "uninstall", "--worker", "--agent", "bot", "--json") == 0
    report = json_out(capsys)
    assert report["installed"] is False and report["worker"] == {"agent": "bot", "slug": "bot",
                                                                 "unit": "palace-worker-bot.service"}


@pytest.mark.usefixtures("on_harness_path")
def test_status_worker_reports_its_own_service(fake: FakeManager, user_home: Path, tmp_path: Path, workspace: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    palace = tmp_path / "palace"
    assert service(palace, "status", "--worker", "--agent", "bot", "--json") == 0
    report = json_out(capsys)
    assert report["installed"] is False and report["path"] == str(worker_unit_path(user_home))
    assert report["manager"]["state"] == "inactive" and report["worker"]["unit"] == "palace-worker-bot.service"
    assert service(palace, "install", "--worker", *worker_args(workspace)) == 0
    capsys.readouterr()
    assert service(palace, "status", "--worker", "--agent", "bot") == 0
    out = capsys.readouterr().out
    assert out.startswith("worker    bot (logs: journalctl --user -u palace-worker-bot -f)\n"
                          f"file      {worker_unit_path(user_home)} (installed)\nmanager   systemd: active (enabled)\n")
    assert service(palace, "status", "--json") == 0  # palaced's status is palaced's, untouched
    report = json_out(capsys)
    assert report["installed"] is False and "worker" not in report and report["manager"]["state"] == "inactive"


@pytest.mark.parametrize("fake", ["launchd"], indirect=True)
@pytest.mark.usefixtures("on_harness_path")
def test_launchd_worker_install_and_uninstall(fake: FakeManager, user_home: Path, tmp_path: Path,
                                              workspace: Path) -> None:
    palace = tmp_path / "palace"
    plist = user_home / "Library" / "LaunchAgents" / "dev.palace.worker.bot.plist"
    target = f"gui/{os.getuid()}/dev.palace.worker.bot"
    assert service(palace, "install", "--worker", *worker_args(workspace)) == 0
    loaded = plistlib.loads(plist.read_bytes())
    assert loaded["ProgramArguments"] == [str(VENV_PALACECTL), "--home", str(palace), "worker", *worker_args(workspace)]
    assert loaded["StandardErrorPath"] == str(user_home / "Library" / "Logs" / "palace" / "worker-bot.log")
    assert (user_home / "Library" / "Logs" / "palace").is_dir()
    assert fake.calls == [["launchctl", "enable", target], ["launchctl", "bootstrap", f"gui/{os.getuid()}", str(plist)]]
    fake.calls.clear()
    assert service(palace, "install", "--worker", *worker_args(workspace)) == 0  # identical and loaded
    assert fake.calls == [["launchctl", "enable", target], ["launchctl", "kickstart", target]]
    fake.calls.clear()
    assert service(palace, "uninstall", "--worker", "--agent", "bot") == 0
    assert fake.calls == [["launchctl", "bootout", target]] and not plist.exists()


# -- an integrator's service (issue 46) -----------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    (folder / ".git").mkdir(parents=True)
    return folder.resolve()


def integrate_args(repo: Path, *extra: str, agent: str = "lander") -> list[str]:
    return ["--agent", agent, "--repo", str(repo), "--branch", "integration", "--project", "shop", *extra]


def test_integrator_dry_run_prints_its_unit_and_plist_and_touches_nothing(user_home: Path, tmp_path: Path,
                                                                         repo: Path) -> None:
    palace = tmp_path / "palace"
    result = ctl(user_home, palace, "install", "--integrate", *integrate_args(repo, "--check", "make test",
                                                                              "--check-timeout", "20m"), "--dry-run")
    assert result.returncode == 0, result
    unit = user_home / ".config" / "systemd" / "user" / "palace-integrate-lander.service"
    assert result.stdout.startswith(f"Would write {unit}:\n")
    lines = result.stdout.splitlines()
    assert (f"ExecStart={VENV_PALACECTL} --home {palace} integrate --agent lander --repo {repo} --branch integration "
            '--project shop --check "make test" --check-timeout 20m') in lines
    for line in (f"WorkingDirectory={repo}", "Description=palace integrator for agent lander", "KillMode=mixed",
                 "# Logs: journalctl --user -u palace-integrate-lander -f"):
        assert line in lines, line
    assert result.stdout.endswith("  systemctl --user enable --now palace-integrate-lander.service\n")
    plan = ctl(user_home, palace, "install", "--integrate", *integrate_args(repo), "--dry-run", "--platform",
               "launchd", "--json").json()
    plist = plistlib.loads(plan["content"].encode())
    assert plist["Label"] == "dev.palace.integrate.lander" and plist["WorkingDirectory"] == str(repo)
    assert plist["ProgramArguments"] == [str(VENV_PALACECTL), "--home", str(palace), "integrate",
                                         *integrate_args(repo)]
    assert plist["StandardOutPath"].endswith("/integrate-lander.log")
    assert plan["worker"]["command"] == "integrate" and plan["worker"]["label"] == "dev.palace.integrate.lander"
    assert files_under(user_home) == [] and not palace.exists()


@pytest.mark.parametrize(("args", "message"), [
    (["install", "--integrate", "--agent", "lander"], "--integrate needs --repo DIR and --branch NAME and --project P"),
    (["install", "--integrate", "--repo", "."], "--integrate needs --agent ID (whose integrator)"),
    (["install", "--repo", ".", "--branch", "x"], "--repo, --branch only with --integrate"),
    (["install", "--worker", "--integrate", "--agent", "x"], "--worker and --integrate are two services"),
    (["install", "--integrate", "--agent", "lander", "--runner", "claude"], "--runner only with --worker"),
    (["install", "--integrate", "--agent", "human:ana", "--repo", ".", "--branch", "b", "--project", "p"],
     "not a person's human:NAME"),
    (["install", "--integrate", "--agent", "lander", "--repo", ".", "--branch", "b", "--project", "p", "--check",
      'echo "$HOME"'], "put the command in [integrate] check in config.toml"),
    (["install", "--integrate", "--agent", "lander", "--repo", ".", "--branch", "b", "--project", "p",
      "--check-timeout", "soon"], "--check-timeout"),
    (["status", "--integrate"], "--integrate needs --agent ID"),
    (["uninstall", "--integrate", "--worker", "--agent", "x"], "--worker and --integrate are two services"),
])
def test_integrator_usage_errors_are_one_line(args: list[str], message: str, user_home: Path, tmp_path: Path) -> None:
    result = ctl(user_home, tmp_path / "palace", *args)
    assert result.returncode == 64, result
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert files_under(user_home) == []


def test_integrator_on_a_folder_that_is_no_repository_is_refused(user_home: Path, tmp_path: Path) -> None:
    result = ctl(user_home, tmp_path / "palace", "install", "--integrate", *integrate_args(tmp_path), "--dry-run")
    assert result.returncode == 1 and "is not a git repository" in result.stderr and result.stderr.count("\n") == 1
    assert files_under(user_home) == []


def test_install_status_and_uninstall_an_integrator(fake: FakeManager, user_home: Path, tmp_path: Path, repo: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    palace = tmp_path / "palace"
    unit = user_home / ".config" / "systemd" / "user" / "palace-integrate-lander.service"
    assert service(palace, "install", "--integrate", *integrate_args(repo)) == 0
    out = capsys.readouterr().out
    assert f"Wrote {unit}\n" in out and "The integrator for lander is running (systemd: active)" in out
    assert fake.up == {"palace-integrate-lander.service"} and " integrate --agent lander " in unit.read_text()
    assert service(palace, "status", "--integrate", "--agent", "lander", "--json") == 0
    report = json_out(capsys)
    assert report["installed"] is True and report["worker"]["command"] == "integrate"
    assert service(palace, "uninstall", "--integrate", "--agent", "lander") == 0
    out = capsys.readouterr().out
    assert f"Removed {unit}\n" in out and "its data and the repository were not touched" in out
    assert not unit.exists() and fake.up == set()
