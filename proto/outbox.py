"""What one replication link owes its peer besides events: the small messages, coalesced.

Owns: ``LinkOutbox``, the state the link machine (``link.py``) drains for the link's sender —
receipts (``Have``), pulls (``Want``), artifact requests (``ArtifactWant``), the sender's
``Neighbours``, where the peer's connection came from (``Seen``), the partial views' and the
broadcast tree's messages (bounded, in order) and whether a ``Vector`` is due. Pure: no IO, no clock.

Why it exists (proto/PROTOCOL.md §5.4, "reading never waits on writing"): a link that answered
what it read *while reading* — a receipt after each batch, a want after each vector — stops
reading as soon as its own socket is full; when both ends do that at once (two daemons each
hundreds of events behind the other), neither reads again and the link is dead for good. So the
reader and the applier never write: they record here what is owed and go on reading, and the one
sender sends it. Recording never blocks and never grows without bound, because everything is kept as
*state*, not as a queue of messages: the newest receipt and the newest pull per origin (a newer one
replaces an older one: the peer needs only the latest), one entry per artifact, one neighbour set,
one "vector due" flag. What a link records is bounded by the origins it can verify (its member
directory) and by the artifacts it may have in flight (``sync_plan.MAX_FETCHES``), never by
what the peer sends.
"""

from __future__ import annotations

import collections
from typing import Final

from .broadcast import BroadcastMessage
from .overlay import OverlayMessage
from .peer import MAX_VECTOR_ENTRIES, ArtifactWant, Have, Neighbours, PeerMessage, Seen, Want

__all__ = ["LinkOutbox"]

#: receipts travel in messages of at most this many entries (the codec's bound on a ``have``)
HAVE_ENTRIES_PER_MESSAGE: Final = MAX_VECTOR_ENTRIES
# Why 256: the partial views' and the broadcast tree's messages waiting for one link's sender. The
# tree coalesces its announcements (256 keys a message) and the views send a handful per change, so
# a link that falls this far behind is stuck; the oldest go (the vectors repair what they carried).
CONTROL_QUEUE_MAX: Final = 256


class LinkOutbox:
    """Coalesced control messages for one link, taken in one go by its sender.

    ``take`` returns what may go at once, in the order the peer is best served by: the neighbour
    set (it changes what the peer relays to us), pulls, artifact requests. Receipts and a vector
    due wait for a sync of our WAL (each names only what is on disk here): ``take_after_sync``
    takes them just before that sync starts, so what is recorded while it runs waits for the next.
    """

    def __init__(self) -> None:
        self._vector_due = False
        self._haves: dict[str, int] = {}
        self._wants: dict[str, int] = {}
        self._artifact_wants: dict[str, int] = {}
        self._neighbours: tuple[str, ...] | None = None
        self._seen: str | None = None
        self._control: collections.deque[OverlayMessage | BroadcastMessage] = collections.deque(maxlen=CONTROL_QUEUE_MAX)

    def __repr__(self) -> str:
        return (f"<LinkOutbox vector={self._vector_due} haves={len(self._haves)} wants={len(self._wants)} "
                f"artifacts={len(self._artifact_wants)} neighbours={self._neighbours is not None}>")

    def __bool__(self) -> bool:
        return bool(self._vector_due or self._haves or self._wants or self._artifact_wants
                    or self._neighbours is not None or self._seen is not None or self._control)

    @property
    def vector_due(self) -> bool:
        return self._vector_due

    @property
    def awaits_sync(self) -> bool:
        """Receipts or a vector wait for a sync of the WAL."""
        return bool(self._vector_due or self._haves)

    def vector(self) -> None:
        """Our vector is due (anti-entropy, or the peer may now lack what others no longer relay)."""
        self._vector_due = True

    def have(self, origin: str, max_seq: int) -> None:
        """A receipt: we hold ``origin`` up to ``max_seq`` (only ever raised: holdings never shrink)."""
        if max_seq > self._haves.get(origin, -1):
            self._haves[origin] = max_seq

    def want(self, origin: str, after_seq: int) -> None:
        """A pull of ``origin`` after ``after_seq``; the newest pull of an origin replaces an older one
        still waiting (it was asked from a fresher head)."""
        self._wants[origin] = after_seq

    def artifact_want(self, artifact_id: str, offset: int) -> None:
        self._artifact_wants[artifact_id] = offset

    def neighbours(self, peer_ids: tuple[str, ...]) -> None:
        """Our current neighbour set (replaces one not yet sent)."""
        self._neighbours = peer_ids

    def seen(self, host: str) -> None:
        """Where the peer's connection came from, to tell it once (``Seen``)."""
        self._seen = host

    def control(self, message: OverlayMessage | BroadcastMessage) -> None:
        """A partial-view or broadcast-tree message, kept in order (the oldest dropped past the bound)."""
        self._control.append(message)

    def take(self) -> list[PeerMessage]:
        """What may go at once, emptied: neighbours, the views' and the tree's messages, pulls,
        artifact requests, in that order."""
        messages: list[PeerMessage] = []
        if self._seen is not None:
            messages.append(Seen(self._seen))
        if self._neighbours is not None:
            messages.append(Neighbours(self._neighbours))
        messages.extend(self._control)
        self._control.clear()
        messages.extend(Want(origin, after) for origin, after in sorted(self._wants.items()))
        messages.extend(ArtifactWant(artifact, offset) for artifact, offset in sorted(self._artifact_wants.items()))
        self._wants, self._artifact_wants, self._neighbours, self._seen = {}, {}, None, None
        return messages

    def take_after_sync(self) -> tuple[bool, list[Have]]:
        """What waits for a sync, emptied: (whether a vector is due, the receipts in origin order)."""
        haves = sorted(self._haves.items())
        receipts = [Have(tuple(haves[start:start + HAVE_ENTRIES_PER_MESSAGE]))
                    for start in range(0, len(haves), HAVE_ENTRIES_PER_MESSAGE)]
        vector_due, self._vector_due, self._haves = self._vector_due, False, {}
        return vector_due, receipts
