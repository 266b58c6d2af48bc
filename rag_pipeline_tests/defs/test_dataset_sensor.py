"""The dataset sensors on real Postgres and a real Dagster instance: ``new_dataset_sensor`` evaluates a file only
when it opts in (``metadata.auto_evaluate``), names one version (the dataset's) in its logs and run keys, skips what
its knowledge base cannot run or has measured; ``runs_outside_dagster`` reports CLI runs and adds a dataset
partition only for a file in the watched folder."""

from __future__ import annotations

import json
import os

import dagster as dg

from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.defs.sensors import new_dataset_sensor, runs_outside_dagster
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.retrieval.strategies import load_registry
from rag_pipeline_tests.eval_helpers import tiny_cases, write_dataset

KB = "eval-tiny-sensor"
VERSIONS = list(load_registry())
# The tiny KB holds USE embeddings only: the sensor must not launch the MiniLM strategies on it (nor one whose
# rerank stage needs MiniLM vectors).
USE_VERSIONS = [v for v, s in load_registry().items()
                if (not s.vector_candidate_k or s.embedding_model == "use-multilingual-v3")
                and (s.rerank is None or s.rerank.model == "use-multilingual-v3")]


def opted_in(path, cases, knowledge_base=KB, **metadata):
    """A dataset file that asks the sensor to evaluate it."""
    data = {"knowledge_base": knowledge_base, "metadata": {"auto_evaluate": True, **metadata}, "cases": cases}
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _sensor(instance, cursor=None):
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"rag_db": RagDatabase()}) as context:
        return context, new_dataset_sensor(context)


def _skip(result) -> str:
    assert isinstance(result, dg.SensorResult) and not result.run_requests, result
    return result.skip_reason.skip_message


def test_sensor_new_changed_unchanged(engine, chunks, datasets):
    assert 0 < len(USE_VERSIONS) < len(VERSIONS)
    instance = dg.DagsterInstance.ephemeral()
    opted_in(datasets / "alpha.json", tiny_cases(chunks)[:2])
    (datasets / "bad|name.json").write_text("[]", encoding="utf-8")
    (datasets / "notes.txt").write_text("not a dataset", encoding="utf-8")
    context, result = _sensor(instance)
    assert isinstance(result, dg.SensorResult)
    digest = json.loads(result.cursor)["alpha"]["sha256"]
    version = load_dataset(datasets / "alpha.json").version
    assert [r.run_key for r in result.run_requests] == [f"alpha.json:{version}:{v}" for v in USE_VERSIONS]
    assert [r.partition_key for r in result.run_requests] == [f"alpha|{v}" for v in USE_VERSIONS]
    assert result.dynamic_partitions_requests[0].partition_keys == ["alpha"]
    instance.add_dynamic_partitions("dataset", ["alpha"])  # what the daemon does with the request

    _, unchanged = _sensor(instance, result.cursor)
    assert "no new or changed dataset file that opts in" in _skip(unchanged)
    os.utime(datasets / "alpha.json", ns=(1, 1))  # touched, same content
    context, touched = _sensor(instance, result.cursor)
    assert "no new or changed" in _skip(touched) and json.loads(touched.cursor)["alpha"]["mtime_ns"] == 1

    opted_in(datasets / "alpha.json", tiny_cases(chunks)[:3])
    opted_in(datasets / "beta.json", tiny_cases(chunks)[1:])
    _, changed = _sensor(instance, touched.cursor)
    assert json.loads(changed.cursor)["alpha"]["sha256"] != digest
    assert {r.run_key.split(":")[0] for r in changed.run_requests} == {"alpha.json", "beta.json"}
    assert len(changed.run_requests) == 2 * len(USE_VERSIONS)
    assert changed.dynamic_partitions_requests[0].partition_keys == ["beta"]


