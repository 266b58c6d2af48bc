"""An attached knowledge base on a second, real PostgreSQL server (the embedded wheel on another port): the demo
documents in the original design's schema (``documents`` / ``document_chunks``, one ``embedding`` column), with the
chunk ids, texts, tsvectors and USE vectors the demo knowledge base got when the project ingested it. Attached
read-only through a role that has write rights, ``hybrid-v1`` on it gives the demo knowledge base's candidates and
metrics; the user database is unchanged afterwards; bad mappings are named and store nothing; a changed row
changes the fingerprint and `compare` says the runs saw different content."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from rag_pipeline.contracts.attached import AttachedMapping
from rag_pipeline.evaluation.datasets.label_check import check_labels
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.knowledge_base import attached
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline.storage import embedded_server
from rag_pipeline.storage.engine import read_only_engine
from rag_pipeline.storage.urls import with_database

pytestmark = [pytest.mark.db, pytest.mark.slow]  # slow: a second PostgreSQL server and the USE model

ROOT = Path(__file__).resolve().parents[2]
URL_ENV = "ATTACHED_TEST_URL"
PASSWORD = "Wr1te-rights-but-never-used"
MAPPING = AttachedMapping(text_search="mixed")  # the demo knowledge base's text mode (checked by attached_kb)

SCHEMA = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TYPE document_status AS ENUM ('PROCESSING', 'READY', 'FAILED');
CREATE TYPE document_publication_status AS ENUM ('DRAFT', 'PUBLISHED', 'UNPUBLISHED');
CREATE TABLE documents (
    id uuid PRIMARY KEY, knowledge_base_id uuid NOT NULL, original_name text NOT NULL, title text,
    status document_status NOT NULL, publication_status document_publication_status NOT NULL,
    is_deleted boolean NOT NULL DEFAULT false);
CREATE TABLE document_chunks (
    id uuid PRIMARY KEY, knowledge_base_id uuid NOT NULL, document_id uuid NOT NULL REFERENCES documents (id),
    content text NOT NULL, content_tsvector tsvector NOT NULL, embedding vector(512));
CREATE TABLE kb_text (chunk_key text PRIMARY KEY, doc text NOT NULL, body text NOT NULL, emb vector(512),
                      live boolean NOT NULL);
CREATE ROLE app_writer LOGIN PASSWORD '{password}';
GRANT ALL ON ALL TABLES IN SCHEMA public TO app_writer;
GRANT CREATE ON SCHEMA public TO app_writer;
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def user_db(engine, demo_kb):
    """The second server's database ``userdb`` holding the demo KB's current chunks: (superuser engine, the
    write-capable role's URL)."""
    # in /tmp, not under pytest's basetemp: another pytest session of the machine resets that folder's mode to 0700,
    # and the server's system user must traverse the path
    pgdata = Path(tempfile.mkdtemp(prefix="rag_user_pg_")) / "pgdata"
    embedded_server.start(pgdata, listen=f"127.0.0.1:{_free_port()}")
    try:
        admin_url = embedded_server.listener_url("postgres", pgdata=pgdata)
        assert admin_url
        with sa.create_engine(admin_url, isolation_level="AUTOCOMMIT").connect() as conn:
            conn.execute(sa.text("CREATE DATABASE userdb"))
        owner = sa.create_engine(with_database(admin_url, "userdb"))
        with engine.connect() as project:
            docs = project.execute(sa.text(
                "SELECT d.id, d.knowledge_base_id, d.original_name, d.title, CAST(d.status AS text) AS status, "
                "CAST(d.publication_status AS text) AS publication_status, d.is_deleted FROM documents d "
                "JOIN knowledge_bases k ON k.id = d.knowledge_base_id WHERE k.name = :kb"), {"kb": demo_kb}).all()
            chunks = project.execute(sa.text(
                "SELECT c.id, c.knowledge_base_id, c.document_id, c.content, CAST(c.content_tsvector AS text) AS tsv, "
                "CAST(e.embedding AS text) AS embedding FROM document_chunks c JOIN knowledge_bases k "
                "ON k.id = c.knowledge_base_id LEFT JOIN chunk_embeddings e ON e.chunk_id = c.id "
                "AND e.model = 'use-multilingual-v3' WHERE k.name = :kb AND c.is_current"), {"kb": demo_kb}).all()
        assert len(chunks) > 20 and all(c.embedding for c in chunks)
        with owner.begin() as conn:
            for statement in filter(str.strip, SCHEMA.format(password=PASSWORD).split(";")):
                conn.execute(sa.text(statement))
            conn.execute(sa.text(
                "INSERT INTO documents VALUES (:id, :knowledge_base_id, :original_name, :title, "
                "CAST(:status AS document_status), CAST(:publication_status AS document_publication_status), "
                ":is_deleted)"), [r._asdict() for r in docs])
            conn.execute(sa.text(
                "INSERT INTO document_chunks VALUES (:id, :knowledge_base_id, :document_id, :content, "
                "CAST(:tsv AS tsvector), CAST(:embedding AS vector))"), [r._asdict() for r in chunks])
            conn.execute(sa.text(  # the user's own ids: text, not UUIDs; no documents table
                "INSERT INTO kb_text SELECT 'chunk-' || lpad(CAST(row_number() OVER (ORDER BY id) AS text), 3, '0'), "
                "CAST(document_id AS text), content, embedding, true FROM document_chunks"))
            conn.execute(sa.text("ANALYZE"))
        user_url = admin_url.replace(admin_url.split("://", 1)[1].split("@", 1)[0], f"app_writer:{PASSWORD}", 1)
        user_url = with_database(user_url, "userdb")
        writer = sa.create_engine(user_url)
        with writer.connect() as conn:  # the role does have write rights (rolled back)
            conn.execute(sa.text("CREATE TABLE scratch (i int)"))
            conn.execute(sa.text("DELETE FROM kb_text WHERE false"))
            conn.rollback()
        writer.dispose()
        yield owner, user_url
        owner.dispose()
    finally:
        embedded_server.stop(pgdata)
        shutil.rmtree(pgdata.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def attached_kb(engine, demo_kb, user_db):
    """The user database attached as ``attached-demo`` (default mapping, the demo's text mode), URL in URL_ENV."""
    with engine.connect() as conn:
        assert resolve_knowledge_base(conn, "demo").text_search == MAPPING.text_search
    os.environ[URL_ENV] = user_db[1]
    try:
        result = attached.attach(engine, "attached-demo", URL_ENV, MAPPING)
        assert result.url.count("***") == 1 and PASSWORD not in result.model_dump_json()
        with engine.connect() as conn:
            row = conn.execute(sa.text("SELECT kind, url_env, CAST(k AS text) AS everything FROM knowledge_bases k "
                                       "WHERE name = 'attached-demo'")).one()
        assert (row.kind, row.url_env) == ("attached", URL_ENV) and PASSWORD not in row.everything
        yield result
    finally:
        os.environ.pop(URL_ENV, None)


def _state(owner: sa.Engine, user_url: str) -> dict:
    """The user database as its owner sees it, once every other session has ended (a backend flushes its table
    statistics when it exits, so the write counters include everything done before)."""
    read_only_engine(user_url).dispose()
    owner.dispose()
    with owner.connect() as conn:
        for _ in range(200):
            if not conn.execute(sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = 'userdb' "
                                        "AND pid <> pg_backend_pid()")).scalar_one():
                break
            time.sleep(0.05)
        else:
            pytest.fail("another session on the user database did not end")
        conn.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
        return {
            "rows": conn.execute(sa.text("SELECT (SELECT count(*) FROM documents), "
                                         "(SELECT count(*) FROM document_chunks)")).one(),
            "relations": conn.execute(sa.text("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON "
                                              "n.oid = c.relnamespace WHERE n.nspname NOT IN ('pg_catalog', "
                                              "'information_schema', 'pg_toast')")).scalar_one(),
            "writes": conn.execute(sa.text("SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM "
                                           "pg_stat_user_tables ORDER BY relname")).all(),
            "content": conn.execute(sa.text(
                "SELECT md5(string_agg(CAST(c AS text), '' ORDER BY c.id)) FROM document_chunks c")).scalar_one(),
        }


def _pools(engine, run_id: str) -> list:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(
            "SELECT case_index, CAST(chunk_id AS text), rank, vector_score, vector_rank, keyword_score, keyword_rank, "
            "final_score, is_selected FROM retrieval_evaluation_candidate_rows WHERE evaluation_run_id = :r "
            "ORDER BY case_index, rank"), {"r": run_id})]


