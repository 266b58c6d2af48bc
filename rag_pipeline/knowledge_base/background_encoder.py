"""Encoding on a background thread while the main thread talks to the database (ingestion).

:class:`BackgroundEncoder` encodes batches on one worker thread in submission order; every SQL statement stays on
the caller's connection. :func:`encoder_threads` leaves the server one core unless ``RAG_EMBED_THREADS`` says
otherwise (bench/RESULTS.md, "Ingestion vs raw encode")."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import sqlalchemy as sa

from rag_pipeline.settings import get_settings


def encoder_threads(engine: sa.Engine) -> int | None:
    """BLAS threads for encoding next to ``engine``'s server: ``cpu_count - 1`` when the server is on this
    machine and ``RAG_EMBED_THREADS`` is not set, else ``None`` (the embedder's own setting)."""
    cores = os.cpu_count() or 1
    if get_settings().embed_threads is not None or cores < 2:
        return None
    url = engine.url
    host = url.host or str(url.query.get("host") or "")
    local = not host or host.startswith("/") or host in ("localhost", "127.0.0.1", "::1")
    return cores - 1 if local else None


class BackgroundEncoder:
    """Encodes batches on one background thread, in submission order; a context manager that cancels the
    pending batches and waits for the running one on exit (nothing is left running after an error)."""

    def __init__(self, threads: int | None = None) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rag-encode")
        self.encode_s: dict[str, float] = defaultdict(float)  # written by the worker only
        self.threads = threads  # BLAS threads while encoding here (None: the embedder's own)

    def __enter__(self) -> BackgroundEncoder:
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def submit(self, embedder, ids: list, texts: list[str]) -> list[tuple[list, list[str], Future]]:
        """Queue ``texts`` in batches of ``embedder.batch_size`` *distinct* texts: ``[(ids, texts, future of
        vectors)]``, one vector per id; equal texts are encoded once (bit-identical vectors, exact ties)."""
        groups: dict[str, list] = {}
        for chunk_id, text in zip(ids, texts, strict=True):
            groups.setdefault(text, []).append(chunk_id)
        distinct, step, out = list(groups), embedder.batch_size, []
        for i in range(0, len(distinct), step):
            batch = distinct[i:i + step]
            expand = [j for j, text in enumerate(batch) for _ in groups[text]]
            out.append(([cid for text in batch for cid in groups[text]], [batch[j] for j in expand],
                        self._pool.submit(self._encode, embedder, batch, expand)))
        return out

    def _encode(self, embedder, texts: list[str], expand: list[int]) -> np.ndarray:
        t = time.perf_counter()
        try:
            with embedder.limit_threads(self.threads):
                return embedder.embed(texts)[expand]
        finally:
            self.encode_s[embedder.name] += time.perf_counter() - t
