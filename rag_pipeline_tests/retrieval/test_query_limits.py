"""Hostile questions: the keyword leg uses at most ``MAX_QUERY_TERMS`` distinct lexemes (the first ones in
question order, the same for ts_rank_cd and BM25), and every retrieval statement runs under
``RAG_STATEMENT_TIMEOUT_S`` with a clear error naming the case."""

from __future__ import annotations

import contextlib
import random
import re
import time
from types import SimpleNamespace

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from rag_pipeline.cli import main
from rag_pipeline.evaluation import evaluate as runner
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.knowledge_base import textsearch
from rag_pipeline.knowledge_base.embedding import get_embedder
from rag_pipeline.retrieval.bm25_sql import BM25_LEG_SQL
from rag_pipeline.retrieval.search import StatementTimeout, is_statement_timeout, walk_ahead
from rag_pipeline.retrieval.sql import TS_RANK_CD_LEG_SQL
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline_tests.eval_helpers import (
    hybrid_search_with_trace,
    ingest_tiny_kb,
    run_rows,
    tiny_cases,
    write_dataset,
)

KB = "query-limits-tiny"
KEYWORD_STRATEGIES = ("keyword-v1", "bm25-v1")  # ts_rank_cd and BM25


@pytest.fixture(scope="module")
def kb(engine, tmp_path_factory):
    chunks = ingest_tiny_kb(engine, KB, tmp_path_factory.mktemp("query_limits_kb"))
    with engine.connect() as conn:
        kb_id = conn.execute(sa.text("SELECT id FROM knowledge_bases WHERE name = :n"), {"n": KB}).scalar_one()
    return kb_id, chunks


def _hostile_question(n_chars: int = 10_000, seed: int = 7) -> tuple[str, list[str]]:
    """~10,000 characters of distinct random words; the first 64 start with two words of the KB's documents,
    and ``coffee`` (a document word too) comes right after them. Returns (question, its first 64 words)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: list[str] = ["basebackup", "archiving"]
    seen = set(words)
    while sum(len(w) + 1 for w in words) < n_chars:
        word = "".join(rng.choice(letters) for _ in range(rng.randint(5, 9)))
        if word not in seen and word not in ("coffee",):
            seen.add(word)
            words.append(word)
        if len(words) == textsearch.MAX_QUERY_TERMS:
            words.append("coffee")
            seen.add("coffee")
    return " ".join(words), words[:textsearch.MAX_QUERY_TERMS]


def _lexemes_used(conn, question: str) -> list[str]:
    sql = f"SELECT lexeme FROM {textsearch.QUERY_LEXEMES_SQL} AS ql ORDER BY ql.i"
    return conn.execute(sa.text(sql), {"cfg": "simple", "qtext": question}).scalars().all()


def test_both_keyword_legs_share_the_bounded_term_list() -> None:
    assert textsearch.MAX_QUERY_TERMS == 64
    assert f"LIMIT {textsearch.MAX_QUERY_TERMS}\n)" in textsearch.QUERY_LEXEMES_SQL
    body = textsearch.QUERY_LEXEMES_SQL.removeprefix("(")  # the subquery as written out in each leg
    assert body in textsearch.OR_TSQUERY_SQL
    lateral = body.replace(":qtext", "q.query_text")
    assert lateral in BM25_LEG_SQL and lateral in TS_RANK_CD_LEG_SQL


def test_a_hostile_question_uses_at_most_64_lexemes_in_question_order(engine) -> None:
    question, first = _hostile_question()
    assert len(question) >= 10_000 and len(question.split()) > 1000
    with engine.connect() as conn:
        used = _lexemes_used(conn, question)
        tsquery = conn.execute(sa.text(f"SELECT CAST({textsearch.OR_TSQUERY_SQL} AS text)"),
                               {"cfg": "simple", "qtext": question}).scalar_one()
        all_lexemes = conn.execute(sa.text("SELECT cardinality(tsvector_to_array(to_tsvector('simple', :q)))"),
                                   {"q": question}).scalar_one()
    assert all_lexemes > 1000
    assert len(used) == 64 and sorted(used) == sorted(first), "the first 64 distinct words of the question"
    assert "coffee" not in used
    assert len(re.findall(r"'[^']*'", tsquery)) == 64 and "'coffee'" not in tsquery


def test_a_short_question_keeps_every_lexeme_in_the_same_order(engine) -> None:
    """Below the cap the tsquery is exactly the one of all the question's lexemes (same pools as before)."""
    question = "Why keep all services in one repository? services & | ! ( ) : * <-> 'quoted' back\\slash"
    with engine.connect() as conn:
        ours = conn.execute(sa.text(f"SELECT CAST({textsearch.OR_TSQUERY_SQL} AS text)"),
                            {"cfg": "simple", "qtext": question}).scalar_one()
        unbounded = conn.execute(sa.text(
            "SELECT CAST(CAST(string_agg('''' || replace(replace(lex, '\\', '\\\\'), '''', '''''') || '''', ' | ')"
            " AS tsquery) AS text) FROM unnest(tsvector_to_array(to_tsvector('simple', :q))) AS lex"),
            {"q": question}).scalar_one()
    assert ours == unbounded


