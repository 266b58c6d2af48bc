"""The agreement routes in-process: a dataset of the tiny knowledge base judged by three annotators (one chunk
adjudicated), its report from the API (κ as scikit-learn and statsmodels compute it) and on the console page; a
dataset without judgments, an unknown one."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

from rag_pipeline.evaluation.datasets.judgments import Judgment, resolved_labels
from rag_pipeline.service import stored_datasets
from rag_pipeline_tests.web.inprocess.conftest import DATASET, covers

pytestmark = pytest.mark.db  # a judged dataset stored on the tiny knowledge base of the session's database
API = "/api/v1/knowledge-bases/{kb}/retrieval/datasets/{name}/agreement"
PAGE = "/admin/retrieval-evaluations/kb/{kb}/datasets/{name}/agreement"
GRADES = {"ann": [2, 0, 1, 2, 0], "bo": [2, 1, 1, 0, 0], "cy": [2, 0, 1, 2, 1]}


@pytest.fixture(scope="module")
def judged(engine, evaluated) -> dict:
    chunks = sorted(evaluated["chunks"].values())[:5]
    judgments = [Judgment(name, cid, grades[i]) for name, grades in GRADES.items() for i, cid in enumerate(chunks)]
    judgments.append(Judgment("lead", chunks[4], 0, adjudicated=True))
    case = {"case_id": "three", "question": "Which chunks answer this?", "k": 5,
            "relevant_chunk_ids": resolved_labels(judgments), "judgments": [j.as_dict() for j in judgments]}
    raw = json.dumps({"name": "judged", "annotators": ["ann", "bo", "cy", "lead"], "cases": [case]})
    stored_datasets.store_uploaded_dataset(engine, evaluated["kb"], raw, source="test")
    return {"kb": evaluated["kb"], "chunks": chunks}


@covers("GET /api/v1/knowledge-bases/{id}/retrieval/datasets/{name}/agreement",
        "GET /admin/retrieval-evaluations/kb/{kb}/datasets/{dataset}/agreement")
def test_agreement_from_the_api_and_the_console(client, judged):
    report = client.get(API.format(kb=judged["kb"], name="judged")).json()
    assert report["annotators"] == ["ann", "bo", "cy"] and len(report["pairs"]) == 3
    for pair in report["pairs"]:
        a, b = GRADES[pair["a"]], GRADES[pair["b"]]
        assert pair["kappa"]["value"] == pytest.approx(cohen_kappa_score(a, b))
        linear = cohen_kappa_score(a, b, weights="linear", labels=[0, 1, 2])
        assert pair["linear_kappa"]["value"] == pytest.approx(linear)
    table, _ = aggregate_raters(np.array(list(GRADES.values())).T)
    assert report["group"]["fleiss_kappa"]["value"] == pytest.approx(fleiss_kappa(table))
    assert report["resolutions"] == {"adjudicated": 1, "majority": 2, "unanimous": 2}
    assert [d["adjudicated_by"] for d in report["disagreements"]] == [None, None, "lead"]
    html = client.get(PAGE.format(kb=judged["kb"], name="judged")).text
    assert f"{cohen_kappa_score(GRADES['ann'], GRADES['bo']):.3f}" in html and 'id="fleiss"' in html
    assert "adjudicated by lead" in html and html.count("<tr>") >= 3

    plain = client.get(API.format(kb=judged["kb"], name=DATASET)).json()  # no judgments: nothing to compare
    assert plain["pairs"] == [] and plain["group"] is None and plain["judgments"] == 0
    assert "nothing to compare" in client.get(PAGE.format(kb=judged["kb"], name=DATASET)).text
    missing = client.get(API.format(kb=judged["kb"], name="no-such"))
    assert missing.status_code == 404 and "no dataset 'no-such'" in missing.json()["detail"]
    assert client.get(PAGE.format(kb=judged["kb"], name="no-such")).status_code == 404
