"""A dataset judged by two annotators on a real server: stored through the API, its agreement from the API (κ as
scikit-learn computes it) and on the console page (in Chromium, screenshot kept); bad judgments stored nowhere."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import requests
from sklearn.metrics import cohen_kappa_score

from rag_pipeline.evaluation.datasets.judgments import Judgment, resolve_chunk

# a real server (with its Dagster daemon) on the session's database, the demo knowledge base, a browser
pytestmark = [pytest.mark.db, pytest.mark.slow]
SCREENSHOTS = "agreement-screenshots"  # the folder of the `shots` fixture
NAME = f"judged-{uuid.uuid4().hex[:6]}"


def _dataset(alice: list[int], bob: list[int], annotators=("alice", "bob")) -> dict:
    cases = []
    for c in range(0, len(alice), 5):
        ids = [str(uuid.UUID(int=1000 + i)) for i in range(c, c + 5)]
        judged = [Judgment(name, cid, grades[c + i]) for name, grades in (("alice", alice), ("bob", bob))
                  for i, cid in enumerate(ids)]
        labels = {cid: resolve_chunk([j for j in judged if j.chunk_id == cid]).grade for cid in ids}
        cases.append({"case_id": f"q{c}", "question": f"question {c}?", "k": 5, "relevant_chunk_ids": labels,
                      "judgments": [j.as_dict() for j in judged]})
    return {"name": NAME, "annotators": list(annotators), "cases": cases}


@pytest.fixture(scope="module")
def grades():
    rng = np.random.default_rng(11)
    alice = rng.integers(1, 4, 30)
    bob = np.where(rng.random(30) < 0.7, alice, rng.integers(0, 4, 30))
    return alice.tolist(), bob.tolist()


def test_the_api_reports_the_reference_kappa_and_refuses_bad_judgments(live_server, demo_kb, grades):
    api = f"{live_server}/api/v1/knowledge-bases/{demo_kb}/retrieval/datasets"
    up = requests.post(api, json=_dataset(*grades), timeout=60)
    assert up.status_code in (200, 201), up.text
    report = requests.get(f"{api}/{NAME}/agreement", timeout=60).json()
    (pair,) = report["pairs"]
    alice, bob = grades
    labels = list(range(min(alice + bob), max(alice + bob) + 1))
    assert pair["kappa"]["value"] == pytest.approx(cohen_kappa_score(alice, bob), abs=1e-12)
    assert pair["quadratic_kappa"]["value"] == pytest.approx(
        cohen_kappa_score(alice, bob, weights="quadratic", labels=labels), abs=1e-12)
    assert report["open_disagreements"] == sum(a != b for a, b in zip(alice, bob, strict=True)) > 0

    bad = _dataset(*grades, annotators=("alice",))
    bad["name"] = NAME + "-bad"
    refused = requests.post(api, json=bad, timeout=60)
    assert refused.status_code == 422
    errors = refused.json()["errors"]
    assert errors[0]["case_id"] == "q0" and errors[0]["field"] == "judgments[5].annotator"
    assert "unknown annotator 'bob'" in errors[0]["message"]
    names = [d["name"] for d in requests.get(api, timeout=60).json()["datasets"]]
    assert NAME in names and NAME + "-bad" not in names
    assert requests.get(f"{api}/{NAME}-none/agreement", timeout=60).status_code == 404


def test_the_console_page_shows_kappa_matrix_and_disagreements(live_server, demo_kb, grades, browser, shots):
    base = f"{live_server}/admin/retrieval-evaluations/kb/{demo_kb}/datasets/{NAME}"
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    page.goto(base)
    page.click("#agreement-link")
    assert page.url == f"{base}/agreement"
    alice, bob = grades
    kappa = page.locator("#pairs td.kappa").inner_text()
    assert kappa == f"{cohen_kappa_score(alice, bob):.3f}"
    assert page.locator("#disagreements tbody tr").count() == sum(a != b for a, b in zip(alice, bob, strict=True))
    assert page.locator("table.confusion").first.is_visible()
    page.screenshot(path=str(shots / "agreement.png"), full_page=True)
    missing = page.goto(f"{base}-none/agreement")
    assert missing is not None and missing.status == 404
    page.close()
