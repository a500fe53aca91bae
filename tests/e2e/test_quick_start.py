"""The README's quick start, run as printed, across two machines (issue 47 §1.1).

A newcomer's path: the Mac founds the palace and the Linux box joins, with the commands of
"Connect your machines" as printed; then the "Agent quick start" block runs as printed on the
Mac (the requester and its worker, each in a git checkout of its own); then again with the worker
on the box under the box's own id, as the quick start says. The commands are read from the README
itself (as the harness rig reads its blocks): a README change is tested as it stands. Each daemon
runs in a network namespace of its own, on its own subnet, and `palacectl invite` prints the
address the box dials.

What it holds the README to: every command exits 0; the CAPITALS are filled from what the
earlier commands printed; the watcher armed in step 3 wakes on the task's mail; the patch applies;
and the worker on the box is never refused as an agent that belongs to another machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fleet import Fleet, wait_until
from tests.helpers import init_repo, run_git
from tests.netns import needs_namespaces, routed_subnets

pytestmark = [pytest.mark.transport_fixed, pytest.mark.slow, needs_namespaces]

README = Path(__file__).resolve().parents[2] / "README.md"
PORT = 7437
NETWORK_ARGS = ["--no-mdns", "--listen", f"0.0.0.0:{PORT}"]
_FENCE = re.compile(r"^```sh\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
_STEP = re.compile(r"^# (\d+)\. ")


@dataclass
class Line:
    step: int  # the quick start's step (0 before the first), or the machine's index in Connect
    command: str  # as printed, continuation lines joined


def section_block(readme: str, heading: str) -> str:
    """The first ``sh`` block under ``heading`` (a ``## `` section of the README)."""
    start = readme.index(f"\n{heading}\n")
    end = readme.find("\n## ", start + 1)
    match = _FENCE.search(readme, start, end if end >= 0 else len(readme))
    assert match is not None, f"no sh block under {heading!r}"
    return match["body"]


def commands(block: str, marker: re.Pattern[str]) -> list[Line]:
    """The block's command lines (continuations joined), each with the step of the last comment
    ``marker`` matched before it: its number where it has one, else how many it matched."""
    lines: list[Line] = []
    step, seen, pending = 0, 0, ""
    for raw in block.splitlines():
        found = marker.match(raw)
        if found:
            seen += 1
            step = int(found[1]) if found[1].isdigit() else seen
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        pending += raw[:-1] + " " if raw.endswith("\\") else raw
        if not raw.endswith("\\"):
            lines.append(Line(step, pending))
            pending = ""
    return lines


def _without_comment(command: str) -> str:
    """The line without its trailing comment (the README's comments hold no quotes)."""
    return re.sub(r"\s+#[^'\"]*$", "", command).strip()


class Shell:
    """Runs README lines as a person would at a terminal on one machine: ``palacectl`` on PATH,
    ``$PALACE_HOME`` that machine's daemon, in the checkout ``cwd``."""

    def __init__(self, home: Path, bin_dir: Path) -> None:
        self.env = {**os.environ, "PALACE_HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
        self.background: list[subprocess.Popen[str]] = []

    def run(self, command: str, cwd: Path, extra: dict[str, str] | None = None, timeout: float = 120) -> str:
        proc = subprocess.run(["bash", "-c", command], cwd=cwd, env={**self.env, **(extra or {})}, text=True,
                              capture_output=True, timeout=timeout)
        assert proc.returncode == 0, f"`{command}` exited {proc.returncode}: {proc.stderr.strip()}"
        return proc.stdout + proc.stderr

    def start(self, command: str, cwd: Path, extra: dict[str, str] | None = None) -> subprocess.Popen[str]:
        proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=cwd, env={**self.env, **(extra or {})},
                                text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self.background.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.background:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            proc.communicate(timeout=10)  # and its pipes closed


def _finish(proc: subprocess.Popen[str], what: str, timeout: float = 60) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"{what} exited {proc.returncode}: {err.strip()}"
    return out


def run_quick_start(lines: list[Line], mac: Shell, worker: Shell, requester_repo: Path, worker_repo: Path,
                    worker_id: str) -> None:
    """The quick start's block, step by step; step 5 on ``worker`` as ``worker_id``. The ``wait``
    of step 4 and the watcher of step 3 run alongside, as in another terminal."""
    values: dict[str, str] = {}
    waiting: subprocess.Popen[str] | None = None
    watcher: subprocess.Popen[str] | None = None
    (worker_repo / "wait.py").write_text("fixed = True\n")  # the worker's work, before its `git diff`
    for line in lines:
        command = line.command.replace("mac-codex", worker_id)
        for capital in ("TASK_ID", "ART_ID", "PATCH_EVT_ID"):
            if capital in command:
                if capital != "TASK_ID" and waiting is not None:
                    _read_wait(_finish(waiting, "step 4's wait"), values)
                    waiting = None
                command = command.replace(capital, values[capital])
        if re.fullmatch(r"CID=\S+\s*(#.*)?", command):
            values["CID"] = command.split("=", 1)[1].split()[0]
            continue
        shell, cwd = (worker, worker_repo) if line.step == 5 else (mac, requester_repo)
        extra = {"CID": values.get("CID", "")}
        command = _without_comment(command)
        if command.endswith("&"):
            assert "palacectl watch" in command, command
            watcher = shell.start(command[:-1].strip(), cwd, extra)
        elif command.startswith("palacectl wait "):
            waiting = shell.start(command, cwd, extra)
        else:
            out = shell.run(command, cwd, extra)
            created = re.search(r"\btask_\w+", out) if command.startswith("palacectl task create") else None
            if created:
                values["TASK_ID"] = created[0]
    assert waiting is None, "nothing used what step 4's wait printed"
    assert (requester_repo / "wait.py").read_text() == "fixed = True\n"  # the patch applied
    assert watcher is not None, "step 3 armed no watcher"
    woke = json.loads(_finish(watcher, "step 3's watcher"))  # exit 0: mail (a claim, a patch: the second
    assert woke["events"] and {e["to_agent"] for e in woke["events"]} == {"mac-claude"}, woke  # pass's may be the first's)


def _peer_id(status_json: str) -> str:
    return json.loads(status_json)["fingerprint"]


def _read_wait(out: str, values: dict[str, str]) -> None:
    artifact = re.search(r"artifacts=(art_\w+)", out)
    event = re.search(r"\b(evt_\w+)\b.*patch\.ready|patch\.ready.*?\b(evt_\w+)\b", out)
    assert artifact and event, f"step 4's wait printed no artifact or event id: {out!r}"
    values["ART_ID"] = artifact[1]
    values["PATCH_EVT_ID"] = event[1] or event[2]


def test_the_quick_start_runs_as_printed_on_one_machine_and_with_the_worker_on_another(daemon_factory, short_tmp):
    readme = README.read_text()
    connect = commands(section_block(readme, "## Connect your machines"), re.compile(r"^# On (the first|each)"))
    quick = commands(section_block(readme, "## Agent quick start"), _STEP)
    assert {line.step for line in quick} >= {1, 2, 3, 4, 5, 6}, quick
    assert {line.step for line in connect} == {1, 2}, connect
    # The quick start names the worker's id on the other machine; step 5 runs there as it.
    other = re.search(r"the worker of step 5 is that machine's own id, `([\w.-]+)`", readme)
    assert other is not None, "the quick start no longer says which id the worker has on another machine"
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "palacectl").exists(), bin_dir
    with routed_subnets("q", 2) as net:
        fleet = Fleet(daemon_factory, short_tmp)
        mac_daemon = fleet.start("mac", prefix=net.exec_prefix(0), network_args=NETWORK_ARGS)
        box_daemon = fleet.start("box", prefix=net.exec_prefix(1), network_args=NETWORK_ARGS)
        mac, box = Shell(mac_daemon.home, bin_dir), Shell(box_daemon.home, bin_dir)
        try:
            # Connect your machines, as printed: the first machine's lines on the Mac, the others on the box.
            code = ""
            for line in connect:
                command = _without_comment(line.command)
                if "ssh " in command:  # the same join, through ssh: the box has joined already
                    continue
                shell = mac if line.step == 1 else box
                if "palace1-…" in command:
                    command = command.replace("palace1-…", code)
                out = shell.run(command, short_tmp)
                found = re.search(r"palace1-[\w-]+", out)
                if command == "palacectl invite" and found:
                    code = found[0]
            assert code, "`palacectl invite` printed no code"
            box_id = box.run("palacectl status --json", short_tmp)
            wait_until(lambda: _peer_id(box_id) in mac.run("palacectl peers --json", short_tmp), "the box linked")

            origin = short_tmp / "origin"
            init_repo(origin)
            (origin / "wait.py").write_text("fixed = False\n")
            run_git(origin, "add", "wait.py", check=True)
            run_git(origin, "commit", "-q", "-m", "wait", check=True)
            clones = {}
            for name in ("mac-requester", "mac-worker", "box-worker"):
                clones[name] = short_tmp / name
                subprocess.run(["git", "clone", "-q", str(origin), str(clones[name])], check=True)

            # One machine, as printed.
            run_quick_start(quick, mac, mac, clones["mac-requester"], clones["mac-worker"], "mac-codex")
            # The worker on the box, under the box's own id: never refused as another machine's.
            run_git(clones["mac-requester"], "checkout", "-q", "--", ".", check=True)
            run_git(clones["mac-requester"], "clean", "-fdq", check=True)
            run_quick_start(quick, mac, box, clones["mac-requester"], clones["box-worker"], other[1])
        finally:
            mac.stop()
            box.stop()
            for daemon in (box_daemon, mac_daemon):  # while their namespaces still exist
                daemon.stop()
