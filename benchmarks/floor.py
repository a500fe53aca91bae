"""The floor: what a durable signed append costs in Python on this machine, with no design around it.

A measuring stick for ``vs_jetstream.py`` (issue 27), not a design to copy: one trio process that
does per append only the work palace cannot skip — read a length-prefixed msgpack frame, check the
fields, encode them canonically, chain them by sha256, sign with Ed25519, insert into SQLite
(apsw, WAL, three indexes) and commit with ``synchronous=FULL`` (fsync before the reply), reply,
and push the event to subscribed watchers. Appends that arrive together share one commit (group
commit, on a worker thread so the loop keeps reading). No validation beyond the type's shape, no
metadata, no registry, no triggers, no TLS, no replication: the distance from palace to this row
is what palace's design costs.

``python benchmarks/floor.py serve SOCKET DB`` runs the server; ``vs_jetstream.py`` starts it and
drives it with the client jobs below, shaped like ``palace_bench.clients``' (prepare, then work).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final

import msgpack

from palace_bench.clients import paced_wake_samples, report_wake, sample_body, sample_index
from palace_bench.daemon import log_tail

__all__ = ["FloorAppendJob", "FloorServer", "FloorWakeJob", "floor_appends", "floor_wake_watcher",
           "floor_wake_writer"]

_TYPE_RE: Final = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
MAX_BODY_BYTES: Final = 262_144
START_TIMEOUT_S: Final = 30.0
WAKE_TIMEOUT_S: Final = 30.0
SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS events(seq INTEGER PRIMARY KEY, id TEXT UNIQUE, origin_seq INTEGER, type TEXT,
  stream TEXT, from_agent TEXT, to_agent TEXT, correlation_id TEXT, created_at TEXT, body TEXT, hash BLOB, sig BLOB);
CREATE INDEX IF NOT EXISTS ev_to ON events(to_agent, seq);
CREATE INDEX IF NOT EXISTS ev_corr ON events(correlation_id, seq) WHERE correlation_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS ev_stream ON events(stream, seq);
"""
INSERT: Final = ("INSERT INTO events(id, origin_seq, type, stream, from_agent, to_agent, correlation_id, created_at, "
                 "body, hash, sig) VALUES (?,?,?,?,?,?,?,?,?,?,?)")


# -- the server ----------------------------------------------------------------------------------


def serve(sock_path: str, db_path: str) -> None:  # noqa: C901 - the whole server, on purpose in one place
    import apsw
    import trio
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    db = apsw.Connection(db_path)
    db.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL")
    db.execute(SCHEMA)
    chain = {"seq": 0, "prev": bytes(32)}
    watchers: set[Any] = set()
    queue: list[tuple[dict[str, Any], dict[str, Any]]] = []
    wake = trio.Event()

    def seal(request: dict[str, Any]) -> tuple[Any, ...]:
        kind, body = request.get("type"), request.get("body")
        if not isinstance(kind, str) or not _TYPE_RE.match(kind) or not isinstance(body, str) \
                or len(body) > MAX_BODY_BYTES:
            raise ValueError("bad event")
        chain["seq"] += 1
        now = time.time()
        created = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
        canonical = msgpack.packb([chain["seq"], chain["prev"], kind, request.get("stream"), request.get("from_agent"),
                                   request.get("to_agent"), request.get("correlation_id"), created, body])
        digest = hashlib.sha256(canonical).digest()
        chain["prev"] = digest
        return (f"evt_{digest[:10].hex()}", chain["seq"], kind, request.get("stream"), request.get("from_agent"),
                request.get("to_agent"), request.get("correlation_id"), created, body, digest, key.sign(digest))

    def commit(rows: list[tuple[Any, ...]]) -> list[int]:
        with db:
            seqs = []
            for row in rows:
                db.execute(INSERT, row)
                seqs.append(db.last_insert_rowid())
        return seqs

    async def writer() -> None:
        nonlocal wake
        while True:
            await wake.wait()
            wake = trio.Event()
            batch, rows = [], []
            while queue:
                request, box = queue.pop(0)
                try:
                    rows.append(seal(request))
                    batch.append(box)
                except ValueError as exc:
                    box["error"] = str(exc)
                    box["done"].set()
            if not rows:
                continue
            seqs = await trio.to_thread.run_sync(commit, rows)
            for row, seq, box in zip(rows, seqs, batch, strict=True):
                box["id"], box["seq"] = row[0], seq
                box["done"].set()
                push = _frame({"push": {"seq": seq, "id": row[0], "type": row[2], "to_agent": row[5], "body": row[8]}})
                for send in list(watchers):
                    try:
                        send.send_nowait(push)
                    except trio.WouldBlock:
                        pass  # a watcher that does not read loses pushes (the floor keeps no backlog)

    async def connection(stream: Any) -> None:
        frames = _Frames()
        async with stream:
            while True:
                request = frames.next()
                if request is None:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    frames.feed(data)
                    continue
                if request.get("op") == "subscribe":
                    send, receive = trio.open_memory_channel(1000)
                    watchers.add(send)
                    await stream.send_all(_frame({"ok": True}))
                    async for push in receive:
                        await stream.send_all(push)
                    return
                box: dict[str, Any] = {"done": trio.Event()}
                queue.append((request, box))
                wake.set()
                await box["done"].wait()
                await stream.send_all(_frame({"id": box.get("id"), "seq": box.get("seq"), "error": box.get("error")}))

    async def main() -> None:
        if os.path.exists(sock_path):
            os.unlink(sock_path)
        listener = trio.socket.socket(trio.socket.AF_UNIX)
        await listener.bind(sock_path)
        listener.listen(128)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            await trio.serve_listeners(connection, [trio.SocketListener(listener)])

    trio.run(main)


