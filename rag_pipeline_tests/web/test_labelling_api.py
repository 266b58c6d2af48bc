"""``GET /api/v1/knowledge-bases/{id}/chunks`` on a real server: the same listing as ``rag-pipeline
chunks``, English and Chinese searches, problem details for bad input."""

from __future__ import annotations

import pytest
import requests

from rag_pipeline.service.labelling.chunks import find_chunks

# the live server fixture
pytestmark = pytest.mark.slow


def test_chunks_endpoint_lists_and_searches_like_the_cli(live_server, demo_kb, engine):
    url = f"{live_server}/api/v1/knowledge-bases/{demo_kb}/chunks"
    for phrase in ("atomic commits", "结转"):
        response = requests.get(url, params={"search": phrase, "limit": 5}, timeout=120)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body == find_chunks(engine, demo_kb, search=phrase, limit=5).model_dump()
        first = body["chunks"][0]
        assert phrase in first["text"] and "phrase" in first["matched"] and len(first["chunk_id"]) == 36
    listing = requests.get(url, params={"document": "monorepo-advantages.md", "limit": 100}, timeout=60).json()
    assert listing["document"] == "monorepo-advantages.md" and listing["total"] == len(listing["chunks"]) > 1
    assert [c["ordinal"] for c in listing["chunks"]] == sorted(c["ordinal"] for c in listing["chunks"])


def test_chunks_endpoint_bad_input_is_problem_details(live_server, demo_kb):
    base = f"{live_server}/api/v1/knowledge-bases"
    unknown = requests.get(f"{base}/no-such-kb/chunks", timeout=60)
    assert unknown.status_code == 404 and unknown.headers["content-type"].startswith("application/problem+json")
    assert "unknown knowledge base 'no-such-kb'" in unknown.json()["detail"]
    doc = requests.get(f"{base}/{demo_kb}/chunks", params={"document": "monorepo.md"}, timeout=60)
    assert doc.status_code == 404 and "did you mean 'monorepo-advantages.md'" in doc.json()["detail"]
    assert requests.get(f"{base}/{demo_kb}/chunks", params={"limit": 0}, timeout=60).status_code == 422
