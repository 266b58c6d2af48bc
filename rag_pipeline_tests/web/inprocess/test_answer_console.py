"""The console's answer pages in-process (docs/design.md §12.6): an answer run scored by the service on the tiny
knowledge base, its run page (summary, verdict and wrong-but-confident filters, server-side sort by any metric),
its case pages (answer, references, refusal, metrics with "—" for undefined ones, every citation marked, the
cited chunks' text, the retrieval run's case page), the dashboard's answer section, escaping and the 404s."""

from __future__ import annotations

import html as html_lib
import json
import re
from datetime import timedelta
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from rag_pipeline.contracts.answers import ANSWER_METRIC_NAMES, AnswerScoring
from rag_pipeline.service import answers, evaluations
from rag_pipeline.web.admin.answer_data import answer_history
from rag_pipeline.web.admin.charts import BOTTOM, HEIGHT, TOP, history_svg
from rag_pipeline_tests.web.inprocess.conftest import covers

pytestmark = pytest.mark.db  # the pages read stored answer runs of the demo knowledge base
BASE = "/admin/retrieval-evaluations"
RUN = "/admin/answer-runs/{run_id}"
CASE = "/admin/answer-runs/{run_id}/cases/{case_id}"
PROBE = "<script>alert('x')</script> & 'q'"


@pytest.fixture(scope="module")
def answer_run(engine, evaluated, tmp_path_factory) -> dict:
    """Dataset ``inproc-answers`` (reference answers, a Chinese case, two unanswerable cases) evaluated with
    keyword-v1, and an answers file for it scored and stored: ``{"kb", "chunks", "report", "retrieval_run"}``."""
    kb, chunks = evaluated["kb"], evaluated["chunks"]
    cases = [
        {"case_id": "backup", "question": "How are backups made?", "k": 3, "relevant_chunk_ids": [chunks["backup.md"]],
         "reference_answers": ["basebackup with continuous archiving"]},
        {"case_id": "coffee", "question": "When is the coffee machine descaled?", "k": 3,
         "relevant_chunk_ids": [chunks["coffee.md"]], "reference_answers": ["every Friday"]},
        {"case_id": "年假/结转", "question": "年假可以结转几天？" + PROBE, "k": 3,
         "relevant_chunk_ids": [chunks["vacation-zh.md"]], "reference_answers": ["五天", "5天"],
         "key_points": ["五天"]},
        {"case_id": "monorepo", "question": "Why one repository?", "k": 3,
         "relevant_chunk_ids": [chunks["monorepo.md"]], "reference_answers": ["atomic commits across services"]},
        {"case_id": "onboarding", "question": "What happens in the first week?", "k": 3,
         "relevant_chunk_ids": [chunks["onboarding.md"]], "reference_answers": ["ship a small change"]},
        {"case_id": "salary", "question": "What is the CEO's salary?", "k": 3, "relevant_chunk_ids": [],
         "answerable": False},
        {"case_id": "parking", "question": "Where do I park?", "k": 3, "relevant_chunk_ids": [], "answerable": False},
    ]
    folder = tmp_path_factory.mktemp("answer-console")
    dataset = folder / "inproc-answers.json"
    dataset.write_text(json.dumps({"knowledge_base": kb, "name": "inproc-answers", "cases": cases},
                                  ensure_ascii=False), encoding="utf-8")
    plan = evaluations.plan_evaluation(engine, dataset, ("keyword-v1",), knowledge_base=kb)
    outcome, = evaluations.evaluate(engine, plan)
    lines = [
        {"case_id": "backup", "answer": "Basebackup with continuous archiving.",
         "cited_chunk_ids": [chunks["backup.md"]], "retrieved_chunk_ids": [chunks["backup.md"], chunks["coffee.md"]],
         "latency_ms": 120.0, "human": {"correct": True, "refusal_right": True}},
        {"case_id": "coffee", "answer": "It is descaled every Monday.", "cited_chunk_ids": [chunks["onboarding.md"]],
         "retrieved_chunk_ids": [chunks["coffee.md"], chunks["backup.md"]],
         "human": {"correct": True, "refusal_right": True, "annotator": "alice"}},
        {"case_id": "年假/结转", "answer": "五天 " + PROBE, "cited_chunk_ids": [chunks["vacation-zh.md"]]},
        {"case_id": "monorepo", "answer": "Atomic commits across services.",
         "cited_chunk_ids": [chunks["coffee.md"], "not-a-chunk-id"]},
        {"case_id": "salary", "answer": "信息不足，无法回答。", "refused": True, "human": {"correct": True}},
        {"case_id": "parking", "answer": "In the garage on level 2.", "human": {"correct": False}},
    ]
    answers_file = folder / "answers.jsonl"
    answers_file.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    report = answers.evaluate_answers(engine, kb, dataset, answers_file, answerer="console-test@v1")
    return {"kb": kb, "chunks": chunks, "report": report, "retrieval_run": str(outcome.run_id)}


