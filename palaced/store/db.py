"""The database's connections: the writer's, one read-only connection per reader thread, and the
one background WAL copies run on.

Owns: opening and closing them (how each is configured is schema.connect's business). Synchronous
apsw, like the rest of the store; must not import trio.

Threading: ``writer`` is used by one thread at a time (the writer loop in aio.py). ``reader()``
gives each thread its own read-only connection (``threading.local``), so readers never share a
cursor and never block the writer (WAL). ``checkpointer()`` serves ``wal.Wal.copy_back``, one
worker thread at a time (store/aio.py sees to it).
"""

from __future__ import annotations

import threading
from pathlib import Path

import apsw

from .schema import connect

__all__ = ["Db"]


class Db:
    """The connections to the database at ``path``. Opening it opens the writer connection (and
    creates the file); readers and the checkpointer open on first use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: the writer connection: writer thread only
        self.writer: apsw.Connection = connect(path, write=True)
        self._local = threading.local()
        self._readers: list[apsw.Connection] = []
        self._readers_lock = threading.Lock()
        self._checkpointer: apsw.Connection | None = None

    def __repr__(self) -> str:
        return f"<Db {self.path} readers={len(self._readers)}>"

    def reader(self) -> apsw.Connection:
        """This thread's read-only connection (opened on its first read)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path, write=False)
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def checkpointer(self) -> apsw.Connection:
        """The connection background WAL copies run on, opened on first use."""
        if self._checkpointer is None:
            self._checkpointer = connect(self.path, write=True)
        return self._checkpointer

    def close(self) -> None:
        with self._readers_lock:
            readers, self._readers = self._readers, []
        for conn in readers:
            conn.close()
        if self._checkpointer is not None:
            self._checkpointer.close()
        self.writer.close()
