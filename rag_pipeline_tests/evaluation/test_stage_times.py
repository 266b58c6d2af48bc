"""A run's time per stage (docs/evaluating.md, "Time per stage"): every stage present and non-negative, the
stages plus ``other`` equal to the run's wall time, stored with the run and shown by ``evaluate``, the Dagster
metadata and the report; stages a strategy does not have take 0 s. Structure and invariants only, never an upper
bound."""

from __future__ import annotations

import json
import math

import pytest

from rag_pipeline.cli import main
from rag_pipeline.contracts.runs import STAGE_LABELS, StageTimes
from rag_pipeline.defs.evaluation_metadata import run_metadata
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.evaluation.stage_times import share_readers, stage_times_of
from rag_pipeline.retrieval.stage_clock import StageClock
from rag_pipeline.retrieval.strategies import Rerank, get_strategy
from rag_pipeline.service import evaluations
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, tiny_cases, write_dataset

KB = "stage-times-kb"
STAGE_FIELDS = [f for f in StageTimes.model_fields if f != "wall_s"]


@pytest.fixture(scope="module")
def tiny(engine, tmp_path_factory):
    folder = tmp_path_factory.mktemp("stage_times")
    chunks = ingest_tiny_kb(engine, KB, folder / "docs")
    return write_dataset(folder / "stage-times.json", KB, tiny_cases(chunks), name="stage-times")


def _check(stages: StageTimes) -> None:
    values = [getattr(stages, f) for f in STAGE_FIELDS]
    assert all(v >= 0 and math.isfinite(v) for v in values), stages
    assert sum(values) == pytest.approx(stages.wall_s, abs=1e-5), "the stages and other add up to the wall time"
    assert sum(values) - stages.other_s <= stages.wall_s + 1e-9


def test_every_stage_is_timed_and_they_add_up_to_the_wall_time(engine, tiny):
    """A hybrid strategy with complete pools and a rerank stage (stored USE vectors) on two readers."""
    strategy = get_strategy("hybrid-v1").model_copy(update={
        "version": "hybrid-stages-test-v1", "complete_pool": True,
        "rerank": Rerank(method="embedding", model="use-multilingual-v3", weight=0.5)})
    outcome = evaluate_dataset(engine, load_dataset(tiny), strategy, batch_size=2, readers=2)
    stages = outcome.stages
    assert stages is not None
    _check(stages)
    assert stages.wall_s >= outcome.timings["total_s"], "the wall time runs on to the summary's write"
    for main_thread in ("prepare_s", "index_load_s", "question_embedding_s", "metrics_s", "candidate_write_s",
                        "summary_write_s"):
        assert getattr(stages, main_thread) > 0, main_thread
    [stored] = evaluations.run_summaries(engine, [outcome.run_id])
    assert stored.stages == stages, "the run's summary stores the stage times"
    # what the report and the HTTP API give: the summary with its stages
    assert json.loads(stored.model_dump_json())["stages"] == stages.model_dump()
    metadata = run_metadata(evaluations.case_tables(engine, outcome.run_id, limit=10))
    shown = metadata["evaluation_run_summary"]["stage_seconds"].value
    assert list(shown) == [*STAGE_LABELS.values(), "wall"]
    assert shown["wall"] == pytest.approx(stages.wall_s, abs=1e-4)


def test_stages_a_strategy_lacks_take_no_time(engine, tiny):
    outcome = evaluate_dataset(engine, load_dataset(tiny), get_strategy("keyword-v1"), readers=1)
    stages = outcome.stages
    assert stages is not None
    _check(stages)
    assert (stages.vector_leg_s, stages.pool_completion_s, stages.rerank_s, stages.question_embedding_s) == (0,) * 4


def test_evaluate_prints_the_time_per_stage_of_each_strategy(engine, tiny, capsys):
    assert main(["evaluate", "--dataset", str(tiny), "--strategy", "keyword-v1", "--strategy", "hybrid-v1",
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("time per stage (s)"):].splitlines()
    header = table[0].split()
    assert header[-2:] == ["keyword-v1", "hybrid-v1"]
    rows = {line.rsplit(None, 2)[0].strip(): [float(x) for x in line.split()[-2:]] for line in table[2:]}
    assert list(rows) == [*STAGE_LABELS.values(), "wall"]
    for column in range(2):
        stages = [v[column] for label, v in rows.items() if label != "wall"]
        assert all(s >= 0 for s in stages)
        assert sum(stages) == pytest.approx(rows["wall"][column], abs=0.01 * len(stages))


def test_the_readers_stages_share_the_wait_by_their_busy_seconds():
    clock, readers = StageClock(), StageClock()
    clock.add("prepare", 1.0)
    readers.add("vector_leg", 3.0)
    readers.add("keyword_leg", 1.0)  # 4 s staged of the readers' 5 busy seconds
    share_readers(clock, readers, waited=2.5, busy=5.0)
    assert (clock.get("vector_leg"), clock.get("keyword_leg")) == (1.5, 0.5)
    stages = stage_times_of(clock, wall=4.0)
    assert (stages.prepare_s, stages.vector_leg_s, stages.keyword_leg_s, stages.other_s, stages.wall_s) == (
        1.0, 1.5, 0.5, 1.0, 4.0)
    idle = StageClock()
    share_readers(idle, readers, waited=9.0, busy=5.0)  # never more than the readers' own seconds
    assert idle.get("vector_leg") == 3.0
    none = StageClock()
    share_readers(none, StageClock(), waited=1.0, busy=0.0)
    assert none.total() == 0
