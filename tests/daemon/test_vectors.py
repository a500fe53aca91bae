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
from palaced.features import STORE_PARTS
from palaced.features.memory_vectors import MemoryIndexer, VectorIndex
from palaced.store import Store, append_event, redact
from palaced.store.aio import AsyncStore

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
    store = Store(tmp_path / "v.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    bus = EventBus(store.latest()[0])
    astore = AsyncStore(store, bus.publish)
    embedder = WordEmbedder()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(astore.serve_writer)
            indexer = MemoryIndexer(astore, bus, embedder, tmp_path)
            nursery.start_soon(indexer.run)
            with trio.fail_after(20):  # until its first look at the drawers (there are none) is done
                while indexer._synced_fingerprint is None:
                    await trio.sleep(0.01)
            assert indexer.index is None and embedder.calls == 0  # no drawers: no model work at all
            events = []
            for text in ("the cat sleeps on the router", "sqlite keeps the log", "deploys go out on mondays"):
                req = AppendRequest.from_wire(Drawer("w", "r", text, "a").event(), LIMITS)
                events.append(await astore.write(lambda ctx, req=req: append_event(ctx, req)))
            await settle(indexer, 3)
            hits = await indexer.search("a kitten naps", 3)
            assert hits[0][0] == Drawer("w", "r", "the cat sleeps on the router", "a").id
            await astore.write(lambda ctx: redact(ctx, events[0]["id"], "evt_x"))
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


def test_saves_running_at_once_each_finish_and_leave_one_whole_index(tmp_path):
    """Regression: a save alongside the worker's own once found its temporary file renamed away."""
    from concurrent.futures import ThreadPoolExecutor

    index = VectorIndex(tmp_path, "m", 8)
    index.add(list(range(1, 201)), _clustered_vectors(200, 8, seed=3))
    with ThreadPoolExecutor(8) as pool:
        for future in [pool.submit(index.save) for _ in range(40)]:
            future.result()  # raised FileNotFoundError before saves were serialized
    reloaded = VectorIndex(tmp_path, "m", 8)
    assert reloaded.load() and len(reloaded) == 200
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory-vectors.faiss", "memory-vectors.json"]


def _clustered_vectors(count: int, dim: int, seed: int) -> np.ndarray:
    """Unit vectors around 50 centres: shaped like sentence embeddings (topics), unlike uniform noise."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((50, dim)).astype(np.float32)
    vectors = centres[rng.integers(0, 50, count)] + 0.7 * rng.standard_normal((count, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_index_turns_ivf_above_its_exact_limit_and_keeps_recall_redaction_and_persistence(tmp_path):
    dim, count = 32, 6_000
    vectors = _clustered_vectors(count, dim, seed=1)
    keys = [1_000_000 + 7 * i for i in range(count)]
    index = VectorIndex(tmp_path, "test/clusters", dim, exact_max=2_000)
    exact = VectorIndex(tmp_path / "unused", "test/clusters", dim, exact_max=count * 10)
    index.add(keys, vectors)
    exact.add(keys, vectors)
    assert index.kind == "exact" and index.needs_rebalance()
    assert index.rebalance() == "ivf" and len(index) == count and index.keys() == set(keys)
    assert not index.needs_rebalance()
    queries = _clustered_vectors(100, dim, seed=2)
    recall = np.mean([len({k for k, _ in index.search(q, 10)} & {k for k, _ in exact.search(q, 10)}) / 10
                      for q in queries])
    assert recall >= 0.95, recall
    # a redacted drawer leaves the IVF index too
    gone = keys[:500]
    index.remove(gone)
    assert len(index) == count - 500 and not index.keys() & set(gone)
    assert not {k for q in vectors[:500] for k, _ in index.search(q, 5)} & set(gone)
    index.save()
    reloaded = VectorIndex(tmp_path, "test/clusters", dim, exact_max=2_000)
    assert reloaded.load() and reloaded.kind == "ivf" and reloaded.keys() == set(keys[500:])
    assert reloaded.search(vectors[600], 1)[0][0] == keys[600]
    # mass redaction: far below the limit the index goes back to exact (hysteresis: not at the limit)
    reloaded.remove(keys[500:5_500])
    assert reloaded.needs_rebalance() and reloaded.rebalance() == "exact"
    assert reloaded.keys() == set(keys[5_500:]) and reloaded.search(vectors[5_600], 1)[0][0] == keys[5_600]


def test_ivf_index_is_retrained_when_the_palace_has_grown_fourfold(tmp_path):
    dim = 16
    index = VectorIndex(tmp_path, "test/clusters", dim, exact_max=500)
    first = _clustered_vectors(1_000, dim, seed=3)
    index.add(list(range(1, 1_001)), first)
    index.rebalance()
    assert index.trained_on == 1_000
    index.add(list(range(1_001, 4_002)), _clustered_vectors(3_001, dim, seed=4))
    assert index.needs_rebalance() and index.rebalance() == "ivf" and index.trained_on == 4_001


async def test_the_worker_switches_to_ivf_once_the_backlog_is_embedded(tmp_path):
    store = Store(tmp_path / "v.sqlite3", Ed25519PrivateKey.generate(), LIMITS, parts=STORE_PARTS)
    bus = EventBus(store.latest()[0])
    astore = AsyncStore(store, bus.publish)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(astore.serve_writer)
            indexer = MemoryIndexer(astore, bus, WordEmbedder(), tmp_path, exact_max=20)
            nursery.start_soon(indexer.run)
            for i in range(45):
                req = AppendRequest.from_wire(Drawer("w", "r", f"note {i} about sqlite", "a").event(), LIMITS)
                await astore.write(lambda ctx, req=req: append_event(ctx, req))
            await settle(indexer, 45)
            with trio.fail_after(20):
                while indexer.index.kind != "ivf":
                    await trio.sleep(0.02)
            assert indexer.status()["index"] == "ivf"
            assert Drawer("w", "r", "note 7 about sqlite", "a").id in [d for d, _ in await indexer.search("note 7", 45)]
            nursery.cancel_scope.cancel()
    finally:
        store.close()


async def test_a_hit_not_embedded_yet_says_so_rather_than_score_zero(tmp_path):
    """Guards issue 47 §1.6: a drawer the worker had not embedded yet showed ``score 0.000`` (its
    common words score ~0); its hit now says it is not embedded, one that is embedded says so."""
    from palaced.features import memory
    from palaced.features.memory import MemoryState
    from palaced.features.memory_vectors import vector_key
    from tests.daemon.handler_context import open_context

    async with open_context(tmp_path / "home") as ctx:
        embedder = WordEmbedder()
        indexer = ctx.state(MemoryState).indexer = MemoryIndexer(ctx.store, ctx.bus, embedder, tmp_path)
        indexer.index = VectorIndex(tmp_path, embedder.name, embedder.dim)
        done = await memory.memory_add(ctx, {"wing": "w", "room": "r", "content": "the cat sleeps on the router",
                                             "added_by": "a"})
        waiting = await memory.memory_add(ctx, {"wing": "w", "room": "r", "content": "the router reboots at night",
                                                "added_by": "a"})
        indexer.index.add([vector_key(done["drawer_id"])], embedder.embed(["the cat sleeps on the router"]))
        indexer._keys_to_ids[vector_key(done["drawer_id"])] = done["drawer_id"]
        hits = {h["drawer_id"]: h for h in (await memory.search(ctx, {"query": "the router"}))["results"]}
        assert hits[done["drawer_id"]]["embedded"] is True
        assert hits[waiting["drawer_id"]]["embedded"] is False and hits[waiting["drawer_id"]]["similarity"] is None
        indexer.close()
