"""SQuAD v2.0 and CMRC 2018 files in and out: dataset and prediction files the tests write are read through the
project, scored, and the run's official figures equal the official scripts' (``official_scripts.py``) on the same
files; the predictions written back score the same; bad files are refused naming file, line or place, and field."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from rag_pipeline.answers.answers_file import AnswersFileError, read_answers
from rag_pipeline.answers.metrics.official import predictions
from rag_pipeline.answers.metrics.scoring import score_answers
from rag_pipeline.answers.metrics.summary import summarise
from rag_pipeline.answers.predictions_file import predictions_json
from rag_pipeline.contracts.answers import AnswerScoring, OfficialScores
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.datasets.strict_json import DatasetError
from rag_pipeline.service.answers import with_convention
from rag_pipeline_tests.answers import official_scripts as oracle

SQUAD_QAS = [  # (id, gold answers, prediction; None: unanswerable, is_impossible)
    ("s1", ["Denver Broncos", "The Denver Broncos"], "the Denver Broncos!"),
    ("s2", ["to the north"], "Insufficient information to answer."),  # the script scores its words
    ("s3", ["1879"], "In 1879, the 2nd year."),
    ("s4", None, ""),  # no answer to an unanswerable question: 1
    ("s5", None, "Paris"),
    ("s6", ["Paris"], ""),  # no answer to an answerable one: 0
    ("s7", ["the"], ""),  # every gold normalises to nothing: "" is right
    ("s8", None, " . "),  # normalises to nothing: no answer
    ("s9", ["a copper statue of Christ", "Christ"], "copper statue"),
    ("s10", ["3.5 million dollars", "$3.5m"], "$3.5 million"),
]
CMRC_QAS = [  # (id, gold answers, prediction; None: no prediction)
    ("c1", ["12秒87"], "12秒87。"),
    ("c2", ["约 30 毫克"], "绿茶大约含有 30 毫克咖啡因"),
    ("c3", ["北京", "北京市"], "中国的首都是北京。"),
    ("c4", ["《红楼梦》"], "红楼梦"),
    ("c5", ["iPhone 15发布会"], "iPhone 15 Pro发布会"),
    ("c6", ["上海"], None),  # unanswered: SKIP, counted 0
    ("c7", ["ＡＢＣ公司"], "ABC公司"),
    ("c8", ["1998年", "一九九八年"], ""),
]


def _squad_file(qas) -> dict:
    def qa(qid, golds):
        return {"id": qid, "question": f"Question {qid}?", "is_impossible": golds is None,
                "answers": [{"text": g, "answer_start": 0} for g in golds or []],
                **({"plausible_answers": [{"text": "x", "answer_start": 0}]} if golds is None else {})}
    half = len(qas) // 2
    return {"version": "v2.0", "data": [
        {"title": "A", "paragraphs": [{"context": "…", "qas": [qa(i, g) for i, g, _ in qas[:half]]}]},
        {"title": "B", "paragraphs": [{"context": "…", "qas": [qa(i, g) for i, g, _ in qas[half:]]}]}]}


def _cmrc_file(qas) -> dict:
    return {"version": "v1.0", "data": [{"id": "DEV_0", "title": "标题", "paragraphs": [
        {"id": "DEV_0", "context": "……", "qas": [
            {"id": qid, "question": f"第 {n} 个问题是什么？",
             "answers": [{"text": g, "answer_start": 0} for g in golds]} for n, (qid, golds, _) in enumerate(qas)]}]}]}


def _write(tmp_path: Path, name: str, dataset: dict, preds: dict) -> tuple[Path, Path]:
    data_path, pred_path = tmp_path / f"{name}.json", tmp_path / f"{name}-predictions.json"
    data_path.write_text(json.dumps(dataset, ensure_ascii=False, indent=1), encoding="utf-8")
    pred_path.write_text(json.dumps(preds, ensure_ascii=False, indent=2), encoding="utf-8")
    return data_path, pred_path


def _project(data_path: Path, pred_path: Path, text_mode: str = "simple"):
    """What ``answers evaluate`` does with the two files, without a database."""
    data = load_dataset(data_path, knowledge_base="kb")
    parsed = read_answers(pred_path, case_ids=[c.case_id for c in data.cases])
    scoring = with_convention(AnswerScoring(), data.answer_convention, text_mode)
    results = score_answers(data.cases, parsed.records, kb_chunk_ids=None, chunk_text={}, scoring=scoring)
    return data, results, summarise(results, cases=len(data.cases), convention=scoring.convention)


def _assert_squad_equal(official: OfficialScores | None, expected: dict) -> None:
    assert official is not None and official.convention == "squad"
    assert official.exact == pytest.approx(expected["exact"], abs=1e-9)
    assert official.f1 == pytest.approx(expected["f1"], abs=1e-9) and official.total == expected["total"]
    for prefix, (exact, f1, total) in {"HasAns": (official.has_ans_exact, official.has_ans_f1, official.has_ans_total),
                                       "NoAns": (official.no_ans_exact, official.no_ans_f1, official.no_ans_total)
                                       }.items():
        if f"{prefix}_total" in expected:
            assert (exact, f1) == pytest.approx((expected[f"{prefix}_exact"], expected[f"{prefix}_f1"]), abs=1e-9)
            assert total == expected[f"{prefix}_total"]
        else:
            assert total == 0 and exact is None


def _assert_cmrc_equal(official: OfficialScores | None, expected: dict) -> None:
    assert official is not None and official.convention == "cmrc"
    assert (official.exact, official.f1, official.average) == pytest.approx(
        (expected["EM"], expected["F1"], expected["AVERAGE"]), abs=1e-9)
    assert (official.total, official.skipped) == (expected["TOTAL"], expected["SKIP"])


def test_a_squad_v2_file_scores_as_the_official_script(tmp_path: Path) -> None:
    dataset, preds = _squad_file(SQUAD_QAS), {i: p for i, _, p in SQUAD_QAS}
    data, results, summary = _project(*_write(tmp_path, "squad-dev", dataset, preds))
    assert data.answer_convention == "squad" and summary.convention == "squad"
    assert [c.answerable for c in data.cases] == [g is not None for _, g, _ in SQUAD_QAS]
    assert data.cases[0].reference_answers == ("Denver Broncos", "The Denver Broncos")
    expected = oracle.squad_main(dataset, preds)
    _assert_squad_equal(summary.official, expected)
    assert expected["NoAns_total"] == 3 and expected["NoAns_exact"] == pytest.approx(200 / 3)  # the data is mixed
    exact_raw, f1_raw = oracle.get_raw_scores(dataset["data"], preds)
    for r in results:  # per case, the answerable ones: the run's own exact_match and f1
        if r.answerable:
            assert (r.answer_metrics.exact_match, r.answer_metrics.f1) == pytest.approx(
                (exact_raw[r.case_id], f1_raw[r.case_id]), abs=1e-9), r.case_id
    by_id = {r.case_id: r for r in results}
    assert f1_raw["s2"] > 0 and by_id["s2"].answer_metrics.f1 == pytest.approx(f1_raw["s2"])  # its words count
    assert by_id["s8"].refused and by_id["s8"].refusal_source == "empty" and by_id["s8"].verdict == "correct"


def test_a_cmrc_2018_file_scores_as_the_official_script(tmp_path: Path) -> None:
    dataset = _cmrc_file(CMRC_QAS)
    preds = {i: p for i, _, p in CMRC_QAS if p is not None}
    data, results, summary = _project(*_write(tmp_path, "cmrc-dev", dataset, preds))
    assert data.answer_convention == "cmrc" and all(c.answerable for c in data.cases)
    expected = oracle.cmrc_main(dataset, preds)
    _assert_cmrc_equal(summary.official, expected)
    assert expected["SKIP"] == 1 and expected["EM"] > 0
    c1 = next(r for r in results if r.case_id == "c1")
    assert c1.answer_metrics.exact_match == 1.0 and oracle.calc_em_score(["12秒87"], "12秒87。") == 1


def test_the_convention_follows_the_text_mode_only_without_the_files_own(tmp_path: Path) -> None:
    dataset, preds = _squad_file(SQUAD_QAS), {i: p for i, _, p in SQUAD_QAS}
    data, _, summary = _project(*_write(tmp_path, "squad-dev", dataset, preds), text_mode="chinese")
    assert summary.convention == "squad"  # the file's own convention wins over a Chinese knowledge base
    assert with_convention(AnswerScoring(), None, "chinese").convention == "cmrc"
    assert with_convention(AnswerScoring(), None, "english").convention == "squad"
    assert with_convention(AnswerScoring(), None, "mixed").convention == "auto"
    assert with_convention(AnswerScoring(convention="cmrc"), "squad", "english").convention == "cmrc"


WORDS = ["the", "a", "Denver", "Broncos", "north", "of", "France", "Paris", "1879", "statue", "an", "Christ", ",",
         "!", "3.5", "million", "to"]
ZH = [*"北京上海中国的首都是年月日人大学发布会三国演义鲁迅红楼梦秒毫克约", "12", "87", "30", "。", "，", "《", "》",
      "iPhone", " ", "ＡＢＣ"]


@pytest.mark.parametrize("seed", range(4))
def test_random_squad_and_cmrc_files_equal_the_scripts(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)

    def text(pool, n):
        return " ".join(rng.choice(pool) for _ in range(n)) if pool is WORDS else "".join(rng.choices(pool, k=n))

    squad_qas, cmrc_qas = [], []
    for n in range(40):
        golds = None if rng.random() < 0.3 else [text(WORDS, rng.randint(1, 4)) for _ in range(rng.randint(1, 3))]
        pool = [*(golds or []), "", text(WORDS, rng.randint(1, 6))]
        squad_qas.append((f"q{n}", golds, rng.choice(pool)))
        zh_golds = [text(ZH, rng.randint(1, 6)).strip() or "北京" for _ in range(rng.randint(1, 3))]
        cmrc_qas.append((f"DEV_{n}", zh_golds, rng.choice([*zh_golds, text(ZH, rng.randint(0, 10)), None])))
    squad, squad_preds = _squad_file(squad_qas), {i: p for i, _, p in squad_qas}
    _, results, summary = _project(*_write(tmp_path, "squad-random", squad, squad_preds))
    _assert_squad_equal(summary.official, oracle.squad_main(squad, squad_preds))
    assert summary.official is not None and summary.official.total == 40 and summary.official.no_ans_total > 0
    written = tmp_path / "written.json"  # the predictions written back score the same
    written.write_text(predictions_json(predictions(results)), encoding="utf-8")
    _assert_squad_equal(summary.official, oracle.squad_main(squad, json.loads(written.read_text(encoding="utf-8"))))
    cmrc, cmrc_preds = _cmrc_file(cmrc_qas), {i: p for i, _, p in cmrc_qas if p is not None}
    _, results, summary = _project(*_write(tmp_path, "cmrc-random", cmrc, cmrc_preds))
    _assert_cmrc_equal(summary.official, oracle.cmrc_main(cmrc, cmrc_preds))
    assert summary.official is not None and summary.official.total == 40
    _assert_cmrc_equal(summary.official, oracle.cmrc_main(cmrc, predictions(results)))


def test_predictions_written_back_are_the_official_format(tmp_path: Path) -> None:
    dataset, preds = _squad_file(SQUAD_QAS), {i: p for i, _, p in SQUAD_QAS}
    _, results, _ = _project(*_write(tmp_path, "squad-dev", dataset, preds))
    out = json.loads(predictions_json(predictions(results)))
    assert list(out) == [i for i, _, _ in SQUAD_QAS]  # dataset order
    assert out["s1"] == "the Denver Broncos!" and out["s8"] == "" and out["s4"] == ""


def test_a_bad_prediction_file_names_file_line_and_field(tmp_path: Path) -> None:
    data_path, _ = _write(tmp_path, "squad-dev", _squad_file(SQUAD_QAS), {})
    data = load_dataset(data_path, knowledge_base="kb")
    bad = tmp_path / "bad-predictions.json"
    bad.write_text('{\n  "s1": "Denver",\n  "ghost": "x",\n  "s2": 7,\n  "s3": ["1879"],\n  "s1": "again"\n}\n',
                   encoding="utf-8")
    with pytest.raises(AnswersFileError) as info:
        read_answers(bad, case_ids=[c.case_id for c in data.cases])
    message = str(info.value)
    assert "bad-predictions.json: 4 problems" in message
    assert "line 3 (case_id 'ghost'): field 'case_id': \"ghost\" is not a question id of the dataset" in message
    assert "line 4 (case_id 's2'): field 'answer': must be a string" in message and "got integer 7" in message
    assert "line 5 (case_id 's3'): field 'answer': must be a string" in message
    assert "line 6 (case_id 's1'): field 'case_id': question id \"s1\" has more than one answer (lines 2, 6)" in message
    empty = tmp_path / "empty.json"
    empty.write_text("{}", encoding="utf-8")
    with pytest.raises(AnswersFileError, match="empty.json: has no predictions"):
        read_answers(empty, case_ids=["s1"])


def test_a_bad_official_dataset_names_the_place_and_field(tmp_path: Path) -> None:
    dataset = _squad_file(SQUAD_QAS[:4])
    qas = dataset["data"][0]["paragraphs"][0]["qas"]
    qas[1]["id"] = "s1"  # a repeated id
    qas[0]["answers"][1]["text"] = 5
    dataset["data"][1]["paragraphs"][0]["qas"][0]["question"] = " "
    path = tmp_path / "squad-bad.json"
    path.write_text(json.dumps(dataset), encoding="utf-8")
    with pytest.raises(DatasetError) as info:
        load_dataset(path, knowledge_base="kb")
    message = str(info.value)
    assert "squad-bad.json: 3 problems" in message
    assert "field 'data[0].paragraphs[0].qas[0].answers[1].text': must be a string, got integer" in message
    assert "field 'data[0].paragraphs[0].qas[1].id': question id \"s1\" already used at data[0].paragraphs[0]" \
           ".qas[0]" in message
    assert "field 'data[1].paragraphs[0].qas[0].question': must not be empty" in message
    path.write_text(json.dumps({"version": "v2.0", "data": {}}), encoding="utf-8")
    with pytest.raises(DatasetError, match="field 'data': must be an array, got object"):
        load_dataset(path, knowledge_base="kb")
    with pytest.raises(DatasetError, match="no knowledge base"):
        load_dataset(_write(tmp_path, "ok", _squad_file(SQUAD_QAS), {})[0])


def test_a_native_dataset_may_name_its_convention(tmp_path: Path) -> None:
    case = {"case_id": "c1", "question": "多少？", "k": 3, "reference_answers": ["12秒87"],
            "relevant_chunk_ids": ["0b9f3a52-1c2d-4e5f-8a9b-0c1d2e3f4a5b"]}
    path = tmp_path / "native.json"
    path.write_text(json.dumps({"knowledge_base": "kb", "answer_convention": "cmrc", "cases": [case]}),
                    encoding="utf-8")
    first = load_dataset(path)
    assert first.answer_convention == "cmrc"
    path.write_text(json.dumps({"knowledge_base": "kb", "cases": [case]}), encoding="utf-8")
    assert load_dataset(path).answer_convention is None and load_dataset(path).version == first.version
    path.write_text(json.dumps({"knowledge_base": "kb", "answer_convention": "bleu", "cases": [case]}),
                    encoding="utf-8")
    with pytest.raises(DatasetError, match="field 'answer_convention'"):
        load_dataset(path)
