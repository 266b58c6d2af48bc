"""What the console (and the API) say about state, in-process: a dataset version's "stored" time is when it was
first stored (an evaluation storing the same cases again does not move it); a refused upload redirects to a page
that shows its problems (reloading never re-posts the file); a case asked of a run that is queued, running or
failed says so (409), not "no case"; a notice on every page when this machine has no CJK font."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.service import stored_datasets
from rag_pipeline.service.queued_runs import queue_evaluations
from rag_pipeline.web.admin import pages
from rag_pipeline_tests.web.inprocess.conftest import DATASET, covers

BASE = "/admin/retrieval-evaluations"
API = "/api/v1"


def _token(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def _page(client, path: str, status: int = 200) -> str:
    response = client.get(path)
    assert response.status_code == status, (path, response.status_code, response.text[:1000])
    return response.text


@covers("GET /admin/retrieval-evaluations/kb/{kb}/datasets/{dataset}", "GET /admin/retrieval-evaluations/kb/{kb}")
def test_the_stored_time_is_the_first_storing_not_the_last_evaluation(client, evaluated, engine):
    kb = evaluated["kb"]
    name = f"stored-{uuid.uuid4().hex[:6]}"
    raw = json.dumps({"name": name, "cases": evaluated["cases"]}).encode()
    first = stored_datasets.store_uploaded_dataset(engine, kb, raw, source=f"{name}.json", default_name=name)
    with engine.begin() as conn:  # stored two days ago
        conn.execute(sa.text("UPDATE retrieval_evaluation_datasets SET created_at = created_at - interval '2 days', "
                             "last_seen_at = last_seen_at - interval '2 days' WHERE id = :id"),
                     {"id": first.dataset_id})
    again = stored_datasets.store_uploaded_dataset(engine, kb, raw, source=f"{name}.json", default_name=name)
    assert (again.dataset_id, again.created) == (first.dataset_id, False)  # the same version, seen again now
    with engine.connect() as conn:
        created, seen = conn.execute(sa.text("SELECT created_at, last_seen_at FROM retrieval_evaluation_datasets "
                                             "WHERE id = :id"), {"id": first.dataset_id}).one()
    assert seen - created > dt.timedelta(days=1)
    when = pages._when(created)
    html = _page(client, f"{BASE}/kb/{kb}/datasets/{name}")
    assert re.search(r'<span id="stored-at"[^>]*>stored (.*?)</span>', html).group(1) == when
    row = re.search(rf'<tr><td><a href="[^"]*/datasets/{name}">.*?</tr>', _page(client, f"{BASE}/kb/{kb}"), re.S)
    assert when in row.group(0) and pages._when(seen) not in row.group(0)


@covers("POST /admin/retrieval-evaluations/kb/{kb}/upload", "GET /admin/retrieval-evaluations/kb/{kb}")
def test_a_refused_upload_redirects_so_a_reload_never_posts_again(client, evaluated, engine):
    kb = evaluated["kb"]
    token = _token(_page(client, f"{BASE}/kb/{kb}"))
    bad = [{"case_id": "a", "question": "q", "relevant_chunk_ids": ["not-a-uuid"], "k": 5}]
    refused = client.post(f"{BASE}/kb/{kb}/upload", data={"csrf_token": token}, follow_redirects=False,
                          files={"dataset": ("prg-bad.json", json.dumps(bad), "application/json")})
    assert refused.status_code == 303
    location = refused.headers["location"]
    assert location.startswith(f"{BASE}/kb/{quote(kb)}?upload_failed=")
    for _ in range(2):  # the page, then a reload of it: a GET each time, the same problems
        html = _page(client, location)
        problems = re.search(r'<div class="problems" role="alert" id="upload-problems">(.*?)</div>', html, re.S)
        assert "prg-bad.json was not stored: 1 problem" in problems.group(1)
        assert "relevant_chunk_ids[0]" in problems.group(1)
    assert "prg-bad" not in {d.name for d in stored_datasets.list_datasets(engine, kb)}
    gone = _page(client, f"{BASE}/kb/{quote(kb)}?upload_failed=unknown-token")
    assert "no longer kept: upload the file again" in gone
    none = client.post(f"{BASE}/kb/{kb}/upload", data={"csrf_token": token}, follow_redirects=False)
    assert none.status_code == 303 and "choose a dataset file" in _page(client, none.headers["location"])


@covers("GET /api/v1/retrieval/evaluations/{run_id}", "GET /admin/retrieval-evaluations/runs/{run_id}/case")
def test_a_case_of_a_run_without_results_says_why(client, evaluated, engine):
    case_id = evaluated["cases"][0]["case_id"]
    [queued] = queue_evaluations(engine, evaluated["kb"], evaluated["dataset_id"], ["keyword-v1"]).runs
    api = f"{API}/retrieval/evaluations/{queued.run_id}?case_id={quote(case_id)}"
    console = f"{BASE}/runs/{queued.run_id}/case?case_id={quote(case_id)}"
    try:
        answer = client.get(api)
        assert answer.status_code == 409, answer.text
        assert answer.json()["detail"] == (f"run {queued.run_id[:8]} (keyword-v1) is queued: it has no case "
                                           "results until it has run; ask again once it has succeeded")
        assert "is queued: it has no case results" in _page(client, console, 409)
        run_records.start_queued_run(engine, queued.run_id, strategy_version="keyword-v1",
                                     params_hash=_params_hash(engine, queued.run_id), dataset_id=queued.dataset_id)
        run_records.heartbeat(engine, queued.run_id, cases_done=2)
        running = client.get(api)
        assert running.status_code == 409 and "is running (2 of 5 cases done)" in running.json()["detail"]
        assert "is running (2 of 5 cases done)" in _page(client, console, 409)
        run_records.mark_failed(engine, queued.run_id, "the database went away")
        failed = client.get(api).json()["detail"]
        assert failed == f"run {queued.run_id[:8]} (keyword-v1) failed and stored no case results: the database " \
                         "went away"
    finally:
        run_records.mark_failed(engine, queued.run_id, "test over")  # never left queued for the other tests
    succeeded = evaluated["runs"]["keyword-v1"]["run_id"]
    missing = client.get(f"{API}/retrieval/evaluations/{succeeded}?case_id=no-such-case")
    assert missing.status_code == 404 and "has no case 'no-such-case'" in missing.json()["detail"]
    _page(client, f"{BASE}/runs/{succeeded}/case?case_id=no-such-case", 404)


def _params_hash(engine, run_id: str) -> str:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT params_hash FROM retrieval_evaluation_runs WHERE id = :id"),
                            {"id": run_id}).scalar_one()


@pytest.fixture
def font_check_reset():
    pages._font_check.clear()
    yield
    pages._font_check.clear()


@covers("GET /admin/retrieval-evaluations")
def test_every_page_says_when_no_cjk_font_is_installed(client, evaluated, tmp_path, monkeypatch, font_check_reset):
    """fontconfig itself, pointed at a configuration with no font folder (a machine without fonts)."""
    config = tmp_path / "fonts.conf"
    config.write_text('<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "fonts.dtd"><fontconfig>'
                      f"<cachedir>{tmp_path / 'cache'}</cachedir></fontconfig>", encoding="utf-8")
    monkeypatch.setenv("FONTCONFIG_FILE", str(config))
    for path in (BASE, f"{BASE}/kb/{evaluated['kb']}/datasets/{DATASET}"):
        notice = re.search(r'<div [^>]*id="cjk-font-notice">(.*?)</div>', _page(client, path), re.S)
        assert notice, path
        assert "no font with Chinese glyphs" in notice.group(1) and "fonts-noto-cjk" in notice.group(1)
        assert "rag-pipeline doctor" in notice.group(1)
    monkeypatch.delenv("FONTCONFIG_FILE")  # the font installed: the next page says nothing (no restart, no wait)
    if pages.check_cjk_font().status == "OK":  # this machine has one: no notice
        assert 'id="cjk-font-notice"' not in _page(client, BASE)
