"""In-process event bus: committed events fan out to waiters and watchers without touching SQLite.

Owns: the ring of recently committed events and the wake-up of everyone waiting for new ones.
The writer publishes each committed batch once; subscribers keep their own cursor (a local seq)
and read the ring from it, so a slow subscriber never slows the writer or other subscribers. A
subscriber whose cursor has fallen out of the ring gets ``None`` (a gap) and catches up from the
store by seq (Syncthing lib/events: bounded buffers, resume by sequence). Must not import apsw.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable
from typing import Any, Final

import trio

__all__ = ["EventBus", "TypeWatch"]

# Why 10,000: about a second of peak append rate; watchers further behind than that re-read
# from SQLite, which is cheap, so a larger ring would only cost memory.
RING_SIZE: Final = 10_000


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
    """Ring of recent committed events (public dicts with ``seq``) plus a broadcast wake-up."""

    def __init__(self, latest_seq: int = 0, ring_size: int = RING_SIZE) -> None:
        # A list trimmed in bulk (amortised O(1)) rather than a deque: bisect needs O(1) indexing.
        self._ring: list[dict[str, Any]] = []
        self._ring_size = ring_size
        self.latest_seq = latest_seq
        self._changed = trio.Event()
        self.published = 0
        # Bounded: one per memory worker and the lease book (code of this daemon, never a client,
        # registers them).
        self._type_watches: list[TypeWatch] = []
        # Bounded: one per replication link (registered and removed by the link itself).
        self._on_publish: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        return f"<EventBus latest_seq={self.latest_seq} ring={len(self._ring)}>"

    def publish(self, events: list[dict[str, Any]]) -> None:
        """Called by the writer after a commit, with the batch's new events in seq order."""
        self._ring.extend(events)
        if len(self._ring) > 2 * self._ring_size:
            del self._ring[: len(self._ring) - self._ring_size]
        self.latest_seq = max(self.latest_seq, events[-1]["seq"])
        self.published += len(events)
        changed, self._changed = self._changed, trio.Event()
        changed.set()
        for callback in self._on_publish:
            callback()
        if self._type_watches:
            types = {event["type"] for event in events}
            for watch in self._type_watches:
                if not types.isdisjoint(watch.types):
                    watch.generation += 1
                    watch.event.set()

    def scrub(self, event_ids: list[str]) -> None:
        """Redacted events leave the ring body-less: a watcher replaying from the ring (subscribe
        from the beginning, a catch-up) must never see what the database no longer holds."""
        targets = set(event_ids)
        for index, event in enumerate(self._ring):
            if event["id"] in targets and not event.get("body_redacted"):
                # What a redacted event reads as from the store: no body, and the hash of the one it had.
                digest = hashlib.sha256(event.get("body", "").encode("utf-8", "surrogatepass")).hexdigest()
                scrubbed = {**event, "body": "", "body_redacted": True, "body_sha256": digest}
                scrubbed.pop("body_truncated", None)
                scrubbed.pop("body_length", None)
                self._ring[index] = scrubbed
                event["body"] = ""  # and in place too: a reference someone still holds loses it

    def watch_types(self, types: frozenset[str]) -> TypeWatch:
        """A watch that is woken only by batches holding an event of one of ``types`` (the memory
        worker: most appends are not memory, and waking it for each would cost every append)."""
        watch = TypeWatch(types)
        self._type_watches.append(watch)
        return watch

    def call_on_publish(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (synchronously, cheaply: it should only set an event) on every publish,
        until the returned function is called. For a task that waits on the bus *or* on something
        else at once (a replication link's event sender), where ``wait_beyond`` cannot."""
        self._on_publish.append(callback)
        return lambda: self._on_publish.remove(callback)

    async def wait_beyond(self, seq: int) -> None:
        """Return once an event with a seq greater than ``seq`` has been committed."""
        while self.latest_seq <= seq:
            await self._changed.wait()

    def events_after(self, seq: int, limit: int) -> list[dict[str, Any]] | None:
        """Events with seq > ``seq`` from the ring (oldest first, at most ``limit``), or ``None`` when
        the ring no longer reaches back to ``seq`` (the caller must read the store instead)."""
        if seq >= self.latest_seq:
            return []
        if not self._ring or self._ring[0]["seq"] > seq + 1:
            # The ring starts after the first wanted event (or is empty after a restart).
            return None
        start = bisect.bisect_right(self._ring, seq, key=lambda event: event["seq"])
        return self._ring[start : start + limit]
