"""Labelling operations: find chunk ids, pool candidates of several strategies for judging, export a dataset.

- :func:`find_chunks` lists a knowledge base's searchable chunks, or searches them: the chunks containing the
  text literally (any script), then the knowledge base's keyword search (BM25 over its text mode: jieba for a
  ``chinese`` KB) and a vector search (its embedding model, USE by default: multilingual) fused by reciprocal
  rank — the retrieval legs of :mod:`rag_pipeline.retrieval.search`, nothing re-implemented.
- :func:`suggest` writes a label draft (:mod:`rag_pipeline.analysis.label_draft`): per question the union of the
  top-``depth`` candidates of several strategies (TREC-style pooling), with text and which strategies found them.
- :func:`export_draft` validates a (judged) draft as a dataset, checks its labels, and writes the dataset file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

from rag_pipeline.analysis.label_draft import (
    Draft,
    DraftCandidate,
    DraftError,
    DraftQuestion,
    export_cases,
    pool_order,
    save_draft,
)
from rag_pipeline.evaluation.dataset import load_dataset, parse_dataset
from rag_pipeline.evaluation.label_check import LabelReport, check_labels
from rag_pipeline.knowledge_base import chunk_lookup
from rag_pipeline.knowledge_base.chunk_lookup import ChunkRow
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.retrieval.search import hybrid_search_batch
from rag_pipeline.retrieval.strategies import Strategy, StrategyError, get_strategy, load_registry
from rag_pipeline.storage.files import FileReadError, read_bounded
from rag_pipeline.storage.names import DATASET, check_name

MAX_LIMIT = 1000
MAX_QUESTIONS_BYTES = 10 * 1024 * 1024
_POOL = 200  # candidates per leg when a search is narrowed to one document


@dataclass(frozen=True)
class FoundChunk:
    """A chunk of a listing or a search: ``rank`` (1-based), ``matched`` = ``phrase`` / ``keyword`` / ``vector``."""

    rank: int
    chunk: ChunkRow
    matched: tuple[str, ...] = ()
    score: float | None = None

    def as_dict(self, search: str | None = None) -> dict:
        c = self.chunk
        return {"rank": self.rank, "chunk_id": c.chunk_id, "document_id": c.document_id,
                "document_name": c.document_name, "ordinal": c.ordinal, "char_start": c.char_start,
                "char_end": c.char_end, "matched": list(self.matched),
                "score": None if self.score is None else round(self.score, 6),
                "snippet": chunk_lookup.snippet(c.text, [search] if search else []), "text": c.text}


@dataclass(frozen=True)
class ChunkListing:
    knowledge_base: str
    knowledge_base_id: str
    search: str | None
    document: str | None
    total: int  # searchable chunks in scope (without a search), or chunks found (with one)
    chunks: list[FoundChunk] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"knowledge_base": self.knowledge_base, "knowledge_base_id": self.knowledge_base_id,
                "search": self.search, "document": self.document, "total": self.total,
                "chunks": [c.as_dict(self.search) for c in self.chunks]}


def search_strategy(models: Sequence[str], candidates: int) -> Strategy:
    """The chunk finder's fused search: BM25 + the KB's vectors (USE when it has them), reciprocal rank fusion."""
    model = DEFAULT_MODEL if DEFAULT_MODEL in models else (models[0] if models else DEFAULT_MODEL)
    return Strategy("chunk-search", embedding_model=model, vector_candidate_k=candidates if models else 0,
                    keyword_candidate_k=candidates, keyword_scorer="bm25", fusion="rrf", vector_weight=1.0,
                    keyword_weight=1.0, ef_search=max(100, candidates), final_top_k=candidates)


def find_chunks(engine: sa.Engine, knowledge_base: str, *, search: str | None = None, document: str | None = None,
                limit: int = 20) -> ChunkListing:
    """The searchable chunks of a knowledge base (name or id): all (document and ordinal order) or those matching
    ``search``; ``document`` (original name or id) narrows to one document."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    search = (search or "").strip() or None
    with engine.begin() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
        doc_id = doc_name = None
        if document:
            doc_id, doc_name = chunk_lookup.resolve_document(conn, kb.id, kb.name, document)
        if search is None:
            rows, total = chunk_lookup.list_chunks(conn, kb.id, document_id=doc_id, limit=limit)
            return ChunkListing(kb.name, str(kb.id), None, doc_name, total,
                                [FoundChunk(i, r) for i, r in enumerate(rows, start=1)])
        phrase = chunk_lookup.phrase_matches(conn, kb.id, search, document_id=doc_id, limit=MAX_LIMIT)
        pool = min(MAX_LIMIT, max(limit * 3, _POOL if doc_id else 30))
        strategy = search_strategy(chunk_lookup.embedding_models(conn, kb.id), pool)
        [trace] = hybrid_search_batch(conn, knowledge_base_id=kb.id, queries=[search], strategy=strategy)
        details = chunk_lookup.chunks_by_ids(conn, [c.chunk_id for c in trace.candidates])
    fused = {c.chunk_id: c for c in trace.candidates if doc_id is None or c.document_id == doc_id}
    literal = {r.chunk_id for r in phrase}
    order = [r.chunk_id for r in sorted(phrase, key=lambda r: (r.chunk_id not in fused,
                                                               fused[r.chunk_id].rank if r.chunk_id in fused else 0))]
    order += [cid for cid in fused if cid not in literal]
    rows = {**details, **{r.chunk_id: r for r in phrase}}
    found = []
    for rank, cid in enumerate(order[:limit], start=1):
        c = fused.get(cid)
        matched = (("phrase",) if cid in literal else ()) + (
            (("keyword",) if c.keyword_rank else ()) + (("vector",) if c.vector_rank else ()) if c else ())
        found.append(FoundChunk(rank, rows[cid], matched, c.final_score if c else None))
    return ChunkListing(kb.name, str(kb.id), search, doc_name, len(order), found)


