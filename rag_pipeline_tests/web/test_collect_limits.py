"""The collect route on a real ``rag-pipeline serve`` against a slow real endpoint on 127.0.0.1: at most
``RAG_COLLECT_SLOTS`` collections run at once (one more → 429 with ``Retry-After``), ``/healthz`` answers while
they hang, and a client that goes away stops its collection and frees its slot (docs/failure-behaviour.md)."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from rag_pipeline.service import answers
from rag_pipeline_tests.answers.rag_endpoint_server import RagEndpoint
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, write_dataset
from rag_pipeline_tests.web.server_helpers import dagster_env, start_server

# a server process on the session's database
pytestmark = [pytest.mark.db, pytest.mark.slow]

NAME = "collect-limits"
SLOTS = 2
CLIENT_GIVES_UP_S = 4


@pytest.fixture(scope="module")
def served(engine, tmp_path_factory):
    """(server base URL, knowledge base, endpoint): a stored three-case dataset, the endpoint allowed."""
    home = tmp_path_factory.mktemp("collect-limits")
    kb = f"collect-limits-{int(time.time() * 1000) % 10**8}"
    chunks = ingest_tiny_kb(engine, kb, home / "docs")
    cases = [{"case_id": f"c{i}", "question": f"Question {i}?", "k": 3, "relevant_chunk_ids": [chunks["backup.md"]]}
             for i in range(3)]
    dataset = write_dataset(home / "x.json", kb, cases, name=NAME)
    lines = home / "a.jsonl"
    lines.write_text("".join(json.dumps({"case_id": c["case_id"], "answer": "x"}) + "\n" for c in cases),
                     encoding="utf-8")
    answers.evaluate_answers(engine, kb, dataset, lines, answerer="seed")
    (home / "dagster_home").mkdir()
    (home / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    with RagEndpoint() as rag:
        env = dagster_env(home / "dagster_home", home / "datasets", RAG_COLLECT_ENDPOINTS=rag.url,
                          RAG_COLLECT_SLOTS=str(SLOTS), RAG_PROJECT_ROOT=str(home))
        env = {k: v for k, v in env.items() if k not in ("RAG_API_TOKEN", "RAG_ALLOWED_HOSTS")}
        with start_server(env, log=home / "server.log") as (base, _proc):
            yield base, kb, rag


def _collect(base: str, kb: str, rag: RagEndpoint, timeout_s: float, client_timeout: float = 60) -> httpx.Response:
    endpoint = {"url": rag.url, "retries": 0, "concurrency": 1, "timeout_s": timeout_s}
    return httpx.post(f"{base}/api/v1/datasets/{NAME}/answers/collect", timeout=client_timeout,
                      json={"knowledge_base": kb, "endpoint": endpoint, "store": False})


def test_collections_are_bounded_healthz_answers_and_a_client_that_leaves_stops_its_collection(served):
    base, kb, rag = served
    rag.delay = 30  # every reply hangs
    left: list[BaseException] = []

    def gives_up(timeout_s: float) -> None:
        try:
            _collect(base, kb, rag, timeout_s, client_timeout=CLIENT_GIVES_UP_S)
        except httpx.TimeoutException as exc:
            left.append(exc)

    clients = [threading.Thread(target=gives_up, args=(59 - i,)) for i in range(SLOTS)]
    for client in clients:
        client.start()
    deadline = time.monotonic() + 20
    while sum(rag.requests.values()) < SLOTS and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sum(rag.requests.values()) == SLOTS, "both collections are asking the endpoint"

    refused = _collect(base, kb, rag, 50)
    assert refused.status_code == 429, refused.text
    assert refused.headers["retry-after"].isdigit() and "RAG_COLLECT_SLOTS" in refused.json()["detail"]
    start = time.perf_counter()
    health = httpx.get(f"{base}/healthz", timeout=30)
    assert health.status_code == 200 and time.perf_counter() - start < 5, "healthz waits on the collections"

    for client in clients:
        client.join(timeout=30)
    assert len(left) == SLOTS, "the clients gave up"
    rag.delay = 0
    deadline = time.monotonic() + 10
    while True:  # the server notices the clients left within a second and stops their collections
        again = _collect(base, kb, rag, 40)
        if again.status_code != 429 or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert again.status_code == 200, again.text
    assert again.json()["collection"]["answered"] == 3
    assert sum(rag.requests.values()) == SLOTS + 3, "the abandoned collections asked no further case"
