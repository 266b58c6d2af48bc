"""Graded labels end to end on the real database: a tiny KB, cases graded 0-3, evaluated; per-case metrics
equal trec_eval's (pytrec_eval) on the same graded qrels and run, grades stored per candidate and shown in the
report, grade-0 ids relevant nowhere. Binary datasets unchanged; dataset versions' ``last_seen_at``."""

from __future__ import annotations

import json

import jsonschema
import pytest
import pytrec_eval
import sqlalchemy as sa

from rag_pipeline.contracts.reports import Report, json_schema
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.evaluation.metrics import evaluate_many
from rag_pipeline.evaluation.runs import results as persistence
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline_tests.eval_helpers import build_report, ingest_tiny_kb, tiny_cases, write_dataset

# the report's JSON Schema is generated from its contract (it was a hand-written module)
REPORT_SCHEMA = json_schema(Report)

KB = "eval-graded"


def graded_cases(chunks: dict[str, str]) -> list[dict]:
    """Grades 0-3; one list-form case in the same file."""
    return [
        {"case_id": "backup-graded", "question": "basebackup archiving", "k": 3,
         "relevant_chunk_ids": {chunks["backup.md"]: 3, chunks["coffee.md"]: 1, chunks["monorepo.md"]: 0}},
        {"case_id": "monorepo-graded", "question": "Why keep all services in one repository?", "k": 2,
         "relevant_chunk_ids": {chunks["onboarding.md"]: 1, chunks["monorepo.md"]: 2, chunks["backup.md"]: 0}},
        {"case_id": "onboarding-graded", "question": "What happens in the first week for a new hire?", "k": 3,
         "relevant_chunk_ids": {chunks["vacation-zh.md"]: 2, chunks["onboarding.md"]: 3,
                                chunks["coffee.md"]: 0, chunks["monorepo.md"]: 0}},
        {"case_id": "coffee-zero-top", "question": "office coffee machine descaled", "k": 2,
         "relevant_chunk_ids": {chunks["coffee.md"]: 0, chunks["backup.md"]: 1}},
        {"case_id": "vacation-binary", "question": "年假可以结转几天？", "k": 1,
         "relevant_chunk_ids": [chunks["vacation-zh.md"]]},
    ]


@pytest.fixture(scope="module")
def world(engine, tmp_path_factory):
    folder = tmp_path_factory.mktemp("graded")
    chunks = ingest_tiny_kb(engine, KB, folder / "docs")
    graded = write_dataset(folder / "graded.json", KB, graded_cases(chunks), name="graded-tiny")
    binary = write_dataset(folder / "binary.json", KB, tiny_cases(chunks), name="binary-tiny")
    return chunks, graded, binary


def _stored(engine, run_id):
    with engine.connect() as conn:
        candidates = conn.execute(sa.text(
            "SELECT case_id, chunk_id::text AS chunk_id, rank, is_relevant, relevance_grade "
            "FROM retrieval_evaluation_candidates WHERE evaluation_run_id = :r ORDER BY case_id, rank"),
            {"r": run_id}).all()
        cases = conn.execute(sa.text(
            "SELECT * FROM retrieval_evaluation_case_results WHERE evaluation_run_id = :r ORDER BY case_index"),
            {"r": run_id}).all()
    pools: dict[str, list] = {}
    for c in candidates:
        pools.setdefault(c.case_id, []).append(c)
    return pools, cases


@pytest.mark.parametrize("version", ["hybrid-v1", "keyword-v1"])
def test_graded_dataset_matches_trec_eval(engine, world, version):
    chunks, path, _ = world
    dataset = load_dataset(path)
    assert dataset.name == "graded-tiny" and dataset.is_graded
    outcome = evaluate_dataset(engine, dataset, get_strategy(version), batch_size=2)
    pools, rows = _stored(engine, outcome.run_id)
    assert [r.case_id for r in rows] == [c.case_id for c in dataset.cases]

    qrels = {c.case_id: dict(c.grades) for c in dataset.cases}  # grade-0 judgments included, as trec_eval reads them
    run = {c.case_id: {p.chunk_id: 1.0 / p.rank for p in pools.get(c.case_id, [])} for c in dataset.cases}
    ks = sorted({c.k for c in dataset.cases})
    measures = {f"ndcg_cut.{','.join(map(str, ks))}", f"P.{','.join(map(str, ks))}",
                f"recall.{','.join(map(str, ks))}"}
    trec = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    for case, row in zip(dataset.cases, rows, strict=True):
        theirs = trec.get(case.case_id, {})
        assert row.ndcg_at_k == pytest.approx(theirs.get(f"ndcg_cut_{case.k}", 0.0), abs=1e-9), case.case_id
        assert row.precision_at_k == pytest.approx(theirs.get(f"P_{case.k}", 0.0), abs=1e-9), case.case_id
        assert row.recall_at_k == pytest.approx(theirs.get(f"recall_{case.k}", 0.0), abs=1e-9), case.case_id

        # grades stored per candidate: the case's grade (0 kept), NULL when not judged; relevant = grade >= 1
        grades = case.grades
        for p in pools.get(case.case_id, []):
            assert p.relevance_grade == grades.get(p.chunk_id), (case.case_id, p.chunk_id)
            assert p.is_relevant == (grades.get(p.chunk_id, 0) >= 1)
        # case results: relevant ids = grade >= 1 (the recall denominator), every judgment kept
        assert row.relevant_chunk_ids == list(case.relevant_chunk_ids)
        assert row.relevance_grades == grades
        assert {m["chunk_id"] for m in row.miss_reasons} == set(case.relevant_chunk_ids), "no reason for grade 0"

    if version == "hybrid-v1":  # the vector leg returns all 5 chunks: every grade-0 chunk is in a pool
        zero = [p for pool in pools.values() for p in pool if p.relevance_grade == 0]
        assert len(zero) == 5 and not any(p.is_relevant for p in zero)
    # the first relevant rank is the grade >= 1 chunk's, whatever rank the grade-0 chunk has
    by_case = {r.case_id: r for r in rows}
    ranks = {p.chunk_id: p.rank for p in pools.get("coffee-zero-top", [])}
    assert by_case["coffee-zero-top"].first_relevant_rank == ranks.get(chunks["backup.md"])
    labels = outcome.summary.label_integrity.counts
    assert labels == {"ok": sum(len(c.relevant_chunk_ids) for c in dataset.cases)}, "grade-0 ids are not checked"
    assert outcome.summary.relevant_total == sum(len(c.relevant_chunk_ids) for c in dataset.cases)