# --- pooled judging ----------------------------------------------------------------------------------------


def applicable_strategies(conn: sa.Connection, kb) -> list[str]:
    """Registry versions this knowledge base can run: its embedding model is there (or no vector leg), and its
    text mode fits (``kb`` or the KB's own)."""
    models = set(chunk_lookup.embedding_models(conn, kb.id))
    return [v for v, s in load_registry().items()
            if (s.vector_candidate_k == 0 or s.embedding_model in models) and s.text_search in ("kb", kb.text_search)]


def read_questions(path: str | Path, knowledge_base: str, k: int) -> list[DraftQuestion]:
    """Questions of a text file (one per line; blank lines and ``#`` comments skipped; case ids ``q-001``...) or of
    a dataset file (its case ids, k and labels: a labelled chunk keeps its grade as a prior judgment)."""
    path = Path(path)
    try:
        raw = read_bounded(path, MAX_QUESTIONS_BYTES, what="questions file")
    except FileReadError as exc:
        raise DraftError(f"cannot read the questions file {exc}") from None
    if raw.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"[", b"{"):
        dataset = load_dataset(path, knowledge_base=knowledge_base) if path.suffix == ".json" else parse_dataset(
            raw, source=str(path), knowledge_base=knowledge_base)
        return [DraftQuestion(case_id=c.case_id, question=c.question, k=c.k, candidates=[
            _prior(cid, g) for cid, g in c.grades.items()]) for c in dataset.cases]
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DraftError(f"questions file {path} is not UTF-8 text (byte offset {exc.start})") from None
    lines = [line.strip() for line in text.splitlines()]
    questions = [q for q in lines if q and not q.startswith("#")]
    if not questions:
        raise DraftError(f"questions file {path} has no question (one per line; blank lines and # comments are "
                         "skipped)")
    width = max(3, len(str(len(questions))))
    return [DraftQuestion(case_id=f"q-{i:0{width}d}", question=q, k=k, candidates=[])
            for i, q in enumerate(questions, start=1)]


def _prior(chunk_id: str, grade: int) -> DraftCandidate:
    return DraftCandidate(chunk_id=chunk_id, document_id="", document_name="", ordinal=-1, char_start=0, char_end=0,
                          text="", grade=grade)


