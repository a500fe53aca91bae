"""The synchronous store: one SQLite database (apsw, WAL, synchronous=FULL) holding the event log.

Owns: the ``Store`` facade — the connections and the state its modules share — and nothing else.
Each responsibility lives in its own module, as functions taking the store (or a connection):

- ``schema``: opening (connection settings, migrations, the memory views' derivation version);
- ``origins``: our origin (minted, legacy ones retired), nonces, chain heads, the version vector;
- ``batch``: write batches (group commit, savepoints, re-runs), ``WriteContext``, and the
  records of what a batch committed (the bus keeps them: replication pushes from there);
- ``writes``: the rows a job adds: local appends, the one event insert, artifacts, redaction;
- ``apply``: events from peers (verification, chains, forks, rules, redaction authority);
- ``agents``: the agent registry (which daemon holds each agent id; impersonation verdicts);
- ``imports``: history from a file;
- ``queries``: every read; ``rows``: the one event-row mapping; ``wal``: checkpoints;
- ``errors``: ``StoreError``/``DiskFullError`` and error translation; ``clock``: ``utc_now``.

The public methods are those functions bound as methods (``write_batch = batch.write_batch``): the
facade adds no call layer on the append path. Must not import trio: the daemon reaches the store
only through ``store/aio.py`` (one writer, a pool of reader threads).

Threading: the writer connection is used by one thread at a time (the writer loop in aio.py).
Each reader thread gets its own read-only connection (``threading.local``), so readers never share
a cursor and never block the writer (WAL). Readers hold a transaction only for one query, never
while a client waits (p2p-lessons complaint 8: long-lived readers pin the WAL).

Error handling: a write job that raises — a rule violation (``ValidationError`` / ``NotFound``),
an apsw error, a full disk — is rolled back alone (a savepoint) and fails alone; an apsw error on
commit fails the whole batch as ``StoreError`` (``DiskFullError``, answered ``disk_full``, when the
disk is full). Nothing is acknowledged before the commit returns.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

import apsw
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from palace_proto.envelope import SignedEvent
from palace_proto.ids import fingerprint
from palace_proto.paths import DATABASE_FILENAME
from palace_proto.sync import OriginHead
from palace_proto.validation import Limits

from . import batch, origins, queries, schema, wal
from .agents import AgentRegistry
from .apply import ApplyReport
from .batch import WriteBatchResult, WriteContext
from .clock import utc_now
from .errors import DiskFullError, StoreError, is_disk_full

__all__ = ["DB_FILENAME", "ApplyReport", "DiskFullError", "Store", "StoreError",
           "WriteBatchResult", "WriteContext", "utc_now"]

DB_FILENAME: Final = DATABASE_FILENAME


class Store:
    """The event log of one replica. Construct with ``Store(path, private_key, limits)``.

    State shared by its modules: ``_conn`` (the writer connection: writer thread only),
    ``_origin_seq``/``_head_hash`` (our chain's head, this batch's uncommitted appends included),
    ``_batch_registry``/``_batch_heads`` (what the running batch moved), and the counters below.
    """

    def __init__(self, path: Path, private_key: Ed25519PrivateKey, limits: Limits) -> None:
        self.path = path
        self.limits = limits
        self._key = private_key
        self.public_key = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self._local = threading.local()
        self._readers: list[apsw.Connection] = []
        self._readers_lock = threading.Lock()
        self._conn = schema.connect(path, write=True)
        #: pages in the WAL after the last commit (the writer's WAL hook counts them)
        self.wal_pages = 0
        self._conn.set_wal_hook(functools.partial(wal.note_wal_pages, self))
        #: the connection background WAL copies run on (``checkpointer``), opened on first use
        self._checkpointer: apsw.Connection | None = None
        self.minted_origin = False
        try:
            schema.migrate(self._conn, path)
            self.origin_id, self.minted_origin = origins.ensure_origin(self._conn, self.public_key)
            self._origin_seq, self._head_hash = origins.chain_head(self._conn, self.origin_id)
            schema.ensure_memory_views(self._conn)
        except (apsw.Error, OSError) as exc:
            # Opening is a write too (migrations, a new origin): a full disk or a damaged file says
            # so in one line (palaced's start-up errors), never with a traceback.
            full = is_disk_full(exc, self._conn)
            self._conn.close()
            if full:
                raise DiskFullError(f"the disk holding {self.path} is full: palaced cannot open its database; free some "
                                    "space and start it again") from exc
            raise StoreError(f"cannot open the database {self.path}: {exc}") from exc
        except Exception:
            self._conn.close()
            raise
        self.redactions_pending_checkpoint = False
        #: the registry events the running batch stored (agents.py counts them at once, and for
        #: good at the commit)
        self._batch_registry: list[SignedEvent] = []
        #: our version vector with head hashes, as committed: origin -> its head (max_seq > 0). Kept
        #: here so replication never reads back what it just wrote (issue 27); replaced whole after
        #: each commit, so any thread may read it
        self._heads: dict[str, OriginHead] = origins.read_heads(self._conn)
        #: the heads the running batch moved, in order (written into ``_heads`` once it commits)
        self._batch_heads: list[tuple[str, OriginHead]] = []
        #: which daemon holds each agent id (agents.py)
        self.agents = AgentRegistry(fingerprint(self.public_key), self.origin_id)
        self.agents.load(self._conn)
        #: origin -> (origin_seq, event_hash, reason) of its next event, authentic but refused for
        #: breaking a rule: replication does not ask for that origin again (writer thread writes)
        self.refused_next: dict[str, tuple[int, bytes, str]] = {}
        #: peer redactions not honoured since start (their author was neither the origin nor the CA)
        self.refused_redactions = 0

    def __repr__(self) -> str:
        return f"<Store {self.path} origin={self.origin_id} seq={self._origin_seq}>"

    def _reader(self) -> apsw.Connection:
        """This thread's read-only connection (opened on its first read)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = schema.connect(self.path, write=False)
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def checkpointer(self) -> apsw.Connection:
        """The connection ``copy_back`` runs on (one worker thread at a time; store/aio.py sees
        to it), opened on first use."""
        if self._checkpointer is None:
            self._checkpointer = schema.connect(self.path, write=True)
        return self._checkpointer

    def close(self) -> None:
        with self._readers_lock:
            readers, self._readers = self._readers, []
        for conn in readers:
            conn.close()
        if self._checkpointer is not None:
            self._checkpointer.close()
        self._conn.close()

    # -- writing (writer thread only) ---------------------------------------------------------

    write_batch = batch.write_batch
    checkpoint_after_redaction = wal.checkpoint_after_redaction
    truncate_wal = wal.truncate_wal
    copy_back = wal.copy_back  # a worker thread, concurrently with the writer

    def rebuild_memory(self, ctx: WriteContext, progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
        """Writer job: derive the memory views again from the log."""
        return schema.rebuild_memory(self._conn, progress)

    # -- reading (any thread, on its own reader connection) -----------------------------------

    get_event = queries.get_event
    lease_events = queries.lease_events
    lease_events_after = queries.lease_events_after
    lease_seq = queries.lease_seq
    resolve_seq = queries.resolve_seq
    latest = queries.latest
    list_events = queries.list_events
    events_after_seq = queries.events_after_seq
    events_by_correlation = queries.events_by_correlation
    correlations_present = queries.correlations_present
    signed_events_of_origin = queries.signed_events_of_origin
    signed_events_of_type = queries.signed_events_of_type
    stored_hash = queries.stored_hash
    export_page = queries.export_page
    count_events = queries.count_events
    counts = queries.counts
    forks = queries.forks
    get_artifact = queries.get_artifact
    bindings = queries.bindings
    static_peers = queries.static_peers
    peer_addresses = queries.peer_addresses
    invite = queries.invite
    pending_invites = queries.pending_invites
    memory_read = queries.memory_read
    drawer = queries.drawer
    agent_activity = queries.agent_activity
    events_written_as = queries.events_written_as
    own_origins = origins.own_origins
    version_vector = origins.version_vector
    heads = origins.heads
    origins_of_key = origins.origins_of_key