def test_a_file_that_does_not_opt_in_gets_no_partition_and_no_run(engine, chunks, datasets, tmp_path, capsys):
    """What the README's `suggest` → `label --output datasets/mine.json` writes (and any plain dataset file) is left
    alone; adding ``metadata.auto_evaluate`` later launches it; a non-boolean flag is a problem naming the field."""
    from rag_pipeline.cli import main

    questions = tmp_path / "q.txt"
    questions.write_text("basebackup archiving\nWhy keep all services in one repository?\n", encoding="utf-8")
    draft = tmp_path / "mine.draft.json"
    assert main(["suggest", "--knowledge-base", KB, "--questions", str(questions), "--strategy", "bm25-v1",
                 "--depth", "2", "--output", str(draft)]) == 0
    judged = json.loads(draft.read_text(encoding="utf-8"))
    for question in judged["questions"]:  # what a person judging in the terminal leaves in the draft
        question["status"], question["candidates"][0]["grade"] = "judged", 1
    draft.write_text(json.dumps(judged), encoding="utf-8")
    assert main(["label", str(draft), "--export", str(datasets / "mine.json")]) == 0
    capsys.readouterr()
    instance = dg.DagsterInstance.ephemeral()
    write_dataset(datasets / "plain.json", KB, tiny_cases(chunks)[:2])
    write_dataset(datasets / "bare.json", None, tiny_cases(chunks)[:2])
    _, result = _sensor(instance)
    assert "no new or changed dataset file that opts in" in _skip(result)
    assert not result.dynamic_partitions_requests
    assert set(json.loads(result.cursor)) == {"plain", "bare", "mine"}, "seen: not re-read until it changes"

    opted_in(datasets / "plain.json", tiny_cases(chunks)[:2], strategies=["bm25-v1"])
    _, now = _sensor(instance, result.cursor)
    assert [r.partition_key for r in now.run_requests] == ["plain|bm25-v1"]
    assert now.dynamic_partitions_requests[0].partition_keys == ["plain"]

    data = {"knowledge_base": KB, "metadata": {"auto_evaluate": "yes"}, "cases": tiny_cases(chunks)[:2]}
    (datasets / "mine.json").write_text(json.dumps(data), encoding="utf-8")
    _, bad = _sensor(instance, now.cursor)
    reason = _skip(bad)
    assert "mine.json: field 'metadata.auto_evaluate': must be true or false, got \"yes\"" in reason, reason


def test_the_log_names_one_version_the_dataset_version(engine, chunks, datasets, capfd):
    instance = dg.DagsterInstance.ephemeral()
    path = opted_in(datasets / "eta.json", tiny_cases(chunks)[:2], strategies=["keyword-v1"])
    capfd.readouterr()
    _, result = _sensor(instance)
    digest = json.loads(result.cursor)["eta"]["sha256"]
    version = load_dataset(path).version
    assert digest[:12] != version
    logged = capfd.readouterr().err  # the sensor's log (Dagster's console logger)
    assert f"new dataset file eta.json (dataset version {version}): running keyword-v1" in logged, logged
    assert digest[:12] not in logged + "".join(r.run_key for r in result.run_requests)


def test_sensor_adds_no_partition_for_an_invalid_file_and_says_why(engine, chunks, datasets):
    instance = dg.DagsterInstance.ephemeral()
    cases = tiny_cases(chunks)
    cases[0]["k"] = 0
    opted_in(datasets / "broken.json", cases)
    opted_in(datasets / "no-kb.json", tiny_cases(chunks), "no-such-kb")
    (datasets / "not-json.json").write_text("{", encoding="utf-8")  # maybe an opted-in file, broken: reported
    _, result = _sensor(instance)
    reason = _skip(result)
    assert reason.startswith("invalid dataset file(s), nothing launched:")
    assert "broken.json: cases[0] (case_id 'backup-001'): field 'k'" in reason
    assert "no-such-kb" in reason
    assert not result.dynamic_partitions_requests
    assert "not-json.json" in reason
    assert set(json.loads(result.cursor)) == {"broken", "no-kb", "not-json"}, "not re-validated until it changes"


def test_sensor_skips_strategies_already_run_on_this_version_anywhere(engine, chunks, datasets, capsys):
    from rag_pipeline.cli import main

    instance = dg.DagsterInstance.ephemeral()
    path = opted_in(datasets / "gamma.json", tiny_cases(chunks)[:2])
    assert main(["evaluate", "--dataset", str(path), "--strategy", "keyword-v1", "--strategy", "bm25-v1",
                 "--quiet"]) == 0  # a CLI run: outside Dagster
    capsys.readouterr()
    _, result = _sensor(instance)
    versions = [r.partition_key.split("|")[1] for r in result.run_requests]
    assert versions == [v for v in USE_VERSIONS if v not in ("keyword-v1", "bm25-v1")]