def test_hybrid_on_the_attached_database_equals_the_ingested_demo_and_writes_nothing(engine, demo_kb, user_db,
                                                                                     attached_kb):
    dataset = load_dataset(ROOT / "datasets" / "demo.json")
    strategy = get_strategy("hybrid-v1")
    before = _state(*user_db)
    assert dataset.knowledge_base == demo_kb
    ours = evaluate_dataset(engine, dataset, strategy)
    os.environ[URL_ENV] = user_db[1]
    try:
        theirs = evaluate_dataset(engine, dataset, strategy, kb="attached-demo")
    finally:
        os.environ.pop(URL_ENV, None)
    pools = _pools(engine, theirs.run_id)
    assert pools and pools == _pools(engine, ours.run_id)  # same chunks, ranks, leg scores and ranks, fused scores
    assert theirs.averages == ours.averages and theirs.case_count == ours.case_count == len(dataset.cases)
    assert theirs.summary.attached is not None
    assert theirs.summary.attached.rows == attached_kb.content.rows
    assert theirs.knowledge_base_version == attached_kb.content.fingerprint
    after = _state(*user_db)
    assert after == before  # no row, relation, insert, update or delete: the write-capable role never wrote


def test_questions_embedded_by_an_openai_compatible_endpoint_give_the_demo_results_on_the_attached_database(
        engine, demo_kb, user_db, attached_kb):
    """The user's vectors were made by a model the project reaches over HTTP: a real local OpenAI-compatible server
    serving the shipped model embeds the questions; hybrid-v1's algorithm on it gives the ingested demo's
    candidates and metrics, each question is asked once, and the token is stored nowhere."""
    from rag_pipeline.knowledge_base.embedding_models import add_endpoint_model
    from rag_pipeline.knowledge_base.endpoint_embedding import EmbeddingEndpoint
    from rag_pipeline_tests.knowledge_base.embeddings_server import EmbeddingsServer

    model, token_env, token = "attached-e2e-use", "ATTACHED_TEST_TOKEN", "attached-tok-5c1e-secret"
    dataset = load_dataset(ROOT / "datasets" / "demo.json")
    hybrid = get_strategy("hybrid-v1")
    served = hybrid.replace(version="hybrid-v1-attached-endpoint", embedding_model=model)
    os.environ.update({URL_ENV: user_db[1], token_env: f"Bearer {token}"})
    try:
        with EmbeddingsServer(token) as server:
            add_endpoint_model(engine, model, 512, EmbeddingEndpoint(url=server.url, model_id="use-m3",
                                                                     headers=[f"Authorization: env:{token_env}"]))
            attached.attach(engine, "attached-demo-endpoint", URL_ENV,
                            MAPPING.model_copy(update={"embedding_model": model}))
            ours = evaluate_dataset(engine, dataset, hybrid)
            asked = server.texts
            theirs = evaluate_dataset(engine, dataset, served, kb="attached-demo-endpoint")
            distinct = len({c.question for c in dataset.cases})
            assert server.texts - asked == distinct, "every distinct question embedded by the endpoint, once"
            again = evaluate_dataset(engine, dataset, served, kb="attached-demo-endpoint")
            assert server.texts - asked == distinct, "the second run asks the endpoint nothing"
    finally:
        for name in (URL_ENV, token_env):
            os.environ.pop(name, None)
    expected, got = _pools(engine, ours.run_id), _pools(engine, theirs.run_id)
    assert got and [r[:3] + r[5:7] + r[8:] for r in got] == [r[:3] + r[5:7] + r[8:] for r in expected]
    for a, b in zip(got, expected, strict=True):  # leg scores: the same model's vectors through JSON
        assert a[3] == pytest.approx(b[3], abs=1e-5) and a[4] == b[4] and a[7] == pytest.approx(b[7], abs=1e-5)
    assert theirs.averages.keys() == ours.averages.keys()
    for metric, value in ours.averages.items():
        assert theirs.averages[metric] == pytest.approx(value, abs=1e-9), metric
    assert again.averages == theirs.averages
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT CAST(k AS text) || CAST(m AS text) FROM knowledge_bases k, "
                                      "embedding_models m WHERE k.name = 'attached-demo-endpoint' "
                                      "AND m.name = :m"), {"m": model}).scalar_one()
    assert token not in stored and token_env in stored