@pytest.mark.parametrize("version", KEYWORD_STRATEGIES)
def test_a_hostile_question_searches_like_its_first_64_words(engine, kb, version) -> None:
    """Same pool, same scores, as the question made of its first 64 words only: ``coffee`` (the 65th word)
    is not searched; a normal question's cost bounds the hostile one's (reported, not asserted)."""
    kb_id, chunks = kb
    question, first = _hostile_question()
    strategy = get_strategy(version)
    with engine.connect() as conn:
        t = time.perf_counter()
        hostile = hybrid_search_with_trace(conn, knowledge_base_id=kb_id, query=question, strategy=strategy)
        t_hostile = time.perf_counter() - t
        t = time.perf_counter()
        short = hybrid_search_with_trace(conn, knowledge_base_id=kb_id, query=" ".join(first), strategy=strategy)
        t_short = time.perf_counter() - t
    assert hostile.candidates == short.candidates
    assert [c.chunk_id for c in hostile.candidates] == [chunks["backup.md"]]
    print(f"{version}: hostile {t_hostile * 1000:.1f} ms, its first 64 words {t_short * 1000:.1f} ms")


@contextlib.contextmanager
def _locked(engine, table: str):
    """Another session holds ACCESS EXCLUSIVE on ``table``: a statement reading it waits until its statement
    timeout, deterministically, however fast the machine."""
    other = sa.create_engine(engine.url, poolclass=NullPool)
    try:
        with other.connect() as conn, conn.begin():
            conn.execute(sa.text("SET LOCAL lock_timeout = '30s'"))
            conn.execute(sa.text(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))  # a constant of this module
            yield
    finally:
        other.dispose()


@pytest.fixture
def chunk_terms_locked(engine, kb):
    """``chunk_terms`` locked (read by the BM25 leg only)."""
    with _locked(engine, "chunk_terms"):
        yield


def test_a_statement_over_the_timeout_is_a_clear_retrieval_error(engine, kb, monkeypatch, chunk_terms_locked):
    kb_id, _ = kb
    monkeypatch.setenv("RAG_STATEMENT_TIMEOUT_S", "0.001")
    with engine.connect() as conn, pytest.raises(StatementTimeout) as exc:
        hybrid_search_with_trace(conn, knowledge_base_id=kb_id, query="basebackup", strategy=get_strategy("bm25-v1"))
    assert str(exc.value).startswith("retrieval took longer than 0.001 s (RAG_STATEMENT_TIMEOUT_S)")


@pytest.fixture
def chunk_embeddings_locked(engine, kb):
    """``chunk_embeddings`` locked (read by every vector leg)."""
    with _locked(engine, "chunk_embeddings"):
        yield


