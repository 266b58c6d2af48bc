"""Security on a real PostgreSQL: hostile questions are searched as text, candidate snapshots and reports
carry no chunk text unless asked, the embedded server is reachable through its unix socket only,
passwords never reach messages / metadata / stored errors / dagster.yaml, and SQL is parameterised
(a static check of every SQL string built with f-strings / ``.format`` / ``%`` / ``+`` in rag_pipeline/)."""

import ast
import json
import os
import re
import uuid
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa
import yaml
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from rag_pipeline.defs.evaluation import evaluation_dataset, evaluation_run
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.evaluation.datasets.load import DatasetError, load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.evaluation.runs import results as persistence
from rag_pipeline.evaluation.runs.case_queries import overview as case_overview
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.retrieval.search import hybrid_search_batch
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline.settings import pgdata_dir
from rag_pipeline.storage import embedded_server as embedded_pg
from rag_pipeline.storage import engine as db
from rag_pipeline.storage.urls import mask_secrets, mask_url
from rag_pipeline_tests.eval_helpers import TINY_DOCS, build_report, run_rows, table_counts, write_dataset
from rag_pipeline_tests.reliability_helpers import assert_no_partial_succeeded_runs, closed_tcp_port, kb_counts
from rag_pipeline_tests.source_helpers import parse_source

ROOT = Path(__file__).resolve().parents[2]
KB = "security-tiny"

# Questions that would do something else if any of them reached SQL or to_tsquery as code.
HOSTILE = {
    "sql-drop": "'); DROP TABLE documents; --",
    "sql-or": "coffee' OR '1'='1",
    "sql-union": "x' UNION SELECT content FROM document_chunks --",
    "sql-stacked": "coffee; DELETE FROM chunk_terms; SELECT pg_sleep(30)",
    "sql-comment": "coffee /* machine */ -- fridge",
    "dollar-quotes": "$$ coffee $$ $tag$ machine $tag$",
    "placeholders": "%s %(kb)s {kb} :kb ? $1 coffee",
    "tsquery-not": "coffee & !machine",
    "tsquery-operators": "(basebackup | archiving) <-> restores:* & !!quarter <2> tested",
    "tsquery-only-operators": "& | ! ( ) : * <-> <1> !",
    "quotes": "\"coffee\" 'machine' `fridge` \u2019oat\u2019",
    "backslashes": "coffee\\ machine\\\\ \\' \\x27 E'\\\\' fridge\\",
    "control-characters": "coffee\x01\x02\x07\x08\x0b\x0c\x1b\x7f machine\t\r\nfridge",
    "invisible-unicode": "\u200bcoffee\u202emachine\ufeff \u5496\u5561",
}


def _lexemes(conn: sa.Connection, text: str) -> list[str]:
    return conn.execute(sa.text("SELECT tsvector_to_array(to_tsvector('simple', CAST(:t AS text)))"),
                        {"t": text}).scalar_one()


def _keyword_pool(conn, run_id, case_id) -> list[tuple]:
    return [tuple(r) for r in conn.execute(sa.text(
        "SELECT chunk_id::text, keyword_rank, keyword_score FROM retrieval_evaluation_candidates "
        "WHERE evaluation_run_id = :r AND case_id = :c AND keyword_rank IS NOT NULL ORDER BY keyword_rank"),
        {"r": run_id, "c": case_id})]