def test_labels_and_the_label_check_on_the_attached_database(engine, user_db, attached_kb):
    dataset = load_dataset(ROOT / "datasets" / "demo.json")
    os.environ[URL_ENV] = user_db[1]
    try:
        with engine.connect() as conn:
            report = check_labels(conn, "attached-demo", dataset.cases)
            bad = check_labels(conn, "attached-demo", [{"case_id": "x", "relevant_chunk_ids": [str(uuid.uuid4())]}])
    finally:
        os.environ.pop(URL_ENV, None)
    assert report.rows and all(r.ok for r in report.rows), report.summary()
    assert [r.status for r in bad.rows] == ["unknown_id"] and "document_chunks" in bad.rows[0].detail


@pytest.mark.parametrize(("change", "named"), [
    ({"chunks_table": "chunks"}, "table 'chunks'"),
    ({"text": "body"}, "column 'body' (mapping field 'text')"),
    ({"document_filter": [{"column": "state", "equals": "live"}]}, "column 'state'"),
])
def test_a_mapping_naming_a_missing_table_or_column_is_named_and_nothing_is_stored(engine, user_db, change, named):
    mapping = AttachedMapping.model_validate({**MAPPING.model_dump(), **change})
    with pytest.raises(attached.AttachError, match=named.replace("(", r"\(").replace(")", r"\)")):
        attached.attach(engine, "attached-broken", URL_ENV, mapping, environ={URL_ENV: user_db[1]})
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM knowledge_bases WHERE name = 'attached-broken'")
                            ).scalar_one() == 0


