"""The vector worker and hybrid search on a tiny deterministic embedder (bag of hashed words):
drawers get embedded off the append path, redacted ones leave the index, the index survives a
restart, and fusion finds what either ranking alone ranks low."""

from __future__ import annotations

import hashlib

import numpy as np
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.memory import Drawer
from palace_proto.validation import AppendRequest, Limits
from palaced.bus import EventBus
from palaced.store import Store
from palaced.store.aio import AsyncStore
from palaced.vectors import MemoryIndexer, VectorIndex

LIMITS = Limits()
SYNONYMS = {"kitten": "cat", "kitty": "cat", "database": "sqlite", "db": "sqlite"}


class WordEmbedder:
    """Deterministic: hashed words (synonyms folded) into 64 dimensions, unit length."""

    name = "test/words"
    dim = 64

    def __init__(self) -> None:
        self.loads = 1
        self.calls = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                word = SYNONYMS.get(word.strip(".,?!"), word.strip(".,?!"))
                out[row, int(hashlib.sha256(word.encode()).hexdigest(), 16) % self.dim] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


async def settle(indexer: MemoryIndexer, count: int) -> None:
    with trio.fail_after(20):
        while indexer.index is None or len(indexer.index) != count or indexer.pending:
            await trio.sleep(0.02)


async def test_the_worker_embeds_drawers_and_drops_redacted_ones(tmp_path):
    store = Store(tmp_path / "v.sqlite3", Ed25519PrivateKey.generate(), LIMITS)
    bus = EventBus(store.latest()[0])
    astore = AsyncStore(store, bus.publish)
    embedder = WordEmbedder()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(astore.serve_writer)
            indexer = MemoryIndexer(store, bus, embedder, tmp_path)
            nursery.start_soon(indexer.run)
            await trio.sleep(0.1)
            assert indexer.index is None and embedder.calls == 0  # no drawers: no model work at all
            events = []
            for text in ("the cat sleeps on the router", "sqlite keeps the log", "deploys go out on mondays"):
                req = AppendRequest.from_wire(Drawer("w", "r", text, "a").event(), LIMITS)
                events.append(await astore.write(lambda ctx, req=req: ctx.append(req)))
            await settle(indexer, 3)
            hits = await indexer.search("a kitten naps", 3)
            assert hits[0][0] == Drawer("w", "r", "the cat sleeps on the router", "a").id
            await astore.write(lambda ctx: ctx.redact(events[0]["id"], "evt_x"))
            await settle(indexer, 2)
            assert Drawer("w", "r", "the cat sleeps on the router", "a").id not in [d for d, _ in
                                                                                    await indexer.search("cat", 3)]
            await trio.to_thread.run_sync(indexer.index.save)
            nursery.cancel_scope.cancel()
        reloaded = VectorIndex(tmp_path, embedder.name, embedder.dim)
        assert reloaded.load() and len(reloaded) == 2
        assert not VectorIndex(tmp_path, "another/model", embedder.dim).load()  # another model: rebuild
    finally:
        store.close()
