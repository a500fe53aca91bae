"""Every read of the store: events (public or signed), artifacts, origins and the small network
tables.

Owns: the read queries. Two kinds: the functions (``*_at``, ``event_by_id``, ``artifact_record``,
...) take a connection (a job's writer connection inside a batch, or a reader's), and the methods
of ``Reads`` (which ``Store`` is) run on the calling thread's own read-only connection (``Db``):
any thread, never blocking the writer (WAL), a transaction only for the one query. The async
side (store/aio.py) runs the same methods on its reader threads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Union

import apsw

from palace_proto.envelope import SignedEvent, preview_event
from palace_proto.errors import NotFound
from palace_proto.event_fields import PublicEvent
from palace_proto.ids import ARTIFACT_ID_RE, SHA256_HEX_RE, artifact_id_for_sha256
from palace_proto.sync import OriginHead, vector_forks
from palace_proto.sync import Vector as PeerVector
from palace_proto.validation import ListQuery

from . import event_search, follow, origins
from .fetch import all_rows, one_row
from .rows import PUBLIC_COLUMNS, SIGNED_COLUMNS, row_to_public, row_to_signed

if TYPE_CHECKING:
    from .db import Db
    from .state import Vector, WriteContext

__all__ = ["Reads", "artifact_record", "correlation_events", "event_by_id", "events_of_types_after_seq",
           "events_of_types_since", "hash_at", "latest_seq_of_types", "signed_event_at"]

# The activity table plus the events after its fold position, grouped again: one statement.
_ACTIVITY_WITH_BACKLOG = (
    "SELECT from_agent, origin, sum(n), min(f), max(l) FROM ("
    "SELECT from_agent, origin, events AS n, first_at AS f, last_at AS l FROM agent_activity UNION ALL "
    "SELECT from_agent, origin, count(*), min(created_at), max(created_at) FROM events WHERE seq > "
    "coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = ?), 0) GROUP BY from_agent, origin) "
    "GROUP BY from_agent, origin")

# -- on a given connection ----------------------------------------------------------------------


#: what a read of the store runs on: a connection, or a write job's ``WriteContext`` (its transaction)
Source = Union[apsw.Connection, "WriteContext"]


def _conn(on: Source) -> apsw.Connection:
    return on if isinstance(on, apsw.Connection) else on.conn


def event_by_id(on: Source, event_id: str) -> PublicEvent | None:
    conn = _conn(on)
    row = conn.execute(f"SELECT {PUBLIC_COLUMNS} FROM events WHERE id=?", (event_id,)).fetchone()
    return row_to_public(row) if row else None

def signed_event_at(conn: apsw.Connection, origin: str, origin_seq: int) -> SignedEvent:
    """The stored event at (origin, origin_seq), which must exist."""
    row = one_row(conn.execute(f"SELECT {SIGNED_COLUMNS} FROM events WHERE origin=? AND origin_seq=?",
                               (origin, origin_seq)))
    return row_to_signed(row)

def hash_at(conn: apsw.Connection, origin: str, origin_seq: int) -> bytes | None:
    row = conn.execute("SELECT event_hash FROM events WHERE origin=? AND origin_seq=?", (origin, origin_seq)).fetchone()
    return bytes(row[0]) if row else None

def artifact_record(conn: apsw.Connection, artifact_id: str, *, with_content: bool) -> dict[str, Any] | None:
    cols = "id, kind, sha256, size_bytes, created_by, created_at, metadata" + (", content" if with_content else "")
    row = conn.execute(f"SELECT {cols} FROM artifacts WHERE id=?", (artifact_id,)).fetchone()
    if row is None:
        return None
    record = {"id": row[0], "kind": row[1], "sha256": row[2], "size_bytes": row[3],
              "created_by": row[4], "created_at": row[5], "metadata": json.loads(row[6])}
    if with_content:
        record["content"] = bytes(row[7])
    return record


def correlation_events(on: Source, correlation_id: str, limit: int = 10_000) -> list[PublicEvent]:
    """Every event on a correlation id (and the event with that id), in local order; on ``conn``
    (the writer's inside a write job: what a claim must check in the transaction that writes it)."""
    conn = _conn(on)
    rows = conn.execute(
        f"SELECT {PUBLIC_COLUMNS} FROM events WHERE correlation_id=? OR id=? ORDER BY seq LIMIT ?",
        (correlation_id, correlation_id, limit),
    ).fetchall()
    return [row_to_public(r) for r in rows]


def latest_seq_of_types(on: Source, types: Sequence[str]) -> int:
    """The seq of the newest event of one of ``types`` (0 if none): one index probe per type, so a
    writer job can tell cheaply whether anything of those types came in since it last looked."""
    conn = _conn(on)
    return max((one_row(conn.execute("SELECT max(seq) FROM events WHERE type = ?", (kind,)))[0] or 0)
               for kind in types)

def events_of_types_after_seq(on: Source, types: Sequence[str], after_seq: int,
                              limit: int) -> list[PublicEvent]:
    """Events of ``types`` committed here after ``after_seq``, oldest first, at most ``limit`` (what
    a kept lease derivation is fed); on the type index, so as cheap as what is new; on ``conn``."""
    conn = _conn(on)
    rows = conn.execute(
        f"SELECT {PUBLIC_COLUMNS} FROM events WHERE type IN ({','.join('?' * len(types))}) AND seq > ? "
        "ORDER BY seq LIMIT ?", [*types, after_seq, limit]).fetchall()
    return [row_to_public(r) for r in rows]

def events_of_types_since(conn: apsw.Connection, types: Sequence[str], since_created_at: str, stream: str | None,
                          limit: int) -> list[PublicEvent]:
    """Events of ``types`` created since ``since_created_at`` (of one stream, or all), the newest
    ``limit`` of them, oldest first (what palace_proto.leases derives leases from); on ``conn``."""
    where = f"type IN ({','.join('?' * len(types))}) AND created_at >= ?"
    params: list[Any] = [*types, since_created_at]
    if stream is not None:
        where += " AND stream = ?"
        params.append(stream)
    rows = conn.execute(
        f"SELECT {PUBLIC_COLUMNS} FROM events WHERE {where} ORDER BY seq DESC LIMIT ?", [*params, limit]
    ).fetchall()
    return [row_to_public(r) for r in reversed(rows)]


class Reads:
    """Every read of the store, each on the calling thread's own read-only connection: any thread,
    never blocking the writer (WAL), a transaction only for the one query. ``Store`` is one (and
    the async side, store/aio.py, runs these on its reader threads); what is kept in memory (our
    committed ``vector``) is read without a query."""

    def __init__(self, db: Db, public_key: bytes, vector: Vector) -> None:
        self.db = db
        #: this replica's identity key (raw): what its own origins were written with
        self.public_key = public_key
        #: our version vector, as committed (state.Vector: the writer replaces its heads whole)
        self.vector = vector

    # -- events ------------------------------------------------------------------------------------

    def get_event(self, event_id: str) -> PublicEvent | None:
        return event_by_id(self.db.reader(), event_id)

    def resolve_seq(self, field_name: str, event_id: str) -> int:
        """Local seq of an event id used as a cursor; unknown ids raise NotFound naming the field."""
        row = self.db.reader().execute("SELECT seq FROM events WHERE id=?", (event_id,)).fetchone()
        if row is None:
            raise NotFound(f"{field_name} {event_id!r} not found")
        return row[0]

    def latest(self) -> tuple[int, str | None]:
        """(seq, id) of the newest event, or (0, None) on an empty log."""
        row = self.db.reader().execute("SELECT seq, id FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        return (row[0], row[1]) if row else (0, None)

    def list_events(self, query: ListQuery, *, after_seq: int | None = None) -> list[PublicEvent]:
        """Events matching ``query`` (cursors resolved through the local seq).

        ``after_seq`` overrides ``since_event_id`` (used by wait/watch, which already resolved it).
        """
        conn = self.db.reader()
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
        if query.exclude_types:
            conds.append(f"type NOT IN ({','.join('?' * len(query.exclude_types))})")
            params.extend(sorted(query.exclude_types))
        if query.since_created_at:
            conds.append("created_at >= ?")
            params.append(query.since_created_at)
        if query.text is not None:
            return event_search.search_events(conn, query, conds, params)
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
            sql = (f"SELECT {PUBLIC_COLUMNS} FROM events WHERE seq IN ({' UNION ALL '.join(arms)}) "
                   f"ORDER BY seq {order} LIMIT ?")
            rows = conn.execute(sql, [*arm_params, limit]).fetchall()
        else:
            where = f"WHERE {' AND '.join(conds)}" if conds else ""
            rows = conn.execute(
                f"SELECT {PUBLIC_COLUMNS} FROM events {where} ORDER BY seq {order} LIMIT ?", [*params, limit]
            ).fetchall()
        events = [row_to_public(r) for r in rows]
        return [preview_event(e) for e in events] if query.preview else events

    def events_after_seq(self, after_seq: int, limit: int) -> list[PublicEvent]:
        """Every event with seq > after_seq, oldest first (watchers catching up after a gap)."""
        rows = self.db.reader().execute(
            f"SELECT {PUBLIC_COLUMNS} FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (after_seq, limit)
        ).fetchall()
        return [row_to_public(r) for r in rows]

    def events_by_correlation(self, correlation_id: str, limit: int = 10_000) -> list[PublicEvent]:
        return correlation_events(self.db.reader(), correlation_id, limit)

    def events_of_correlations(self, correlation_ids: Sequence[str]) -> dict[str, list[PublicEvent]]:
        """The events of each of ``correlation_ids`` that has any (``events_by_correlation`` each,
        in one reader's view)."""
        return {cid: self.events_by_correlation(cid) for cid in sorted(self.correlations_present(correlation_ids))}

    def correlations_present(self, correlation_ids: Sequence[str], types: Sequence[str] = (),
                             origin: str | None = None) -> set[str]:
        """Which of ``correlation_ids`` a stored event carries (of one of ``types`` and written by
        ``origin``, if given): one indexed query per 500 ids, so a question about thousands of (perhaps
        invented) task ids costs a few queries, not one each."""
        conn = self.db.reader()
        found: set[str] = set()
        ids = list(dict.fromkeys(correlation_ids))
        also = ""
        extra: list[str] = []
        if types:
            also += f" AND type IN ({','.join('?' * len(types))})"
            extra += list(types)
        if origin is not None:
            also += " AND origin = ?"
            extra.append(origin)
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            found.update(row[0] for row in conn.execute(
                f"SELECT DISTINCT correlation_id FROM events WHERE correlation_id IN ({marks}){also}",
                [*chunk, *extra]))
        return found

    def events_of_types(self, types: Sequence[str], since_created_at: str, limit: int,
                        stream: str | None = None) -> list[PublicEvent]:
        """The newest ``limit`` events of ``types`` created since ``since_created_at`` (in
        ``stream``, if given), oldest first."""
        return events_of_types_since(self.db.reader(), types, since_created_at, stream, limit)

    def signed_events_of_origin(self, origin: str, after_origin_seq: int, limit: int) -> list[SignedEvent]:
        """Events of one origin after ``after_origin_seq``, in chain order (what replication sends)."""
        rows = self.db.reader().execute(
            f"SELECT {SIGNED_COLUMNS} FROM events WHERE origin=? AND origin_seq>? ORDER BY origin_seq LIMIT ?",
            (origin, after_origin_seq, limit),
        ).fetchall()
        return [row_to_signed(r) for r in rows]

    def signed_events_of_type(self, event_type: str) -> list[SignedEvent]:
        """Every event of one type, in local order (revocations are read back at start-up)."""
        rows = self.db.reader().execute(f"SELECT {SIGNED_COLUMNS} FROM events WHERE type=? ORDER BY seq",
                                       (event_type,)).fetchall()
        return [row_to_signed(r) for r in rows]

    def stored_hash(self, origin: str, origin_seq: int) -> bytes | None:
        """Our event hash at (origin, origin_seq), read on the calling thread's reader connection."""
        return hash_at(self.db.reader(), origin, origin_seq)

    def export_page(self, after_seq: int, limit: int, streams: Sequence[str] | None = None,
                    ) -> tuple[list[tuple[int, SignedEvent]], dict[str, bytes]]:
        """Signed events after local ``seq`` (in arrival order, optionally of ``streams`` only),
        with the public keys of their origins: a page of ``palacectl export``."""
        where = "seq > ?"
        args: list[int | str] = [after_seq]
        if streams:
            where += f" AND stream IN ({','.join('?' * len(streams))})"
            args += list(streams)
        conn = self.db.reader()
        rows = all_rows(conn.execute(f"SELECT {SIGNED_COLUMNS} FROM events WHERE {where} ORDER BY seq LIMIT ?",
                                     (*args, limit)))
        events = [(r[0], row_to_signed(r)) for r in rows]
        origins = sorted({e.origin for _, e in events})
        keys = {o: bytes(k) for o, k in conn.execute(
            f"SELECT origin, public_key FROM origins WHERE origin IN ({','.join('?' * len(origins))})", origins)}
        return events, keys

    def count_events(self, after_seq: int = 0, streams: Sequence[str] | None = None) -> int:
        where = "seq > ?"
        args: list[int | str] = [after_seq]
        if streams:
            where += f" AND stream IN ({','.join('?' * len(streams))})"
            args += list(streams)
        (count,) = one_row(self.db.reader().execute(f"SELECT count(*) FROM events WHERE {where}", args))
        return count

    def counts(self) -> dict[str, int]:
        conn = self.db.reader()
        (events,) = one_row(conn.execute("SELECT count(*) FROM events"))
        (artifacts,) = one_row(conn.execute("SELECT count(*) FROM artifacts"))
        (drawers,) = one_row(conn.execute("SELECT count(*) FROM drawers"))
        (facts,) = one_row(conn.execute("SELECT count(*) FROM kg_facts"))
        return {"events": events, "artifacts": artifacts, "drawers": drawers, "facts": facts}

    def forks(self) -> list[dict[str, Any]]:
        rows = all_rows(self.db.reader().execute(
            "SELECT origin, origin_seq, kept_hash, rejected_hash, detected_at, source FROM forks ORDER BY detected_at"
        ))
        return [{"origin": r[0], "origin_seq": r[1], "kept_hash": bytes(r[2]).hex() if r[2] else None,
                 "rejected_hash": bytes(r[3]).hex(), "detected_at": r[4], "source": r[5]} for r in rows]

    # -- origins -----------------------------------------------------------------------------------

    def own_origins(self) -> list[tuple[str, bytes | None]]:
        """Every origin written with this replica's key, with the nonce it was minted with (its
        binding proof; None for a legacy origin, whose proof is a signature made on demand)."""
        return origins.own_origins(self.db.reader(), self.public_key)

    def origins_of_key(self, public_key: bytes) -> dict[str, int]:
        """{origin: max_seq held} for every origin written with ``public_key``."""
        return origins.origins_of_key(self.db.reader(), public_key)

    def version_vector(self) -> dict[str, int]:
        """{origin: highest contiguous origin_seq held} — the replication cursor (as ``heads``)."""
        return {origin: head.max_seq for origin, head in self.vector.heads.items()}

    def heads(self) -> dict[str, OriginHead]:
        """Our version vector with head hashes (what a Vector message carries), as committed: kept
        in memory by the writer (batch.py), so no read and no thread hop. Safe from any thread."""
        return dict(self.vector.heads)

    # -- artifacts ---------------------------------------------------------------------------------

    def vector_forks(self, heads: dict[str, OriginHead], remote: PeerVector) -> list[str]:
        """The origins where a peer's vector names, at a seq we hold, another hash than ours
        (``palace_proto.sync.vector_forks`` against the stored hashes)."""
        return vector_forks(heads, remote, self.stored_hash)

    def absent_artifacts(self, events: Sequence[SignedEvent]) -> list[tuple[SignedEvent, list[str]]]:
        """For each event, the artifact ids it names that this replica does not hold."""
        def held(artifact_id: str) -> bool:
            try:
                self.get_artifact(artifact_id, with_content=False)
            except NotFound:
                return False
            return True

        return [(event, [a for a in event.artifact_ids if not held(a)]) for event in events]

    def get_artifact(self, id_or_sha256: str, *, with_content: bool = True) -> dict[str, Any]:
        """An artifact by ``art_…`` id or by full sha256 hex.

        Raises:
            NotFound: no such artifact on this replica.
        """
        stripped = id_or_sha256.strip()
        key = stripped.lower() if SHA256_HEX_RE.match(stripped.lower()) else stripped
        artifact_id = artifact_id_for_sha256(key) if SHA256_HEX_RE.match(key) else key
        record = None
        if ARTIFACT_ID_RE.match(artifact_id):
            record = artifact_record(self.db.reader(), artifact_id, with_content=with_content)
        if record is None or (SHA256_HEX_RE.match(key) and record["sha256"] != key):
            raise NotFound(f"artifact {id_or_sha256!r} not found")
        return record

    # -- network bookkeeping (small tables of schema 0003) -----------------------------------------

    def bindings(self) -> list[tuple[str, bytes, bytes | None]]:
        """(origin, certificate PEM, proof or None) of every binding this replica accepted."""
        return [(o, bytes(c), bytes(p) if p is not None else None)
                for o, c, p in self.db.reader().execute("SELECT origin, certificate, proof FROM bindings")]

    def static_peers(self) -> list[str]:
        return [a for (a,) in self.db.reader().execute("SELECT address FROM static_peers ORDER BY added_at, address")]

    def peer_addresses(self) -> list[tuple[str, str, str, str]]:
        """(peer_id, address, source, last_ok), most recent first."""
        return all_rows(self.db.reader().execute(
            "SELECT peer_id, address, source, last_ok FROM peer_addresses ORDER BY last_ok DESC"))

    def invite(self, invite_id: str) -> tuple[bytes, str, int, str | None] | None:
        """(secret, role, expires_at, used_by) of an invite we issued."""
        row = self.db.reader().execute("SELECT secret, role, expires_at, used_by FROM invites WHERE invite_id=?",
                                      (invite_id,)).fetchone()
        return (bytes(row[0]), row[1], row[2], row[3]) if row else None

    def pending_invites(self, now_unix: int) -> int:
        (n,) = one_row(self.db.reader().execute("SELECT count(*) FROM invites WHERE used_by IS NULL AND expires_at >= ?",
                                               (now_unix,)))
        return n

    # -- agents ------------------------------------------------------------------------------------

    def agent_activity(self) -> list[tuple[str, str, int, str, str]]:
        """Who wrote what: (from_agent, origin, events, first created_at, last created_at) for every
        agent and origin that wrote as it (the roster's and the impersonation counts' source), as the
        ``agent_activity`` table keeps it (schema 0008: one row per pair, never a scan of the log),
        with the events not folded into it yet (schema 0011: a few, the log follower's backlog)
        added, in one statement: one snapshot, whatever a fold commits meanwhile."""
        return all_rows(self.db.reader().execute(_ACTIVITY_WITH_BACKLOG, (follow.ACTIVITY_SEQ_KEY,)))

    def events_written_as(self, agent: str, origins: Sequence[str], limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` of the events written as ``agent`` by ``origins`` (the oldest first), as
        the verdict needs them: id, origin, from_agent, created_at."""
        if not origins:
            return []
        marks = ",".join("?" * len(origins))
        rows = self.db.reader().execute(
            f"SELECT id, origin, from_agent, created_at FROM events WHERE from_agent=? AND origin IN ({marks}) "
            f"ORDER BY seq LIMIT ?", (agent, *origins, limit)).fetchall()
        return [{"id": r[0], "origin": r[1], "from_agent": r[2], "created_at": r[3]} for r in rows]
