"""A connected pair of in-memory trio streams with a socket's defining trait: a bounded buffer.

``trio.testing.memory_stream_pair`` buffers without limit, so a writer never waits and no test over
it can show a link that stops because both ends wait to write; ``lockstep_stream_pair`` buffers
nothing. ``bounded_stream_pair(capacity)`` sits between: each direction holds at most ``capacity``
bytes, ``send_all`` waits for room (as a full socket does) and ``receive_some`` returns what is
there, so tests can try any buffer size a kernel might have.
"""

from __future__ import annotations

import trio


class _Pipe:
    """One direction: a byte buffer of bounded size, with wake-ups both ways."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.buffer = bytearray()
        self.closed = False
        self.changed = trio.Event()

    def _wake(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self.closed:
                raise trio.BrokenResourceError("the other end is closed")
            room = self.capacity - len(self.buffer)
            if room <= 0:
                await self.changed.wait()
                continue
            self.buffer += view[:room]
            view = view[room:]
            self._wake()
            await trio.lowlevel.checkpoint()

    async def read(self, max_bytes: int | None) -> bytes:
        while not self.buffer:
            if self.closed:
                return b""
            await self.changed.wait()
        size = len(self.buffer) if max_bytes is None else min(max_bytes, len(self.buffer))
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        self._wake()
        await trio.lowlevel.checkpoint()
        return data

    def close(self) -> None:
        self.closed = True
        self._wake()


class BoundedStream(trio.abc.Stream):
    def __init__(self, outgoing: _Pipe, incoming: _Pipe) -> None:
        self._outgoing = outgoing
        self._incoming = incoming

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._outgoing.write(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return await self._incoming.read(max_bytes)

    async def aclose(self) -> None:
        self._outgoing.close()
        self._incoming.close()
        await trio.lowlevel.checkpoint()


def bounded_stream_pair(capacity: int) -> tuple[BoundedStream, BoundedStream]:
    """Two connected streams, each direction buffering at most ``capacity`` bytes."""
    left_to_right, right_to_left = _Pipe(capacity), _Pipe(capacity)
    return BoundedStream(left_to_right, right_to_left), BoundedStream(right_to_left, left_to_right)