@pytest.mark.parametrize("version", ["keyword-v1", "bm25-v1", "hybrid-v1"])
def test_hostile_questions_are_searched_as_text(engine, chunks, tmp_path, version):
    """Each hostile question finds exactly what the plain words it contains find; the tables are intact."""
    cases = [{"case_id": key, "question": q, "k": 3, "relevant_chunk_ids": [chunks["coffee.md"]]}
             for key, q in HOSTILE.items()]
    hostile_name = f"'); DROP TABLE retrieval_evaluation_runs; -- {version}"  # names follow the name rule
    with pytest.raises(DatasetError, match="not a valid dataset name"):
        load_dataset(write_dataset(tmp_path / "hostile.json", KB, cases, name=hostile_name))
    name = f"hostile-{version}"
    dataset = load_dataset(write_dataset(tmp_path / "hostile.json", KB, cases, name=name))
    strategy = get_strategy(version)
    kb_before, eval_before = kb_counts(engine), table_counts(engine)
    outcome = evaluate_dataset(engine, dataset, strategy, batch_size=4)

    assert kb_counts(engine) == kb_before, "the knowledge base tables are untouched"
    eval_after = table_counts(engine)
    assert eval_after["retrieval_evaluation_runs"] == eval_before["retrieval_evaluation_runs"] + 1
    assert eval_after["retrieval_evaluation_case_results"] == eval_before["retrieval_evaluation_case_results"] + len(
        HOSTILE)
    assert eval_after["retrieval_evaluation_candidates"] == (
        eval_before["retrieval_evaluation_candidates"] + outcome.candidate_count)
    with engine.connect() as conn:
        run = run_records.get_run(conn, outcome.run_id)
        assert (run.status, run.dataset_name, run.case_count) == ("succeeded", name, len(HOSTILE))
        stored = dict(conn.execute(sa.text(
            "SELECT case_id, question FROM retrieval_evaluation_case_results WHERE evaluation_run_id = :r"),
            {"r": outcome.run_id}).all())
        assert stored == HOSTILE, "questions are stored verbatim"
        kb = resolve_knowledge_base(conn, KB)
        for key, question in HOSTILE.items():
            words = _lexemes(conn, question)
            plain = " ".join(words)
            assert _lexemes(conn, plain) == words
            (control,) = hybrid_search_batch(conn, knowledge_base_id=kb.id, queries=[plain], strategy=strategy,
                                             limits=[3])
            expected = sorted(((c.chunk_id, c.keyword_rank, c.keyword_score) for c in control.candidates
                               if c.keyword_rank is not None), key=lambda t: t[1])
            got = _keyword_pool(conn, outcome.run_id, key)
            assert [(c, r) for c, r, _ in got] == [(c, r) for c, r, _ in expected], key
            assert [s for *_, s in got] == pytest.approx([s for *_, s in expected]), key
        # had "coffee & !machine" been parsed as a tsquery, the coffee document would be excluded
        assert chunks["coffee.md"] in {c for c, *_ in _keyword_pool(conn, outcome.run_id, "tsquery-not")}
        assert not _keyword_pool(conn, outcome.run_id, "tsquery-only-operators"), "no word, no keyword hit"
    assert_no_partial_succeeded_runs(engine)


@pytest.mark.parametrize("version", ["keyword-v1", "bm25-v1"])
def test_nul_and_control_characters_reach_the_keyword_leg_as_spaces(engine, chunks, version):
    """Datasets refuse NUL (test_dataset.py); retrieval called directly treats it as a space."""
    strategy = get_strategy(version)
    with engine.connect() as conn, conn.begin():
        kb = resolve_knowledge_base(conn, KB)
        weird, plain = hybrid_search_batch(conn, knowledge_base_id=kb.id, strategy=strategy,
                                           queries=["coffee\x00machine\x00", "coffee machine"], limits=[3, 3])
        tables = conn.execute(sa.text("SELECT to_regclass('documents') IS NOT NULL")).scalar_one()
    assert [(c.chunk_id, c.keyword_score) for c in weird.candidates] == [
        (c.chunk_id, c.keyword_score) for c in plain.candidates]
    assert chunks["coffee.md"] in {c.chunk_id for c in weird.candidates} and tables


