"""A strategy of kind http on the real database, against a retriever of the test's own on 127.0.0.1 over the demo
knowledge base: added by the CLI (no secret stored), evaluated with concurrency 4 through 503s and a slow reply,
killed halfway and resumed without asking answered cases again; its stored run equals the same ranking imported as
a TREC run file; `compare` puts it against hybrid-v1; faults are each case's error or a failed run, nothing half
stored."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from rag_pipeline.cli.main import main
from rag_pipeline.contracts.labelling import DraftQuestion
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.retrieval.http_retriever import EndpointDownError
from rag_pipeline.retrieval.registry_file import write_strategy
from rag_pipeline.retrieval.strategies import get_strategy, strategy_from_mapping
from rag_pipeline.retrieval.trace import RetrievalError
from rag_pipeline.service import trec
from rag_pipeline.service.labelling import drafts
from rag_pipeline_tests.retrieval.retriever_server import RetrieverServer, rank

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret-token-4711"
TEMPLATE = '{"question": "{question}", "case_id": "{case_id}", "k": "{pool_size}"}'
POOL = 20
CLI = "import sys; from rag_pipeline.cli.main import main; sys.exit(main())"


def _chunks(engine, kb: str) -> dict[str, str]:
    with engine.connect() as conn:
        return {str(r[0]): r[1] for r in conn.execute(sa.text(
            "SELECT c.id, c.content FROM document_chunks c JOIN knowledge_bases k ON k.id = c.knowledge_base_id "
            "WHERE k.name = :kb AND c.is_current"), {"kb": kb})}


@pytest.fixture(scope="module")
def dataset_file(demo_kb, tmp_path_factory) -> Path:
    demo = json.loads((ROOT / "datasets" / "demo.json").read_text(encoding="utf-8"))
    path = tmp_path_factory.mktemp("http") / "http-demo.json"
    path.write_text(json.dumps({"name": "http-demo", "knowledge_base": demo_kb, "cases": demo["cases"]}),
                    encoding="utf-8")
    return path


def _kept(engine) -> set[str]:
    with engine.connect() as conn:
        return {r[0] for r in conn.execute(sa.text("SELECT case_id FROM http_retriever_replies"))}


def _pools(engine, run_id: str) -> dict[str, list[tuple[str, int, float]]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT case_id, chunk_id::text, rank, final_score FROM retrieval_evaluation_candidates "
            "WHERE evaluation_run_id = :r ORDER BY case_id, rank"), {"r": run_id}).all()
    out: dict[str, list[tuple[str, int, float]]] = {}
    for case_id, chunk, rank_, score in rows:
        out.setdefault(case_id, []).append((chunk, rank_, score))
    return out


def _cases(engine, run_id: str) -> dict[str, sa.Row]:
    with engine.connect() as conn:
        return {r.case_id: r for r in conn.execute(sa.text(
            "SELECT * FROM retrieval_evaluation_case_results WHERE evaluation_run_id = :r"), {"r": run_id})}


def _run_of(engine, strategy: str, status: str = "succeeded") -> sa.Row:
    with engine.connect() as conn:
        return conn.execute(sa.text(
            "SELECT r.* FROM retrieval_evaluation_runs r WHERE strategy_version = :s AND status = :st "
            "ORDER BY started_at DESC LIMIT 1"), {"s": strategy, "st": status}).one()


def test_killed_resumed_run_equals_the_trec_import_and_compares(engine, demo_kb, dataset_file, tmp_path,
                                                               monkeypatch, capsys) -> None:
    chunks = _chunks(engine, demo_kb)
    dataset = load_dataset(dataset_file)
    ids = [c.case_id for c in dataset.cases]
    plan = {ids[0]: ["slow:1.5"], ids[3]: ["503", "503", "ok"], ids[30]: ["503", "ok"], ids[40]: ["503", "ok"]}
    registry = tmp_path / "strategies.yaml"
    monkeypatch.setenv("HTTP_TEST_TOKEN", SECRET)
    with RetrieverServer(chunks, plan, delay=0.15) as server:
        assert main(["strategy", "add-http", "http-demo-v1", "--url", server.url, "--ids-path", "hits[*].id",
                     "--scores-path", "hits[*].score", "--request-template", TEMPLATE, "--pool-size", str(POOL),
                     "--concurrency", "4", "--backoff", "0.05", "--header", "X-Token: env:HTTP_TEST_TOKEN",
                     "--registry", str(registry)]) == 0
        assert SECRET not in registry.read_text(encoding="utf-8") and "env:HTTP_TEST_TOKEN" in registry.read_text()
        assert "appended: strategy http-demo-v1 (kind http" in capsys.readouterr().out
        monkeypatch.setenv("RAG_STRATEGIES_FILE", str(registry))

        proc = subprocess.Popen([sys.executable, "-c", CLI, "evaluate", "--dataset", str(dataset_file),
                                 "--strategy", "http-demo-v1", "--quiet"], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        deadline = time.monotonic() + 120
        while len(_kept(engine)) < 12 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert proc.poll() is None, proc.communicate()
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        kept = _kept(engine)
        asked_before = dict(server.requests)
        assert 12 <= len(kept) < len(ids), "killed halfway"

        assert main(["evaluate", "--dataset", str(dataset_file), "--strategy", "http-demo-v1", "--quiet"]) == 0
        capsys.readouterr()
        for case_id in kept:  # not asked again
            assert server.requests[case_id] == asked_before[case_id], case_id
        assert server.requests[ids[3]] >= 3 and all(server.requests[c] >= 1 for c in ids)
    assert not _kept(engine), "the stored run's transaction forgets the kept replies"
    with engine.connect() as conn:  # the killed run: failed once its heartbeat is stale, until then still running
        killed = conn.execute(sa.text("SELECT status FROM retrieval_evaluation_runs WHERE strategy_version = "
                                      "'http-demo-v1' AND status <> 'succeeded'")).scalars().all()
    assert killed in (["running"], ["failed"]), killed
    run = _run_of(engine, "http-demo-v1")
    counts = run.summary["retriever"]
    assert (counts["cases_resumed"], counts["cases_asked"], counts["failed_cases"]) == (len(kept),
                                                                                      len(ids) - len(kept), 0)
    latency = [r.latency_ms for r in _cases(engine, str(run.id)).values()]
    assert all(x is not None and x > 0 for x in latency)
    slow = _cases(engine, str(run.id))[ids[0]].latency_ms
    assert slow >= 1500 and counts["latency_max_ms"] == pytest.approx(max(latency), abs=1e-3)
    assert counts["latency_p50_ms"] < counts["latency_p95_ms"] <= counts["latency_max_ms"]
    assert SECRET not in json.dumps(run.summary) + json.dumps(run.strategy_params if "strategy_params" in
                                                                run._fields else {})

    # the same ranking as a TREC run file, imported: the same pools and metrics
    run_file = tmp_path / "http.run"
    run_file.write_text("".join(f"{c.case_id} Q0 {cid} {i + 1} {score} t\n" for c in dataset.cases
                                for i, (cid, score) in enumerate(rank(chunks, c.question, POOL))), encoding="utf-8")
    imported = trec.import_run(engine, run_file, strategy="http-demo-trec", dataset=str(dataset_file))
    http_pools, trec_pools = _pools(engine, str(run.id)), _pools(engine, imported.run_id)
    assert http_pools == trec_pools and sum(map(len, http_pools.values())) > len(ids)
    ours, theirs = _cases(engine, str(run.id)), _cases(engine, imported.run_id)
    for case_id in ids:
        for metric in ("precision_at_k", "recall_at_k", "ndcg_at_k", "average_precision_at_k", "r_precision",
                       "reciprocal_rank", "hit_at_k", "retrieved_chunk_ids", "miss_reasons"):
            assert getattr(ours[case_id], metric) == getattr(theirs[case_id], metric), (case_id, metric)

    # compare against hybrid-v1 with paired significance
    assert main(["evaluate", "--dataset", str(dataset_file), "--strategy", "hybrid-v1", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["show", str(run.id), "--format", "text", "--candidates", "none"]) == 0
    assert f"latency p50 {counts['latency_p50_ms']:.1f} ms" in capsys.readouterr().out
    main(["compare", "--dataset", "http-demo", "--baseline", "hybrid-v1", "--format", "json"])
    result = json.loads(capsys.readouterr().out)
    text = json.dumps(result)
    assert "http-demo-v1" in text and "p_value" in text


def _strategy(url: str, version: str = "http-faults-v1", **http) -> object:
    return strategy_from_mapping({"version": version, "http": {
        "url": url, "ids_path": "hits[*].id", "scores_path": "hits[*].score", "request_template": TEMPLATE,
        "concurrency": 4, "retries": 1, "backoff_s": 0.01, **http}})


def test_faults_are_the_cases_errors_or_a_failed_run(engine, demo_kb, dataset_file) -> None:
    chunks = _chunks(engine, demo_kb)
    dataset = load_dataset(dataset_file)
    ids = [c.case_id for c in dataset.cases]
    plan = {ids[1]: ["garbage"], ids[2]: ["ids-not-list"], ids[3]: ["ids-wrong-type"], ids[4]: ["huge"],
            ids[5]: ["slow:5"], ids[6]: ["503"]}
    with RetrieverServer(chunks, plan) as server:
        outcome = evaluate_dataset(engine, dataset, _strategy(server.url, timeout_s=2.0))  # type: ignore[arg-type]
    cases = _cases(engine, outcome.run_id)
    errors = {case_id: row.retrieval_error for case_id, row in cases.items() if row.retrieval_error}
    assert set(errors) == set(plan)
    assert "not JSON" in errors[ids[1]] and "is not a list" in errors[ids[2]]
    assert "expected a string or an integer" in errors[ids[3]] and "longer than" in errors[ids[4]]
    assert "no complete reply within" in errors[ids[5]] and "HTTP 503" in errors[ids[6]]
    assert all(cases[c].retrieved_chunk_ids == [] for c in plan)
    assert outcome.summary.retriever is not None and outcome.summary.retriever.failed_cases == len(plan)
    assert cases[ids[0]].retrieval_error is None and cases[ids[0]].retrieved_chunk_ids

    with socket.socket() as s:  # a port nothing listens on: the endpoint is down
        s.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{s.getsockname()[1]}/search"
    with pytest.raises(RetrievalError, match="cannot be reached"):
        evaluate_dataset(engine, dataset, _strategy(down, "http-down-v1", retries=0))  # type: ignore[arg-type]
    failed = _run_of(engine, "http-down-v1", "failed")
    assert "cannot be reached" in failed.error and not _cases(engine, str(failed.id))
    assert not _pools(engine, str(failed.id))
    assert EndpointDownError.__doc__


def test_identity_is_what_ranks_never_a_secret() -> None:
    base = _strategy("http://127.0.0.1:9/search", headers=["Authorization: env:A_TOKEN"])
    same = _strategy("http://127.0.0.1:9/search", headers=["Authorization: env:OTHER"], concurrency=16,
                     timeout_s=5.0)
    other = _strategy("http://127.0.0.1:9/search", scores_path="hits[*].s")
    assert base.params_hash() == same.params_hash() != other.params_hash()  # type: ignore[attr-defined]
    assert "A_TOKEN" not in json.dumps(base.params())  # type: ignore[attr-defined]
    assert get_strategy("hybrid-v1").http is None


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/search?api_key=tok-value-55",
                                 "http://127.0.0.1:9/search?q={question}&X-Api-Key=tok-value-55",
                                 "http://127.0.0.1:9/search?access_token=tok-value-55",
                                 "http://ann:tok-value-55@127.0.0.1:9/search"])
def test_a_credential_written_into_the_url_is_refused_without_echoing_it(tmp_path, capsys, url) -> None:
    """A URL is stored (the registry entry, the strategy's identity) and shown: its credential must come from a
    header with an env: value; the refusal names the parameter, never its value, and writes nothing."""
    registry = tmp_path / "strategies.yaml"
    assert main(["strategy", "add-http", "mine-v1", "--registry", str(registry), "--url", url,
                 "--ids-path", "hits[*].id", "--scores-path", "hits[*].score"]) == 2
    err = capsys.readouterr().err
    assert "field 'http.url' holds a" in err and "env:VARIABLE" in err
    assert "tok-value-55" not in err and not registry.exists()


def test_suggest_pools_the_retrievers_ranking(engine, demo_kb, tmp_path, monkeypatch) -> None:
    chunks = _chunks(engine, demo_kb)
    registry = tmp_path / "strategies.yaml"
    with RetrieverServer(chunks) as server:
        write_strategy(registry, _strategy(server.url, "http-suggest-v1"))  # type: ignore[arg-type]
        monkeypatch.setenv("RAG_STRATEGIES_FILE", str(registry))
        question = "How do we rotate the on-call pager?"
        draft = drafts.pool(engine, demo_kb, [DraftQuestion(case_id="q1", question=question, candidates=[])],
                            strategies=["http-suggest-v1"], depth=5)
    expected = [cid for cid, _ in rank(chunks, question, 5)]
    assert [c.chunk_id for c in draft.questions[0].candidates] == expected
    assert all(c.found_by == {"http-suggest-v1": i} for i, c in enumerate(draft.questions[0].candidates, start=1))


def test_stage_ranks_give_the_per_stage_miss_reasons(engine, demo_kb, dataset_file) -> None:
    """With the stages' ranks returned, a relevant chunk below k found by one stage only is ``vector_only``."""
    chunks = _chunks(engine, demo_kb)
    dataset = load_dataset(dataset_file)
    with RetrieverServer(chunks) as server:
        strategy = _strategy(server.url, "http-stages-v1", vector_ranks_path="hits[*].vector_rank",
                             keyword_ranks_path="hits[*].keyword_rank")
        outcome = evaluate_dataset(engine, dataset, strategy)  # type: ignore[arg-type]
    pools = _pools(engine, outcome.run_id)
    seen = set()
    for case_id, row in _cases(engine, outcome.run_id).items():
        ranks = {chunk: rank_ for chunk, rank_, _ in pools.get(case_id, [])}
        for reason in row.miss_reasons:
            rank_ = ranks.get(reason["chunk_id"])
            expected = ("not_in_pool" if rank_ is None else "hit" if rank_ <= row.k
                        else "below_cutoff" if rank_ % 2 == 1 else "vector_only")
            assert reason["reason"] == expected, (case_id, reason)
            seen.add(expected)
    assert {"hit", "vector_only", "below_cutoff"} <= seen
