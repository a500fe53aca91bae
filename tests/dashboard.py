"""Helpers for the dashboard's tests: a real ``palacectl ui`` process, and plain HTTP to it.

``DashboardProcess`` starts ``palacectl --home HOME ui --no-browser`` as a process of its own (as
a person would), waits for the ``ui.json`` it writes, and stops it with SIGTERM (exit 0 required,
``ui.json`` gone). ``http`` sends one request with the standard library's client, so what is
tested is what any program sees; ``EventStream`` reads server-sent events line by line.
``report_usage`` appends a run's ``usage.report`` (on a task its agent claimed) and ``held_worker``
holds a worker's presence (what the Usage page shows).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from palace_proto.identity import REGISTRY_TYPES
from tests.fleet import ctl_json
from tests.helpers import PYTHON, run_ctl

START_TIMEOUT_S: Final = 20.0
IO_TIMEOUT_S: Final = 15.0


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    set_cookies: list[str] = field(default_factory=list)

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def __repr__(self) -> str:
        return f"<Answer {self.status} {self.body[:300]!r}>"


class DashboardProcess:
    """One ``palacectl ui`` run on ``home``."""

    def __init__(self, home: Path, *args: str, browser: bool = False, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.home = home
        self.args = list(args)
        self.log = home.parent / f"ui-{home.name}-{time.monotonic_ns()}.log"
        # No screen, ever: a test never opens a browser on the machine it runs on.
        # (a test that gives a DISPLAY gives a stand-in BROWSER with it)
        env = {**{k: v for k, v in os.environ.items() if k not in ("PALACE_HOME", "DISPLAY", "WAYLAND_DISPLAY")},
               **(env or {})}
        self._out = open(self.log, "wb")
        options = [] if browser else ["--no-browser"]
        self.proc = subprocess.Popen([PYTHON, "-m", "palacectl", "--home", str(home), "ui", *options, *args],
                                     stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                     cwd=cwd)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            info = self._info()
            if info is not None and info.get("pid") == self.proc.pid and "palace dashboard" in self.output():
                break
            if self.proc.poll() is not None:
                raise AssertionError(f"palacectl ui exited {self.proc.returncode}: {self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"palacectl ui did not start: {self.output()}")
            time.sleep(0.05)
        self.port: int = info["port"]
        self.secret: str = info["secret"]
        self.url: str = info["url"]
        self.human: str = info["human"]
        self.cookie = f"palace_ui_{self.port}={self.secret}"
        #: whether stop() was called (a test that stops it itself checks the exit code itself)
        self.stopped = False

    def _info(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.home / "ui.json").read_text())
        except (OSError, ValueError):
            return None

    def output(self) -> str:
        if not self._out.closed:
            self._out.flush()
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.stopped = True
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self._out.closed:
            self._out.close()
        return self.proc.returncode

    # -- HTTP --------------------------------------------------------------------------------

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}"}

    def get(self, path: str, headers: Mapping[str, str] | None = None) -> Answer:
        return http_request(self.port, "GET", path, headers={**self.auth(), **(headers or {})})

    def get_json(self, path: str) -> Any:
        answer = self.get(path)
        assert answer.status == 200, answer
        return answer.json()

    def csrf_token(self) -> str:
        page = http_request(self.port, "GET", "/", headers={"Cookie": self.cookie}).text
        marker = 'name="csrf-token" content="'
        return page[page.index(marker) + len(marker):].split('"', 1)[0]

    def post_message(self, doc: Any, *, csrf: str | None = None, origin: str | None = None,
                     content_type: str = "application/json", path: str = "/api/message") -> Answer:
        body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        headers = {"Cookie": self.cookie, "Content-Type": content_type,
                   "Origin": origin if origin is not None else f"http://127.0.0.1:{self.port}"}
        if csrf is not False:
            headers["X-CSRF-Token"] = csrf if csrf is not None else self.csrf_token()
        return http_request(self.port, "POST", path, headers=headers, body=body)

    def stream(self, path: str = "/logstream/stream", headers: Mapping[str, str] | None = None) -> EventStream:
        return EventStream(self.port, path, {**self.auth(), **(headers or {})})


def http_request(port: int, method: str, path: str, *, headers: Mapping[str, str] | None = None,
                 body: bytes | None = None, host: str | None = None) -> Answer:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=IO_TIMEOUT_S)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", host if host is not None else f"127.0.0.1:{port}")
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        data = response.read()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, data,
                      [v for k, v in response.getheaders() if k.lower() == "set-cookie"])
    finally:
        conn.close()


def report_usage(home: Path, agent: str, task: str, **fields: Any) -> dict[str, Any]:
    """Append one run's ``usage.report`` on ``task`` as ``agent`` wrote it (docs/usage.md). A report
    counts only from an agent that has claimed its task (issue 43): ``task`` is requested first if
    it is not there (by ``boss``, to anyone), ``agent`` claims it, reports, and lets it go again
    (so another agent may report on it next; a report after the release still counts)."""
    if run_ctl(home, "task", "show", task).returncode != 0:
        ctl_json(home, "append", "--type", "task.request", "--stream", "usage", "--room", "runs", "--from-agent",
                 "boss", "--to-agent", "*", "--correlation-id", task, "--status", "open", "--body", f"runs of {task}")
    ctl_json(home, "task", "claim", task, "--agent", agent)
    metadata = {"runner": "claude", "tokens_in": 1200, "tokens_out": 300, "task_id": task, "machine": "mac", **fields}
    event = ctl_json(home, "append", "--type", "usage.report", "--stream", "usage", "--room", "runs",
                     "--from-agent", agent, "--correlation-id", task, "--metadata", json.dumps(metadata),
                     "--body", "usage")
    ctl_json(home, "task", "release", task, "--agent", agent)
    return event


@contextlib.contextmanager
def held_worker(home: Path, agent: str, held: str) -> Iterator[None]:
    """A worker of ``agent`` watching the daemon on ``home`` and saying it claims nothing (``held``),
    as ``palacectl worker`` does when a budget is over; gone when the block ends."""
    from palacectl.client import Client

    with Client(home, client_name="palacectl-worker") as client:
        client.subscribe(agent=agent, worker={"runner": "claude", "concurrency": 1, "tasks": [], "held": held},
                         start="tip", preview=True)
        yield


class EventStream:
    """A server-sent event stream, read as it arrives: ``status``, ``headers``, then ``frames()``."""

    def __init__(self, port: int, path: str, headers: Mapping[str, str]) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S)
        request = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Accept: text/event-stream",
                   *(f"{k}: {v}" for k, v in headers.items()), "", ""]
        self.sock.sendall("\r\n".join(request).encode())
        self.buffer = b""
        head = self._until(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        self.chunked = self.headers.get("transfer-encoding") == "chunked"
        self.body = b""  # de-chunked bytes not yet parsed into frames

    def _until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("the stream ended")
            self.buffer += data
        head, _, self.buffer = self.buffer.partition(marker)
        return head

    def _read_body(self) -> None:
        if not self.chunked:
            data = self.buffer or self.sock.recv(65536)
            self.buffer = b""
            if not data:
                raise EOFError("the stream ended")
            self.body += data
            return
        size_line = self._until(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            raise EOFError("the stream ended")
        while len(self.buffer) < size + 2:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("the stream ended")
            self.buffer += data
        self.body += self.buffer[:size]
        self.buffer = self.buffer[size + 2:]

    def next_block(self, timeout: float = IO_TIMEOUT_S) -> str:
        """The next SSE block (the lines up to a blank line), as text."""
        self.sock.settimeout(timeout)
        while b"\n\n" not in self.body:
            self._read_body()
        block, _, self.body = self.body.partition(b"\n\n")
        return block.decode("utf-8")

    def next_event(self, timeout: float = IO_TIMEOUT_S, *, skip_registry: bool = True) -> dict[str, Any]:
        """The next ``logstream`` frame: {"id", "event", "data"} (comments and retry skipped, and
        the daemons' agent registrations unless ``skip_registry`` is false: a first write as a new
        agent is preceded by one)."""
        deadline = time.monotonic() + timeout
        while True:
            block = self.next_block(max(0.1, deadline - time.monotonic()))
            fields: dict[str, Any] = {}
            for line in block.split("\n"):
                if line.startswith(":") or not line:
                    continue
                name, _, value = line.partition(": ")
                fields[name] = value
            if "data" in fields:
                fields["data"] = json.loads(fields["data"])
                if skip_registry and fields["data"].get("type") in REGISTRY_TYPES:
                    continue
                return fields

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
