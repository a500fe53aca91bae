"""The notifier: a trio task that follows the committed log and tells people what needs them.

Owns: ``Notifier`` — it reads new events from the bus in the background lane
(``wait_beyond(..., background=True)``: an append never waits for it), turns each into a thing
(``triggers``) for each person *held by this daemon* who wants it (the one-per-palace rule: see
``triggers``), polls the store's forks table, and drives the ``Dispatcher`` (grouping, rate
limit, retries, bounds); each delivery runs as its own task, blocking IO on a worker thread with a
timeout (``channels``). Also ``probe`` (``palacectl notify test``) and ``statistics`` (status).

It starts at the log's tip: what was committed before the daemon started is not news (nor is an
event older than ``MAX_AGE_S`` that arrives late, e.g. in a catch-up after a long partition).
What waits when the daemon stops is not sent.

Error handling: a channel's failure is counted, logged and retried (``dispatch``); anything else a
delivery raises is logged with its traceback and counted as a failure of that delivery — the
notifier never stops the daemon. A store read that fails (a full disk, shutting down) is retried
after the next commit.

Must not import: ``palaced.api``, ``palaced.app``.
"""

from __future__ import annotations

import logging
import math
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import trio

from palace_proto.errors import ApiError, ValidationError
from palace_proto.event_fields import PublicEvent
from palace_proto.stamps import seconds_between

from ..clock import unix_now, utc_now
from .channels import DeliveryError, deliver
from .dispatch import Delivery, Dispatcher
from .payloads import probe_message, render
from .settings import NotifySettings
from .triggers import Thing, fork_thing, thing_for, wants

if TYPE_CHECKING:
    from ..handlers.context import Context

__all__ = ["Notifier"]

LOGGER: Final = logging.getLogger("palaced.notify")
# Why 500: the page read from the bus (or the store, when the ring has moved on) per wake.
PAGE: Final = 500
# Why 1 day: an event older than this reaching us now (a catch-up, an import) is history, not news.
MAX_AGE_S: Final = 86400
# Why 15 s: forks are rows of a table, not events; a fork is rare and not urgent to the second.
FORK_POLL_S: Final = 15.0
# Why 10,000: the forks remembered as already told (a hostile member could make many).
MAX_FORKS_KEPT: Final = 10_000
# Why 4: deliveries on worker threads at once (a slow mail server must not take every thread).
MAX_SENDING: Final = 4
_REDACT: Final = "event.redact"


