"""The group-commit writer: concurrent writes share batches; one failure never affects the others."""

from __future__ import annotations

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.errors import ApiError, ValidationError
from palace_proto.validation import AppendRequest, Limits
from palaced.bus import EventBus
from palaced.store import Store
from palaced.store.aio import AsyncStore


def req(body, **extra):
    return AppendRequest.from_wire({"type": "note", "stream": "s", "room": "r", "from_agent": "a", "body": body, **extra},
                                   Limits())


async def test_concurrent_writes_are_group_committed(tmp_path):
    store = Store(tmp_path / "p.sqlite3", Ed25519PrivateKey.generate(), Limits())
    bus = EventBus()
    astore = AsyncStore(store, bus.publish)
    results, errors = [], []

    async def one(i):
        r = req(str(i), artifact_ids=["art_" + "0" * 32]) if i == 7 else req(str(i))
        try:
            results.append(await astore.write(lambda ctx: ctx.append(r)))
        except ValidationError as exc:
            errors.append(exc)

    async with trio.open_nursery() as n:
        await n.start(astore.serve_writer)
        async with trio.open_nursery() as clients:
            for i in range(64):
                clients.start_soon(one, i)
        astore.close_writes()
    assert len(results) == 63 and len(errors) == 1
    assert sorted(e["origin_seq"] for e in results) == list(range(1, 64))
    assert astore.batches < 64, "writes were not batched"
    assert bus.latest_seq == 63
    with pytest.raises(ApiError, match="shutting down"):
        await astore.write(lambda ctx: ctx.append(req("late")))
    store.close()
