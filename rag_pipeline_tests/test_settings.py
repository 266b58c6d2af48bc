"""Settings: every RAG_* variable is declared once, typed, documented in docs/configuration.md, fails with its name."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rag_pipeline.settings import Settings, SettingsError, get_settings, markdown_table

ROOT = Path(__file__).resolve().parents[1]


def test_every_rag_variable_used_anywhere_is_a_setting():
    used = set()
    for folder in ("rag_pipeline", "rag_pipeline_tests", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            used |= set(re.findall(r"\bRAG_[A-Z_]+[A-Z]\b", path.read_text(encoding="utf-8")))
    for path in [ROOT / "Makefile", ROOT / ".ci/run", ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        used |= set(re.findall(r"\bRAG_[A-Z_]+[A-Z]\b", path.read_text(encoding="utf-8")))
    declared = {"RAG_" + name.upper() for name in Settings.model_fields}
    assert used - declared == set(), "declare these in rag_pipeline/settings.py"
    assert len(declared) >= 12


def test_the_configuration_page_table_is_generated_from_the_settings():
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert markdown_table() in page, "regenerate it: python -m rag_pipeline.settings"
    proc = subprocess.run([sys.executable, "-m", "rag_pipeline.settings"], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == markdown_table()


def test_values_are_typed_and_read_again_when_the_environment_changes(monkeypatch):
    monkeypatch.setenv("RAG_EVAL_READERS", " 4 ")
    monkeypatch.setenv("RAG_RUN_STALE_SECONDS", "30")
    monkeypatch.setenv("RAG_DATASETS_DIR", "/tmp/somewhere")
    settings = get_settings()
    assert (settings.eval_readers, settings.run_stale_seconds) == (4, 30)
    assert settings.datasets_dir == Path("/tmp/somewhere")
    assert get_settings() is settings, "the same environment is parsed once"
    monkeypatch.setenv("RAG_EVAL_READERS", "3")
    assert get_settings().eval_readers == 3
    monkeypatch.setenv("RAG_EVAL_READERS", "")
    assert get_settings().eval_readers == 2, "an empty variable is unset"


@pytest.mark.parametrize(("name", "value", "message"), [
    ("RAG_EVAL_READERS", "two", "RAG_EVAL_READERS must be a positive integer, got 'two'"),
    ("RAG_RUN_STALE_SECONDS", "0", "RAG_RUN_STALE_SECONDS must be a positive integer, got '0'"),
    ("RAG_EMBED_THREADS", "1.5", "RAG_EMBED_THREADS must be a positive integer, got '1.5'"),
    ("RAG_PG_SHARED_BUFFERS", "1GB; DROP TABLE x", "RAG_PG_SHARED_BUFFERS must be a size like 512MB or 1GB"),
    ("RAG_DEBUG", "maybe", "RAG_DEBUG must be 1/0, true/false, got 'maybe'"),
    ("RAG_COLLECT_ENDPOINTS", "http://127.0.0.1:8081/rag, ftp://x", "RAG_COLLECT_ENDPOINTS 'ftp://x': expected "
                                                                     "http(s)://host[:port][/path]"),
    ("RAG_COLLECT_ENDPOINTS", "http://user:s3cret@rag.local/", "RAG_COLLECT_ENDPOINTS 'http://***@rag.local/': "),
    ("RAG_COLLECT_ENDPOINTS", "http://rag.local/?q={question}", "RAG_COLLECT_ENDPOINTS 'http://rag.local/?q="),
    ("RAG_COLLECT_ENV", "MY_TOKEN, RAG_API_TOKEN", "RAG_COLLECT_ENV 'RAG_API_TOKEN': the service's own RAG_* "
                                                  "settings are never readable"),
    ("RAG_COLLECT_ENV", "MY TOKEN", "RAG_COLLECT_ENV 'MY TOKEN' is not a variable name or a PREFIX* pattern"),
    ("RAG_COLLECT_SLOTS", "0", "RAG_COLLECT_SLOTS must be a positive integer, got '0'"),
])
def test_a_bad_value_names_the_variable(monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as info:
        get_settings()
    assert str(info.value).startswith(message)
    assert "s3cret" not in str(info.value)


def test_a_bad_setting_is_one_cli_line_with_exit_2(monkeypatch, capsys):
    from rag_pipeline.cli import main

    monkeypatch.setenv("RAG_EVAL_READERS", "-1")
    assert main(["runs"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rag-pipeline: error: RAG_EVAL_READERS must be a positive integer") or \
        "RAG_EVAL_READERS" in err, err
    assert "Traceback" not in err
