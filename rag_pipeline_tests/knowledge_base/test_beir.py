"""BEIR import: a tiny BEIR folder into the real database, and the real SciFact files (read only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.beir import import_beir, read_beir, read_qrels
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL
from rag_pipeline.knowledge_base.sources import SourceError

CORPUS = [
    {"_id": "d1", "title": "Aspirin and heart attacks", "text": "Daily aspirin lowers the risk of myocardial infarction."},
    {"_id": "d2", "title": "", "text": "Vitamin D supplements do not prevent fractures in older adults."},
    {"_id": "d3", "title": "Sleep", "text": "Short sleep is associated with higher blood pressure. " * 30},
    {"_id": "d4", "title": "Coffee", "text": "Coffee consumption is not linked to cancer mortality."},
    {"_id": "d5", "title": "Exercise", "text": "Regular exercise improves insulin sensitivity."},
]
QUERIES = [
    {"_id": "q1", "text": "Does aspirin prevent heart attacks?"},
    {"_id": "q2", "text": "Is short sleep bad for blood pressure or vitamin D status?"},
    {"_id": "q3", "text": "Does coffee cause cancer?"},  # only a grade-0 judgement: no case
    {"_id": "q4", "text": "Unjudged question about exercise"},  # no judgement: no case
]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t2\nq2\td2\t1\nq3\td4\t0\n"


def make_beir(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in CORPUS) + "\n", encoding="utf-8")
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in QUERIES) + "\n", encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text(QRELS, encoding="utf-8")
    (root / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq4\td5\t1\n", encoding="utf-8")
    return root


def test_read_qrels_skips_header_and_grade_zero(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "tiny")
    assert read_qrels(folder / "qrels" / "test.tsv") == {"q1": {"d1": 1}, "q2": {"d3": 2, "d2": 1}}


def test_import_beir_counts_and_ids_resolve(engine, kb_name: str, tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "tiny")
    result, dataset = import_beir(engine, folder, kb_name, k=7)
    assert (result.documents_seen, result.documents_new, result.chunks_inserted) == (5, 5, 5)
    assert result.embeddings_written == 5
    assert dataset["knowledge_base"] == kb_name
    cases = {c["case_id"]: c for c in dataset["cases"]}
    assert set(cases) == {"tiny-q1", "tiny-q2"}, "only queries with a positive judgement become cases"
    assert all(set(c) == {"case_id", "question", "relevant_chunk_ids", "k"} for c in dataset["cases"])
    assert cases["tiny-q1"]["question"] == "Does aspirin prevent heart attacks?"
    assert all(c["k"] == 7 for c in dataset["cases"])
    assert len(cases["tiny-q1"]["relevant_chunk_ids"]) == 1 and len(cases["tiny-q2"]["relevant_chunk_ids"]) == 2

    with engine.connect() as conn:
        rows = {str(r.id): r for r in conn.execute(sa.text(
            "SELECT c.id, c.content, c.is_current, d.original_name, d.title, c.char_start, c.char_end "
            "FROM document_chunks c JOIN documents d ON d.id = c.document_id WHERE c.knowledge_base_id = :kb"),
            {"kb": chunking.knowledge_base_id(kb_name)})}
        kb_row = conn.execute(sa.text("SELECT text_search, chunk_size FROM knowledge_bases WHERE name = :n"),
                              {"n": kb_name}).one()
        n_emb = conn.execute(sa.text("SELECT count(*) FROM chunk_embeddings WHERE knowledge_base_id = :kb "
                                     "AND model = :m"), {"kb": chunking.knowledge_base_id(kb_name),
                                                         "m": DEFAULT_MODEL}).scalar()
    assert len(rows) == 5 and n_emb == 5
    assert tuple(kb_row) == ("english", 0)
    by_doc = {r.original_name: r for r in rows.values()}
    assert set(by_doc) == {"d1", "d2", "d3", "d4", "d5"}, "one chunk per BEIR document"
    # title + blank line + text, the long document is not cut
    assert by_doc["d1"].content == "Aspirin and heart attacks\n\nDaily aspirin lowers the risk of myocardial infarction."
    assert by_doc["d1"].title == "Aspirin and heart attacks"
    assert by_doc["d2"].content == CORPUS[1]["text"] and by_doc["d2"].title is None
    assert len(by_doc["d3"].content) > 1000
    # relevant ids resolve to existing, current chunk rows of the right documents
    for case_id, docs in (("tiny-q1", ["d1"]), ("tiny-q2", ["d2", "d3"])):
        ids = cases[case_id]["relevant_chunk_ids"]
        assert all(i in rows and rows[i].is_current for i in ids)
        assert sorted(rows[i].original_name for i in ids) == docs


def test_import_beir_other_split_and_reimport_is_idempotent(engine, kb_name: str, tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "tiny")
    _, test_ds = import_beir(engine, folder, kb_name)
    result, dev_ds = import_beir(engine, folder, kb_name, split="dev")
    assert (result.documents_unchanged, result.chunks_inserted, result.embeddings_written) == (5, 0, 0)
    assert [c["case_id"] for c in dev_ds["cases"]] == ["tiny-q4"]
    assert dev_ds["cases"][0]["relevant_chunk_ids"] == [
        str(chunking.chunk_id(kb_name, "d5", chunking.whole_document("Exercise\n\nRegular exercise improves "
                                                                     "insulin sensitivity.")[0]))]
    _, again = import_beir(engine, folder, kb_name)
    assert again == test_ds, "the same corpus gives the same dataset (deterministic ids)"


def test_beir_errors(engine, kb_name: str, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="missing corpus.jsonl"):
        read_beir(tmp_path)
    folder = make_beir(tmp_path / "tiny")
    with pytest.raises(SourceError, match="no qrels/train.tsv or qrels.tsv"):
        read_beir(folder, split="train")
    (folder / "qrels" / "test.tsv").write_text(QRELS + "q1\tmissing-doc\t1\n", encoding="utf-8")
    with pytest.raises(SourceError, match="query q1 .*missing-doc.*not in the corpus"):
        import_beir(engine, folder, kb_name)


def test_flat_qrels_tsv(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "flat")
    (folder / "qrels" / "test.tsv").rename(folder / "qrels.tsv")
    docs, queries, qrels = read_beir(folder)
    assert len(docs) == 5 and set(queries) == {"q1", "q2"} and qrels["q2"] == {"d3": 2, "d2": 1}


def test_scifact_files(bench_data: Path) -> None:
    docs, queries, qrels = read_beir(bench_data / "scifact")
    assert len(docs) == 5183
    assert len({d.original_name for d in docs}) == 5183
    assert len(queries) == 300 and set(queries) == set(qrels)
    assert sum(len(v) for v in qrels.values()) == 339
    corpus_ids = {d.original_name for d in docs}
    missing = {doc for rel in qrels.values() for doc in rel} - corpus_ids
    assert not missing, f"qrels name documents missing from the corpus: {sorted(missing)[:5]}"
    assert all(d.text.strip() for d in docs)
    assert all(len(chunking.whole_document(d.text)) == 1 for d in docs), "one chunk per SciFact document"


def test_scifact_subset(bench_data: Path) -> None:
    docs, queries, qrels = read_beir(bench_data / "scifact", max_docs=50, max_queries=10)
    assert len(queries) == 10 and set(qrels) == set(queries)
    judged = {doc for rel in qrels.values() for doc in rel}
    names = {d.original_name for d in docs}
    assert judged <= names
    assert len(docs) == len(judged) + 50, "every judged document plus the first 50 others"
