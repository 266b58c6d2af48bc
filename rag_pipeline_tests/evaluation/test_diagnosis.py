"""Miss reasons: pure classification on constructed pools, and the computed scores on a handcrafted KB
checked against numpy / direct SQL and against a deeper pool of the same leg."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest
import sqlalchemy as sa

from rag_pipeline.evaluation.datasets.label_check import check_labels
from rag_pipeline.evaluation.diagnosis import diagnose as diagnosis_db
from rag_pipeline.evaluation.diagnosis.miss_reasons import REASONS_JSON, classify_misses, first_line, summarize_counts
from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL, get_embedder
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.lifecycle import set_document_state
from rag_pipeline.knowledge_base.sources import SourceDocument
from rag_pipeline.retrieval.strategies import Strategy
from rag_pipeline_tests.eval_helpers import diagnose_run, hybrid_search_with_trace

QUESTION = "How do I reset my password?"
TEXTS = {
    "reset.md": "To reset your password, open Settings, choose Security and click Reset password.",
    "recover.md": "Forgot your login credentials? Recover access to the account from the sign-in page.",
    "garden.md": "My garden: how I do the watering each morning before work.",
    "router.md": "Reset the router by holding the power button for ten seconds.",
    "pasta.md": "Boil salted water, add the spaghetti and cook it for nine minutes.",
    "policy.md": "Password rules: at least twelve characters, rotated every year.",
    "vpn.md": "Connect to the office VPN with the client installed on every laptop.",
    "tiers.md": "The enterprise tier includes single sign-on and audit logs.",
    "old-reset.md": "Old instructions: reset my password by mailing the help desk.",
}


def _cand(chunk_id, rank, final, vs=None, vr=None, ks=None, kr=None):
    return {"chunk_id": chunk_id, "rank": rank, "final_score": final, "vector_score": vs, "vector_rank": vr,
            "keyword_score": ks, "keyword_rank": kr}


POOL = [
    _cand("a", 1, 0.9, 0.8, 1, 0.5, 1),
    _cand("b", 2, 0.7, 0.7, 2, None, None),
    _cand("c", 3, 0.5, None, None, 0.4, 2),
    _cand("d", 4, 0.4, 0.6, 3, 0.2, 3),
]


def test_classify_every_pool_position():
    case = {"case_id": "q", "relevant_chunk_ids": ["a", "b", "c", "d", "z", "bad"], "k": 1}
    got = {m.chunk_id: m for m in classify_misses(case, list(reversed(POOL)), label_statuses={"bad": "is_document_id"},
                                                  label_details={"bad": "document 'x.md'"})}
    assert {c: m.reason for c, m in got.items()} == {
        "a": "hit", "b": "vector_only", "c": "keyword_only", "d": "below_cutoff", "z": "not_in_pool",
        "bad": "is_document_id"}
    assert got["a"].legs == "both" and got["a"].gap is None
    assert got["d"].gap == pytest.approx(0.9 - 0.4) and got["d"].kth_score == 0.9
    assert got["z"].vector_last_score == 0.6 and got["z"].vector_leg_size == 3
    assert got["z"].keyword_last_score == 0.2 and got["z"].keyword_leg_size == 3
    assert got["bad"].is_label_problem and "document 'x.md'" in got["bad"].detail
    assert "gap 0.5000" in got["d"].detail and "rank 4 > k=1" in got["d"].detail


def test_one_leg_strategy_never_says_only_and_short_pool_has_no_kth():
    case = {"case_id": "q", "relevant_chunk_ids": ["b", "c"], "k": 2}
    got = classify_misses(case, POOL, legs=("vector",))
    assert [m.reason for m in got] == ["hit", "below_cutoff"]
    short = classify_misses({"case_id": "q", "relevant_chunk_ids": ["d"], "k": 10}, POOL[:2] + POOL[3:],
                            k=2, legs=("vector", "keyword"))
    assert short[0].reason == "below_cutoff" and short[0].kth_score == 0.7
    deep = classify_misses({"case_id": "q", "relevant_chunk_ids": ["a"], "k": 10}, [], legs=("vector",))
    assert deep[0].reason == "not_in_pool" and deep[0].kth_score is None and deep[0].vector_last_score is None


def test_summary_dominant_reason_and_first_line():
    s = summarize_counts({"is_document_id": 38, "not_in_pool": 1, "hit": 1})
    assert s.counts == {"hit": 1, "not_in_pool": 1, "is_document_id": 38}
    assert s.dominant_reason == "is_document_id" and s.invalid_labels == 38
    assert first_line(s, {"ndcg_at_k": 0.0, "recall_at_k": 0.0}) == (
        "All metrics are 0: 38 of 40 labels are document ids, not chunk ids — see check-dataset.")
    assert first_line(s, {"ndcg_at_k": 0.1, "recall_at_k": 0.0}) is None
    assert first_line(summarize_counts({"hit": 1}), {"ndcg_at_k": 0.0}) is None


@pytest.fixture(scope="module")
def kb(engine):
    name = f"diag-{uuid.uuid4().hex[:8]}"
    ingest_documents(engine, [SourceDocument(n, None, t) for n, t in TEXTS.items()], name, chunk_size=None)
    with engine.begin() as conn:
        set_document_state(conn, name, "old-reset.md", publication_status="UNPUBLISHED")
        row = conn.execute(sa.text("SELECT id, name, text_search FROM knowledge_bases WHERE name = :n"),
                           {"n": name}).one()
    ids = {n: str(chunking.chunk_id(name, n, chunking.whole_document(t)[0])) for n, t in TEXTS.items()}
    return row, ids


def _diagnose(engine, kb_row, ids, strategy, k=1, ranks=True):
    case = {"case_id": "pw", "question": QUESTION, "k": k, "relevant_chunk_ids": list(ids.values())}
    with engine.connect() as conn:
        trace = hybrid_search_with_trace(conn, knowledge_base_id=kb_row.id, query=QUESTION, strategy=strategy,
                                         limit=k)
        labels = check_labels(conn, kb_row, [case])
        (reasons,) = diagnosis_db.diagnose_batch(conn, kb_row, strategy, [case], [trace.candidates], labels,
                                                 ranks=ranks)
    name = {v: n for n, v in ids.items()}
    return {name[m.chunk_id]: m for m in reasons}, trace


def test_hybrid_reasons_and_scores_against_numpy_and_a_deep_pool(engine, kb):
    kb_row, ids = kb
    shallow = Strategy("diag-shallow", vector_candidate_k=2, keyword_candidate_k=2)
    got, trace = _diagnose(engine, kb_row, ids, shallow)
    # Known by construction: reset.md matches both ways; recover.md shares no word with the question (vector
    # only); garden.md shares four words but no meaning (keyword only); pasta.md shares neither.
    assert got["reset.md"].reason == "hit" and got["reset.md"].legs == "both"
    assert got["recover.md"].reason == "vector_only" and got["recover.md"].keyword_score is None
    assert got["garden.md"].reason == "keyword_only"
    assert got["pasta.md"].reason == "not_in_pool" and got["pasta.md"].keyword_score is None
    assert got["old-reset.md"].reason == "document_unpublished", "an invalid label is not a retrieval miss"
    assert "no query term" in got["pasta.md"].detail

    # Own vector similarity = cosine of the stored vector and the embedded question (numpy).
    q = get_embedder(DEFAULT_MODEL).embed_one(QUESTION)
    with engine.connect() as conn:
        stored = {c: np.asarray(v.to_numpy(), dtype=float) for c, v in conn.execute(sa.text(
            "SELECT chunk_id::text, embedding FROM chunk_embeddings WHERE knowledge_base_id = :kb AND model = :m"),
            {"kb": kb_row.id, "m": DEFAULT_MODEL})}
    q = np.asarray(q, dtype=float)
    searchable = {n: float(q @ stored[c] / np.linalg.norm(q) / np.linalg.norm(stored[c])) for n, c in ids.items()
                  if n != "old-reset.md"}
    order = sorted(searchable, key=lambda n: (-searchable[n], ids[n]))
    for n in ("pasta.md", "garden.md"):
        assert got[n].vector_score == pytest.approx(searchable[n], abs=1e-5)
        assert got[n].vector_rank == order.index(n) + 1
        assert got[n].vector_score < got[n].vector_last_score
    last_vector = max((c for c in trace.candidates if c.vector_rank), key=lambda c: c.vector_rank)
    assert got["pasta.md"].vector_last_score == last_vector.vector_score

    # Same chunks through a pool deep enough to hold every chunk: identical leg scores and ranks.
    deep = Strategy("diag-deep", vector_candidate_k=9, keyword_candidate_k=9)
    _, deep_trace = _diagnose(engine, kb_row, ids, deep)
    by_id = {c.chunk_id: c for c in deep_trace.candidates}
    for n, m in got.items():
        if m.reason in ("not_in_pool", "keyword_only", "vector_only") and ids[n] in by_id:
            c = by_id[ids[n]]
            if m.reason != "vector_only":
                assert (m.vector_score, m.vector_rank) == (pytest.approx(c.vector_score, abs=1e-9), c.vector_rank)
            if m.reason != "keyword_only":
                assert m.keyword_score == (None if c.keyword_score is None else pytest.approx(c.keyword_score))
                assert m.keyword_rank == c.keyword_rank


@pytest.mark.parametrize("scorer", ["ts_rank_cd", "bm25"])
def test_the_evaluation_stores_own_scores_and_leaves_global_ranks_to_demand(engine, kb, scorer):
    """Without ranks (what a run stores, at any KB size) the missing legs' own scores are the same floats as the
    on-demand diagnosis (which adds the exact global ranks), and the detail names no rank."""
    kb_row, ids = kb
    shallow = Strategy(f"diag-shallow-{scorer}", vector_candidate_k=2, keyword_candidate_k=2, keyword_scorer=scorer)
    ranked, _ = _diagnose(engine, kb_row, ids, shallow, ranks=True)
    stored, _ = _diagnose(engine, kb_row, ids, shallow, ranks=False)
    assert ranked.keys() == stored.keys()
    misses = [n for n, m in stored.items() if m.reason == "not_in_pool"]
    assert misses and any(stored[n].keyword_score is not None for n in misses)
    for n, m in stored.items():
        assert m.reason == ranked[n].reason
        assert (m.vector_score, m.keyword_score) == (ranked[n].vector_score, ranked[n].keyword_score), n
        if m.reason == "not_in_pool":
            assert m.vector_rank is None and m.keyword_rank is None and "would be" not in m.detail
            assert ranked[n].vector_rank is not None and m.scores_computed
            assert (ranked[n].keyword_rank is None) == (m.keyword_score is None)


@pytest.mark.parametrize("scorer", ["ts_rank_cd", "bm25"])
def test_keyword_only_strategy_below_cutoff_and_not_in_pool(engine, kb, scorer):
    kb_row, ids = kb
    strategy = Strategy(f"diag-{scorer}", vector_candidate_k=0, keyword_candidate_k=3, keyword_scorer=scorer,
                        vector_weight=0.0, keyword_weight=1.0)
    got, trace = _diagnose(engine, kb_row, ids, strategy)
    name = {c: n for n, c in ids.items()}
    pool = [name[c.chunk_id] for c in trace.candidates]
    assert len(pool) == 3 and got[pool[0]].reason == "hit"
    assert {got[n].reason for n in pool[1:]} == {"below_cutoff"}
    assert got["pasta.md"].reason == "not_in_pool" and got["pasta.md"].vector_score is None
    deep = Strategy(f"diag-deep-{scorer}", vector_candidate_k=0, keyword_candidate_k=9, keyword_scorer=scorer,
                    vector_weight=0.0, keyword_weight=1.0)
    _, deep_trace = _diagnose(engine, kb_row, ids, deep)
    fourth = deep_trace.candidates[3]  # the best chunk the 3-deep leg left out
    missed = got[name[fourth.chunk_id]]
    assert missed.reason == "not_in_pool" and missed.keyword_rank == 4
    assert missed.keyword_score == pytest.approx(fourth.keyword_score, rel=1e-12)
    assert missed.keyword_score <= missed.keyword_last_score == trace.candidates[-1].keyword_score
    if missed.keyword_score == missed.keyword_last_score:
        assert "tied; lost on chunk id order" in missed.detail
    if scorer == "ts_rank_cd":  # direct SQL, independent of the leg statement
        with engine.connect() as conn:
            direct = conn.execute(sa.text(
                "SELECT ts_rank_cd(content_tsvector, to_tsquery('simple', 'how | do | i | reset | my | password'), "
                "32)::float8 FROM document_chunks WHERE id = :id"), {"id": fourth.chunk_id}).scalar_one()
        assert missed.keyword_score == pytest.approx(direct, rel=1e-6)

def test_diagnose_run_stores_reasons_and_states_why_everything_is_zero(engine, kb):
    from rag_pipeline.evaluation.datasets.load import parse_dataset
    from rag_pipeline.evaluation.evaluate import evaluate_dataset

    kb_row, ids = kb
    strategy = Strategy(f"diag-run-{uuid.uuid4().hex[:6]}", vector_candidate_k=2, keyword_candidate_k=2)
    mixed = {"case_id": "pw", "question": QUESTION, "k": 1,
             "relevant_chunk_ids": [ids["reset.md"], ids["pasta.md"], ids["old-reset.md"]]}
    zero = {"case_id": "zero", "question": QUESTION, "k": 1,
            "relevant_chunk_ids": [str(chunking.document_id(kb_row.name, "reset.md"))]}

    def run(name, cases):
        dataset = parse_dataset(json.dumps({"name": name, "knowledge_base": kb_row.name, "cases": cases}))
        outcome = evaluate_dataset(engine, dataset, strategy)
        with engine.begin() as conn:
            return outcome, diagnose_run(conn, outcome.run_id)

    outcome, diag = run(f"diag-mixed-{uuid.uuid4().hex[:6]}", [mixed, zero])
    with engine.connect() as conn:
        stored = dict(conn.execute(sa.text(
            "SELECT case_id, miss_reasons FROM retrieval_evaluation_case_results WHERE evaluation_run_id = :r"),
            {"r": outcome.run_id}).all())
    assert [m["reason"] for m in stored["pw"]] == ["hit", "not_in_pool", "document_unpublished"]
    assert "vector_rank" not in stored["pw"][1] and "not retrieved by any leg" in stored["pw"][1]["detail"]
    assert stored["pw"][1]["vector_score"] < stored["pw"][1]["vector_last_score"]
    assert [m["reason"] for m in stored["zero"]] == ["is_document_id"]
    assert diag.summary.counts == {"hit": 1, "not_in_pool": 1, "document_unpublished": 1, "is_document_id": 1}
    assert diag.first_line is None, "the averages are not all 0"
    assert diag.label_integrity.cases_all_invalid == ["zero"]

    outcome, diag = run(f"diag-zero-{uuid.uuid4().hex[:6]}", [zero])
    assert outcome.averages["ndcg_at_k"] == 0.0
    assert diag.first_line == "All metrics are 0: 1 of 1 labels are document ids, not chunk ids — see check-dataset."


@pytest.mark.parametrize("scorer", ["ts_rank_cd", "bm25"])
def test_evaluation_loop_diagnosis_equals_a_separate_diagnosis_pass(engine, kb, scorer):
    """The evaluation diagnoses each batch in the loop (with a BM25 leg served from the in-memory index);
    diagnose_run recomputes the diagnosis from the stored pools. Both must agree exactly, label problems
    included."""
    from rag_pipeline.evaluation.datasets.load import parse_dataset
    from rag_pipeline.evaluation.evaluate import evaluate_dataset

    kb_row, ids = kb
    strategy = Strategy(f"diag-loop-{scorer}-{uuid.uuid4().hex[:6]}", vector_candidate_k=1, keyword_candidate_k=1,
                        keyword_scorer=scorer)
    questions = [QUESTION, "reset the router power button", "password rules characters", "garden watering",
                 "sign-in recover account"]
    labels = [*ids.values(), str(chunking.document_id(kb_row.name, "pasta.md")), str(uuid.uuid4())]
    cases = [{"case_id": f"c{i}", "question": q, "k": 1, "relevant_chunk_ids": labels} for i, q in enumerate(questions)]
    dataset = parse_dataset(json.dumps({"name": f"diag-loop-{uuid.uuid4().hex[:6]}",
                                        "knowledge_base": kb_row.name, "cases": cases}))
    outcome = evaluate_dataset(engine, dataset, strategy, batch_size=2, readers=2)
    with engine.connect() as conn:
        stored = dict(conn.execute(sa.text(
            "SELECT case_id, miss_reasons FROM retrieval_evaluation_case_results WHERE evaluation_run_id = :r"),
            {"r": outcome.run_id}).all())
        again = diagnose_run(conn, outcome.run_id, store=False)
    # Equal up to the last float bits of the question vectors (embedded per batch vs all at once, ~1e-7).
    expected = {case: json.loads(REASONS_JSON.dump_json(reasons)) for case, reasons in again.reasons.items()}
    assert stored.keys() == expected.keys()
    for case, reasons in stored.items():
        assert [sorted(m) for m in reasons] == [sorted(m) for m in expected[case]], case
        for got, want in zip(reasons, expected[case], strict=True):
            for key, value in want.items():
                if isinstance(value, float):
                    assert got[key] == pytest.approx(value, abs=1e-6), (case, key)
                elif key != "detail":
                    assert got[key] == value, (case, key)
    below_k = [m for reasons in stored.values() for m in reasons
               if m["reason"] == "not_in_pool" and m.get("keyword_score") is not None]
    assert below_k, "some relevant chunk must be keyword-matched below the leg's k"
    assert not any("keyword_rank" in m for m in below_k), "global ranks are computed on demand only"
    assert any(m["reason"] == "not_in_pool" and "keyword_score" not in m for r in stored.values() for m in r)
    assert outcome.summary.miss_reasons == again.summary
    assert outcome.summary.label_integrity == again.label_integrity


def test_show_case_computes_global_ranks_on_demand_and_caches_them(engine, kb, capsys):
    """A run stores own scores without global ranks; ``show RUN --case ID`` (service.case_diagnosis) computes the
    exact ranks for that case — equal to diagnosing the same pool with ranks — caches them per KB state, and
    recomputes after the KB changes. Unknown cases are a one-line user error."""
    from rag_pipeline.cli import main
    from rag_pipeline.evaluation.datasets.load import parse_dataset
    from rag_pipeline.evaluation.evaluate import evaluate_dataset
    from rag_pipeline.service.case_diagnosis import case_diagnosis

    kb_row, ids = kb
    strategy = Strategy(f"diag-show-{uuid.uuid4().hex[:6]}", vector_candidate_k=2, keyword_candidate_k=2)
    case = {"case_id": "pw", "question": QUESTION, "k": 1, "relevant_chunk_ids": [ids["reset.md"], ids["pasta.md"]]}
    dataset = parse_dataset(json.dumps({"name": f"diag-show-{uuid.uuid4().hex[:6]}", "knowledge_base": kb_row.name,
                                        "cases": [case]}))
    outcome = evaluate_dataset(engine, dataset, strategy)
    ranked, _ = _diagnose(engine, kb_row, ids, strategy, ranks=True)

    found = case_diagnosis(engine, outcome.run_id[:8], "pw")
    by_chunk = {m.chunk_id: m for m in found.reasons}
    pasta = by_chunk[ids["pasta.md"]]
    assert pasta.reason == "not_in_pool" and pasta.vector_rank == ranked["pasta.md"].vector_rank > 2
    assert pasta.vector_score == pytest.approx(ranked["pasta.md"].vector_score, abs=1e-6)
    stored = {m.chunk_id: m for m in found.stored_reasons or []}
    assert stored[ids["pasta.md"]].vector_rank is None and "would be vector rank" in pasta.detail
    assert case_diagnosis(engine, outcome.run_id, "pw") is found, "cached per (run, case, KB state)"

    assert main(["show", outcome.run_id[:8], "--case", "pw", "--global-ranks"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["question"] == QUESTION and data["case_id"] == "pw"
    got = {m["chunk_id"]: m for m in data["reasons"]}[ids["pasta.md"]]
    assert got["vector_rank"] == pasta.vector_rank and f"would be vector rank {pasta.vector_rank}" in got["detail"]
    assert "vector_rank" not in {m["chunk_id"]: m for m in data["stored_reasons"]}[ids["pasta.md"]]
    assert main(["show", outcome.run_id, "--global-ranks"]) == 2
    assert "--global-ranks needs --case" in capsys.readouterr().err

    with engine.begin() as conn:  # any change of the searchable chunks moves the KB state: no stale cache
        set_document_state(conn, kb_row.name, "garden.md", publication_status="UNPUBLISHED")
    try:
        again = case_diagnosis(engine, outcome.run_id, "pw")
        assert again is not found and again.knowledge_base_state != found.knowledge_base_state
    finally:
        with engine.begin() as conn:
            set_document_state(conn, kb_row.name, "garden.md", publication_status="PUBLISHED")

    assert main(["show", outcome.run_id, "--case", "nope", "--global-ranks"]) == 2
    err = capsys.readouterr().err
    assert "has no case 'nope'" in err and len(err.strip().splitlines()) == 1