def _frame(value: Any) -> bytes:
    payload = msgpack.packb(value)
    return len(payload).to_bytes(4, "big") + payload


class _Frames:
    """Length-prefixed msgpack frames out of a byte stream."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self.buffer += data

    def next(self) -> Any:
        if len(self.buffer) < 4:
            return None
        size = int.from_bytes(self.buffer[:4], "big")
        if len(self.buffer) < 4 + size:
            return None
        payload = bytes(self.buffer[4:4 + size])
        del self.buffer[:4 + size]
        return msgpack.unpackb(payload)


# -- the server as a process, and its clients --------------------------------------------------


class FloorServer:
    """``floor.py serve`` as a subprocess on ``root``; ``start``, then ``stop``."""

    def __init__(self, root: Path) -> None:
        self.socket = root / "floor.sock"
        self.db = root / "floor.sqlite3"
        self.log_path = root / "floor.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, __file__, "serve", str(self.socket), str(self.db)],
                                         stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.socket.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the floor server did not start; its log:\n{self.log_tail()}")
            time.sleep(0.01)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)


class _Client:
    """A blocking client of the floor: one request, one reply; or a stream of pushes."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(str(path))
        self.frames = _Frames()

    def send(self, value: Any) -> None:
        self.sock.sendall(_frame(value))

    def receive(self, timeout: float | None = None) -> Any:
        self.sock.settimeout(timeout)
        while (message := self.frames.next()) is None:
            data = self.sock.recv(65536)
            if not data:
                raise RuntimeError("the floor server closed the connection")
            self.frames.feed(data)
        return message

    def call(self, value: Any) -> Any:
        self.send(value)
        reply = self.receive()
        if reply.get("error"):
            raise RuntimeError(f"the floor refused an append: {reply['error']}")
        return reply

    def close(self) -> None:
        self.sock.close()


def _event(to_agent: str, body: str) -> dict[str, Any]:
    return {"op": "append", "type": "note", "stream": "bench", "from_agent": "bench-writer", "to_agent": to_agent,
            "body": body}


@dataclass(frozen=True)
class FloorAppendJob:
    socket: Path
    count: int
    body_bytes: int


def floor_appends(job: FloorAppendJob) -> Callable[[], int]:
    """Prepare: connect. Work: ``job.count`` appends, request after reply."""
    client = _Client(job.socket)
    body = "x" * job.body_bytes

    def work() -> int:
        try:
            for _ in range(job.count):
                client.call(_event("bench-reader", body))
        finally:
            client.close()
        return job.count

    return work


@dataclass(frozen=True)
class FloorWakeJob:
    socket: Path
    samples: int
    warmup: int
    body_bytes: int
    pipe: Connection


def floor_wake_watcher(job: FloorWakeJob) -> Callable[[], int]:
    client = _Client(job.socket)
    client.send({"op": "subscribe"})
    client.receive(timeout=WAKE_TIMEOUT_S)

    def work() -> int:
        seen = 0
        try:
            while seen < job.samples:
                push = client.receive(timeout=WAKE_TIMEOUT_S)
                report_wake(job.pipe, sample_index(push["push"]["body"]), time.perf_counter())
                seen += 1
        finally:
            client.close()
        return seen

    return work


def floor_wake_writer(job: FloorWakeJob) -> Callable[[], dict[str, list[float]]]:
    client = _Client(job.socket)

    def work() -> dict[str, list[float]]:
        try:
            return paced_wake_samples(lambda i: client.call(_event("bench-watcher", sample_body(i, job.body_bytes))),
                                      job.pipe, job.samples, job.warmup)
        finally:
            client.close()

    return work


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "serve":
        sys.exit("usage: floor.py serve SOCKET DB")
    serve(sys.argv[2], sys.argv[3])
