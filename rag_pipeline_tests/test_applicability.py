"""The one applicability rule (docs/design.md §3.2) on a knowledge base ingested with the default model only —
the README's walk-through: the rule itself (every leg, the rerank stage, the text mode, a cross-encoder
directory), ``suggest`` without ``--strategy`` pooling only what can run and saying what it left out, ``evaluate``
refusing before anything is stored, and the Dagster sensor's plan skipping the same strategy for the same reason.
Real database, real USE embeddings."""

from __future__ import annotations

import json

import dagster as dg
import pytest
import sqlalchemy as sa

from rag_pipeline.cli import main
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.defs.sensors import new_dataset_sensor
from rag_pipeline.retrieval.strategies import StrategyError, get_strategy
from rag_pipeline.service import datasets as dataset_service
from rag_pipeline.service import evaluations
from rag_pipeline.service.applicability import applicabilities, strategy_applicability
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, tiny_cases

RERANK = "hybrid-bm25-rerank-minilm-v1"  # first stage on the default model, rerank stage on all-minilm-l6-v2
MINILM = "all-minilm-l6-v2"


@pytest.fixture(scope="module")
def tiny(engine, tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("apply")
    name = f"apply-{folder.name[-6:]}".replace("_", "-")
    return {"kb": name, "chunks": ingest_tiny_kb(engine, name, folder / "docs")}


def _runs(engine, kb: str) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM retrieval_evaluation_runs r JOIN knowledge_bases k "
                                    "ON k.id = r.knowledge_base_id WHERE k.name = :kb"), {"kb": kb}).scalar()


def test_the_rule_checks_every_leg_the_rerank_stage_the_text_mode_and_a_cross_encoder(engine, tiny, tmp_path):
    with engine.connect() as conn:
        checked = applicabilities(conn, tiny["kb"])
        base = get_strategy("hybrid-v1")
        other_mode = strategy_applicability(conn, tiny["kb"], base.replace(version="zh-v1", text_search="chinese"))
        no_dir = base.replace(version="ce-v1", rerank={"method": "cross-encoder", "model": str(tmp_path / "nope")})
        cross = strategy_applicability(conn, tiny["kb"], no_dir)
    assert checked["hybrid-v1"].runnable and checked["keyword-v1"].runnable and checked["hybrid-v1"].reason is None
    rerank = checked[RERANK]
    assert (rerank.runnable, rerank.missing_models) == (False, [MINILM])
    assert rerank.reason == (f"strategy {RERANK} cannot run on knowledge base {tiny['kb']!r}: no {MINILM!r} "
                             f"embeddings for the rerank stage (ingest with --models {MINILM})")
    assert checked["vector-minilm-v1"].missing_models == [MINILM] and "vector leg" in checked["vector-minilm-v1"].reason
    assert not other_mode.runnable and other_mode.missing_models == []
    assert "text mode 'chinese'" in other_mode.reason and "'simple'" in other_mode.reason
    assert not cross.runnable and cross.missing_models == [str(tmp_path / "nope")] and "--models" not in cross.reason


def test_suggest_without_strategy_pools_what_can_run_and_names_what_it_left_out(tiny, tmp_path, capsys):
    questions = tmp_path / "q.txt"
    questions.write_text("basebackup archiving\nWhy keep all services in one repository?\n", encoding="utf-8")
    out = tmp_path / "mine.draft.json"
    assert main(["suggest", "--knowledge-base", tiny["kb"], "--questions", str(questions), "--output", str(out),
                 "--depth", "3"]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    draft = json.loads(out.read_text(encoding="utf-8"))
    assert RERANK not in draft["strategies"] and "hybrid-v1" in draft["strategies"]
    minilm = {RERANK, "vector-minilm-v1", "hybrid-bm25-minilm-v1"}
    assert set(draft["strategies_left_out"]) == minilm | {v.replace("-v1", "-exact-v1") for v in minilm}
    assert f"not pooled: {RERANK}: strategy {RERANK} cannot run" in err and f"--models {MINILM}" in err, err
    named = tmp_path / "named.draft.json"
    assert main(["suggest", "--knowledge-base", tiny["kb"], "--questions", str(questions), "--output", str(named),
                 "--strategy", RERANK]) == 2
    err = capsys.readouterr().err
    assert RERANK in err and MINILM in err and "Traceback" not in err and not named.exists(), err


def test_evaluate_refuses_a_strategy_that_cannot_run_before_storing_anything(engine, tiny, tmp_path, capsys):
    path = tmp_path / "apply.json"
    path.write_text(json.dumps({"knowledge_base": tiny["kb"], "metadata": {"auto_evaluate": True},
                                "cases": tiny_cases(tiny["chunks"])}), encoding="utf-8")
    before = _runs(engine, tiny["kb"])
    plan = evaluations.plan_evaluation(engine, path, ("keyword-v1", RERANK), knowledge_base=tiny["kb"])
    with pytest.raises(StrategyError, match=f"{RERANK} cannot run .*{MINILM}.*nothing was run"):
        evaluations.evaluate(engine, plan)
    assert main(["evaluate", "--dataset", str(path), "--strategy", "keyword-v1", "--strategy", RERANK]) == 2
    err = capsys.readouterr().err
    assert RERANK in err and f"--models {MINILM}" in err and "Traceback" not in err, err
    assert _runs(engine, tiny["kb"]) == before, "nothing stored"


def test_the_sensor_plan_skips_the_same_strategy_for_the_same_reason(engine, tiny, datasets):
    path = datasets / "apply.json"
    path.write_text(json.dumps({"knowledge_base": tiny["kb"], "metadata": {"auto_evaluate": True},
                                "cases": tiny_cases(tiny["chunks"])}), encoding="utf-8")
    plan = dataset_service.plan_dataset_runs(engine, path)
    assert plan.problems is None and RERANK not in plan.to_run and "hybrid-v1" in plan.to_run
    with engine.connect() as conn:
        assert plan.skipped[RERANK] == applicabilities(conn, tiny["kb"])[RERANK].reason
    with dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral(), resources={"rag_db": RagDatabase()}) as ctx:
        result = new_dataset_sensor(ctx)
    assert [r.partition_key for r in result.run_requests] == [f"apply|{v}" for v in plan.to_run]