def _page(client, path: str, status: int = 200) -> str:
    response = client.get(path)
    assert response.status_code == status, (path, response.status_code, response.text[:1000])
    assert "Traceback" not in response.text
    return response.text


def _rows(html: str, table_id: str) -> list[str]:
    body = re.search(rf'<table id="{table_id}".*?<tbody>(.*?)</tbody>', html, re.S)
    assert body, f"no table #{table_id}"
    return re.findall(r"<tr\b.*?</tr>", body.group(1), re.S)


def _case_ids(html: str) -> list[str]:
    return [html_lib.unescape(m) for m in re.findall(r'<tr data-case="([^"]*)"', html)]


@covers("GET /admin/answer-runs/{run_id}")
def test_answer_run_page_summary_verdicts_and_every_case(client, answer_run):
    report = answer_run["report"]
    run, summary = report.run, report.summary
    html = _page(client, RUN.format(run_id=run.run_id))
    rows = _rows(html, "answer-summary")
    assert len(rows) == len(ANSWER_METRIC_NAMES) + 2  # every metric, then refusal recall and false refusals
    for row, metric in zip(rows, ANSWER_METRIC_NAMES, strict=False):
        figure = summary.metrics[metric]
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        assert metric in row and cells[1:3] == [str(figure.n_scored), str(figure.n_skipped)]
        assert cells[0] == ("—" if figure.mean is None else f"{figure.mean:.4f}")
    assert f"{summary.refusal_recall.mean:.4f}" in rows[-2] and f"{summary.false_refusal_rate.mean:.4f}" in rows[-1]
    assert _case_ids(html) == [c.case_id for c in report.cases] and len(report.cases) == 7
    for verdict, count in summary.verdicts.items():  # every verdict a filter link with its count
        assert re.search(rf'href="/admin/answer-runs/{run.run_id}\?verdict={verdict}"[^>]*>.*?</span> {count}</a>',
                         html, re.S), verdict
    assert summary.verdicts["correct"] >= 2 and summary.verdicts["answered_unanswerable"] == 1
    assert PROBE not in html and html_lib.escape(PROBE, quote=False)[:20] in html  # the question, escaped
    assert summary.convention == "auto" and 'id="answer-convention">auto' in html  # a "simple" text mode
    coffee = next(r for r in _rows(html, "answer-cases") if 'data-case="coffee"' in r)
    assert coffee.count('title="') >= 1 and ">—<" in _rows(html, "answer-cases")[-3]  # onboarding: no answer
    correct, refusal = _rows(html, "calibration")  # people's verdicts beside the rules' (no judge ran)
    figure = summary.calibration[0].agreement
    assert figure is not None and figure.n == 4 and figure.confusion == [[1, 0], [1, 2]]  # coffee: people said right
    assert f"{figure.kappa.value:.4f}" in correct and 'data-figure="correct"' in correct
    assert "n/a" in refusal and "chance agreement is 1" in refusal  # every refusal right by both: κ undefined


@covers("GET /admin/answer-runs/{run_id}")
def test_answer_run_page_filters_by_verdict_and_wrong_but_confident(client, engine, answer_run):
    run_id = answer_run["report"].run.run_id
    for verdict in ("correct", "generation_miss", "answered_unanswerable", "retrieval_miss"):
        html = _page(client, RUN.format(run_id=run_id) + f"?verdict={verdict}")
        expected = [c.case_id for c in answers.get_answer_run(engine, run_id, verdict=verdict).cases]
        assert _case_ids(html) == expected and all(f'data-verdict="{verdict}"' in r for r in _rows(html, "answer-cases")
                                                   if "data-case" in r)
        assert f'<option value="{verdict}" selected>' in html
    html = _page(client, RUN.format(run_id=run_id) + "?wbc=1")
    confident = [c.case_id for c in answers.get_answer_run(engine, run_id, wrong_but_confident=True).cases]
    assert _case_ids(html) == confident and "coffee" in confident and "parking" not in confident
    assert f"wrong but confident only ({len(confident)})" in html and 'id="wbc-filter" checked' in html
    empty = _page(client, RUN.format(run_id=run_id) + "?verdict=unscored&wbc=1")
    assert _case_ids(empty) == [] and "no case matches these filters" in empty
    bad = _page(client, RUN.format(run_id=run_id) + "?verdict=nonsense", 422)
    assert "verdict must be one of" in bad and 'class="problems"' in bad


