"""The admin console's pages over real HTTP (a real ``rag-pipeline serve`` on the session's database): what each page
shows for runs made by the service, the errors it answers, the CSRF check of its forms, its assets, its charts."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import pytest
import requests
from markupsafe import escape

from rag_pipeline.contracts.runs import HistoryPoint
from rag_pipeline.service import evaluations, history, stored_datasets
from rag_pipeline.web.admin.charts import history_svg, strategy_colours
from rag_pipeline_tests.web.conftest import DEMO_DATASET

# the live server fixture + two in-process evaluations
pytestmark = [pytest.mark.db, pytest.mark.slow]

BASE = "/admin/retrieval-evaluations"
DATASET = "demo-console"
STRATEGIES = ("hybrid-v1", "keyword-v1")


@pytest.fixture(scope="module")
def console_runs(engine, demo_kb, tmp_path_factory) -> dict[str, dict]:
    """The demo cases as dataset ``demo-console``, evaluated in-process with two strategies: summary per strategy."""
    path = tmp_path_factory.mktemp("console") / f"{DATASET}.json"
    data = json.loads(DEMO_DATASET.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**data, "name": DATASET}, ensure_ascii=False), encoding="utf-8")
    plan = evaluations.plan_evaluation(engine, path, STRATEGIES, knowledge_base=demo_kb)
    outcomes = evaluations.evaluate(engine, plan)
    summaries = evaluations.run_summaries(engine, [str(o.run_id) for o in outcomes])
    return {s.strategy_version: s.model_dump() for s in summaries}


def _get(live_server: str, path: str, status: int = 200) -> str:
    response = requests.get(live_server + path, timeout=120)
    assert response.status_code == status, (path, response.status_code, response.text[:2000])
    assert "Traceback" not in response.text
    return response.text


def _rows(html: str, table_id: str) -> list[str]:
    body = re.search(rf'<table id="{table_id}".*?<tbody>(.*?)</tbody>', html, re.S)
    assert body, f"no table #{table_id}"
    return re.findall(r"<tr\b.*?</tr>", body.group(1), re.S)


def test_dashboard_shows_current_runs_gate_and_history(live_server, demo_kb, console_runs):
    html = _get(live_server, f"{BASE}/kb/{demo_kb}/datasets/{DATASET}")
    current = re.findall(r"<tr><td><span class=\"swatch\".*?</tr>", html, re.S)
    assert len(current) == 2
    assert current[0].count("hybrid-v1") >= 1 and "baseline" in current[0]  # the baseline first
    hybrid = console_runs["hybrid-v1"]
    assert f"{hybrid['ndcg_at_k']:.4f}" in current[0] and f"{hybrid['precision_at_k']:.4f}" in current[0]
    gate = html[html.index('id="gate"'):html.index('id="history"')]
    assert ("PASSED" in gate) != ("FAILED" in gate) and "keyword-v1" in gate
    charts = re.findall(r"<svg class=\"chart\".*?</svg>", html, re.S)
    assert len(charts) == 6
    for run in console_runs.values():
        assert all(f'/runs/{run["run_id"]}"' in chart for chart in charts)  # every run is a point of every chart
    assert f'/compare?a={hybrid["run_id"]}&amp;b={console_runs["keyword-v1"]["run_id"]}' in html


def test_run_page_lists_every_case_and_marks_zero_scores(live_server, engine, console_runs):
    run = console_runs["hybrid-v1"]
    html = _get(live_server, f"{BASE}/runs/{run['run_id']}")
    rows = _rows(html, "cases")
    cases = history.run_cases(engine, run["run_id"]).cases
    assert len(rows) == len(cases) == run["case_count"]
    zero = [c.case_id for c in cases if c.metrics is not None and c.metrics.ndcg_at_k == 0]
    marked = [r for r in rows if 'data-zero="1"' in r]
    assert len(marked) == len(zero) and all(any(c in r for c in zero) for r in marked)
    assert f"zero-score cases only ({len(zero)})" in html
    # the demo's unanswerable cases are listed, not scored (docs/design.md §12.1): never a zero-score case
    unanswerable = [c.case_id for c in cases if not c.answerable]
    assert len(unanswerable) >= 4 and all(c.metrics is None for c in cases if not c.answerable)
    shown = [r for r in rows if "unanswerable" in r]
    assert len(shown) == len(unanswerable) and all(any(c in r for c in unanswerable) for r in shown)
    assert not any('data-zero="1"' in r for r in shown)
    page = _get(live_server, f"{BASE}/runs/{run['run_id']}/case?case_id={quote(unanswerable[0])}")
    assert 'id="unanswerable"' in page and "no retrieval metric is defined" in page


def test_case_page_explains_each_missed_relevant_chunk(live_server, engine, console_runs):
    run = console_runs["keyword-v1"]
    cases = history.run_cases(engine, run["run_id"]).cases
    case = next(c for c in cases if c.metrics is not None and c.metrics.ndcg_at_k == 0 and c.reasons)
    html = _get(live_server, f"{BASE}/runs/{run['run_id']}/case?case_id={quote(case.case_id)}")
    assert str(escape(case.question)) in html
    relevant = _rows(html, "relevant")
    assert len(relevant) == len(case.relevance_grades)
    missed = [r for r in relevant if 'class="hl"' in r]
    assert missed and all(re.search(r"not_in_pool|below_cutoff|vector_only|keyword_only", r) for r in missed)
    detail = history.case_detail(engine, run["run_id"], case.case_id)
    assert len(_rows(html, "pool")) == max(1, len(detail.candidates))
    for reason in (r for r in detail.relevant if r.reason not in (None, "hit")):
        assert str(escape(reason.detail.split(";")[0])) in html


def test_chunk_text_on_demand(live_server, engine, console_runs):
    detail = history.case_detail(engine, console_runs["hybrid-v1"]["run_id"],
                                 history.run_cases(engine, console_runs["hybrid-v1"]["run_id"]).cases[0].case_id)
    chunk = detail.candidates[0].chunk_id
    body = requests.get(f"{live_server}{BASE}/chunks/{chunk}", timeout=60).json()
    assert body["content"] == history.chunk_texts(engine, [chunk])[chunk].content and len(body["content"]) > 20
    assert requests.get(f"{live_server}{BASE}/chunks/not-a-chunk", timeout=60).status_code == 404


def test_comparison_page_pairs_the_two_runs(live_server, console_runs):
    a, b = console_runs["hybrid-v1"]["run_id"], console_runs["keyword-v1"]["run_id"]
    html = _get(live_server, f"{BASE}/compare?a={a[:8]}&b={b[:8]}")
    paired = _rows(html, "paired")
    assert [re.search(r"<td>(.*?)</td>", r).group(1) for r in paired] == ["P@k", "R@k", "MRR", "nDCG@k", "Hit@k",
                                                                            "AP@k"]
    delta = console_runs["keyword-v1"]["ndcg_at_k"] - console_runs["hybrid-v1"]["ndcg_at_k"]
    assert f"{delta:+.4f}" in paired[3]
    assert re.search(r"\[[+-]\d\.\d{4}, [+-]\d\.\d{4}\]", paired[3])
    assert _rows(html, "moved") and 'id="side-by-side"' in html and html.count('class="pool-side"') == 2
    same = _get(live_server, f"{BASE}/compare?a={a}&b={a}")
    assert all(re.search(r'"good">0</span> / \d+ / <span class="bad">0</span>', r) for r in _rows(same, "paired"))


def test_unknown_things_are_html_404s(live_server, demo_kb, console_runs):
    run = console_runs["hybrid-v1"]["run_id"]
    for path in (f"{BASE}/runs/ffffffff-ffff-4fff-bfff-ffffffffffff", f"{BASE}/kb/no-such-kb",
                 f"{BASE}/kb/{demo_kb}/datasets/no-such-dataset", f"{BASE}/runs/{run}/case?case_id=no-such-case",
                 f"{BASE}/compare?a={run}&b=ffffffff"):
        html = _get(live_server, path, 404)
        assert 'class="problems"' in html and "<html" in html
    assert requests.get(f"{live_server}/admin/static/..%2Fpages.py", timeout=30).status_code == 404
    css = requests.get(f"{live_server}/admin/static/console.css", timeout=30)
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert "Noto Sans CJK SC" in css.text  # Chinese renders with the system's CJK font, no web font download


def test_upload_needs_the_csrf_token_and_shows_every_problem(live_server, demo_kb, engine, tmp_path):
    bad = {"name": "console-bad", "cases": [
        {"case_id": "a", "question": "q", "relevant_chunk_ids": ["not-a-uuid"], "k": 5},
        {"case_id": "b", "question": "", "relevant_chunk_ids": [], "k": 0}]}
    files = {"dataset": ("console-bad.json", json.dumps(bad).encode(), "application/json")}
    session = requests.Session()
    refused = session.post(f"{live_server}{BASE}/kb/{demo_kb}/upload", files=files, timeout=60)
    assert refused.status_code == 403 and "CSRF" in refused.text
    page = session.get(f"{live_server}{BASE}/kb/{demo_kb}", timeout=60).text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    response = session.post(f"{live_server}{BASE}/kb/{demo_kb}/upload", files=files, data={"csrf_token": token},
                            timeout=60)
    assert [r.status_code for r in response.history] == [303] and "upload_failed=" in response.url  # PRG
    assert response.status_code == 200
    problems = re.search(r'<div class="problems" role="alert" id="upload-problems">.*?<tbody>(.*?)</tbody>',
                         response.text, re.S).group(1)
    rows = re.findall(r"<tr>.*?</tr>", problems, re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r, re.S) for r in rows]
    assert ["0", "a", "relevant_chunk_ids[0]"] in [c[:3] for c in cells]
    assert {("1", "b", "k"), ("1", "b", "question")} <= {tuple(c[:3]) for c in cells}
    assert "console-bad" not in {d.name for d in stored_datasets.list_datasets(engine, demo_kb)}  # a contracts model


def test_history_chart_scales_to_the_values_and_links_each_run():
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    points = [HistoryPoint(run_id=f"{i:08x}-0000-4000-8000-000000000000", strategy_version=v, dataset_version="ab" * 32,
                           is_current=i == 2, finished_at=t0 + timedelta(i), case_count=10,
                           metrics={"ndcg_at_k": 0.6 + 0.05 * i})  # a contracts model: keyword arguments
              for i, v in enumerate(["x-v1", "x-v1", "y-v1"])]
    svg = str(history_svg(points, "ndcg_at_k", "nDCG@k", strategy_colours(["x-v1", "y-v1"])))
    assert svg.count("<circle") == 3 and svg.count("<polyline") == 1  # a line for the strategy with two runs
    labels = [float(v) for v in re.findall(r'text-anchor="end">(\d\.\d\d)</text>', svg)]
    assert min(labels) == pytest.approx(0.5) and max(labels) == pytest.approx(0.8)  # not 0..1: differences show
    assert 'r="4"' in svg and "(current)" in svg
    assert "no succeeded run yet" in str(history_svg([], "ndcg_at_k", "nDCG@k", {}))


def test_every_console_page_needs_the_console_user_and_every_form_the_csrf_token():
    """Pages are guarded at router level (login when RAG_API_TOKEN is set; the login flow itself is tested in
    test_api_security.py); every state-changing route also checks the CSRF token."""
    from fastapi.routing import APIRoute

    from rag_pipeline.web.admin import compare, datasets, overview, runs
    from rag_pipeline.web.security import require_console_user, require_csrf

    posts = 0
    for module in (overview, datasets, runs, compare):
        assert [d.dependency for d in module.router.dependencies] == [require_console_user], module.__name__
        for route in module.router.routes:
            assert isinstance(route, APIRoute) and ("/admin" + route.path).startswith(BASE)
            if route.methods & {"POST", "PUT", "PATCH", "DELETE"}:
                posts += 1
                assert require_csrf in [d.call for d in route.dependant.dependencies], route.path
    assert posts == 2  # the upload and the evaluate forms


def test_an_upload_opens_its_label_check_with_each_invalid_label_and_its_fix(live_server, demo_kb, tmp_path):
    data = json.loads(DEMO_DATASET.read_text(encoding="utf-8"))
    cases = data["cases"][:5]
    unknown = "0b3c4c1e-5f7a-4a47-9d0e-6f1c2b7d8e90"
    cases[2] = {**cases[2], "relevant_chunk_ids": [unknown]}
    upload = {"name": "console-labels", "knowledge_base": demo_kb, "cases": cases}
    session = requests.Session()
    page = session.get(f"{live_server}{BASE}/kb/{demo_kb}", timeout=60).text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    response = session.post(f"{live_server}{BASE}/kb/{demo_kb}/upload", data={"csrf_token": token}, timeout=120,
                            files={"dataset": ("console-labels.json", json.dumps(upload).encode(), "application/json")})
    assert response.status_code == 200 and response.url.endswith("/datasets/console-labels?uploaded=1")
    check = response.text[response.text.index('id="label-check"'):response.text.index('id="evaluate"')]
    rows = re.findall(r"<tr><td class=\"mono\">(.*?)</td><td class=\"mono\">(.*?)</td>.*?badge fail\">(.*?)</span>"
                      r"</td>\s*<td>(.*?)</td>", check, re.S)
    assert [(r[0], r[1], r[2]) for r in rows] == [(cases[2]["case_id"], unknown, "unknown_id")]
    assert "labels must be document_chunks.id of knowledge base" in rows[0][3]
    assert "1 of 5 cases have no valid label" in check
    assert check.count(unknown) == 1 and check.count(rows[0][3]) == 1  # in the table only, not the headline too
    # the applicable strategies are pre-selected, the others disabled with the reason
    boxes = re.findall(r'<input type="checkbox" name="strategy" value="([^"]+)" (checked)? ?(disabled)?', response.text)
    assert ("hybrid-v1", "checked", "") in boxes and ("vector-minilm-v1", "", "disabled") in boxes
