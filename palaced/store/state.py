"""The state a write job and the store's modules share: the bottom of the store.

Owns: ``WriteContext`` (what a write job is handed: the writer connection, our chain, the running
batch, the agent registry, the committed vector, the WAL's state, the limits, what was refused
from peers and the features' parts of the store: state only; what a job does with it is the
functions of writes.py, apply.py, imports.py, queries.py... each taking it first), ``Batch`` (what
a running batch accumulates, with the ``mark``/``rewind`` a failed job goes back with), ``Vector``
(our version vector as committed) and ``Refusals`` (what was refused from peers). It imports no
other module of the store at run time, so every one of them may import it. Writer thread only,
except ``Vector`` and ``Refusals``, which any thread reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import apsw

from palace_proto.envelope import CommittedEvent, SignedEvent
from palace_proto.sync import OriginHead
from palace_proto.validation import Limits

if TYPE_CHECKING:
    from .chain import Chain
    from .db import Db
    from .identity import AgentRegistry
    from .parts import StoreParts
    from .wal import Wal

__all__ = ["Batch", "Refusals", "Vector", "WriteContext"]


class Batch:
    """What one try of a write batch accumulated, and our chain as it grew: all of it is the
    batch's until the commit, and dropped with it if the commit fails. A job that fails goes
    back to its ``mark`` (``rewind``)."""

    __slots__ = ("chain", "events", "heads", "purged", "registry", "touched")

    def __init__(self, chain: Chain) -> None:
        self.chain = chain
        #: the records of the events stored, in order (the bus gets them once committed)
        self.events: list[CommittedEvent] = []
        #: ids of events whose bodies were purged
        self.purged: list[str] = []
        #: the registry events stored (agents.py counts them at once, and for good at the commit)
        self.registry: list[SignedEvent] = []
        #: the heads moved, in order (the committed ``Vector`` takes them at the commit)
        self.heads: list[tuple[str, OriginHead]] = []
        #: what each store part noted for settling before the commit, by the part's name (parts.py:
        #: the tasks whose usage reports may count differently now...); not rewound: settling is
        #: idempotent
        self.touched: dict[str, set[str]] = {}

    def __repr__(self) -> str:
        return f"<Batch events={len(self.events)} purged={len(self.purged)} chain={self.chain.seq}>"

    def mark(self) -> tuple[int, bytes, int, int, int, int]:
        """Where the batch and our chain stand (before a job runs)."""
        chain = self.chain
        return (chain.seq, chain.head_hash, len(self.events), len(self.purged), len(self.registry),
                len(self.heads))

    def rewind(self, mark: tuple[int, bytes, int, int, int, int]) -> None:
        """Drop everything added since ``mark`` (the job's savepoint was rolled back)."""
        self.chain.seq, self.chain.head_hash = mark[0], mark[1]
        del self.events[mark[2]:]
        del self.purged[mark[3]:]
        del self.registry[mark[4]:]
        del self.heads[mark[5]:]


class WriteContext:
    """What a write job is handed (``job(ctx)``, inside the batch transaction), and the state the
    store's write modules share: the writer connection (``conn``), our ``chain``, the running
    ``batch``, the agent registry, the committed ``vector``, the ``wal``'s pending purge, what was
    refused from peers (``refusals``) and the features' ``parts`` of the store. One per store;
    writer thread only. A job writes through the store's functions (``writes.append_event(ctx,
    req)``, ``apply.apply_remote(ctx, ...)``...), never through this object's attributes alone.
    """

    def __init__(self, db: Db, chain: Chain, agents: AgentRegistry, vector: Vector, wal: Wal, limits: Limits,
                 refusals: Refusals, parts: StoreParts) -> None:
        self.path = db.path
        self.conn: apsw.Connection = db.writer
        self.chain = chain
        self.agents = agents
        self.vector = vector
        self.wal = wal
        self.limits = limits
        self.refusals = refusals
        #: what the features keep in the store beside the log, moved in each write (parts.py)
        self.parts = parts
        #: the batch being written (a new one for each try of ``write_batch``)
        self.batch = Batch(chain)
        #: whether commits wait for their fsync now (``synchronous=FULL``, as schema.connect sets it)
        self.durable_commits = True

    def __repr__(self) -> str:
        return f"<WriteContext {self.path} {self.batch!r}>"


class Vector:
    """Our version vector with head hashes, as committed: origin -> its head (max_seq > 0).

    Kept in memory so replication never reads back what it just wrote (issue 27): the writer
    (batch.py) moves it after each commit by replacing ``heads`` whole with the heads the batch
    moved merged in, so any thread may read it without a lock or a thread hop.
    """

    __slots__ = ("heads",)

    def __init__(self, heads: dict[str, OriginHead]) -> None:
        self.heads = heads

    def __repr__(self) -> str:
        return f"<Vector origins={len(self.heads)}>"


class Refusals:
    """What this replica refused from peers since it started (the writer thread writes; any thread
    reads: ``next`` is only ever changed one key at a time)."""

    __slots__ = ("next", "redactions")

    def __init__(self) -> None:
        #: origin -> (origin_seq, event_hash, reason) of its next event, authentic but refused for
        #: breaking a rule: replication does not ask for that origin again
        self.next: dict[str, tuple[int, bytes, str]] = {}
        #: peer redactions not honoured (their author was neither the origin nor the CA)
        self.redactions = 0

    def __repr__(self) -> str:
        return f"<Refusals origins={len(self.next)} redactions={self.redactions}>"
