"""The admin console in a real browser: Debian's Chromium, headless, driven by Playwright, against a real server.

The seed's §7.1 workflow end to end on the demo knowledge base: upload the demo dataset (the label check shows
before anything runs), launch two strategies with one click (real Dagster runs through the daemon of the
``live_server`` fixture), watch them finish, then the dashboard (current metrics, regression gate, charts), the
run's case table filtered to zero-score cases, a zero-score case's drill-down (why its relevant chunk was missed,
chunk text on demand) and the comparison of the two runs. Screenshots of every page are saved as test artefacts
(the ``console-screenshots`` folder of pytest's temporary directory, printed); with ``RAG_UPDATE_SCREENSHOTS=1``
the test also rewrites the small PNGs of ``docs/`` that docs/evaluating.md shows.

Nothing is downloaded: Playwright's own browsers are not used, ``/usr/bin/chromium`` is (``.ci/run`` installs it).
"""

from __future__ import annotations

import io
import json
import os
import re
import time
from pathlib import Path

import pytest

from rag_pipeline.contracts.runs import STAGE_LABELS

# a real server + Dagster daemon on the session's database; a browser driving two Dagster evaluation runs
pytestmark = [pytest.mark.db, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BASE = "/admin/retrieval-evaluations"
SCREENSHOTS = "console-screenshots"  # the folder of the `shots` fixture
STRATEGIES = ("hybrid-v1", "keyword-v1")
RUN_TIMEOUT_S = 900
DOCS_PNG_MAX = 150_000
UPDATE_DOCS = os.environ.get("RAG_UPDATE_SCREENSHOTS") == "1"


def _shot(page, shots: Path, name: str) -> None:
    """A full-page screenshot as a test artefact; with RAG_UPDATE_SCREENSHOTS=1 also docs/console-<name>.png (the
    first screen of the page, as a 256-colour PNG, kept small for docs/evaluating.md)."""
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    if not UPDATE_DOCS:
        return
    from PIL import Image  # only when regenerating the docs

    image = Image.open(io.BytesIO(page.screenshot(full_page=False))).convert("RGB")
    out = ROOT / "docs" / f"console-{name}.png"
    out.parent.mkdir(exist_ok=True)
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
    assert out.stat().st_size < DOCS_PNG_MAX, f"{out} is {out.stat().st_size} bytes"


def _wait_for_runs(page, runs_url: str, run_ids: list[str]) -> dict[str, dict]:
    """Poll the dashboard's own status JSON until every launched run has finished; a failed one fails the test
    with its error."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        data = page.request.get(runs_url).json()
        runs = {r["run_id"]: r for r in data["runs"] if r["run_id"] in run_ids}
        failed = [f"{r['strategy_version']}: {r['status']}: {r['error']}" for r in runs.values()
                  if r["status"] in ("failed", "abandoned")]
        assert not failed, "evaluation runs failed: " + "; ".join(failed)
        if len(runs) == len(run_ids) and all(r["status"] == "succeeded" for r in runs.values()):
            return runs
        assert time.monotonic() < deadline, f"runs not finished after {RUN_TIMEOUT_S} s: {runs} ({data['queue']})"
        time.sleep(2)


def test_the_seed_workflow_in_the_browser(live_server, demo_kb, browser, shots):
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("requestfailed", lambda req: errors.append(f"request failed: {req.url} ({req.failure})"))

    # knowledge bases → the demo knowledge base
    page.goto(f"{live_server}{BASE}")
    kb_row = page.locator("#knowledge-bases tbody tr").filter(has=page.get_by_role("link", name=demo_kb, exact=True))
    assert kb_row.count() == 1
    assert "use-multilingual-v3" in kb_row.inner_text()
    kb_row.get_by_role("link", name=demo_kb).click()

    # an invalid upload: every problem inline with its case index, case_id and field; nothing stored
    bad = ROOT / "rag_pipeline_tests" / "data" / "bad_datasets" / "grades_many_problems.json"
    page.set_input_files("input[name=dataset]", str(bad))
    page.click("#upload-button")
    problems = page.locator("#upload-problems")
    assert "was not stored" in problems.inner_text()
    cells = [r.locator("td").all_inner_texts() for r in problems.locator("tbody tr").all()]
    assert len(cells) >= 4 and any(c[1] == "big" and c[2] == "k" and "between 1 and 1000" in c[3] for c in cells)
    assert page.locator("#datasets", has_text="grades_many_problems").count() == 0

    # the demo dataset: stored, then its label check before anything runs
    page.set_input_files("input[name=dataset]", str(ROOT / "datasets" / "demo.json"))
    page.click("#upload-button")
    page.wait_for_url(re.compile(r"/datasets/demo\?uploaded="))
    assert "Check its labels below" in page.locator("#uploaded").inner_text()
    cases = len(json.loads((ROOT / "datasets" / "demo.json").read_text(encoding="utf-8"))["cases"])
    assert re.search(rf"all \d+ labels of {cases} cases are valid", page.locator("#label-check").inner_text())
    boxes = page.locator("#evaluate input[name=strategy]")
    checked = [b.get_attribute("value") for b in boxes.all() if b.is_checked()]
    assert "hybrid-v1" in checked and "vector-minilm-v1" not in checked  # applicable ones pre-selected
    _shot(page, shots, "upload")

    # one click: two strategies through the Dagster queue, live status while they run
    for box in boxes.all():
        if box.is_enabled() and box.get_attribute("value") not in STRATEGIES:
            box.uncheck()
    page.click("#evaluate-button")
    page.wait_for_url(re.compile(r"launched="))
    launched = re.search(r"launched=([^&]+)", page.url).group(1).replace("%2C", ",").split(",")
    assert len(launched) == 2
    page.wait_for_selector("#live-runs tbody tr[data-run]", timeout=30_000)
    assert page.locator("#live-runs tbody tr[data-run]").count() >= 1
    _shot(page, shots, "running")
    dashboard_url = page.url.split("?")[0]
    finished = _wait_for_runs(page, f"{dashboard_url}/runs.json", launched)
    assert {r["strategy_version"] for r in finished.values()} == set(STRATEGIES)
    assert all(r["cases_done"] == r["cases_total"] == cases for r in finished.values())

    # the dashboard refreshes itself once the runs are done: both strategies' current metrics, the regression
    # gate, each metric over time
    page.wait_for_url(re.compile(r"/datasets/demo$"), timeout=60_000)
    page.wait_for_load_state("load")
    current = page.locator("#current tbody tr")
    # other tests of the session may have run more strategies on a dataset called demo: these two are there, and
    # their current runs are the two just launched
    shown = {r.locator("td").first.inner_text().split()[0]: r for r in current.all()}
    assert set(STRATEGIES) <= set(shown)
    assert sorted(shown[s].get_by_role("link", name=re.compile("^[0-9a-f]{8}$")).inner_text() for s in STRATEGIES) \
        == sorted(run_id[:8] for run_id in launched)
    for row in (shown[s] for s in STRATEGIES):
        values = [float(v) for v in row.locator("td.num").all_inner_texts()[1:7]]
        assert all(0.0 <= v <= 1.0 for v in values) and any(v > 0 for v in values)
    gate = page.locator("#gate").inner_text()
    assert ("PASSED" in gate or "FAILED" in gate) and "keyword-v1" in gate and "95% CI" in gate
    assert page.locator("#history svg.chart").count() == 6
    assert page.locator("#history svg.chart circle").count() >= 2 * 6
    top = {s: page.locator(s).bounding_box()["y"] for s in ("#evaluate", "#current", "#history", "#label-check")}
    assert top["#evaluate"] < top["#current"] < top["#history"] < top["#label-check"]  # the action first
    _shot(page, shots, "dashboard")

    # the baseline's run: filter to zero-score cases
    run_link = re.compile("^[0-9a-f]{8}$")
    page.locator("#current tbody tr", has_text="hybrid-v1").get_by_role("link", name=run_link).click()
    page.wait_for_selector("#cases")
    total = page.locator("#cases tbody tr").count()
    assert total == cases
    page.check("#zero-only")
    zero_rows = page.locator("#cases tbody tr:not([hidden])")
    assert 0 < zero_rows.count() < total
    assert f"{zero_rows.count()} of {total} cases" == page.locator("#case-count").inner_text()
    assert all(v == "0.000" for v in zero_rows.locator("td:nth-child(9)").all_inner_texts())  # nDCG@k column
    _shot(page, shots, "run")
    stages = page.locator("#stage-times")  # the Dagster run's wall time per stage
    assert stages.is_visible()
    assert stages.locator("tbody tr[data-stage] td:first-child").all_inner_texts() == list(STAGE_LABELS.values())
    stages.screenshot(path=str(shots / "run-stages.png"))

    # a zero-score case: its question, the missed relevant chunk and why, the candidate pool, chunk text
    zero_rows.first.locator("td:nth-child(2) a").click()
    page.wait_for_selector("#pool")
    assert page.locator("#question").inner_text().strip()
    missed = page.locator("#relevant tbody tr.hl")
    assert missed.count() >= 1
    why = missed.first.inner_text()
    assert re.search(r"not in pool|below_cutoff|vector_only|keyword_only|not_in_pool", why), why
    assert "gap" in why or "not retrieved" in why or "score" in why, why
    pool = page.locator("#pool tbody tr")
    assert pool.count() >= 3
    headers = page.locator("#pool thead th").all_inner_texts()
    for name in ("rank", "chunk", "document", "vector score", "keyword score", "final score", "relevant", "selected"):
        assert name in headers
    missed.first.locator("button.show-text").click()
    text = page.locator("#relevant tr.textrow .chunktext")
    text.wait_for()
    assert len(text.inner_text()) > 20
    _shot(page, shots, "case")

    # the comparison: keyword-v1 against the baseline, deltas with CI and p, win/tie/loss, moved cases, one case's
    # two candidate lists side by side
    page.goto(dashboard_url)
    page.locator("#current tbody tr", has_text="keyword-v1").get_by_role("link", name="vs baseline").click()
    page.wait_for_selector("#paired")
    paired = {r.locator("td").first.inner_text(): r.locator("td").all_inner_texts()
              for r in page.locator("#paired tbody tr").all()}
    assert {"P@k", "R@k", "MRR", "nDCG@k", "Hit@k", "AP@k"} <= set(paired)
    assert re.fullmatch(r"\[[+-]\d\.\d{4}, [+-]\d\.\d{4}\]", paired["nDCG@k"][4])
    assert re.fullmatch(r"\d+ / \d+ / \d+", paired["nDCG@k"][7])
    assert page.locator("#moved tbody tr").count() >= 1
    assert page.locator("#side-by-side").count() == 1 and page.locator("table.pool-side").count() == 2
    _shot(page, shots, "compare")

    # back home: the knowledge base now has datasets and runs, the recent runs list them
    page.goto(f"{live_server}{BASE}")
    recent = page.locator("#recent-runs tbody tr")
    assert set(STRATEGIES) <= {r.locator("td").first.inner_text().split()[0] for r in recent.all()}
    _shot(page, shots, "home")

    assert not errors, errors
    page.close()


def test_answer_pages_in_the_browser(live_server, engine, demo_kb, browser, shots, tmp_path):
    """The demo's answers (the extractive baseline answerer) scored and stored, then in the browser: the dashboard's
    answer section, the answer run page sorted and filtered by plain links and the form (no script needed), a
    Chinese case with its citations marked and their text, and its retrieval run's case page."""
    from rag_pipeline.contracts.answers import AnswerScoring
    from rag_pipeline.service import answers, evaluations
    from rag_pipeline.service.answer_collection import collect_answers

    dataset = ROOT / "datasets" / "demo.json"
    evaluations.evaluate(engine, evaluations.plan_evaluation(engine, dataset, ("keyword-v1",), knowledge_base=demo_kb))
    collected = collect_answers(dataset, tmp_path / "answers.jsonl", answerer="extractive-v1", knowledge_base=demo_kb)
    assert collected.status == "succeeded", collected.reason
    report = answers.evaluate_answers(engine, demo_kb, dataset, tmp_path / "answers.jsonl")
    run_id = report.run.run_id
    rescored = answers.rescore_answer_run(engine, run_id, AnswerScoring(f1_correct_threshold=0.25))  # a 2nd point
    page = browser.new_page(viewport={"width": 1280, "height": 860}, java_script_enabled=False)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    page.goto(f"{live_server}{BASE}/kb/{demo_kb}/datasets/demo")
    row = page.locator("#answer-runs tbody tr", has_text="extractive")
    assert row.count() >= 2 and page.locator("#answer-charts svg.chart").count() == 8
    assert row.first.get_attribute("data-run") == rescored.run.run_id  # newest first
    assert page.locator("#answer-charts svg.chart polyline").count() == 8  # one answerer's line per chart
    page.locator("#answers").scroll_into_view_if_needed()
    _shot(page, shots, "answers-dashboard")
    page.locator(f'#answer-runs a[href="/admin/answer-runs/{run_id}"]').click()
    page.wait_for_selector("#answer-cases")
    assert page.locator("#answer-cases tbody tr").count() == len(report.cases)
    summary = page.locator("#answer-summary tbody tr").all_inner_texts()
    assert len(summary) == 12 and any("refusal recall" in r for r in summary)
    _shot(page, shots, "answer-run")

    page.get_by_role("link", name="sort by f1").click()  # descending first
    values = page.locator("#answer-cases tbody tr td:nth-child(6)").all_inner_texts()
    defined = [float(v) for v in values if v != "—"]
    assert defined == sorted(defined, reverse=True) and values[len(defined):] == ["—"] * (len(values) - len(defined))
    assert "sort=-f1" in page.url
    page.select_option("#verdict-filter", "correct")
    page.click("#answer-filters button[type=submit]")  # a plain GET form: works without JavaScript
    assert "verdict=correct" in page.url and "sort=-f1" in page.url
    verdicts = page.locator("#answer-cases tbody tr[data-case]")
    assert verdicts.count() == report.summary.verdicts["correct"]
    assert all(v == "correct" for v in page.locator("#answer-cases tbody tr[data-case] td:nth-child(3)")
               .all_inner_texts())
    page.goto(f"{live_server}/admin/answer-runs/{run_id}?wbc=1")
    confident = answers.get_answer_run(engine, run_id, wrong_but_confident=True).cases
    assert page.locator("#answer-cases tbody tr[data-case]").count() == len(confident)
    _shot(page, shots, "answer-run-confident")

    # a Chinese case that cites chunks: every citation marked with text, its chunk text, the metrics
    cited = next(c for c in report.cases if c.citations and re.search(r"[\u4e00-\u9fff]", c.question))
    page.goto(f"{live_server}/admin/answer-runs/{run_id}")
    page.locator(f'#answer-cases tr[data-case="{cited.case_id}"] td:first-child a').click()
    page.wait_for_selector("#case-metrics")
    assert page.locator("#question").inner_text().strip() == cited.question.strip()
    cards = page.locator("#citations .citation")
    assert cards.count() == len(cited.citations)
    for card, citation in zip(cards.all(), cited.citations, strict=True):
        text = card.inner_text()
        assert ("✓ relevant" in text) == citation.is_relevant and ("✗ not relevant" in text) != citation.is_relevant
        assert len(card.locator("pre.chunktext").inner_text()) > 10
    _shot(page, shots, "answer-case")
    page.locator("#retrieval-link a").click()
    page.wait_for_selector("#pool")
    assert page.locator("#question").inner_text().strip() == cited.question.strip()

    refusal = next(c for c in report.cases if not c.answerable)
    page.goto(f"{live_server}/admin/answer-runs/{run_id}/cases/{refusal.case_id}")
    assert "unanswerable" in page.locator("h1").inner_text()
    _shot(page, shots, "answer-case-unanswerable")
    assert not errors, errors
    page.close()
