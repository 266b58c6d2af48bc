"""The attached knowledge base's mapping without a database: the file is validated with the field named, and every
table and column name reaches SQL only as a quoted identifier (a hostile name stays one identifier)."""

from __future__ import annotations

import pytest

from rag_pipeline.contracts.attached import AttachedMapping
from rag_pipeline.knowledge_base.attached import AttachError, read_mapping
from rag_pipeline.knowledge_base.queries.attached import Names, quote, quote_table
from rag_pipeline.retrieval import attached_sql

HOSTILE = 'x"; DROP TABLE documents; --'


def test_the_default_mapping_is_the_original_design_schema():
    m = AttachedMapping()
    assert (m.chunks_table, m.chunk_id, m.text, m.embedding, m.tsvector, m.documents_table) == (
        "document_chunks", "id", "content", "embedding", "content_tsvector", "documents")
    assert [(c.column, c.equals) for c in m.document_filter] == [
        ("status", "READY"), ("publication_status", "PUBLISHED"), ("is_deleted", False)]


def test_names_are_quoted_identifiers():
    assert quote("id") == '"id"' and quote('a"b') == '"a""b"'
    assert quote_table("app.chunks") == '"app"."chunks"' and quote_table("chunks") == '"chunks"'
    names = Names(AttachedMapping(chunks_table=HOSTILE, text=HOSTILE, documents_table=None,
                                  document_filter=[{"column": HOSTILE, "equals": "live"}]))
    sql = attached_sql._keyword_leg(names) + attached_sql._vector_leg(names)
    assert '"x""; DROP TABLE documents; --"' in sql
    assert sql.replace('"x""; DROP TABLE documents; --"', "").count("DROP TABLE") == 0
    assert names.params() == {"f0": "live"}  # values are bind parameters, never in the text


@pytest.mark.parametrize(("content", "named"), [
    ("chunks_table: chunks\ncolour: red\n", "field 'colour'"),
    ("document_filter: [{column: status}]\n", "field 'document_filter.0.equals'"),
    ("text: ''\n", "field 'text'"),
    ("- a\n- b\n", "must be an object"),
])
def test_a_bad_mapping_file_names_the_file_and_the_field(tmp_path, content, named):
    path = tmp_path / "mapping.yaml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(AttachError, match=f"{path}.*{named}"):
        read_mapping(path)


def test_a_mapping_file_overrides_only_what_it_names(tmp_path):
    path = tmp_path / "mapping.yaml"
    path.write_text("chunks_table: app.passages\nchunk_id: passage_key\ntsvector: null\n", encoding="utf-8")
    m = read_mapping(path)
    assert (m.chunks_table, m.chunk_id, m.tsvector, m.text) == ("app.passages", "passage_key", None, "content")
