"""Import a BEIR-layout benchmark (``corpus.jsonl``, ``queries.jsonl``, ``qrels.tsv`` or ``qrels/<split>.tsv``).

The corpus becomes a knowledge base with one chunk per BEIR document (title + blank line + text, like
Anserini's title+text runs), so labels stay exact; the qrels become an evaluation dataset in the seed's
format with the real, deterministic chunk ids.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL
from rag_pipeline.knowledge_base.ingestion import IngestionResult, Progress, ingest_documents
from rag_pipeline.knowledge_base.sources import SourceDocument, SourceError


def _jsonl(path: Path):
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise SourceError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None


def _qrels_path(folder: Path, split: str) -> Path:
    for path in (folder / "qrels" / f"{split}.tsv", folder / "qrels.tsv"):
        if path.exists():
            return path
    raise SourceError(f"{folder}: no qrels/{split}.tsv or qrels.tsv")


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as fh:
        for row in csv.reader(fh, delimiter="\t"):
            if not row or row[0] == "query-id":
                continue
            qid, doc_id, score = row[0], row[1], int(row[2])
            if score > 0:
                qrels.setdefault(qid, {})[doc_id] = score
    return qrels


def read_beir(folder: str | Path, split: str = "test", max_docs: int | None = None, max_queries: int | None = None):
    """(documents, queries {id: text}, qrels {qid: {doc_id: grade}}) of a BEIR folder, optionally a subset.

    A subset keeps the first ``max_queries`` judged queries, every document they judge, and the first
    ``max_docs`` other documents (for smoke tests).
    """
    folder = Path(folder)
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not (folder / name).exists():
            raise SourceError(f"{folder}: missing {name} (expected a BEIR-layout folder)")
    qrels = read_qrels(_qrels_path(folder, split))
    queries = {str(q["_id"]): q["text"] for q in _jsonl(folder / "queries.jsonl") if str(q["_id"]) in qrels}
    qids = sorted(queries, key=lambda q: (len(q), q))[: max_queries or None]
    queries = {q: queries[q] for q in qids}
    qrels = {q: qrels[q] for q in qids}
    needed = {d for rel in qrels.values() for d in rel}
    docs, others, seen = [], 0, set()
    for obj in _jsonl(folder / "corpus.jsonl"):
        doc_id = str(obj["_id"])
        if doc_id in seen:
            raise SourceError(f"{folder / 'corpus.jsonl'}: duplicate document _id {doc_id!r}")
        seen.add(doc_id)
        if max_docs is not None and doc_id not in needed:
            if others >= max_docs:
                continue
            others += 1
        title, text = obj.get("title") or "", obj.get("text") or ""
        docs.append(SourceDocument(doc_id, title or None, f"{title}\n\n{text}" if title else text))
    return docs, queries, qrels


def import_beir(
    engine,
    folder: str | Path,
    knowledge_base: str,
    *,
    split: str = "test",
    models: Sequence[str] = (DEFAULT_MODEL,),
    text_search: str = "english",
    k: int = 10,
    max_docs: int | None = None,
    max_queries: int | None = None,
    progress: Progress | None = None,
) -> tuple[IngestionResult, dict]:
    """Ingest the corpus (one chunk per document) and build the dataset dict ``{"knowledge_base", "cases"}``."""
    docs, queries, qrels = read_beir(folder, split, max_docs, max_queries)
    by_name = {d.original_name: d for d in docs}
    for qid, judged in qrels.items():  # before the (long) ingestion: a bad qrels file fails fast
        missing = sorted(set(judged) - by_name.keys())
        if missing:
            raise SourceError(f"{folder}: qrels of query {qid} name document {missing[0]}, which is not in the corpus")
    result = ingest_documents(engine, docs, knowledge_base, text_search=text_search, chunk_size=None,
                              chunk_overlap=0, models=models, progress=progress)
    cases = []
    for qid, question in queries.items():
        relevant = []
        for doc_id in sorted(qrels[qid]):
            doc = by_name[doc_id]
            relevant.extend(str(chunking.chunk_id(knowledge_base, doc_id, c)) for c in chunking.whole_document(doc.text))
        cases.append({"case_id": f"{Path(folder).name}-{qid}", "question": question,
                      "relevant_chunk_ids": relevant, "k": k})
    return result, {"knowledge_base": knowledge_base, "cases": cases}
