"""Secret values in use never stored or printed: the scrubber's forms, and a real endpoint echoing its header
and its URL credentials verbatim, JSON-escaped and percent-encoded, collected by the CLI and stored as an
answer run (docs/answers-collection.md "Secrets")."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
import sqlalchemy as sa

from rag_pipeline.service.answers import evaluate_answers
from rag_pipeline.storage.http.request import ResolvedHeaders
from rag_pipeline.storage.http.scrubbing import Scrubber, header_secrets, redact_url, url_secrets
from rag_pipeline_tests.answers.collect_helpers import read_lines, run_cli
from rag_pipeline_tests.answers.collect_helpers import write_dataset as write_cases
from rag_pipeline_tests.answers.rag_endpoint_server import RagEndpoint
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, write_dataset

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "tok-9f8e/7d6c+5b4a=x"
WIDE = "tok-9f8e/7d6c é 😀"
USER, PASSWORD = "alice", "pw-S3cr3t@77"


def every_char_escaped(value: str, upper: bool = False) -> str:
    """``value`` with every UTF-16 unit a JSON ``\\uXXXX`` escape."""
    units = value.encode("utf-16-be")
    text = "".join(f"\\u{int.from_bytes(units[i:i + 2]):04x}" for i in range(0, len(units), 2))
    return text.upper().replace("\\U", "\\u") if upper else text


def forms(value: str) -> list[str]:
    """The ways an endpoint may echo ``value``."""
    return [value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=True)[1:-1],
            every_char_escaped(value), every_char_escaped(value, upper=True),
            json.dumps(json.dumps(value, ensure_ascii=True))[3:-3], quote(value, safe=""), quote_plus(value),
            re.sub("%[0-9A-F]{2}", lambda m: m[0].lower(), quote(value, safe="")), repr(value)[1:-1],
            "".join(f"&#{ord(c)};" for c in value)]


def test_the_scrubber_removes_a_value_in_every_echoed_form() -> None:
    scrub = Scrubber(header_secrets(f"Bearer {TOKEN}"))
    for form in forms(f"Bearer {TOKEN}") + forms(TOKEN):
        assert scrub(f"before {form} after") == "before [secret] after", form
    assert scrub("Bearer tok-9f8e and nothing else") == "Bearer tok-9f8e and nothing else", "a prefix is not it"
    wide = Scrubber([WIDE])
    for form in forms(WIDE) + ["tok-9f8e/7d6c \\u00e9 \\ud83d\\ude00"]:
        assert wide(f"<{form}>") == "<[secret]>", form
    assert repr(scrub) == "Scrubber(2 values)" and TOKEN not in str(scrub)
    assert Scrubber(["abc"])("abc abc") == "abc abc", "3 characters would blank out words: not scrubbed"
    assert Scrubber(["abcd-1234", "zz-9876"])("x abcd-1234 y zz-9876") == "x [secret] y [secret]", "no escape in it"


def test_a_basic_credential_and_a_url_password_are_secrets_in_every_form() -> None:
    pair = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    scrub = Scrubber(url_secrets(f"http://{USER}:{quote(PASSWORD, safe='')}@host:8080/rag"))
    for form in forms(PASSWORD) + forms(quote(PASSWORD, safe="")) + [pair, pair.rstrip("=")]:
        assert "S3cr3t" not in scrub(f"<{form}>") and "[secret]" in scrub(f"<{form}>"), form
    basic = Scrubber(header_secrets(f"Basic {pair}"))
    assert basic(f"user {USER} with {PASSWORD}") == f"user {USER} with [secret]"
    assert url_secrets("http://alice@host/") == [] and url_secrets("http://host/a@b") == []


def test_a_url_is_shown_without_its_credentials() -> None:
    assert redact_url(f"http://{USER}:{PASSWORD}@host/rag?q=@") == "http://***@host/rag?q=@"
    assert redact_url("https://token@host/") == "https://***@host/"
    assert redact_url("http://host/rag?who=a@b") == "http://host/rag?who=a@b"
    assert redact_url(f"{USER}:{PASSWORD}@host/rag") == "***@host/rag", "no scheme: still not shown"


def test_a_bad_endpoint_url_is_refused_without_its_password(tmp_path, capsys) -> None:
    dataset = write_cases(tmp_path, 1)
    code = run_cli(["--dataset", str(dataset), "--endpoint", f"ftp://{USER}:{PASSWORD}@host/x",
                    "--output", str(tmp_path / "a.jsonl"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "'ftp://***@host/x': expected an http:// or https:// URL" in err
    assert PASSWORD not in err and not (tmp_path / "a.jsonl").exists()


def test_an_endpoint_url_with_a_credential_in_its_query_is_refused_without_it(tmp_path, capsys) -> None:
    dataset = write_cases(tmp_path, 1)
    code = run_cli(["--dataset", str(dataset), "--endpoint", f"http://127.0.0.1:9/rag?q=x&api_key={PASSWORD}",
                    "--output", str(tmp_path / "a.jsonl"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "holds a credential in its query string (parameter 'api_key')" in err
    assert PASSWORD not in err and not (tmp_path / "a.jsonl").exists()


def test_an_env_variable_name_that_is_not_one_or_a_value_http_cannot_send_is_refused_unechoed() -> None:
    with pytest.raises(ValueError, match="after env: give the name of an environment variable") as raised:
        ResolvedHeaders(["Authorization: env:Bearer sk-live-123"], {})
    assert "sk-live-123" not in str(raised.value)
    with pytest.raises(ValueError, match="X-Key: the value holds a character that is not ASCII") as raised:
        ResolvedHeaders(["X-Key: env:WIDE_KEY"], {"WIDE_KEY": "clé-secrète"})
    assert "secr" not in str(raised.value)


def _collect(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "rag_pipeline_tests.answers.collect_helpers", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    return proc.returncode, proc.stdout, proc.stderr


def test_an_echoing_endpoint_leaves_no_secret_in_the_file_the_output_or_the_answer_run(engine, kb_name,
                                                                                      tmp_path) -> None:
    chunks = ingest_tiny_kb(engine, kb_name, tmp_path / "kb")
    cases = [{"case_id": step, "question": f"What does {step} say?", "k": 2,
              "relevant_chunk_ids": [chunks["backup.md"]], "reference_answers": ["basebackup"]}
             for step in ("echo-answer", "echo-escaped", "echo-percent", "echo-headers", "500-echo")]
    dataset = write_dataset(tmp_path / "echo.json", kb_name, cases)
    out = tmp_path / "answers.jsonl"
    plan = {step: [step] for step in ("echo-answer", "echo-escaped", "echo-percent", "echo-headers", "500-echo")}
    with RagEndpoint(plan) as server:
        url = server.url.replace("http://", f"http://{USER}:{quote(PASSWORD, safe='')}@")
        code, stdout, stderr = _collect(["--dataset", str(dataset), "--endpoint", url, "--output", str(out),
                                         "--header", "X-Api-Key: env:ECHO_TEST_TOKEN", "--retries", "0"],
                                        {"ECHO_TEST_TOKEN": f"Bearer {TOKEN}"})
    assert code == 0, stderr
    lines = {line["case_id"]: line for line in read_lines(out)}
    assert lines["echo-answer"]["answer"] == "[secret] and [secret]", "the endpoint did echo both, verbatim"
    assert lines["echo-escaped"]["answer"] == "[secret] and [secret]"
    assert lines["echo-percent"]["cited_chunk_ids"] == ["[secret]", "[secret]"]
    assert lines["500-echo"]["status"] == "error" and "[secret]" in lines["500-echo"]["error"]

    report = evaluate_answers(engine, kb_name, dataset, out, answerer="echo-rag")
    with engine.connect() as conn:
        stored = conn.execute(sa.text(
            "SELECT (SELECT row_to_json(r)::text FROM answer_runs r WHERE r.id = :id) || "
            "(SELECT string_agg(row_to_json(c)::text, ' ') FROM answer_case_results c WHERE c.run_id = :id)"),
            {"id": report.run.run_id}).scalar_one()
    assert "[secret]" in stored
    pair = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    leaks = [form for form in forms(TOKEN) + forms(PASSWORD) + [pair, pair.rstrip("=")]
             for where, text in (("file", out.read_text(encoding="utf-8")), ("stdout", stdout),
                                 ("stderr", stderr), ("database", stored))
             if form in text]
    assert not leaks, leaks
