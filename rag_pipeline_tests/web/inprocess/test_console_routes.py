"""Every console route in-process (``TestClient``, no server, no daemon): each page shows the service's data for
the same runs, forms need the session's CSRF token, the login flow with ``RAG_API_TOKEN``, an evaluation launched
from the dashboard is queued, requested by the Dagster sensor, and fails with the reason its Dagster run gives."""

from __future__ import annotations

import json
import re
import uuid
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from rag_pipeline.contracts.runs import STAGE_LABELS
from rag_pipeline.service import evaluations, history, queued_runs
from rag_pipeline_tests.web.inprocess.conftest import DATASET, covers

BASE = "/admin/retrieval-evaluations"


def _token(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def _page(client, path: str, status: int = 200) -> str:
    response = client.get(path)
    assert response.status_code == status, (path, response.status_code, response.text[:1000])
    return response.text


def _upload(client, kb: str, name: str, cases: list) -> str:
    token = _token(_page(client, f"{BASE}/kb/{kb}"))
    response = client.post(f"{BASE}/kb/{kb}/upload", data={"csrf_token": token}, follow_redirects=False,
                           files={"dataset": (f"{name}.json", json.dumps({"name": name, "cases": cases}),
                                              "application/json")})
    assert response.status_code == 303, response.text[:1000]
    return response.headers["location"]


@covers("GET /admin/login", "POST /admin/login", "POST /admin/logout")
def test_login_and_logout_with_a_token(client, monkeypatch):
    token = "t" * 24
    monkeypatch.setenv("RAG_API_TOKEN", token)
    refused = client.get(BASE, follow_redirects=False)
    assert (refused.status_code, refused.headers["location"]) == (303, "/admin/login?next=/admin/retrieval-evaluations")
    form = _page(client, "/admin/login?next=/admin/retrieval-evaluations")
    assert 'name="token"' in form
    wrong = client.post("/admin/login", data={"csrf_token": _token(form), "token": "nope"})
    assert wrong.status_code == 401 and "wrong token" in wrong.text
    assert client.post("/admin/login", data={"token": token}).status_code == 403  # no CSRF token
    done = client.post("/admin/login", data={"csrf_token": _token(form), "token": token, "next": BASE},
                       follow_redirects=False)
    assert (done.status_code, done.headers["location"]) == (303, BASE)
    home = _page(client, BASE)
    out = client.post("/admin/logout", data={"csrf_token": _token(home)}, follow_redirects=False)
    assert (out.status_code, out.headers["location"]) == (303, "/admin/login")
    assert client.get(BASE, follow_redirects=False).status_code == 303


@covers("GET /admin/static/{name}")
def test_static_assets(client):
    css = client.get("/admin/static/console.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert client.get("/admin/static/..%2Fpages.py").status_code == 404
    assert client.get("/admin/static/no-such.js").status_code == 404


@covers("GET /admin/retrieval-evaluations", "GET /admin/retrieval-evaluations/kb/{kb}")
def test_home_and_knowledge_base_pages(client, evaluated, daemon):
    daemon.set_daemon(alive=False)
    home = _page(client, BASE)
    daemon.set_daemon(alive=True)
    assert f"{BASE}/kb/{evaluated['kb']}" in home and 'id="queue-warning"' in home
    assert "no Dagster daemon is running" in home
    assert all(s["run_id"][:8] in home for s in evaluated["runs"].values())
    kb = _page(client, f"{BASE}/kb/{evaluated['kb']}")
    datasets = re.search(r'<table id="datasets".*?</table>', kb, re.S).group(0)
    assert f"/datasets/{DATASET}" in datasets
    assert 'class="problems"' in _page(client, f"{BASE}/kb/no-such-kb", 404)


@covers("POST /admin/retrieval-evaluations/kb/{kb}/upload")
def test_upload_needs_the_csrf_token_and_shows_every_problem(client, evaluated):
    url = f"{BASE}/kb/{evaluated['kb']}/upload"
    bad = [{"case_id": "a", "question": "q", "relevant_chunk_ids": ["not-a-uuid"], "k": 5}]
    files = {"dataset": ("bad.json", json.dumps(bad), "application/json")}
    assert client.post(url, files=files).status_code == 403
    token = _token(_page(client, f"{BASE}/kb/{evaluated['kb']}"))
    shown = client.post(url, files=files, data={"csrf_token": token})
    assert [r.status_code for r in shown.history] == [303] and "relevant_chunk_ids[0]" in shown.text
    name = f"console-{uuid.uuid4().hex[:6]}"
    assert _upload(client, evaluated["kb"], name, evaluated["cases"]).endswith(f"/datasets/{name}?uploaded=1")


@covers("GET /admin/retrieval-evaluations/kb/{kb}/datasets/{dataset}")
def test_dataset_dashboard_shows_current_runs_and_history(client, evaluated):
    html = _page(client, f"{BASE}/kb/{evaluated['kb']}/datasets/{DATASET}")
    current = re.findall(r"<tr><td><span class=\"swatch\".*?</tr>", html, re.S)
    assert len(current) == 2 and "hybrid-v1" in current[0] and "baseline" in current[0]
    hybrid = evaluated["runs"]["hybrid-v1"]
    assert f"{hybrid['ndcg_at_k']:.4f}" in current[0]
    judged = re.search(r'<td class="num judged-at-k">([^<]+)</td>', current[0]).group(1)
    assert judged == f"{hybrid['counts']['judged']['at_k']:.4f}"
    assert len(re.findall(r"<svg class=\"chart\"", html)) == 6
    assert 'id="gate"' in html and 'value="keyword-v1"' in html
    _page(client, f"{BASE}/kb/{evaluated['kb']}/datasets/no-such-dataset", 404)


@covers("POST /admin/retrieval-evaluations/kb/{kb}/datasets/{dataset}/evaluate",
        "GET /admin/retrieval-evaluations/kb/{kb}/datasets/{dataset}/runs.json")
def test_evaluate_from_the_dashboard_and_poll_its_status(client, evaluated, daemon, engine):
    kb, name = evaluated["kb"], f"console-{uuid.uuid4().hex[:6]}"
    dashboard = _upload(client, kb, name, evaluated["cases"]).split("?")[0]
    token = _token(_page(client, dashboard))
    assert client.post(f"{dashboard}/evaluate", data={"strategy": "keyword-v1"}).status_code == 403
    nothing = client.post(f"{dashboard}/evaluate", data={"csrf_token": token})
    assert nothing.status_code == 422 and "choose at least one strategy" in nothing.text
    launched = client.post(f"{dashboard}/evaluate", data={"csrf_token": token, "strategy": "keyword-v1"},
                           follow_redirects=False)
    assert launched.status_code == 303
    [submitted] = [r for r in queued_runs.queued_runs(engine) if r.dataset == name]
    assert launched.headers["location"] == f"{dashboard}?launched={submitted.run_id}"
    status = client.get(f"{dashboard}/runs.json").json()
    assert status["active"] == 1 and status["queue"] == {"daemon_running": True, "message": None}
    assert [(r["run_id"], r["status"], r["cases_total"]) for r in status["runs"]] == [
        (submitted.run_id, "queued", len(evaluated["cases"]))]
    [request] = [r for r in daemon.tick().run_requests if r.run_key == submitted.dagster_run_id]
    config = request.run_config["ops"]["evaluate_click"]["config"]
    from rag_pipeline.definitions import defs

    missing = "00000000-0000-4000-8000-000000000000"  # its first step fails: no such dataset version
    failed = defs.resolve_job_def("evaluate_strategies").execute_in_process(
        instance=daemon.instance, raise_on_error=False, tags=request.tags,
        run_config={"ops": {"evaluate_click": {"config": {**config, "dataset_id": missing}}}})
    daemon.tick()
    [run] = client.get(f"{dashboard}/runs.json").json()["runs"]
    assert run["status"] == "failed" and run["error"].startswith(
        f"its Dagster run {failed.run_id} failed before the evaluation started: ") and missing in run["error"], \
        run["error"]
    assert client.get(f"{BASE}/kb/{kb}/datasets/no-such-dataset/runs.json").json()["runs"] == []
    assert client.get(f"{BASE}/kb/no-such-kb/datasets/{name}/runs.json").status_code == 404


@covers("GET /admin/retrieval-evaluations/runs/{run_id}", "GET /admin/retrieval-evaluations/runs/{run_id}/case",
        "GET /admin/retrieval-evaluations/chunks/{chunk_id}")
def test_run_case_and_chunk_pages(client, evaluated, engine):
    run = evaluated["runs"]["keyword-v1"]
    html = _page(client, f"{BASE}/runs/{run['run_id']}")
    rows = re.findall(r"<tr\b.*?</tr>", re.search(r'<table id="cases".*?<tbody>(.*?)</tbody>', html, re.S).group(1),
                      re.S)
    assert len(rows) == len(evaluated["cases"])
    stages = re.search(r'<div class="card" id="stage-times">.*?</div>', html, re.S).group(0)
    shown = dict(re.findall(r'<tr data-stage="([^"]+)"><td>[^<]*</td><td class="num">([0-9.]+)</td>', stages))
    assert list(shown) == list(STAGE_LABELS.values())
    assert {label: float(v) for label, v in shown.items()} == pytest.approx(
        {label: run["stages"][key] for key, label in STAGE_LABELS.items()}, abs=5e-4)
    assert f'{run["stages"]["wall_s"]:.3f}' in stages
    case = history.run_cases(engine, run["run_id"]).cases[0]
    page = _page(client, f"{BASE}/runs/{run['run_id']}/case?case_id={quote(case.case_id)}")
    assert case.case_id in page and 'id="relevant"' in page
    _page(client, f"{BASE}/runs/{run['run_id']}/case?case_id=no-such-case", 404)
    _page(client, f"{BASE}/runs/ffffffff-ffff-4fff-bfff-ffffffffffff", 404)
    chunk = evaluated["chunks"]["backup.md"]
    body = client.get(f"{BASE}/chunks/{chunk}").json()
    assert (body["chunk_id"], body["document_name"]) == (chunk, "backup.md") and "basebackup" in body["content"]
    assert client.get(f"{BASE}/chunks/not-a-chunk").status_code == 404


@covers("GET /admin/retrieval-evaluations/runs/{run_id}/case")
def test_the_case_page_lists_grade_0_apart_and_compares_with_the_baseline_first(client, evaluated, engine,
                                                                               tmp_path):
    kb, chunks = evaluated["kb"], evaluated["chunks"]
    name = f"graded-{uuid.uuid4().hex[:6]}"
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"knowledge_base": kb, "name": name, "cases": [
        {"case_id": "g-1", "question": "How are database backups taken?", "k": 2,
         "relevant_chunk_ids": {chunks["backup.md"]: 2, chunks["coffee.md"]: 0}}]}), encoding="utf-8")
    outcomes = evaluations.evaluate(engine, evaluations.plan_evaluation(
        engine, path, ("hybrid-v1", "rrf-v1", "keyword-v1"), knowledge_base=kb))
    rrf = next(str(o.run_id) for o in outcomes if o.strategy_version == "rrf-v1")
    page = _page(client, f"{BASE}/runs/{rrf}/case?case_id=g-1")
    relevant = re.search(r'<table id="relevant".*?</table>', page, re.S).group(0)
    judged_not = re.search(r'<h2>Judged not relevant.*?<table id="judged-not-relevant".*?</table>', page, re.S).group(0)
    assert chunks["backup.md"] in relevant and chunks["coffee.md"] not in relevant
    assert chunks["coffee.md"] in judged_not and "badge fail" not in judged_not
    options = re.findall(r'<option value="[^"]+">([^<]+)</option>', re.search(r'<select name="b">.*?</select>', page,
                                                                            re.S).group(0))
    assert options[0].startswith("hybrid-v1 · "), options  # the baseline is the default "compare with"
    assert "✓" not in page