@pytest.mark.parametrize(("version", "whole_scan"), [("vector-exact-v1", True), ("vector-v1", False)])
def test_a_vector_leg_over_the_timeout_says_whether_it_was_the_exact_scan(engine, kb, monkeypatch,
                                                                          chunk_embeddings_locked, version,
                                                                          whole_scan):
    kb_id, _ = kb
    monkeypatch.setenv("RAG_STATEMENT_TIMEOUT_S", "0.001")
    with engine.connect() as conn, pytest.raises(StatementTimeout) as exc:
        hybrid_search_with_trace(conn, knowledge_base_id=kb_id, query="basebackup", strategy=get_strategy(version))
    assert exc.value.whole_scan is whole_scan
    if whole_scan:  # the SQL exact leg reads every vector for each question: the question is not the cause
        assert str(exc.value).startswith("the exact vector leg's SQL statement for 1 question(s) took longer than "
                                         "0.001 s (RAG_STATEMENT_TIMEOUT_S)")
        assert "RAG_MEMORY_LEGS_MB" in str(exc.value) and "shorten the question" not in str(exc.value)
    else:
        assert str(exc.value).startswith("retrieval took longer than 0.001 s (RAG_STATEMENT_TIMEOUT_S)")


def test_the_walk_on_the_driver_s_cursor_times_out_as_every_statement_does(engine, kb, monkeypatch,
                                                                          chunk_embeddings_locked):
    """The HNSW walk runs on the driver's own cursor (``retrieval_sql.vector_walk``); its timeout comes out as
    SQLAlchemy's, which the evaluation turns into the message naming the case."""
    kb_id, _ = kb
    monkeypatch.setenv("RAG_STATEMENT_TIMEOUT_S", "0.001")
    strategy = get_strategy("hybrid-bm25-v1")
    vectors = get_embedder(strategy.embedding_model).embed(["basebackup"])
    with engine.begin() as conn, pytest.raises(sa.exc.OperationalError) as exc:
        walk_ahead(conn, kb_id, strategy, vectors)
    assert is_statement_timeout(exc.value)


def test_an_evaluation_over_the_timeout_fails_naming_the_case(engine, kb, tmp_path, monkeypatch, capsys,
                                                               chunk_terms_locked):
    _, chunks = kb
    name = "query-limits-timeout"
    path = write_dataset(tmp_path / "ds.json", KB, tiny_cases(chunks)[:1], name=name)
    monkeypatch.setenv("RAG_STATEMENT_TIMEOUT_S", "0.001")
    # The run's in-memory BM25 index reads chunk_terms once before any case; without it (load -> None) the BM25
    # SQL leg reads chunk_terms per batch, so the lock makes that case's statement time out, whatever the machine.
    monkeypatch.setattr(runner.Bm25Index, "load", classmethod(lambda cls, *args, **kwargs: None))
    capsys.readouterr()
    assert main(["evaluate", "--dataset", str(path), "--strategy", "bm25-v1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("rag-pipeline: error: case backup-001: retrieval took longer than 0.001 s "
                           "(RAG_STATEMENT_TIMEOUT_S); shorten the question or raise RAG_STATEMENT_TIMEOUT_S"), err
    with engine.connect() as conn:
        run = run_records.list_runs(conn, dataset=name)[0]
    assert run.status == "failed"
    assert run.error.startswith("RetrievalError: case backup-001: retrieval took longer than 0.001 s")
    assert run_rows(engine, run.id) == (0, 0)


def test_a_timeout_names_the_longest_question_or_for_a_whole_scan_the_batch():
    batch = [SimpleNamespace(case_id=f"c{i}", question="q" * n) for i, n in enumerate((3, 9, 5))]
    assert runner._cases_label(batch) == "case c1 (the longest question of the batch of 3 cases c0 … c2)"
    assert runner._cases_label(batch, culprit=False) == "the batch of 3 cases c0 … c2"
    assert runner._cases_label(batch[:1]) == runner._cases_label(batch[:1], culprit=False) == "case c0"
