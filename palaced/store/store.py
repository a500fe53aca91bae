"""The synchronous store: one SQLite database (apsw, WAL, synchronous=FULL) holding the event log.

Owns: the schema and its migrations, the local origin and its hash chain, appends (validated,
signed, chained and committed in one transaction with the version vector), artifacts, redaction,
and every read query. Must not import trio: the daemon reaches this module only through
``store/aio.py`` (one writer thread, a pool of reader threads).

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

import dataclasses
import errno
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Final

import apsw
import msgpack
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from palace_proto.envelope import GENESIS_HASH, SignedEvent, preview_event, seal_event, verify_hashes
from palace_proto.errors import ApiError, DiskFull, NotFound, SignatureError, ValidationError
from palace_proto.ids import (
    ARTIFACT_ID_RE,
    ORIGIN_NONCE_BYTES,
    SHA256_HEX_RE,
    artifact_id_for_sha256,
    is_key_derived_origin,
    origin_id_for_key,
)
from palace_proto.memory import MEMORY_TYPES, check_memory_event
from palace_proto.paths import DATABASE_FILENAME
from palace_proto.peer import event_to_wire
from palace_proto.sync import OriginHead, Verdict, classify, verify_incoming
from palace_proto.text import printable
from palace_proto.validation import AppendRequest, Limits, ListQuery, check_replicated_event

from . import memory_views

__all__ = ["AUTO_CHECKPOINT_PAGES", "DB_FILENAME", "ApplyReport", "Store", "StoreError", "WriteBatchResult", "utc_now"]

DB_FILENAME: Final = DATABASE_FILENAME
_LOGGER: Final = logging.getLogger("palaced.store")

_EVENT_COLUMNS: Final = (
    "seq, id, origin, origin_seq, type, stream, room, topic, from_agent, to_agent, correlation_id, "
    "branch, base_commit, status, ack_of, artifact_ids, body, metadata, created_at, body_sha256"
)
_CHAIN_COLUMNS: Final = "prev_hash, event_hash, signature"
#: meta key prefix of the nonce each key-derived origin of this replica was minted with
_NONCE_KEY: Final = "origin_nonce/"


class StoreError(Exception):
    """The database failed (disk full, I/O error, corruption); the batch was not committed."""


class DiskFullError(StoreError, DiskFull):
    """The disk holding the database is full. Answered to clients as ``disk_full`` (an ``ApiError``);
    not a bug and not lasting: reads go on, and the next write is tried as usual."""


# Why these two: what the OS answers when a write finds no room (ENOSPC) or the user's quota spent (EDQUOT).
_NO_SPACE_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(exc: BaseException, conn: apsw.Connection | None = None) -> bool:
    """Whether ``exc`` says the disk is full: SQLITE_FULL, or an OS error (raised, or the one behind
    an SQLite I/O error, e.g. growing the -shm file) of no space left."""
    if isinstance(exc, apsw.FullError):
        return True
    if isinstance(exc, OSError):
        return exc.errno in _NO_SPACE_ERRNOS
    return isinstance(exc, apsw.IOError) and conn is not None and conn.system_errno in _NO_SPACE_ERRNOS


class _TransactionLost(Exception):
    """SQLite rolled the batch's whole transaction back (it does after some errors, e.g. SQLITE_FULL
    while spilling pages mid-statement) while job ``index`` ran: nothing of the batch exists."""

    def __init__(self, index: int, cause: BaseException | None) -> None:
        super().__init__(str(cause) if cause else "the transaction was rolled back by SQLite")
        self.index = index
        self.cause = cause


# Why 3: each re-run drops the job that lost the transaction; more such jobs in one batch means the
# disk is failing for everyone, and the rest of the batch is better failed than run again and again.
_MAX_BATCH_RERUNS: Final = 3
# SQLite checkpoints inside the commit that takes the WAL past this many pages: two more fsyncs
# and a copy of every page changed since the last one. Why 10,000 (40 MiB, about 1,200 appends)
# rather than SQLite's 1,000: a tenth as many such commits (one append in a thousand, not one in a
# hundred, outside an append's p99), and a page written again meanwhile is copied once, not ten
# times. The writer's own truncation (store/aio.py) still keeps the file from growing beyond it.
AUTO_CHECKPOINT_PAGES: Final = 10_000
# Why 8,192: the newest committed events kept as signed, for replication to push them to a peer
# as they are committed without reading them back (a second of a busy palace; older ones are read).
RECENT_SIGNED: Final = 8192
_NOTHING_WRITTEN: Final = "nothing was written; free some space and retry — palaced resumes by itself"


_second: tuple[int, str] = (-1, "")


def utc_now() -> str:
    """Current UTC time as ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (the daemon's clock, not the client's).

    Every append stamps one, so the formatted second is reused until it changes (a fifth of the
    cost of ``datetime.strftime``); the tuple is replaced whole, so any thread may call this."""
    global _second
    second, micro = divmod(time.time_ns() // 1000, 1_000_000)
    if _second[0] != second:
        _second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{_second[1]}.{micro:06d}Z"


def _row_to_public(row: Sequence[Any]) -> dict[str, Any]:
    (seq, eid, origin, origin_seq, type_, stream, room, topic, from_agent, to_agent, corr, branch,
     base, status, ack_of, artifact_ids, body, metadata, created_at, body_sha) = row[:20]
    out = {
        "id": eid, "seq": seq, "origin": origin, "origin_seq": origin_seq, "type": type_,
        "stream": stream, "room": room, "topic": topic, "from_agent": from_agent,
        "to_agent": to_agent, "correlation_id": corr, "branch": branch, "base_commit": base,
        "status": status, "ack_of": ack_of, "artifact_ids": json.loads(artifact_ids),
        "body": body if body is not None else "", "metadata": json.loads(metadata),
        "created_at": created_at,
    }
    if body is None:
        out["body_redacted"] = True
        out["body_sha256"] = bytes(body_sha).hex()
    return out


_SIGNED_COLUMNS: Final = (
    "origin, origin_seq, prev_hash, created_at, type, stream, room, topic, from_agent, to_agent, correlation_id, "
    "branch, base_commit, status, ack_of, artifact_ids, body_sha256, metadata, event_hash, signature, body"
)


def _signed_from_row(r: Sequence[Any]) -> SignedEvent:
    return SignedEvent(
        origin=r[0], origin_seq=r[1], prev_hash=bytes(r[2]), created_at=r[3], type=r[4], stream=r[5],
        room=r[6], topic=r[7], from_agent=r[8], to_agent=r[9], correlation_id=r[10], branch=r[11],
        base_commit=r[12], status=r[13], ack_of=r[14], artifact_ids=tuple(json.loads(r[15])),
        body_sha256=bytes(r[16]), metadata_json=r[17], event_hash=bytes(r[18]),
        signature=bytes(r[19]), body=r[20],
    )


@dataclass(slots=True)
class ApplyReport:
    """What happened to a batch of events from a peer."""

    applied: list[dict[str, Any]] = field(default_factory=list)
    duplicates: list[SignedEvent] = field(default_factory=list)
    gaps: list[SignedEvent] = field(default_factory=list)
    forks: list[SignedEvent] = field(default_factory=list)
    rejected: list[SignedEvent] = field(default_factory=list)
    missing_artifacts: list[SignedEvent] = field(default_factory=list)
    #: authentic events that break a data-model rule, with the reason (refused alone)
    refused: list[tuple[SignedEvent, str]] = field(default_factory=list)
    #: applied ``event.redact`` events whose purge was not honoured (not the target's origin nor the CA)
    redactions_refused: list[tuple[SignedEvent, str]] = field(default_factory=list)
    #: ids of events whose bodies were purged by redactions in this batch
    purged: list[str] = field(default_factory=list)


@dataclass(slots=True)
class WriteBatchResult:
    """Outcome of one write batch: per-job results (value or exception) and the new events."""

    outcomes: list[tuple[bool, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    #: ids of events whose bodies this batch purged (the bus scrubs them from its ring)
    purged: list[str] = field(default_factory=list)


class WriteContext:
    """What a write job may do inside the batch transaction (handed to each job callable)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.new_events: list[dict[str, Any]] = []
        #: ids of events whose bodies were purged by this batch's jobs
        self.purged: list[str] = []

    @property
    def conn(self) -> apsw.Connection:
        return self._store._conn

    def append(self, req: AppendRequest) -> dict[str, Any]:
        event = self._store._append_locked(req)
        self.new_events.append(event)
        return event

    def put_artifact(self, **kwargs: Any) -> dict[str, Any]:
        return self._store._put_artifact_locked(**kwargs)

    def get_event(self, event_id: str) -> dict[str, Any] | None:
        return self._store._get_event(self.conn, event_id)

    def redact(self, event_id: str, redact_event_id: str) -> None:
        self._store._redact_locked(event_id, redact_event_id)
        self.purged.append(event_id)

    def put_verified_artifact(self, *, sha256: str, kind: str, created_by: str, created_at: str,
                              metadata_json: str, content: bytes) -> None:
        """Store an artifact that arrived from a peer (the caller checked the sha256)."""
        if hashlib.sha256(content).hexdigest() != sha256:
            raise StoreError("artifact content does not match its sha256")
        self.conn.execute(
            "INSERT INTO artifacts (id, sha256, kind, size_bytes, content, created_by, created_at, metadata) "
            "VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(sha256) DO NOTHING",
            (artifact_id_for_sha256(sha256), sha256, kind, len(content), content, created_by, created_at, metadata_json),
        )

    def save_bindings(self, bindings: Sequence[tuple[str, bytes, bytes | None]]) -> None:
        """Keep (origin, certificate PEM, proof) bindings; a proof fills in one stored without."""
        self.conn.executemany(
            "INSERT INTO bindings (origin, certificate, proof) VALUES (?, ?, ?) ON CONFLICT(origin) DO UPDATE "
            "SET proof=excluded.proof WHERE bindings.proof IS NULL AND excluded.proof IS NOT NULL", bindings)

    def import_history(self, events: Sequence[SignedEvent], keys: Mapping[str, bytes]) -> dict[str, Any]:
        """Store verified events of other palaces (or of this one's past) as history."""
        result = self._store._import_locked(events, keys)
        self.new_events.extend(result.pop("stored"))
        return result

    def apply_remote(self, events: Sequence[SignedEvent], key_for: Callable[[str, int], bytes | None],
                     source: str | None = None, on_applied: Callable[[SignedEvent], None] | None = None,
                     verified_keys: Sequence[bytes | None] | None = None,
                     may_redact: Callable[[SignedEvent, str], bool] | None = None) -> ApplyReport:
        """Verify and store peer events; ``on_applied`` sees each stored event before the next is
        judged (a revocation earlier in a batch governs the rest of it)."""
        report = self._store._apply_remote_locked(events, key_for, source, on_applied, verified_keys, may_redact)
        self.new_events.extend(report.applied)
        self.purged.extend(report.purged)
        return report