@covers("GET /admin/retrieval-evaluations/compare")
def test_compare_page_pairs_two_runs(client, evaluated):
    a, b = evaluated["runs"]["hybrid-v1"], evaluated["runs"]["keyword-v1"]
    html = _page(client, f"{BASE}/compare?a={a['run_id'][:8]}&b={b['run_id'][:8]}")
    paired = re.findall(r"<tr\b.*?</tr>", re.search(r'<table id="paired".*?<tbody>(.*?)</tbody>', html, re.S).group(1),
                        re.S)
    assert len(paired) == 6 and f"{b['ndcg_at_k'] - a['ndcg_at_k']:+.4f}" in paired[3]
    title = re.sub(r"<[^>]+>", "", re.search(r'<h1 id="compare-title">(.*?)</h1>', html, re.S).group(1))
    assert title.index("hybrid-v1") < title.index("(A)") < title.index("keyword-v1") < title.index("(B)"), title
    case = quote(evaluated["cases"][0]["case_id"])
    side = _page(client, f"{BASE}/compare?a={a['run_id']}&b={b['run_id']}&case={case}")
    assert "✓" not in side and "selected</span>" in side
    _page(client, f"{BASE}/compare?a={a['run_id']}&b=ffffffff", 404)


@covers("GET /admin/retrieval-evaluations/kb/{kb}/labelling", "POST /admin/retrieval-evaluations/kb/{kb}/labelling",
        "GET /admin/retrieval-evaluations/kb/{kb}/labelling/{name}",
        "POST /admin/retrieval-evaluations/kb/{kb}/labelling/{name}/q/{index}",
        "POST /admin/retrieval-evaluations/kb/{kb}/labelling/{name}/save")
