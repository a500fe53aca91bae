"""A ``palaced`` subprocess for the benchmarks: started, called, measured and stopped.

Owns: how every ``palacectl bench`` starts its daemons. Each runs on its own home inside the
benchmark's temporary directory, with ``--no-mdns`` and listening on 127.0.0.1 only (the network
rule: a benchmark never multicasts nor opens a port beyond loopback), in a session of its own.
palacectl never imports palaced: the daemon is ``python -m palaced``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

from .client import Client, DaemonUnreachable

__all__ = ["LOOPBACK_ANY_PORT", "NETWORK_ARGS", "START_TIMEOUT_S", "BenchDaemon"]

# Why these flags: the network rule. Nothing the benchmark starts multicasts or listens beyond
# loopback; peers find each other through the invite address and remembered addresses only.
NETWORK_ARGS: Final = ("--no-mdns",)
LOOPBACK_ANY_PORT: Final = "127.0.0.1:0"
START_TIMEOUT_S: Final = 30.0


class BenchDaemon:
    """One ``palaced`` subprocess on its own home inside the benchmark's directory."""

    def __init__(self, root: Path, name: str) -> None:
        self.name = name
        self.home = root / name
        self.log_path = root / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<BenchDaemon {self.name} {state} port={self.port}>"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def spawn(self, listen: str = LOOPBACK_ANY_PORT) -> float:
        """Start the process (without waiting for it); returns the ``perf_counter`` at the start."""
        assert not self.running, f"{self.name} is already running"
        with open(self.log_path, "ab") as log:
            t0 = time.perf_counter()
            # A session of its own: Ctrl-C reaches only us, and we stop the daemon (SIGTERM) in order,
            # instead of it dying under clients that would then report it unreachable.
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "palaced", "--home", str(self.home), "--log-level", "warning",
                 *NETWORK_ARGS, "--listen", listen],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        return t0

    def connect(self, timeout: float = START_TIMEOUT_S) -> Client:
        """A connected client, once the daemon answers (polling its socket while it starts)."""
        deadline = time.monotonic() + timeout
        while True:
            client = Client(self.home, client_name="palacectl-bench")
            try:
                client.connect()
                return client
            except DaemonUnreachable:
                client.close()
                if self.proc is None or self.proc.poll() is not None:
                    raise RuntimeError(f"palaced {self.name} exited during start-up; its log:\n{self.log_tail()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"palaced {self.name} did not answer within {timeout:.0f} s") from None
                time.sleep(0.01)

    def start(self, listen: str = LOOPBACK_ANY_PORT) -> None:
        self.spawn(listen)
        self.connect().close()

    def call(self, op: str, **args: Any) -> Any:
        with Client(self.home, client_name="palacectl-bench") as client:
            return client.call(op, **args)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:]) or "(empty)"
        except FileNotFoundError:
            return "(no log)"

    def rss_mb(self) -> float:
        """Resident memory of the daemon process (Linux /proc; NaN elsewhere)."""
        assert self.proc is not None
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")