def suggest(engine: sa.Engine, knowledge_base: str, questions: str | Path, output: str | Path, *,
            strategies: Sequence[str] | None = None, depth: int = 10, k: int = 10,
            name: str | None = None) -> Draft:
    """Pool the top-``depth`` candidates of ``strategies`` (default: every applicable registry version) for every
    question and write the label draft to ``output`` (after every check; nothing is written on an error)."""
    output = Path(output)
    if output.is_dir():
        raise OSError(f"--output {output} is a directory; give a file name (e.g. {output / 'draft.json'})")
    name = name or output.stem.removesuffix(".draft")
    check_name(DATASET, name)
    with engine.begin() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
        asked = read_questions(questions, kb.name, k)
        versions = list(dict.fromkeys(strategies or applicable_strategies(conn, kb)))
        if not versions:
            raise StrategyError(f"no strategy of the registry can search knowledge base {kb.name!r}")
        chosen = [get_strategy(v) for v in versions]
        texts = [q.question for q in asked]
        found: list[dict[str, dict[str, int]]] = [{} for _ in asked]
        for strategy in chosen:
            traces = hybrid_search_batch(conn, knowledge_base_id=kb.id, queries=texts, strategy=strategy,
                                         limits=[depth] * len(texts))
            for i, trace in enumerate(traces):
                for c in trace.candidates[:depth]:
                    found[i].setdefault(c.chunk_id, {})[strategy.version] = c.rank
        prior_ids = [c.chunk_id for q in asked for c in q.candidates]
        details = chunk_lookup.chunks_by_ids(conn, [cid for f in found for cid in f] + prior_ids)
    for q, pool in zip(asked, found, strict=True):
        prior = {c.chunk_id: c.grade for c in q.candidates}
        ordered = sorted(pool, key=lambda cid: (*pool_order(pool[cid]), cid))
        ordered += sorted(cid for cid in prior if cid not in pool)  # labelled, but no strategy found it
        q.candidates = [_candidate(details.get(cid), cid, pool.get(cid, {}), prior.get(cid)) for cid in ordered]
    draft = Draft(knowledge_base=kb.name, name=name, strategies=versions, depth=depth,
                  created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), questions=asked)
    save_draft(draft, output)
    return draft


def _candidate(row: ChunkRow | None, chunk_id: str, found_by: dict[str, int], grade: int | None) -> DraftCandidate:
    if row is None:  # a prior label that is no chunk at all: shown so the judge can drop it
        return DraftCandidate(chunk_id=chunk_id, document_id="", document_name="(no such chunk)", ordinal=-1,
                              char_start=0, char_end=0, text="", found_by=found_by, grade=grade)
    return DraftCandidate(chunk_id=row.chunk_id, document_id=row.document_id, document_name=row.document_name,
                          ordinal=row.ordinal, char_start=row.char_start, char_end=row.char_end, text=row.text,
                          found_by=found_by, grade=grade)


@dataclass(frozen=True)
class DraftExport:
    path: Path
    cases: int
    left_out: list[tuple[str, str]]
    labels: LabelReport


def draft_dataset(draft: Draft, *, binary: bool = False, name: str | None = None) -> tuple[dict, list]:
    """The dataset object of a draft, and the questions left out; :class:`DraftError` when no case is ready."""
    cases, left_out = export_cases(draft, binary=binary)
    if not cases:
        raise DraftError(f"no question of the draft has a candidate judged relevant yet ({len(left_out)} left out): "
                         "nothing to export")
    meta = {"labelled_with": {"strategies": draft.strategies, "depth": draft.depth, "draft_created_at":
                              draft.created_at, "exported_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                              "left_out": [{"case_id": c, "reason": r} for c, r in left_out]}}
    data = {"knowledge_base": draft.knowledge_base, "cases": cases, "metadata": meta}
    if name:
        data = {"name": name, **data}
    return data, left_out


def export_draft(engine: sa.Engine, draft: Draft, output: str | Path, *, binary: bool = False) -> DraftExport:
    """Write the judged questions of ``draft`` as a dataset file, after validating it as a dataset and checking
    every label against the knowledge base (an invalid label refuses the export; nothing is written)."""
    output = Path(output)
    if output.is_dir():
        raise OSError(f"--output {output} is a directory; give a file name")
    data, left_out = draft_dataset(draft, binary=binary)
    text = json.dumps(data, ensure_ascii=False, indent=1) + "\n"
    dataset = parse_dataset(text, source=str(output), default_name=output.stem)  # the file's own rules
    with engine.connect() as conn:
        report = check_labels(conn, dataset.knowledge_base, dataset.cases)
    if report.invalid():
        bad = report.invalid()[0]
        raise DraftError(
            f"not exported: {report.summary()}; e.g. case {bad.case_id}: {bad.chunk_id} {bad.status} — {bad.detail}")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    return DraftExport(output, len(dataset.cases), left_out, report)