def test_a_changed_row_changes_the_fingerprint_and_compare_says_so(engine, user_db, attached_kb, tmp_path):
    from rag_pipeline.service.history import compare_runs

    dataset = load_dataset(ROOT / "datasets" / "demo.json")
    strategy = get_strategy("keyword-v1")
    os.environ[URL_ENV] = user_db[1]
    with user_db[0].connect() as conn:
        chunk_id, text = conn.execute(sa.text("SELECT id, content FROM document_chunks ORDER BY id LIMIT 1")).one()
    try:
        first = evaluate_dataset(engine, dataset, strategy, kb="attached-demo")
        with user_db[0].begin() as conn:
            conn.execute(sa.text("UPDATE document_chunks SET content = content || '!' WHERE id = :id"),
                         {"id": chunk_id})
        second = evaluate_dataset(engine, dataset, strategy, kb="attached-demo")
    finally:
        os.environ.pop(URL_ENV, None)
        with user_db[0].begin() as conn:
            conn.execute(sa.text("UPDATE document_chunks SET content = :t WHERE id = :id"), {"t": text, "id": chunk_id})
    assert first.knowledge_base_version != second.knowledge_base_version
    assert first.summary.attached and second.summary.attached
    assert first.summary.attached.rows == second.summary.attached.rows
    pair = compare_runs(engine, first.run_id, second.run_id, n_resamples=200)
    assert any("different content" in note for note in pair.notes), pair.notes
    from rag_pipeline.cli.runs_table import comparison_table
    from rag_pipeline.service import evaluations

    table = comparison_table([s.model_dump(mode="json")
                              for s in evaluations.run_summaries(engine, [first.run_id, second.run_id])])
    assert "runs of knowledge base attached-demo listed here saw 2 different contents" in table
    from rag_pipeline.service.lineage import stale_runs

    assert not [r for r in stale_runs(engine) if r.knowledge_base == "attached-demo"]  # no re-evaluation loop


TEXT_MAPPING = AttachedMapping(chunks_table="kb_text", chunk_id="chunk_key", document_id="doc", text="body",
                               embedding="emb", tsvector=None, text_search="mixed", documents_table=None,
                               document_name=None, document_filter=[{"column": "live", "equals": True}])


