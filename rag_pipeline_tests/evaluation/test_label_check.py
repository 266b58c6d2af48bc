"""Label integrity on a real knowledge base where every status occurs (the docs/design.md §8 checklist, automated)."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from rag_pipeline.evaluation.datasets import label_check
from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError, set_document_state
from rag_pipeline.knowledge_base.sources import SourceDocument

EPS_V1 = "Epsilon opens with a sentence that stays. " * 3 + "The refund window is thirty days. " * 3
EPS_V2 = "Epsilon opens with a sentence that stays. " * 3 + "The refund window is now sixty days. " * 3


def _docs(eps: str) -> list[SourceDocument]:
    return [
        SourceDocument("alpha.md", None, "Alpha explains onboarding. " * 4 + "Alpha covers laptops too. " * 4),
        SourceDocument("beta.md", None, "Beta is a draft about pricing tiers."),
        SourceDocument("gamma.md", None, "Gamma describes the old VPN setup."),
        SourceDocument("delta.md", None, "Delta is still being processed."),
        SourceDocument("zeta.md", None, "Zeta is both unpublished and deleted."),
        SourceDocument("eps.md", None, eps),
    ]


def _chunks(conn, kb: str) -> dict[str, list[sa.Row]]:
    rows = conn.execute(sa.text(
        "SELECT c.id::text AS id, d.original_name, c.is_current, c.char_start, c.char_end FROM document_chunks c "
        "JOIN documents d ON d.id = c.document_id WHERE c.knowledge_base_id = :kb ORDER BY c.char_start"),
        {"kb": chunking.knowledge_base_id(kb)}).all()
    out: dict[str, list[sa.Row]] = {}
    for r in rows:
        out.setdefault(r.original_name, []).append(r)
    return out


@pytest.fixture(scope="module")
def world(engine):
    kb, other = f"labels-{uuid.uuid4().hex[:8]}", f"labels-other-{uuid.uuid4().hex[:8]}"
    opts = {"chunk_size": 100, "chunk_overlap": 20, "models": ()}
    ingest_documents(engine, _docs(EPS_V1), kb, **opts)
    with engine.connect() as conn:
        before = _chunks(conn, kb)
    ingest_documents(engine, _docs(EPS_V2), kb, **opts)  # the refund sentence changed: its chunks are replaced
    ingest_documents(engine, [SourceDocument("other.md", None, "A chunk of another knowledge base.")], other, **opts)
    with engine.begin() as conn:
        set_document_state(conn, kb, "beta.md", publication_status="UNPUBLISHED")
        set_document_state(conn, kb, "gamma.md", is_deleted=True)
        set_document_state(conn, kb, "delta.md", status="PROCESSING")
        set_document_state(conn, kb, "zeta.md", publication_status="DRAFT", is_deleted=True)
    with engine.connect() as conn:
        return kb, other, before, _chunks(conn, kb), _chunks(conn, other)


def test_every_integrity_class_is_recognised(engine, world):
    kb, other, before, now, others = world
    replaced = [r for r in now["eps.md"] if not r.is_current]
    assert replaced, "re-ingesting the changed document must retire at least one chunk"
    old = replaced[-1]
    alpha_chunks = [r.id for r in now["alpha.md"]]
    labels = {
        "ok": now["alpha.md"][0].id,
        "is_document_id": str(chunking.document_id(kb, "alpha.md")),
        "is_knowledge_base_id": str(chunking.knowledge_base_id(kb)),
        "other_knowledge_base": others["other.md"][0].id,
        "document_unpublished": now["beta.md"][0].id,
        "document_deleted": now["gamma.md"][0].id,
        "document_not_ready": now["delta.md"][0].id,
        "chunk_replaced": old.id,
        "unknown_id": str(uuid.uuid4()),
        "not_a_uuid": "alpha.md#chunk-1",
    }
    cases = [{"case_id": "everything", "relevant_chunk_ids": list(labels.values())}]
    with engine.connect() as conn:
        report = label_check.check_labels(conn, kb, cases)
    got = {r.chunk_id: r for r in report.rows}
    assert {status: got[cid].status for status, cid in labels.items()} == {s: s for s in labels}
    assert [r.model_dump().keys() for r in report.rows][0] == {"case_id", "chunk_id", "status", "detail"}

    doc = got[labels["is_document_id"]]
    assert "'alpha.md'" in doc.detail and list(doc.suggested_chunk_ids) == alpha_chunks
    assert all(cid in doc.detail for cid in alpha_chunks)
    assert other in got[labels["other_knowledge_base"]].detail
    assert kb in got[labels["is_knowledge_base_id"]].detail
    assert "UNPUBLISHED" in got[labels["document_unpublished"]].detail
    assert "PROCESSING" in got[labels["document_not_ready"]].detail

    # The replacement is the current chunk of the same document overlapping the old span.
    expected = [r.id for r in now["eps.md"]
                if r.is_current and r.char_start < old.char_end and old.char_start < r.char_end]
    assert expected and list(got[old.id].suggested_chunk_ids) == expected
    assert all(cid in got[old.id].detail for cid in expected)
    assert old.id in {r.id for r in before["eps.md"]}, "the replaced chunk is the one labelled before re-ingestion"
    assert report.verdicts == {"everything": "some_invalid"}
    assert report.counts()["ok"] == 1 and sum(report.counts().values()) == len(labels)


def test_several_problems_first_status_and_all_mentioned(engine, world):
    kb, _, _, now, _ = world
    cid = now["zeta.md"][0].id
    with engine.connect() as conn:
        report = label_check.check_labels(conn, kb, [{"case_id": "z", "relevant_chunk_ids": [cid]}])
    (row,) = report.rows
    assert row.status == "document_deleted"
    assert "DRAFT" in row.detail and "also:" in row.detail


def test_verdicts_and_batched_sql(engine, world):
    kb, _, _, now, _ = world
    good = [r.id for r in now["alpha.md"]]
    cases = [
        {"case_id": "all-bad", "relevant_chunk_ids": [str(chunking.document_id(kb, "alpha.md")), str(uuid.uuid4())]},
        {"case_id": "mixed", "relevant_chunk_ids": [good[0], now["beta.md"][0].id]},
        {"case_id": "good", "relevant_chunk_ids": good},
    ] + [{"case_id": f"bulk-{i}", "relevant_chunk_ids": [str(uuid.uuid4()), good[i % len(good)]]} for i in range(200)]
    statements = []

    def count(*_args):
        statements.append(1)

    with engine.connect() as conn:
        kb_row = conn.execute(sa.text("SELECT id, name FROM knowledge_bases WHERE name = :n"), {"n": kb}).one()
        sa.event.listen(conn, "before_cursor_execute", count)
        report = label_check.check_labels(conn, kb_row, cases)
        sa.event.remove(conn, "before_cursor_execute", count)
    assert len(statements) == 2, "all ids of a dataset are checked in two statements, not one per id"
    assert report.verdicts["all-bad"] == "all_invalid"
    assert report.verdicts["mixed"] == "some_invalid"
    assert report.verdicts["good"] == "ok"
    assert report.cases_with("all_invalid") == ["all-bad"]
    assert "1 of 203 cases have no valid label" in report.summary()


def test_all_valid_summary_and_unknown_kb(engine, world):
    kb, _, _, now, _ = world
    with engine.connect() as conn:
        report = label_check.check_labels(conn, kb, [{"case_id": "a", "relevant_chunk_ids": [now["alpha.md"][1].id]}])
        assert report.invalid() == [] and report.summary().startswith("all 1 labels")
        with pytest.raises(KnowledgeBaseError, match="unknown knowledge base"):
            label_check.check_labels(conn, "no-such-kb-xyz", [])
