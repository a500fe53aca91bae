"""One replication link: a peer session driven over a trio stream.

Owns: the IO around ``palace_proto.session.PeerSession`` for one connected peer — send our hello
and vector, pull what the peer has and we lack (``want``), serve the peer's wants in bounded
batches, apply arriving events through the group-commit writer, push every new event (local or
relayed) the peer lacks as soon as it is committed, and resend our vector on the anti-entropy
timer so a silently stalled push is repaired. Transport security, discovery and membership live
elsewhere (the stream handed in is already authenticated); ``key_for`` maps an origin to its
public key, or None when the origin is not a member in good standing.

Error handling: the peer's protocol errors raise ``RemoteProtocolError`` out of ``run`` (the
caller's supervisor logs it, closes the stream and backs off); transport errors end ``run``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

import msgpack
import trio

from palace_proto.envelope import SignedEvent
from palace_proto.framing import NEED_DATA
from palace_proto.errors import RemoteProtocolError
from palace_proto.peer import Events, Goodbye, Hello, Members, Vector, VectorEntry, Want, event_to_wire
from palace_proto.session import ANTI_ENTROPY_S, ConnectionClosed, PeerSession
from palace_proto.sync import OriginHead, batch_events, plan_wants, vector_forks

from .bus import EventBus
from .members import BindingError, MemberDirectory
from .store import WriteContext
from .store.aio import AsyncStore

__all__ = ["PeerLink"]

LOGGER: Final = logging.getLogger("palaced.replication")
# Why 500: one read of the store per page when serving a want; batches are then bounded by bytes.
SERVE_PAGE: Final = 500
RECEIVE_CHUNK: Final = 1 << 16


def _wire_size(event: SignedEvent) -> int:
    return len(msgpack.packb(event_to_wire(event), use_bin_type=True))


class PeerLink:
    """Replicates with one connected peer until the stream closes."""

    def __init__(self, stream: trio.abc.Stream, hello: Hello, astore: AsyncStore, bus: EventBus,
                 key_for: Callable[[str], bytes | None], directory: MemberDirectory | None = None) -> None:
        self.stream = stream
        self.session = PeerSession(hello)
        self.astore = astore
        self.store = astore.store
        self.bus = bus
        self.key_for = directory.key_for if directory is not None else key_for
        #: with a directory, origin bindings travel with the link (hello and Members messages)
        self.directory = directory
        #: what we know the peer holds, per origin (from its vectors and from what flowed)
        self.peer_has: dict[str, int] = {}
        self.forks: list[str] = []
        self._bindings_sent: set[str] = set()
        self.sent_events = 0
        self.received_events = 0
        self._send_lock = trio.Lock()
        self._vector_known = trio.Event()
        self._log = logging.LoggerAdapter(LOGGER, {})

    def __repr__(self) -> str:
        return f"<PeerLink {self.session!r} sent={self.sent_events} received={self.received_events}>"

    @property
    def peer_id(self) -> str | None:
        return self.session.their_hello.peer_id if self.session.their_hello else None

    async def _send(self, message: Any) -> None:
        async with self._send_lock:
            data = self.session.send(message, now=trio.current_time())
            await self.stream.send_all(data)

    async def _heads(self) -> dict[str, OriginHead]:
        return await self.astore.read(self.store.heads)

    async def _our_vector(self) -> Vector:
        heads = await self._heads()
        return Vector(tuple(VectorEntry(o, h.max_seq, h.head_hash) for o, h in sorted(heads.items())))

    async def run(self) -> None:
        """Handshake, then replicate both ways until the peer closes the stream."""
        async with trio.open_nursery() as nursery:
            await self._send(self.session.our_hello)
            if self.directory is not None:
                entries = self.directory.entries()
                await self._send(Members(entries))
                self._bindings_sent.update(origin for origin, _ in entries)
            await self._send(await self._our_vector())
            nursery.start_soon(self._push_new_events)
            nursery.start_soon(self._anti_entropy)
            await self._read()
            nursery.cancel_scope.cancel(reason="peer closed the link")

    async def close(self, code: str = "shutting_down", reason: str = "palaced is stopping") -> None:
        try:
            await self._send(Goodbye(code, reason))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    # -- receiving -----------------------------------------------------------------------------

    async def _read(self) -> None:
        while True:
            try:
                data = await self.stream.receive_some(RECEIVE_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            self.session.receive_data(data)
            while True:
                message = self.session.next_event()
                if message is NEED_DATA:
                    break
                if isinstance(message, ConnectionClosed):
                    return
                await self._handle(message)

    async def _handle(self, message: Any) -> None:
        if isinstance(message, Hello):
            self._on_hello(message)
        elif isinstance(message, Members):
            self._on_members(message)
        elif isinstance(message, Vector):
            await self._on_vector(message)
        elif isinstance(message, Want):
            await self._serve_want(message)
        elif isinstance(message, Events):
            await self._on_events(message)

    def _on_hello(self, hello: Hello) -> None:
        if self.directory is None:
            return
        try:
            cert = self.directory.bind(hello.origin, hello.certificate)
        except BindingError as exc:
            raise RemoteProtocolError(f"peer {hello.peer_id}: {exc}") from None
        if cert.peer_id != hello.peer_id:
            raise RemoteProtocolError(f"peer {hello.peer_id} presented the certificate of {cert.peer_id}")

    def _on_members(self, members: Members) -> None:
        if self.directory is None:
            return
        for origin, certificate in members.entries:
            try:
                self.directory.bind(origin, certificate)
            except BindingError as exc:
                self._log.warning("ignored a binding from %s: %s", self.peer_id, exc)

    async def _on_vector(self, vector: Vector) -> None:
        for entry in vector.entries:
            self.peer_has[entry.origin] = max(self.peer_has.get(entry.origin, 0), entry.max_seq)
        heads = await self._heads()

        def hash_at(origin: str, seq: int) -> bytes | None:
            return self.store.stored_hash(origin, seq)

        forks = await self.astore.read(vector_forks, heads, vector, hash_at)
        for origin in forks:
            if origin not in self.forks:
                self.forks.append(origin)
                self._log.error("peer %s holds a different history of origin %s (fork)", self.peer_id, origin)
        for want in plan_wants(heads, vector):
            if want.origin not in forks:
                await self._send(want)
        self._vector_known.set()

    async def _serve_want(self, want: Want) -> None:
        after = want.after_seq
        while True:
            page = await self.astore.read(self.store.signed_events_of_origin, want.origin, after, SERVE_PAGE)
            await self._send_events(page)
            if len(page) < SERVE_PAGE:
                return
            after = page[-1].origin_seq

    async def _send_events(self, events: list[SignedEvent]) -> None:
        if self.directory is not None:
            # Certificates travel ahead of the events that need them: a peer that never met an
            # origin (a relay) can then verify its events on arrival.
            entries = dict(self.directory.entries())
            missing = sorted({e.origin for e in events} - self._bindings_sent)
            bindings = tuple((o, entries[o]) for o in missing if o in entries)
            if bindings:
                await self._send(Members(bindings))
            self._bindings_sent.update(missing)
        for batch in batch_events(events, _wire_size):
            await self._send(Events(tuple(batch)))
            self.sent_events += len(batch)
            for event in batch:
                self.peer_has[event.origin] = max(self.peer_has.get(event.origin, 0), event.origin_seq)
            await trio.sleep(0)  # interleave with local work: a big catch-up must not starve appends

    async def _on_events(self, message: Events) -> None:
        events = list(message.events)
        for event in events:
            self.peer_has[event.origin] = max(self.peer_has.get(event.origin, 0), event.origin_seq)

        def job(ctx: WriteContext) -> Any:
            return ctx.apply_remote(events, self.key_for, source=self.peer_id)

        report = await self.astore.write(job)
        self.received_events += len(report.applied)
        if report.rejected:
            self._log.warning("rejected %d event(s) from %s (unknown origin or bad signature)",
                              len(report.rejected), self.peer_id)
        if report.forks:
            self._log.error("refused %d forked event(s) from %s", len(report.forks), self.peer_id)
        # A gap (or an event waiting for artifacts) means we missed something: pull again from our head.
        retry = {e.origin for e in report.gaps} | {e.origin for e in report.missing_artifacts}
        if retry:
            heads = await self._heads()
            for origin in sorted(retry):
                await self._send(Want(origin, heads[origin].max_seq if origin in heads else 0))

    # -- pushing -------------------------------------------------------------------------------

    async def _push_new_events(self) -> None:
        """Push every newly committed event (local or relayed) the peer does not hold yet."""
        cursor = self.bus.latest_seq
        await self._vector_known.wait()
        # Whatever arrived before the peer's vector was known is covered by the vectors themselves.
        while True:
            await self.bus.wait_beyond(cursor)
            new = self.bus.events_after(cursor, 10_000)
            if new is None:  # fell behind the ring: the anti-entropy vector exchange repairs it
                cursor = self.bus.latest_seq
                await self._send(await self._our_vector())
                continue
            if not new:
                continue
            cursor = new[-1]["seq"]
            origins = sorted({e["origin"] for e in new})
            heads = await self._heads()
            for origin in origins:
                known = self.peer_has.get(origin, 0)
                head = heads.get(origin)
                if head is None or head.max_seq <= known:
                    continue
                page = await self.astore.read(self.store.signed_events_of_origin, origin, known, SERVE_PAGE)
                await self._send_events(page)

    async def _anti_entropy(self) -> None:
        while True:
            due = self.session.get_timer()
            await trio.sleep_until(due if due is not None else trio.current_time() + ANTI_ENTROPY_S)
            await self._send(await self._our_vector())
