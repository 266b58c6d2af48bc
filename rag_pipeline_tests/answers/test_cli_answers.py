"""``rag-pipeline answers evaluate | runs | show | compare`` as a user runs them: the report file in the contract's
key order, the text summary with n_scored / n_skipped, bad files and flags exit 2 with nothing stored, and every
``--help``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from rag_pipeline.cli.main import main as cli
from rag_pipeline.contracts.answers import AnswerReport, AnswerSummary
from rag_pipeline.service import answers
from rag_pipeline_tests.answers.judge_server import JudgeServer
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, write_dataset


@pytest.mark.parametrize("sub", ["evaluate", "runs", "show", "compare", "collect", "predictions"])
def test_every_answers_subcommand_has_help(capsys, sub):
    with pytest.raises(SystemExit) as exit_info:
        cli(["answers", sub, "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and out.startswith(f"usage: rag-pipeline answers {sub}")


@pytest.fixture
def setup(engine, kb_name, tmp_path) -> dict:
    chunks = ingest_tiny_kb(engine, kb_name, tmp_path / "docs")
    cases = [
        {"case_id": "backup", "question": "How are backups made?", "k": 3,
         "relevant_chunk_ids": [chunks["backup.md"]], "reference_answers": ["basebackup with continuous archiving"]},
        {"case_id": "coffee", "question": "When is the coffee machine descaled?", "k": 3,
         "relevant_chunk_ids": [chunks["coffee.md"]], "reference_answers": ["every Friday"]},
        {"case_id": "salary", "question": "What is the CEO's salary?", "k": 3, "relevant_chunk_ids": [],
         "answerable": False},
    ]
    dataset = write_dataset(tmp_path / "x.json", kb_name, cases, name=f"cli-{kb_name}")
    lines = [{"case_id": "backup", "answer": "basebackup with continuous archiving",
              "cited_chunk_ids": [chunks["backup.md"]]},
             {"case_id": "coffee", "answer": "on Mondays", "cited_chunk_ids": [chunks["onboarding.md"]]},
             {"case_id": "salary", "answer": "Sorry, I don't know."}]
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return {"kb": kb_name, "dataset": dataset, "answers": path, "chunks": chunks, "tmp": tmp_path}


def _runs(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM answer_runs")).scalar_one()


def _evaluate(s: dict, *extra: str) -> int:
    return cli(["answers", "evaluate", "--knowledge-base", s["kb"], "--dataset", str(s["dataset"]),
                "--answers", str(s["answers"]), "--quiet", *extra])


def test_evaluate_writes_the_report_and_prints_every_metric_with_its_counts(engine, setup, capsys):
    report_path = setup["tmp"] / "out" / "report.json"
    assert _evaluate(setup, "--answerer", "bot@1", "--output", str(report_path)) == 0
    out = capsys.readouterr().out
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert list(report) == list(AnswerReport.model_fields)
    assert list(report["summary"]) == list(AnswerSummary.model_fields)
    assert list(report["cases"][0]["answer_metrics"])[:2] == ["exact_match", "f1"]
    assert report == answers.get_answer_run(engine, report["run"]["run_id"]).model_dump(mode="json")
    assert report["cases"][0]["verdict"] == "correct" and report["cases"][1]["verdict"] != "correct"
    f1 = report["summary"]["metrics"]["citation_precision"]
    row = next(line for line in out.splitlines() if line.startswith("citation_precision "))
    assert row.split()[1:4] == [f"{f1['mean']:.3f}", str(f1["n_scored"]), str(f1["n_skipped"])]
    assert "refusal_recall" in out and "verdicts: correct" in out and "coverage 100.0%" in out
    assert not list(report_path.parent.glob(".*tmp"))  # the temporary file was renamed


def test_a_bad_answers_file_or_flag_exits_2_and_stores_nothing(engine, setup, capsys):
    before = _runs(engine)
    setup["answers"].write_text('{"case_id": "backup", "answer": 3}\n{"case_id": "zzz", "answer": "x"}\n',
                                encoding="utf-8")
    assert _evaluate(setup, "--output", str(setup["tmp"] / "r.json")) == 2
    err = capsys.readouterr().err
    assert "line 1 (case_id 'backup'): field 'answer'" in err and "line 2 (case_id 'zzz'): field 'case_id'" in err
    assert "Traceback" not in err
    assert not (setup["tmp"] / "r.json").exists()
    empty = setup["tmp"] / "phrases.txt"
    empty.write_text("# only a comment\n", encoding="utf-8")
    assert _evaluate(setup, "--refusal-phrases", str(empty)) == 2
    assert "no phrase in it" in capsys.readouterr().err
    assert _evaluate(setup, "--judge-url", "http://127.0.0.1:9/v1") == 2
    assert "give both --judge-url and --judge-model" in capsys.readouterr().err
    with pytest.raises(SystemExit) as bad:
        _evaluate(setup, "--f1-threshold", "1.5")
    assert bad.value.code == 2
    assert _runs(engine) == before


def test_refusal_phrases_decide_the_refusal(engine, setup, capsys):
    before = _runs(engine)
    phrases = setup["tmp"] / "phrases.txt"
    phrases.write_text("无可奉告\n", encoding="utf-8")
    report = setup["tmp"] / "p.json"
    assert _evaluate(setup, "--no-store", "--refusal-phrases", str(phrases), "--output", str(report)) == 0
    assert "scored, not stored" in capsys.readouterr().out
    assert json.loads(report.read_text(encoding="utf-8"))["cases"][2]["refused"] is False  # not in the list
    assert _runs(engine) == before
    default = answers.evaluate_answers(engine, setup["kb"], setup["dataset"], setup["answers"], store=False)
    assert default.cases[2].refused is True  # "I don't know" is a default phrase


def test_runs_show_compare_in_text_and_json(engine, setup, capsys):
    a = answers.evaluate_answers(engine, setup["kb"], setup["dataset"], setup["answers"], answerer="a").run.run_id
    b = answers.evaluate_answers(engine, setup["kb"], setup["dataset"], setup["answers"], answerer="b").run.run_id
    capsys.readouterr()
    assert cli(["answers", "runs", "--dataset", setup["dataset"].stem, "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in listed["runs"]][:2] == [b, a]
    assert cli(["answers", "runs", "--dataset", setup["dataset"].stem]) == 0
    assert b[:8] in capsys.readouterr().out
    assert cli(["answers", "show", a[:8], "--wrong-but-confident"]) == 0
    text = capsys.readouterr().out
    assert "coffee  " in text and "not relevant" in text and "backup  correct" not in text
    assert cli(["answers", "show", a, "--verdict", "correct", "--sort=-f1", "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown == answers.get_answer_run(engine, a, verdict="correct", sort="-f1").model_dump(mode="json")
    assert cli(["answers", "compare", a, b, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["common_cases"] == 3
    assert cli(["answers", "compare", a, b]) == 0
    assert "verdict changes: none" in capsys.readouterr().out
    assert cli(["answers", "show", "00000000-0000-0000-0000-000000000000"]) != 0
    assert "no answer run" in capsys.readouterr().err


def test_the_judge_fills_faithfulness_over_a_real_http_server(engine, setup, capsys, monkeypatch):
    monkeypatch.setenv("RAG_JUDGE_CACHE", str(setup["tmp"] / "judge-cache.jsonl"))
    with JudgeServer() as judge:
        judge.scripts = {"faithfulness": ["faithfulness_valid"], "refusal": ["refusal_no"]}
        assert _evaluate(setup, "--no-store", "--judge-url", judge.url, "--judge-model", "m",
                         "--output", str(setup["tmp"] / "j.json")) == 0
        asked = len(judge.requests)
    report = json.loads((setup["tmp"] / "j.json").read_text(encoding="utf-8"))
    judged = [c for c in report["cases"] if c["judge"] is not None]
    assert len(judged) == 3 and asked >= 2
    assert report["summary"]["faithfulness"]["n_scored"] + report["summary"]["faithfulness"]["n_skipped"] == 3
    assert "faithfulness (judge)" in capsys.readouterr().out
    assert Path(setup["tmp"] / "j.json").stat().st_size > 0


def _claims_reply(supported: bool) -> dict:
    content = json.dumps({"claims": [{"claim": "the answer's one claim", "supported": supported, "chunk_id": None}]})
    return {"status": 200, "body": {"choices": [{"index": 0, "finish_reason": "stop",
                                                 "message": {"role": "assistant", "content": content}}]}}


def test_a_judge_run_beside_human_verdicts_shows_its_kappa(engine, setup, capsys, monkeypatch):
    """Every judge figure with its κ against people on the same answers (as scikit-learn computes it), or
    "not calibrated"; the rules' verdicts likewise."""
    from sklearn.metrics import cohen_kappa_score

    monkeypatch.setenv("RAG_JUDGE_CACHE", str(setup["tmp"] / "judge-cache.jsonl"))
    human = {"backup": {"correct": True, "faithful": True, "refusal_right": True, "annotator": "alice"},
             "coffee": {"correct": True, "faithful": False, "refusal_right": True},
             "salary": {"correct": True, "refusal_right": True}}
    lines = [json.loads(x) for x in setup["answers"].read_text(encoding="utf-8").splitlines()]
    setup["answers"].write_text("".join(json.dumps({**x, "human": human[x["case_id"]]}) + "\n" for x in lines),
                                encoding="utf-8")
    with JudgeServer() as judge:
        judge.play("faithfulness", _claims_reply(True))
        judge.play("refusal", "refusal_no")
        assert _evaluate(setup, "--no-store", "--judge-url", judge.url, "--judge-model", "m",
                         "--output", str(setup["tmp"] / "h.json")) == 0
        assert any(r["task"] == "faithfulness" for r in judge.requests)
    out = capsys.readouterr().out
    report = json.loads((setup["tmp"] / "h.json").read_text(encoding="utf-8"))
    figures = {c["figure"]: c for c in report["summary"]["calibration"]}
    faithful = figures["faithful"]["agreement"]
    judged = [c for c in report["cases"] if c["judge"] and c["judge"]["faithfulness"] is not None]
    people = [human[c["case_id"]]["faithful"] for c in judged]
    machine = [c["judge"]["faithfulness"] >= 1.0 for c in judged]
    assert faithful["n"] == len(judged) == 2 and faithful["base_rate_b"] == 1.0 and faithful["base_rate_a"] == 0.5
    assert faithful["kappa"]["value"] == pytest.approx(cohen_kappa_score(people, machine, labels=[False, True]))
    correct = figures["correct"]["agreement"]  # the rules: coffee's "on Mondays" is wrong, people said right
    assert (correct["n"], correct["confusion"]) == (3, [[0, 0], [1, 2]])
    assert correct["kappa"]["value"] == pytest.approx(cohen_kappa_score([1, 1, 1], [1, 0, 1])) == 0.0
    refusal = figures["refusal_right"]["agreement"]  # people and the rules: every refusal right, κ undefined
    assert refusal["raw_agreement"] == 1.0 and refusal["kappa"]["value"] is None
    assert "chance agreement is 1" in refusal["kappa"]["reason"]
    assert "faithfulness (judge) [κ 0.000 vs people, n 2]" in out
    assert "faithful (judge): κ 0.000  agreement 0.500  n 2" in out

    setup["answers"].write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    with JudgeServer() as judge:
        judge.play("faithfulness", _claims_reply(True))
        judge.play("refusal", "refusal_no")
        assert _evaluate(setup, "--no-store", "--judge-url", judge.url, "--judge-model", "m") == 0
    out = capsys.readouterr().out
    assert "faithfulness (judge) [not calibrated]" in out
    assert "faithful (judge): not calibrated: no human verdict 'faithful' in the answers file" in out
