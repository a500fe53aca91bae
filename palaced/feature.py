"""What a feature of the daemon declares, and what the core asks of all of them together.

Owns: ``Feature`` — one object per feature (tasks, leases, questions, rooms, usage, memory, agents,
fleet, artifacts, …; each in ``palaced/features/``) naming its operations of the local API, its
background services, whom a watch of an agent wakes for its events, which of its event types stay
out of the inbox, its part of ``session_start``, its rule on what an ``ack`` may acknowledge, what
else a redaction takes with it, and what it does when the daemon starts or joins a palace —
``Features``, the set the daemon runs with (``palaced.features.FEATURES``, handed to the core by
app.py through the ``Context``), which answers the core's questions by asking each feature, and
``Follower``, the one loop of every service that follows the bus.

The core never imports a feature: it asks ``ctx.features``. A feature may import one it builds on
(tasks → questions), named in its ``builds_on``; ``Features`` checks that each is there, that no
operation is answered twice, and that every operation of the protocol (``palace_proto.features.OPS``)
is answered by the core or by a feature.

Must not import: ``palaced.features`` (the registry imports this), ``palaced.api``, ``palaced.app``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn, Protocol

import trio

from palace_proto.errors import ApiError
from palace_proto.event_fields import PublicEvent

from .config import Extensions, Section
from .notify.triggers import CORE_KINDS, CORE_TRIGGERS, Trigger
from .store.inbox import InboxScope
from .store.parts import StorePart

if TYPE_CHECKING:
    from .handlers.context import Context
    from .membership import Membership
    from .store import WriteContext

__all__ = ["Feature", "Features", "Follower", "Handler", "Service", "WakeRule"]

LOGGER: Final = logging.getLogger("palaced.feature")

#: an operation's handler: (the daemon's context, the request's args) -> the reply's result
Handler = Callable[["Context", Mapping[str, Any]], Awaitable[Any]]


class Service(Protocol):
    """A background service a feature runs for the daemon's life (in app.py's nursery)."""

    async def run(self) -> NoReturn: ...


class WakeRule(Protocol):
    """Whether one agent's watch wakes on an event (a feature's say on its own events)."""

    async def wakes(self, event: PublicEvent) -> bool: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Feature:
    """One feature of the daemon, as it declares itself to the core (see the module docstring)."""

    name: str
    #: the local API's operations it answers (``palace_proto``'s feature module names the same)
    ops: Mapping[str, Handler] = dataclasses.field(default_factory=dict)
    #: the features it builds on (it imports them)
    builds_on: tuple[str, ...] = ()
    #: its background services, each made from the context (None: not wanted) and run for the daemon's life
    services: tuple[Callable[[Context], Service | None], ...] = ()
    #: a watch of ``agent`` (with no correlation id of its own) asks this before waking on an event
    wake: Callable[[Context, str], WakeRule] | None = None
    #: its event types that stay out of an agent's inbox (read where they belong)
    inbox_excludes: frozenset[str] = frozenset()
    #: other addressees whose events an agent's inbox holds too (a person's: questions to anyone)
    inbox_also: Callable[[str], Iterable[str]] | None = None
    #: what it keeps in the store beside the log (the store's part: palaced/store/parts.py)
    store: StorePart | None = None
    #: its table of config.toml (``[tasks]``), read into ``ctx.config.section(name, default)``
    section: Section | None = None
    #: what of its events a person may be told of (palaced/notify: a ``Trigger`` per kind)
    triggers: tuple[Trigger, ...] = ()
    #: its operations answered in the API's loop without a task of their own (cheap reads)
    inline_ops: frozenset[str] = frozenset()
    #: its part of the ``status`` reply (keys of its own)
    status: Callable[[Context], Awaitable[Mapping[str, Any]]] | None = None
    #: what needs attention and what is worth knowing in the ``status`` reply: (problems, notes)
    health: Callable[[Mapping[str, Any]], tuple[Sequence[str], Sequence[str]]] | None = None
    #: its part of ``session_start``: keys of the reply, for ``agent``
    session: Callable[[Context, str], Awaitable[Mapping[str, Any]]] | None = None
    #: what to do now, for the session's ``next`` line, from the reply so far (its own keys in it)
    session_hints: Callable[[str, Mapping[str, Any]], Sequence[str]] | None = None
    #: refuses, in the writing transaction, an ``ack`` of ``target`` with ``status`` by ``agent``
    #: the feature's queue forbids (beyond the authority table: e.g. a claim of a claimed task)
    ack_rule: Callable[[Context, WriteContext, Mapping[str, Any], str, str | None], None] | None = None
    #: the events a redaction of ``target_id`` takes with it (they carry the same words)
    redaction_related: Callable[[WriteContext, str], list[str]] | None = None
    #: run once the daemon's context exists, before the API serves
    on_start: Callable[[Context], None] | None = None
    #: run when the daemon belongs to a palace (at start, or on ``init``/``join``), network running
    on_joined: Callable[[Context, Membership], Awaitable[None]] | None = None


class Features:
    """The features a daemon runs with, and the core's questions answered from all of them."""

    def __init__(self, features: Iterable[Feature], core_ops: Mapping[str, Handler], protocol_ops: Iterable[str]) -> None:
        self.features = tuple(features)
        names = [f.name for f in self.features]
        doubles = {n for n in names if names.count(n) > 1}
        if doubles:
            raise ValueError(f"features declared twice: {sorted(doubles)}")
        for feature in self.features:
            missing = [b for b in feature.builds_on if b not in names]
            if missing:
                raise ValueError(f"feature {feature.name} builds on {missing}, which the daemon does not run")
        table: dict[str, Handler] = dict(core_ops)
        owner = dict.fromkeys(core_ops, "the core")
        for feature in self.features:
            for op, handler in feature.ops.items():
                if op in table:
                    raise ValueError(f"operation {op!r} is answered twice: by {owner[op]} and by feature {feature.name}")
                table[op], owner[op] = handler, f"feature {feature.name}"
        expected = frozenset(protocol_ops)
        missing_ops, unknown = expected - table.keys(), table.keys() - expected
        if missing_ops or unknown:
            raise ValueError(f"the operations answered differ from palace_proto.features.OPS: unanswered "
                             f"{sorted(missing_ops)}, not in the protocol {sorted(unknown)}")
        self.ops: Mapping[str, Handler] = table
        self.inbox_excludes: frozenset[str] = frozenset().union(*(f.inbox_excludes for f in self.features))
        #: what the features keep in the store, in the features' order (``Store``'s ``parts``)
        self.store_parts: tuple[StorePart, ...] = tuple(f.store for f in self.features if f.store is not None)
        #: what a person may be told of: the features' triggers in their order, then the core's
        #: (first match wins: a question is never also a message)
        self.triggers: tuple[Trigger, ...] = (*(t for f in self.features for t in f.triggers), *CORE_TRIGGERS)
        kinds = [t.kind for t in self.triggers] + list(CORE_KINDS)
        self.notify_kinds: tuple[str, ...] = tuple(dict.fromkeys(kinds))
        sections = [f.section for f in self.features if f.section is not None]
        section_names = [s.name for s in sections]
        if len(set(section_names)) != len(section_names):
            raise ValueError(f"config sections declared twice: {sorted(section_names)}")
        #: what the features add to config.toml (``load_config``)
        self.config_extensions = Extensions(tuple(sections), self.notify_kinds)
        #: operations answered in the API's loop (the features' say; the core's are the API's)
        self.inline_ops: frozenset[str] = frozenset().union(*(f.inline_ops for f in self.features))
        unknown_inline = self.inline_ops - self.ops.keys()
        if unknown_inline:
            raise ValueError(f"inline operations nobody answers: {sorted(unknown_inline)}")

    def __repr__(self) -> str:
        return f"<Features {', '.join(f.name for f in self.features)} ops={len(self.ops)}>"

    def __iter__(self) -> Any:
        return iter(self.features)

    def named(self, name: str) -> Feature:
        return next(f for f in self.features if f.name == name)

    def inbox_scope(self, agent: str) -> InboxScope:
        """What ``agent``'s inbox holds besides the events to it, and the types kept out of it."""
        also = tuple(dict.fromkeys(a for f in self.features if f.inbox_also is not None for a in f.inbox_also(agent)))
        return InboxScope(also, tuple(sorted(self.inbox_excludes)))

    def wake_rules(self, ctx: Context, agent: str) -> list[WakeRule]:
        """What a watch of ``agent`` asks before it wakes on an event."""
        return [f.wake(ctx, agent) for f in self.features if f.wake is not None]

    def check_ack(self, ctx: Context, w: WriteContext, target: Mapping[str, Any], agent: str,
                  status: str | None) -> None:
        """Every feature's rule on an ``ack`` (raises the refusal of the first that refuses)."""
        for feature in self.features:
            if feature.ack_rule is not None:
                feature.ack_rule(ctx, w, target, agent, status)

    def redaction_related(self, w: WriteContext, target_id: str) -> list[str]:
        """The events a redaction of ``target_id`` takes with it, every feature asked."""
        related: list[str] = []
        for feature in self.features:
            if feature.redaction_related is not None:
                related.extend(e for e in feature.redaction_related(w, target_id) if e not in related)
        return related

    async def session(self, ctx: Context, agent: str) -> dict[str, Any]:
        """Every feature's part of ``session_start``, in the features' order."""
        out: dict[str, Any] = {}
        for feature in self.features:
            if feature.session is not None:
                out.update(await feature.session(ctx, agent))
        return out

    def session_hints(self, agent: str, reply: Mapping[str, Any]) -> list[str]:
        hints: list[str] = []
        for feature in self.features:
            if feature.session_hints is not None:
                hints.extend(feature.session_hints(agent, reply))
        return hints

    def start(self, ctx: Context) -> None:
        for feature in self.features:
            if feature.on_start is not None:
                feature.on_start(ctx)

    async def joined(self, ctx: Context, membership: Membership) -> None:
        for feature in self.features:
            if feature.on_joined is not None:
                await feature.on_joined(ctx, membership)

    def services(self, ctx: Context) -> list[Service]:
        """Every feature's background services, made for ``ctx`` (a maker may decline: None, as the
        memory's vector worker does when embedding is off)."""
        made = (make(ctx) for feature in self.features for make in feature.services)
        return [service for service in made if service is not None]

    def health(self, status: Mapping[str, Any]) -> list[tuple[Sequence[str], Sequence[str]]]:
        """Every feature's (problems, notes) on the ``status`` reply."""
        return [feature.health(status) for feature in self.features if feature.health is not None]

    async def status(self, ctx: Context) -> dict[str, Any]:
        """Every feature's part of ``status``, in the features' order."""
        out: dict[str, Any] = {}
        for feature in self.features:
            if feature.status is not None:
                out.update(await feature.status(ctx))
        return out


