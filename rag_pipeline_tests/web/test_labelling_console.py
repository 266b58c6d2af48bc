"""The console's labelling page on a real server (issue 17): questions → pooled candidates with text → grades →
a new dataset version whose labels pass the check; CSRF on every form; bad input re-shows the form."""

from __future__ import annotations

import re
import uuid

import requests
import sqlalchemy as sa

from rag_pipeline.evaluation.label_check import check_labels


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