def test_text_chunk_ids_are_the_labels_through_qrels_and_score_as_the_demo(engine, user_db, tmp_path):
    """A table whose chunk ids are text (``chunk-001`` ...), no documents table, a boolean filter: labels written
    as a qrels file of those ids; vector-v1 on it scores exactly as on the ingested demo (same vectors)."""
    from rag_pipeline.evaluation.trec import qrels
    from rag_pipeline.service.evaluations import write_report

    owner, url = user_db
    with owner.connect() as conn:
        key_of = dict(conn.execute(sa.text("SELECT CAST(c.id AS text), k.chunk_key FROM document_chunks c JOIN "
                                           "kb_text k ON k.body = c.content AND k.doc = CAST(c.document_id AS text)")
                                   ).all())
    demo = load_dataset(ROOT / "datasets" / "demo.json")
    (tmp_path / "qrels.txt").write_text("".join(f"{c.case_id} 0 {key_of[cid]} {g}\n" for c in demo.cases
                                                for cid, g in c.grades.items() if c.answerable), encoding="utf-8")
    (tmp_path / "topics.jsonl").write_text("".join(json.dumps({"qid": c.case_id, "question": c.question, "k": c.k})
                                                   + "\n" for c in demo.cases if c.answerable), encoding="utf-8")
    attached.attach(engine, "attached-text", URL_ENV, TEXT_MAPPING, environ={URL_ENV: url})
    os.environ[URL_ENV] = url
    try:
        with engine.connect() as conn:
            kb = attached.load(conn, resolve_knowledge_base(conn, "attached-text"))
        assert kb is not None
        dataset, _ = qrels.import_dataset(engine, tmp_path / "qrels.txt", tmp_path / "topics.jsonl",
                                          name="attached-text-demo", kb=kb.kb)
        with engine.connect() as conn:
            report = check_labels(conn, "attached-text", dataset.cases)
        assert report.rows and all(r.ok for r in report.rows), report.summary()
        theirs = evaluate_dataset(engine, dataset, get_strategy("vector-v1"))
    finally:
        os.environ.pop(URL_ENV, None)
    ours = evaluate_dataset(engine, demo, get_strategy("vector-v1"))  # the means are over the answerable cases
    assert theirs.averages == pytest.approx(ours.averages, abs=1e-12) and theirs.averages["recall_at_k"] > 0
    out = tmp_path / "run.json"
    with out.open("w", encoding="utf-8") as fp:
        write_report(engine, theirs.run_id, fp)
    assert '"chunk-0' in out.read_text(encoding="utf-8")  # the stored pools read back as the user's ids


def test_chunks_suggest_and_the_console_text_work_on_the_attached_database(engine, user_db, attached_kb):
    from rag_pipeline.service.history import chunk_texts
    from rag_pipeline.service.labelling import drafts
    from rag_pipeline.service.labelling.chunks import find_chunks

    dataset = load_dataset(ROOT / "datasets" / "demo.json")
    case = next(c for c in dataset.cases if c.answerable)
    os.environ[URL_ENV] = user_db[1]
    try:
        listing = find_chunks(engine, "attached-demo", limit=5)
        found = find_chunks(engine, "attached-demo", search=case.question, limit=10)
        draft = drafts.pool(engine, "attached-demo", drafts.questions_from_text(case.question, 10),
                            strategies=["hybrid-v1", "keyword-v1"], depth=10)
        texts = chunk_texts(engine, [case.relevant_chunk_ids[0]])
    finally:
        os.environ.pop(URL_ENV, None)
    with user_db[0].connect() as conn:
        searchable = conn.execute(sa.text(
            "SELECT count(*) FROM document_chunks c JOIN documents d ON d.id = c.document_id WHERE d.status = "
            "'READY' AND d.publication_status = 'PUBLISHED' AND NOT d.is_deleted")).scalar_one()
    assert listing.total == searchable and len(listing.chunks) == 5
    assert [c.chunk_id for c in listing.chunks] == sorted(c.chunk_id for c in listing.chunks)
    assert set(case.relevant_chunk_ids) & {c.chunk_id for c in found.chunks}
    pooled = {c.chunk_id: c for c in draft.questions[0].candidates}
    assert set(case.relevant_chunk_ids) & set(pooled) and all(c.text for c in pooled.values())
    assert texts[case.relevant_chunk_ids[0]].content


