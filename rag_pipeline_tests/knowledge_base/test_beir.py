"""BEIR import: a tiny BEIR folder into the real database, and the real SciFact files (read only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from rag_pipeline.cli.main import main
from rag_pipeline.contracts import dataset as dataset_module  # the limits moved from evaluation.dataset
from rag_pipeline.evaluation.datasets.label_check import check_labels
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.knowledge_base import beir, chunking
from rag_pipeline.knowledge_base.beir import import_beir, plan_import, read_beir, read_qrels
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL
from rag_pipeline.knowledge_base.sources import SourceError
from rag_pipeline.service import knowledge_bases as service
from rag_pipeline.service.datasets import check_dataset

CORPUS = [
    {"_id": "d1", "title": "Aspirin and heart attacks",
     "text": "Daily aspirin lowers the risk of myocardial infarction."},
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


def test_read_qrels_skips_header_and_keeps_grade_zero(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "tiny")
    assert read_qrels(folder / "qrels" / "test.tsv") == {"q1": {"d1": 1}, "q2": {"d3": 2, "d2": 1}, "q3": {"d4": 0}}


def test_import_beir_counts_and_ids_resolve(engine, kb_name: str, tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "tiny")
    result, dataset = import_beir(engine, folder, kb_name, k=7)
    assert (result.documents_seen, result.documents_new, result.chunks_inserted) == (5, 5, 5)
    assert result.embeddings_written == 5
    assert dataset["knowledge_base"] == kb_name
    cases = {c["case_id"]: c for c in dataset["cases"]}
    assert set(cases) == {"tiny-q1", "tiny-q2"}, "only queries with a positive judgement become cases"
    assert dataset["metadata"]["skipped_queries"] == [{"query": "q3", "reason": "only grade-0 judgements"}]
    assert dataset["metadata"]["grades"] == "graded", "grades 1 and 2"
    assert all(set(c) == {"case_id", "question", "relevant_chunk_ids", "k"} for c in dataset["cases"])
    assert sorted(cases["tiny-q2"]["relevant_chunk_ids"].values()) == [1, 2]
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
    assert by_doc["d1"].content == ("Aspirin and heart attacks\n\n"
                                    "Daily aspirin lowers the risk of myocardial infarction.")
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
    assert len(docs) == 5 and set(queries) == {"q1", "q2", "q3"} and qrels["q2"] == {"d3": 2, "d2": 1}


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


# A graded collection (grades 0-3) with everything an import must skip, and say so.
GRADED_CORPUS = [
    {"_id": "g1", "title": "Aspirin", "text": "Aspirin lowers the risk of heart attacks."},
    {"_id": "g2", "title": "", "text": "Statins reduce LDL cholesterol."},
    {"_id": "g3", "title": "Sleep", "text": "Short sleep raises blood pressure."},
    {"_id": "g4", "title": "", "text": ""},  # no text at all
    {"_id": "g5", "title": "  ", "text": "\n\t "},  # whitespace only: no chunk
    {"_id": "g6", "title": "Coffee", "text": "Coffee is not linked to cancer."},
]
GRADED_QUERIES = [
    {"_id": "q1", "text": "Does aspirin protect the heart?"},
    {"_id": "q2", "text": "   "},  # empty question
    {"_id": "q3", "text": "What lowers cholesterol?"},
    {"_id": "q4", "text": "Which documents are empty?"},  # every relevant document has no text
    {"_id": "q5", "text": "Judged not relevant only"},  # grade 0 only
    {"_id": "q7", "text": "Unjudged question"},  # not in this split: not a case, not listed
]
GRADED_QRELS = ("query-id\tcorpus-id\tscore\n"
                "q1\tg1\t3\nq1\tg2\t0\nq1\tg3\t1\nq1\tg4\t2\n"
                "q2\tg6\t1\n"
                "q3\tg2\t2\n"
                "q4\tg4\t1\nq4\tg5\t3\n"
                "q5\tg6\t0\n"
                "q6\tg1\t1\n")  # q6 is not in queries.jsonl
EXPECTED_METADATA = {
    "source": "beir", "split": "test", "grades": "graded",
    "skipped_queries": [
        {"query": "q2", "reason": "empty text"},
        {"query": "q4", "reason": "every relevant document was skipped (no text)"},
        {"query": "q5", "reason": "only grade-0 judgements"},
        {"query": "q6", "reason": "not in queries.jsonl"},
    ],
    "skipped_documents": [
        {"document": "g4", "reason": "empty title and text"},
        {"document": "g5", "reason": "title and text are whitespace only"},
    ],
    "dropped_labels": [
        {"query": "q1", "document": "g4", "grade": 2},
        {"query": "q4", "document": "g4", "grade": 1},
        {"query": "q4", "document": "g5", "grade": 3},
    ],
    "zero_grades_omitted": [],
}


def make_graded_beir(root: Path, qrels: str = GRADED_QRELS) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in GRADED_CORPUS), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in GRADED_QUERIES), encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text(qrels, encoding="utf-8")
    return root


def _chunk(kb: str, doc: dict) -> str:
    text = f"{doc['title']}\n\n{doc['text']}" if doc["title"] else doc["text"]
    return str(chunking.chunk_id(kb, doc["_id"], chunking.whole_document(text)[0]))


def _graded_cases(kb: str, folder_name: str, k: int) -> list[dict]:
    by_id = {d["_id"]: d for d in GRADED_CORPUS}
    return [
        {"case_id": f"{folder_name}-q1", "question": "Does aspirin protect the heart?", "k": k,
         "relevant_chunk_ids": {_chunk(kb, by_id["g1"]): 3, _chunk(kb, by_id["g2"]): 0, _chunk(kb, by_id["g3"]): 1}},
        {"case_id": f"{folder_name}-q3", "question": "What lowers cholesterol?", "k": k,
         "relevant_chunk_ids": {_chunk(kb, by_id["g2"]): 2}},
    ]


def test_dataset_limits_match_the_validator() -> None:
    assert (beir.MAX_QUESTION_CHARS, beir.MAX_CASE_ID_CHARS, beir.MAX_RELEVANT_IDS, beir.MAX_CASES, beir.MAX_K) == (
        dataset_module.MAX_QUESTION_CHARS, dataset_module.MAX_CASE_ID_CHARS, dataset_module.MAX_RELEVANT_IDS,
        dataset_module.MAX_CASES, dataset_module.MAX_K)


@pytest.mark.parametrize("score", ["-1", "1.5", "11", "two", "", "1e1"])
def test_read_qrels_refuses_grades_outside_0_to_10(tmp_path: Path, score: str) -> None:
    path = tmp_path / "qrels.tsv"
    path.write_text(f"query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t{score}\n", encoding="utf-8")
    with pytest.raises(SourceError) as exc:
        read_qrels(path)
    assert str(exc.value).startswith(f"{path}:3: score {score!r} (query q1, document d2) is not an integer grade "
                                     "from 0 to 10"), exc.value


def test_read_qrels_accepts_0_to_10(tmp_path: Path) -> None:
    path = tmp_path / "qrels.tsv"
    path.write_text("".join(f"q1\td{g}\t{g}\n" for g in range(11)) + "\n", encoding="utf-8")
    assert read_qrels(path) == {"q1": {f"d{g}": g for g in range(11)}}
    path.write_text("q1\td1\n", encoding="utf-8")
    with pytest.raises(SourceError, match=r"qrels.tsv:1: expected query-id, corpus-id and score"):
        read_qrels(path)


def test_plan_skips_and_lists_everything_it_drops(tmp_path: Path) -> None:
    folder = make_graded_beir(tmp_path / "graded")
    plan = plan_import(folder, "kb-x", k=4)
    assert plan.metadata == {**EXPECTED_METADATA, "folder": str(folder)}
    assert plan.cases == _graded_cases("kb-x", "graded", 4)
    assert [d.original_name for d in plan.documents] == ["g1", "g2", "g3", "g6"], "no document without text"
    assert list(plan.dataset("kb-x")) == ["knowledge_base", "metadata", "cases"], "no name: the file stem names it"


def test_plan_binary_qrels_keep_the_plain_list(tmp_path: Path) -> None:
    # one positive grade (2) besides 0: binary, the list of the positively judged chunks, grade 0 left out
    folder = make_graded_beir(tmp_path / "bin", "q1\tg1\t2\nq1\tg2\t0\nq3\tg2\t2\nq3\tg4\t2\n")
    plan = plan_import(folder, "kb-x")
    by_id = {d["_id"]: d for d in GRADED_CORPUS}
    assert [c["relevant_chunk_ids"] for c in plan.cases] == [[_chunk("kb-x", by_id["g1"])],
                                                             [_chunk("kb-x", by_id["g2"])]]
    assert plan.metadata["grades"] == "binary"
    assert plan.metadata["dropped_labels"] == [{"query": "q3", "document": "g4", "grade": 2}]


def test_plan_refuses_what_would_be_an_invalid_dataset(tmp_path: Path) -> None:
    folder = make_graded_beir(tmp_path / "none", "q2\tg1\t1\nq4\tg4\t1\nq5\tg6\t0\n")
    with pytest.raises(SourceError, match=r"none of the 3 judged queries of split 'test' can become a case \(empty "
                                          r"text; every relevant document was skipped \(no text\); only grade-0"):
        plan_import(folder, "kb-x")
    with pytest.raises(SourceError, match="k must be an integer between 1 and 1000, got 0"):
        plan_import(make_graded_beir(tmp_path / "k0"), "kb-x", k=0)


def test_plan_skips_queries_a_dataset_cannot_hold(tmp_path: Path) -> None:
    folder = make_graded_beir(tmp_path / "limits")
    queries = [*GRADED_QUERIES, {"_id": "q8", "text": "x" * 10_001}, {"_id": "q9", "text": "nul\u0000inside"}]
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text(GRADED_QRELS + "q8\tg1\t1\nq9\tg1\t1\n", encoding="utf-8")
    skipped = {s["query"]: s["reason"] for s in plan_import(folder, "kb-x").metadata["skipped_queries"]}
    assert skipped["q8"] == "text is 10,001 characters; a dataset question is at most 10,000"
    assert skipped["q9"] == "text contains a NUL character"


def test_import_beir_graded_with_skips_writes_a_valid_dataset(engine, kb_name: str, tmp_path: Path) -> None:
    folder = make_graded_beir(tmp_path / "graded")
    out = tmp_path / "datasets" / "graded.json"
    result = service.import_beir(engine, folder, kb_name, out, k=5)
    assert (result.cases, result.documents_seen, result.chunks_inserted) == (2, 4, 4)
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data == {"knowledge_base": kb_name, "metadata": {**EXPECTED_METADATA, "folder": str(folder)},
                    "cases": _graded_cases(kb_name, "graded", 5)}
    printed = result.model_dump()
    for key in ("grades", "skipped_queries", "skipped_documents", "dropped_labels", "zero_grades_omitted"):
        assert printed[key] == EXPECTED_METADATA[key], key
    assert printed["warnings"] == [f"skipped 4 query(ies), 2 document(s) without text, 3 judgement(s) of skipped "
                                   f"documents: listed in the output and in the metadata of {out}"]
    with engine.connect() as conn:
        names = conn.execute(sa.text("SELECT original_name FROM documents WHERE knowledge_base_id = :kb ORDER BY 1"),
                             {"kb": chunking.knowledge_base_id(kb_name)}).scalars().all()
        assert names == ["g1", "g2", "g3", "g6"]
        labels = [i for c in data["cases"] for i in c["relevant_chunk_ids"]]  # grade-0 judgements included
        current = conn.execute(sa.text("SELECT count(*) FROM document_chunks WHERE id::text = ANY(:ids) AND is_current "
                                       "AND knowledge_base_id = :kb"),
                               {"ids": labels, "kb": chunking.knowledge_base_id(kb_name)}).scalar()
        assert (len(labels), current) == (4, 3), "g2 is labelled by two cases: 3 distinct current chunks"
        report = check_labels(conn, kb_name, data["cases"])
    assert report.invalid() == [] and report.rows, report.summary()
    # Needs the dataset validator that accepts a top-level `metadata` object and {chunk_id: grade} labels:
    dataset = load_dataset(out)
    assert dataset.name == "graded" and dataset.knowledge_base == kb_name and len(dataset.cases) == 2
    assert check_dataset(engine, out).report.invalid() == []


def test_import_beir_binary_qrels_write_the_list_form_as_before(engine, kb_name: str, tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "tiny")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\nq2\td2\t1\n"
                                               "q3\td4\t0\n", encoding="utf-8")
    out = tmp_path / "tiny.json"
    result = service.import_beir(engine, folder, kb_name, out)
    by_id = {d["_id"]: d for d in CORPUS}
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["cases"] == [
        {"case_id": "tiny-q1", "question": QUERIES[0]["text"], "relevant_chunk_ids": [_chunk(kb_name, by_id["d1"])],
         "k": 10},
        {"case_id": "tiny-q2", "question": QUERIES[1]["text"],
         "relevant_chunk_ids": [_chunk(kb_name, by_id["d2"]), _chunk(kb_name, by_id["d3"])], "k": 10},
    ]
    assert data["metadata"] == {"source": "beir", "folder": str(folder), "split": "test", "grades": "binary",
                                "skipped_queries": [{"query": "q3", "reason": "only grade-0 judgements"}],
                                "skipped_documents": [], "dropped_labels": [], "zero_grades_omitted": []}
    assert list(data) == ["knowledge_base", "metadata", "cases"]
    assert result.warnings == [f"skipped 1 query(ies): listed in the output and in the metadata of {out}"]
    # Needs the dataset validator that accepts a top-level `metadata` object:
    assert len(load_dataset(out).cases) == 2 and check_dataset(engine, out).report.invalid() == []


def test_bad_grade_fails_before_any_ingestion(engine, kb_name: str, tmp_path: Path) -> None:
    folder = make_graded_beir(tmp_path / "bad", GRADED_QRELS + "q3\tg6\t-1\n")
    out = tmp_path / "bad.json"
    with pytest.raises(SourceError, match=r"test.tsv:12: score '-1' \(query q3, document g6\) is not an integer grade"):
        service.import_beir(engine, folder, kb_name, out)
    assert not out.exists()
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM knowledge_bases WHERE name = :n"),
                            {"n": kb_name}).scalar() == 0
        assert conn.execute(sa.text("SELECT count(*) FROM documents WHERE knowledge_base_id = :kb"),
                            {"kb": chunking.knowledge_base_id(kb_name)}).scalar() == 0


def test_cli_import_beir_lists_skipped_ids(engine, kb_name: str, tmp_path: Path, capsys) -> None:
    folder = make_graded_beir(tmp_path / "graded")
    out = tmp_path / "graded.json"
    capsys.readouterr()
    rc = main(["import-beir", str(folder), "--knowledge-base", kb_name, "--dataset-out", str(out), "--k", "3"])
    stdout, stderr = capsys.readouterr()
    assert rc == 0, stderr
    printed = json.loads(stdout)
    assert printed["cases"] == 2 and printed["grades"] == "graded"
    assert [s["query"] for s in printed["skipped_queries"]] == ["q2", "q4", "q5", "q6"]
    assert [s["document"] for s in printed["skipped_documents"]] == ["g4", "g5"]
    assert printed["dropped_labels"] == EXPECTED_METADATA["dropped_labels"]
    assert "rag-pipeline: warning: skipped 4 query(ies), 2 document(s) without text, 3 judgement(s) of skipped " \
           "documents" in stderr
    assert json.loads(out.read_text(encoding="utf-8"))["metadata"]["skipped_queries"] == printed["skipped_queries"]
    rc = main(["import-beir", str(make_graded_beir(tmp_path / "bad", "q1\tg1\t2.5\n")), "--knowledge-base", kb_name,
               "--dataset-out", str(tmp_path / "bad.json")])
    assert rc == 2 and "rag-pipeline: error: " in capsys.readouterr().err


def test_scifact_plan_is_binary_and_skips_nothing(bench_data: Path) -> None:
    plan = plan_import(bench_data / "scifact", "scifact")
    assert plan.metadata["grades"] == "binary"
    assert [plan.metadata[k] for k in ("skipped_queries", "skipped_documents", "dropped_labels")] == [[], [], []]
    assert len(plan.cases) == 300 and len(plan.documents) == 5183
    assert all(isinstance(c["relevant_chunk_ids"], list) for c in plan.cases), "SciFact stays a list"
    assert sum(len(c["relevant_chunk_ids"]) for c in plan.cases) == 339


@pytest.mark.parametrize("version", ["hybrid-v1", "bm25-v1"])
def test_graded_beir_round_trip_equals_trec_eval_on_the_qrels(engine, kb_name: str, tmp_path: Path, version) -> None:
    """BEIR folder with grades 0-3 → import-beir → evaluate → per-case nDCG@k (and P, R) equal pytrec_eval's
    on the folder's own graded qrels (documents = chunks here) within 1e-9."""
    import pytrec_eval

    from rag_pipeline.evaluation.evaluate import evaluate_dataset
    from rag_pipeline.retrieval.strategies import get_strategy

    folder = make_graded_beir(tmp_path / "roundtrip")
    out = tmp_path / "roundtrip.json"
    service.import_beir(engine, folder, kb_name, out, k=3)
    outcome = evaluate_dataset(engine, load_dataset(out), get_strategy(version))
    doc_of = {_chunk(kb_name, d): d["_id"] for d in GRADED_CORPUS if d["_id"] not in ("g4", "g5")}
    with engine.connect() as conn:
        candidates = conn.execute(sa.text(
            "SELECT case_id, chunk_id::text AS chunk_id, rank FROM retrieval_evaluation_candidates "
            "WHERE evaluation_run_id = :r"), {"r": outcome.run_id}).all()
        stored = {r.case_id: r for r in conn.execute(sa.text(
            "SELECT case_id, k, precision_at_k, recall_at_k, ndcg_at_k FROM retrieval_evaluation_case_results "
            "WHERE evaluation_run_id = :r"), {"r": outcome.run_id})}
    qrels_by_query: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        query, doc, grade = line.split("\t")
        qrels_by_query.setdefault(f"roundtrip-{query}", {})[doc] = int(grade)
    run = {case: {} for case in stored}
    for c in candidates:  # a descending score per rank: trec_eval orders by score
        run[c.case_id][doc_of[c.chunk_id]] = 1000.0 - c.rank
    qrels = {case: {d: g for d, g in qrels_by_query[case].items() if d in doc_of.values()} for case in stored}
    k = 3
    measures = pytrec_eval.RelevanceEvaluator(qrels, {f"ndcg_cut.{k}", f"P.{k}", f"recall.{k}"}).evaluate(run)
    assert set(stored) == {"roundtrip-q1", "roundtrip-q3"}
    for case, row in stored.items():
        assert row.k == k
        assert abs(row.ndcg_at_k - measures[case][f"ndcg_cut_{k}"]) < 1e-9, case
        assert abs(row.precision_at_k - measures[case][f"P_{k}"]) < 1e-9, case
        assert abs(row.recall_at_k - measures[case][f"recall_{k}"]) < 1e-9, case
    assert qrels["roundtrip-q1"] == {"g1": 3, "g2": 0, "g3": 1}, "the case the grades matter for"
