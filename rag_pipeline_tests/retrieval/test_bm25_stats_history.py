"""BM25 statistics are those of the searchable chunks, whatever the history of the knowledge base.

Folder A, then folder B (one document deleted, two edited, one added) into KB X, against B ingested fresh into
KB Y: the same N, avgdl, df of every lexeme and BM25 score of every candidate. Chunk ids contain the KB name,
so chunks are compared by (document name, ordinal). Then lifecycle changes in X (unpublish, delete, not READY)
against a fresh KB without that document, and their reversal against Y.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import sqlalchemy as sa

from rag_pipeline.knowledge_base import chunking, term_stats
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.lifecycle import set_document_state
from rag_pipeline.knowledge_base.sources import SourceDocument
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline_tests.eval_helpers import hybrid_search_with_trace

WORDS = ("cell protein gene expression cancer tumour immune response virus infection vaccine dose trial "
         "patient mouse model brain neuron signal pathway receptor binding drug therapy risk heart blood "
         "pressure diabetes insulin glucose liver kidney lung bone muscle age sex diet exercise sleep").split()
QUESTIONS = ["protein binding receptor", "cancer therapy risk", "vaccine trial dose in patients",
             "blood pressure and heart risk", "glucose insulin diabetes liver", "sleep and exercise"]
CHUNKING = {"text_search": "english", "chunk_size": 200, "chunk_overlap": 40, "models": []}


def _text(rng: np.random.Generator, sentences: int) -> str:
    weights = rng.dirichlet(np.full(len(WORDS), 0.3))
    return " ".join(" ".join(rng.choice(WORDS, size=int(rng.integers(6, 16)), p=weights)).capitalize() + "."
                    for _ in range(sentences))


def _folders() -> tuple[dict[str, str], dict[str, str]]:
    rng = np.random.default_rng(19)
    a = {f"doc-{i}.md": _text(rng, int(rng.integers(4, 12))) for i in range(6)}
    b = dict(a)
    del b["doc-1.md"]                                                   # deleted
    b["doc-2.md"] = a["doc-2.md"] + " " + _text(rng, 3)                 # edited: appended (first chunks kept)
    sentences = a["doc-3.md"].split(". ")
    b["doc-3.md"] = ". ".join(sentences[:2] + ["Liver kidney lung bone muscle"] + sentences[2:])  # edited: middle
    b["doc-6.md"] = _text(rng, 7)                                       # added
    return a, b


def _ingest(engine, name: str, folder: dict[str, str]) -> None:
    ingest_documents(engine, [SourceDocument(n, None, t) for n, t in sorted(folder.items())], name, **CHUNKING)


def _stats(engine, name: str) -> tuple[int, float, dict[str, int]]:
    kb_id = chunking.knowledge_base_id(name)
    with engine.connect() as conn:
        n, avgdl = conn.execute(sa.text("SELECT chunk_count, avg_chunk_length FROM knowledge_bases WHERE id = :kb"),
                                {"kb": kb_id}).one()
        df = dict(conn.execute(sa.text("SELECT lexeme, doc_freq FROM knowledge_base_term_stats "
                                       "WHERE knowledge_base_id = :kb"), {"kb": kb_id}).all())
    return n, avgdl, df


def _searchable_truth(engine, name: str) -> tuple[int, float, dict[str, int]]:
    """The statistics computed independently, in Python, from the tsvectors of the searchable chunks."""
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT c.id, t.lexeme, coalesce(array_length(t.positions, 1), 1) AS tf "
            "FROM document_chunks c JOIN documents d ON d.id = c.document_id, unnest(c.content_tsvector) t "
            "WHERE c.knowledge_base_id = :kb AND c.is_current AND d.status = 'READY' "
            "AND d.publication_status = 'PUBLISHED' AND NOT d.is_deleted"), {"kb": chunking.knowledge_base_id(name)})
    lengths: dict = {}
    df: dict[str, int] = {}
    for chunk_id, lexeme, tf in rows:
        lengths[chunk_id] = lengths.get(chunk_id, 0) + tf
        df[lexeme] = df.get(lexeme, 0) + 1
    return len(lengths), (sum(lengths.values()) / len(lengths) if lengths else 0.0), df


def _scores(engine, name: str) -> dict[tuple[str, int, int], float]:
    """BM25 score of every candidate of every question, by (question, document name, chunk ordinal)."""
    kb_id = chunking.knowledge_base_id(name)
    strategy = get_strategy("bm25-v1")
    scores = {}
    with engine.connect() as conn:
        ordinal = dict(conn.execute(sa.text(
            "SELECT id::text, ordinal FROM document_chunks WHERE knowledge_base_id = :kb"), {"kb": kb_id}).all())
        for i, question in enumerate(QUESTIONS):
            trace = hybrid_search_with_trace(conn, knowledge_base_id=kb_id, query=question, strategy=strategy)
            for c in trace.candidates:
                scores[(i, c.document_name, ordinal[str(c.chunk_id)])] = c.keyword_score
    return scores


def _assert_same(engine, history: str, fresh: str) -> None:
    n_h, avgdl_h, df_h = _stats(engine, history)
    n_f, avgdl_f, df_f = _stats(engine, fresh)
    assert (n_h, df_h) == (n_f, df_f)
    assert avgdl_h == pytest.approx(avgdl_f, abs=1e-9)
    truth_n, truth_avgdl, truth_df = _searchable_truth(engine, history)
    assert (n_h, df_h) == (truth_n, truth_df) and avgdl_h == pytest.approx(truth_avgdl, abs=1e-9)
    scores_h, scores_f = _scores(engine, history), _scores(engine, fresh)
    assert scores_h.keys() == scores_f.keys() and len(scores_h) > 10
    for key, score in scores_h.items():
        assert score == pytest.approx(scores_f[key], rel=1e-12, abs=1e-12), key


@pytest.fixture(scope="module")
def kbs(engine):
    tag = uuid.uuid4().hex[:8]
    a, b = _folders()
    x, y, z = f"t-hist-x-{tag}", f"t-hist-y-{tag}", f"t-hist-z-{tag}"
    _ingest(engine, x, a)
    _ingest(engine, x, b)
    _ingest(engine, y, b)
    _ingest(engine, z, {k: v for k, v in b.items() if k != "doc-4.md"})  # B without doc-4
    return x, y, z


def test_a_then_b_equals_b_fresh(engine, kbs):
    x, y, _ = kbs
    with engine.connect() as conn:  # the history KB does hold chunks that are current but not searchable
        hidden, replaced = conn.execute(sa.text(
            "SELECT count(*) FILTER (WHERE c.is_current AND d.is_deleted), count(*) FILTER (WHERE NOT c.is_current) "
            "FROM document_chunks c JOIN documents d ON d.id = c.document_id WHERE c.knowledge_base_id = :kb"),
            {"kb": chunking.knowledge_base_id(x)}).one()
    assert hidden > 0 and replaced > 0
    _assert_same(engine, x, y)
    before = _stats(engine, x)
    _ingest(engine, x, _folders()[1])  # re-ingesting B changes nothing
    assert _stats(engine, x) == before


@pytest.mark.parametrize(("hide", "restore"), [
    ({"publication_status": "UNPUBLISHED"}, {"publication_status": "PUBLISHED"}),
    ({"is_deleted": True}, {"is_deleted": False}),
    ({"status": "PROCESSING"}, {"status": "READY"}),
])
def test_lifecycle_changes_follow_the_searchable_chunks(engine, kbs, hide, restore):
    x, y, z = kbs
    with engine.begin() as conn:
        set_document_state(conn, x, "doc-4.md", **hide)
    _assert_same(engine, x, z)
    with engine.begin() as conn:
        set_document_state(conn, x, "doc-4.md", **hide)  # the same state again: nothing changes
    _assert_same(engine, x, z)
    with engine.begin() as conn:
        set_document_state(conn, x, "doc-4.md", **restore)
    _assert_same(engine, x, y)


def test_hidden_document_reingested_changed_stays_out_of_the_statistics(engine):
    """An unpublished document edited in the folder gets new chunks, still not searchable."""
    tag = uuid.uuid4().hex[:8]
    a, b = _folders()
    hist, fresh = f"t-hist-u-{tag}", f"t-hist-v-{tag}"
    _ingest(engine, hist, a)
    with engine.begin() as conn:
        set_document_state(conn, hist, "doc-2.md", publication_status="UNPUBLISHED")
    _ingest(engine, hist, b)
    _ingest(engine, fresh, {k: v for k, v in b.items() if k != "doc-2.md"})
    _assert_same(engine, hist, fresh)


def test_statistics_of_an_older_version_are_healed_by_the_next_change(engine, kbs):
    """A KB whose stats counted every current chunk (the earlier rule) is rebuilt, not patched, at its next change."""
    x, y, _ = kbs
    kb_id = chunking.knowledge_base_id(x)
    with engine.begin() as conn:  # what the former refresh wrote: every current chunk, deleted documents included
        conn.execute(sa.text("DELETE FROM knowledge_base_term_stats WHERE knowledge_base_id = :kb"), {"kb": kb_id})
        conn.execute(sa.text(
            "INSERT INTO knowledge_base_term_stats SELECT knowledge_base_id, lexeme, count(*) FROM chunk_terms "
            "WHERE knowledge_base_id = :kb GROUP BY 1, 2"), {"kb": kb_id})
        conn.execute(sa.text(
            "UPDATE knowledge_bases SET (chunk_count, avg_chunk_length) = (SELECT count(*), avg(token_count) "
            "FROM document_chunks WHERE knowledge_base_id = :kb AND is_current) WHERE id = :kb"), {"kb": kb_id})
    assert _stats(engine, x)[0] != _stats(engine, y)[0]
    with engine.begin() as conn:
        set_document_state(conn, x, "doc-4.md", status="READY")  # a no-op change of state
    _assert_same(engine, x, y)


def test_rebuild_equals_the_incremental_statistics(engine, kbs):
    x, _, _ = kbs
    before = _stats(engine, x)
    with engine.begin() as conn:
        term_stats.refresh_term_stats(conn, chunking.knowledge_base_id(x))
    assert _stats(engine, x) == before
