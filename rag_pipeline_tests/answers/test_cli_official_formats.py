"""``rag-pipeline answers evaluate`` on a SQuAD v2.0 dataset file and an official prediction file, as a user runs
it: the stored run has the squad convention and the official script's figures (equal to the transcribed script on
the same files), ``answers show`` prints them, ``answers predictions`` writes the official format back; a bad
prediction file exits 2 naming file, line and field, with nothing stored; ``--convention`` wins."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import sqlalchemy as sa

from rag_pipeline.cli.main import main as cli
from rag_pipeline.service import answers
from rag_pipeline_tests.answers import official_scripts as oracle
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb

DATASET = {"version": "v2.0", "data": [{"title": "Office", "paragraphs": [{"context": "…", "qas": [
    {"id": "56be4db0acb8001400a502ec", "question": "When is the coffee machine descaled?", "is_impossible": False,
     "answers": [{"text": "every Friday", "answer_start": 0}, {"text": "Friday", "answer_start": 6}]},
    {"id": "56be4db0acb8001400a502ed", "question": "How are backups made?", "is_impossible": False,
     "answers": [{"text": "basebackup with continuous archiving", "answer_start": 0}]},
    {"id": "5a8d7bf7df8bba001a0f9ab1", "question": "What is the CEO's salary?", "is_impossible": True,
     "answers": [], "plausible_answers": [{"text": "a lot", "answer_start": 0}]},
    {"id": "5a8d7bf7df8bba001a0f9ab2", "question": "Where do I park?", "is_impossible": True, "answers": []},
]}]}]}
PREDICTIONS = {"56be4db0acb8001400a502ec": "on Friday.", "56be4db0acb8001400a502ed": "with basebackup",
               "5a8d7bf7df8bba001a0f9ab1": "", "5a8d7bf7df8bba001a0f9ab2": "in the garage"}


@pytest.fixture
def files(engine, kb_name, tmp_path) -> dict:
    ingest_tiny_kb(engine, kb_name, tmp_path / "docs")
    dataset, preds = tmp_path / f"squad-{kb_name}.json", tmp_path / "predictions.json"
    dataset.write_text(json.dumps(DATASET, indent=2), encoding="utf-8")
    preds.write_text(json.dumps(PREDICTIONS, indent=2), encoding="utf-8")
    return {"kb": kb_name, "dataset": dataset, "predictions": preds, "tmp": tmp_path}


def _runs(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM answer_runs")).scalar_one()


def _evaluate(f: dict, *extra: str) -> int:
    return cli(["answers", "evaluate", "--knowledge-base", f["kb"], "--dataset", str(f["dataset"]), "--answers",
                str(f["predictions"]), "--quiet", *extra])


def test_official_files_score_as_the_official_script_and_go_back_out(engine, files, capsys):
    report_path = files["tmp"] / "report.json"
    assert _evaluate(files, "--output", str(report_path)) == 0
    out = capsys.readouterr().out
    report = json.loads(report_path.read_text(encoding="utf-8"))
    expected = oracle.squad_main(DATASET, PREDICTIONS)
    official = report["summary"]["official"]
    assert report["run"]["scoring"]["convention"] == report["summary"]["convention"] == "squad"
    assert (official["exact"], official["f1"], official["total"]) == pytest.approx(
        (expected["exact"], expected["f1"], expected["total"]), abs=1e-9)
    assert (official["has_ans_f1"], official["no_ans_exact"]) == pytest.approx(
        (expected["HasAns_f1"], expected["NoAns_exact"]), abs=1e-9)
    assert expected["NoAns_exact"] == 50.0 and 0 < expected["HasAns_f1"] < 100  # a mixed run
    assert f"answer convention: squad  official SQuAD v2.0: exact {expected['exact']:.3f}  f1 " \
           f"{expected['f1']:.3f}  total 4" in out
    run_id = report["run"]["run_id"]
    assert cli(["answers", "show", run_id[:8]]) == 0
    assert "answer convention: squad  official SQuAD v2.0" in capsys.readouterr().out
    written = files["tmp"] / "out" / "predictions.json"
    assert cli(["answers", "predictions", run_id[:8], "--output", str(written)]) == 0
    assert "4 predictions" in capsys.readouterr().err
    back = json.loads(written.read_text(encoding="utf-8"))
    assert back == PREDICTIONS and oracle.squad_main(DATASET, back) == expected


def test_a_bad_prediction_file_exits_2_naming_line_and_field_and_stores_nothing(engine, files, capsys):
    before = _runs(engine)
    files["predictions"].write_text('{\n  "56be4db0acb8001400a502ec": 3,\n  "not-a-question": "x"\n}\n',
                                    encoding="utf-8")
    assert _evaluate(files) == 2
    err = capsys.readouterr().err
    assert "predictions.json: line 2 (case_id '56be4db0acb8001400a502ec'): field 'answer': must be a string" in err
    assert "predictions.json: line 3 (case_id 'not-a-question'): field 'case_id'" in err
    assert "Traceback" not in err and _runs(engine) == before


def test_the_convention_flag_wins_and_is_stored(engine, files, capsys):
    assert _evaluate(files, "--convention", "cmrc") == 0
    run = answers.list_answer_runs(engine, knowledge_base=files["kb"]).runs[0]
    assert run.scoring is not None and run.scoring.convention == "cmrc" and run.summary.official is not None
    assert run.summary.official.convention == "cmrc" and run.summary.official.total == 2  # answerable only
    assert "official CMRC 2018: EM" in capsys.readouterr().out
    assert _evaluate(files) == 0
    squad = answers.list_answer_runs(engine, knowledge_base=files["kb"]).runs[0]
    assert squad.scoring is not None and squad.scoring.convention == "squad"
    capsys.readouterr()
    assert cli(["answers", "compare", run.run_id, squad.run_id]) == 0
    assert "answer convention: A cmrc, B squad  (differ: EM, F1" in capsys.readouterr().out


def test_a_squad_file_is_refused_for_a_retrieval_run_and_nothing_is_stored(engine, files, capsys):
    with engine.connect() as conn:
        before = conn.execute(sa.text("SELECT count(*) FROM retrieval_evaluation_runs")).scalar_one()
    assert cli(["evaluate", "--dataset", str(files["dataset"]), "--knowledge-base", files["kb"], "--strategy",
                "keyword-v1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "2 answerable case(s) have no relevant chunk id" in err and "answers evaluate" in err
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM retrieval_evaluation_runs")).scalar_one() == before


LOADED_PROBE = """
import json, sys
from rag_pipeline.cli.main import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "loaded": sorted({name.split(".")[0] for name in sys.modules})}), file=sys.stderr)
"""
NEVER_LOADED = {"pandas", "scipy", "dagster", "sklearn", "torch", "sentence_transformers", "matplotlib", "httpx"}


def test_scoring_a_squad_file_loads_no_heavy_library(engine, files) -> None:
    env = {**os.environ, "RAG_DATABASE_URL": engine.url.render_as_string(hide_password=False)}
    done = subprocess.run([sys.executable, "-c", LOADED_PROBE, "answers", "evaluate", "--knowledge-base", files["kb"],
                           "--dataset", str(files["dataset"]), "--answers", str(files["predictions"]), "--quiet",
                           "--output", str(files["tmp"] / "probe.json")],
                          capture_output=True, text=True, timeout=300, env=env)
    probe = json.loads(done.stderr.strip().splitlines()[-1])
    assert probe["code"] == 0, done.stderr
    assert "official SQuAD v2.0" in done.stdout
    assert not NEVER_LOADED & set(probe["loaded"]), sorted(NEVER_LOADED & set(probe["loaded"]))
