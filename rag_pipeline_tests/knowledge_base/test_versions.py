"""The content version of a knowledge base: the documented hash, recomputed here in Python from plain rows, and the
two covering indexes (migration 0017) that let its statements read their rows from the indexes alone."""

from __future__ import annotations

import hashlib

import sqlalchemy as sa

from rag_pipeline.knowledge_base.queries import documents as queries
from rag_pipeline.knowledge_base.versions import content_version


def test_the_version_is_the_sha256_of_the_searchable_chunk_ids_with_their_models(engine, demo_kb) -> None:
    with engine.connect() as conn:
        kb = conn.execute(sa.text("SELECT id, text_search FROM knowledge_bases WHERE name = :n"), {"n": demo_kb}).one()
        chunks = conn.execute(sa.text(
            "SELECT c.id::text AS id FROM document_chunks c JOIN documents d ON d.id = c.document_id "
            f"WHERE c.knowledge_base_id = :kb AND c.is_current AND {queries.SEARCHABLE_DOCUMENT_SQL}"),
            {"kb": kb.id}).scalars().all()
        vectors = conn.execute(sa.text("SELECT chunk_id::text AS id, model FROM chunk_embeddings "
                                       "WHERE knowledge_base_id = :kb"), {"kb": kb.id}).all()
        version = content_version(conn, demo_kb)
    models: dict[str, list[str]] = {}
    for v in vectors:
        models.setdefault(v.id, []).append(v.model)
    lines = "\n".join(f"{c}:{','.join(sorted(models.get(c, [])))}" for c in sorted(chunks))
    digest = hashlib.sha256(lines.encode()).hexdigest()
    assert version.version == hashlib.sha256(f"rag-kb-v1\ntext_search={kb.text_search}\n{digest}".encode()).hexdigest()
    assert version.searchable_chunks == len(chunks) > 0
    searchable = set(chunks)
    assert version.embeddings == {m: sum(v.id in searchable for v in vectors if v.model == m)
                                  for m in {v.model for v in vectors}}


def test_the_version_reads_its_rows_from_the_two_covering_indexes(engine, demo_kb) -> None:
    """Where the planner reads the tables by index (a large knowledge base; forced here for the small demo), the
    digest's chunks and vectors come from index-only scans, already in chunk id order."""
    with engine.begin() as conn:
        kb_id = conn.execute(sa.text("SELECT id FROM knowledge_bases WHERE name = :n"), {"n": demo_kb}).scalar_one()
        for setting in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
            conn.execute(sa.text(f"SET LOCAL {setting} = off"))
        plan = "\n".join(r[0] for r in conn.execute(sa.text("EXPLAIN " + queries._VERSION_SQL), {"kb": kb_id}))
        conn.rollback()
    assert "Index Only Scan using ix_document_chunks_kb_current_id on document_chunks" in plan, plan
    assert "Index Only Scan using ix_chunk_embeddings_kb_chunk_model on chunk_embeddings" in plan, plan