def test_sensor_runs_the_strategies_the_file_asks_for(engine, chunks, datasets, monkeypatch):
    instance = dg.DagsterInstance.ephemeral()
    opted_in(datasets / "delta.json", tiny_cases(chunks)[:2], strategies=["bm25-v1", "vector-minilm-v1"])
    _, result = _sensor(instance)
    assert [r.partition_key for r in result.run_requests] == ["delta|bm25-v1"], "no MiniLM vectors in this KB"
    monkeypatch.setenv("RAG_SENSOR_STRATEGIES", "keyword-v1, rrf-v1")
    opted_in(datasets / "delta.json", tiny_cases(chunks)[:3])  # no metadata.strategies: the setting applies
    _, again = _sensor(instance, result.cursor)
    assert [r.partition_key for r in again.run_requests] == ["delta|keyword-v1", "delta|rrf-v1"]


def test_sensor_skips_fifos_and_dangling_links_without_blocking(engine, chunks, datasets):
    """A FIFO named like a dataset would block a plain open(); the sensor skips it (and a dangling link)."""
    instance = dg.DagsterInstance.ephemeral()
    os.mkfifo(datasets / "pipe.json")
    (datasets / "dangling.json").symlink_to(datasets / "nowhere.json")
    opted_in(datasets / "good.json", tiny_cases(chunks)[:2])
    _, result = _sensor(instance)
    assert isinstance(result, dg.SensorResult)
    assert set(json.loads(result.cursor)) == {"good"}
    assert {r.partition_key.split("|")[0] for r in result.run_requests} == {"good"}


def _walk_feed(instance):
    """Ticks of ``runs_outside_dagster`` to the feed's end (other tests' CLI runs are in it too), applied to the
    instance as the daemon would; returns the last skip reason."""
    cursor = None
    for _ in range(100):
        with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"rag_db": RagDatabase()}) as context:
            result = runs_outside_dagster(context)
        if isinstance(result, dg.SkipReason):
            return result.skip_message
        for request in result.dynamic_partitions_requests:
            instance.add_dynamic_partitions("dataset", list(request.partition_keys))
        for event in result.asset_events:
            instance.report_runless_asset_event(event)
        cursor = result.cursor
    raise AssertionError("the feed did not end")


def _materializations(instance, partition: str) -> list:
    return instance.fetch_materializations(dg.AssetRecordsFilter(
        asset_key=dg.AssetKey("evaluation_run_summary"), asset_partitions=[partition]), limit=5).records


def test_runs_made_outside_dagster_are_reported_to_the_instance(engine, chunks, datasets, capsys):
    """A CLI evaluation, then one tick of ``runs_outside_dagster``: the partition's materialization is in the
    instance (with the run's averages), the partition exists, and the next tick reports nothing twice."""
    from rag_pipeline.cli import main

    path = write_dataset(datasets / "zeta.json", KB, tiny_cases(chunks)[:2])
    assert main(["evaluate", "--dataset", str(path), "--strategy", "keyword-v1", "--quiet"]) == 0
    capsys.readouterr()
    with dg.instance_for_test() as instance:
        assert "no new evaluation run" in _walk_feed(instance)
        assert instance.has_dynamic_partition("dataset", "zeta")
        records = _materializations(instance, "zeta|keyword-v1")
        assert len(records) == 1
        meta = records[0].asset_materialization.metadata
        assert meta["source"].value.startswith("outside Dagster") and 0 <= meta["ndcg_at_k"].value <= 1


def test_a_cli_run_of_a_file_outside_the_watched_folder_adds_no_partition(engine, chunks, datasets, tmp_path,
                                                                          capsys):
    from rag_pipeline.cli import main

    path = write_dataset(tmp_path / "elsewhere" / "theta.json", KB, tiny_cases(chunks)[:2])
    assert main(["evaluate", "--dataset", str(path), "--strategy", "keyword-v1", "--quiet"]) == 0
    capsys.readouterr()
    with dg.instance_for_test() as instance:
        assert "no new evaluation run" in _walk_feed(instance)
        assert not instance.has_dynamic_partition("dataset", "theta")
        assert not _materializations(instance, "theta|keyword-v1")
