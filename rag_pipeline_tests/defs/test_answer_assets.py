"""The answer assets on real Postgres: a dropped answers file, the in-process answerer and a real HTTP endpoint,
each materialised through ``answers`` → ``answer_metrics``, then ``answer_run_summary``; the coverage check's
result function on its own; the ``rag_answers`` pool."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from rag_pipeline.defs.answers.assets import answer_metrics, answer_partitions_sensor, answer_run_summary, answers
from rag_pipeline.defs.answers.metadata import answer_coverage_result
from rag_pipeline.defs.instance import ANSWER_POOL, POOL, ensure_pool
from rag_pipeline.defs.partitions import answer_partition_key, answer_partitions
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.service.answers import evaluate_answers
from rag_pipeline.storage.engine import dagster_database_url
from rag_pipeline_tests.answers.rag_endpoint_server import RagEndpoint
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, write_dataset

ROOT = Path(__file__).resolve().parents[2]
KB = "answers-tiny-dagster"
DS = "tiny-answers"


def test_coverage_check_passes_warns_and_errors() -> None:
    full = answer_coverage_result(4, 4, [], 0.5)
    assert full.passed and full.metadata["coverage"].value == 1.0
    some = answer_coverage_result(4, 3, ["d"], 0.5)
    assert not some.passed and some.severity == dg.AssetCheckSeverity.WARN
    assert some.metadata["missing_case_ids"].value == ["d"] and some.metadata["missing"].value == 1
    few = answer_coverage_result(300, 100, [f"c{i}" for i in range(200)], 0.5)
    assert not few.passed and few.severity == dg.AssetCheckSeverity.ERROR
    assert len(few.metadata["missing_case_ids"].value) == 100 and few.metadata["missing"].value == 200
    assert "100/300 cases answered (33.3%)" in few.description
    empty = answer_coverage_result(0, 0, [], 0.5)
    assert not empty.passed and empty.severity == dg.AssetCheckSeverity.ERROR
    assert "undefined" in empty.description, "no cases: no coverage, never a silent 0"


def test_the_answers_asset_runs_in_its_own_pool(engine, tmp_path, monkeypatch) -> None:
    assert answers.op.pool == ANSWER_POOL and answer_metrics.op.pool == POOL
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")  # Postgres run/event storage, pools
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("RAG_DAGSTER_PG_URL", dagster_database_url())
    with dg.DagsterInstance.get() as instance:
        ensure_pool(instance)
        ensure_pool(instance)  # twice: no error
        storage = instance.event_log_storage
        assert {POOL, ANSWER_POOL} <= set(storage.get_concurrency_keys())
        assert storage.get_pool_limits() and {p.name: p.limit for p in storage.get_pool_limits()}[ANSWER_POOL] == 2


def test_answer_partition_keys_read_dataset_then_answerer() -> None:
    assert answer_partitions.partition_dimension_names == ["dataset", "system"]
    assert str(answer_partition_key("demo", "extractive-v1")) == "demo|extractive-v1"


def test_the_sensor_adds_the_answerers_of_dropped_files(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RAG_PROJECT_ROOT", str(tmp_path))
    for name in ("demo/their-rag.jsonl", "demo/bad|name.jsonl", "other/extractive-v1.jsonl", "demo/notes.txt"):
        (tmp_path / "answers" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "answers" / name).write_text("", encoding="utf-8")
    instance = dg.DagsterInstance.ephemeral()
    result = answer_partitions_sensor(dg.build_sensor_context(instance=instance))
    [request] = result.dynamic_partitions_requests
    assert list(request.partition_keys) == ["extractive-v1", "their-rag"], "registered first, no invalid name"
    instance.add_dynamic_partitions("answerer", list(request.partition_keys))
    assert isinstance(answer_partitions_sensor(dg.build_sensor_context(instance=instance)), dg.SkipReason)


@pytest.fixture
def project(engine, tmp_path, datasets, monkeypatch):
    """A project root in tmp_path (answers folders), the tiny knowledge base and a dataset with answers."""
    monkeypatch.setenv("RAG_PROJECT_ROOT", str(tmp_path))
    chunks = ingest_tiny_kb(engine, KB, tmp_path / "kb")
    cases = [
        {"case_id": "backup", "question": "What do nightly backups use?", "k": 3,
         "relevant_chunk_ids": [chunks["backup.md"]], "reference_answers": ["basebackup"]},
        {"case_id": "coffee", "question": "When is the coffee machine descaled?", "k": 3,
         "relevant_chunk_ids": [chunks["coffee.md"]], "reference_answers": ["every Friday"]},
        {"case_id": "vacation", "question": "年假可以结转几天？", "k": 2,
         "relevant_chunk_ids": [chunks["vacation-zh.md"]], "reference_answers": ["五天"]},
        {"case_id": "ceo-phone", "question": "What is the CEO's phone number?", "k": 3,
         "relevant_chunk_ids": [], "answerable": False},
    ]
    write_dataset(datasets / f"{DS}.json", KB, cases)
    return tmp_path, chunks


def _instance(*answerers: str) -> dg.DagsterInstance:
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("dataset", [DS])
    instance.add_dynamic_partitions("answerer", list(answerers))
    return instance


def _answer(instance, answerer: str, config: dict | None = None) -> dg.ExecuteInProcessResult:
    run_config = {"ops": {"answers": {"config": config}}} if config else None
    return dg.materialize([answers, answer_metrics], partition_key=f"{DS}|{answerer}", instance=instance,
                          resources={"rag_db": RagDatabase()}, run_config=run_config, raise_on_error=False)


def _metadata(result, asset: str) -> dict:
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey(asset)]
    return {k: v.value for k, v in event.materialization.metadata.items()}


def test_a_dropped_file_is_copied_checked_and_scored(engine, project) -> None:
    root, chunks = project
    dropped = root / "answers" / DS / "my-rag.jsonl"
    dropped.parent.mkdir(parents=True)
    lines = [{"case_id": "backup", "answer": "basebackup", "cited_chunk_ids": [chunks["backup.md"]]},
             {"case_id": "coffee", "answer": "On Mondays.", "cited_chunk_ids": [chunks["monorepo.md"]]},
             {"case_id": "ceo-phone", "answer": "信息不足", "cited_chunk_ids": []}]
    dropped.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    instance = _instance("my-rag")
    result = _answer(instance, "my-rag")
    assert result.success
    meta = _metadata(result, "answers")
    copied = root / ".rag_pipeline" / "answers" / DS / "my-rag.jsonl"
    assert meta["path"] == str(copied) and copied.read_bytes() == dropped.read_bytes()
    assert (meta["mode"], meta["lines"], meta["cases"], meta["answered"]) == ("file", 3, 4, 3)
    assert meta["answerer"] == "my-rag" and meta["answerer_named_in_file"] is False
    [check] = result.get_asset_check_evaluations()
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert check.metadata["missing_case_ids"].value == ["vacation"] and check.metadata["coverage"].value == 0.75

    scored = _metadata(result, "answer_metrics")
    expected = evaluate_answers(engine, KB, DS, copied, answerer="my-rag", store=False).summary
    for name, m in expected.metrics.items():
        assert scored[f"{name}_n_scored"] == m.n_scored and scored[f"{name}_n_skipped"] == m.n_skipped
        assert scored.get(name) == m.mean, name
    assert scored["exact_match"] == 0.5 and scored["refusal_recall"] == 1.0
    assert scored["verdicts"]["correct"] >= 1 and sum(scored["verdicts"].values()) == 4
    assert scored["answerer"] == "my-rag" and "| exact_match | 0.500 |" in scored["summary"]


def test_the_in_process_answerer_and_an_endpoint_then_the_dataset_summary(engine, project, monkeypatch) -> None:
    root, _ = project
    instance = _instance("extractive-v1", "their-rag", "nobody")
    result = _answer(instance, "extractive-v1")
    assert result.success
    meta = _metadata(result, "answers")
    assert meta["mode"] == "answerer" and meta["lines"] == 4 and meta["answerer"].startswith("extractive-v1@")
    assert Path(meta["path"]) == root / ".rag_pipeline" / "answers" / DS / "extractive-v1.jsonl"
    assert _metadata(result, "answer_metrics")["answerer"] == "extractive-v1"

    secret = "s3cr3t-token-value"
    monkeypatch.setenv("THEIR_RAG_KEY", secret)
    with RagEndpoint() as endpoint:
        result = _answer(instance, "their-rag", {"endpoint_url": endpoint.url, "concurrency": 2,
                                                 "headers": {"Authorization": {"env": "THEIR_RAG_KEY"}}})
    assert result.success
    meta = _metadata(result, "answers")
    assert (meta["mode"], meta["answered"], meta["requests"]) == ("endpoint", 4, 4)
    assert sum(endpoint.requests.values()) == 4
    logged = [str(e) for e in instance.all_logs(result.run_id)]
    assert not any(secret in line for line in logged), "a header from the environment is never logged"
    assert secret not in json.dumps(instance.get_run_by_id(result.run_id).run_config), "nor stored with the run"

    missing = _answer(instance, "nobody")
    assert not missing.success
    [failure] = [e for e in missing.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert "no answers for tiny-answers|nobody" in failure.step_failure_data.error.message
    assert str(root / "answers" / DS / "nobody.jsonl") in failure.step_failure_data.error.message
    assert not (root / ".rag_pipeline" / "answers" / DS / "nobody.jsonl").exists()

    summary = dg.materialize([answer_run_summary], partition_key=DS, instance=instance,
                             resources={"rag_db": RagDatabase()})
    view = _metadata(summary, "answer_run_summary")
    assert view["answerers"] >= 2 and view["baseline"].startswith("extractive-v1 (")
    assert "| their-rag |" in view["compared_with_baseline"] and "extractive-v1@" in view["table"]


@pytest.mark.parametrize("headers", [["Authorization: Bearer sk-literal-4242"],
                                     {"Authorization": "Bearer sk-literal-4242"}])
def test_a_literal_header_value_is_refused_before_dagster_stores_the_run(headers) -> None:
    instance = _instance("their-rag")
    with pytest.raises(dg.DagsterInvalidConfigError) as raised:
        _answer(instance, "their-rag", {"endpoint_url": "http://127.0.0.1:9/rag", "headers": headers})
    assert "headers" in str(raised.value) and "env" in str(raised.value), "the config error says the shape"
    assert instance.get_runs() == [], "no run, so no run config holding the value"


def test_credentials_written_in_the_endpoint_url_are_refused_unshown(engine, project, monkeypatch) -> None:
    instance = _instance("their-rag")
    with RagEndpoint() as endpoint:
        url = endpoint.url.replace("http://", "http://alice:url-pass-4242@")
        literal = _answer(instance, "their-rag", {"endpoint_url": url})
        monkeypatch.setenv("THEIR_RAG_URL", url)
        from_env = _answer(instance, "their-rag", {"endpoint_url": {"env": "THEIR_RAG_URL"}})
    assert not literal.success
    [failure] = [e for e in literal.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    message = failure.step_failure_data.error.message
    assert "endpoint_url: credentials written in the URL" in message and "url-pass-4242" not in message
    assert sum(endpoint.requests.values()) == 4, "only the run reading the URL from the environment asked"
    assert from_env.success and "url-pass-4242" not in json.dumps(instance.get_run_by_id(from_env.run_id).run_config)
    logged = [str(e) for e in instance.all_logs(from_env.run_id)]
    assert not any("url-pass-4242" in line for line in logged)
