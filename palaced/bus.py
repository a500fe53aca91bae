"""In-process event bus: committed events fan out to waiters and watchers without touching SQLite.

Owns: the ring of recently committed events and the wake-up of everyone waiting for new ones.
The writer publishes each committed batch once, as ``CommittedEvent`` records: the one copy of a
new event in memory (issue 27), which local watchers read as public dicts and replication pushes as
signed events (looked up by origin and chain position, without reading the database back).
Subscribers keep their own cursor (a local seq) and read the ring from it, so a slow subscriber
never slows the writer or other subscribers. A subscriber whose cursor has fallen out of the ring
gets ``None`` (a gap) and catches up from the store by seq (Syncthing lib/events: bounded buffers,
resume by sequence). The ring is bounded by count and by bytes (issue 43: by count alone, a
member's 256 KiB events held a replica at gigabytes). A redaction purges the one record. Must not
import apsw.

Who is woken first: ``publish`` says whether it woke someone who pushes the events on (a watcher, a
``wait``, a replication link), and the writer lets those run before it answers the writers
(writer.py). Background work (the log follower, the memory workers) waits in its own lane
(``wait_beyond(..., background=True)``, ``watch_types``), which never delays an answer.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Final

import trio

from palace_proto.envelope import CommittedEvent, SignedEvent
from palace_proto.event_fields import PublicEvent

__all__ = ["EventBus", "TypeWatch", "record_bytes"]

# Why 10,000: about a second of peak append rate; watchers (and links pushing to a peer) further
# behind than that re-read from SQLite, which is cheap, so a larger ring would only cost memory.
RING_SIZE: Final = 10_000
# Why 64 MiB: the ring is a cache in front of SQLite, and it must not decide the daemon's size. By
# count alone it held 10,000-20,000 events whatever their size: a member's 256 KiB events took a
# replica from 53 MB to 1.09 GB at 4,000 of them (about 5 GB at the bound; issue 43). Trimmed back
# to half, 64 MiB still holds the 10,000 ordinary events the count keeps (a few KiB each as
# ``record_bytes`` counts them) and over a hundred of the largest (256 KiB): the second or so a
# watcher or a link may lag before it reads SQLite instead, which is cheap.
RING_BYTES: Final = 64 << 20
# Why 2 KiB: what a record costs in memory besides its body and metadata, rounded up from a
# measurement (~1.2 KiB: the record, its signed fields, hashes and signature, the public view's
# dict once built, and its entry in the push index).
RECORD_OVERHEAD_BYTES: Final = 2048
# Why 10: metadata is held as its canonical text and, once a watcher reads the event, parsed in the
# public view: a dense JSON object took about 9 times its text (measured), small ones far less.
METADATA_EXPANSION: Final = 10
_SEQ: Final = attrgetter("seq")


def record_bytes(record: CommittedEvent) -> int:
    """Roughly what ``record`` holds in memory, cheaply (no walk of its fields): the body as Python
    holds it (``sys.getsizeof`` of a str is exact and O(1)), its metadata, a fixed overhead."""
    signed = record.signed
    return (RECORD_OVERHEAD_BYTES + sys.getsizeof(signed.body or "")
            + METADATA_EXPANSION * len(signed.metadata_json))


class TypeWatch:
    """Woken by committed batches holding an event of one of ``types`` (``EventBus.watch_types``)."""

    def __init__(self, types: frozenset[str]) -> None:
        self.types = types
        self.event = trio.Event()
        #: how many such batches have been committed (a cache of what they change can key on it)
        self.generation = 0

    async def wait(self) -> None:
        """Return once such a batch has been committed since the last return (or since creation)."""
        await self.event.wait()
        self.event = trio.Event()


class EventBus:
    """Ring of recent committed events (``CommittedEvent``, in seq order) plus a broadcast wake-up."""

    def __init__(self, latest_seq: int = 0, ring_size: int = RING_SIZE, ring_bytes: int = RING_BYTES) -> None:
        # A list trimmed in bulk (amortised O(1)) rather than a deque: bisect needs O(1) indexing.
        self._ring: list[CommittedEvent] = []
        self._ring_size = ring_size
        #: ``record_bytes`` of each record of the ring, in step with it (a redaction leaves a
        #: record's count as it was: its freed body is counted until the record leaves)
        self._sizes: list[int] = []
        #: their sum, held under ``ring_bytes``
        self.ring_bytes = 0
        self._max_bytes = ring_bytes
        #: (origin, origin_seq) -> the ring's record of it (replicated events only: imported history
        #: is never offered to peers), for the push to peers
        self._by_position: dict[tuple[str, int], CommittedEvent] = {}
        self.latest_seq = latest_seq
        self._changed = trio.Event()
        #: the background lane's wake-up (see the module docstring)
        self._changed_background = trio.Event()
        self.published = 0
        # Bounded: one per memory worker and the lease book (code of this daemon, never a client,
        # registers them).
        self._type_watches: list[TypeWatch] = []
        # Bounded: one per replication link (registered and removed by the link itself).
        self._on_publish: list[Callable[[list[CommittedEvent]], bool]] = []

    def __repr__(self) -> str:
        return f"<EventBus latest_seq={self.latest_seq} ring={len(self._ring)} ring_bytes={self.ring_bytes}>"

    def publish(self, records: list[CommittedEvent]) -> bool:
        """Called by the writer after a commit, with the batch's new events in seq order. Returns
        whether a watcher, a waiter or a replication link was woken (see the module docstring)."""
        ring, by_position, sizes = self._ring, self._by_position, self._sizes
        ring.extend(records)
        for record in records:
            if not record.history:
                by_position[(record.signed.origin, record.signed.origin_seq)] = record
            size = record_bytes(record)
            sizes.append(size)
            self.ring_bytes += size
        if len(ring) > 2 * self._ring_size or self.ring_bytes > self._max_bytes:
            self._trim()
        self.latest_seq = max(self.latest_seq, records[-1].seq)
        self.published += len(records)
        changed, self._changed = self._changed, trio.Event()
        woke = changed.statistics().tasks_waiting > 0
        changed.set()
        background, self._changed_background = self._changed_background, trio.Event()
        background.set()
        for callback in self._on_publish:
            if callback(records):
                woke = True
        if self._type_watches:
            types = {record.signed.type for record in records}
            for watch in self._type_watches:
                if not types.isdisjoint(watch.types):
                    watch.generation += 1
                    watch.event.set()
        return woke

    def _trim(self) -> None:
        """Drop the oldest records: by count back to ``ring_size`` once it holds twice that, by bytes
        back to half of ``ring_bytes`` once it holds more (both amortised: a trim moves the list
        once per many publishes, not at each)."""
        ring, sizes = self._ring, self._sizes
        cut = len(ring) - self._ring_size if len(ring) > 2 * self._ring_size else 0
        kept = self.ring_bytes - sum(sizes[:cut])
        if kept > self._max_bytes:
            while kept > self._max_bytes // 2:
                kept -= sizes[cut]
                cut += 1
        by_position = self._by_position
        for record in ring[:cut]:
            if not record.history:
                by_position.pop((record.signed.origin, record.signed.origin_seq), None)
        del ring[:cut]
        del sizes[:cut]
        self.ring_bytes = kept

    def scrub(self, event_ids: Iterable[str]) -> None:
        """Redacted events lose their body in the ring (and wherever their record is held): a
        watcher replaying from the ring (subscribe from the beginning, a catch-up) and a push to a
        peer must never carry what the database no longer holds."""
        targets = set(event_ids)
        for record in self._ring:
            if record.signed.body is not None and record.signed.id in targets:
                record.redact()

    def watch_types(self, types: frozenset[str]) -> TypeWatch:
        """A watch that is woken only by batches holding an event of one of ``types`` (the memory
        worker: most appends are not memory, and waking it for each would cost every append)."""
        watch = TypeWatch(types)
        self._type_watches.append(watch)
        return watch

    def call_on_publish(self, callback: Callable[[list[CommittedEvent]], bool]) -> Callable[[], None]:
        """Call ``callback(records)`` (synchronously, cheaply: it should at most set an event) on
        every publish, until the returned function is called; it returns whether it woke a task
        that pushes the records on. For a task that waits on the bus *or* on something else at
        once (a replication link's event sender), where ``wait_beyond`` cannot."""
        self._on_publish.append(callback)
        return lambda: self._on_publish.remove(callback)

    async def wait_beyond(self, seq: int, *, background: bool = False) -> None:
        """Return once an event with a seq greater than ``seq`` has been committed. ``background``:
        the caller does not push what it finds to anyone waiting (see the module docstring)."""
        while self.latest_seq <= seq:
            await (self._changed_background if background else self._changed).wait()

    def records_after(self, seq: int, limit: int) -> list[CommittedEvent] | None:
        """Records with seq > ``seq`` from the ring (oldest first, at most ``limit``), or ``None`` when
        the ring no longer reaches back to ``seq`` (the caller must read the store instead)."""
        if seq >= self.latest_seq:
            return []
        ring = self._ring
        if not ring or ring[0].seq > seq + 1:
            # The ring starts after the first wanted event (or is empty after a restart).
            return None
        start = bisect.bisect_right(ring, seq, key=_SEQ)
        return ring[start : start + limit]

    def events_after(self, seq: int, limit: int) -> list[PublicEvent] | None:
        """``records_after`` as public event objects (what clients are sent)."""
        records = self.records_after(seq, limit)
        return None if records is None else [record.public for record in records]

    def signed_after(self, origin: str, after_origin_seq: int, limit: int) -> list[SignedEvent] | None:
        """The events of ``origin`` after ``after_origin_seq`` (at most ``limit``, in chain order) as
        signed, from the ring; None when the next one is not in it (then the store reads them)."""
        by_position = self._by_position
        events = []
        for origin_seq in range(after_origin_seq + 1, after_origin_seq + 1 + limit):
            record = by_position.get((origin, origin_seq))
            if record is None:
                break
            events.append(record.signed)
        return events if events else None
