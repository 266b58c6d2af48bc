"""The ``cross-encoder`` rerank method (docs/design.md §3.2): a sentence-transformers ``CrossEncoder`` from a local
directory, nothing downloaded; a directory that is not one (``config.json``, one output) is a
:class:`RetrievalError` naming ``rerank.model`` and the path."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rag_pipeline.retrieval.trace import RetrievalError

_CACHE: dict[str, CrossEncoderScorer] = {}
_LOCK = threading.Lock()


class CrossEncoderScorer:
    """A loaded cross-encoder: ``score([(question, text), ...], batch_size)`` → list of floats."""

    def __init__(self, model, path: str) -> None:
        self._model = model
        self.path = path
        self._lock = threading.Lock()  # torch modules are not meant to be called from two threads at once

    def score(self, pairs: Sequence[tuple[str, str]], batch_size: int) -> list[float]:
        if not pairs:
            return []
        with self._lock:
            values = self._model.predict(list(pairs), batch_size=batch_size, show_progress_bar=False,
                                         convert_to_numpy=True)
        values = np.asarray(values, dtype=float)
        if values.ndim != 1:
            raise RetrievalError(f"cross-encoder {self.path} returns {values.shape[-1]} scores per pair; "
                                 "the rerank stage needs a model with one output (a relevance score)")
        return [float(v) for v in values]


def _problem(path: Path) -> str | None:
    """Why ``path`` is not a cross-encoder directory (None: it looks like one)."""
    if not path.exists():
        return "does not exist"
    if not path.is_dir():
        return "is not a directory"
    if not (path / "config.json").is_file():
        return "holds no config.json (not a Hugging Face / sentence-transformers model directory)"
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        st_file = path / "config_sentence_transformers.json"
        st = json.loads(st_file.read_text(encoding="utf-8")) if st_file.is_file() else {}
    except (OSError, ValueError) as exc:
        return f"has an unreadable model configuration ({exc})"
    model_type = st.get("model_type") if isinstance(st, dict) else None
    if model_type not in (None, "CrossEncoder"):
        return f"is a sentence-transformers {model_type}, not a CrossEncoder"
    architectures = config.get("architectures") or [] if isinstance(config, dict) else []
    if model_type is None and not any(str(a).endswith("ForSequenceClassification") for a in architectures):
        if (path / "modules.json").is_file():
            return "is a sentence-transformers embedding model (no sequence-classification head), not a CrossEncoder"
        return (f"is not a cross-encoder: its architectures {architectures} have no sequence-classification "
                "head (an embedding model?)")
    labels = config.get("num_labels") or len(config.get("id2label") or {}) or 1
    if labels != 1:
        return f"is a classifier with {labels} labels, not a cross-encoder with one relevance score"
    return None


def load_cross_encoder(model_path: str, strategy_version: str) -> CrossEncoderScorer:
    """The cross-encoder in the local directory ``model_path`` (loaded once per process)."""
    path = Path(model_path).expanduser()
    key = str(path.resolve())
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
        problem = _problem(path)
        if problem:
            raise RetrievalError(f"strategy {strategy_version}: field 'rerank.model': {model_path} {problem}; "
                                 "name the local directory of a sentence-transformers CrossEncoder "
                                 "(nothing is downloaded)")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import CrossEncoder  # noqa: PLC0415 - torch is an optional extra
        except ImportError as exc:
            raise RetrievalError(f"strategy {strategy_version}: the cross-encoder rerank method needs "
                                 f"sentence-transformers (the 'minilm' extra of rag-pipeline-eval): {exc}") from None
        try:
            model = CrossEncoder(str(path), device="cpu", local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - any loader failure becomes one clear line
            raise RetrievalError(f"strategy {strategy_version}: field 'rerank.model': cannot load the "
                                 f"cross-encoder in {model_path}: {type(exc).__name__}: {exc}") from None
        _CACHE[key] = CrossEncoderScorer(model, str(path))
        return _CACHE[key]
