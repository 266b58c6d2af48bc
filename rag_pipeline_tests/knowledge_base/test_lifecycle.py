"""Document lifecycle (status, publication, deleted) and knowledge-base statistics, in the real database."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError, knowledge_base_stats, set_document_state
from rag_pipeline.knowledge_base.sources import read_folder

DOCS = {
    "a.md": "Alpha document about VPN tokens.",
    "b.md": "Bravo document about travel expenses.",
    "c.txt": "Charlie: 差旅报销需要在出差结束后提交。",
    "d.md": "Delta document about laptops.",
    "e.md": "Echo document about holidays.",
}


@pytest.fixture
def kb(engine, kb_name: str, tmp_path: Path) -> str:
    for name, text in DOCS.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    ingest_documents(engine, read_folder(tmp_path), kb_name, text_search="simple", chunk_size=200, chunk_overlap=20)
    return kb_name


def state(engine, kb: str, name: str) -> tuple:
    with engine.connect() as conn:
        return tuple(conn.execute(sa.text(
            "SELECT status::text, publication_status::text, is_deleted FROM documents WHERE id = :id"),
            {"id": chunking.document_id(kb, name)}).one())


def change(engine, kb: str, document: str, **kw) -> int:
    with engine.begin() as conn:
        return set_document_state(conn, kb, document, **kw)


def test_set_state_by_name(engine, kb: str) -> None:
    assert state(engine, kb, "a.md") == ("READY", "PUBLISHED", False)
    assert change(engine, kb, "a.md", status="FAILED") == 1
    assert state(engine, kb, "a.md") == ("FAILED", "PUBLISHED", False)
    assert change(engine, kb, "a.md", publication_status="unpublished") == 1  # case-insensitive
    assert state(engine, kb, "a.md") == ("FAILED", "UNPUBLISHED", False)
    assert change(engine, kb, "a.md", is_deleted=True) == 1
    assert state(engine, kb, "a.md") == ("FAILED", "UNPUBLISHED", True)
    assert change(engine, kb, "a.md", status="READY", publication_status="PUBLISHED", is_deleted=False) == 1
    assert state(engine, kb, "a.md") == ("READY", "PUBLISHED", False)
    assert state(engine, kb, "b.md") == ("READY", "PUBLISHED", False), "other documents untouched"


def test_set_state_by_id_and_kb_id(engine, kb: str) -> None:
    doc_id = str(chunking.document_id(kb, "c.txt"))
    assert change(engine, kb, doc_id, status="PROCESSING", publication_status="DRAFT") == 1
    assert state(engine, kb, "c.txt") == ("PROCESSING", "DRAFT", False)
    kb_id = str(chunking.knowledge_base_id(kb))
    assert change(engine, kb_id, doc_id, is_deleted=True) == 1
    assert state(engine, kb, "c.txt") == ("PROCESSING", "DRAFT", True)


def test_updated_at_moves(engine, kb: str) -> None:
    with engine.connect() as conn:
        before = conn.execute(sa.text("SELECT updated_at FROM documents WHERE id = :id"),
                              {"id": chunking.document_id(kb, "d.md")}).scalar()
    change(engine, kb, "d.md", publication_status="UNPUBLISHED")
    with engine.connect() as conn:
        after = conn.execute(sa.text("SELECT updated_at FROM documents WHERE id = :id"),
                             {"id": chunking.document_id(kb, "d.md")}).scalar()
    assert after > before


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"status": "DONE"}, "status must be one of READY, PROCESSING, FAILED"),
        ({"status": "PUBLISHED"}, "status must be one of"),
        ({"publication_status": "ARCHIVED"}, "publication_status must be one of PUBLISHED, DRAFT, UNPUBLISHED"),
        ({"publication_status": "READY"}, "publication_status must be one of"),
        ({}, "nothing to change"),
    ],
)
def test_bad_values(engine, kb: str, kw: dict, match: str) -> None:
    with pytest.raises(KnowledgeBaseError, match=match):
        change(engine, kb, "a.md", **kw)
    assert state(engine, kb, "a.md") == ("READY", "PUBLISHED", False)


def test_unknown_document_and_kb(engine, kb: str) -> None:
    with pytest.raises(KnowledgeBaseError, match=r"no document 'zzz.md' in knowledge base"):
        change(engine, kb, "zzz.md", status="FAILED")
    other_doc = str(chunking.document_id(kb + "-other", "a.md"))
    with pytest.raises(KnowledgeBaseError, match="no document"):
        change(engine, kb, other_doc, status="FAILED")
    with pytest.raises(KnowledgeBaseError, match=r"unknown knowledge base .no-such-kb-xyz.; known: .*" + re.escape(kb)):
        change(engine, "no-such-kb-xyz", "a.md", status="FAILED")
    with pytest.raises(KnowledgeBaseError, match="unknown knowledge base"), engine.connect() as conn:
        knowledge_base_stats(conn, "no-such-kb-xyz")


def test_document_in_another_kb_is_not_touched(engine, kb: str, tmp_path: Path) -> None:
    other = kb + "-twin"
    folder = tmp_path / "twin"
    folder.mkdir()
    (folder / "a.md").write_text(DOCS["a.md"], encoding="utf-8")
    ingest_documents(engine, read_folder(folder), other, text_search="simple", chunk_size=200, chunk_overlap=20)
    change(engine, kb, "a.md", is_deleted=True)
    assert state(engine, other, "a.md") == ("READY", "PUBLISHED", False)
    assert state(engine, kb, "a.md")[2] is True


def test_stats_count_searchable_documents(engine, kb: str) -> None:
    with engine.connect() as conn:
        stats = knowledge_base_stats(conn, kb)
    assert stats["knowledge_base"] == kb
    assert stats["knowledge_base_id"] == str(chunking.knowledge_base_id(kb))
    assert stats["text_search"] == "simple"
    assert (stats["documents"], stats["searchable_documents"]) == (5, 5)
    assert (stats["current_chunks"], stats["replaced_chunks"]) == (5, 0)
    assert stats["embeddings"] == {DEFAULT_MODEL: 5}
    assert stats["avg_chunk_tokens"] > 3

    change(engine, kb, "a.md", status="FAILED")
    change(engine, kb, "b.md", publication_status="UNPUBLISHED")
    change(engine, kb, "c.txt", publication_status="DRAFT")
    change(engine, kb, "d.md", is_deleted=True)
    with engine.connect() as conn:
        stats = knowledge_base_stats(conn, str(chunking.knowledge_base_id(kb)))  # by id too
    assert (stats["documents"], stats["searchable_documents"]) == (5, 1)
    assert stats["current_chunks"] == 5, "lifecycle does not rewrite chunks"

    change(engine, kb, "a.md", status="READY")
    change(engine, kb, "d.md", is_deleted=False)
    with engine.connect() as conn:
        assert knowledge_base_stats(conn, kb)["searchable_documents"] == 3
