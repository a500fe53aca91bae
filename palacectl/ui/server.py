"""``palacectl ui``'s process: the listening socket, hypercorn's trio worker, ``ui.json``, the browser.

Owns: binding 127.0.0.1 (never another
address: the dashboard is a window for the person at this machine; another machine reaches it
through an SSH tunnel), serving the ``app.Dashboard`` with hypercorn until Ctrl-C or SIGTERM,
printing the address with the run's secret, writing it to ``$PALACE_HOME/ui.json`` (mode 0600,
removed at exit) for local programs that read the event stream, and opening the browser.

Why hypercorn's trio worker: palacectl's async client (``aclient``) is trio, and so is every
daemon-facing task here (a stream is a subscription on the daemon, cancelled when its browser
goes away); hypercorn serves ASGI on trio natively, over h11 (HTTP/1.1, which server-sent events
need), with bounded headers and keep-alive, and adds no framework.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import socket
import sys
import threading
import webbrowser
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

import trio

from ..aclient import AsyncDaemon
from ..files import write_atomically
from ..output import EXIT_INTERRUPTED, EXIT_OK, CommandFailed, note, utc_now
from .app import Dashboard
from .security import Gate, new_secret

if TYPE_CHECKING:
    # (the dashboard types ASGI's messages as plain mappings; hypercorn as TypedDicts: one protocol)
    from hypercorn.typing import ASGIFramework

__all__ = ["UI_FILE", "run_ui"]

LOGGER: Final = logging.getLogger("palacectl.ui")
UI_FILE: Final = "ui.json"
#: Why 2 s: how long open streams get to end when the dashboard stops (they are told nothing more).
GRACEFUL_S: Final = 2.0
#: Why 256: a browser opens about six connections and each open page holds one stream (at most
#: ``--max-streams``); 256 is far above that and far below the usual limit of 1,024 descriptors.
MAX_CONNECTIONS: Final = 256
#: Why 16 KiB: a browser's request line and headers, cookies included, fit in a few KiB.
MAX_HEADER_BYTES: Final = 16 * 1024


def _has_a_screen(environ: dict[str, str] | os._Environ[str] = os.environ, platform: str = sys.platform) -> bool:
    """Whether a browser can open here. On Linux without X11 or Wayland, ``webbrowser`` falls back
    to text browsers (lynx, w3m) that would take over this very terminal."""
    return platform in ("darwin", "win32") or bool(environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"))


async def _serve_http(app: Any, config: Any, sock: socket.socket, stop: trio.Event, *,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``app`` on the listening ``sock`` with hypercorn's HTTP connection handling, holding at
    most ``MAX_CONNECTIONS`` connections open (issue 25, finding 10: ~1,100 idle connections from
    another local user used up the process's file descriptors and the operator's requests timed
    out). Decided at accept, before a byte is read: past the limit the oldest connection is closed
    (its reader sees it closed and ends), so a flood evicts itself and a new request gets in.
    Until ``stop`` is set; open connections then get ``GRACEFUL_S`` to finish."""
    from hypercorn.trio.tcp_server import TCPServer
    from hypercorn.trio.worker_context import WorkerContext

    context = WorkerContext(None)
    listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
    open_streams: dict[trio.SocketStream, None] = {}  # oldest first

    async def serve_one(stream: trio.SocketStream) -> None:
        try:
            await TCPServer(app, config, context, {}, stream)  # type: ignore[arg-type]
        finally:
            open_streams.pop(stream, None)

    async with trio.open_nursery() as connections:
        async def accept() -> None:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:  # EMFILE and the like: wait for a descriptor to be freed
                    LOGGER.warning("cannot accept a connection: %s", exc.strerror or exc)
                    await trio.sleep(0.1)
                    continue
                while len(open_streams) >= MAX_CONNECTIONS:
                    oldest = next(iter(open_streams))
                    del open_streams[oldest]
                    await oldest.aclose()
                open_streams[stream] = None
                connections.start_soon(serve_one, stream)

        accepting = trio.CancelScope()

        async def accept_until_cancelled() -> None:
            with accepting:
                await accept()

        connections.start_soon(accept_until_cancelled)
        task_status.started()
        await stop.wait()
        accepting.cancel()
        await listener.aclose()
        await context.terminated.set()  # keep-alive connections close after their response
        connections.cancel_scope.deadline = trio.current_time() + GRACEFUL_S


