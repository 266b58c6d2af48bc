"""Judged@k and closing the pooling loop on the real database: Judged@k equals ir_measures' rule computed here
from the run files and qrels; `compare` warns about a strategy whose top k is mostly unjudged; `suggest --from-run`
drafts exactly the unjudged top-k chunks; judged in the terminal labeller and exported, the new labels re-score the
stored runs (`runs rescore`) as trec_eval scores the same rankings on them, without searching or embedding."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import pytrec_eval
import sqlalchemy as sa

from rag_pipeline.cli.label_terminal import Labeller
from rag_pipeline.cli.main import main
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.evaluation.metrics import evaluate_many, judged_at_k
from rag_pipeline.evaluation.runs.judged import NOTHING_RETRIEVED
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline.service import analysis, evaluations, trec
from rag_pipeline.service.labelling.drafts import export_draft, load_draft
from rag_pipeline_tests.eval_helpers import write_dataset

KB = "judged-kb"
NAME = "judged-demo"
METRICS = ("precision_at_k", "recall_at_k", "ndcg_at_k", "average_precision_at_k")
TREC = {"precision_at_k": "P_{k}", "recall_at_k": "recall_{k}", "ndcg_at_k": "ndcg_cut_{k}",
        "average_precision_at_k": "map_cut_{k}"}


def ir_measures_judged(qrels: dict[str, int], run: dict[str, float], cutoff: int) -> float:
    """ir_measures' Judged@cutoff (providers/judged_provider.py): the run sorted by score descending then doc id,
    cut at ``cutoff``; judged documents / ``cutoff``, or / the run's length when it is shorter."""
    ranked = sorted(run.items(), key=lambda x: (-x[1], x[0]))[:cutoff]
    return sum(doc in qrels for doc, _ in ranked) / min(cutoff, len(ranked))


def test_judged_at_k_is_ir_measures_rule() -> None:
    rng = random.Random(7)
    docs = [f"d{i}" for i in range(30)]
    for _ in range(300):
        run = {d: rng.random() for d in rng.sample(docs, rng.randint(1, 20))}
        qrels = {d: rng.randint(0, 3) for d in rng.sample(docs, rng.randint(0, 15))}
        k = rng.randint(1, 25)
        ranked = sorted(run, key=lambda d: (-run[d], d))
        assert judged_at_k(ranked + ranked[:3], qrels, k) == pytest.approx(ir_measures_judged(qrels, run, k))
    assert judged_at_k([], {"a": 0}, 5) is None  # nothing retrieved: undefined, never NaN
    assert judged_at_k(["a", "b"], {"a": 0}, 10) == 0.5  # a grade 0 is a judgment; 2 retrieved < k


def _trec_file(path: Path, rankings: dict[str, list[str]]) -> Path:
    path.write_text("".join(f"{q} Q0 {d} {i} {100 - i} tag\n" for q, docs in rankings.items()
                            for i, d in enumerate(docs, start=1)), encoding="utf-8")
    return path


def _trec_eval(qrels: dict[str, dict[str, int]], rankings: dict[str, list[str]], k: int) -> dict:
    run = {q: {d: float(100 - i) for i, d in enumerate(docs, start=1)} for q, docs in rankings.items()}
    return pytrec_eval.RelevanceEvaluator(qrels, {f"P.{k}", f"recall.{k}", f"ndcg_cut.{k}",
                                                  f"map_cut.{k}"}).evaluate(run)


@pytest.fixture(autouse=True)
def no_retrieval(monkeypatch):
    """Nothing in this module's closing of the loop may search or embed."""
    def refuse(*_a, **_k):
        raise AssertionError("retrieval or embedding during a re-scoring")
    import rag_pipeline.evaluation.evaluate as evaluate_module
    import rag_pipeline.knowledge_base.embedding as embedding
    import rag_pipeline.retrieval.search as search
    import rag_pipeline.service.labelling.drafts as drafts_module
    for module, name in ((search, "hybrid_search_batch"), (embedding, "get_embedder"),
                         (evaluate_module, "hybrid_search_batch"), (drafts_module, "hybrid_search_batch")):
        monkeypatch.setattr(module, name, refuse)


