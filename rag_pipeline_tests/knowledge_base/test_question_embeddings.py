"""Question vectors are embedded once per model: a second strategy on the same dataset reuses every one
(question-embedding time ≈ 0, the summary and the report say so) and gets the very same vectors."""

from __future__ import annotations

import json
import uuid

import numpy as np
import sqlalchemy as sa

from rag_pipeline.cli import main
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.knowledge_base.embedding import get_embedder
from rag_pipeline.knowledge_base.question_embeddings import QuestionVectors, question_hash
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, write_dataset


def test_a_second_strategy_reuses_every_question_vector(engine, kb_name, tmp_path, capsys):
    chunks = ingest_tiny_kb(engine, kb_name, tmp_path / "docs")
    tag = uuid.uuid4().hex[:8]  # questions no other test stored
    cases = [{"case_id": f"q{i}", "question": f"question {i} about backups and coffee {tag}", "k": 3,
              "relevant_chunk_ids": [chunks["backup.md"]]} for i in range(60)]
    dataset = load_dataset(write_dataset(tmp_path / "d.json", kb_name, cases, name=f"qe-{tag}"))
    first = evaluate_dataset(engine, dataset, get_strategy("vector-v1"), batch_size=16)
    second = evaluate_dataset(engine, dataset, get_strategy("hybrid-v1"), batch_size=16)
    keyword = evaluate_dataset(engine, dataset, get_strategy("keyword-v1"), batch_size=16)
    assert first.summary.question_embeddings == {"reused": 0, "embedded": 60}
    assert second.summary.question_embeddings == {"reused": 60, "embedded": 0}
    assert keyword.summary.question_embeddings is None, "no vector leg, no question vectors"
    assert first.timings["embedding_s"] > 0  # the second embedded nothing: its counts above say so, not a clock

    embedder = get_embedder("use-multilingual-v3")
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT embedding FROM question_embeddings WHERE model = :m AND "
                                      "question_hash = :h"), {"m": embedder.name,
                                                              "h": question_hash(cases[7]["question"])}).scalar_one()
    stored = np.asarray(stored.to_numpy() if hasattr(stored, "to_numpy") else stored, dtype=np.float32)  # pgvector's
    # the same vector up to float noise of the batch it was embedded in (alone here, in a batch of 16 there)
    np.testing.assert_allclose(stored, embedder.embed([cases[7]["question"]])[0], atol=1e-6)
    cache = QuestionVectors(engine, embedder)
    again = cache.vectors([cases[7]["question"], cases[7]["question"], f"new {tag}"])
    assert cache.summary() == {"reused": 2, "embedded": 1}
    np.testing.assert_array_equal(again[0], stored)  # read back in binary: the same float32 values

    assert main(["show", second.run_id, "--candidates", "none"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["question_embeddings"] == {"reused": 60, "embedded": 0}
