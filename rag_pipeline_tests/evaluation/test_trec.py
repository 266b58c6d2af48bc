"""TREC run files and qrels on the real database and the demo knowledge base: an imported run's metrics equal
trec_eval's (pytrec_eval) on the files the test writes, bad lines are named and store nothing, import → export is
byte-equal, and a built-in run exported and imported again scores the same."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest
import pytrec_eval
import sqlalchemy as sa

from rag_pipeline.cli.main import main
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.evaluation.trec.lines import EXTERNAL_ID_NAMESPACE, TrecFileError, chunk_uuid
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline.service import trec

ROOT = Path(__file__).resolve().parents[2]
METRICS = ("precision_at_k", "recall_at_k", "ndcg_at_k", "average_precision_at_k", "r_precision", "hit_at_k")
TREC_NAMES = {"precision_at_k": "P_{k}", "recall_at_k": "recall_{k}", "ndcg_at_k": "ndcg_cut_{k}",
              "average_precision_at_k": "map_cut_{k}", "r_precision": "Rprec", "hit_at_k": "success_{k}"}


def _chunk_ids(engine, kb: str) -> list[str]:
    with engine.connect() as conn:
        return [str(r[0]) for r in conn.execute(sa.text(
            "SELECT c.id FROM document_chunks c JOIN knowledge_bases k ON k.id = c.knowledge_base_id "
            "WHERE k.name = :kb AND c.is_current ORDER BY c.id"), {"kb": kb})]


def _counts(engine) -> tuple[int, int, int]:
    with engine.connect() as conn:
        return tuple(conn.execute(sa.text(  # type: ignore[return-value]
            "SELECT (SELECT count(*) FROM retrieval_evaluation_runs), "
            "(SELECT count(*) FROM retrieval_evaluation_datasets), (SELECT count(*) FROM external_chunk_ids)")).one())


@pytest.fixture(scope="module")
def graded(demo_kb, engine, tmp_path_factory) -> Path:
    """The demo cases graded 1-3, a grade-0 judgment on some, and one unanswerable case, as a dataset file."""
    demo = json.loads((ROOT / "datasets" / "demo.json").read_text(encoding="utf-8"))
    rng = random.Random(3)
    chunks = _chunk_ids(engine, demo_kb)
    cases = []
    for i, case in enumerate(demo["cases"]):
        grades = {cid: rng.randint(1, 3) for cid in case["relevant_chunk_ids"]}
        if i % 3 == 0:
            grades[rng.choice([c for c in chunks if c not in grades])] = 0
        cases.append({**case, "relevant_chunk_ids": grades})
    cases.append({"case_id": "nothing-001", "question": "What is the office cat called?", "k": 5,
                  "relevant_chunk_ids": [], "answerable": False})
    path = tmp_path_factory.mktemp("trec") / "trec-graded.json"
    path.write_text(json.dumps({"knowledge_base": demo_kb, "cases": cases}), encoding="utf-8")
    return path


def _qrels(dataset) -> dict[str, dict[str, int]]:
    return {c.case_id: dict(c.grades) for c in dataset.cases if c.answerable}


def _write_run(path: Path, rows: list[tuple[str, str, float]], rng: random.Random) -> None:
    """Lines in shuffled order, a meaningless rank column, mixed whitespace: trec_eval ignores all three."""
    rng.shuffle(rows)
    path.write_text("".join(f"{q} Q0\t{d}  {rng.randint(1, 5)} {s} tag\n" for q, d, s in rows), encoding="utf-8")


def test_an_imported_run_scores_as_trec_eval(engine, demo_kb, graded, tmp_path, capsys) -> None:
    dataset = load_dataset(graded)
    rng = random.Random(11)
    chunks = _chunk_ids(engine, demo_kb)
    rows: list[tuple[str, str, float]] = []
    answerable = [c for c in dataset.cases if c.answerable]
    skipped = answerable[4].case_id  # no line: an empty ranking
    for case in dataset.cases:
        if case.case_id == skipped:
            continue
        ranked = rng.sample(chunks, 25)
        for cid in case.relevant_chunk_ids:
            if rng.random() < 0.7 and cid not in ranked:
                ranked[rng.randrange(25)] = cid
        for j, cid in enumerate(dict.fromkeys(ranked)):
            rows.append((case.case_id, cid, float(rng.choice([1.0, 0.5, 0.25])) if j % 4 == 0 else rng.random()))
    rows += [("not-a-case-1", chunks[0], 1.0), ("not-a-case-2", chunks[1], 1.0), ("not-a-case-2", chunks[2], 0.5)]
    run_file = tmp_path / "my.run"
    _write_run(run_file, rows, rng)

    result = trec.import_run(engine, run_file, strategy="my-retriever", dataset=str(graded))
    assert (result.unknown_topics, result.unknown_topic_lines) == (2, 3)
    assert result.unknown_topic_examples == ["not-a-case-1", "not-a-case-2"]
    assert result.cases_without_lines == 1  # the skipped case
    assert result.lines == len(rows) and result.lines_stored == len(rows) - 3 and not result.external_ids

    run: dict[str, dict[str, float]] = {}
    for q, d, s in rows:
        run.setdefault(q, {})[d] = s
    ks = sorted({c.k for c in dataset.cases})
    cut = ",".join(map(str, ks))
    trec_eval = pytrec_eval.RelevanceEvaluator(
        _qrels(dataset), {f"P.{cut}", f"recall.{cut}", f"ndcg_cut.{cut}", f"map_cut.{cut}", "Rprec",
                          f"success.{cut}"}).evaluate(run)
    with engine.connect() as conn:
        stored = {r.case_id: r for r in conn.execute(sa.text(
            "SELECT * FROM retrieval_evaluation_case_results WHERE evaluation_run_id = :r"), {"r": result.run_id})}
        pools = conn.execute(sa.text(
            "SELECT case_id, chunk_id::text AS chunk_id, rank, final_score FROM retrieval_evaluation_candidates "
            "WHERE evaluation_run_id = :r ORDER BY case_id, rank"), {"r": result.run_id}).all()
    assert set(stored) == {c.case_id for c in dataset.cases}
    with engine.connect() as conn:
        summary = conn.execute(sa.text("SELECT summary FROM retrieval_evaluation_runs WHERE id = :r"),
                               {"r": result.run_id}).scalar()
    assert summary["relevant_ids_not_in_kb"] == 0 and summary["miss_reasons"]["counts"]["hit"] > 0
    means = dict.fromkeys(METRICS, 0.0)
    for case in answerable:
        theirs = trec_eval.get(case.case_id)
        assert (theirs is None) == (case.case_id == skipped)
        for metric in METRICS:
            expected = 0.0 if theirs is None else theirs[TREC_NAMES[metric].format(k=case.k)]
            assert getattr(stored[case.case_id], metric) == pytest.approx(expected, abs=1e-12), (case.case_id, metric)
            means[metric] += expected / len(answerable)  # trec_eval -c: a topic without lines counts as 0
    for metric in METRICS:
        assert result.metrics[metric] == pytest.approx(means[metric], abs=1e-12), metric

    # the stored order is trec_eval's: score descending, ties by docno descending; the whole list is the pool
    by_case: dict[str, list] = {}
    for p in pools:
        by_case.setdefault(p.case_id, []).append(p)
    for case_id, pool in by_case.items():
        expected_order = sorted(run[case_id].items(), key=lambda ds: (-ds[1], [-ord(ch) for ch in ds[0]]))
        assert [(p.chunk_id, p.final_score) for p in pool] == expected_order
    assert len(pools) == result.lines_stored
    assert stored[skipped].retrieved_chunk_ids == []

    # miss reasons from the stored pool: in the pool below k, or not in it
    for case in answerable:
        ranks = {p.chunk_id: p.rank for p in by_case.get(case.case_id, [])}
        for m in stored[case.case_id].miss_reasons:
            rank = ranks.get(m["chunk_id"])
            want = "not_in_pool" if rank is None else "hit" if rank <= case.k else "below_cutoff"
            assert m["reason"] == want, (case.case_id, m)

    # an ordinary run: `show` reads it, `runs` lists it
    assert main(["show", result.run_id, "--format", "text"]) == 0
    assert main(["runs", "--strategy", "my-retriever", "--format", "json"]) == 0
    # the CLI says what it stored and what it left out; the same file gives the same metrics
    capsys.readouterr()
    assert main(["trec", "import-run", str(run_file), "--strategy", "my-retriever", "--dataset", str(graded)]) == 0
    out, err = capsys.readouterr()
    assert f"{len(rows) - 3:,} of {len(rows):,} lines, {len(dataset.cases)} cases" in out
    assert f"ndcg_at_k={result.metrics['ndcg_at_k']:.4f}" in out
    assert "1 case(s) of the dataset have no line in the file" in err
    assert "2 topic(s) of the file (3 lines) are no case of the dataset" in err and "not-a-case-1" in err


@pytest.mark.parametrize(("line", "field", "reason"), [
    ("q1 Q0 d1 1 0.5", "tag", "5 fields, expected 6"),
    ("q1 Q0 d1 1 0.5 tag extra", None, "7 fields"),
    ("q1 Q0 d1 1 high tag", "score", "'high' is not a number"),
    ("q1 Q0 d1 1 nan tag", "score", "not a finite number"),
    ("q1 Q0 d1 1 inf tag", "score", "not a finite number"),
    ("q1 Q0 d\x001 1 0.5 tag", None, "holds a NUL character (byte 8 of the line)"),
])
def test_a_bad_line_is_named_and_nothing_is_stored(engine, demo_kb, graded, tmp_path, line, field, reason,
                                                   capsys) -> None:
    dataset = load_dataset(graded)
    good = [f"{c.case_id} Q0 doc-{i} {i} {1.0 / (i + 1)} t\n" for i, c in enumerate(dataset.cases)]
    run_file = tmp_path / "bad.run"
    run_file.write_text("".join(good[:3]) + "\n" + line + "\n" + "".join(good[3:]), encoding="utf-8")
    before = _counts(engine)
    with pytest.raises(TrecFileError) as caught:
        trec.import_run(engine, run_file, strategy="bad-file", dataset=str(graded))
    assert (caught.value.line, caught.value.field) == (5, field)
    assert reason in str(caught.value) and f"{run_file}:5: " in str(caught.value)
    assert _counts(engine) == before
    # the CLI: the same message, exit 2, no traceback
    assert main(["trec", "import-run", str(run_file), "--strategy", "bad-file", "--dataset", str(graded)]) == 2
    err = capsys.readouterr().err
    assert f"{run_file}:5: " in err and "Traceback" not in err


@pytest.mark.parametrize("grouped", [True, False], ids=["topic-by-topic", "topics-interleaved"])
def test_a_duplicate_pair_is_refused_with_both_lines(engine, demo_kb, graded, tmp_path, grouped) -> None:
    case = load_dataset(graded).cases[0].case_id
    run_file = tmp_path / "dup.run"
    middle = f"{case} Q0 c 3 2 t\n" if grouped else "other Q0 a 1 1 t\n"  # the check streams, else SQL
    run_file.write_text(f"{case} Q0 a 1 3 t\n{case} Q0 b 2 2 t\n{middle}{case} Q0 a 3 1 t\nlast Q0 z 1 1 t\n",
                        encoding="utf-8")
    before = _counts(engine)
    with pytest.raises(TrecFileError, match=r"dup\.run:4: field docno: .* document a twice \(first at line 1\)"):
        trec.import_run(engine, run_file, strategy="dup-file", dataset=str(graded))
    assert _counts(engine) == before


def test_import_then_export_is_byte_equal_and_external_ids_come_back(engine, demo_kb, graded, tmp_path,
                                                                     capsys) -> None:
    dataset = load_dataset(graded)
    chunks = _chunk_ids(engine, demo_kb)
    rng = random.Random(5)
    lines = []
    for case in dataset.cases[:12]:
        docs = [*rng.sample(chunks, 6), *(f"ext-{rng.randint(0, 50)}" for _ in range(4)), "ÜBER/doc#1",
                "back\\slash\\N"]  # a backslash: COPY's escape
        scored = {d: rng.choice([0.5, 2.0, rng.random()]) for d in docs}
        ordered = sorted(scored.items(), key=lambda ds: (-ds[1], [-b for b in ds[0].encode()]))
        lines += [f"{case.case_id} Q0 {d} {r} {s!r} ext-run\n" for r, (d, s) in enumerate(ordered, start=1)]
    original = tmp_path / "canonical.run"
    original.write_bytes("".join(lines).encode())
    result = trec.import_run(engine, original, strategy="ext-run", dataset=str(graded))
    assert result.external_ids
    exported = tmp_path / "exported.run"
    written = trec.export_run(engine, result.run_id, exported)
    assert exported.read_bytes() == original.read_bytes()
    assert written.files == {str(exported): len(lines)}
    # the derived ids are uuid5 of (knowledge base, docno); canonical UUIDs map to themselves
    derived, is_derived = chunk_uuid(demo_kb, "ext-7")
    assert is_derived and derived == uuid.uuid5(EXTERNAL_ID_NAMESPACE, f"{demo_kb}\x1fext-7")
    assert chunk_uuid(demo_kb, chunks[0]) == (uuid.UUID(chunks[0]), False)
    assert chunk_uuid(demo_kb, chunks[0].upper())[1], "only the canonical form is the chunk itself"
    # an ordinary run, external documents and all
    for fmt in ("text", "json", "jsonl"):
        assert main(["show", result.run_id, "--format", fmt, "--candidates", "all", "--include-text"]) == 0, fmt
    capsys.readouterr()
    assert main(["show", result.run_id, "--case", dataset.cases[0].case_id, "--global-ranks"]) == 2
    assert "is an external strategy (an imported ranking)" in capsys.readouterr().err


def test_a_dataset_exported_as_qrels_and_topics_imports_as_the_same_version(engine, demo_kb, graded,
                                                                            tmp_path) -> None:
    dataset = load_dataset(graded)
    qrels, topics = tmp_path / "d.qrels", tmp_path / "d.topics.jsonl"
    assert main(["trec", "export-qrels", "--dataset", str(graded), "--qrels", str(qrels), "--topics",
                 str(topics)]) == 0
    first = qrels.read_text(encoding="utf-8").splitlines()[0].split()
    case0 = dataset.cases[0]
    assert first == [case0.case_id, "0", next(iter(case0.grades)), str(next(iter(case0.grades.values())))]
    assert json.loads(topics.read_text(encoding="utf-8").splitlines()[-1]) == {
        "qid": "nothing-001", "question": "What is the office cat called?", "k": 5, "answerable": False}
    name, dataset_id, cases = trec.import_dataset(engine, qrels, topics, name="trec-graded", knowledge_base=demo_kb)
    assert (name, cases) == ("trec-graded", len(dataset.cases))
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT content_hash FROM retrieval_evaluation_datasets WHERE id = :id"),
                              {"id": dataset_id}).scalar()
    assert stored == dataset.content_hash, "the same cases: the same version"
    # the demo's list-form cases come back as lists: the same version too
    demo = load_dataset(ROOT / "datasets" / "demo.json")
    trec.export_dataset(engine, str(ROOT / "datasets" / "demo.json"), qrels, topics)
    _, demo_id, _ = trec.import_dataset(engine, qrels, topics, name="demo", knowledge_base=demo_kb)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT content_hash FROM retrieval_evaluation_datasets WHERE id = :id"),
                            {"id": demo_id}).scalar() == demo.content_hash

    # string docnos: stored under derived ids, exported back as written
    ext_qrels, ext_topics = tmp_path / "ext.qrels", tmp_path / "ext.topics.jsonl"
    ext_qrels.write_text("t1 0 doc-a 2\nt1 0 doc-b 0\nt2 0 doc-c 1\n", encoding="utf-8")
    ext_topics.write_text('{"qid": "t1", "question": "first?"}\n{"qid": "t2", "question": "second?", "k": 3}\n',
                          encoding="utf-8")
    trec.import_dataset(engine, ext_qrels, ext_topics, name="ext-labels", knowledge_base=demo_kb)
    back_qrels, back_topics = tmp_path / "back.qrels", tmp_path / "back.topics.jsonl"
    trec.export_dataset(engine, "ext-labels", back_qrels, back_topics, knowledge_base=demo_kb)
    got = sorted(back_qrels.read_text(encoding="utf-8").splitlines())
    assert got == ["t1 0 doc-a 2", "t1 0 doc-b 0", "t2 0 doc-c 1"]
    assert [json.loads(t)["k"] for t in back_topics.read_text(encoding="utf-8").splitlines()] == [10, 3]


@pytest.mark.parametrize(("qrels", "topics", "where"), [
    ("t1 0 d 1\nt9 0 d 1\n", '{"qid": "t1", "question": "q?"}\n', ("qrels", 2, "qid")),
    ("t1 0 d 1\nt1 0 d 2\n", '{"qid": "t1", "question": "q?"}\n', ("qrels", 2, "docno")),
    ("t1 0 d high\n", '{"qid": "t1", "question": "q?"}\n', ("qrels", 1, "grade")),
    ("t1 0 d 0\n", '{"qid": "t1", "question": "q?"}\n', ("topics", 1, "qid")),
    ("t1 0 d 1\n", '{"qid": "t1", "question": "q?"}\n{"qid": "t1", "question": "again"}\n', ("topics", 2, "qid")),
    ("t1 0 d 1\n", '{"qid": "t1"}\n', ("topics", 1, "question")),
])
def test_bad_qrels_or_topics_are_named_and_nothing_is_stored(engine, demo_kb, tmp_path, qrels, topics,
                                                             where) -> None:
    files = {"qrels": tmp_path / "x.qrels", "topics": tmp_path / "x.topics.jsonl"}
    files["qrels"].write_text(qrels, encoding="utf-8")
    files["topics"].write_text(topics, encoding="utf-8")
    before = _counts(engine)
    with pytest.raises(TrecFileError) as caught:
        trec.import_dataset(engine, files["qrels"], files["topics"], name="bad-labels", knowledge_base=demo_kb)
    assert (caught.value.path, caught.value.line, caught.value.field) == (str(files[where[0]]), *where[1:])
    assert _counts(engine) == before


def test_a_built_in_run_exported_and_imported_scores_the_same(engine, demo_kb, graded, tmp_path, capsys) -> None:
    dataset = load_dataset(graded)
    outcome = evaluate_dataset(engine, dataset, get_strategy("hybrid-v1"))
    run_file = tmp_path / "hybrid.run"
    with_ties = trec.export_run(engine, outcome.run_id, run_file)
    assert with_ties.tied_scores > 0, "hybrid-v1 breaks score ties by vector score, then chunk id"
    exported = trec.export_run(engine, outcome.run_id, run_file, scores="rank")
    assert exported.tied_scores == 0
    result = trec.import_run(engine, run_file, strategy="hybrid-v1-file", dataset=str(graded))
    assert result.metrics == pytest.approx(outcome.averages, abs=1e-12)
    with engine.connect() as conn:
        per_case = conn.execute(sa.text(
            "SELECT a.case_id, a.retrieved_chunk_ids = b.retrieved_chunk_ids AS same_top, "
            "a.ndcg_at_k = b.ndcg_at_k AND a.average_precision_at_k = b.average_precision_at_k AS same_metrics "
            "FROM retrieval_evaluation_case_results a JOIN retrieval_evaluation_case_results b USING (case_id) "
            "WHERE a.evaluation_run_id = :a AND b.evaluation_run_id = :b"),
            {"a": outcome.run_id, "b": result.run_id}).all()
    assert len(per_case) == len(dataset.cases) and all(r.same_top and r.same_metrics for r in per_case)
    # a built-in strategy's name is not an imported run's
    with pytest.raises(Exception, match="a strategy of the project's own"):
        trec.import_run(engine, run_file, strategy="hybrid-v1", dataset=str(graded))
    # compare puts the imported run against the built-in one with paired significance
    capsys.readouterr()
    code = main(["compare", "--dataset", str(graded), "--baseline", "hybrid-v1", "--format", "json"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    assert "hybrid-v1-file" in out and "p_value" in out
