"""Test helpers: real palaced processes on temporary homes, and palacectl run as a subprocess."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PYTHON = sys.executable
# Why 15 s: a daemon starts in well under a second; a slow shared CI machine gets ample margin.
START_TIMEOUT_S = 15.0


@dataclass
class CtlResult:
    returncode: int
    stdout: str
    stderr: str
    stdout_bytes: bytes

    def json(self) -> Any:
        return json.loads(self.stdout)

    def __repr__(self) -> str:
        return f"<CtlResult rc={self.returncode} stdout={self.stdout[:300]!r} stderr={self.stderr[:300]!r}>"


class Daemon:
    """A real ``palaced`` subprocess on its own home."""

    def __init__(self, home: Path, *, extra_args: Sequence[str] = ()) -> None:
        self.home = home
        self.extra_args = list(extra_args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = home.parent / f"{home.name}.log"

    @property
    def socket_path(self) -> Path:
        return self.home / "palaced.sock"

    def start(self, *, wait: bool = True) -> Daemon:
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "palaced", "--home", str(self.home), *self.extra_args],
            stdout=self._log, stderr=self._log, stdin=subprocess.DEVNULL,
        )
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"palaced exited with {self.proc.returncode}: {self.log()}")
            if self.socket_path.exists():
                try:
                    with socket.socket(socket.AF_UNIX) as s:
                        s.connect(str(self.socket_path))
                    return
                except OSError:
                    pass
            time.sleep(0.02)
        raise AssertionError(f"palaced did not start within {START_TIMEOUT_S}s: {self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"palaced did not stop on signal {sig}: {self.log()}")
        self._log.close()
        return self.proc.returncode

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self._log.close()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def run_ctl(home: Path, *args: str, input: bytes | None = None, timeout: float = 60.0,
            env: dict[str, str] | None = None) -> CtlResult:
    """Run ``palacectl --home HOME ARGS`` as a real process."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PALACE_HOME", None)
    proc = subprocess.run(
        [PYTHON, "-m", "palacectl", "--home", str(home), *args],
        input=input if input is not None else b"", capture_output=True, timeout=timeout, env=full_env,
    )
    return CtlResult(proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"),
                     proc.stdout)


def append_event(ctl: Any, **fields: Any) -> dict[str, Any]:
    """Append through the CLI with sensible defaults; returns the event."""
    defaults = {"type": "note", "stream": "project/test", "room": "general", "from-agent": "tester"}
    args: list[str] = ["append", "--json"]
    for key, value in {**defaults, **{k.replace("_", "-"): v for k, v in fields.items()}}.items():
        args += [f"--{key}", str(value)]
    result = ctl(*args)
    assert result.returncode == 0, result
    return result.json()