class Notifier:
    """See the module docstring. Run ``run`` in the daemon's nursery."""

    def __init__(self, ctx: Context, settings: NotifySettings) -> None:
        self.ctx = ctx
        self.settings = settings
        self.core = Dispatcher({p: s.channels for p, s in settings.people.items()},
                               rate_per_minute=settings.rate_per_minute, group_window_s=settings.group_window_s,
                               max_pending=settings.max_pending, attempts=settings.attempts)
        self._wake = trio.Event()
        self._limiter = trio.CapacityLimiter(MAX_SENDING)
        self.last_error: dict[str, Any] | None = None
        self.last_sent_at: str | None = None
        self.too_old = 0

    def __repr__(self) -> str:
        return f"<Notifier people={len(self.settings.people)} {self.core!r}>"

    # -- who is held here ------------------------------------------------------------------------

    def held(self, person: str) -> bool:
        """Whether this daemon holds ``person``'s id, so it (and no other daemon) tells them. A
        daemon in no palace has no registry and no other daemon: its people are its own."""
        return self.ctx.membership is None or self.ctx.store.agents.holds(person)

    def _where(self) -> tuple[str | None, str]:
        membership = self.ctx.membership
        if membership is None:
            return None, socket.gethostname()
        return membership.palace_name or membership.palace_id, membership.name

    # -- the task --------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._follow, self.ctx.bus.latest_seq)
            nursery.start_soon(self._watch_forks)
            LOGGER.info("notifications: %d person(s), %d channel(s)", len(self.settings.people),
                        len(self.settings.channels))
            task_status.started()
            while True:
                for delivery in self.core.take_due(trio.current_time()):
                    nursery.start_soon(self._deliver, delivery)
                timer = self.core.get_timer()
                with trio.move_on_at(timer if timer is not None else math.inf):
                    await self._wake.wait()
                self._wake = trio.Event()

    async def _follow(self, position: int) -> None:
        ctx = self.ctx
        while True:
            await ctx.bus.wait_beyond(position, background=True)
            try:
                events = await ctx.committed_after(position, PAGE)
            except ApiError as exc:  # a full disk, shutting down: tried again after the next commit
                LOGGER.warning("notifications could not read new events: %s", exc.message)
                events = []
            if not events:
                position = ctx.bus.latest_seq
                continue
            position = events[-1]["seq"]
            self.observe(ctx.store.agents.annotate(events), trio.current_time(), utc_now())

    def observe(self, events: list[PublicEvent], now: float, wall: str) -> int:
        """Offer the things among ``events`` to the people held here; how many offers were taken."""
        offered = 0
        for event in events:
            if event.get("type") == _REDACT:
                metadata = event.get("metadata")
                target = metadata.get("redacts") if isinstance(metadata, Mapping) else None
                if isinstance(target, str) and self.core.withdraw(target):
                    self._wake.set()
                continue
            thing = thing_for(event, self.ctx.features.triggers, preview_chars=self.settings.preview_chars)
            if thing is None:
                continue
            created = event.get("created_at")
            if isinstance(created, str) and seconds_between(created, wall) > MAX_AGE_S:
                self.too_old += 1
                continue
            offered += self._offer(thing, now)
        return offered

    def _offer(self, thing: Thing, now: float) -> int:
        offered = 0
        for person, person_settings in self.settings.people.items():
            if wants(person, person_settings.on, person_settings.scope, thing) and self.held(person):
                offered += self.core.offer(person, thing, now)
        if offered:
            self._wake.set()
        return offered

    async def _watch_forks(self) -> None:
        known: set[tuple[Any, Any]] | None = None
        while True:
            try:
                forks = await self.ctx.store.forks()
            except ApiError as exc:
                LOGGER.warning("notifications could not read the forks: %s", exc.message)
                forks = None
            if forks is not None:
                forks = forks[-MAX_FORKS_KEPT:]
                keys = {(f["origin"], f["origin_seq"]) for f in forks}
                if known is not None:  # what was there at start is not news
                    for fork in forks:
                        if (fork["origin"], fork["origin_seq"]) not in known:
                            self._offer(fork_thing(fork), trio.current_time())
                known = keys
            await trio.sleep(FORK_POLL_S)

    async def _deliver(self, delivery: Delivery) -> None:
        channel = self.settings.channels[delivery.channel]
        palace, daemon = self._where()
        message = render(delivery.person, delivery.things, dropped=delivery.dropped, palace=palace, daemon=daemon)
        try:
            await deliver(channel, message, timeout_s=self.settings.timeout_s, limiter=self._limiter, now=unix_now())
        except DeliveryError as exc:
            self._failed(delivery, str(exc))
        except Exception as exc:  # the second wall: a bug in a channel must not stop the daemon
            LOGGER.exception("notification to %s via %s failed unexpectedly", delivery.person, delivery.channel)
            self._failed(delivery, f"internal error: {type(exc).__name__}")
        else:
            self.core.delivered(delivery, trio.current_time())
            self.last_sent_at = utc_now()
        self._wake.set()

    def _failed(self, delivery: Delivery, error: str) -> None:
        delay = self.core.failed(delivery, trio.current_time())
        self._note_error(delivery.person, delivery.channel, error)
        then = f"trying again in {delay:.0f} s" if delay is not None else f"given up after {delivery.attempt} attempts"
        LOGGER.warning("notification to %s via %s failed: %s; %s", delivery.person, delivery.channel, error, then)

    def _note_error(self, person: str, channel: str, error: str) -> None:
        self.last_error = {"at": utc_now(), "person": person, "channel": channel, "message": error}

    # -- notify test and status ------------------------------------------------------------------

    async def probe(self, person: str | None = None) -> list[dict[str, Any]]:
        """Send a test message through every channel of ``person`` (default: every person
        configured here, held or not); one result per channel, in config order.

        Raises:
            ValidationError: ``person`` is not configured here.
        """
        if person is not None and person not in self.settings.people:
            raise ValidationError(f"{person} has no [notify.people] entry in this daemon's config.toml "
                                  f"(configured: {', '.join(self.settings.people) or 'nobody'})", field="person")
        people = [person] if person is not None else list(self.settings.people)
        palace, daemon = self._where()
        jobs = [(p, name) for p in people for name in self.settings.people[p].channels]
        results: list[dict[str, Any]] = [{} for _ in jobs]

        async def one(index: int, who: str, name: str) -> None:
            channel = self.settings.channels[name]
            result = {"person": who, "held": self.held(who), "channel": name, "kind": channel.kind,
                      "target": channel.describe(), "ok": True, "error": None}
            try:
                await deliver(channel, probe_message(who, name, palace=palace, daemon=daemon),
                              timeout_s=self.settings.timeout_s, limiter=self._limiter, now=unix_now())
            except DeliveryError as exc:
                result.update(ok=False, error=str(exc))
                self._note_error(who, name, str(exc))
            except Exception as exc:  # as in _deliver
                LOGGER.exception("test notification via %s failed unexpectedly", name)
                result.update(ok=False, error=f"internal error: {type(exc).__name__}")
            results[index] = result

        async with trio.open_nursery() as nursery:
            for index, (who, name) in enumerate(jobs):
                nursery.start_soon(one, index, who, name)
        return results

    def statistics(self) -> dict[str, Any]:
        """What ``status.notify`` shows."""
        return {
            "people": [{"person": p, "held": self.held(p), "channels": list(s.channels)}
                       for p, s in self.settings.people.items()],
            "channels": {name: c.kind for name, c in self.settings.channels.items()},
            **self.core.statistics(), "too_old": self.too_old,
            "last_sent_at": self.last_sent_at, "last_error": self.last_error,
        }
