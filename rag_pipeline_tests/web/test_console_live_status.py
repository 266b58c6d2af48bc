"""The console's state in a real browser (Debian's Chromium driven by Playwright) against a real
``rag-pipeline serve --expect-daemon`` on a Dagster instance no daemon runs on (yet): the server says it waits for
the daemon instead of warning that none runs; as a queued run starts and another fails, the run history below
says what the live table says, without a reload; a refused upload's page reloads without posting the file again;
a queued run's case page says the run is queued; a server on a machine without a CJK font says so on its pages.
Screenshots: the ``console-live`` folder of pytest's temporary directory (printed)."""

from __future__ import annotations

import json

import pytest

from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.evaluation.runs.lifecycle import mark_failed
from rag_pipeline.service import stored_datasets
from rag_pipeline.service.queued_runs import queue_evaluations
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, tiny_cases
from rag_pipeline_tests.web.server_helpers import dagster_env, start_server
from rag_pipeline_tests.web.test_console_browser import ROOT

# a real server process and a browser polling it
pytestmark = [pytest.mark.db, pytest.mark.slow]

BASE = "/admin/retrieval-evaluations"
SCREENSHOTS = "console-live"  # the folder of the `shots` fixture
KB = "live-status"
DATASET = "live"


@pytest.fixture(scope="module")
def server(engine, tmp_path_factory):
    """A server started as `make dev` starts it, on a fresh Dagster instance whose daemon never comes."""
    home = tmp_path_factory.mktemp("live_status")
    env = dagster_env(home / "dagster_home", home / "datasets", fresh_storage=True)
    log = home / "server.log"
    with start_server(env, log=log, extra_args=("--expect-daemon",)) as (base, _proc):
        yield base, log


@pytest.fixture(scope="module")
def stored(engine, tmp_path_factory):
    """Knowledge base ``live-status`` and its dataset ``live`` (stored, not evaluated)."""
    chunks = ingest_tiny_kb(engine, KB, tmp_path_factory.mktemp("live_kb"))
    raw = json.dumps({"name": DATASET, "cases": tiny_cases(chunks)}).encode()
    return stored_datasets.store_uploaded_dataset(engine, KB, raw, source=f"{DATASET}.json", default_name=DATASET)


def _badge(page, table: str, run_id: str) -> str:
    return page.locator(f'{table} tr[data-run="{run_id}"] .badge').first.inner_text()


def test_serve_expecting_a_daemon_waits_for_it_instead_of_warning(server):
    _base, log = server
    text = log.read_text(encoding="utf-8", errors="replace")
    assert "waiting for the Dagster daemon being started next to the server" in text, text[-2000:]
    assert "warning: no Dagster daemon is running" not in text, text[-2000:]


def test_the_history_says_what_the_live_table_says(server, engine, browser, stored, shots):
    base, _log = server
    first, second = queue_evaluations(engine, KB, stored.dataset_id, ["keyword-v1", "bm25-v1"]).runs
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{base}{BASE}/kb/{KB}/datasets/{DATASET}")
        for run in (first, second):
            assert _badge(page, "#run-history", run.run_id) == "queued"
        with engine.connect() as conn:
            params_hash = run_records.get_run(conn, first.run_id).params_hash
        run_records.start_queued_run(engine, first.run_id, strategy_version="keyword-v1", params_hash=params_hash,
                                     dataset_id=stored.dataset_id)
        run_records.heartbeat(engine, first.run_id, cases_done=2)
        mark_failed(engine, second.run_id, "submitting the Dagster run failed: no such job")
        selector = f'#live-runs tr[data-run="{first.run_id}"] .badge'
        page.wait_for_function(f"document.querySelector('{selector}')?.textContent === 'running'", timeout=20_000)
        history = f'#run-history tr[data-run="{first.run_id}"] .badge'
        page.wait_for_function(f"document.querySelector('{history}')?.textContent === 'running'", timeout=5_000)
        # the two runs changed in two commits: a refresh between them shows the first running, the second queued
        refused = f'#run-history tr[data-run="{second.run_id}"] .badge'
        page.wait_for_function(f"document.querySelector('{refused}')?.textContent === 'failed'", timeout=5_000)
        assert _badge(page, "#run-history", second.run_id) == "failed"
        failed = page.locator(f'#run-history tr[data-run="{second.run_id}"] .run-error').inner_text()
        assert failed == "submitting the Dagster run failed: no such job"
        assert page.url.endswith(f"/datasets/{DATASET}"), "no reload: the page is the same one"
        page.screenshot(path=str(shots / "dataset-live.png"), full_page=True)
        assert not errors, errors
    finally:
        page.close()
        mark_failed(engine, first.run_id, "test over")