class Store:
    """The event log of one replica. Construct with ``Store.open(home, private_key, limits)``."""

    def __init__(self, path: Path, private_key: Ed25519PrivateKey, limits: Limits) -> None:
        self.path = path
        self.limits = limits
        self._key = private_key
        self.public_key = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self._local = threading.local()
        self._readers: list[apsw.Connection] = []
        self._readers_lock = threading.Lock()
        self._conn = self._connect(write=True)
        self.minted_origin = False
        try:
            self._migrate()
            self.origin_id = self._ensure_origin()
            self._load_chain_head()
            self._ensure_memory_views()
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
        #: (origin, origin_seq) -> the newest committed events, as signed (written by the writer
        #: thread after each commit, read by replication in trio: single dict operations only)
        self._recent: dict[tuple[str, int], SignedEvent] = {}
        #: events the running batch stored (writer thread), for ``_recent`` once it commits
        self._batch_signed: list[SignedEvent] = []
        #: origin -> (origin_seq, event_hash, reason) of its next event, authentic but refused for
        #: breaking a rule: replication does not ask for that origin again (writer thread writes)
        self.refused_next: dict[str, tuple[int, bytes, str]] = {}
        #: peer redactions not honoured since start (their author was neither the origin nor the CA)
        self.refused_redactions = 0

    def __repr__(self) -> str:
        return f"<Store {self.path} origin={self.origin_id} seq={self._origin_seq}>"

    # -- connections and schema ---------------------------------------------------------------

    def _connect(self, *, write: bool) -> apsw.Connection:
        flags = apsw.SQLITE_OPEN_READWRITE | (apsw.SQLITE_OPEN_CREATE if write else 0)
        try:
            conn = apsw.Connection(str(self.path), flags=flags)
            conn.set_busy_timeout(10_000)
            if write:
                conn.execute("PRAGMA journal_mode=WAL")
                # FULL: a commit returns only after the WAL is fsynced. An acknowledged append is durable.
                conn.execute("PRAGMA synchronous=FULL")
                # Redaction must leave no bytes behind in freed space of the database file.
                conn.execute("PRAGMA secure_delete=ON")
                conn.execute("PRAGMA foreign_keys=ON")
                conn.execute(f"PRAGMA wal_autocheckpoint={AUTO_CHECKPOINT_PAGES}")
            else:
                conn.execute("PRAGMA query_only=ON")
        except apsw.Error as exc:
            raise StoreError(f"cannot open the database {self.path}: {exc}") from exc
        return conn

    def _reader(self) -> apsw.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect(write=False)
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def _migrate(self) -> None:
        conn = self._conn
        conn.execute(
            "CREATE TABLE IF NOT EXISTS _migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "applied_at TEXT NOT NULL) STRICT"
        )
        done = {v for (v,) in conn.execute("SELECT version FROM _migrations")}
        schema_dir = resources.files("palaced.store") / "schema"
        scripts = sorted(p.name for p in schema_dir.iterdir() if p.name.endswith(".sql"))
        # What SQL alone cannot do: a Python step run after a version's script, in its transaction.
        steps: dict[int, Callable[[apsw.Connection], None]] = {5: self._fork_evidence_without_bodies}
        for name in scripts:
            version = int(name.split("-", 1)[0])
            if version in done:
                continue
            sql = (schema_dir / name).read_text(encoding="utf-8")
            with conn:
                conn.execute(sql)
                if version in steps:
                    steps[version](conn)
                conn.execute("INSERT INTO _migrations VALUES (?, ?, ?)", (version, name, utc_now()))
        newest = max((int(n.split("-", 1)[0]) for n in scripts), default=0)
        if done and max(done) > newest:
            raise StoreError(
                f"the database {self.path} was written by a newer palace (schema {max(done)} > {newest}); "
                "upgrade palace before opening it"
            )

    @staticmethod
    def _fork_evidence_without_bodies(conn: apsw.Connection) -> None:
        """Schema 5: fork evidence keeps no body (``_record_fork``); rows stored before lose theirs."""
        for rowid, blob in conn.execute("SELECT rowid, rejected FROM forks").fetchall():
            try:
                wire = msgpack.unpackb(bytes(blob), raw=False)
            except (ValueError, TypeError, msgpack.exceptions.UnpackException):
                wire = None
            if isinstance(wire, dict) and wire.get("body") is None:
                continue
            # Unreadable evidence proves nothing and may hold a body: an empty map replaces it.
            stripped = {**wire, "body": None} if isinstance(wire, dict) else {}
            conn.execute("UPDATE forks SET rejected=? WHERE rowid=?", (msgpack.packb(stripped, use_bin_type=True), rowid))

    def _ensure_origin(self) -> str:
        """The local origin id: minted with the database, and again if the identity key changed or
        the origin is a legacy one.

        A new database always gets a fresh origin id (never reused: p2p-lessons, SSB forks). If the
        identity key no longer matches the origin's recorded key, continuing that chain would make
        it unverifiable, so a new origin is minted and the old one stays as signed history. A
        legacy (random, ``ori_``) origin is retired the same way on the first start of a release
        that speaks protocol 2: new events go to a key-derived origin (``ori2_``) that no other
        member can claim for its own key (palace_proto.bindings).
        """
        conn = self._conn
        row = conn.execute("SELECT value FROM meta WHERE key='origin'").fetchone()
        if row is not None:
            (origin,) = row
            key_row = conn.execute("SELECT public_key FROM origins WHERE origin=?", (origin,)).fetchone()
            if key_row is not None and bytes(key_row[0]) == self.public_key:
                if is_key_derived_origin(origin) and self._nonce(conn, origin) is not None:
                    return origin
                _LOGGER.info("retiring legacy origin %s: its events stay as signed history; new events get a "
                             "key-derived origin", origin)
        nonce = os.urandom(ORIGIN_NONCE_BYTES)
        origin = origin_id_for_key(self.public_key, nonce)
        with conn:
            conn.execute("INSERT INTO origins (origin, public_key, max_seq, head_hash) VALUES (?, ?, 0, ?)",
                         (origin, self.public_key, GENESIS_HASH))
            conn.execute("INSERT INTO meta VALUES ('origin', ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                         (origin,))
            conn.execute("INSERT INTO meta VALUES (?, ?)", (_NONCE_KEY + origin, nonce.hex()))
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('created_at', ?)", (utc_now(),))
        self.minted_origin = True
        return origin

    @staticmethod
    def _nonce(conn: apsw.Connection, origin: str) -> bytes | None:
        row = conn.execute("SELECT value FROM meta WHERE key=?", (_NONCE_KEY + origin,)).fetchone()
        return bytes.fromhex(row[0]) if row else None

    def own_origins(self) -> list[tuple[str, bytes | None]]:
        """Every origin written with this replica's key, with the nonce it was minted with (its
        binding proof; None for a legacy origin, whose proof is a signature made on demand)."""
        conn = self._reader()
        rows = conn.execute("SELECT origin FROM origins WHERE public_key=? ORDER BY origin", (self.public_key,)).fetchall()
        return [(origin, self._nonce(conn, origin)) for (origin,) in rows]

    def _ensure_memory_views(self) -> None:
        """Rebuild the memory views from the log when they were made by another derivation."""
        row = self._conn.execute("SELECT value FROM meta WHERE key='memory_views'").fetchone()
        if row is not None and row[0] == memory_views.VIEWS_VERSION:
            return
        with self._conn:
            counts = self._rebuild_memory_locked()
        _LOGGER.info("memory views built from the log: %d drawers, %d facts", counts["drawers"], counts["facts"])

    def _rebuild_memory_locked(self, progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
        def load(keys: Sequence[tuple[str, int]]) -> list[SignedEvent]:
            return [self._signed_event_at(self._conn, origin, seq) for origin, seq in keys]

        counts = memory_views.rebuild(self._conn, load, progress)
        self._conn.execute("INSERT INTO meta VALUES ('memory_views', ?) ON CONFLICT(key) DO UPDATE SET "
                           "value=excluded.value", (memory_views.VIEWS_VERSION,))
        return counts

    def _load_chain_head(self) -> None:
        max_seq, head = self._conn.execute(
            "SELECT max_seq, head_hash FROM origins WHERE origin=?", (self.origin_id,)
        ).fetchone()
        self._origin_seq: int = max_seq
        self._head_hash: bytes = bytes(head)

    def close(self) -> None:
        with self._readers_lock:
            readers, self._readers = self._readers, []
        for conn in readers:
            conn.close()
        self._conn.close()

    # -- writing (writer thread only) ---------------------------------------------------------

    def write_batch(self, jobs: Sequence[Callable[[WriteContext], Any]]) -> WriteBatchResult:
        """Run write jobs in one transaction (group commit): one fsync for the whole batch.

        Each job runs in its own savepoint. A job that raises is rolled back alone and its exception
        becomes its outcome, while the others commit: a rule it breaks (``ValidationError``,
        ``NotFound``, any ``ApiError``) as it is, a full disk while its rows are written as
        ``DiskFullError``, anything else (a constraint error, a bug) as ``internal``, logged. After
        some errors (SQLITE_FULL while spilling pages, an I/O error) SQLite rolls the whole
        transaction back by itself: then the batch runs again without that job (jobs must only
        write through ``ctx``, so running one again after its first run was discarded is the same
        as running it once). The commit happens once; nothing is acknowledged before it returns.

        Raises:
            DiskFullError: the disk is full and the commit failed: no job of the batch was written.
            StoreError: the same for any other database error.
        """
        failed: dict[int, tuple[bool, Any]] = {}
        running = list(range(len(jobs)))
        for _ in range(_MAX_BATCH_RERUNS + 1):
            try:
                result = self._run_batch([jobs[i] for i in running])
            except _TransactionLost as lost:
                culprit = running.pop(lost.index)
                failed[culprit] = (False, self._job_failure(lost.cause or lost))
                continue
            outcomes = dict(zip(running, result.outcomes, strict=True)) | failed
            result.outcomes = [outcomes[i] for i in range(len(jobs))]
            return result
        raise StoreError(f"could not commit to {self.path}: the transaction was rolled back "
                         f"{_MAX_BATCH_RERUNS + 1} times in one batch")

    def _run_batch(self, jobs: Sequence[Callable[[WriteContext], Any]]) -> WriteBatchResult:
        """One try of ``write_batch``. Raises ``_TransactionLost`` naming the job after which SQLite
        had rolled the whole transaction back."""
        conn = self._conn
        result = WriteBatchResult()
        ctx = WriteContext(self)
        saved_chain = (self._origin_seq, self._head_hash)
        try:
            self._leave_stuck_transaction()
            conn.execute("SAVEPOINT palace_batch")
            # A job alone in its batch needs no savepoint of its own: the batch's is its own.
            job_savepoint = "palace_job" if len(jobs) > 1 else "palace_batch"
            for index, job in enumerate(jobs):
                before = (self._origin_seq, self._head_hash, len(ctx.new_events), len(ctx.purged),
                          len(self._batch_signed))
                if job_savepoint == "palace_job":
                    conn.execute("SAVEPOINT palace_job")
                try:
                    value = job(ctx)
                except Exception as exc:
                    self._origin_seq, self._head_hash = before[0], before[1]
                    del ctx.new_events[before[2]:]
                    del ctx.purged[before[3]:]
                    del self._batch_signed[before[4]:]
                    # in_transaction is sqlite3_get_autocommit: SQLite's documented (and only) way
                    # to learn that an error made it roll the whole transaction back.
                    if not conn.in_transaction:
                        raise _TransactionLost(index, exc) from exc
                    conn.execute(f"ROLLBACK TO {job_savepoint}")
                    if job_savepoint == "palace_job":
                        conn.execute("RELEASE palace_job")
                    result.outcomes.append((False, self._job_failure(exc)))
                    continue
                if not conn.in_transaction:  # the job swallowed an error after which SQLite rolled back
                    raise _TransactionLost(index, None)
                if job_savepoint == "palace_job":
                    conn.execute("RELEASE palace_job")
                result.outcomes.append((True, value))
            if self._origin_seq != saved_chain[0]:
                conn.execute("UPDATE origins SET max_seq=?, head_hash=? WHERE origin=?",
                             (self._origin_seq, self._head_hash, self.origin_id))
            conn.execute("RELEASE palace_batch")  # the commit, and its fsync
        except BaseException as exc:
            self._batch_signed.clear()
            # Nothing of the batch is in the database: the chain goes back to what is committed, so
            # the next append reuses neither a sequence number nor leaves a gap.
            self._origin_seq, self._head_hash = saved_chain
            self._leave_stuck_transaction(quiet=True)
            if isinstance(exc, (apsw.Error, OSError)):
                raise self._write_error(exc) from exc
            raise
        result.events = ctx.new_events
        result.purged = ctx.purged
        self._remember_committed(bool(ctx.purged))
        return result

    def _remember_committed(self, purged: bool) -> None:
        """After a commit: keep its events in ``_recent`` (none at all after a batch that purged
        a body: whatever was kept may hold it, and older events are read back anyway)."""
        recent, stored = self._recent, self._batch_signed
        self._batch_signed = []
        if purged:
            recent.clear()
            return
        for event in stored:
            recent[(event.origin, event.origin_seq)] = event
        while len(recent) > RECENT_SIGNED:
            del recent[next(iter(recent))]

    def committed_signed(self, origin: str, after_origin_seq: int, limit: int) -> list[SignedEvent] | None:
        """The events of ``origin`` after ``after_origin_seq`` (at most ``limit``, in chain order)
        from the newest committed ones, without reading the database; None if any is not kept
        (then ``signed_events_of_origin`` reads them). Safe from any thread."""
        recent = self._recent
        events = []
        for seq in range(after_origin_seq + 1, after_origin_seq + 1 + limit):
            event = recent.get((origin, seq))
            if event is None:
                break
            events.append(event)
        return events if events else None

    def _append_locked(self, req: AppendRequest) -> dict[str, Any]:
        conn = self._conn
        for artifact_id in req.artifact_ids:
            if conn.execute("SELECT 1 FROM artifacts WHERE id=?", (artifact_id,)).fetchone() is None:
                raise ValidationError(
                    f"artifact_ids references unknown artifact {artifact_id!r}", field="artifact_ids"
                )
        seq = self._origin_seq + 1
        event = seal_event(
            self._key, origin=self.origin_id, origin_seq=seq, prev_hash=self._head_hash,
            created_at=utc_now(), type=req.type, stream=req.stream, room=req.room,
            from_agent=req.from_agent, body=req.body, metadata_json=req.metadata_json,
            topic=req.topic, to_agent=req.to_agent, correlation_id=req.correlation_id,
            branch=req.branch, base_commit=req.base_commit, status=req.status, ack_of=req.ack_of,
            artifact_ids=req.artifact_ids,
        )
        local_seq = self._insert_event(event)
        # The origins row (the version vector) is written once per batch, in the same transaction.
        self._origin_seq, self._head_hash = seq, event.event_hash
        return event.to_public(local_seq)

    def _insert_event(self, ev: SignedEvent, *, history: bool = False) -> int:
        conn = self._conn
        conn.execute(
            "INSERT INTO events (id, origin, origin_seq, prev_hash, event_hash, signature, type, stream, "
            "room, topic, from_agent, to_agent, correlation_id, branch, base_commit, status, ack_of, "
            "artifact_ids, body, body_sha256, metadata, created_at) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (ev.id, ev.origin, ev.origin_seq, ev.prev_hash, ev.event_hash, ev.signature, ev.type,
             ev.stream, ev.room, ev.topic, ev.from_agent, ev.to_agent, ev.correlation_id, ev.branch,
             ev.base_commit, ev.status, ev.ack_of, json.dumps(list(ev.artifact_ids)) if ev.artifact_ids else "[]", ev.body,
             ev.body_sha256, ev.metadata_json, ev.created_at),
        )
        # The memory views follow the log in the same transaction (local appends and peer events alike).
        memory_views.materialise(conn, ev)
        if not history:  # imported history is never offered to peers: nothing to keep for them
            self._batch_signed.append(ev)
        return conn.last_insert_rowid()

    def _put_artifact_locked(
        self, *, kind: str, created_by: str, content: bytes, metadata_json: str = "{}"
    ) -> dict[str, Any]:
        if len(content) > self.limits.max_artifact_bytes:
            raise ValidationError(
                f"content is {len(content)} bytes; maximum is {self.limits.max_artifact_bytes} bytes",
                field="content",
            )
        digest = hashlib.sha256(content).hexdigest()
        artifact_id = artifact_id_for_sha256(digest)
        conn = self._conn
        conn.execute(
            "INSERT INTO artifacts (id, sha256, kind, size_bytes, content, created_by, created_at, metadata) "
            "VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(sha256) DO NOTHING",
            (artifact_id, digest, kind, len(content), content, created_by, utc_now(), metadata_json),
        )
        record = self._artifact_record(conn, artifact_id, with_content=False)
        assert record is not None
        return record

    def _redact_locked(self, event_id: str, redact_event_id: str) -> None:
        conn = self._conn
        conn.execute("INSERT OR IGNORE INTO redactions VALUES (?, ?)", (event_id, redact_event_id))
        changed = conn.execute(
            "UPDATE events SET body=NULL WHERE id=? AND body IS NOT NULL RETURNING seq", (event_id,)
        ).fetchall()
        # After the body is gone: the views derive again what the event shared with others (the
        # same drawer or fact) from the log, which must no longer show this event's body.
        memory_views.unmaterialise(
            conn, event_id, lambda keys: [self._signed_event_at(conn, origin, seq) for origin, seq in keys])
        if changed:
            self.redactions_pending_checkpoint = True

    def _import_locked(self, events: Sequence[SignedEvent], keys: Mapping[str, bytes]) -> dict[str, Any]:
        """Verify each event against its origin's key and store it as history.

        History, not replication: an imported origin keeps ``max_seq`` 0, so it never enters the
        version vector (peers are neither offered its events nor asked for them), and its events
        may have gaps (a filtered export). Refused: our own origin, and an origin this palace
        replicates (its events come from peers or a backup, never from a file: an import must
        not be able to put words in a member's mouth that the member's chain does not hold).
        """
        conn = self._conn
        stored: list[dict[str, Any]] = []
        duplicates = 0
        refused: list[dict[str, str]] = []
        known: dict[str, tuple[bytes, int] | None] = {}
        members = {origin for (origin,) in conn.execute("SELECT origin FROM bindings")}
        for event in events:
            key = keys.get(event.origin)
            if event.origin not in known:
                row = conn.execute("SELECT public_key, max_seq FROM origins WHERE origin=?", (event.origin,)).fetchone()
                known[event.origin] = (bytes(row[0]), row[1]) if row else None
            here = known[event.origin]
            if conn.execute("SELECT 1 FROM events WHERE id=?", (event.id,)).fetchone():
                duplicates += 1
                continue
            if event.origin == self.origin_id:
                refused.append({"id": event.id, "reason": "this replica's own origin (only it writes there)"})
                continue
            if event.origin in members or (here is not None and here[1] > 0):
                refused.append({"id": event.id, "reason": f"origin {event.origin} is replicated in this palace: its "
                                "events come from peers, not from a file"})
                continue
            if key is None:
                refused.append({"id": event.id, "reason": f"no public key for origin {event.origin} in the file"})
                continue
            if here is not None and here[0] != key:
                refused.append({"id": event.id, "reason": f"origin {event.origin} is known here with another key"})
                continue
            try:
                verify_incoming(event, key)
            except SignatureError as exc:
                refused.append({"id": event.id, "reason": f"does not verify: {exc}"})
                continue
            broken = self._rule_broken(event)  # a file is as hostile as a peer: the same rules
            if broken is not None:
                refused.append({"id": event.id, "reason": f"breaks a rule: {broken}"})
                continue
            if conn.execute("SELECT 1 FROM events WHERE origin=? AND origin_seq=?",
                            (event.origin, event.origin_seq)).fetchone():
                refused.append({"id": event.id, "reason": f"another event already holds {event.origin} "
                                f"#{event.origin_seq} here (a fork in the imported history)"})
                continue
            if here is None:
                conn.execute("INSERT INTO origins (origin, public_key, max_seq, head_hash) VALUES (?, ?, 0, ?)",
                             (event.origin, key, GENESIS_HASH))
                known[event.origin] = (key, 0)
            seq = self._insert_event(event, history=True)  # a body redacted before the export stays absent
            stored.append(event.to_public(seq))
        return {"stored": stored, "imported": len(stored), "duplicates": duplicates, "refused": refused}

    def _head(self, origin: str) -> OriginHead | None:
        row = self._conn.execute("SELECT max_seq, head_hash FROM origins WHERE origin=?", (origin,)).fetchone()
        return OriginHead(row[0], bytes(row[1])) if row and row[0] > 0 else None

    def _apply_remote_locked(self, events: Sequence[SignedEvent], key_for: Callable[[str, int], bytes | None],
                             source: str | None, on_applied: Callable[[SignedEvent], None] | None = None,
                             verified_keys: Sequence[bytes | None] | None = None,
                             may_redact: Callable[[SignedEvent, str], bool] | None = None) -> ApplyReport:
        """Verify and store events from a peer, in the order given (each origin in seq order).

        Every event is checked against its origin's key and chain before it is stored; duplicates
        are ignored (idempotent), gaps wait for the missing events, forks are recorded and never
        applied; an event of our own origin from outside is an echo (ignored) or a fork. An
        authentic event that breaks a data-model rule is refused on its own (``report.refused``)
        and its origin is not asked for again (``refused_next``). Events whose artifacts are
        missing are held back (and, by the chain rule, everything after them in their origin).
        Applied events get a new local ``seq`` in arrival order.

        ``verified_keys`` gives, for each event **by position**, the key its signature was
        already checked with off the writer thread (sync.verify_batch); the hashes are still
        recomputed here, on the exact object stored, so a verification can never be borrowed by an
        event that merely claims another one's hash. ``may_redact(redaction, target_origin)``
        says whether an ``event.redact`` may purge an event of ``target_origin`` (its own origin,
        or signed by the palace CA: members.MemberDirectory.redaction_authorized); without it only
        an origin's own redactions are honoured.
        """
        if verified_keys is not None and len(verified_keys) != len(events):
            raise ValueError("verified_keys must give one key (or None) per event")
        report = ApplyReport()
        conn = self._conn
        heads: dict[str, OriginHead | None] = {}
        bound_keys: dict[str, bytes | None] = {}
        forked: set[str] = set()

        def head_of(origin: str) -> OriginHead | None:
            if origin not in heads:
                heads[origin] = self._head(origin)
            return heads[origin]

        for index, event in enumerate(events):
            own = event.origin == self.origin_id
            # key_for answers for this exact event: a revoked member's origin stays valid up to its
            # cutoff only, so the key depends on origin_seq too.
            key = self.public_key if own else key_for(event.origin, event.origin_seq)
            if own:
                bound = None
            elif event.origin in bound_keys:
                bound = bound_keys[event.origin]
            else:
                bound = bound_keys[event.origin] = self._origin_key(event.origin)
            if key is None or (bound is not None and bound != key):
                # Unknown origin, or one already bound to another key: an origin never changes keys.
                report.rejected.append(event)
                continue
            if self._stored_hash(event.origin, event.origin_seq) == event.event_hash:
                # We hold this exact event already: nothing of the arriving copy is stored, so nothing
                # of it needs verifying (a catch-up that overlaps what we have costs a lookup per
                # event, not a signature).
                if not own:
                    self._join_history(event.origin, event.origin_seq, key, head_of(event.origin), heads)
                report.duplicates.append(event)
                continue
            try:
                if verified_keys is not None and verified_keys[index] == key:
                    verify_hashes(event)  # the signature was checked for this very object; its hashes here
                else:
                    verify_incoming(event, key)
            except SignatureError:
                report.rejected.append(event)
                continue
            if own:
                # Only we write our origin: a validly signed event we did not write means our key
                # and origin run somewhere else too (a copied home or a restored backup) — a fork.
                self._record_fork(event, self._stored_hash(event.origin, event.origin_seq), source)
                report.forks.append(event)
                continue
            head = head_of(event.origin)
            stored = self._stored_hash(event.origin, event.origin_seq) if head and event.origin_seq <= head.max_seq else None
            verdict = classify(event, head, stored)
            if verdict is Verdict.DUPLICATE:
                report.duplicates.append(event)
            elif verdict is Verdict.GAP:
                report.gaps.append(event)
            elif verdict is Verdict.FORK:
                if event.origin not in forked:  # one piece of evidence per origin and batch is enough
                    self._record_fork(event, stored if stored is not None else (head.head_hash if head else None),
                                      source)
                    forked.add(event.origin)
                report.forks.append(event)
            else:
                reason = self._rule_broken(event)
                if reason is not None:
                    self._refuse(event, reason, source)
                    report.refused.append((event, reason))
                    continue
                missing = [a for a in event.artifact_ids
                           if conn.execute("SELECT 1 FROM artifacts WHERE id=?", (a,)).fetchone() is None]
                if missing:
                    report.missing_artifacts.append(event)
                    continue
                if self._redacted_on_arrival(event, may_redact):
                    event = dataclasses.replace(event, body=None)  # redacted elsewhere first: never store the body
                conn.execute("INSERT OR IGNORE INTO origins (origin, public_key, max_seq, head_hash) VALUES (?, ?, 0, ?)",
                             (event.origin, key, GENESIS_HASH))
                bound_keys[event.origin] = key
                local_seq = self._insert_event(event)
                conn.execute("UPDATE origins SET max_seq=?, head_hash=? WHERE origin=?",
                             (event.origin_seq, event.event_hash, event.origin))
                heads[event.origin] = OriginHead(event.origin_seq, event.event_hash)
                self.refused_next.pop(event.origin, None)
                if event.type == "event.redact":
                    self._apply_redaction(event, may_redact, report, source)
                report.applied.append(event.to_public(local_seq))
                if on_applied is not None:
                    on_applied(event)
        return report

    def _join_history(self, origin: str, origin_seq: int, key: bytes, head: OriginHead | None,
                      heads: dict[str, OriginHead | None]) -> None:
        """Replication reached an event we hold as imported history: the head moves on over it —
        but only if the stored event itself is the next link of the chain and verifies with the
        origin's key (the arriving copy only *claims* its hash; what we keep is the stored one)."""
        if origin_seq != (head.max_seq if head else 0) + 1:
            return
        stored = self._signed_event_at(self._conn, origin, origin_seq)
        if stored.prev_hash != (head.head_hash if head else GENESIS_HASH):
            return
        try:
            verify_incoming(stored, key)
        except SignatureError:
            return
        self._conn.execute("UPDATE origins SET max_seq=?, head_hash=? WHERE origin=?",
                           (origin_seq, stored.event_hash, origin))
        heads[origin] = OriginHead(origin_seq, stored.event_hash)

    def _rule_broken(self, event: SignedEvent) -> str | None:
        """Why an authentic event from outside breaks the data model (None: it does not)."""
        try:
            check_replicated_event(event, self.limits)
            if event.type in MEMORY_TYPES:
                check_memory_event(event.type, event.body, event.metadata_json)
        except ValidationError as exc:
            return exc.message
        return None

    def _refuse(self, event: SignedEvent, reason: str, source: str | None) -> None:
        """Remember (once per origin and sequence) that this origin's next event breaks a rule, so
        nobody asks for it again until something changes (a restart, or the chain moving on)."""
        known = self.refused_next.get(event.origin)
        if known is not None and known[0] == event.origin_seq:
            return
        self.refused_next[event.origin] = (event.origin_seq, event.event_hash, reason)
        _LOGGER.warning("refused event %s (origin %s #%d, from %s): %s; that origin stops here on this replica",
                        event.id, event.origin, event.origin_seq, printable(source or "?"), printable(reason, 200))

    def _redacted_on_arrival(self, event: SignedEvent, may_redact: Callable[[SignedEvent, str], bool] | None) -> bool:
        """Whether an arriving event was already redacted here (an authorised redaction came first)."""
        conn = self._conn
        if conn.execute("SELECT 1 FROM redactions WHERE target_id=?", (event.id,)).fetchone():
            return True
        for redact_event, redact_origin, by_ca in conn.execute(
                "SELECT redact_event, redact_origin, by_ca FROM redaction_claims WHERE target_id=?",
                (event.id,)).fetchall():
            if by_ca or redact_origin == event.origin:
                conn.execute("INSERT OR IGNORE INTO redactions VALUES (?, ?)", (event.id, redact_event))
                self.redactions_pending_checkpoint = True
                return True
        return False

    def _apply_redaction(self, redaction: SignedEvent, may_redact: Callable[[SignedEvent, str], bool] | None,
                         report: ApplyReport, source: str | None) -> None:
        """An ``event.redact`` from a peer purges its target only if its author may (its own origin's
        event, or with the palace CA's signature); otherwise it stays in the log, unhonoured."""
        target_id = json.loads(redaction.metadata_json).get("redacts")
        if not isinstance(target_id, str):
            return
        authorised = may_redact if may_redact is not None else (lambda r, origin: r.origin == origin)
        row = self._conn.execute("SELECT origin FROM events WHERE id=?", (target_id,)).fetchone()
        if row is None:
            # The target has not arrived yet: keep the claim, judged when it does.
            self._conn.execute("INSERT OR IGNORE INTO redaction_claims VALUES (?, ?, ?, ?)",
                               (target_id, redaction.id, redaction.origin, int(authorised(redaction, ""))))
            return
        if authorised(redaction, row[0]):
            self._redact_locked(target_id, redaction.id)
            report.purged.append(target_id)
            return
        self.refused_redactions += 1
        report.redactions_refused.append((redaction, target_id))
        _LOGGER.warning("did not honour redaction %s of %s (from %s): written by origin %s, not by the event's own "
                        "origin %s nor signed by the palace CA", redaction.id, printable(target_id),
                        printable(source or "?"), redaction.origin, row[0])

    def _record_fork(self, event: SignedEvent, kept_hash: bytes | None, source: str | None) -> None:
        _LOGGER.error("fork: origin %s seq %d has two different events (kept %s, rejected %s from %s)",
                      event.origin, event.origin_seq, kept_hash.hex()[:16] if kept_hash else "-",
                      event.event_hash.hex()[:16], source or "?")
        self._conn.execute(
            "INSERT OR IGNORE INTO forks VALUES (?,?,?,?,?,?,?)",
            # Without the body: the signed part holds its sha256, so the evidence still proves the
            # fork, and a body kept here would outlive its redaction (a fork is never applied).
            (event.origin, event.origin_seq, kept_hash, event.event_hash,
             msgpack.packb(event_to_wire(event, with_body=False), use_bin_type=True), utc_now(), source),
        )

    def _origin_key(self, origin: str) -> bytes | None:
        row = self._conn.execute("SELECT public_key FROM origins WHERE origin=?", (origin,)).fetchone()
        return bytes(row[0]) if row else None

    @staticmethod
    def _hash_at(conn: apsw.Connection, origin: str, origin_seq: int) -> bytes | None:
        row = conn.execute("SELECT event_hash FROM events WHERE origin=? AND origin_seq=?", (origin, origin_seq)).fetchone()
        return bytes(row[0]) if row else None

    def _stored_hash(self, origin: str, origin_seq: int) -> bytes | None:
        return self._hash_at(self._conn, origin, origin_seq)

    def stored_hash(self, origin: str, origin_seq: int) -> bytes | None:
        """Our event hash at (origin, origin_seq), read on the calling thread's reader connection."""
        return self._hash_at(self._reader(), origin, origin_seq)

    def forks(self) -> list[dict[str, Any]]:
        rows = self._reader().execute(
            "SELECT origin, origin_seq, kept_hash, rejected_hash, detected_at, source FROM forks ORDER BY detected_at"
        ).fetchall()
        return [{"origin": r[0], "origin_seq": r[1], "kept_hash": bytes(r[2]).hex() if r[2] else None,
                 "rejected_hash": bytes(r[3]).hex(), "detected_at": r[4], "source": r[5]} for r in rows]

    def heads(self) -> dict[str, OriginHead]:
        """Our version vector with head hashes (what a Vector message carries)."""
        return {o: OriginHead(m, bytes(h)) for o, m, h in
                self._reader().execute("SELECT origin, max_seq, head_hash FROM origins WHERE max_seq > 0")}

    def checkpoint_after_redaction(self) -> bool:
        """Copy the WAL into the database file and truncate it, so no old page image holding
        redacted bytes survives in the WAL. Returns False (and stays pending, to be retried after
        the next batch) if a reader kept the checkpoint from completing.

        Raises:
            DiskFullError, StoreError: the checkpoint failed (it stays pending, as above).
        """
        try:
            self._conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
        except apsw.BusyError:
            _LOGGER.warning("redaction checkpoint blocked by a reader; retrying after the next write")
            return False
        except apsw.Error as exc:
            raise self._checkpoint_error(exc) from exc
        self.redactions_pending_checkpoint = False
        return True

    def truncate_wal(self) -> bool:
        """Writer thread, between batches: copy the WAL into the database file and truncate it.
        Waits at most 250 ms for readers (not the usual 10 s: the writer must not stall); False
        if a reader kept it from completing.

        Raises:
            DiskFullError, StoreError: the checkpoint failed. Nothing is lost (the WAL keeps every
                committed page and a later checkpoint copies them); the caller retries later.
        """
        self._conn.set_busy_timeout(250)
        try:
            self._conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
        except apsw.BusyError:
            return False
        except apsw.Error as exc:
            raise self._checkpoint_error(exc) from exc
        finally:
            self._conn.set_busy_timeout(10_000)
        return True

    # Helpers of write_batch and the checkpoints: errors translated for the client and the log.

    def _leave_stuck_transaction(self, *, quiet: bool = False) -> None:
        """Make sure the writer connection is outside any transaction. A failed COMMIT (e.g.
        SQLITE_FULL while writing the WAL) leaves the transaction open; a batch begun inside it
        would commit the failed batch's rows along with its own."""
        if not self._conn.in_transaction:
            return
        try:
            self._conn.execute("ROLLBACK")
        except apsw.Error as exc:
            if not quiet:
                raise self._write_error(exc) from exc
            _LOGGER.warning("could not roll back a failed write batch: %s (retried before the next batch)", exc)

    def _disk_full_error(self, what: str, exc: BaseException) -> DiskFullError:
        filename = getattr(exc, "filename", None)  # an OSError may name another file than the database
        where = filename if isinstance(filename, str) and filename else str(self.path)
        return DiskFullError(f"the disk holding {where} is full: {what}")

    def _write_error(self, exc: BaseException) -> StoreError:
        """What every job of a batch that could not be committed is told."""
        if is_disk_full(exc, self._conn):
            return self._disk_full_error(_NOTHING_WRITTEN, exc)
        return StoreError(f"could not commit to {self.path}: {exc}")

    def _checkpoint_error(self, exc: BaseException) -> StoreError:
        if is_disk_full(exc, self._conn):
            return self._disk_full_error("the WAL cannot be copied back into the database (nothing is lost); "
                                         "free some space — palaced retries by itself", exc)
        return StoreError(f"could not checkpoint the WAL of {self.path}: {exc}")

    def _job_failure(self, exc: Exception) -> ApiError:
        """The outcome of one job that raised (its savepoint already rolled back)."""
        if isinstance(exc, ApiError):  # ValidationError, NotFound, a refusal: a deliberate answer
            return exc
        if is_disk_full(exc, self._conn):
            return self._disk_full_error(_NOTHING_WRITTEN, exc)
        # A bug in one job (or a constraint it broke) must not take the others, or the writer, down.
        _LOGGER.error("write job failed", exc_info=exc)
        return ApiError(f"internal error: {type(exc).__name__}: {exc}", code="internal")

    # -- reading (any thread) -----------------------------------------------------------------

    def _get_event(self, conn: apsw.Connection, event_id: str) -> dict[str, Any] | None:
        row = conn.execute(f"SELECT {_EVENT_COLUMNS} FROM events WHERE id=?", (event_id,)).fetchone()
        return _row_to_public(row) if row else None

    def get_event(self, event_id: str) -> dict[str, Any] | None:
        return self._get_event(self._reader(), event_id)

    def resolve_seq(self, field_name: str, event_id: str) -> int:
        """Local seq of an event id used as a cursor; unknown ids raise NotFound naming the field."""
        row = self._reader().execute("SELECT seq FROM events WHERE id=?", (event_id,)).fetchone()
        if row is None:
            raise NotFound(f"{field_name} {event_id!r} not found")
        return row[0]

    def latest(self) -> tuple[int, str | None]:
        """(seq, id) of the newest event, or (0, None) on an empty log."""
        row = self._reader().execute("SELECT seq, id FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        return (row[0], row[1]) if row else (0, None)

    def list_events(self, query: ListQuery, *, after_seq: int | None = None) -> list[dict[str, Any]]:
        """Events matching ``query`` (cursors resolved through the local seq).

        ``after_seq`` overrides ``since_event_id`` (used by wait/watch, which already resolved it).
        """
        conn = self._reader()
        conds: list[str] = []
        params: list[Any] = []
        if after_seq is None and query.since_event_id:
            after_seq = self.resolve_seq("since_event_id", query.since_event_id)
        if after_seq is not None:
            conds.append("seq > ?")
            params.append(after_seq)
        if query.before_event_id:
            conds.append("seq < ?")
            params.append(self.resolve_seq("before_event_id", query.before_event_id))
        for name, column in (("streams", "stream"), ("rooms", "room"), ("topics", "topic"),
                             ("types", "type"), ("from_agents", "from_agent"),
                             ("correlation_ids", "correlation_id"), ("statuses", "status")):
            values = getattr(query, name)
            if values:
                conds.append(f"{column} IN ({','.join('?' * len(values))})")
                params.extend(sorted(values))
        if query.exclude_from_agents:
            conds.append(f"from_agent NOT IN ({','.join('?' * len(query.exclude_from_agents))})")
            params.extend(sorted(query.exclude_from_agents))
        if query.since_created_at:
            conds.append("created_at >= ?")
            params.append(query.since_created_at)
        order = "DESC" if query.order == "desc" else "ASC"
        limit = query.limit
        if query.to_agents:
            # One ordered, limited index scan per target (to_agent = X, or the broadcast '*'), merged:
            # O(limit) on any log size, where "to_agent IN (X, '*') ORDER BY seq" would sort every match.
            arms = []
            arm_params: list[Any] = []
            for target in sorted(query.to_agents | {"*"}):
                where = " AND ".join(["to_agent = ?", *conds])
                arms.append(f"SELECT seq FROM (SELECT seq FROM events WHERE {where} ORDER BY seq {order} LIMIT ?)")
                arm_params.extend([target, *params, limit])
            sql = (f"SELECT {_EVENT_COLUMNS} FROM events WHERE seq IN ({' UNION ALL '.join(arms)}) "
                   f"ORDER BY seq {order} LIMIT ?")
            rows = conn.execute(sql, [*arm_params, limit]).fetchall()
        else:
            where = f"WHERE {' AND '.join(conds)}" if conds else ""
            rows = conn.execute(
                f"SELECT {_EVENT_COLUMNS} FROM events {where} ORDER BY seq {order} LIMIT ?", [*params, limit]
            ).fetchall()
        events = [_row_to_public(r) for r in rows]
        return [preview_event(e) for e in events] if query.preview else events

    def events_after_seq(self, after_seq: int, limit: int) -> list[dict[str, Any]]:
        """Every event with seq > after_seq, oldest first (watchers catching up after a gap)."""
        rows = self._reader().execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (after_seq, limit)
        ).fetchall()
        return [_row_to_public(r) for r in rows]

    def events_by_correlation(self, correlation_id: str, limit: int = 10_000) -> list[dict[str, Any]]:
        rows = self._reader().execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE correlation_id=? OR id=? ORDER BY seq LIMIT ?",
            (correlation_id, correlation_id, limit),
        ).fetchall()
        return [_row_to_public(r) for r in rows]

    def signed_events_of_origin(self, origin: str, after_origin_seq: int, limit: int) -> list[SignedEvent]:
        """Events of one origin after ``after_origin_seq``, in chain order (what replication sends)."""
        rows = self._reader().execute(
            f"SELECT {_SIGNED_COLUMNS} FROM events WHERE origin=? AND origin_seq>? ORDER BY origin_seq LIMIT ?",
            (origin, after_origin_seq, limit),
        ).fetchall()
        return [_signed_from_row(r) for r in rows]

    @staticmethod
    def _signed_event_at(conn: apsw.Connection, origin: str, origin_seq: int) -> SignedEvent:
        row = conn.execute(f"SELECT {_SIGNED_COLUMNS} FROM events WHERE origin=? AND origin_seq=?",
                           (origin, origin_seq)).fetchone()
        return _signed_from_row(row)

    def export_page(self, after_seq: int, limit: int, streams: Sequence[str] | None = None,
                    ) -> tuple[list[tuple[int, SignedEvent]], dict[str, bytes]]:
        """Signed events after local ``seq`` (in arrival order, optionally of ``streams`` only),
        with the public keys of their origins: a page of ``palacectl export``."""
        where, args = "seq > ?", [after_seq]
        if streams:
            where += f" AND stream IN ({','.join('?' * len(streams))})"
            args += list(streams)
        conn = self._reader()
        rows = conn.execute(f"SELECT seq, {_SIGNED_COLUMNS} FROM events WHERE {where} ORDER BY seq LIMIT ?",
                            (*args, limit)).fetchall()
        events = [(r[0], _signed_from_row(r[1:])) for r in rows]
        origins = sorted({e.origin for _, e in events})
        keys = {o: bytes(k) for o, k in conn.execute(
            f"SELECT origin, public_key FROM origins WHERE origin IN ({','.join('?' * len(origins))})", origins)}
        return events, keys

    def count_events(self, after_seq: int = 0, streams: Sequence[str] | None = None) -> int:
        where, args = "seq > ?", [after_seq]
        if streams:
            where += f" AND stream IN ({','.join('?' * len(streams))})"
            args += list(streams)
        (count,) = self._reader().execute(f"SELECT count(*) FROM events WHERE {where}", args).fetchone()
        return count

    def version_vector(self) -> dict[str, int]:
        """{origin: highest contiguous origin_seq held} — the replication cursor."""
        return dict(self._reader().execute("SELECT origin, max_seq FROM origins WHERE max_seq > 0"))

    def _artifact_record(self, conn: apsw.Connection, artifact_id: str, *, with_content: bool) -> dict[str, Any] | None:
        cols = "id, kind, sha256, size_bytes, created_by, created_at, metadata" + (", content" if with_content else "")
        row = conn.execute(f"SELECT {cols} FROM artifacts WHERE id=?", (artifact_id,)).fetchone()
        if row is None:
            return None
        record = {"id": row[0], "kind": row[1], "sha256": row[2], "size_bytes": row[3],
                  "created_by": row[4], "created_at": row[5], "metadata": json.loads(row[6])}
        if with_content:
            record["content"] = bytes(row[7])
        return record

    def get_artifact(self, id_or_sha256: str, *, with_content: bool = True) -> dict[str, Any]:
        """An artifact by ``art_…`` id or by full sha256 hex.

        Raises:
            NotFound: no such artifact on this replica.
        """
        key = id_or_sha256.strip().lower() if SHA256_HEX_RE.match(id_or_sha256.strip().lower()) else id_or_sha256.strip()
        artifact_id = artifact_id_for_sha256(key) if SHA256_HEX_RE.match(key) else key
        record = None
        if ARTIFACT_ID_RE.match(artifact_id):
            record = self._artifact_record(self._reader(), artifact_id, with_content=with_content)
        if record is None or (SHA256_HEX_RE.match(key) and record["sha256"] != key):
            raise NotFound(f"artifact {id_or_sha256!r} not found")
        return record

    # -- network bookkeeping (small tables of schema 0003) -------------------------------------

    def bindings(self) -> list[tuple[str, bytes, bytes | None]]:
        """(origin, certificate PEM, proof or None) of every binding this replica accepted."""
        return [(o, bytes(c), bytes(p) if p is not None else None)
                for o, c, p in self._reader().execute("SELECT origin, certificate, proof FROM bindings")]

    def signed_events_of_type(self, event_type: str) -> list[SignedEvent]:
        """Every event of one type, in local order (revocations are read back at start-up)."""
        rows = self._reader().execute(f"SELECT {_SIGNED_COLUMNS} FROM events WHERE type=? ORDER BY seq",
                                      (event_type,)).fetchall()
        return [_signed_from_row(r) for r in rows]

    def origins_of_key(self, public_key: bytes) -> dict[str, int]:
        """{origin: max_seq held} for every origin written with ``public_key``."""
        return dict(self._reader().execute("SELECT origin, max_seq FROM origins WHERE public_key=?", (public_key,)))

    def static_peers(self) -> list[str]:
        return [a for (a,) in self._reader().execute("SELECT address FROM static_peers ORDER BY added_at, address")]

    def peer_addresses(self) -> list[tuple[str, str, str, str]]:
        """(peer_id, address, source, last_ok), most recent first."""
        return self._reader().execute(
            "SELECT peer_id, address, source, last_ok FROM peer_addresses ORDER BY last_ok DESC").fetchall()

    def invite(self, invite_id: str) -> tuple[bytes, str, int, str | None] | None:
        """(secret, role, expires_at, used_by) of an invite we issued."""
        row = self._reader().execute("SELECT secret, role, expires_at, used_by FROM invites WHERE invite_id=?",
                                     (invite_id,)).fetchone()
        return (bytes(row[0]), row[1], row[2], row[3]) if row else None

    def pending_invites(self, now_unix: int) -> int:
        (n,) = self._reader().execute("SELECT count(*) FROM invites WHERE used_by IS NULL AND expires_at >= ?",
                                      (now_unix,)).fetchone()
        return n

    # -- memory (views of schema 0004, see memory_views.py) -----------------------------------

    def memory_read(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a memory_views query on this thread's reader connection."""
        return fn(self._reader(), *args, **kwargs)

    def drawer(self, drawer_id: str) -> dict[str, Any] | None:
        row = self._reader().execute(f"SELECT {memory_views.DRAWER_COLUMNS} FROM drawers d WHERE d.id=?",
                                     (drawer_id,)).fetchone()
        return memory_views.drawer_from_row(row) if row else None

    def rebuild_memory(self, ctx: WriteContext, progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
        """Writer job: derive the memory views again from the log."""
        return self._rebuild_memory_locked(progress)

    def counts(self) -> dict[str, int]:
        conn = self._reader()
        (events,) = conn.execute("SELECT count(*) FROM events").fetchone()
        (artifacts,) = conn.execute("SELECT count(*) FROM artifacts").fetchone()
        (drawers,) = conn.execute("SELECT count(*) FROM drawers").fetchone()
        (facts,) = conn.execute("SELECT count(*) FROM kg_facts").fetchone()
        return {"events": events, "artifacts": artifacts, "drawers": drawers, "facts": facts}
