"""Test helpers: real palaced processes on temporary homes, and palacectl run as a subprocess."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Self

from palace_proto.errors import ProtocolError
from palace_proto.framing import NEED_DATA, FrameBuffer, encode_frame
from palacectl.client import endpoint_for, open_socket

PYTHON = sys.executable
# Why 10 s: every reply in these tests comes in milliseconds; the timeout only bounds a hang.
IO_TIMEOUT_S = 10.0
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


#: what every daemon started by a test in the root namespace runs with (the network rule)
ROOT_NS_NETWORK: Final = ("--no-mdns", "--listen", "127.0.0.1:0")
#: the local API of every test daemon: "unix" (default) or "tcp" (``PALACE_TEST_API=tcp``, or the
#: ``api`` fixture's parameter): the same tests then run over loopback TCP with a token, as on Windows
TEST_API: Final = os.environ.get("PALACE_TEST_API", "unix")
API_ARGS: Final = {"unix": (), "tcp": ("--api", "tcp://127.0.0.1:0")}


def connect_api(home: Path, timeout: float = IO_TIMEOUT_S) -> tuple[socket.socket, str | None]:
    """A socket connected to the daemon on ``home``, found as palacectl finds it (its api.json's
    TCP port if it has one, else its Unix socket), and the token its hello must carry (None for
    the Unix socket)."""
    endpoint = endpoint_for(home)
    sock = open_socket(endpoint)
    sock.settimeout(timeout)
    return sock, endpoint.token


class Daemon:
    """A real ``palaced`` subprocess on its own home."""

    def __init__(self, home: Path, *, extra_args: Sequence[str] = (), network_args: Sequence[str] = ROOT_NS_NETWORK,
                 prefix: Sequence[str] = (), api: str | None = None) -> None:
        self.home = home
        #: a command the daemon runs under, e.g. ``ip netns exec NS`` (tests that create namespaces)
        self.prefix = list(prefix)
        # Daemons in the root network namespace never multicast and listen on loopback only.
        # A daemon in another network namespace has its own loopback: the test reaches it through
        # its Unix socket, which lives in the (shared) file system.
        self.api = "unix" if prefix else (api or TEST_API)
        self.extra_args = [*network_args, *API_ARGS[self.api], *extra_args]
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = home.parent / f"{home.name}.log"

    @property
    def socket_path(self) -> Path:
        return self.home / "palaced.sock"

    @property
    def api_path(self) -> Path:
        """The file that exists while the local API is up: the socket, or api.json over TCP."""
        return self.home / ("api.json" if self.api == "tcp" else "palaced.sock")

    def start(self, *, wait: bool = True) -> Daemon:
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [*self.prefix, PYTHON, "-m", "palaced", "--home", str(self.home), *self.extra_args],
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
            try:  # api.json (TCP) or the socket, whichever the daemon's --api or config chose
                sock, _ = connect_api(self.home)
                sock.close()
                return
            except (OSError, ValueError):  # not there yet, or api.json being written
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
                raise AssertionError(f"palaced did not stop on signal {sig}: {self.log()}") from None
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


# How tests run palacectl: in this process by default ("process" runs every call as a real
# ``python -m palacectl`` process, as CI did before; it is what a test of the process itself
# asks for with ``run_ctl_process``). In process, the very same ``palacectl.cli.main`` runs with
# its stdin, stdout and stderr swapped for buffers — what a child process would see through pipes
# — against the same real daemon over the same socket; only the interpreter start-up (about
# 0.1 s of CPU each, thousands per run) is saved.
CTL_MODE: Final = os.environ.get("PALACE_TEST_CTL", "inprocess")
# Commands that stay real processes: they run until stopped or signalled (watch, mcp), manage
# processes (service, bench), or read the environment a test gives them.
_PROCESS_COMMANDS: Final = frozenset({"watch", "mcp", "service", "bench"})


def run_ctl(home: Path, *args: str, input: bytes | None = None, timeout: float = 60.0,
            env: dict[str, str] | None = None, cwd: Path | None = None) -> CtlResult:
    """Run ``palacectl --home HOME ARGS`` (in this process unless it must be a process, see
    ``CTL_MODE``); same result either way."""
    command = next((a for a in args if not a.startswith("-")), None)
    # Off the main thread a test runs palacectl alongside something else: the standard streams
    # are the process's, so only a process of its own can keep its output apart.
    elsewhere = threading.current_thread() is not threading.main_thread()
    if CTL_MODE == "process" or env is not None or cwd is not None or command in _PROCESS_COMMANDS or elsewhere:
        return run_ctl_process(home, *args, input=input, timeout=timeout, env=env, cwd=cwd)
    return _run_ctl_in_process(home, args, input)


def _run_ctl_in_process(home: Path, args: Sequence[str], input: bytes | None) -> CtlResult:
    from palacectl.cli import main

    _build_palacectl_command_once()
    out, err = io.BytesIO(), io.BytesIO()
    streams = (io.TextIOWrapper(io.BytesIO(input or b""), encoding="utf-8"),
               io.TextIOWrapper(out, encoding="utf-8", write_through=True),
               io.TextIOWrapper(err, encoding="utf-8", write_through=True))
    saved = (sys.stdin, sys.stdout, sys.stderr)
    palace_home = os.environ.pop("PALACE_HOME", None)
    sys.stdin, sys.stdout, sys.stderr = streams
    try:
        code = main(["--home", str(home), *args])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdin, sys.stdout, sys.stderr = saved
        if palace_home is not None:
            os.environ["PALACE_HOME"] = palace_home
    data = out.getvalue()
    return CtlResult(code, data.decode("utf-8", "replace"), err.getvalue().decode("utf-8", "replace"), data)


def _build_palacectl_command_once() -> None:
    """Have ``typer.main.get_command`` give palacectl's app the click command it built for it the
    first time in this process. ``palacectl.cli.main`` builds it at every call: ~80 ms of CPU
    (typer reads every command's signature and type hints), once in a real palacectl's life but
    once per call in a test process making thousands of them, the suite's largest cost after the
    daemons. The tree is built from the same app either way; every call still parses its command
    line and runs through ``main``."""
    import typer.main

    from palacectl.cli.root import app

    if getattr(typer.main.get_command, "palacectl_cached", False):
        return
    build = typer.main.get_command
    built = build(app)

    def get_command(typer_instance: typer.Typer) -> Any:
        return built if typer_instance is app else build(typer_instance)

    get_command.palacectl_cached = True  # type: ignore[attr-defined]
    typer.main.get_command = get_command


def run_ctl_process(home: Path, *args: str, input: bytes | None = None, timeout: float = 60.0,
                    env: dict[str, str] | None = None, cwd: Path | None = None) -> CtlResult:
    """Run ``palacectl --home HOME ARGS`` as a real process."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PALACE_HOME", None)
    proc = subprocess.run(
        [PYTHON, "-m", "palacectl", "--home", str(home), *args],
        input=input if input is not None else b"", capture_output=True, timeout=timeout, env=full_env, cwd=cwd,
    )
    return CtlResult(proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"),
                     proc.stdout)


