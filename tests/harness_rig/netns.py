"""A network namespace with loopback only, held open for a harness run and its model server.

The harness runs in it (``nsenter --net=…``, so its update checks and telemetry fail instead of
leaving the machine) and the scripted model server listens on its 127.0.0.1: the listening socket
is made by a thread that has joined the namespace (setns(2) is per thread), then served from this
process like any other socket. palaced stays in the root namespace, reached over its Unix socket.
Needs root, unshare, nsenter and ip (``why_not`` says which is missing).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Sequence
from typing import Self

__all__ = ["Netns", "why_not"]

CLONE_NEWNET = 0x40000000  # <sched.h>: setns(2)'s nstype for a network namespace


def why_not() -> str | None:
    """Why harnesses cannot run offline here, or None."""
    if os.geteuid() != 0:
        return "running the harnesses without network needs root (network namespaces; CI runs as root)"
    missing = [tool for tool in ("unshare", "nsenter", "ip") if shutil.which(tool) is None]
    if missing:
        return f"running the harnesses without network needs {', '.join(missing)} (util-linux, iproute2)"
    return None


class Netns:
    """A new network namespace with ``lo`` up, alive until ``close``."""

    def __init__(self) -> None:
        self._holder = subprocess.Popen(
            ["unshare", "-n", "sh", "-c", "ip link set lo up && echo up && exec sleep 100000"],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
        assert self._holder.stdout is not None
        if self._holder.stdout.readline() != b"up\n":
            self._holder.wait()
            raise RuntimeError(f"could not make a network namespace (exit {self._holder.returncode})")
        self.path = f"/proc/{self._holder.pid}/ns/net"

    def __repr__(self) -> str:
        return f"<Netns {self.path} {'open' if self._holder.poll() is None else 'closed'}>"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["nsenter", f"--net={self.path}", "--", *argv]

    def listen(self, host: str = "127.0.0.1", port: int = 0) -> socket.socket:
        """A listening TCP socket on the namespace's loopback."""
        made: list[socket.socket | BaseException] = []

        def inside() -> None:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                with open(self.path, "rb") as ns:
                    if libc.setns(ns.fileno(), CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns failed")
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
                sock.listen(64)
                made.append(sock)
            except BaseException as exc:  # handed to the caller's thread
                made.append(exc)

        thread = threading.Thread(target=inside, name="netns-listen")  # joins the namespace, then ends
        thread.start()
        thread.join()
        if isinstance(made[0], BaseException):
            raise made[0]
        return made[0]

    def close(self) -> None:
        if self._holder.poll() is None:
            os.killpg(self._holder.pid, signal.SIGKILL)
        self._holder.wait()
        if self._holder.stdout is not None:
            self._holder.stdout.close()