def test_a_refused_upload_reloads_without_posting_it_again(server, browser, stored, shots):
    base, _log = server
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    methods: list[str] = []
    page.on("request", lambda request: methods.append(request.method) if "/kb/" in request.url else None)
    try:
        page.goto(f"{base}{BASE}/kb/{KB}")
        bad = ROOT / "rag_pipeline_tests" / "data" / "bad_datasets" / "grades_many_problems.json"
        page.set_input_files("input[name=dataset]", str(bad))
        page.click("#upload-button")
        page.wait_for_selector("#upload-problems")
        assert "upload_failed=" in page.url and methods[-2:] == ["POST", "GET"]  # Post/Redirect/Get
        shown = page.locator("#upload-problems").inner_text()
        methods.clear()
        page.reload()
        assert methods == ["GET"], methods
        assert page.locator("#upload-problems").inner_text() == shown and "was not stored" in shown
        page.screenshot(path=str(shots / "upload-refused.png"), full_page=True)
    finally:
        page.close()


def test_a_queued_runs_case_page_says_it_is_queued(server, engine, browser, stored, shots):
    base, _log = server
    [run] = queue_evaluations(engine, KB, stored.dataset_id, ["keyword-v1"]).runs
    page = browser.new_page(viewport={"width": 1280, "height": 600})
    try:
        response = page.goto(f"{base}{BASE}/runs/{run.run_id}/case?case_id=backup-001")
        assert response.status == 409
        assert f"run {run.run_id[:8]} (keyword-v1) is queued" in page.locator("main").inner_text()
        page.screenshot(path=str(shots / "case-queued.png"), full_page=True)
    finally:
        page.close()
        mark_failed(engine, run.run_id, "test over")


def test_a_machine_without_a_cjk_font_is_told_on_the_page(engine, browser, stored, shots, tmp_path):
    """The server's own fontconfig pointed at a configuration with no font folder (the browser keeps its fonts)."""
    config = tmp_path / "fonts.conf"
    config.write_text('<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "fonts.dtd"><fontconfig>'
                      f"<cachedir>{tmp_path / 'cache'}</cachedir></fontconfig>", encoding="utf-8")
    env = dagster_env(tmp_path / "dagster_home", tmp_path / "datasets", FONTCONFIG_FILE=str(config))
    with start_server(env, log=tmp_path / "server.log") as (base, _proc):
        page = browser.new_page(viewport={"width": 1280, "height": 600})
        try:
            page.goto(f"{base}{BASE}/kb/{KB}")
            notice = page.locator("#cjk-font-notice").inner_text()
            assert "no font with Chinese glyphs" in notice and "fonts-noto-cjk" in notice
            page.screenshot(path=str(shots / "cjk-notice.png"), full_page=False)
        finally:
            page.close()


def test_waiting_for_a_daemon_that_never_comes_ends_in_the_warning(engine, tmp_path, capsys, monkeypatch):
    """The background wait of ``serve --expect-daemon``, on a queue no daemon serves."""
    from rag_pipeline.cli.serve import wait_for_daemon

    monkeypatch.setenv("RAG_EVALUATION_QUEUE", str(tmp_path))
    assert wait_for_daemon(timeout_s=1.0, interval_s=0.5) is False
    err = capsys.readouterr().err
    assert "warning: still none after 1 s: no Dagster daemon is running (none has ever picked up queued runs)" in err, \
        err