def test_unjudged_chunks_are_shown_warned_drafted_judged_and_rescored(engine, chunks, tmp_path, capsys) -> None:
    c = chunks  # doc name -> chunk id; 5 chunks, k = 3 everywhere
    qrels_v1 = {"q-backup": {c["backup.md"]: 2, c["coffee.md"]: 0},
                "q-repo": {c["monorepo.md"]: 1},
                "q-new": {c["onboarding.md"]: 3, c["vacation-zh.md"]: 0}}
    questions = {"q-backup": "How are backups taken?", "q-repo": "Why one repository?", "q-new": "First week?"}
    v1 = write_dataset(tmp_path / "v1" / "x.json", KB, [
        {"case_id": q, "question": questions[q], "k": 3, "relevant_chunk_ids": g} for q, g in qrels_v1.items()]
        + [{"case_id": "q-none", "question": "Nobody answers this", "k": 3,  # no line in either run file
            "relevant_chunk_ids": [c["coffee.md"]]}], name=NAME)
    base = {"q-backup": [c["backup.md"], c["coffee.md"], c["monorepo.md"]],
            "q-repo": [c["monorepo.md"], c["backup.md"]],
            "q-new": [c["onboarding.md"], c["vacation-zh.md"], c["coffee.md"], c["backup.md"]]}
    wide = {"q-backup": [c["onboarding.md"], c["vacation-zh.md"], c["backup.md"], c["coffee.md"]],
            "q-repo": [c["backup.md"], c["coffee.md"], c["onboarding.md"], c["monorepo.md"]],
            "q-new": [c["monorepo.md"], c["onboarding.md"], c["backup.md"]]}
    runs = {s: trec.import_run(engine, _trec_file(tmp_path / f"{s}.run", r), strategy=s, dataset=str(v1)).run_id
            for s, r in (("base-ext", base), ("wide-ext", wide))}

    # Judged@k per case and run: ir_measures' rule on the run files and qrels
    for strategy, rankings in (("base-ext", base), ("wide-ext", wide)):
        detail = evaluations.evaluation_detail(engine, runs[strategy], candidates="none")
        expected = {q: ir_measures_judged(qrels_v1[q], {d: 100 - i for i, d in enumerate(r, 1)}, 3)
                    for q, r in rankings.items()}
        got = {case.case_id: case.judged for case in detail.cases}
        none = got.pop("q-none")  # nothing retrieved: undefined, null with the reason, counted
        assert (none.at_k, none.pool, none.unjudged_at_k, none.reason) == (None, None, 0, NOTHING_RETRIEVED)
        assert {q: j.at_k for q, j in got.items() if j} == pytest.approx(expected)
        assert {q: j.pool for q, j in got.items() if j} == pytest.approx(
            {q: sum(d in qrels_v1[q] for d in r) / len(r) for q, r in rankings.items()})
        summary = detail.summary.counts.judged
        assert summary.at_k == pytest.approx(sum(expected.values()) / 3)
        assert (summary.cases, summary.undefined) == (3, 1)
        assert summary.unjudged_at_k == sum(sum(d not in qrels_v1[q] for d in r[:3]) for q, r in rankings.items())

    # compare: wide-ext's top k is mostly unjudged; the warning names it and says how large the gap is
    comp = analysis.compare(engine, str(v1), baseline="base-ext")
    assert [r.judged_at_k for r in comp.runs] == pytest.approx([(2 / 3 + 1 / 2 + 2 / 3) / 3, (1 / 3 + 0 + 1 / 3) / 3])
    (warning,) = comp.judged_warnings
    assert warning.startswith("wide-ext: 78% of its top-k chunks are unjudged vs 39% for the baseline (+39 points, "
                              "3 paired cases)")
    assert main(["compare", "--dataset", str(v1), "--baseline", "base-ext", "--resamples", "100"]) == 0
    out = capsys.readouterr().out
    assert "Judged@k" in out and "Warning: wide-ext: 78%" in out

    # draft exactly the unjudged top-k chunks of the wide run
    draft_path = tmp_path / "more.draft.json"
    assert main(["suggest", "--from-run", runs["wide-ext"][:8], "--output", str(draft_path)]) == 0
    assert "7 unjudged top-k chunk(s) to judge in 3 of 4 cases" in capsys.readouterr().out
    draft = load_draft(draft_path)
    unjudged = {(q, d) for q, r in wide.items() for d in r[:3] if d not in qrels_v1[q]}
    assert {(q.case_id, x.chunk_id) for q in draft.questions for x in q.candidates if x.grade is None} == unjudged
    assert {(q.case_id, x.chunk_id, x.grade) for q in draft.questions for x in q.candidates
            if x.grade is not None} == {(q, d, g) for q, gs in qrels_v1.items() for d, g in gs.items()} | {
        ("q-none", c["coffee.md"], 1)}
    assert [q.status for q in draft.questions] == ["pending", "pending", "pending", "judged"]

    # judge them in the terminal labeller: backup.md is relevant (grade 1) wherever it appears, the rest 0
    session = Labeller(draft, draft_path)
    while True:
        for i, cand in enumerate(session.question.candidates):
            if cand.grade is None:
                session.cursor = i
                session.press("1" if cand.chunk_id == c["backup.md"] else "0")
        if session.draft.position == len(draft.questions) - 1:
            session.press("n")
            break
        session.press("n")
    v2 = tmp_path / "v2" / f"{NAME}.json"
    export_draft(engine, load_draft(draft_path), v2)
    qrels_v2 = {case.case_id: dict(case.grades) for case in load_dataset(v2).cases}
    assert qrels_v2.pop("q-none") == {c["coffee.md"]: 1}
    assert qrels_v2 == {q: {**qrels_v1[q], **{d: int(d == c["backup.md"]) for qq, d in unjudged if qq == q}}
                        for q in qrels_v1}

    # re-score both stored runs on the new labels: trec_eval on the same rankings and the new qrels
    with engine.connect() as conn:
        embedded = conn.execute(sa.text("SELECT count(*) FROM question_embeddings")).scalar()
    for strategy, rankings in (("base-ext", base), ("wide-ext", wide)):
        assert main(["runs", "rescore", runs[strategy][:8], "--dataset", str(v2), "--format", "json"]) == 0
        done = json.loads(capsys.readouterr().out)
        new_id = done["run"]["run_id"]
        assert done["rescored_from"]["run_id"] == runs[strategy] and done["run"]["is_current"]
        assert done["run"]["counts"]["rescored_from"] == runs[strategy]
        expected_trec = _trec_eval(qrels_v2, rankings, 3)
        detail = evaluations.evaluation_detail(engine, new_id, candidates="all")
        for case in detail.cases[:3]:
            for m in METRICS:
                assert getattr(case.metrics, m) == pytest.approx(expected_trec[case.case_id][TREC[m].format(k=3)],
                                                                 abs=1e-12), (strategy, case.case_id, m)
            assert case.judged.at_k == pytest.approx(
                ir_measures_judged(qrels_v2[case.case_id], {d: 100 - i for i, d in enumerate(rankings[case.case_id],
                                                                                             1)}, 3))
            assert [x.chunk_id for x in case.candidates] == rankings[case.case_id]  # the stored pool, unchanged
            assert {x.chunk_id: x.relevance_grade for x in case.candidates if x.relevance_grade is not None} == {
                d: g for d, g in qrels_v2[case.case_id].items() if d in rankings[case.case_id]}
        if strategy == "wide-ext":
            assert detail.summary.counts.judged.at_k == 1.0 and detail.summary.counts.judged.unjudged_at_k == 0
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM question_embeddings")).scalar() == embedded
    # the labels changed the metrics as they say: wide-ext's backup.md is now relevant in q-repo's top 3
    old = {case.case_id: case.metrics for case in evaluations.evaluation_detail(engine, runs["wide-ext"]).cases}
    assert old["q-repo"].precision_at_k == 0.0
    comp = analysis.compare(engine, str(v2), baseline="base-ext")
    assert comp.judged_warnings == [] and comp.dataset_version == load_dataset(v2).content_hash
    rescored = {r.strategy: r.run_id for r in comp.runs}["wide-ext"]
    assert rescored != runs["wide-ext"]
    # a draft pools runs of one dataset version only: the old run and its re-scoring are refused together
    assert main(["suggest", "--from-run", runs["wide-ext"], "--from-run", rescored, "--output",
                 str(tmp_path / "mixed.draft.json")]) == 2
    assert "the runs are on different dataset versions" in capsys.readouterr().err
    assert not (tmp_path / "mixed.draft.json").exists()