def run_ctl_on_terminal(home: Path, *args: str, timeout: float = 120.0) -> tuple[int, str, str]:
    """``palacectl`` with its stderr on a pseudo-terminal (where progress bars are drawn), stdout
    piped; returns (exit code, stdout, what the terminal showed)."""
    import pty

    master, slave = pty.openpty()
    try:
        env = {k: v for k, v in os.environ.items() if k != "PALACE_HOME"}
        proc = subprocess.run([PYTHON, "-m", "palacectl", "--home", str(home), *args], stdout=subprocess.PIPE,
                              stderr=slave, stdin=subprocess.DEVNULL, timeout=timeout, env=env)
    finally:
        os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other side is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return proc.returncode, proc.stdout.decode(), b"".join(chunks).decode("utf-8", "replace")


def append_event(ctl: Any, **fields: Any) -> dict[str, Any]:
    """Append through the CLI with sensible defaults; returns the event."""
    defaults = {"type": "note", "stream": "project/test", "room": "general", "from-agent": "tester"}
    args: list[str] = ["append", "--json"]
    for key, value in {**defaults, **{k.replace("_", "-"): v for k, v in fields.items()}}.items():
        args += [f"--{key}", str(value)]
    result = ctl(*args)
    assert result.returncode == 0, result
    return result.json()