def test_hostile_names_on_the_command_line_are_one_line_errors(engine, chunks, tmp_path, capsys):
    from rag_pipeline.cli import main

    path = write_dataset(tmp_path / "d.json", None, [
        {"case_id": "a", "question": "coffee", "k": 1, "relevant_chunk_ids": [chunks["coffee.md"]]}])
    before = {**kb_counts(engine), **table_counts(engine)}
    hostile = "x'); DROP TABLE documents; --"
    for argv, message in (
        (["evaluate", "--dataset", str(path), "--knowledge-base", hostile, "--quiet"], "unknown knowledge base"),
        (["evaluate", "--dataset", str(path), "--knowledge-base", KB, "--strategy", hostile, "--quiet"],
         "unknown strategy version"),
        (["runs", "--knowledge-base", hostile], "unknown knowledge base"),
        (["show", hostile], "is not a run id"),
        (["kb", hostile], "unknown knowledge base"),
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("rag-pipeline: error: ") and message in err[0], err
    assert main(["runs", "--dataset", hostile, "--strategy", hostile]) == 0
    assert {**kb_counts(engine), **table_counts(engine)} == before


# --- no chunk text in candidate snapshots; reports only on request --------------------------------

def test_candidates_and_reports_hold_chunk_text_only_when_asked(engine, chunks, tmp_path, capsys):
    from rag_pipeline.cli import main

    fragments = [t[:24] for t in TINY_DOCS.values()]
    cases = [{"case_id": f"c{i}", "question": q, "k": 3, "relevant_chunk_ids": [chunks["backup.md"]]}
             for i, q in enumerate(["backup archiving", "coffee machine", "new hire first week"])]
    path = write_dataset(tmp_path / "ds.json", KB, cases, name="security-text")

    with engine.connect() as conn:
        columns = dict(conn.execute(sa.text(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = 'retrieval_evaluation_candidates'")).all())
    text_columns = {c for c, t in columns.items() if t in ("text", "character varying", "jsonb", "json")}
    assert text_columns == {"case_id", "document_name", "strategy_version"}, "no column can hold chunk text"

    plain, with_text = tmp_path / "plain.json", tmp_path / "with_text.json"
    assert main(["evaluate", "--dataset", str(path), "--output", str(plain), "--quiet"]) == 0
    run_id = json.loads(plain.read_text(encoding="utf-8"))["summary"]["run_id"]
    assert main(["show", run_id, "--include-text", "--output", str(with_text)]) == 0
    capsys.readouterr()
    with engine.connect() as conn:
        stored = conn.execute(sa.text(
            "SELECT coalesce(string_agg(row_to_json(c)::text, E'\\n'), '') FROM retrieval_evaluation_candidates c "
            "WHERE evaluation_run_id = :r"), {"r": run_id}).scalar_one()
        report = build_report(conn, run_id)
        overview = case_overview(conn, run_id) + case_overview(conn, run_id, worst_first=True)
        content = dict(conn.execute(sa.text("SELECT id::text, content FROM document_chunks WHERE id = ANY(:ids)"),
                                    {"ids": list(chunks.values())}).all())
    assert stored and run_rows(engine, run_id)[0] > 0
    plain_text = plain.read_text(encoding="utf-8")
    assert json.loads(plain_text) == report
    for blob in (stored, plain_text, json.dumps([c.model_dump() for c in overview], default=str)):
        assert not any(f in blob for f in fragments), "chunk text leaked into a snapshot/report/metadata"
    assert '"content"' not in plain_text

    shown = json.loads(with_text.read_text(encoding="utf-8"))
    candidates = [c for case in shown["cases"] for c in case["candidates"]]
    assert candidates and all(c["content"] == content[c["chunk_id"]] for c in candidates)
    assert main(["evaluate", "--dataset", str(path), "--output", str(with_text), "--include-text", "--quiet"]) == 0
    evaluated = json.loads(with_text.read_text(encoding="utf-8"))
    assert all(c["content"] == content[c["chunk_id"]] for case in evaluated["cases"] for c in case["candidates"])


def test_dagster_metadata_of_a_run_holds_no_chunk_text(engine, chunks, tmp_path, monkeypatch):
    folder = tmp_path / "datasets"
    write_dataset(folder / "security-md.json", KB, [
        {"case_id": "c1", "question": "coffee machine", "k": 3, "relevant_chunk_ids": [chunks["coffee.md"]]}])
    monkeypatch.setenv("RAG_DATASETS_DIR", str(folder))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("dataset", ["security-md"])
    result = dg.materialize([evaluation_dataset, evaluation_run], partition_key="security-md|hybrid-v1",
                            instance=instance, resources={"rag_db": RagDatabase()})
    assert result.success
    events = [e.event_log_entry for e in instance.get_records_for_run(result.run_id).records]
    blob = "\n".join(dg.serialize_value(e) for e in events)
    assert "coffee machine" in blob  # the question is shown (it is the user's own input) ...
    assert not any(t[:24] in blob for t in TINY_DOCS.values()), "... chunk text never is"


# --- the embedded server: unix socket only ---------------------------------------------------------

@pytest.mark.db  # reads the embedded server's own settings
def test_embedded_postgres_listens_on_its_unix_socket_only(tmp_path):
    own = bool(os.environ.get("RAG_DATABASE_URL"))  # tests on an external server: start an embedded one here
    pgdata = tmp_path / "pgdata" if own else pgdata_dir()
    try:
        uri = embedded_pg.start(pgdata)
        url = make_url(db.normalize_url(uri))
        socket_dir = url.query.get("host")
        assert url.host is None and url.port is None, "no TCP host or port in the URL"
        assert socket_dir and Path(socket_dir).is_absolute() and (Path(socket_dir) / ".s.PGSQL.5432").exists()
        engine = sa.create_engine(url, poolclass=NullPool)
        try:
            with engine.connect() as conn:
                assert conn.execute(sa.text("SHOW listen_addresses")).scalar_one() == ""
                assert conn.execute(sa.text("SELECT inet_server_addr()")).scalar_one() is None
                assert conn.execute(sa.text("SHOW unix_socket_directories")).scalar_one() == socket_dir
        finally:
            engine.dispose()
        mode = Path(socket_dir).stat().st_mode & 0o777
        assert mode & 0o007 == 0, f"socket directory {socket_dir} is open to other users ({oct(mode)})"
        if not own:
            assert make_url(db.database_url()).query.get("host") == socket_dir
    finally:
        if own:
            embedded_pg.stop(pgdata)


# --- passwords are masked everywhere ----------------------------------------------------------------

@pytest.mark.parametrize("url, secret", [
    ("postgresql://alice:s3cret@db.example:5432/rag", "s3cret"),
    ("postgres://alice:p%40ss%3Aw0rd@db.example/rag", "p%40ss"),
    ("postgresql+psycopg2://alice:p@ssw0rd@db.example/rag", "ssw0rd"),  # '@' not percent-encoded
    ("postgresql://alice:pa ss/w0rd@db.example/rag", "w0rd"),
    ("postgresql://alice@db.example/rag?sslmode=require&password=s3cret", "s3cret"),
])
def test_passwords_are_masked_in_urls_messages_and_the_cli(url, secret, monkeypatch, capsys):
    from rag_pipeline.cli import main

    assert secret not in mask_url(url) and "***" in mask_url(url)
    if " " not in url:  # in free text a URL ends at whitespace: a raw space in a password cannot be recognised
        assert secret not in mask_secrets(f"failed: {url}: boom")
    monkeypatch.setenv("RAG_DATABASE_URL", url)
    for argv in (["db", "status"], ["db", "url"], ["runs"], ["kb", "x"]):
        rc = main(argv)
        out = capsys.readouterr()
        assert secret not in out.out + out.err, argv
        assert "Traceback" not in out.err
        if rc:
            assert rc == 2 and len(out.err.strip().splitlines()) == 1, (argv, out.err)


def test_a_malformed_url_is_a_one_line_error_without_the_password(monkeypatch, capsys):
    from rag_pipeline.cli import main

    for url in ("postgresql://alice:s3cret@localhost:54x2/rag", "postgresql://alice:s3cret@[::1/rag",
                "mysql://alice:s3cret@localhost/rag"):
        monkeypatch.setenv("RAG_DATABASE_URL", url)
        for argv in (["kb", "x"], ["runs"]):
            assert main(argv) == 2, (url, argv)
            err = capsys.readouterr().err
            assert len(err.strip().splitlines()) == 1 and "s3cret" not in err and "alice:***@" in err, err


def test_a_stored_run_error_is_masked(engine, chunks, tmp_path):
    dataset = load_dataset(write_dataset(tmp_path / "d.json", KB, [
        {"case_id": "a", "question": "coffee", "k": 1, "relevant_chunk_ids": [chunks["coffee.md"]]}],
        name="security-error"))
    strategy = get_strategy("keyword-v1")
    with engine.begin() as conn:
        kb = resolve_knowledge_base(conn, KB)
        dataset_id = persistence.store_dataset(conn, dataset, KB)
    run_id = run_records.create_run(engine, dataset_id=dataset_id, knowledge_base_id=kb.id, strategy=strategy,
                             params_hash=strategy.params_hash())
    run_records.mark_failed(engine, run_id, "OperationalError: lost postgresql://alice:s3cret@db.example/rag mid-run")
    with engine.connect() as conn:
        row = run_records.get_run(conn, run_id)
    assert row.status == "failed" and "s3cret" not in row.error and "alice:***@db.example" in row.error


def test_dagster_failure_events_hold_no_password(engine, tmp_path, monkeypatch):
    """A user error whose text contains a URL: the step's failure (description, metadata, cause chain) as
    stored in the event log shows it masked."""
    folder = tmp_path / "datasets"
    write_dataset(folder / "security-leak.json", "postgresql://alice:s3cret@db.example/rag", [
        {"case_id": "a", "question": "q", "k": 1, "relevant_chunk_ids": [str(uuid.uuid4())]}])
    monkeypatch.setenv("RAG_DATASETS_DIR", str(folder))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("dataset", ["security-leak"])
    result = dg.materialize([evaluation_dataset, evaluation_run], partition_key="security-leak|keyword-v1",
                            instance=instance, resources={"rag_db": RagDatabase()}, raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert "alice:***@db.example" in failure.step_failure_data.user_failure_data.description
    blob = "\n".join(dg.serialize_value(r.event_log_entry) for r in instance.get_records_for_run(result.run_id).records)
    assert "s3cret" not in blob


def test_the_dagster_resource_and_dagster_yaml_hold_no_secret():
    from rag_pipeline.definitions import defs

    config = yaml.safe_load((ROOT / "dagster.yaml").read_text(encoding="utf-8"))
    # the storage is dagster-postgres's, named as `custom` so that its URL is checked first (defs/preflight.py)
    assert config["storage"]["custom"]["config"]["postgres_url"] == {"env": "RAG_DAGSTER_PG_URL"}

    def scalars(node, path=()):
        if isinstance(node, dict):
            if set(node) == {"env"}:
                return
            for k, v in node.items():
                yield from scalars(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from scalars(v, (*path, i))
        else:
            yield path, node

    for path, value in scalars(config):
        assert not re.search(r"password|secret|token|_url$|^url$", str(path[-1]), re.IGNORECASE), path
        assert "://" not in str(value) and "@" not in str(value), path
    resource = defs.resources["rag_db"]
    assert isinstance(resource, RagDatabase), resource
    assert resource.url is None or isinstance(resource.url, dg.EnvVar), "the URL comes from the environment"
    url = f"postgresql://alice:s3cret@127.0.0.1:{closed_tcp_port()}/rag"
    with pytest.raises(db.DatabaseError) as info:
        RagDatabase(url=url).engine()
    assert "s3cret" not in str(info.value) and "alice:***@127.0.0.1" in str(info.value)


# --- all SQL is parameterised: a static check --------------------------------------------------------

# Every value spliced into SQL text in rag_pipeline/: (file, function, expression) → why it is safe.
# Anything else spliced into a string that looks like SQL fails the test: use a bind parameter.
# The splices of the stages' query modules (storage/queries.py, knowledge_base/queries/, retrieval/sql.py,
# bm25_sql.py, evaluation/queries/).
_CONSTANT = "constant SQL fragment"
_ATTACHED_IDENTIFIERS = "a quoted identifier of the validated mapping, or a constant fragment"
VETTED_QUERY_MODULE_SPLICES = {
    **{("storage/queries.py", func, expr): why for func, expr, why in (
        ("create_database_if_missing", "name",
         "checked against [a-z_][a-z0-9_]* by the caller (engine._create_database_if_missing); "
                                    "called with the constants rag/dagster"),
        ("create_vector_index", "_index(index)", "_index: [a-z0-9_]+ only (hnsw_index_name: hex of a UUID, of an md5)"),
        ("create_vector_index", "int(dimension)", "an int (a type modifier cannot be a parameter)"),
        ("create_vector_index", "model_literal(model)", "validated [A-Za-z0-9._/-]+ model name "
                                                        "(an index predicate cannot be a parameter)"),
        ("create_vector_index", "uuid.UUID(str(knowledge_base_id))", "a UUID (hex digits and hyphens)"),
        ("reindex", "'CONCURRENTLY ' if concurrently else ''", "one of two literals"),
        ("reindex", "_index(index)", "_index: [a-z0-9_]+ only"),
        ("import_snapshot", "snapshot_id", "pg_export_snapshot()'s id, checked against "
                                           "[0-9A-F]+-[0-9A-F]+(-[0-9]+)? just above"))},
    **{("knowledge_base/queries/chunks.py", "<module>", expr): _CONSTANT
       for expr in ("_COLUMNS", "_SEARCHABLE", "_ORDER", "SEARCHABLE_DOCUMENT_SQL", "_FROM", "_IN_SCOPE")},
    **{("knowledge_base/queries/documents.py", "<module>", "SEARCHABLE_DOCUMENT_SQL"): _CONSTANT + " (enum values)",
       ("knowledge_base/queries/documents.py", "set_document_state", "sets"): "'column = :column' of the constant "
                                                                           "_DOCUMENT_STATE_COLUMNS"},
    **{("knowledge_base/queries/term_stats.py", func, expr): why for func, expr, why in (
        ("<module>", "SEARCHABLE_DOCUMENT_SQL", _CONSTANT + " (enum values)"),
        ("<module>", "_SEARCHABLE_CHUNKS", _CONSTANT),
        ("<module>", "_N_AND_AVGDL", "constant SQL statement"),
        ("<module>", "_DELTA", "the constant name of a temporary table"),
        ("start_delta", "_DELTA", "the constant name of a temporary table"),
        ("apply_delta", "_DELTA", "the constant name of a temporary table"))},
    **{("retrieval/sql.py", func, expr): why for func, expr, why in (
        ("<module>", "_TSQUERY", _CONSTANT), ("<module>", "_TS_RANK_CD_MATCHES", _CONSTANT),
        ("<module>", "BASE_FILTERS", _CONSTANT), ("searchable_vectors", "BASE_FILTERS", _CONSTANT),
        ("searchable_vector_chunks", "BASE_FILTERS", _CONSTANT),
        ("vector_leg_sql", "dim=int(dimension)", "an int from embedding_models (must match the HNSW index expression)"),
        ("vector_leg_sql", "filters=BASE_FILTERS", _CONSTANT),
        ("vector_walk_sql", "dim=int(dimension)", "an int from embedding_models (must match the HNSW index "
                                                  "expression)"),
        ("stored_vector_scores", "dim=int(dimension)", "an int from embedding_models (a type modifier cannot be a "
                                                       "parameter)"))},
    **{("retrieval/bm25_sql.py", "<module>", expr): why for expr, why in (
        ("_QUERY_TERMS", "constant SQL fragment (the query-terms CTE)"),
        ("_KB_STATS", "constant SQL fragment (the N / avgdl CTE)"),
        ("BASE_FILTERS", _CONSTANT), ("_LEXEMES", "constant SQL (textsearch.QUERY_LEXEMES_SQL)"),
        ('extra=""', "literal select-list suffix"), ('where="leg_rank <= :k"', "literal filter"),
        ('extra=", leg_rank"', "literal select-list suffix"),
        ('where="leg_rank <= :k OR chunk_id = ANY(CAST((CAST(:targets AS text[]))[CAST(ord AS int)] AS uuid[]))"',
         "literal filter (targets are a bind parameter)"))},
    ("evaluation/diagnosis/queries.py", "<module>", "_TSQUERY"): "constant SQL (textsearch.OR_TSQUERY_SQL)",
    ("evaluation/diagnosis/queries.py", "<module>", "_TARGETS"): "constant SQL fragment (targets unnest)",
    ("evaluation/diagnosis/queries.py", "<module>", "retrieval_sql.BASE_FILTERS"): "constant SQL fragment",
    ("evaluation/diagnosis/queries.py", "keyword_rank_sql", "leg"): "constant SQL: one of the two leg statements",
    ("evaluation/diagnosis/queries.py", "keyword_rank_sql", "_TARGETS"): "constant SQL fragment (targets unnest)",
    ("evaluation/runs/queries.py", "prunable_runs", "EFFECTIVE_STATUS"): "constant SQL fragment (run status)",
    **{("evaluation/runs/queries.py", func, expr): "constant column names" for func, expr in (
        ("finished_outside_dagster", "', '.join('r.' + m for m in METRIC_NAMES)"),
        ("succeeded_runs", "', '.join('r.' + m for m in METRIC_NAMES)"),
        ("<module>", "', '.join('r.' + m for m in METRIC_NAMES)"))},
    ("evaluation/runs/case_queries.py", "metrics_of_runs", "', '.join(METRIC_NAMES)"): "constant column names",
    ("evaluation/runs/case_queries.py", "copy_into", "table"): "the constant table names of copy_candidates / "
                                                           "candidate_copy / copy_case_results",
    ("evaluation/runs/case_queries.py", "copy_into", "binary"): "a constant: empty or ' WITH (FORMAT BINARY)'",
    ("evaluation/runs/case_queries.py", "copy_binary", "table"): "the constant table name of candidate_copy",
    ("evaluation/runs/case_queries.py", "copy_binary", "', '.join(columns)"): "the constant CANDIDATE_COLUMNS",
    ("evaluation/runs/case_queries.py", "copy_into", "', '.join(columns)"): "the constant column tuples of "
                                                                           "persistence",
    ("evaluation/runs/case_queries.py", "report_page", "_REPORT_COLUMNS"): "constant column names",
    ("evaluation/runs/case_queries.py", "<module>", "m"): "a name of METRIC_NAMES (SCORED_METRICS)",
    ("evaluation/runs/case_queries.py", "case_rows", "SCORED_METRICS"): "constant CASE expressions over METRIC_NAMES",
    ("evaluation/runs/case_queries.py", "report_page", "one_case"): "a constant fragment with a bind parameter",
    ("evaluation/runs/case_queries.py", "overview", "', '.join('r.' + m for m in METRIC_NAMES)"):
        "constant column names",
    ("evaluation/runs/case_queries.py", "overview", "order"): "one of two literal ORDER BY lists",
    ("evaluation/runs/candidate_queries.py", "report_candidates", 'text=_TEXT if include_text else ""'):
        "one of two literals (_TEXT a constant select-list suffix)",
    ("evaluation/runs/candidate_queries.py", "report_candidates", 'join=" LEFT JOIN document_chunks ch ON ch.id = '
                                                             'c.chunk_id" if include_text else ""'):
        "one of two literals",
    ("evaluation/runs/candidate_queries.py", "report_candidates", 'mode=_MODE_FILTERS.get(mode, "")'):
        "one of the literal filters of _MODE_FILTERS",
    **{("evaluation/runs/candidate_queries.py", func, expr): _CONSTANT for func, expr in (
        ("report_candidates", "name=_NAME"), ("report_candidates", "external=_EXTERNAL"),
        ("top_candidates", "_NAME"), ("top_candidates", "_EXTERNAL"))},
    **{("evaluation/queries/trec.py", func, expr): why for func, expr, why in (
        *((func, "STAGING", "the constant name of a temporary table") for func in (
            "create_staging", "copy_staging", "first_duplicate", "store_candidates", "remember_staged_ids")),
        ("copy_staging", "', '.join(STAGING_COLUMNS)", "constant column names"),
        ("create_staging", "SORT_MEMORY", "a constant work_mem value (SET takes no parameters)"))},
    **{("knowledge_base/queries/catalogue.py", func, expr): why for func, expr, why in (
        *((func, "STAGING", "the constant name of a temporary table") for func in (
            "create_staging", "copy_staging", "first_duplicate", "replace_from_staging", "<module>")),
        ("copy_staging", "', '.join(STAGING_COLUMNS)", "constant column names"),
        ("replace_from_staging", "_NOT_STAGED", _CONSTANT),
        ("by_chunk_ids", "_COLUMNS", "constant column names"), ("listed", "_COLUMNS", "constant column names"))},
    ("evaluation/runs/queries.py", "<module>", "EFFECTIVE_STATUS"): "constant SQL fragment",
    ("evaluation/runs/queries.py", "sweep_abandoned", "EFFECTIVE_STATUS"): "constant SQL fragment",
    ("evaluation/runs/queries.py", "mark_succeeded", "sets"): "built from METRIC_NAMES",
    **{("evaluation/runs/queries.py", func, expr): "constant SQL fragment" for func, expr in (
        ("run_row", "RUN_COLUMNS"), ("run_row", "RUN_FROM"), ("list_runs", "RUN_COLUMNS"), ("list_runs", "RUN_FROM"),
        ("count_runs", "RUN_FROM"))},
    **{("answers/runs/queries.py", func, expr): _CONSTANT for func, expr in (
        ("<module>", "SEARCHABLE_DOCUMENT_SQL"), ("run_row", "_RUN_SELECT"), ("list_runs", "_RUN_FILTER"))},
    ("evaluation/runs/queries.py", "list_runs", "where"): "_run_filter's literal 'column = :param' predicates",
    ("evaluation/runs/queries.py", "count_runs", "where"): "_run_filter's literal 'column = :param' predicates",
    # an attached knowledge base: identifiers of the validated mapping, quoted by quote()/quote_table() (the
    # dialect's identifier preparer); the filter values and the knowledge-base value are bind parameters
    **{(file, func, expr): _ATTACHED_IDENTIFIERS for file, func, exprs in (
        ("knowledge_base/queries/attached.py", "chunk_id", "self.col(self.mapping.chunk_id)"),
        ("knowledge_base/queries/attached.py", "document_id", "self.col(self.mapping.document_id)"),
        ("knowledge_base/queries/attached.py", "document_name", "quote(m.document_name)"),
        ("knowledge_base/queries/attached.py", "scope", "self.col(m.knowledge_base_column)"),
        ("knowledge_base/queries/attached.py", "searchable", "column i"),
        ("knowledge_base/queries/attached.py", "tsvector", "self.col(m.text)"),
        ("knowledge_base/queries/attached.py", "source",
         "quote(m.document_id) quote(m.documents_key) quote_table(m.chunks_table) quote_table(m.documents_table)"),
        ("knowledge_base/queries/attached.py", "count_chunks", "names.scope names.searchable names.source"),
        ("knowledge_base/queries/attached.py", "content", "names.col(m.chunk_id) names.col(m.embedding) "
         "names.col(m.text) names.col(m.tsvector) names.scope names.searchable names.source row_text"),
        ("knowledge_base/queries/attached.py", "chunks_by_id", "names.chunk_id names.col(m.text) names.document_id "
         "names.document_name names.scope names.searchable names.source"),
        ("knowledge_base/queries/attached.py", "list_chunks", "names.chunk_id names.col(m.chunk_id) names.col(m.text) "
         "names.document_id names.document_name names.scope names.searchable names.source"),
        ("retrieval/attached_sql.py", "_keyword_leg", "_TSQUERY _keyword_matches(n)"),
        ("retrieval/attached_sql.py", "_keyword_targets_leg", "_TSQUERY _keyword_matches(n)"),
        ("retrieval/attached_sql.py", "_keyword_matches", "n.chunk_id n.col(n.mapping.chunk_id) n.document_id "
         "n.document_name n.scope n.searchable n.source n.tsvector"),
        ("retrieval/attached_sql.py", "_vector_leg", "emb n.chunk_id n.document_id n.document_name n.scope "
         "n.searchable n.source"),
    ) for expr in exprs.split()},
    ("answers/runs/queries.py", "copy_cases", "', '.join(CASE_COLUMNS)"): "the constant column tuple CASE_COLUMNS",
    **{("storage/queries.py", func, "_MODEL_COLUMNS"): "constant column names"
       for func in ("embedding_model_row", "embedding_model_rows")},
}
VETTED_SQL_SPLICES = {
    **VETTED_QUERY_MODULE_SPLICES,
    ("storage/embedded_server.py", "_apply_settings", "name"): "a key of tuned_settings() (constant setting names)",
    ("storage/embedded_server.py", "_apply_settings", "value"): "checked against \\d+(kB|MB|GB) just above "
                                                         "(ALTER SYSTEM takes no parameters)",
    **{("storage/migrations/versions/0005_runs_at_scale.py", func, expr): why for func, expr, why in (
        ("_per_model_vector_indexes", "name", "an index name read from pg_indexes, quoted"),
        ("_per_model_vector_indexes", "_model_index(model)", "[a-z0-9_]"),
        ("_per_model_vector_indexes", "int(dim)", "an int"),
        ("_per_model_vector_indexes", "_literal(model)", "validated [A-Za-z0-9._/-]+"),
        ("_per_kb_vector_indexes", "_kb_index(model, kb)", "[a-z0-9_]"),
        ("_per_kb_vector_indexes", "_model_index(model)", "[a-z0-9_]"),
        ("_per_kb_vector_indexes", "int(dim)", "an int"),
        ("_per_kb_vector_indexes", "_literal(model)", "validated [A-Za-z0-9._/-]+"),
        ("_per_kb_vector_indexes", "uuid.UUID(str(kb))", "a UUID"))},
}
_SQL_WORDS = re.compile(r"\b(SELECT|INSERT INTO|UPDATE|DELETE FROM|CREATE|DROP|ALTER|REINDEX|COPY|WHERE|FROM|JOIN|"
                        r"ORDER BY|GROUP BY|LIMIT|VALUES|SET|AS)\b")


def _sql_splices(path: Path, rel: str) -> list[tuple[str, str, str, int]]:
    """(file, enclosing function, spliced expression, line) of every SQL-looking string built at run time."""
    source = path.read_text(encoding="utf-8")
    tree = parse_source(source, str(path))
    scoped: list[tuple[ast.AST, str]] = [(tree, "<module>")]  # (node, its enclosing function), one walk

    def nodes():
        while scoped:
            node, scope = scoped.pop()
            yield node, scope
            inner = node.name if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else scope
            scoped.extend((child, inner) for child in ast.iter_child_nodes(node))

    def text(node) -> str:
        return ast.get_source_segment(source, node) or ast.dump(node)

    found = []
    for node, scope in nodes():
        literal, spliced = "", []
        if isinstance(node, ast.JoinedStr):
            literal = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
            spliced = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
            base = node.func.value
            if isinstance(base, ast.Constant) and isinstance(base.value, str):
                literal = base.value
            elif isinstance(base, ast.Name | ast.Attribute | ast.IfExp):  # a named template: assume SQL, check all
                literal = "SELECT"
            spliced = [*node.args, *node.keywords]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod | ast.Add):
            parts = [node.left, node.right]
            literal = " ".join(p.value for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str))
            spliced = [p for p in parts if not isinstance(p, ast.Constant | ast.JoinedStr | ast.BinOp)]
        if spliced and _SQL_WORDS.search(literal):  # the source text only then: get_source_segment splits the file
            found.extend((rel, scope, f"{e.arg}={text(e.value)}" if isinstance(e, ast.keyword) else text(e),
                          node.lineno) for e in spliced)
    return found


def test_sql_is_parameterised_except_for_vetted_identifiers():
    package = ROOT / "rag_pipeline"
    splices = [s for path in sorted(package.rglob("*.py"))
               for s in _sql_splices(path, path.relative_to(package).as_posix())]
    assert len(splices) >= 10, "the scanner finds the known splices"
    unvetted = [f"{file}:{line} in {func}(): {expr}" for file, func, expr, line in splices
                if (file, func, expr) not in VETTED_SQL_SPLICES]
    assert not unvetted, "SQL built from runtime values; use bind parameters or vet here:\n" + "\n".join(unvetted)
    found = {(file, func, expr) for file, func, expr, _ in splices}
    stale = [key for key in VETTED_QUERY_MODULE_SPLICES if key not in found]
    assert not stale, f"vetted splices that no longer exist (the vetting must follow the statements): {stale}"


def test_the_vetted_identifier_checks_refuse_hostile_values(engine):
    assert re.fullmatch(r"ix_emb_hnsw_[0-9a-f]{32}_[0-9a-f]{8}",
                        db.hnsw_index_name("x'); DROP TABLE documents; --", uuid.uuid4()))
    with pytest.raises(ValueError):
        db.hnsw_index_name("m", "'); DROP TABLE documents; --")
    for kb in (None, uuid.uuid4()):
        with pytest.raises(db.DatabaseError, match="invalid embedding model name"), engine.begin() as conn:
            db.ensure_embedding_model(conn, "m'); DROP TABLE documents; --", 8, "test", kb)
    with pytest.raises(db.DatabaseError, match="invalid embedding model name"), engine.begin() as conn:
        db.build_vector_index(conn, "m'); DROP TABLE documents; --", 8, uuid.uuid4())
    with pytest.raises(db.DatabaseError, match="invalid database name"):
        db._create_database_if_missing(db.database_url(), 'rag"; DROP DATABASE rag; --')
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM embedding_models WHERE name LIKE 'm''%'")).scalar_one() == 0