def test_labelling_pool_grade_and_save(client, evaluated, datasets, engine):
    kb, name = evaluated["kb"], f"labels-{uuid.uuid4().hex[:6]}"
    start = f"{BASE}/kb/{kb}/labelling"
    token = _token(_page(client, start))
    empty = client.post(start, data={"csrf_token": token, "name": name, "questions": " \n"})
    assert empty.status_code == 422 and "has no question" in empty.text
    made = client.post(start, data={"csrf_token": token, "name": name, "depth": "2", "k": "2",
                                    "questions": "basebackup archiving\nWhere is the moon?",
                                    "strategy": ["keyword-v1"]}, follow_redirects=False)
    assert (made.status_code, made.headers["location"]) == (303, f"{start}/{name}"), made.text[:1000]
    draft = _page(client, f"{start}/{name}")
    chunks = re.findall(r'<tr data-chunk="([0-9a-f-]{36})"', draft)
    assert chunks and chunks[0] == evaluated["chunks"]["backup.md"]
    judged = client.post(f"{start}/{name}/q/0", data={"csrf_token": token, "grade-0": "2", "action": "next"},
                         follow_redirects=False)
    assert (judged.status_code, judged.headers["location"]) == (303, f"{start}/{name}?q=1")
    client.post(f"{start}/{name}/q/1", data={"csrf_token": token, "action": "skip"})
    saved = client.post(f"{start}/{name}/save", data={"csrf_token": token, "dataset": name}, follow_redirects=False)
    assert saved.status_code == 303 and saved.headers["location"].endswith(f"/datasets/{name}?uploaded=1")
    _, versions = history.dataset_versions(engine, name, kb)
    assert len(versions) == 1 and versions[0].case_count == 1  # a contracts model
    _page(client, f"{start}/no-such-draft", 404)