class Follower:
    """A background service that follows the bus: it catches up (``catch_up``), then waits for the
    next commit that concerns it (``wait_next``: by default, one with an event of ``types``, then
    ``settle_s`` for the rest of a burst to land), and again, for the daemon's life. A refusal of
    the daemon's (a full disk, shutting down) is logged and tried again after the next wait; any
    other failure is the daemon's own and stops it loudly."""

    #: the event types whose commits wake it (None: ``wait_next`` is the subclass's own)
    types: frozenset[str] | None = None
    #: how long it lets a burst land before it looks (seconds)
    settle_s: float = 0.0
    #: what it does, for the log line of a failed look
    doing: str = "follow the log"
    #: whether it waits before its first look (a follower that must not run between the appends
    #: of a busy moment: its wait says when the writer is idle)
    wait_first: bool = False

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._watch = ctx.bus.watch_types(self.types) if self.types is not None else None

    async def catch_up(self) -> Any:
        """Bring what it keeps up to what is committed (the subclass's work)."""
        raise NotImplementedError

    async def wait_next(self) -> None:
        """Until the next commit that concerns it."""
        assert self._watch is not None, "a Follower without types waits its own way"
        await self._watch.wait()
        if self.settle_s:
            await trio.sleep(self.settle_s)

    async def run(self) -> NoReturn:
        if self.wait_first:
            await self.wait_next()
        while True:
            try:
                await self.catch_up()
            except ApiError as exc:  # a full disk, shutting down: tried again after the next wait
                logging.getLogger(type(self).__module__).warning("could not %s: %s", self.doing, exc.message)
            await self.wait_next()
