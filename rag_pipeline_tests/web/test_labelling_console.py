"""The console's labelling page on a real server: questions → pooled candidates with text → grades →
a new dataset version whose labels pass the check; CSRF on every form; bad input re-shows the form."""

from __future__ import annotations

import json
import re
import uuid

import pytest
import requests
import sqlalchemy as sa

from rag_pipeline.evaluation.datasets.label_check import check_labels

# the live server fixture, pooling on the demo KB
pytestmark = pytest.mark.slow


def _token(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def test_pool_grade_and_save_a_dataset_version(live_server, demo_kb, engine):
    name = f"console-labels-{uuid.uuid4().hex[:6]}"
    start = f"{live_server}/admin/retrieval-evaluations/kb/{demo_kb}/labelling"
    s = requests.Session()
    page = s.get(start, timeout=60)
    assert page.status_code == 200 and "bm25-v1" in page.text
    token = _token(page.text)
    assert s.post(start, data={"name": name, "questions": "x"}, timeout=60).status_code == 403  # no CSRF token
    empty = s.post(start, data={"csrf_token": token, "name": name, "questions": " \n# nothing\n"}, timeout=60)
    assert empty.status_code == 422 and "has no question" in empty.text
    made = s.post(start, data={"csrf_token": token, "name": name, "depth": "3", "k": "5",
                               "questions": "年假可以结转几天？\nWhy did we choose a monorepo?\nWhere is the moon?",
                               "strategy": ["bm25-v1", "vector-v1"]}, timeout=300)
    assert made.status_code == 200 and made.url.endswith(f"/labelling/{name}"), made.text[:500]
    chunks = re.findall(r'<tr data-chunk="([0-9a-f-]{36})"', made.text)
    assert 3 <= len(chunks) <= 6 and "leave-policy-zh.md" in made.text  # the pool of two strategies at depth 3
    url = f"{start}/{name}"
    early = s.post(f"{url}/save", data={"csrf_token": token, "dataset": name}, timeout=60)
    assert early.status_code == 422 and "nothing to export" in early.text  # nothing judged yet: nothing stored
    first = s.post(f"{url}/q/0", data={"csrf_token": token, "grade-0": "2", "grade-1": "0", "action": "next"},
                   timeout=60)
    assert first.status_code == 200 and first.url.endswith("?q=1")
    second_chunks = re.findall(r'<tr data-chunk="([0-9a-f-]{36})"', first.text)
    s.post(f"{url}/q/1", data={"csrf_token": token, "grade-0": "1", "action": "next"}, timeout=60)
    s.post(f"{url}/q/2", data={"csrf_token": token, "action": "skip"}, timeout=60)
    saved = s.post(f"{url}/save", data={"csrf_token": token, "dataset": name}, timeout=120)
    assert saved.status_code == 200 and f"/datasets/{name}" in saved.url
    with engine.connect() as conn:
        cases = conn.execute(sa.text("SELECT cases FROM retrieval_evaluation_datasets WHERE name = :n "
                                     "AND knowledge_base_name = :kb"), {"n": name, "kb": demo_kb}).scalar_one()
        assert [c["relevant_chunk_ids"] for c in cases] == [{chunks[0]: 2, chunks[1]: 0}, [second_chunks[0]]]
        assert not check_labels(conn, demo_kb, cases).invalid()


FIX_DOCS = {  # one chunk per document at chunk size 400, several at 120
    "monorepo.md": "Why one repository. Keeping every service in one repository allows atomic commits across "
                   "services. A single version of each third-party library is used everywhere. Builds are cached "
                   "remotely so a change only rebuilds what it touches.",
    "backup.md": "Backups. Nightly backups use basebackup with continuous archiving of the write-ahead log. "
                 "Restores are tested every quarter on a scratch server. A restore drill takes about two hours.",
}


def test_fix_labels_after_a_rechunking_stores_a_new_version(live_server, engine, tmp_path):
    """Console "fix labels": after the knowledge base is re-chunked, the preview lists each replaced label with its
    re-mapped chunk and stores nothing; saving (CSRF) stores a new version whose labels all pass the check."""
    from rag_pipeline.service import knowledge_bases, stored_datasets

    kb, name = f"console-fix-{uuid.uuid4().hex[:6]}", "fixme"
    folder = tmp_path / "docs"
    folder.mkdir()
    for file, text in FIX_DOCS.items():
        (folder / file).write_text(text + "\n", encoding="utf-8")
    knowledge_bases.ingest(engine, folder, kb, chunk_size=120, chunk_overlap=0)
    with engine.connect() as conn:
        chunks = dict(conn.execute(sa.text(
            "SELECT c.content, c.id::text FROM document_chunks c JOIN knowledge_bases k ON k.id = c.knowledge_base_id "
            "WHERE k.name = :kb AND c.is_current"), {"kb": kb}).all())
    atomic = next(cid for text, cid in chunks.items() if "atomic commits" in text)
    quarter = next(cid for text, cid in chunks.items() if "tested every quarter" in text)
    cases = [{"case_id": "atomic-001", "question": "Why one repository?", "k": 1, "relevant_chunk_ids": [atomic]},
             {"case_id": "restore-001", "question": "How often are restores tested?", "k": 1,
              "relevant_chunk_ids": [quarter]}]
    stored_datasets.store_uploaded_dataset(engine, kb, json.dumps({"cases": cases}), source="test", name=name)
    knowledge_bases.ingest(engine, folder, kb, chunk_size=400, chunk_overlap=0, rechunk=True)

    page_url = f"{live_server}/admin/retrieval-evaluations/kb/{kb}/datasets/{name}"
    s = requests.Session()
    dashboard = s.get(page_url, timeout=60)
    assert dashboard.status_code == 200 and "chunk_replaced" in dashboard.text and 'id="fix-labels"' in dashboard.text
    preview = s.get(f"{page_url}/fix-labels", timeout=60)
    assert preview.status_code == 200, preview.text[:500]
    assert "fixed: 2" in preview.text and "need a person: 0" in preview.text
    assert atomic in preview.text and quarter in preview.text and "covers 100%" in preview.text
    versions = "SELECT count(*) FROM retrieval_evaluation_datasets WHERE name = :n AND knowledge_base_name = :kb"
    with engine.connect() as conn:
        assert conn.execute(sa.text(versions), {"n": name, "kb": kb}).scalar_one() == 1, "a preview stores nothing"
    assert s.post(f"{page_url}/fix-labels", data={}, timeout=60).status_code == 403  # no CSRF token
    saved = s.post(f"{page_url}/fix-labels", data={"csrf_token": _token(preview.text)}, timeout=120)
    assert saved.status_code == 200 and saved.url.startswith(page_url), saved.text[:500]
    with engine.connect() as conn:
        assert conn.execute(sa.text(versions), {"n": name, "kb": kb}).scalar_one() == 2
        latest = conn.execute(sa.text(
            "SELECT cases FROM retrieval_evaluation_datasets WHERE name = :n AND knowledge_base_name = :kb "
            "ORDER BY last_seen_at DESC LIMIT 1"), {"n": name, "kb": kb}).scalar_one()
        report = check_labels(conn, kb, latest)
    assert not report.invalid() and len(report.rows) == 2
    assert all(c["relevant_chunk_ids"] != [old] for c, old in zip(latest, (atomic, quarter), strict=True))
