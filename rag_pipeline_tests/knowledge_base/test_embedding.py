"""Both real embedding backends: dimension, dtype, unit norm, determinism, paraphrase ranking."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL, EMBEDDING_MODELS, EmbeddingError, get_embedder

DIMENSIONS = {"use-multilingual-v3": 512, "all-minilm-l6-v2": 384}
# MiniLM loads torch and its model once per process: every test sharing that cost is marked, or
# `make test-fast` would only move it to the next one
MODELS = ["use-multilingual-v3", pytest.param("all-minilm-l6-v2", marks=pytest.mark.slow)]

EN = ("How do I get reimbursed for travel expenses?",
      "What is the process for claiming back money spent on a business trip?",
      "The cat sat quietly on the warm windowsill.")
ZH = ("出差费用怎么报销？", "出差回来以后如何申请报销差旅费？", "今天晚上的月亮又圆又亮。")


def test_registry() -> None:
    assert DEFAULT_MODEL == "use-multilingual-v3"
    assert set(DIMENSIONS) <= set(EMBEDDING_MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_dimension_dtype_norm_determinism(name: str) -> None:
    emb = get_embedder(name)
    assert emb.name == name and emb.dimension == DIMENSIONS[name]
    assert get_embedder(name) is emb  # loaded once per process
    texts = [*EN, *ZH, "", "   "]
    vectors = emb.embed(texts)
    assert vectors.shape == (len(texts), DIMENSIONS[name])
    assert vectors.dtype == np.float32
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    again = emb.embed(texts)
    np.testing.assert_allclose(again, vectors, atol=1e-6)
    # batching does not change a text's vector
    np.testing.assert_allclose(emb.embed_one(EN[0]), vectors[0], atol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_batches_and_progress(name: str) -> None:
    emb = dataclasses.replace(get_embedder(name), batch_size=2)
    texts = [f"sentence number {i} about policy {i % 7}" for i in range(5)]
    seen: list[int] = []
    vectors = emb.embed(texts, progress=seen.append)
    assert seen == [2, 2, 1]
    assert vectors.shape == (len(texts), emb.dimension)
    whole = get_embedder(name).embed(texts)  # one batch of 64
    np.testing.assert_allclose(vectors, whole, atol=1e-5)
    assert emb.embed([]).shape == (0, emb.dimension)


def _ranks_paraphrase_first(name: str, query: str, paraphrase: str, unrelated: str) -> tuple[float, float]:
    q, p, u = get_embedder(name).embed([query, paraphrase, unrelated])
    return float(q @ p), float(q @ u)


@pytest.mark.parametrize("name", MODELS)
def test_english_paraphrase_ranks_above_unrelated(name: str) -> None:
    para, unrelated = _ranks_paraphrase_first(name, *EN)
    assert para > unrelated + 0.2, (para, unrelated)


def test_use_chinese_paraphrase_ranks_above_unrelated() -> None:
    para, unrelated = _ranks_paraphrase_first("use-multilingual-v3", *ZH)
    assert para > unrelated + 0.2, (para, unrelated)


def test_use_cross_lingual_pair() -> None:
    # English question, Chinese paraphrase vs Chinese unrelated sentence (and the other way round)
    para, unrelated = _ranks_paraphrase_first("use-multilingual-v3", EN[0], ZH[1], ZH[2])
    assert para > unrelated + 0.2, (para, unrelated)
    para, unrelated = _ranks_paraphrase_first("use-multilingual-v3", ZH[0], EN[1], EN[2])
    assert para > unrelated + 0.2, (para, unrelated)


@pytest.mark.parametrize("name", ["", "use multilingual v3", "text/embedding", "-use", "中文模型"])
def test_unknown_model(name: str) -> None:
    """No model name: refused without the database (a registered endpoint model's name is looked up there:
    test_endpoint_embeddings.py)."""
    with pytest.raises(EmbeddingError, match="unknown embedding model .*known: use-multilingual-v3"):
        get_embedder(name)
