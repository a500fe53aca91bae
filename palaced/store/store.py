"""The synchronous store: one SQLite database (apsw, WAL, synchronous=FULL) holding the event log.

Owns: the ``Store`` — it opens the database and makes the small state objects the modules share,
then holds them; it reaches into none of them. Each responsibility lives in its own module:

- ``db``: the connections (``Db``: the writer's, a reader per thread, the checkpointer's);
- ``chain``: our origin's chain (``Chain``: its key, its head; sealing the next event);
- ``schema``: opening (connection settings, migrations);
- ``state``: the state the modules share, at the bottom of the store: ``WriteContext`` (what a job
  is handed), ``Batch`` (what a running batch accumulates), the committed version vector
  (``Vector``) and what was refused from peers (``Refusals``);
- ``origins``: our origin (minted, legacy ones retired), nonces, chain heads, bindings;
- ``batch``: write batches (group commit, savepoints, re-runs);
- ``writes``: the rows a job adds: local appends, the one event insert, artifacts, redaction;
- ``apply``: events from peers (verification, chains, forks, rules, redaction authority);
- ``identity``: the agent registry (which daemon holds each agent id; impersonation verdicts);
- ``parts``: what the features keep beside the log, moved in each write (``StorePart``: the
  tasks', the usage's, the memory's ... declared in their own modules, given to ``Store``);
- ``imports``: history from a file;
- ``queries``: every read (``Reads``, which the store is); ``rows``: the one event-row mapping;
- ``wal``: the WAL's checkpoints and state (``Wal``);
- ``errors``: ``StoreError``/``DiskFullError`` and error translation.

Must not import trio: the daemon reaches the store only through ``store/aio.py`` (one writer, a
pool of reader threads; the WAL keeper).

Threading: the writer connection is used by one thread at a time (the writer loop in aio.py).
Each reader thread gets its own read-only connection (``Db.reader``), so readers never share a
cursor and never block the writer (WAL). Readers hold a transaction only for one query, never
while a client waits (p2p-lessons complaint 8: long-lived readers pin the WAL).

Error handling: a write job that raises — a rule violation (``ValidationError`` / ``NotFound``),
an apsw error, a full disk — is rolled back alone (a savepoint) and fails alone; an apsw error on
commit fails the whole batch as ``StoreError`` (``DiskFullError``, answered ``disk_full``, when the
disk is full). Nothing is acknowledged before the commit returns.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import apsw
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from palace_proto.ids import fingerprint
from palace_proto.paths import DATABASE_FILENAME
from palace_proto.validation import Limits

from ..clock import utc_now
from . import batch, origins, schema
from .apply import ApplyReport
from .batch import WriteBatchResult
from .chain import Chain
from .db import Db
from .errors import DiskFullError, StoreError, is_disk_full
from .identity import AgentRegistry
from .parts import StorePart, StoreParts
from .queries import Reads
from .state import Refusals, Vector, WriteContext
from .wal import Wal

__all__ = ["DB_FILENAME", "ApplyReport", "DiskFullError", "Store", "StoreError",
           "WriteBatchResult", "WriteContext", "utc_now"]

DB_FILENAME: Final = DATABASE_FILENAME


class Store(Reads):
    """The event log of one replica. Construct with ``Store(path, private_key, limits, parts=...)``.

    Reads (``Reads``'s methods) run on any thread, on its own reader connection. Writes run as
    jobs of ``write_batch`` (writer thread only), each handed the store's ``WriteContext``.
    """

    def __init__(self, path: Path, private_key: Ed25519PrivateKey, limits: Limits, *,
                 parts: Sequence[StorePart]) -> None:
        """``parts``: what the features keep beside the log (``palaced.features.STORE_PARTS``).

        Raises:
            StoreError: the database cannot be opened (``DiskFullError``: its disk is full).
            ValueError: ``parts`` holds a part twice, or two judges of one subject.
        """
        self.path = path
        store_parts = StoreParts(parts)
        self.limits = limits
        public_key = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        db = Db(path)
        conn = db.writer
        self.minted_origin = False
        try:
            schema.migrate(conn, path)
            origins.catch_up_own_head(conn)
            self.origin_id, self.minted_origin = origins.ensure_origin(conn, public_key)
            seq, head_hash = origins.chain_head(conn, self.origin_id)
        except (apsw.Error, OSError) as exc:
            # Opening is a write too (migrations, a new origin): a full disk or a damaged file says
            # so in one line (palaced's start-up errors), never with a traceback.
            full = is_disk_full(exc, conn)
            conn.close()
            if full:
                raise DiskFullError(f"the disk holding {self.path} is full: palaced cannot open its database; free some "
                                    "space and start it again") from exc
            raise StoreError(f"cannot open the database {self.path}: {exc}") from exc
        except Exception:
            conn.close()
            raise
        super().__init__(db, public_key, Vector(origins.read_heads(conn)))
        #: our origin's chain (its head moves with each append: writer thread)
        self.chain = chain = Chain(self.origin_id, private_key, seq, head_hash)
        #: the WAL: its size after the last commit, and whether a redaction still owes it a purge
        self.wal = Wal(db)
        #: which daemon holds each agent id (agents.py)
        self.agents = AgentRegistry(fingerprint(self.public_key), self.origin_id)
        self.agents.load(conn)
        #: what was refused from peers: origins not asked for again, redactions not honoured
        self.refusals = Refusals()
        #: what write jobs are handed (writer thread only)
        self.writing = WriteContext(db, chain, self.agents, self.vector, self.wal, limits, self.refusals, store_parts)
        #: ``write_batch(jobs)``: batch.write_batch on this store's ``WriteContext`` (a partial: no
        #: call layer of its own on the append path)
        self.write_batch = functools.partial(batch.write_batch, self.writing)
        try:
            # Each part brings itself up to date with the log (a derivation this database does not
            # hold yet: the memory views' new version, the usage totals of schema 0013), with the
            # registry just loaded.
            for ok, value in self.write_batch(list(store_parts.opened)).outcomes:
                if not ok:
                    raise value
        except BaseException:
            db.close()
            raise

    def __repr__(self) -> str:
        return f"<Store {self.path} origin={self.origin_id} seq={self.chain.seq}>"

    def close(self) -> None:
        self.db.close()
