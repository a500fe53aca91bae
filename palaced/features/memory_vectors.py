"""Dense vectors for the shared memory: the faiss index and the background worker that fills it.

Owns: the drawers' embeddings. ``VectorIndex`` is a faiss inner-product index (vectors are unit
length, so inner product = cosine) keyed by a 60-bit number derived from each drawer id: exact up
to a configurable size, an inverted-file (IVF) index above it; persisted next to the database and
thrown away when the model changes. ``MemoryIndexer`` runs in
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
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

import trio

from palace_proto.memory import MEMORY_TYPES

from ..bus import EventBus, TypeWatch
from ..files import fsync_directory
from ..store.aio import AsyncStore
from ..store.memory_views import MemoryReads
from .memory_embedding import Embedder, EmbeddingError

if TYPE_CHECKING:
    import numpy as np

__all__ = ["MemoryIndexer", "VectorIndex", "vector_key"]

LOGGER: Final = logging.getLogger("palaced.features.memory_vectors")
INDEX_FILE: Final = "memory-vectors.faiss"
META_FILE: Final = "memory-vectors.json"
# Why 64: a batch embeds in ~30-250 ms here, short enough that the worker yields often.
EMBED_BATCH: Final = 64
# Why 2 s: a missed notification (ring overflow) is repaired quickly; an idle check is a cheap query.
IDLE_CHECK_S: Final = 2.0
# Why 30 s: writing the index file costs ~1.5 KB per drawer; after a crash the rest is re-embedded.
SAVE_EVERY_S: Final = 30.0
# Why 60 s: a save that failed (a full disk) is retried this much later, not at every step of the
# worker; the index stays in memory meanwhile, so search is unaffected.
SAVE_RETRY_S: Final = 60.0
#: drawers up to which the index stays exact (``[memory] exact_index_max``)
DEFAULT_EXACT_MAX: Final = 50_000
REBALANCE_GROWTH: Final = 4


def vector_key(drawer_id: str) -> int:
    """The index id of a drawer: 60 bits of its (hex) content-derived id."""
    return int(drawer_id[4:19], 16)


class VectorIndex:
    """Drawer vectors in faiss, keyed by ``vector_key``, saved atomically to ``folder``.

    Up to ``exact_max`` vectors the index is exact (flat inner product: every search compares the
    query with every drawer, ~17 ms at 100k drawers here). Above it, an inverted-file index
    (IVF, flat lists) searches only the lists nearest the query, ~1-2 ms at 100k with recall@10
    ~0.99 against exact search. IVF rather than HNSW because redaction must remove vectors, which
    faiss's HNSW cannot do. ``rebalance`` switches kinds (and retrains IVF as the palace grows).
    """

    def __init__(self, folder: Path, model: str, dim: int, exact_max: int = DEFAULT_EXACT_MAX) -> None:
        import faiss  # imported here: the daemon pays for faiss only once memory is used

        self._faiss = faiss
        self.folder = folder
        self.model = model
        self.dim = dim
        self.exact_max = exact_max
        # Guards swapping/mutating the index against searches. Saving does not take it: only the
        # indexer task mutates, and it saves between mutations (reads may run concurrently).
        self._lock = threading.Lock()
        # One save at a time: two saves share the temporary file names, so a second one running
        # alongside would find its file already renamed by the first (seen in CI).
        self._save_lock = threading.Lock()
        self.index: Any = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self.trained_on = 0  # how many vectors the IVF quantizer was trained on (0: exact index)
        self._keys: set[int] = set()
        self.dirty = False

    def __len__(self) -> int:
        return int(self.index.ntotal)

    @property
    def kind(self) -> str:
        return "ivf" if self.trained_on else "exact"

    def load(self) -> bool:
        """Read the saved index if it was made with the same model; False otherwise."""
        try:
            meta = json.loads((self.folder / META_FILE).read_text())
            if meta.get("model") != self.model or meta.get("dim") != self.dim:
                LOGGER.info("vector index was built with %s; rebuilding for %s", meta.get("model"), self.model)
                return False
            index = self._faiss.read_index(str(self.folder / INDEX_FILE))
            trained_on = int(meta.get("trained_on", 0))
        except (OSError, ValueError, RuntimeError, TypeError):
            return False
        if trained_on:
            # a trained index is an IVF one; faiss types read_index as the base Index
            index.nprobe = _nprobe(index.nlist)  # type: ignore[attr-defined]
        keys = set(self._vectors_of(index)[0].tolist())
        with self._lock:
            self.index, self.trained_on, self._keys = index, trained_on, keys
        return True

    def keys(self) -> set[int]:
        with self._lock:
            return set(self._keys)

    def holds(self, key: int) -> bool:
        """Whether the index has a vector for ``key`` (without copying every key, as ``keys`` does)."""
        with self._lock:
            return key in self._keys

    def add(self, keys: list[int], vectors: np.ndarray) -> None:
        import numpy as np  # imported on use: a daemon without drawers never pays for numpy
        ids = np.asarray(keys, dtype=np.int64)
        with self._lock:
            self.index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), ids)
            self._keys.update(keys)
            self.dirty = True

    def remove(self, keys: list[int]) -> None:
        import numpy as np  # imported on use: a daemon without drawers never pays for numpy
        with self._lock:
            self.index.remove_ids(np.asarray(keys, dtype=np.int64))
            self._keys.difference_update(keys)
            self.dirty = True

    def search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        import numpy as np  # imported on use: a daemon without drawers never pays for numpy
        with self._lock:
            if self.index.ntotal == 0:
                return []
            scores, ids = self.index.search(vector.reshape(1, -1).astype(np.float32), min(k, int(self.index.ntotal)))
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i != -1]

    def needs_rebalance(self) -> bool:
        count = len(self)
        if not self.trained_on:
            return count > self.exact_max
        # Why 4x: IVF lists trained on N vectors stay balanced enough up to a few N; beyond, the
        # lists grow long and searches slow down, so retrain. Back to exact well below the limit
        # only (hysteresis: a palace hovering at the limit must not flip at every drawer).
        return count > REBALANCE_GROWTH * self.trained_on or count < self.exact_max // 2

    def rebalance(self) -> str:
        """Rebuild as the kind the current size calls for; returns the kind. Runs in a thread;
        searches keep using the old index until the new one is swapped in."""
        import numpy as np  # imported on use: a daemon without drawers never pays for numpy
        ids, vectors = self._vectors_of(self.index)
        faiss = self._faiss
        count = len(ids)
        if count <= self.exact_max:
            index = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
            trained_on = 0
        else:
            nlist = _nlist(count)
            index = faiss.IndexIVFFlat(faiss.IndexFlatIP(self.dim), self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
            # Why 64 per list: k-means quality stops improving much beyond it, and training on all
            # 100k vectors would cost several seconds of CPU for nothing.
            sample = np.random.default_rng(count).permutation(count)[: nlist * 64]
            index.train(vectors[np.sort(sample)])
            index.nprobe = _nprobe(nlist)
            trained_on = count
        if count:
            index.add_with_ids(vectors, ids)
        with self._lock:
            # Vectors added meanwhile cannot exist: the indexer that calls this is the only writer.
            self.index, self.trained_on, self._keys = index, trained_on, set(ids.tolist())
            self.dirty = True
        LOGGER.info("vector index rebuilt as %s over %d drawers", self.kind, count)
        return self.kind

    def _vectors_of(self, index: Any) -> tuple[np.ndarray, np.ndarray]:
        """(ids, vectors) of every entry of an exact or IVF index, copied out of faiss."""
        import numpy as np  # imported on use: a daemon without drawers never pays for numpy
        faiss = self._faiss
        count = int(index.ntotal)
        if count == 0:
            return np.zeros(0, dtype=np.int64), np.zeros((0, self.dim), dtype=np.float32)
        if isinstance(index, faiss.IndexIDMap2):
            ids = faiss.vector_to_array(index.id_map).astype(np.int64)
            flat = faiss.downcast_index(index.index)
            vectors = faiss.rev_swig_ptr(flat.get_xb(), count * self.dim).reshape(count, self.dim).copy()
            return ids, vectors
        invlists = faiss.extract_index_ivf(index).invlists
        id_parts, vector_parts = [], []
        for list_no in range(invlists.nlist):
            size = invlists.list_size(list_no)
            if not size:
                continue
            id_parts.append(faiss.rev_swig_ptr(invlists.get_ids(list_no), size).copy())
            codes = faiss.rev_swig_ptr(invlists.get_codes(list_no), size * self.dim * 4)
            vector_parts.append(np.frombuffer(codes.tobytes(), dtype=np.float32).reshape(size, self.dim))
        return np.concatenate(id_parts).astype(np.int64), np.concatenate(vector_parts)

    def save(self) -> None:
        """Write the index and its description, each to a temporary file first, then renamed.

        Raises:
            OSError: a file could not be written (a full disk): the saved files are the previous
                ones, no temporary file is left behind, and the index stays ``dirty``.
        """
        with self._save_lock:
            self._write_files()

    def _write_files(self) -> None:
        data = self._faiss.serialize_index(self.index)
        meta = json.dumps({"model": self.model, "dim": self.dim, "count": len(self), "kind": self.kind,
                           "trained_on": self.trained_on}).encode()
        staged = [(self.folder / f".{INDEX_FILE}.tmp", self.folder / INDEX_FILE, data.tobytes()),
                  (self.folder / f".{META_FILE}.tmp", self.folder / META_FILE, meta)]
        try:
            for tmp, _, content in staged:
                tmp.unlink(missing_ok=True)  # a leftover keeps its old mode: start afresh
                # 0600 like everything in the home: vectors are derived from what agents wrote.
                with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as fh:
                    fh.write(content)
                    fh.flush()
                    os.fsync(fh.fileno())
            for tmp, final, _ in staged:
                os.replace(tmp, final)
            fsync_directory(self.folder)  # the renames themselves survive a power cut
        except OSError:
            for tmp, _, _ in staged:
                tmp.unlink(missing_ok=True)  # a half-written file would only hold on to the space
            raise
        self.dirty = False


def discard_index_files(folder: Path) -> None:
    for name in (META_FILE, INDEX_FILE):
        (folder / name).unlink(missing_ok=True)


def _nlist(count: int) -> int:
    """IVF lists for ``count`` vectors: ~2·sqrt(n) (632 at 100k), the usual faiss guidance range,
    with at least 39 training vectors per list (faiss's own minimum for sound k-means)."""
    return max(1, min(int(2 * count ** 0.5), count // 39))


def _nprobe(nlist: int) -> int:
    """Lists searched per query: ~8% of them, measured at recall@10 ~0.99 against exact search."""
    return min(nlist, max(16, nlist // 12))  # 16 at least: small indexes search more of themselves


def _background_priority() -> None:
    """Run the calling thread (and the threads it starts, e.g. onnxruntime's) at the lowest CPU
    priority: embedding must never slow the append path down, only use idle CPU."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):  # not Linux (per-thread nice is a Linux feature): best effort
        pass


class MemoryIndexer:
    """Keeps the vector index in step with the drawers view, off the append path."""

    def __init__(self, store: AsyncStore, bus: EventBus, embedder: Embedder, folder: Path,
                 exact_max: int = DEFAULT_EXACT_MAX) -> None:
        self.store = store
        self._reads = store.reads(MemoryReads)
        self.exact_max = exact_max
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
        self._synced_fingerprint: tuple[int, int] | None = None
        self._reset_requested = False
        self._reset_done = trio.Event()
        #: what the worker is doing besides embedding ("building the index", "saving the index"), or None
        self.maintenance: str | None = None
        self.last_index_build: dict[str, Any] | None = None
        self._ready = trio.Event()
        #: why the index could not be saved (a full disk), until a save succeeds (None: fine)
        self.save_error: str | None = None
        #: vectors of redacted drawers left the index in memory but not yet its file on disk
        self.purge_pending = False

    def __repr__(self) -> str:
        return f"<MemoryIndexer pending={self.pending} indexed={len(self.index) if self.index else 0}>"

    @property
    def available(self) -> bool:
        return self.index is not None and self.last_error is None

    def status(self) -> dict[str, Any]:
        return {"model": self.embedder.name, "model_loads": getattr(self.embedder, "loads", None),
                "indexed": len(self.index) if self.index else 0, "pending": self.pending, "error": self.last_error,
                "index": self.index.kind if self.index else None, "maintenance": self.maintenance,
                "last_index_build": self.last_index_build, "save_error": self.save_error,
                "vector_purge_pending": self.purge_pending}

    async def run(self) -> NoReturn:
        # Registered before the first sync: nothing committed after it goes unnoticed.
        watch = self.bus.watch_types(MEMORY_TYPES | {"event.redact"})
        last_save = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_bus, watch)
            while True:
                try:
                    await self._sync()
                except EmbeddingError as exc:
                    if self.last_error != str(exc):
                        LOGGER.error("memory search falls back to keywords: %s", exc)
                    self.last_error = str(exc)
                if self._save_due(trio.current_time() - last_save):
                    await self._save()
                    last_save = trio.current_time()
                if self.pending:
                    continue  # more to embed: next batch at once (each batch yields to the loop)
                while not self._changed.is_set():
                    with trio.move_on_after(IDLE_CHECK_S):
                        await self._changed.wait()
                    # A missed notification shows as a changed drawers table; an unchanged one
                    # is not worth listing every drawer id again (100k ids: ~50 ms of CPU).
                    if await self._reads.drawers_fingerprint() != self._synced_fingerprint:
                        break
                    if self._save_due(trio.current_time() - last_save):
                        break  # a failed save is retried even when no drawer changes
                self._changed = trio.Event()

    def _save_due(self, since_save: float) -> bool:
        if self.index is None or not self.index.dirty:
            return False
        if self.purge_pending and self.save_error is None:
            return True  # a redacted drawer's vector must leave the file now, not after the backlog
        if self.save_error is not None:
            return since_save > SAVE_RETRY_S
        return self.pending == 0 or since_save > SAVE_EVERY_S

    async def _save(self) -> None:
        """Save the index; a failure (a full disk) is logged once and retried later, never raised:
        this task runs in the daemon's nursery, and the index is derived state anyway."""
        assert self.index is not None
        self.maintenance = "saving the index"
        try:
            await trio.to_thread.run_sync(self.index.save)
        except OSError as exc:
            message = f"cannot save the vector index in {self.folder}: {exc.strerror or exc}"
            if self.save_error != message:
                LOGGER.warning("%s; retrying every %.0f s (search is unaffected)", message, SAVE_RETRY_S)
            self.save_error = message
        else:
            if self.save_error is not None:
                LOGGER.info("vector index saved again")
            self.save_error = None
            self.purge_pending = False
        finally:
            self.maintenance = None

    async def reset(self) -> dict[str, Any]:
        """Throw the vector index away (files too); the worker re-embeds every drawer. Done by the
        worker at its next step (so a batch being embedded now cannot land in the new index); the
        status returned is from after it (or from now, if the worker is busy for over 10 s)."""
        done = self._reset_done = trio.Event()
        self._reset_requested = True
        self._changed.set()
        with trio.move_on_after(10):
            await done.wait()
        return self.status()

    async def _watch_bus(self, watch: TypeWatch) -> None:
        while True:
            await watch.wait()
            self._changed.set()

    async def _sync(self) -> None:
        fingerprint = await self._reads.drawers_fingerprint()
        reset_done: trio.Event | None = None
        drawers: list[tuple[str, str]] = await self._reads.drawer_ids()
        if not drawers and self.index is None:
            self.pending = 0
            if self._reset_requested:
                self._reset_requested = False
                self._reset_done.set()
            self._synced_fingerprint = fingerprint
            return  # nothing to embed: do not load the model
        if self._reset_requested:
            self._reset_requested = False
            self.index = None
            await trio.to_thread.run_sync(discard_index_files, self.folder)
            LOGGER.info("vector index reset: re-embedding %d drawers", len(drawers))
            reset_done = self._reset_done
        if self.index is None:
            dim = await self._on_model_thread(lambda: self.embedder.dim)
            index = VectorIndex(self.folder, self.embedder.name, dim, self.exact_max)
            await trio.to_thread.run_sync(index.load)
            self.index = index
        self._keys_to_ids = {vector_key(d): d for d, _ in drawers}
        have = await trio.to_thread.run_sync(self.index.keys)
        stale = sorted(have - self._keys_to_ids.keys())
        if stale:
            await trio.to_thread.run_sync(self.index.remove, stale)
            self.purge_pending = True
        missing = [(d, k) for d, k in ((d, vector_key(d)) for d, _ in drawers) if k not in have]
        self.pending = len(missing)
        if reset_done is not None:
            reset_done.set()
        if not missing:
            await self._rebalance_if_due()
            self._synced_fingerprint = fingerprint
            return
        batch = missing[:EMBED_BATCH]
        texts = await self._reads.drawer_contents([d for d, _ in batch])
        present = [(d, k) for d, k in batch if d in texts]
        if present:
            vectors = await self._on_model_thread(self.embedder.embed, [texts[d] for d, _ in present])
            await trio.to_thread.run_sync(self.index.add, [k for _, k in present], vectors)
            self.embedded_total += len(present)
        self.pending = max(0, len(missing) - len(batch))
        self.last_error = None
        await self._rebalance_if_due()
        if not self.pending:
            self._synced_fingerprint = fingerprint

    async def _rebalance_if_due(self) -> None:
        assert self.index is not None
        # Waits until the backlog is embedded (one rebuild, not one per batch), unless searches are
        # already slowing down. On the low-priority model thread: retraining costs seconds of CPU
        # that appends must not feel.
        if self.index.needs_rebalance() and (not self.pending or len(self.index) > 2 * self.exact_max):
            self.maintenance = "building the index"
            started = time.perf_counter()
            try:
                kind = await self._on_model_thread(self.index.rebalance)
            finally:
                self.maintenance = None
            self.last_index_build = {"kind": kind, "drawers": len(self.index),
                                     "seconds": round(time.perf_counter() - started, 3)}

    async def _on_model_thread(self, fn: Any, *args: Any) -> Any:
        future = self._model_thread.submit(fn, *args)
        return await trio.to_thread.run_sync(future.result, abandon_on_cancel=True)

    def close(self) -> None:
        self._model_thread.shutdown(wait=False, cancel_futures=True)

    def not_embedded(self, drawer_ids: Iterable[str]) -> set[str]:
        """Those of ``drawer_ids`` with no vector in the index yet (the worker has not reached them)."""
        index = self.index
        if index is None:
            return set(drawer_ids)
        return {d for d in drawer_ids if not index.holds(vector_key(d))}

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

