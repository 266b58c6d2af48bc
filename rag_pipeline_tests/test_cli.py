"""The ``rag-pipeline`` command against the session's database.

The main paths run the installed ``rag-pipeline`` binary as a subprocess; independent ones start
together (each process spends most of its time importing). Cheap variations (each subcommand's
``--help``, extra error cases) call ``main()`` in-process to keep the file fast on two cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from rag_pipeline.cli import build_parser, main
from rag_pipeline.knowledge_base import chunking

RAG = Path(sys.executable).parent / "rag-pipeline"
ROOT = Path(__file__).resolve().parents[1]
SECRET_URL = "postgresql://rag:hunter2@db.invalid:5432/rag"
INGEST_OPTS = ("--text-search", "chinese", "--chunk-size", "300", "--chunk-overlap", "50")


def subcommands() -> list[str]:
    parser = build_parser()
    [sub] = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return sorted(sub.choices)


class Proc:
    def __init__(self, *args: str, env: dict | None = None) -> None:
        self.args = args
        self.popen = subprocess.Popen([str(RAG), *args], cwd=ROOT, env={**os.environ, **(env or {})},
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._out: tuple[str, str] | None = None

    def wait(self) -> Proc:
        if self._out is None:
            self._out = self.popen.communicate(timeout=180)
        return self

    @property
    def rc(self) -> int:
        return self.wait().popen.returncode

    @property
    def stdout(self) -> str:
        return self.wait()._out[0]

    @property
    def stderr(self) -> str:
        return self.wait()._out[1]

    def ok(self) -> Proc:
        assert self.rc == 0, f"rag-pipeline {' '.join(self.args)} exited {self.rc}:\n{self.stdout}\n{self.stderr}"
        return self


def write_docs(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "a.md").write_text("# VPN\n\nReset the VPN token in the portal. Tokens expire after 90 days.\n",
                                 encoding="utf-8")
    (folder / "b.txt").write_text("差旅报销需要在出差结束后三十天内提交。所有票据必须是原件。\n", encoding="utf-8")
    (folder / "c.html").write_text("<html><head><title>Wi-Fi</title></head><body><p>Guest Wi-Fi password "
                                   "changes every Monday.</p></body></html>", encoding="utf-8")
    return folder


def write_beir(folder: Path) -> Path:
    (folder / "qrels").mkdir(parents=True)
    corpus = [{"_id": "d1", "title": "Aspirin", "text": "Aspirin lowers heart attack risk."},
              {"_id": "d2", "title": "Coffee", "text": "Coffee is not linked to cancer."},
              {"_id": "d3", "text": "Exercise improves insulin sensitivity."}]
    queries = [{"_id": "q1", "text": "Does aspirin help the heart?"}, {"_id": "q2", "text": "Coffee and cancer?"},
               {"_id": "q3", "text": "Unjudged"}]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq2\td3\t0\n",
                                               encoding="utf-8")
    return folder


def run_in_process(capsys, *args: str) -> tuple[int, str, str]:
    """``main(args)`` in this process (for the cheap checks; the binary is exercised by the others)."""
    capsys.readouterr()
    try:
        rc = main(list(args))
    except SystemExit as exc:  # argparse --help / usage errors
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def rc_and_stderr(capsys, *args: str) -> tuple[int, str]:
    rc, _, err = run_in_process(capsys, *args)
    return rc, err


@pytest.fixture(scope="module")
def launched(engine, tmp_path_factory):  # the server must be up and migrated first
    """Independent subprocesses, started together."""
    tmp = tmp_path_factory.mktemp("cli")
    tag = uuid.uuid4().hex[:8]
    ctx = {
        "tmp": tmp,
        "kb": f"cli-kb-{tag}",
        "beir_kb": f"cli-beir-{tag}",
        "docs": write_docs(tmp / "docs"),
        "beir": write_beir(tmp / "tinybeir"),
        "dataset_out": tmp / "out" / "tiny.json",
    }
    procs = {
        "ingest": Proc("ingest", str(ctx["docs"]), *INGEST_OPTS, "--knowledge-base", ctx["kb"]),
        "help": Proc("--help"),
        "db-url-secret": Proc("db", "url", env={"RAG_DATABASE_URL": SECRET_URL}),
        "unknown-kb": Proc("kb", f"no-such-kb-{tag}"),
    }
    # Not concurrently with the other ingestion: concurrent ingestions can deadlock (see
    # test_ingestion.py::test_concurrent_ingestions_into_different_kbs_both_succeed).
    procs["ingest"].wait()
    procs["import-beir"] = Proc("import-beir", str(ctx["beir"]), "--knowledge-base", ctx["beir_kb"],
                                "--dataset-out", str(ctx["dataset_out"]), "--k", "5")
    yield ctx, procs
    for p in procs.values():
        if p.popen.poll() is None:
            p.popen.kill()
            p.popen.wait()


def test_help_of_every_subcommand(launched, capsys) -> None:
    _, procs = launched
    top = procs["help"].ok().stdout
    assert "usage: rag-pipeline" in top
    names = subcommands()
    assert {"db", "ingest", "import-beir", "kb", "doc"} <= set(names)
    for name in names:
        assert name in top
        rc, out, _ = run_in_process(capsys, name, "--help")
        assert rc == 0, name
        assert out.startswith(f"usage: rag-pipeline {name}"), out[:200]


def test_db_url_is_masked(launched, capsys, monkeypatch) -> None:
    _, procs = launched
    assert procs["db-url-secret"].ok().stdout == "postgresql+psycopg://rag:***@db.invalid:5432/rag\n"
    monkeypatch.setenv("RAG_DATABASE_URL", SECRET_URL)
    rc, out, _ = run_in_process(capsys, "db", "url", "--dagster")
    assert (rc, out) == (0, "postgresql+psycopg2://rag:***@db.invalid:5432/dagster\n")
    monkeypatch.delenv("RAG_DATABASE_URL")
    if os.environ.get("RAG_TEST_DATABASE_URL"):
        monkeypatch.setenv("RAG_DATABASE_URL", os.environ["RAG_TEST_DATABASE_URL"])
    rc, out, _ = run_in_process(capsys, "db", "url")
    assert rc == 0 and len(out.splitlines()) == 1 and out.startswith("postgresql+psycopg://")
    if not os.environ.get("RAG_TEST_DATABASE_URL"):
        assert "/rag?host=" in out  # the embedded server's "rag" database on its socket


def _one_line_error(rc: int, err: str, fragment: str) -> None:
    assert rc == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("rag-pipeline: error: "), lines[0]
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in err and "hunter2" not in err


def test_user_errors_are_one_line(launched, capsys, monkeypatch) -> None:
    ctx, procs = launched
    proc = procs["unknown-kb"]
    _one_line_error(proc.rc, proc.stderr, "unknown knowledge base 'no-such-kb-")
    assert proc.stdout == ""
    _one_line_error(*rc_and_stderr(capsys, "ingest", str(ctx["tmp"] / "missing"), "--knowledge-base", "x"),
                    "not a folder")
    monkeypatch.setenv("RAG_DATABASE_URL", "postgresql://rag:hunter2@/rag?host=/nonexistent-socket-dir")
    _one_line_error(*rc_and_stderr(capsys, "kb", "x"), "cannot reach the database")


@pytest.mark.slow  # rag-pipeline processes that ingest
def test_ingest_kb_and_doc(engine, launched, capsys) -> None:
    ctx, procs = launched
    kb = ctx["kb"]
    result = json.loads(procs["ingest"].ok().stdout)
    assert result["knowledge_base"] == kb
    assert (result["documents_new"], result["documents_seen"]) == (3, 3)
    assert result["chunks_inserted"] == 3 and result["embeddings_written"] == 3

    doc = Proc("doc", "a.md", "--knowledge-base", kb, "--publication", "UNPUBLISHED").ok()
    assert doc.stdout.strip() == "updated 1 document(s)"
    stats = json.loads(Proc("kb", kb).ok().stdout)
    assert stats["knowledge_base"] == kb and stats["text_search"] == "chinese"
    assert (stats["documents"], stats["searchable_documents"], stats["current_chunks"]) == (3, 2, 3)
    assert stats["embeddings"] == {"use-multilingual-v3": 3}

    rc, out, _ = run_in_process(capsys, "doc", str(chunking.document_id(kb, "c.html")), "--knowledge-base", kb,
                                "--deleted", "delete", "--status", "FAILED")
    assert (rc, out.strip()) == (0, "updated 1 document(s)")
    with engine.connect() as conn:
        rows = dict(conn.execute(sa.text(
            "SELECT original_name, status::text || '/' || publication_status::text || '/' || is_deleted::text "
            "FROM documents WHERE knowledge_base_id = :kb"), {"kb": chunking.knowledge_base_id(kb)}).all())
    assert rows == {"a.md": "READY/UNPUBLISHED/false", "b.txt": "READY/PUBLISHED/false",
                    "c.html": "FAILED/PUBLISHED/true"}
    _one_line_error(*rc_and_stderr(capsys, "doc", "a.md", "--knowledge-base", kb), "nothing to change")
    _one_line_error(*rc_and_stderr(capsys, "doc", "zzz.md", "--knowledge-base", kb, "--status", "FAILED"),
                    "no document 'zzz.md'")
    procs["import-beir"].wait()  # no two ingestions at once (see the fixture)
    rc, out, _ = run_in_process(capsys, "ingest", str(ctx["docs"]), *INGEST_OPTS, "--knowledge-base", kb)
    again = json.loads(out)
    assert rc == 0 and (again["chunks_inserted"], again["embeddings_written"]) == (0, 0)
    # a conflicting setting is a one-line user error, and nothing changes
    _one_line_error(*rc_and_stderr(capsys, "ingest", str(ctx["docs"]), "--knowledge-base", kb),
                    "was built with text_search=chinese")


def test_import_beir_writes_a_seed_shaped_dataset(engine, launched) -> None:
    ctx, procs = launched
    summary = json.loads(procs["import-beir"].ok().stdout)
    assert summary["cases"] == 2 and summary["chunks_inserted"] == 3
    assert summary["dataset_out"] == str(ctx["dataset_out"])
    data = json.loads(ctx["dataset_out"].read_text(encoding="utf-8"))
    assert set(data) >= {"knowledge_base", "cases"} and data["knowledge_base"] == ctx["beir_kb"]
    assert [c["case_id"] for c in data["cases"]] == ["tinybeir-q1", "tinybeir-q2"]
    for case in data["cases"]:
        assert set(case) == {"case_id", "question", "relevant_chunk_ids", "k"}
        assert isinstance(case["question"], str) and case["k"] == 5
        assert len(case["relevant_chunk_ids"]) == 1
    ids = [i for c in data["cases"] for i in c["relevant_chunk_ids"]]
    with engine.connect() as conn:
        names = conn.execute(sa.text(
            "SELECT d.original_name FROM document_chunks c JOIN documents d ON d.id = c.document_id "
            "WHERE c.id::text = ANY(:ids) ORDER BY 1"), {"ids": ids}).scalars().all()
    assert names == ["d1", "d2"]
