"""Annotator agreement: κ checked against scikit-learn and statsmodels, Fleiss' κ against the published example,
the label rule, and a dataset judged by several annotators read, reported and resolved."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.inter_rater import aggregate_raters
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss_kappa

from rag_pipeline.evaluation.agreement import agreement_report, cohen_kappa, confusion, fleiss_kappa
from rag_pipeline.evaluation.datasets.judgments import Judgment, resolve_chunk
from rag_pipeline.evaluation.datasets.load import load_dataset, parse_dataset

GOOD = Path(__file__).resolve().parent.parent / "data" / "good_datasets"
WIKIPEDIA_FLEISS = np.array([[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
                             [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]])


def _chunks(n: int) -> list[str]:
    return [str(uuid.UUID(int=i + 1)) for i in range(n)]


def _judged_dataset(raters: dict[str, list[int]], chunks: list[str], per_case: int = 5) -> dict:
    """A dataset whose cases hold ``per_case`` chunks each, graded by every rater; labels by the rule."""
    cases = []
    for start in range(0, len(chunks), per_case):
        ids = chunks[start:start + per_case]
        judgments = [{"annotator": name, "chunk_id": cid, "grade": grades[start + i]}
                     for name, grades in raters.items() for i, cid in enumerate(ids)]
        labels = {cid: resolve_chunk([Judgment(name, cid, grades[start + i]) for name, grades in raters.items()]).grade
                  for i, cid in enumerate(ids)}
        if not any(g >= 1 for g in labels.values()):
            labels[ids[0]] = 1
            judgments.append({"annotator": "adjudicator", "chunk_id": ids[0], "grade": 1, "adjudicated": True})
        cases.append({"case_id": f"c{start}", "question": f"q{start}?", "k": 5, "relevant_chunk_ids": labels,
                      "judgments": judgments})
    return {"knowledge_base": "kb", "annotators": [*raters, "adjudicator"], "cases": cases}


def test_two_annotators_kappa_equals_scikit_learn(tmp_path):
    rng = np.random.default_rng(7)
    alice = rng.integers(0, 4, 60)
    bob = np.where(rng.random(60) < 0.6, alice, rng.integers(0, 4, 60))  # agree more than chance
    path = tmp_path / "two.json"
    path.write_text(json.dumps(_judged_dataset({"alice": alice.tolist(), "bob": bob.tolist()}, _chunks(60))))
    report = agreement_report(load_dataset(path))
    (pair,) = report.pairs
    adjudicated = {(d.case_id, d.chunk_id) for d in report.disagreements if d.adjudicated_by}
    assert (pair.a, pair.b, pair.n, report.group) == ("alice", "bob", 60, None)
    labels = sorted(set(alice) | set(bob))
    for weights, kappa in ((None, pair.kappa), ("linear", pair.linear_kappa), ("quadratic", pair.quadratic_kappa)):
        assert kappa.value == pytest.approx(cohen_kappa_score(alice, bob, weights=weights, labels=labels), abs=1e-12)
    assert pair.relevance_kappa.value == pytest.approx(cohen_kappa_score(alice >= 1, bob >= 1), abs=1e-12)
    assert pair.raw_agreement == pytest.approx(float(np.mean(alice == bob)))
    assert pair.base_rate_a == pytest.approx(np.mean(alice >= 1))
    assert pair.base_rate_b == pytest.approx(np.mean(bob >= 1))
    assert np.array(pair.confusion).sum() == 60 and 0.2 < pair.kappa.value < 0.9
    assert report.open_disagreements == int(np.sum(alice != bob)) - len(adjudicated)


def test_grades_missing_in_between_keep_their_distance():
    """Weights follow the grades, not the categories seen: 0 vs 3 is three steps even when 1 and 2 are unused."""
    a, b = [0, 3, 3, 0, 3], [0, 3, 0, 3, 3]
    matrix = confusion(a, b, range(4))
    assert cohen_kappa(matrix, "linear").value == pytest.approx(
        cohen_kappa_score(a, b, weights="linear", labels=[0, 1, 2, 3]))


def test_fleiss_kappa_matches_the_published_example_and_statsmodels():
    assert fleiss_kappa(WIKIPEDIA_FLEISS).value == pytest.approx(0.210, abs=5e-4)  # Fleiss (1971) as on Wikipedia
    assert fleiss_kappa(WIKIPEDIA_FLEISS).value == pytest.approx(sm_fleiss_kappa(WIKIPEDIA_FLEISS), abs=1e-12)
    rng = np.random.default_rng(3)
    truth = rng.integers(0, 3, 40)
    raters = {n: np.where(rng.random(40) < 0.7, truth, rng.integers(0, 3, 40)).tolist() for n in ("a", "b", "c", "d")}
    report = agreement_report(parse_dataset(json.dumps(_judged_dataset(raters, _chunks(40))), name="four"))
    table, _ = aggregate_raters(np.array(list(raters.values())).T)
    assert report.group is not None and report.group.n == 40 and len(report.pairs) == 6
    assert report.group.fleiss_kappa.value == pytest.approx(sm_fleiss_kappa(table), abs=1e-12)


def test_undefined_kappa_is_null_with_a_reason():
    one_category = cohen_kappa(confusion([1, 1, 1], [1, 1, 1], [1]))
    assert one_category.value is None and "chance agreement is 1" in one_category.reason
    assert cohen_kappa(confusion([], [], [0, 1])).reason == "no item rated by both"
    assert fleiss_kappa(np.array([[3], [3]])).value is None
    report = agreement_report(parse_dataset(json.dumps(_judged_dataset({"a": [1, 1], "b": [1, 1]}, _chunks(2))),
                                            name="same"))
    assert report.pairs[0].kappa.value is None and report.pairs[0].raw_agreement == 1.0


@pytest.mark.parametrize(("grades", "adjudicated", "expected"), [
    ([2, 2, 2], None, (2, "unanimous")), ([2, 1, 2], None, (2, "majority")), ([2, 0], None, (0, "tie_lower")),
    ([3, 3, 1, 1, 2], None, (1, "tie_lower")), ([2, 0], 1, (1, "adjudicated")), ([1, 1, 0], 0, (0, "adjudicated"))])
def test_the_label_rule(grades, adjudicated, expected):
    judged = [Judgment(f"r{i}", "c", g) for i, g in enumerate(grades)]
    judged += [Judgment("judge", "c", adjudicated, adjudicated=True)] if adjudicated is not None else []
    resolution = resolve_chunk(judged)
    assert (resolution.grade, resolution.rule) == expected


def test_a_three_annotator_file_lists_its_disagreements_and_keeps_its_labels():
    dataset = load_dataset(GOOD / "judged_by_three.json")
    (case,) = dataset.cases
    assert case.grades == {"30465673-88ea-41f0-a5a0-da496592f3df": 2, "41576784-99fb-42a1-b6b1-eb5a7a3a04e0": 0}
    report = agreement_report(dataset)
    assert report.resolutions == {"adjudicated": 1, "majority": 1} and report.open_disagreements == 1
    assert [(d.grades, d.label, d.adjudicated_by) for d in report.disagreements] == [
        ({"alice": 2, "bob": 1, "carol": 2}, 2, None), ({"alice": 1, "bob": 0}, 0, "carol")]
    assert report.group is not None and report.group.n == 1  # carol's adjudication is not a rating


def test_judgments_are_part_of_the_version_and_survive_storage_form():
    data = _judged_dataset({"a": [1, 0], "b": [1, 1]}, _chunks(2))
    judged = parse_dataset(json.dumps(data), name="v")
    for case in data["cases"]:
        del case["judgments"]
    del data["annotators"]
    assert parse_dataset(json.dumps(data), name="v").content_hash != judged.content_hash
    again = [type(c).from_dict(c.as_dict()) for c in judged.cases]
    assert again == list(judged.cases)


def test_the_cli_reports_resolves_and_refuses_bad_judgments(tmp_path, capsys):
    from rag_pipeline.cli.main import main as cli

    data = _judged_dataset({"alice": [2, 0, 1, 1, 0], "bob": [2, 1, 1, 0, 0]}, _chunks(5))
    (case,) = data["cases"]
    labels = case["relevant_chunk_ids"]
    case["relevant_chunk_ids"] = dict.fromkeys(labels, 1)  # not the rule's labels
    source = tmp_path / "in" / "judged.json"
    source.parent.mkdir()
    source.write_text(json.dumps(data), encoding="utf-8")
    assert cli(["agreement", str(source)]) == 2
    err = capsys.readouterr().err
    assert "cases[0] (case_id 'c0'): field 'relevant_chunk_ids': is not the resolution" in err
    out = tmp_path / "judged.json"
    assert cli(["agreement", str(source), "--resolved", str(out)]) == 0
    text = capsys.readouterr().out
    kappa = cohen_kappa_score([2, 0, 1, 1, 0], [2, 1, 1, 0, 0])
    assert f"alice × bob  5  0.60   {kappa:.3f}" in text and "2 open disagreement(s)" in text
    assert load_dataset(out).cases[0].grades == labels and json.loads(source.read_text())["cases"][0][
        "relevant_chunk_ids"] != labels  # the input is left as it was
    assert cli(["agreement", str(out), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["pairs"][0]["kappa"]["value"] == pytest.approx(kappa)

    case["judgments"][1]["grade"] = 11
    case["judgments"][2]["annotator"] = "mallory"
    source.write_text(json.dumps(data), encoding="utf-8")
    again = tmp_path / "again" / "judged.json"
    again.parent.mkdir()
    assert cli(["agreement", str(source), "--resolved", str(again)]) == 2
    err = capsys.readouterr().err
    assert "field 'judgments[1].grade': grade must be between 0 and 10, got 11" in err
    assert "field 'judgments[2].annotator': unknown annotator 'mallory'" in err
    assert not again.exists()  # nothing written