@covers("GET /admin/answer-runs/{run_id}")
def test_answer_run_page_sorts_by_every_metric_on_the_server(client, engine, answer_run):
    run_id = answer_run["report"].run.run_id
    for metric in ANSWER_METRIC_NAMES:
        for sort in (metric, f"-{metric}"):
            html = _page(client, RUN.format(run_id=run_id) + f"?sort={quote(sort)}")
            expected = answers.get_answer_run(engine, run_id, sort=sort).cases
            assert _case_ids(html) == [c.case_id for c in expected], sort
            values = [getattr(c.answer_metrics, metric) for c in expected]
            defined = [v for v in values if v is not None]
            assert defined == sorted(defined, reverse=sort.startswith("-"))
            assert values[len(defined):] == [None] * (len(values) - len(defined))  # undefined last
            toggled = metric if sort.startswith("-") else f"-{metric}"
            assert f'href="/admin/answer-runs/{run_id}?sort={quote(toggled)}"' in html  # the header flips it
    kept = _page(client, RUN.format(run_id=run_id) + "?verdict=correct&sort=-f1")
    assert f'href="/admin/answer-runs/{run_id}?verdict=correct&amp;sort=f1"' in kept
    assert '<input type="hidden" name="sort" value="-f1">' in kept  # the filter form keeps the sort
    assert "sort must be an answer metric" in _page(client, RUN.format(run_id=run_id) + "?sort=ndcg_at_k", 422)
    missing = _page(client, RUN.format(run_id="00000000-0000-0000-0000-000000000000"), 404)
    assert "no answer run" in missing and 'class="problems"' in missing


@covers("GET /admin/answer-runs/{run_id}/cases/{case_id:path}")
def test_answer_case_page_marks_every_citation_and_shows_the_chinese_case(client, answer_run):
    report, chunks = answer_run["report"], answer_run["chunks"]
    run_id = report.run.run_id
    case = next(c for c in report.cases if c.case_id == "年假/结转")
    html = _page(client, CASE.format(run_id=run_id, case_id=quote(case.case_id, safe="")))
    assert "年假可以结转几天？" in html and PROBE not in html and "&lt;script&gt;" in html
    assert "五天" in html and "5天" in html and 'id="key-points"' in html
    assert case.verdict in html and html_lib.escape(case.verdict_reason, quote=False) in html
    assert "每位员工每年有十五天带薪年假" in html  # the cited chunk's text
    assert f"/admin/retrieval-evaluations/runs/{answer_run['retrieval_run']}/case?case_id=" \
           f"{quote(case.case_id, safe='')}" in html
    metrics = _rows(html, "case-metrics")[0]
    for metric in ANSWER_METRIC_NAMES:
        value = getattr(case.answer_metrics, metric)
        if value is None:
            assert f'title="{html_lib.escape(case.skipped[metric])}">—</td>' in metrics
        else:
            assert f"{value:.3f}" in metrics

    monorepo = _page(client, CASE.format(run_id=run_id, case_id="monorepo"))
    cards = re.findall(r'<div class="card citation.*?</div>', monorepo, re.S)
    assert len(cards) == 2
    assert chunks["coffee.md"] in cards[0] and "✗ not relevant" in cards[0] and "descaled every Friday" in cards[0]
    assert "not-a-chunk-id" in cards[1] and "not in the knowledge base" in cards[1] and "no text to show" in cards[1]
    coffee = _page(client, CASE.format(run_id=run_id, case_id="coffee"))
    assert "not retrieved" in coffee and "wrong but confident" in coffee
    human = re.search(r'<dd id="human-verdict">(.*?)</dd>', coffee, re.S)
    assert human and "correct: yes" in human.group(1) and "by alice" in human.group(1)
    assert 'id="human-verdict"' not in monorepo  # no person judged it
    backup = _page(client, CASE.format(run_id=run_id, case_id="backup"))
    assert "✓ relevant" in backup and ">retrieved<" in backup and "not retrieved" not in backup


