"""Reads declared once, beside their SQL, and offered to the event loop as typed async calls.

Owns: ``StoreRead`` — a read of the store written as a plain function of the store's ``Reads``
(``fn(reads, *args)``, run on a reader thread) that the async store offers, with the same
parameters, as a coroutine — and ``ReadSet``, a group of such reads: the async store's own, and
each feature's, declared in its store module and reached through the async store
(``store.reads(RoomReads).whole_room(room_id)``). A store module declares its set::

    def whole_room(reads: Reads, room_id: str) -> tuple[Room | None, list[Event]]: ...

    class RoomReads(ReadSet):
        whole_room = StoreRead(whole_room)

and ``AsyncStore.reads(RoomReads)`` makes it once per store (aio.py). So a read is written once, a caller never
passes a function to the store nor picks the thread hop, and the types carry through (a
``ParamSpec``).

Must not import trio (the hop is the async store's: ``ReadSet.hop``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

if TYPE_CHECKING:
    from .queries import Reads

__all__ = ["ReadSet", "StoreRead"]

P = ParamSpec("P")
R = TypeVar("R")


class ReadSet:
    """A group of reads on the async store (see the module docstring)."""

    def __init__(self, reads: Reads, hop: Callable[..., Awaitable[Any]]) -> None:
        #: the store's reads (the synchronous store), which each read takes first
        self.source = reads
        #: runs ``fn(*args)`` on a reader thread (``AsyncStore``'s hop)
        self.hop = hop

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


class StoreRead(Generic[P, R]):
    """A read of the store: ``fn(reads, *args)`` — or, ``connection=True``, ``fn(the reader thread's
    connection, *args)`` (the memory views' queries) — offered on a ``ReadSet`` as
    ``await set.name(*args)``.

    ``fn`` stays callable as it is (``StoreRead.fn``), for the store's own code that already runs on
    a thread (a write job)."""

    __slots__ = ("connection", "fn")

    def __init__(self, fn: Callable[Concatenate[Any, P], R], *, connection: bool = False) -> None:
        self.fn = fn
        self.connection = connection

    @overload
    def __get__(self, obj: None, owner: type) -> StoreRead[P, R]: ...

    @overload
    def __get__(self, obj: ReadSet, owner: type) -> Callable[P, Awaitable[R]]: ...

    def __get__(self, obj: ReadSet | None, owner: type) -> StoreRead[P, R] | Callable[P, Awaitable[R]]:
        if obj is None:
            return self
        fn, reads, hop, connection = self.fn, obj.source, obj.hop, self.connection

        async def read(*args: P.args, **kwargs: P.kwargs) -> R:
            result: R = await hop(lambda: fn(reads.db.reader() if connection else reads, *args, **kwargs))
            return result

        read.__name__ = read.__qualname__ = getattr(fn, "__name__", "read")
        read.__doc__ = fn.__doc__
        return read
