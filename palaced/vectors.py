"""Dense vectors for the shared memory: the faiss index and the background worker that fills it.

Owns: the drawers' embeddings. ``VectorIndex`` is an exact inner-product faiss index (vectors are
unit length, so inner product = cosine) keyed by a 60-bit number derived from each drawer id,
persisted next to the database and thrown away when the model changes. ``MemoryIndexer`` runs in
the daemon's nursery: whenever memory events commit (or every few seconds), it compares the index
with the drawers view, embeds what is missing in batches on a worker thread and drops what was
redacted. It never runs on the append path; until a drawer is embedded, search still finds it by
keywords. Everything here is derived state: deleting the files only costs re-embedding.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

import numpy as np
import trio

from palace_proto.memory import MEMORY_TYPES

from .bus import EventBus
from .embedding import Embedder, EmbeddingError
from .store import Store

__all__ = ["MemoryIndexer", "VectorIndex", "vector_key"]

LOGGER: Final = logging.getLogger("palaced.vectors")
INDEX_FILE: Final = "memory-vectors.faiss"
META_FILE: Final = "memory-vectors.json"
# Why 64: a batch embeds in ~30-250 ms here, short enough that the worker yields often.
EMBED_BATCH: Final = 64
# Why 2 s: a missed notification (ring overflow) is repaired quickly; an idle check is a cheap query.
IDLE_CHECK_S: Final = 2.0
# Why 30 s: writing the index file costs ~1.5 KB per drawer; after a crash the rest is re-embedded.
SAVE_EVERY_S: Final = 30.0


def vector_key(drawer_id: str) -> int:
    """The index id of a drawer: 60 bits of its (hex) content-derived id."""
    return int(drawer_id[4:19], 16)


class VectorIndex:
    """An exact (flat, inner product) faiss index with ids, saved atomically to ``folder``."""

    def __init__(self, folder: Path, model: str, dim: int) -> None:
        import faiss  # imported here: the daemon pays for faiss only once memory is used

        self._faiss = faiss
        self.folder = folder
        self.model = model
        self.dim = dim
        self._lock = threading.Lock()
        self.index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self.dirty = False

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def load(self) -> bool:
        """Read the saved index if it was made with the same model; False otherwise."""
        try:
            meta = json.loads((self.folder / META_FILE).read_text())
            if meta.get("model") != self.model or meta.get("dim") != self.dim:
                LOGGER.info("vector index was built with %s; rebuilding for %s", meta.get("model"), self.model)
                return False
            index = self._faiss.read_index(str(self.folder / INDEX_FILE))
        except (OSError, ValueError, RuntimeError):
            return False
        with self._lock:
            self.index = index
        return True

    def keys(self) -> set[int]:
        with self._lock:
            if self.index.ntotal == 0:
                return set()
            return set(self._faiss.vector_to_array(self.index.id_map).tolist())

    def add(self, keys: list[int], vectors: np.ndarray) -> None:
        with self._lock:
            self.index.add_with_ids(vectors.astype(np.float32), np.asarray(keys, dtype=np.int64))
            self.dirty = True

    def remove(self, keys: list[int]) -> None:
        with self._lock:
            self.index.remove_ids(np.asarray(keys, dtype=np.int64))
            self.dirty = True

    def search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        with self._lock:
            if self.index.ntotal == 0:
                return []
            scores, ids = self.index.search(vector.reshape(1, -1).astype(np.float32), min(k, int(self.index.ntotal)))
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i != -1]

    def save(self) -> None:
        with self._lock:
            data = self._faiss.serialize_index(self.index)
            self.dirty = False
        tmp = self.folder / f".{INDEX_FILE}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data.tobytes())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.folder / INDEX_FILE)
        (self.folder / META_FILE).write_text(json.dumps({"model": self.model, "dim": self.dim, "count": len(self)}))


def _background_priority() -> None:
    """Run the calling thread (and the threads it starts, e.g. onnxruntime's) at the lowest CPU
    priority: embedding must never slow the append path down, only use idle CPU."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):  # not Linux (per-thread nice is a Linux feature): best effort
        pass


class MemoryIndexer:
    """Keeps the vector index in step with the drawers view, off the append path."""

    def __init__(self, store: Store, bus: EventBus, embedder: Embedder, folder: Path) -> None:
        self.store = store
        self.bus = bus
        self.embedder = embedder
        # One dedicated, low-priority thread runs the model (loading included, so the threads
        # onnxruntime creates inherit the priority); trio's worker threads stay untouched.
        self._model_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="palace-embed",
                                                initializer=_background_priority)
        self.folder = folder
        self.index: VectorIndex | None = None
        self.pending = 0
        self.embedded_total = 0
        self.last_error: str | None = None
        self._keys_to_ids: dict[int, str] = {}
        self._changed = trio.Event()
        self._ready = trio.Event()

    def __repr__(self) -> str:
        return f"<MemoryIndexer pending={self.pending} indexed={len(self.index) if self.index else 0}>"

    @property
    def available(self) -> bool:
        return self.index is not None and self.last_error is None

    def status(self) -> dict[str, Any]:
        return {"model": self.embedder.name, "model_loads": getattr(self.embedder, "loads", None),
                "indexed": len(self.index) if self.index else 0, "pending": self.pending, "error": self.last_error}

    async def run(self) -> None:
        cursor = self.bus.latest_seq
        last_save = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_bus, cursor)
            while True:
                try:
                    await self._sync()
                except EmbeddingError as exc:
                    if self.last_error != str(exc):
                        LOGGER.error("memory search falls back to keywords: %s", exc)
                    self.last_error = str(exc)
                if self.index is not None and self.index.dirty and (
                        self.pending == 0 or trio.current_time() - last_save > SAVE_EVERY_S):
                    await trio.to_thread.run_sync(self.index.save)
                    last_save = trio.current_time()
                if self.pending:
                    continue  # more to embed: next batch at once (each batch yields to the loop)
                with trio.move_on_after(IDLE_CHECK_S):
                    await self._changed.wait()
                self._changed = trio.Event()

    async def _watch_bus(self, cursor: int) -> None:
        while True:
            await self.bus.wait_beyond(cursor)
            new = self.bus.events_after(cursor, 10_000)
            cursor = self.bus.latest_seq if not new else new[-1]["seq"]
            if new is None or any(e["type"] in MEMORY_TYPES or e["type"] == "event.redact" for e in new):
                self._changed.set()

    async def _sync(self) -> None:
        drawers: list[tuple[str, str]] = await trio.to_thread.run_sync(self._drawer_ids)
        if not drawers and self.index is None:
            self.pending = 0
            return  # nothing to embed: do not load the model
        if self.index is None:
            dim = await self._on_model_thread(lambda: self.embedder.dim)
            index = VectorIndex(self.folder, self.embedder.name, dim)
            await trio.to_thread.run_sync(index.load)
            self.index = index
        self._keys_to_ids = {vector_key(d): d for d, _ in drawers}
        have = await trio.to_thread.run_sync(self.index.keys)
        stale = sorted(have - self._keys_to_ids.keys())
        if stale:
            await trio.to_thread.run_sync(self.index.remove, stale)
        missing = [(d, k) for d, k in ((d, vector_key(d)) for d, _ in drawers) if k not in have]
        self.pending = len(missing)
        if not missing:
            return
        batch = missing[:EMBED_BATCH]
        texts = await trio.to_thread.run_sync(self._contents, [d for d, _ in batch])
        present = [(d, k) for d, k in batch if d in texts]
        if present:
            vectors = await self._on_model_thread(self.embedder.embed, [texts[d] for d, _ in present])
            await trio.to_thread.run_sync(self.index.add, [k for _, k in present], vectors)
            self.embedded_total += len(present)
        self.pending = max(0, len(missing) - len(batch))
        self.last_error = None

    async def _on_model_thread(self, fn: Any, *args: Any) -> Any:
        future = self._model_thread.submit(fn, *args)
        return await trio.to_thread.run_sync(future.result, abandon_on_cancel=True)

    def close(self) -> None:
        self._model_thread.shutdown(wait=False, cancel_futures=True)

    def _drawer_ids(self) -> list[tuple[str, str]]:
        return self.store.memory_read(lambda conn: conn.execute("SELECT id, kind FROM drawers").fetchall())

    def _contents(self, ids: list[str]) -> dict[str, str]:
        placeholders = ",".join("?" * len(ids))
        rows = self.store.memory_read(
            lambda conn: conn.execute(f"SELECT id, content FROM drawers WHERE id IN ({placeholders})", ids).fetchall())
        return dict(rows)

    async def search(self, query: str, k: int, timings: dict[str, float] | None = None) -> list[tuple[str, float]]:
        """(drawer id, cosine) of the nearest drawers; empty when vectors are unavailable.

        ``timings`` (if given) receives ``embed_ms`` (the query's embedding) and ``index_ms``."""
        if self.index is None or len(self.index) == 0:
            return []
        started = time.perf_counter()
        vector = await self._on_model_thread(self.embedder.embed, [query])
        embedded = time.perf_counter()
        hits = await trio.to_thread.run_sync(self.index.search, vector[0], k)
        if timings is not None:
            timings["embed_ms"] = round((embedded - started) * 1000, 3)
            timings["index_ms"] = round((time.perf_counter() - embedded) * 1000, 3)
        return [(self._keys_to_ids[key], score) for key, score in hits if key in self._keys_to_ids]