@covers("GET /admin/retrieval-evaluations/kb/{kb}/datasets/{dataset}/fix-labels",
        "POST /admin/retrieval-evaluations/kb/{kb}/datasets/{dataset}/fix-labels")
def test_fix_labels_replaces_a_document_id_by_its_only_chunk(client, evaluated, engine):
    kb, name = evaluated["kb"], f"fix-{uuid.uuid4().hex[:6]}"
    with engine.connect() as conn:
        document = conn.execute(sa.text("SELECT document_id::text FROM document_chunks WHERE id = :c"),
                                {"c": evaluated["chunks"]["monorepo.md"]}).scalar_one()
    cases = [{"case_id": "monorepo-001", "question": "one repository", "k": 1, "relevant_chunk_ids": [document]}]
    dashboard = _upload(client, kb, name, cases).split("?")[0]
    preview = _page(client, f"{dashboard}/fix-labels")
    assert "fixed: 1" in preview and evaluated["chunks"]["monorepo.md"] in preview
    assert len(history.dataset_versions(engine, name, kb)[1]) == 1, "a preview stores nothing"
    assert client.post(f"{dashboard}/fix-labels").status_code == 403
    saved = client.post(f"{dashboard}/fix-labels", data={"csrf_token": _token(preview)}, follow_redirects=False)
    assert saved.status_code == 303 and saved.headers["location"] == f"{dashboard}?uploaded=1"
    versions = history.dataset_versions(engine, name, kb)[1]
    assert len(versions) == 2