def test_nothing_is_ingested_into_an_attached_knowledge_base(engine, attached_kb):
    from rag_pipeline.knowledge_base.ingestion import ingest_documents
    from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError
    from rag_pipeline.knowledge_base.sources import read_folder

    with pytest.raises(KnowledgeBaseError, match="'attached-demo' is attached"):
        ingest_documents(engine, read_folder(ROOT / "demo" / "kb"), "attached-demo", text_search="mixed",
                         chunk_size=0, chunk_overlap=0, rechunk=True)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM document_chunks c JOIN knowledge_bases k ON "
                                    "k.id = c.knowledge_base_id WHERE k.name = 'attached-demo'")).scalar_one() == 0


def test_the_cli_attaches_by_variable_name_and_never_prints_the_password(engine, user_db, monkeypatch, capsys):
    from rag_pipeline.cli.main import main

    monkeypatch.setenv(URL_ENV, user_db[1])
    assert main(["kb", "attach", "attached-cli", "--url-env", URL_ENV]) == 0
    out, err = capsys.readouterr()
    shown = json.loads(out)
    assert shown["kind"] == "attached" and shown["url_env"] == URL_ENV and shown["content"]["rows"] > 20
    assert PASSWORD not in out + err and "***" in shown["url"]
    assert main(["kb", "attached-cli"]) == 0  # its counts are read in the user's database
    out, err = capsys.readouterr()
    assert json.loads(out)["content"] == shown["content"] and PASSWORD not in out + err
    assert main(["kb", "attach", "attached-cli2", "--url-env", "ATTACHED_TEST_NOT_SET"]) == 2
    assert "ATTACHED_TEST_NOT_SET" in capsys.readouterr().err
    assert main(["kb", "attach", "attached-cli2", "--url-env", user_db[1]]) == 2  # a URL where the name goes
    out, err = capsys.readouterr()
    assert "not an environment variable name" in err and PASSWORD not in out + err
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM knowledge_bases WHERE name = 'attached-cli2'")
                            ).scalar_one() == 0


def test_a_column_gone_since_the_attach_is_named_and_no_run_is_stored(engine, user_db, attached_kb):
    def runs() -> int:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT count(*) FROM retrieval_evaluation_runs")).scalar_one()

    before = runs()
    with user_db[0].begin() as conn:
        conn.execute(sa.text("ALTER TABLE document_chunks RENAME COLUMN content TO body"))
    os.environ[URL_ENV] = user_db[1]
    try:
        with pytest.raises(attached.AttachError, match=r"column 'content' \(mapping field 'text'\)"):
            evaluate_dataset(engine, load_dataset(ROOT / "datasets" / "demo.json"), get_strategy("keyword-v1"),
                             kb="attached-demo")
    finally:
        os.environ.pop(URL_ENV, None)
        with user_db[0].begin() as conn:
            conn.execute(sa.text("ALTER TABLE document_chunks RENAME COLUMN body TO content"))
    assert runs() == before


def test_the_sessions_on_the_user_database_refuse_any_write(user_db):
    """Both guards hold on their own: the transaction (SET TRANSACTION ... READ ONLY) and the session default."""
    with pytest.raises(sa.exc.DBAPIError, match="read-only transaction"), attached.read_only(user_db[1]) as conn:
        conn.execute(sa.text("CREATE TABLE nope (i int)"))
    with read_only_engine(user_db[1]).connect() as conn, pytest.raises(sa.exc.DBAPIError, match="read-only"):
        conn.execute(sa.text("DELETE FROM kb_text"))


def test_a_leg_without_an_index_is_said_and_an_indexed_one_is_not(user_db, attached_kb):
    assert [w.split(":")[0] for w in attached_kb.warnings] == [
        "the vector leg scans every row of 'document_chunks'", "the keyword leg scans every row of 'document_chunks'"]
    owner, url = user_db
    with owner.begin() as conn:
        conn.execute(sa.text("CREATE INDEX chunks_hnsw ON document_chunks USING hnsw (embedding vector_cosine_ops)"))
        conn.execute(sa.text("CREATE INDEX chunks_gin ON document_chunks USING gin (content_tsvector)"))
    try:
        with attached.read_only(url) as conn:
            assert attached.check_mapping(conn, MAPPING) == []
    finally:
        with owner.begin() as conn:
            conn.execute(sa.text("DROP INDEX chunks_hnsw, chunks_gin"))