def test_stored_version_and_report_keep_the_grades(engine, world):
    _, path, _ = world
    dataset = load_dataset(path)
    outcome = evaluate_dataset(engine, dataset, get_strategy("hybrid-v1"))
    with engine.connect() as conn:
        stored = persistence.load_stored_dataset(conn, outcome.dataset_id)
        cases_json = conn.execute(sa.text("SELECT cases FROM retrieval_evaluation_datasets WHERE id = :id"),
                                  {"id": outcome.dataset_id}).scalar_one()
        report = build_report(conn, outcome.run_id)
    assert stored.cases == dataset.cases and stored.content_hash == dataset.content_hash
    assert cases_json[0]["relevant_chunk_ids"] == dataset.cases[0].grades, "grade 0 kept in the stored version"
    jsonschema.validate(report, REPORT_SCHEMA, format_checker=jsonschema.FormatChecker())
    assert report["report_version"] == 4
    for case, entry in zip(dataset.cases, report["cases"], strict=True):
        assert entry["relevance_grades"] == case.grades
        assert entry["relevant_chunk_ids"] == list(case.relevant_chunk_ids)
        for cand in entry["candidates"]:
            assert cand["relevance_grade"] == case.grade(cand["chunk_id"])
            assert cand["is_relevant"] == ((cand["relevance_grade"] or 0) >= 1)


def test_binary_dataset_is_evaluated_as_before(engine, world):
    _, _, path = world
    dataset = load_dataset(path)
    assert not dataset.is_graded
    outcome = evaluate_dataset(engine, dataset, get_strategy("hybrid-v1"))
    pools, rows = _stored(engine, outcome.run_id)
    expected = evaluate_many([[p.chunk_id for p in pools[c.case_id]] for c in dataset.cases],
                             [set(c.relevant_chunk_ids) for c in dataset.cases], [c.k for c in dataset.cases])
    for i, row in enumerate(rows):
        for metric, values in expected.items():
            assert getattr(row, metric) == pytest.approx(float(values[i]), abs=1e-12)
        assert row.relevance_grades == dict.fromkeys(row.relevant_chunk_ids, 1)
    for case in dataset.cases:
        for p in pools[case.case_id]:
            assert p.relevance_grade == (1 if p.chunk_id in case.relevant_chunk_ids else None)
            assert p.is_relevant == (p.chunk_id in case.relevant_chunk_ids)


def test_storing_a_version_again_moves_its_last_seen_at(engine, world, tmp_path):
    chunks, _, _ = world
    first = load_dataset(write_dataset(tmp_path / "x.json", KB, tiny_cases(chunks)[:2], name="seen-tiny"))
    second = load_dataset(write_dataset(tmp_path / "x.json", KB, tiny_cases(chunks)[:3], name="seen-tiny"))
    assert first.content_hash != second.content_hash

    def store(dataset):
        with engine.begin() as conn:
            return persistence.store_dataset(conn, dataset, KB)

    def latest():
        with engine.connect() as conn:
            return conn.execute(sa.text(
                "SELECT id FROM retrieval_evaluation_datasets WHERE name = 'seen-tiny' AND knowledge_base_name = :kb "
                "ORDER BY last_seen_at DESC LIMIT 1"), {"kb": KB}).scalar_one()

    def seen(dataset_id):
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT created_at, last_seen_at FROM retrieval_evaluation_datasets "
                                        "WHERE id = :id"), {"id": dataset_id}).one()

    a = store(first)
    created, seen_a = seen(a)
    assert seen_a == created
    b = store(second)
    assert latest() == b
    assert store(first) == a, "the same content is the same version"
    again = seen(a)
    assert again.created_at == created and again.last_seen_at > seen_a
    assert latest() == a, "the version stored last is the latest"
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM retrieval_evaluation_datasets WHERE name = 'seen-tiny'")
                            ).scalar_one() == 2


def test_the_graded_file_through_the_cli(engine, world, tmp_path, capsys):
    from rag_pipeline.cli import main

    _, path, _ = world
    out = tmp_path / "report.json"
    assert main(["evaluate", "--dataset", str(path), "--strategy", "keyword-v1", "--output", str(out),
                 "--quiet"]) == 0
    capsys.readouterr()
    written = sorted(tmp_path.glob("report*.json"))
    assert written, "evaluate --output wrote a report"
    report = json.loads(written[0].read_text(encoding="utf-8"))
    jsonschema.validate(report, REPORT_SCHEMA)
    grades = {c["case_id"]: c["relevance_grades"] for c in report["cases"]}
    assert 0 in grades["backup-graded"].values() and max(grades["onboarding-graded"].values()) == 3