def test_rescoring_a_built_in_run_on_its_own_labels_gives_its_metrics(engine, chunks, tmp_path, monkeypatch,
                                                                      capsys) -> None:
    """An evaluated run re-scored on the same labels reproduces every stored metric; on changed labels the metrics
    are the reference metrics of its stored pool on those labels."""
    c = chunks
    cases = [{"case_id": "b", "question": "basebackup archiving", "k": 2, "relevant_chunk_ids": [c["backup.md"]]},
             {"case_id": "m", "question": "one repository for every service", "k": 2,
              "relevant_chunk_ids": [c["monorepo.md"]]}]
    v1 = write_dataset(tmp_path / "a" / "x.json", KB, cases, name="judged-built-in")
    monkeypatch.undo()  # this run retrieves (keyword leg only: nothing is embedded)
    run = evaluate_dataset(engine, load_dataset(v1), get_strategy("keyword-v1")).run_id
    same = evaluations.rescore(engine, run, str(v1))
    assert same.run.metrics.model_dump() == pytest.approx(same.rescored_from.metrics.model_dump(), abs=1e-12)
    assert same.run.counts.judged == same.rescored_from.counts.judged
    cases[1]["relevant_chunk_ids"] = {c["monorepo.md"]: 1, c["backup.md"]: 2}
    v2 = write_dataset(tmp_path / "b" / "x.json", KB, cases, name="judged-built-in")
    assert main(["runs", "rescore", run[:8], "--dataset", str(v2)]) == 0
    assert "nothing retrieved" in capsys.readouterr().out
    new = evaluations.run_page(engine, dataset="judged-built-in", current_only=True)[1][0]
    detail = evaluations.evaluation_detail(engine, new.run_id, candidates="all")
    pools = [[x.chunk_id for x in case.candidates] for case in detail.cases]
    reference = evaluate_many(pools, [load_dataset(v2).cases[i].relevance for i in range(2)], 2)
    for i, case in enumerate(detail.cases):
        for m in METRICS:
            assert getattr(case.metrics, m) == pytest.approx(float(reference[m][i]), abs=1e-12)
    # a case the run never had cannot be re-scored without retrieving: refused, nothing stored
    cases.append({"case_id": "new", "question": "coffee", "k": 2, "relevant_chunk_ids": [c["coffee.md"]]})
    v3 = write_dataset(tmp_path / "c" / "x.json", KB, cases, name="judged-built-in")
    assert main(["runs", "rescore", run[:8], "--dataset", str(v3)]) == 2
    err = capsys.readouterr().err
    assert "case new is not a case of run" in err and "evaluate the strategy on it instead" in err