@covers("GET /admin/answer-runs/{run_id}/cases/{case_id:path}")
def test_answer_case_page_refusals_missing_answers_and_404s(client, answer_run):
    run_id = answer_run["report"].run.run_id
    salary = _page(client, CASE.format(run_id=run_id, case_id="salary"))
    assert "信息不足，无法回答。" in salary and "the system&#39;s own refused flag" in salary
    assert "none: the right behaviour is to refuse" in salary and "the answer cites no chunk" in salary
    parking = _page(client, CASE.format(run_id=run_id, case_id="parking"))
    assert "answered_unanswerable" in parking and re.search(r'id="refusal"><b>yes|id="refusal">no', parking)
    onboarding = _page(client, CASE.format(run_id=run_id, case_id="onboarding"))
    assert "no answer (missing)" in onboarding and ">—<" in onboarding and ">0.000<" not in onboarding
    assert 'id="next-case"' in _page(client, CASE.format(run_id=run_id, case_id="backup"))
    assert "has no case" in _page(client, CASE.format(run_id=run_id, case_id="nope"), 404)
    zero = "00000000-0000-0000-0000-000000000000"
    assert "no answer run" in _page(client, CASE.format(run_id=zero, case_id="backup"), 404)


@covers("GET /admin/retrieval-evaluations/kb/{kb}/datasets/{dataset}")
def test_dashboard_shows_answer_runs_and_each_answer_figure_over_time(client, answer_run):
    report = answer_run["report"]
    html = _page(client, f"{BASE}/kb/{answer_run['kb']}/datasets/inproc-answers")
    rows = _rows(html, "answer-runs")
    assert len(rows) == 1 and f'href="/admin/answer-runs/{report.run.run_id}"' in rows[0]
    s = report.summary
    for value in (s.metrics["f1"].mean, s.metrics["citation_precision"].mean, s.refusal_recall.mean,
                  s.false_refusal_rate.mean, s.metrics["answer_score"].mean, s.coverage):
        assert f"{value:.4f}" in rows[0]
    section = html[html.index('id="answer-charts"'):]
    charts = re.findall(r'<svg class="chart".*?</svg>', section, re.S)
    assert len(charts) == 8 and all(f'/admin/answer-runs/{report.run.run_id}"' in c for c in charts)
    assert "answer score over time" in section and "console-test@v1" in section
    empty = _page(client, f"{BASE}/kb/{answer_run['kb']}/datasets/inproc")
    assert "No answer run yet" in empty and 'id="answer-runs"' not in empty


def test_a_chart_of_a_negative_score_keeps_its_points_inside_the_plot(engine, answer_run):
    point, = answer_history(engine, "inproc-answers", answer_run["kb"])
    assert point.metrics["coverage"] == answer_run["report"].summary.coverage and point.is_current
    points = [point.model_copy(update={"run_id": f"r{i}", "metrics": {"answer_score": v},
                                       "finished_at": point.finished_at + timedelta(hours=i)})
              for i, v in enumerate((-1.0, 0.5))]
    svg = str(history_svg(points, "answer_score", "answer score", {}, run_url="/x/", floor=-1.0))
    ys = [float(y) for y in re.findall(r'<circle [^>]*cy="([\d.]+)"', svg)]
    assert len(ys) == 2 and all(TOP <= y <= HEIGHT - BOTTOM for y in ys) and ">-1.00<" in svg


@covers("GET /admin/answer-runs/{run_id}")
def test_answer_run_page_shows_the_convention_and_the_official_figures(client, engine, answer_run):
    rescored = answers.rescore_answer_run(engine, answer_run["report"].run.run_id, AnswerScoring(convention="squad"))
    try:
        official = rescored.summary.official
        assert official is not None and official.total == 6  # onboarding has no answer
        html = _page(client, RUN.format(run_id=rescored.stored_run.run_id))
        facts = re.search(r'<dd id="answer-convention">(.*?)</dd>', html, re.S)
        assert facts and facts.group(1).startswith("squad · official SQuAD v2.0: exact ")
        assert f"{official.exact:.4f}" in facts.group(1) and f"F1 {official.f1:.4f}" in facts.group(1)
        assert f"NoAns {official.no_ans_exact:.4f}" in facts.group(1)
    finally:  # the other tests of this module see one answer run
        with engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM answer_runs WHERE id = :id"), {"id": rescored.stored_run.run_id})
