"""An embedding model of kind endpoint, against a real OpenAI-compatible embeddings server of the test's own on
127.0.0.1 serving the shipped use-multilingual-v3: added by the CLI (no header value stored), it ingests the demo
corpus to the shipped model's very vectors, `hybrid-v1` on it gives the shipped model's candidates and metrics,
question vectors are asked once, every fault is an EmbeddingError naming the model and host with nothing stored,
and the secret header value appears nowhere."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
import yaml

from rag_pipeline.cli.main import main
from rag_pipeline.evaluation.datasets.demo import build_demo_dataset
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL, EmbeddingError, get_embedder
from rag_pipeline.knowledge_base.embedding_models import add_endpoint_model
from rag_pipeline.knowledge_base.endpoint_embedding import EmbeddingEndpoint
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.question_embeddings import question_hash
from rag_pipeline.knowledge_base.sources import SourceDocument
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline.service.environment import check_model
from rag_pipeline_tests.knowledge_base.embeddings_server import EmbeddingsServer

pytestmark = pytest.mark.db  # every test registers models and ingests into the session's database

ROOT = Path(__file__).resolve().parents[2]
SECRET = "tok-8d2f-Q7-secret-value"
ENV = "E2E_EMBED_TOKEN"
MODEL = "e2e-use"
FAST = "e2e-use-fast"  # the same endpoint, one retry, no wait: the faults end quickly
KB = "endpoint-demo"


@dataclass
class World:
    server: EmbeddingsServer
    out: io.StringIO
    err: io.StringIO
    logs: list[str]


class _Collect(logging.Handler):
    def __init__(self, into: list[str]):
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(self.format(record))


@contextlib.contextmanager
def _captured(world: World) -> Iterator[None]:
    with contextlib.redirect_stdout(world.out), contextlib.redirect_stderr(world.err):
        yield


@pytest.fixture(scope="module")
def world(engine) -> Iterator[World]:
    """The server, the model added by the CLI, and the demo corpus ingested with both models, every output kept."""
    logs: list[str] = []
    handler, root = _Collect(logs), logging.getLogger()
    before = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    os.environ[ENV] = f"Bearer {SECRET}"
    try:
        with EmbeddingsServer(SECRET) as server:
            w = World(server, io.StringIO(), io.StringIO(), logs)
            with _captured(w):
                assert main(["embeddings", "add-endpoint", MODEL, "--url", server.url, "--model", "use-m3",
                             "--dimension", "512", "--header", f"Authorization: env:{ENV}", "--batch-size", "64",
                             "--concurrency", "1"]) == 0
                assert server.requests == 1, "the check embedded one text"
                add_endpoint_model(engine, FAST, 512, EmbeddingEndpoint(
                    url=server.url, model_id="use-m3", headers=[f"Authorization: env:{ENV}"], retries=1,
                    backoff_s=0.0, max_wait_s=0.0))
                assert main(["ingest", str(ROOT / "demo" / "kb"), "--knowledge-base", KB, "--text-search", "mixed",
                             "--chunk-size", "500", "--chunk-overlap", "80", "--models", DEFAULT_MODEL, MODEL,
                             FAST]) == 0
            yield w
    finally:
        os.environ.pop(ENV, None)
        root.removeHandler(handler)
        root.setLevel(before)


@pytest.fixture(autouse=True)
def _no_fault_left(world: World) -> Iterator[None]:
    yield
    world.server.faults = []


def _vectors(engine, kb: str, model: str) -> dict[str, np.ndarray]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT e.chunk_id::text, e.embedding FROM chunk_embeddings e JOIN knowledge_bases k ON k.id = "
            "e.knowledge_base_id WHERE k.name = :kb AND e.model = :m"), {"kb": kb, "m": model}).all()
    return {cid: np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, dtype=np.float32) for cid, v in rows}


def test_the_endpoint_model_stores_the_shipped_models_vectors(engine, world: World) -> None:
    shipped, served = _vectors(engine, KB, DEFAULT_MODEL), _vectors(engine, KB, MODEL)
    assert len(shipped) > 50 and set(served) == set(shipped) == set(_vectors(engine, KB, FAST))
    worst = max(float(np.max(np.abs(served[c] - shipped[c]))) for c in shipped)
    assert worst <= 1e-6, worst
    np.testing.assert_allclose([np.linalg.norm(v) for v in served.values()], 1.0, atol=1e-6)
    with engine.connect() as conn:
        distinct = conn.execute(sa.text(
            "SELECT count(DISTINCT c.content) FROM document_chunks c JOIN knowledge_bases k ON k.id = "
            "c.knowledge_base_id WHERE k.name = :kb AND c.is_current"), {"kb": KB}).scalar_one()
        row = conn.execute(sa.text("SELECT backend, dimension, endpoint FROM embedding_models WHERE name = :m"),
                           {"m": MODEL}).one()
    assert world.server.texts >= 1 + 2 * distinct  # the check's text, then each distinct chunk text for each model
    assert (row.backend, row.dimension) == ("endpoint", 512)
    assert row.endpoint["headers"] == [f"Authorization: env:{ENV}"] and row.endpoint["model_id"] == "use-m3"


def _demo_dataset(tmp_path: Path) -> Path:
    spec = yaml.safe_load((ROOT / "demo" / "cases.yaml").read_text(encoding="utf-8"))
    cases_file = tmp_path / "cases.yaml"
    cases_file.write_text(yaml.safe_dump({**spec, "knowledge_base": KB}, allow_unicode=True), encoding="utf-8")
    data = {**build_demo_dataset(ROOT / "demo" / "kb", cases_file), "name": "endpoint-demo"}
    path = tmp_path / "endpoint-demo.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def _candidates(engine, run_id: str) -> dict[str, list[tuple[str, int, float]]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT case_id, chunk_id::text, rank, final_score FROM retrieval_evaluation_candidates "
            "WHERE evaluation_run_id = :r ORDER BY case_id, rank"), {"r": run_id}).all()
    out: dict[str, list[tuple[str, int, float]]] = {}
    for case_id, chunk, rank, score in rows:
        out.setdefault(case_id, []).append((chunk, rank, score))
    return out


def test_hybrid_v1_on_the_endpoint_model_ranks_as_on_the_shipped_model_and_asks_each_question_once(
        engine, world: World, tmp_path) -> None:
    dataset = load_dataset(_demo_dataset(tmp_path))
    hybrid = get_strategy("hybrid-v1")
    served = hybrid.replace(version="hybrid-v1-e2e-endpoint", embedding_model=MODEL)
    shipped_run = evaluate_dataset(engine, dataset, hybrid)
    asked = world.server.requests
    first = evaluate_dataset(engine, dataset, served)
    assert world.server.requests > asked, "the endpoint embedded the questions"
    distinct = len({c.question for c in dataset.cases})
    assert first.summary.question_embeddings == {"reused": len(dataset.cases) - distinct, "embedded": distinct}

    a, b = _candidates(engine, shipped_run.run_id), _candidates(engine, first.run_id)
    assert set(a) == {c.case_id for c in dataset.cases} and set(b) == set(a)
    for case_id in a:
        assert [(c, r) for c, r, _ in b[case_id]] == [(c, r) for c, r, _ in a[case_id]], case_id
        np.testing.assert_allclose([s for *_, s in b[case_id]], [s for *_, s in a[case_id]], atol=1e-5)
    assert set(first.averages) == set(shipped_run.averages)
    for metric, value in shipped_run.averages.items():
        assert first.averages[metric] == pytest.approx(value, abs=1e-9), metric

    asked = world.server.requests
    again = evaluate_dataset(engine, dataset, served)
    assert world.server.requests == asked, "a second evaluation asks the endpoint nothing"
    assert again.summary.question_embeddings == {"reused": len(dataset.cases), "embedded": 0}
    assert again.averages == first.averages
    with engine.connect() as conn:
        cached = conn.execute(sa.text("SELECT count(*) FROM question_embeddings WHERE model = :m AND question_hash = "
                                      "ANY(:h)"), {"m": MODEL, "h": [question_hash(c.question)
                                                                     for c in dataset.cases]}).scalar_one()
    assert cached == distinct


def test_requests_go_at_most_concurrency_at_once_in_batches(engine, world: World) -> None:
    add_endpoint_model(engine, "e2e-conc", 512, EmbeddingEndpoint(
        url=world.server.url, model_id="use-m3", headers=[f"Authorization: env:{ENV}"], batch_size=2,
        concurrency=3))
    texts = [f"sentence {i} about backups, coffee and 年假 {i % 5}" for i in range(21)]
    world.server.faults = ["slow:0.3"] * 11  # each request answers late: the others are sent meanwhile
    asked, world.server.most_in_flight = world.server.requests, 0
    vectors = get_embedder("e2e-conc").embed(texts)
    assert world.server.requests - asked == 11 and world.server.most_in_flight == 3
    np.testing.assert_allclose(vectors, get_embedder(DEFAULT_MODEL).embed(texts), atol=1e-6)
    assert vectors.dtype == np.float32 and vectors.shape == (21, 512)


def _kb_rows(engine, kb: str) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM knowledge_bases WHERE name = :kb"), {"kb": kb}).scalar_one()


DOCS = [SourceDocument("a.md", None, "Nightly backups are tested every quarter."),
        SourceDocument("b.md", None, "The office coffee machine is descaled every Friday."),
        SourceDocument("c.md", None, "每位员工每年有十五天带薪年假。")]


@pytest.mark.parametrize("faults, problem", [
    (["503", "503"], r"HTTP 503 after 2 attempt\(s\)"),
    (["500", "500"], r"HTTP 500 after 2 attempt\(s\)"),
    (["garbage"], "the reply is not JSON"),
    (["wrong-count"], "2 embeddings for 3 inputs"),
    (["wrong-dimension"], "data\\[0\\].embedding has 511 dimensions; the model is registered with 512"),
    (["non-numeric"], r"data\[\d\].embedding\[3\]: expected a finite number, got '0.5'"),
    (["nan"], r"data\[0\].embedding\[0\]: expected a finite number, got nan"),
    (["inf"], r"data\[0\].embedding\[0\]: expected a finite number, got inf"),
    (["overflow"], r"data\[0\].embedding\[0\]: 1e\+39 is beyond float32's range"),
    (["zero"], r"data\[2\].embedding is the zero vector"),
    (["bad-index"], r"the items' 'index' values are not 0 … 2"),
    (["huge"], r"the reply is longer than .*; not parsed"),
])
def test_a_fault_is_an_error_naming_model_and_host_and_stores_nothing(engine, world: World, kb_name, faults,
                                                                      problem) -> None:
    world.server.faults = list(faults)
    host = world.server.url.split("/")[2]
    with pytest.raises(EmbeddingError, match=rf"^embedding model '{FAST}' at {host}: {problem}"):
        ingest_documents(engine, DOCS, kb_name, models=[FAST])
    world.server.faults = []
    assert _kb_rows(engine, kb_name) == 0, "nothing of the knowledge base is stored"


def test_a_503_is_asked_again_and_a_slow_or_unreachable_endpoint_is_named(engine, world: World, kb_name) -> None:
    world.server.faults = ["503"]
    asked = world.server.requests
    ingest_documents(engine, DOCS, kb_name, models=[FAST])
    assert world.server.requests == asked + 2 and len(_vectors(engine, kb_name, FAST)) == 3

    add_endpoint_model(engine, "e2e-slow", 512, EmbeddingEndpoint(
        url=world.server.url, model_id="use-m3", headers=[f"Authorization: env:{ENV}"], timeout_s=1.0, retries=0))
    world.server.faults = ["slow:3"]
    with pytest.raises(EmbeddingError, match=r"^embedding model 'e2e-slow' at .*: no complete reply within "
                                             r"--timeout 1 s \(after 1 attempts\)"):
        ingest_documents(engine, DOCS, kb_name + "-slow", models=["e2e-slow"])
    assert _kb_rows(engine, kb_name + "-slow") == 0

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    add_endpoint_model(engine, "e2e-down", 512, EmbeddingEndpoint(
        url=f"http://127.0.0.1:{port}/v1/embeddings", model_id="use-m3", retries=0))
    with pytest.raises(EmbeddingError, match=rf"^embedding model 'e2e-down' at 127.0.0.1:{port}: cannot connect"):
        ingest_documents(engine, DOCS, kb_name + "-down", models=["e2e-down"])
    assert _kb_rows(engine, kb_name + "-down") == 0
    down, up = check_model("e2e-down"), check_model(MODEL)  # doctor / a worker's readiness: the endpoint is asked
    assert down.status == "WARN" and "cannot connect" in down.detail and "embeddings list" in (down.fix or "")
    assert up.status == "OK" and up.detail == "its endpoint answered, 512 dimensions"


def test_a_rejected_token_is_not_repeated_and_an_unset_variable_is_named(engine, world: World, kb_name,
                                                                         monkeypatch) -> None:
    wrong = "Bearer wrong-token-5150"
    monkeypatch.setenv(ENV, wrong)
    with pytest.raises(EmbeddingError, match=f"^embedding model '{FAST}' at .*: HTTP 401") as caught:
        ingest_documents(engine, DOCS, kb_name, models=[FAST])
    assert "wrong-token-5150" not in str(caught.value) and "[secret]" in str(caught.value)
    monkeypatch.delenv(ENV)
    with pytest.raises(EmbeddingError, match=f"embedding model '{FAST}': --header Authorization: environment "
                                             f"variable '{ENV}' is not set"):
        ingest_documents(engine, DOCS, kb_name, models=[FAST])
    assert _kb_rows(engine, kb_name) == 0


def test_an_evaluation_whose_endpoint_fails_is_a_failed_run_that_caches_nothing(engine, world: World,
                                                                                 tmp_path) -> None:
    data = json.loads(_demo_dataset(tmp_path).read_text(encoding="utf-8"))
    data["name"] = "endpoint-demo-fails"
    for case in data["cases"]:
        case["question"] += " (asked while the endpoint fails)"
    path = tmp_path / "endpoint-demo-fails.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    dataset = load_dataset(path)
    strategy = get_strategy("hybrid-v1").replace(version="hybrid-v1-e2e-fast", embedding_model=FAST)
    world.server.faults = ["500"] * 12  # every request of the first batch, each asked twice
    with pytest.raises(EmbeddingError, match=rf"embedding model '{FAST}' at .*: HTTP 500"):
        evaluate_dataset(engine, dataset, strategy)
    world.server.faults = []
    with engine.connect() as conn:
        run = conn.execute(sa.text("SELECT status, error FROM retrieval_evaluation_runs WHERE "
                                   "strategy_version = :v"),
                           {"v": strategy.version}).one()
        cached = conn.execute(sa.text("SELECT count(*) FROM question_embeddings WHERE question_hash = ANY(:h)"),
                              {"h": [question_hash(c.question) for c in dataset.cases]}).scalar_one()
    assert run.status == "failed" and f"embedding model '{FAST}'" in run.error
    assert cached == 0


@pytest.mark.parametrize("argv, problem", [
    (["--dimension", "384"], r"exists with another dimension 512 → 384"),
    (["--model", "other"], r"exists with another model id 'use-m3' → 'other'"),
    (["--header", "Authorization: Bearer literal-value-77"], r"--header number 1 \('Authorization'\): a header "
                                                             "value must be env:VARIABLE"),
    (["--url", "http://127.0.0.1:9/v1"], r"--url .*give the whole URL .* e.g. http://127.0.0.1:9/v1/embeddings"),
    (["--url", "http://user:pw@127.0.0.1:9/v1/embeddings"], r"--url holds credentials"),
    (["--url", "http://127.0.0.1:9/v1/embeddings?api-key=literal-value-77"],
     r"--url holds a credential in its query string \(parameter 'api-key'\)"),
    (["--header", "Authorization: env:E2E_NOT_SET_ANYWHERE"], r"environment variable 'E2E_NOT_SET_ANYWHERE' is "
                                                              "not set"),
])
def test_add_endpoint_refuses_what_would_mislabel_vectors_or_store_a_secret(engine, world: World, capsys, argv,
                                                                             problem) -> None:
    base = {"--url": world.server.url, "--model": "use-m3", "--dimension": "512",
            "--header": f"Authorization: env:{ENV}"}
    flags = dict(zip(argv[::2], argv[1::2], strict=True))
    args = [part for flag, value in {**base, **flags}.items() for part in (flag, value)]
    assert main(["embeddings", "add-endpoint", MODEL, *args, "--batch-size", "64", "--concurrency", "1"]) == 2
    err = capsys.readouterr().err
    assert re.search(problem, err), err
    assert "literal-value-77" not in err and "pw@" not in err and SECRET not in err


def test_add_endpoint_again_re_points_and_a_shipped_name_is_refused(engine, world: World, capsys) -> None:
    common = ["--url", world.server.url, "--model", "use-m3", "--dimension", "512", "--header",
              f"Authorization: env:{ENV}", "--batch-size", "64", "--concurrency", "1"]
    assert main(["embeddings", "add-endpoint", MODEL, *common]) == 0
    assert capsys.readouterr().out.startswith(f"unchanged: embedding model {MODEL} ")
    assert main(["embeddings", "add-endpoint", "e2e-use-2", *common, "--timeout", "5"]) == 0
    assert main(["embeddings", "add-endpoint", "e2e-use-2", *common, "--timeout", "7", "--no-check"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("updated: embedding model e2e-use-2 ")
    equals_form = [*common[:-5], f"Authorization=env:{ENV}", *common[-4:], "--timeout", "7"]  # the same header
    assert main(["embeddings", "add-endpoint", "e2e-use-2", *equals_form, "--no-check"]) == 0
    assert capsys.readouterr().out.startswith("unchanged: embedding model e2e-use-2 ")
    assert main(["embeddings", "add-endpoint", DEFAULT_MODEL, *common]) == 2
    assert "is a shipped embedding model" in capsys.readouterr().err
    assert main(["embeddings", "list", "--format", "json"]) == 0
    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert listed[DEFAULT_MODEL]["kind"] == "shipped" and listed["e2e-use-2"]["kind"] == "endpoint"
    assert listed["e2e-use-2"]["headers"] == [f"Authorization: env:{ENV}"]
    with pytest.raises(EmbeddingError, match=r"unknown embedding model 'no-such-model'; known: use-multilingual-v3"
                                             r".*; endpoint models: .*e2e-use"):
        get_embedder("no-such-model")


def test_the_secret_header_value_appears_nowhere(engine, world: World, capsys) -> None:
    with _captured(world):
        assert main(["embeddings", "list"]) == 0
    assert f"Authorization: env:{ENV}" in world.out.getvalue()
    printed = world.out.getvalue() + world.err.getvalue() + "\n".join(world.logs) + str(capsys.readouterr())
    assert SECRET not in printed
    with engine.connect() as conn:
        tables = conn.execute(sa.text("SELECT table_name FROM information_schema.tables WHERE table_schema = "
                                      "'public' AND table_type = 'BASE TABLE'")).scalars().all()
        found = [t for t in tables if conn.execute(sa.text(
            f'SELECT count(*) FROM "{t}" x WHERE strpos(x::text, :s) > 0'), {"s": SECRET}).scalar_one()]
    assert len(tables) > 10 and found == []
