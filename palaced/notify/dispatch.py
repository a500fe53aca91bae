"""The notifier's sans-IO core: what to send to whom, when, and what to try again.

Owns: ``Dispatcher`` — things offered for a person wait in that person's queue; the first one
opens a *group window* (``group_window_s``), and when it closes everything waiting goes out as one
message, unless the person already had ``rate_per_minute`` messages in the last minute: then it
waits for the next slot and grows (so a burst becomes one message, never a flood, and nothing is
lost to the rate limit). A message becomes one ``Delivery`` per channel of the person; a failed
delivery is tried again after a back-off (``BACKOFF_S``), at most ``attempts`` times, and only on
the channel that failed.

Bounds (every queue here is fed from outside): things waiting, all people together, at most
``max_pending`` — the oldest is dropped and counted, and its person's next message says how many
were; deliveries waiting for a retry at most ``MAX_RETRYING`` (the oldest is given up); the keys
already offered (one thing is offered once per person) at most ``MAX_SEEN``.

``withdraw(key)``: a thing redacted before it went out is taken out of every queue and retry.

Surface (aioquic-style): ``offer(person, thing, now)``, ``withdraw(key)``, ``take_due(now)``,
``delivered(d, now)``, ``failed(d, now)``, ``get_timer()``. It never reads a clock, never sleeps.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from .triggers import Thing

__all__ = ["BACKOFF_S", "Delivery", "Dispatcher"]

# Why these: the first retry soon (a receiver restarting, a blip), then longer, so a service down
# for an hour is not hammered; five tries span about twelve minutes.
BACKOFF_S: Final = (1.0, 10.0, 60.0, 600.0)
# Why 256: deliveries failing at once (people × channels × messages in back-off); beyond that a
# channel is down for good, and the oldest are given up rather than kept without bound.
MAX_RETRYING: Final = 256
# Why 10,000: the (person, key) pairs remembered so one thing seen twice (a stall noticed again,
# a fork polled again) is told once; older pairs are forgotten first.
MAX_SEEN: Final = 10_000
# Why 60 s: the rate limit counts messages per minute.
RATE_WINDOW_S: Final = 60.0


@dataclasses.dataclass(slots=True, eq=False)
class Delivery:
    """One message to one person through one channel."""

    person: str
    channel: str
    things: tuple[Thing, ...]
    #: things of this person dropped (the bound) since their last message
    dropped: int = 0
    #: attempts made so far
    attempt: int = 0
    not_before: float = 0.0

    def __repr__(self) -> str:
        return f"<Delivery {self.person} via {self.channel} things={len(self.things)} attempt={self.attempt}>"


class Dispatcher:
    """See the module docstring. ``channels``: each person's channel names."""

    def __init__(self, channels: Mapping[str, Sequence[str]], *, rate_per_minute: int = 4,
                 group_window_s: float = 10.0, max_pending: int = 500, attempts: int = 5,
                 backoff: Sequence[float] = BACKOFF_S) -> None:
        self._channels = {person: tuple(names) for person, names in channels.items()}
        self.rate_per_minute = rate_per_minute
        self.group_window_s = group_window_s
        self.max_pending = max_pending
        self.attempts = attempts
        self._backoff = tuple(backoff)
        #: person -> [(when offered, thing)], oldest first
        self._pending: dict[str, list[tuple[float, Thing]]] = {}
        self._pending_count = 0
        self._dropped_for: dict[str, int] = {}
        self._sent_at: dict[str, collections.deque[float]] = {}
        self._retrying: list[Delivery] = []
        self._seen: dict[tuple[str, str], None] = {}
        self.offered = self.sent = self.failed_count = self.retried = self.dropped = self.withdrawn = 0

    def __repr__(self) -> str:
        return (f"<Dispatcher people={len(self._channels)} pending={self._pending_count} "
                f"retrying={len(self._retrying)} sent={self.sent} failed={self.failed_count}>")

    # -- input ---------------------------------------------------------------------------------

    def offer(self, person: str, thing: Thing, now: float) -> bool:
        """Queue ``thing`` for ``person``; False if it was offered before (or nobody to send to)."""
        if person not in self._channels or (person, thing.key) in self._seen:
            return False
        self._seen[(person, thing.key)] = None
        if len(self._seen) > MAX_SEEN:
            del self._seen[next(iter(self._seen))]
        if self._pending_count >= self.max_pending:
            self._drop_oldest()
        self._pending.setdefault(person, []).append((now, thing))
        self._pending_count += 1
        self.offered += 1
        return True

    def _drop_oldest(self) -> None:
        person = min((p for p, items in self._pending.items() if items), key=lambda p: self._pending[p][0][0])
        self._pending[person].pop(0)
        self._pending_count -= 1
        self.dropped += 1
        self._dropped_for[person] = self._dropped_for.get(person, 0) + 1

    def withdraw(self, key: str) -> int:
        """Take the thing ``key`` out of every queue and every retry (it was redacted); how many."""
        removed = 0
        for items in self._pending.values():
            kept = [(at, thing) for at, thing in items if thing.key != key]
            removed += len(items) - len(kept)
            items[:] = kept
        self._pending_count -= removed
        retrying = []
        for delivery in self._retrying:
            things = tuple(thing for thing in delivery.things if thing.key != key)
            removed += len(delivery.things) - len(things)
            if things:
                delivery.things = things
                retrying.append(delivery)
        self._retrying = retrying
        self.withdrawn += removed
        return removed

    # -- output --------------------------------------------------------------------------------

    def _recent(self, person: str, now: float) -> collections.deque[float]:
        sent = self._sent_at.setdefault(person, collections.deque())
        while sent and sent[0] <= now - RATE_WINDOW_S:
            sent.popleft()
        return sent

    def take_due(self, now: float) -> list[Delivery]:
        """The deliveries to make now: closed group windows within the rate, and retries due."""
        out: list[Delivery] = []
        for person, items in self._pending.items():
            if not items or now < items[0][0] + self.group_window_s:
                continue
            sent = self._recent(person, now)
            if len(sent) >= self.rate_per_minute:
                continue
            sent.append(now)
            things = tuple(thing for _, thing in items)
            self._pending_count -= len(items)
            items.clear()
            dropped = self._dropped_for.pop(person, 0)
            out.extend(Delivery(person, channel, things, dropped) for channel in self._channels[person])
        due = [d for d in self._retrying if d.not_before <= now]
        if due:
            self._retrying = [d for d in self._retrying if d.not_before > now]
            out.extend(due)
        return out

    def delivered(self, delivery: Delivery, now: float) -> None:
        delivery.attempt += 1
        self.sent += 1

    def failed(self, delivery: Delivery, now: float) -> float | None:
        """A delivery failed: the back-off before it is tried again, or None when it is given up."""
        delivery.attempt += 1
        if delivery.attempt >= self.attempts:
            self.failed_count += 1
            return None
        delay = self._backoff[min(delivery.attempt - 1, len(self._backoff) - 1)]
        delivery.not_before = now + delay
        if len(self._retrying) >= MAX_RETRYING:
            self._retrying.pop(0)
            self.failed_count += 1
        self._retrying.append(delivery)
        self.retried += 1
        return delay

    def get_timer(self) -> float | None:
        """When ``take_due`` will next have something (None: nothing waits)."""
        times = []
        for person, items in self._pending.items():
            if not items:
                continue
            at = items[0][0] + self.group_window_s
            sent = self._sent_at.get(person)
            if sent and len(sent) >= self.rate_per_minute:
                at = max(at, sent[len(sent) - self.rate_per_minute] + RATE_WINDOW_S)
            times.append(at)
        times.extend(d.not_before for d in self._retrying)
        return min(times) if times else None

    def statistics(self) -> dict[str, Any]:
        return {"offered": self.offered, "sent": self.sent, "failed": self.failed_count, "retried": self.retried,
                "dropped": self.dropped, "withdrawn": self.withdrawn, "pending": self._pending_count,
                "retrying": len(self._retrying)}