class PeerClosed(ConnectionResetError):
    """The daemon closed the connection (EOF or reset)."""


class RawClient:
    """A byte-level client of the local API: frames in, frames out, nothing hidden — except, when
    the daemon listens on TCP (its home has an api.json), the token, which is added to a ``hello``
    that does not carry one (so every test runs unchanged over either transport)."""

    def __init__(self, path: Path, *, timeout: float = IO_TIMEOUT_S) -> None:
        """``path``: the daemon's socket path (``Daemon.socket_path``); its folder is the home."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock, self.token = connect_api(path.parent, timeout)
                break
            except BlockingIOError:  # the listen backlog is full for a moment: retry, as a client would
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        self.buffer = FrameBuffer(1 << 40)
        self.next_id = 1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send_bytes(self, data: bytes) -> bool:
        """Send raw bytes; False if the daemon had already closed the connection."""
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    def send_message(self, message: Any) -> None:
        if (self.token and isinstance(message, dict) and message.get("op") == "hello"
                and isinstance(message.get("args"), dict) and "token" not in message["args"]):
            message = {**message, "args": {**message["args"], "token": self.token}}
        self.sock.sendall(encode_frame(message, max_frame_bytes=1 << 40))

    def recv_message(self, timeout: float | None = IO_TIMEOUT_S) -> Any:
        """The next decoded frame. Raises PeerClosed on EOF, TimeoutError if nothing arrives."""
        while True:
            message = self.buffer.next_frame()
            if message is not NEED_DATA:
                return message
            self.sock.settimeout(timeout)
            try:
                data = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            if not data:
                raise PeerClosed()
            self.buffer.feed(data)

    def request(self, op: str, **args: Any) -> dict[str, Any]:
        rid = self.next_id
        self.next_id += 1
        self.send_message({"id": rid, "op": op, "args": args})
        reply = self.recv_message()
        assert isinstance(reply, dict) and reply.get("id") == rid, reply
        return reply

    def call(self, op: str, **args: Any) -> Any:
        reply = self.request(op, **args)
        assert reply["ok"] is True, reply
        return reply["result"]

    def hello(self) -> dict[str, Any]:
        return self.call("hello", version=1)

    def expect_closed(self, timeout: float = IO_TIMEOUT_S) -> None:
        """The daemon closes the connection (without sending anything more) within ``timeout``."""
        try:
            message = self.recv_message(timeout)
        except PeerClosed:
            return
        except TimeoutError:
            raise AssertionError(f"connection still open after {timeout}s") from None
        raise AssertionError(f"expected the connection to close, got {message!r}")

    def drain_until_closed(self, timeout: float = IO_TIMEOUT_S) -> list[Any]:
        """Every frame the daemon sends until it closes the connection."""
        frames = []
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"connection still open after {timeout}s; got {frames!r}")
            try:
                frames.append(self.recv_message(remaining))
            except PeerClosed:
                return frames
            except ProtocolError:  # EOF in the middle of a reply frame: the daemon never does that
                raise AssertionError(f"daemon sent a truncated frame after {frames!r}") from None
            except TimeoutError:
                continue


def run_git(repo: Path, *args: str, env: dict[str, str] | None = None,
            check: bool = False) -> subprocess.CompletedProcess[str]:
    """``git -C repo ARGS`` with a fixed author (commits need one; CI has no git identity)."""
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=check, timeout=60,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x", **(env or {})})


def init_repo(path: Path) -> str:
    """A new git repository at ``path`` on branch main with one commit (a README); that commit's id."""
    path.mkdir(parents=True, exist_ok=True)
    run_git(path, "init", "-q", "-b", "main", check=True)
    (path / "README.md").write_text("hello\n")
    run_git(path, "add", "README.md", check=True)
    run_git(path, "commit", "-q", "-m", "first", check=True)
    return run_git(path, "rev-parse", "HEAD", check=True).stdout.strip()


def palaced_pids_under(prefix: str) -> set[int]:
    """Pids of the palaced processes whose arguments name a path starting with ``prefix`` (Linux
    /proc): the daemons a benchmark started under its temporary directory."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"palaced" in argv and any(a.startswith(prefix.encode()) for a in argv):
            pids.add(int(proc.name))
    return pids