@covers("POST /admin/retrieval-evaluations/runs/{run_id}/draft-unjudged")
def test_a_run_page_drafts_its_unjudged_chunks_for_the_next_dataset_version(client, evaluated, datasets, engine,
                                                                          tmp_path):
    from rag_pipeline.service.labelling.drafts import open_console_draft

    kb, chunks = evaluated["kb"], evaluated["chunks"]
    name = f"unjudged-{uuid.uuid4().hex[:6]}"
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"knowledge_base": kb, "name": name, "cases": [
        {"case_id": "u-1", "question": "basebackup archiving coffee", "k": 3,
         "relevant_chunk_ids": [chunks["backup.md"]]},
        {"case_id": "u-2", "question": "one repository", "k": 2, "relevant_chunk_ids": [chunks["monorepo.md"]]}]}),
        encoding="utf-8")
    (outcome,) = evaluations.evaluate(engine, evaluations.plan_evaluation(engine, path, ("keyword-v1",),
                                                                         knowledge_base=kb))
    run = evaluations.run_summaries(engine, [str(outcome.run_id)])[0]
    judged = run.counts.judged
    assert judged.unjudged_at_k >= 1  # coffee.md shares a word with the question and nobody judged it
    html = _page(client, f"{BASE}/runs/{run.run_id}")
    line = re.sub(r"<[^>]+>", "", re.search(r'<p class="small" id="judged">(.*?)</p>', html, re.S).group(1))
    assert f"Judged@k {judged.at_k:.4f}" in line and f"{judged.unjudged_at_k} unjudged" in line, line
    token = _token(html)
    made = client.post(f"{BASE}/runs/{run.run_id}/draft-unjudged", data={"csrf_token": token},
                       follow_redirects=False)
    draft_name = f"{name}-unjudged-{run.run_id[:8]}"
    assert (made.status_code, made.headers["location"]) == (303, f"{BASE}/kb/{kb}/labelling/{draft_name}")
    draft = open_console_draft(kb, draft_name)
    assert sum(c.grade is None for q in draft.questions for c in q.candidates) == judged.unjudged_at_k
    for index, question in enumerate(draft.questions):  # every unjudged chunk judged not relevant
        grades = {f"grade-{i}": str(c.grade or 0) for i, c in enumerate(question.candidates)}
        client.post(f"{BASE}/kb/{kb}/labelling/{draft_name}/q/{index}",
                    data={"csrf_token": token, **grades, "action": "next"})
    saved = client.post(f"{BASE}/kb/{kb}/labelling/{draft_name}/save", data={"csrf_token": token, "dataset": name},
                        follow_redirects=False)
    assert saved.status_code == 303 and saved.headers["location"].endswith(f"/datasets/{name}?uploaded=1")
    rescored = evaluations.rescore(engine, run.run_id, name)  # the latest version: the one just saved
    assert rescored.run.counts.judged.at_k == 1.0
    assert rescored.run.metrics.model_dump() == pytest.approx(run.metrics.model_dump(), abs=1e-12)  # all judged 0
    html = _page(client, f"{BASE}/compare?a={run.run_id}&b={rescored.run.run_id}")
    assert re.findall(r'<dd class="judged-at-k">([^<]+)</dd>', html) == [f"{judged.at_k:.4f}", "1.0000"]
    assert client.post(f"{BASE}/runs/ffffffff-ffff-4fff-bfff-ffffffffffff/draft-unjudged",
                       data={"csrf_token": token}).status_code == 422
