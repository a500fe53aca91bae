"""``palaced`` subprocesses for the benchmarks: started, joined, called, measured and stopped.

Owns: how every ``palacectl bench`` (and ``benchmarks/vs_jetstream.py``) starts its daemons, and
how two of them become one palace (``BenchPalace``: ``init`` on A, ``invite`` there, ``join`` on
B, the way users do it). Each daemon runs on its own home inside the benchmark's temporary
directory, with ``--no-mdns`` and listening on 127.0.0.1 only (the network rule: a benchmark
never multicasts nor opens a port beyond loopback), in a session of its own. No benchmark
imports palaced: the daemon is ``python -m palaced``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from palacectl.client import Client, DaemonUnreachable

__all__ = ["CONVERGE_TIMEOUT_S", "LOOPBACK_ANY_PORT", "NETWORK_ARGS", "START_TIMEOUT_S", "BenchDaemon", "BenchPalace",
           "log_tail"]

# Why these flags: the network rule. Nothing the benchmark starts multicasts or listens beyond
# loopback; peers find each other through the invite address and remembered addresses only.
NETWORK_ARGS: Final = ("--no-mdns",)
LOOPBACK_ANY_PORT: Final = "127.0.0.1:0"
START_TIMEOUT_S: Final = 30.0
# Why so long: a figure that never converges is a bug to report, not a number; these only bound
# a hang (a daemon that stopped replicating) so the run ends and the logs are shown.
CONVERGE_TIMEOUT_S: Final = 600.0
CONVERGE_TIMEOUT_MS: Final = int(CONVERGE_TIMEOUT_S * 1000)
# Why 1 s: a link that is serving sends a batch every few milliseconds; a second without one
# means the serving is over (and is far below the 10 s anti-entropy interval).
SETTLE_QUIET_S: Final = 1.0


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` of a benchmark process's log, for the report of a run that failed."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) or "(empty)"
    except FileNotFoundError:
        return "(no log)"


class BenchDaemon:
    """One ``palaced`` subprocess on its own home inside the benchmark's directory."""

    def __init__(self, root: Path, name: str, *, prefix: Sequence[str] = ()) -> None:
        self.name = name
        self.home = root / name
        self.log_path = root / f"{name}.log"
        #: what the daemon runs under (``ip netns exec NS``: a machine of a benchmark's own network)
        self.prefix = tuple(prefix)
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
                [*self.prefix, sys.executable, "-m", "palaced", "--home", str(self.home), "--log-level", "warning",
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
                    raise RuntimeError(f"palaced {self.name} exited during start-up; its log:\n{self.log_tail()}") from None
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
        return log_tail(self.log_path, lines)

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


class BenchPalace:
    """Daemons A and B on homes under ``root`` (a directory the caller made and removes), one palace
    once B has joined: ``found`` A, start B, ``join`` it, ``close`` both."""

    def __init__(self, root: Path, name: str = "bench") -> None:
        self.root = root
        self.name = name
        self.a = BenchDaemon(root, "a")
        self.b = BenchDaemon(root, "b")
        self.address_a = ""

    def __repr__(self) -> str:
        return f"<BenchPalace {self.name} a={self.a!r} b={self.b!r}>"

    @property
    def daemons(self) -> list[BenchDaemon]:
        return [self.a, self.b]

    def found(self) -> None:
        """Start A and make it the first member of a new palace (``init``)."""
        self.a.start()
        self.a.call("init", name=self.name, daemon_name="a")
        status = self.a.call("status")
        self.address_a = status["network"]["listen"][0]
        self.a.port = int(self.address_a.rsplit(":", 1)[1])

    def join(self, daemon: BenchDaemon) -> float:
        """Enrol ``daemon`` (already running) through an invite from A; returns when the join replied."""
        code = self.a.call("invite", role="member", ttl_s=3600, address=self.address_a)["code"]
        daemon.call("join", code=code, name=daemon.name)
        t_joined = time.perf_counter()
        listen = daemon.call("status")["network"]["listen"][0]
        daemon.port = int(listen.rsplit(":", 1)[1])
        return t_joined

    def settle(self) -> int:
        """Wait until A has stopped sending to B and B has processed everything on the link; returns
        the events A sent to B.

        Why: A can still be sending events B already holds after the digests match (a catch-up longer
        than the anti-entropy interval is served again from B's head at each tick), and those queue on
        the link ahead of new events; live figures are measured once the link is quiet.
        """
        peer_b = self.b.call("status")["fingerprint"]
        sent, quiet_since = self._sent_to_b(peer_b), time.monotonic()
        deadline = quiet_since + CONVERGE_TIMEOUT_S
        while time.monotonic() - quiet_since < SETTLE_QUIET_S:
            if time.monotonic() > deadline:
                raise RuntimeError(f"A kept sending to B for {CONVERGE_TIMEOUT_S:.0f} s after B caught up")
            time.sleep(0.1)
            now = self._sent_to_b(peer_b)
            if now != sent:
                sent, quiet_since = now, time.monotonic()
        # B confirms the probe only after it has worked through everything queued ahead of it.
        probe = self.a.call("append", type="note", stream="bench", room="settle", from_agent="bench-writer",
                            body="settle probe", replicated=1, timeout_ms=CONVERGE_TIMEOUT_MS)
        if probe["replication"]["timed_out"]:
            raise RuntimeError("B did not confirm the settle probe")
        return sent

    def _sent_to_b(self, peer_id: str) -> int:
        """Events A has sent on its link to B (0 while there is no link)."""
        for peer in self.a.call("peers")["peers"]:
            if peer["peer_id"] == peer_id:
                return peer["sent_events"]
        return 0

    def close(self, *, show_logs: bool) -> None:
        """Stop both daemons (also on a second Ctrl-C); print their logs' tails if ``show_logs``."""
        for daemon in self.daemons:
            try:
                daemon.stop()
            except (OSError, subprocess.SubprocessError, KeyboardInterrupt):  # stop the rest, even on a 2nd Ctrl-C
                if daemon.proc is not None and daemon.proc.poll() is None:
                    daemon.proc.kill()
                    daemon.proc.wait()
        if show_logs:
            for daemon in self.daemons:
                if daemon.proc is not None:
                    sys.stderr.write(f"--- palaced {daemon.name} log (last lines) ---\n{daemon.log_tail()}\n")


def stop_all(daemons: Sequence[BenchDaemon], *, show_logs: bool, logs_of: int | None = None) -> None:
    """Stop every daemon (killing one that will not stop); with ``show_logs``, the last lines of
    the first ``logs_of`` daemons' logs (all by default) go to stderr, for the report of a run that failed."""
    for daemon in daemons:
        try:
            daemon.stop()
        except (OSError, KeyboardInterrupt):
            if daemon.proc is not None and daemon.proc.poll() is None:
                daemon.proc.kill()
    if show_logs:
        for daemon in daemons[:logs_of]:
            sys.stderr.write(f"--- palaced {daemon.name} log (last lines) ---\n{daemon.log_tail()}\n")