def _bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
        sock.set_inheritable(False)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise CommandFailed(f"port {port} on 127.0.0.1 is in use; choose another with --port, or leave --port "
                                "out for any free one") from None
        raise CommandFailed(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from None
    return sock


def _write_ui_file(home: Path, doc: dict[str, Any]) -> Path:
    """``ui.json``: private (0600) from its first byte, in place whole or not at all."""
    path = home / UI_FILE
    write_atomically(path, (json.dumps(doc, indent=2) + "\n").encode("utf-8"), 0o600)
    return path


def _write_opener(home: Path, port: int, code: str) -> Path:
    """A private (0600) page that sends the browser on to the dashboard with a one-time code: the
    browser's command line (readable by every local user) names only this file."""
    target = f"http://127.0.0.1:{port}/?code={code}"
    page = (f'<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={target}">'
            f'<title>palace dashboard</title><p><a href="{target}">Open the palace dashboard</a></p>\n')
    path = home / f"ui-open-{port}.html"
    write_atomically(path, page.encode("utf-8"), 0o600)
    return path


def _remove_ui_file(path: Path, pid: int) -> None:
    """Remove ``ui.json`` if it is still ours (another dashboard may have started since)."""
    try:
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == pid:
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def run_ui(home: Path, *, port: int, open_browser: bool, human: str, max_streams: int) -> int:
    """Serve the dashboard until Ctrl-C (exit 130) or SIGTERM (exit 0).

    Raises:
        DaemonUnreachable: no daemon on ``home`` at start (exit 3).
        CommandFailed: the port is taken, or the home cannot hold ``ui.json``.
    """
    return trio.run(_serve, home, port, open_browser, human, max_streams)


async def _serve(home: Path, port: int, open_browser: bool, human: str, max_streams: int) -> int:
    from hypercorn.config import Config
    from hypercorn.utils import wrap_app

    daemon = AsyncDaemon(home, client_name="palacectl-ui")
    status = await daemon.call("status")  # a daemon that is down is said now, with how to start it
    palace = status.get("palace") or {}
    if palace.get("role") == "observer":
        note("this daemon is a read-only observer: the dashboard shows everything and sends nothing")
    sock = _bind(port)
    actual_port = sock.getsockname()[1]
    gate = Gate(new_secret(), actual_port)
    app = Dashboard(daemon, gate, human=human, max_streams=max_streams)
    config = Config()
    config.accesslog = None
    config.errorlog = LOGGER
    config.include_server_header = False
    config.graceful_timeout = GRACEFUL_S
    config.h11_max_incomplete_size = MAX_HEADER_BYTES
    config.keep_alive_timeout = 30
    base = f"http://127.0.0.1:{actual_port}/"
    url = f"{base}?secret={gate.secret}"
    pid = os.getpid()
    try:
        ui_file = _write_ui_file(home, {"url": base, "port": actual_port, "secret": gate.secret, "pid": pid,
                                        "human": human, "started_at": utc_now()})
    except OSError as exc:
        sock.close()
        raise CommandFailed(f"cannot write {home / UI_FILE}: {exc.strerror or exc}") from None
    interrupted = False
    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                stop = trio.Event()

                async def on_signal() -> None:
                    nonlocal interrupted
                    async for signum in signals:
                        interrupted = signum == signal.SIGINT
                        stop.set()
                        return

                nursery.start_soon(on_signal)
                await nursery.start(lambda task_status: _serve_http(
                    wrap_app(cast("ASGIFramework", app), config.wsgi_max_body_size, "asgi"), config, sock, stop,
                    task_status=task_status))
                name = palace.get("name") or "this machine"
                sys.stdout.write(f"palace dashboard for {name}, as {human}:\n  {url}\n")
                sys.stdout.write(f"(the address holds this run's secret; {UI_FILE} in the palace home has it "
                                 "for other programs; Ctrl-C stops)\n")
                sys.stdout.flush()
                if open_browser and _has_a_screen():
                    code = new_secret()
                    gate.allow_once(code)
                    opener = _write_opener(home, actual_port, code)
                    # webbrowser may block (it can start a browser process): never in the loop.
                    threading.Thread(target=webbrowser.open, args=(opener.as_uri(),), daemon=True).start()
                elif open_browser:
                    note("no graphical session here (over SSH?): open the address in a browser yourself")
                await stop.wait()
                nursery.cancel_scope.deadline = trio.current_time() + GRACEFUL_S + 1
    finally:
        _remove_ui_file(ui_file, pid)
        (home / f"ui-open-{actual_port}.html").unlink(missing_ok=True)
        sock.close()
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK

