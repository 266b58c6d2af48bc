"""The baseline answerer extractive-v1: sentence splitting, term overlap, the choice and refusal rules, and the
real answerer over the ingested demo knowledge base (retrieval with the default strategy)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from rag_pipeline.answers.collection import extractive
from rag_pipeline.answers.collection.answerers import AnswererError, get_answerer
from rag_pipeline.answers.collection.extractive import REFUSAL_PHRASES, choose, language, split_sentences, terms
from rag_pipeline.evaluation.datasets.load import EvaluationCase, load_dataset
from rag_pipeline.knowledge_base.chunk_lookup import chunks_by_ids
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError
from rag_pipeline.knowledge_base.sources import read_folder
from rag_pipeline.retrieval.strategies import StrategyError, get_strategy

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "demo" / "answerer-train.yaml"


def test_split_sentences_chinese_and_english() -> None:
    zh = "正式员工每年享有 25 天带薪年假。未休完的年假最多可结转 5 天！真的吗？是的"
    assert split_sentences(zh) == ["正式员工每年享有 25 天带薪年假。", "未休完的年假最多可结转 5 天！",
                                   "真的吗？", "是的"]
    en = "# Laptop Policy\n\nLaptops are replaced every three years. Version 2.5 is out!\n- Return it within 14 days"
    assert split_sentences(en) == ["Laptops are replaced every three years.", "Version 2.5 is out!",
                                   "Return it within 14 days"]
    assert split_sentences("") == []


def test_terms_bigrams_for_chinese_words_for_latin() -> None:
    assert terms("年假结转") == {"年假", "假结", "结转"}
    assert terms("What is the Redis TTL?") == {"redis", "ttl"}
    assert terms("Redis 缓存，ＴＴＬ 15 分钟") == {"redis", "缓存", "ttl", "15", "分钟"}
    assert terms("假") == {"假"}


def test_language() -> None:
    assert language("今年的年假没休完可以留到明年吗？") == "zh"
    assert language("Redis 缓存如何设置过期时间？") == "zh"
    assert language("How long is the SSO session?") == "en"


def test_choose_best_sentences_in_text_order_at_most_two() -> None:
    chunks = [("c1", "Cats sleep a lot. The hotel limit is 150 EUR per night."),
              ("c2", "In London the hotel limit per night is 220 EUR. Dogs bark.")]
    picked = choose("What is the hotel limit per night?", chunks, 0.9, max_sentences=2, refusal_threshold=0.5)
    assert not picked.refused
    assert picked.sentences == ("The hotel limit is 150 EUR per night.",
                                "In London the hotel limit per night is 220 EUR.")
    assert picked.chunk_ids == ("c1", "c2")
    one = choose("What is the hotel limit per night?", chunks, 0.9, max_sentences=1, refusal_threshold=0.5)
    assert one.sentences == ("The hotel limit is 150 EUR per night.",) and one.chunk_ids == ("c1",)


def test_choose_refuses_below_threshold_and_without_overlap() -> None:
    chunks = [("c1", "The hotel limit is 150 EUR per night.")]
    low = choose("hotel limit?", chunks, 0.29, max_sentences=2, refusal_threshold=0.3)
    assert low.refused and low.sentences == () and "0.29" in low.reason
    assert choose("hotel limit?", chunks, 0.3, max_sentences=2, refusal_threshold=0.3).refused is False
    assert choose("chocolate cake recipe?", chunks, 0.9, max_sentences=2, refusal_threshold=0.3).refused
    assert choose("hotel limit?", [], None, max_sentences=2, refusal_threshold=0.3).refused


def test_train_set_is_balanced_answers_in_the_kb_and_apart_from_the_test_cases() -> None:
    spec = yaml.safe_load(TRAIN.read_text(encoding="utf-8"))
    cases = spec["cases"]
    docs = {d.original_name: d.text for d in read_folder(ROOT / "demo" / "kb")}
    assert len(cases) >= 16 and sum(c["answerable"] for c in cases) == len(cases) // 2
    test_questions = {c["question"] for c in json.loads((ROOT / "datasets" / "demo.json").read_text())["cases"]}
    assert not test_questions & {c["question"] for c in cases}
    assert {language(c["question"]) for c in cases} == {"zh", "en"}
    for case in cases:
        if case["answerable"]:
            quote = case["evidence"]["quote"]
            assert docs[case["evidence"]["doc"]].count(quote) == 1, case["case_id"]
            assert any(ref in quote for ref in case["reference_answers"]), case["case_id"]


def _demo_cases(*case_ids: str) -> list[EvaluationCase]:
    cases = {c.case_id: c for c in load_dataset(ROOT / "datasets" / "demo.json").cases}
    return [cases[i] for i in case_ids]


def test_answers_demo_cases_with_a_sentence_of_a_relevant_chunk(engine, demo_kb) -> None:
    answerer = get_answerer("extractive-v1", engine=engine, knowledge_base=demo_kb)
    cases = _demo_cases("ci-flaky-tests-001", "caching-redis-ttl-001", "leave-annual-days-001")
    records = list(answerer.answer_cases(cases))
    assert [r.case_id for r in records] == [c.case_id for c in cases]
    expected = {"ci-flaky-tests-001": "three flaky runs in seven days", "caching-redis-ttl-001": "15 分钟",
                "leave-annual-days-001": "25 天带薪年假"}
    for case, record in zip(cases, records, strict=True):
        assert record.status == "ok" and record.refused is False and record.answerer == answerer.identity
        assert expected[case.case_id] in record.answer
        assert set(record.cited_chunk_ids) & set(case.relevant_chunk_ids), case.case_id
        assert record.retrieved_chunk_ids and len(record.retrieved_chunk_ids) <= case.k
        assert set(record.cited_chunk_ids) <= set(record.retrieved_chunk_ids[:extractive.DEFAULT_TOP_N])
        with engine.connect() as conn:
            cited = " ".join(row.text for row in chunks_by_ids(conn, record.cited_chunk_ids).values())
        sentences = split_sentences(record.answer)
        assert 1 <= len(sentences) <= 2
        assert all(sentence in cited for sentence in sentences), record.answer
        assert record.latency_ms is not None and record.latency_ms > 0


def test_refuses_off_topic_questions_in_their_language(engine, demo_kb) -> None:
    cases = [EvaluationCase("off-en", "Which football club won the 1998 world cup final?", (), 5),
             EvaluationCase("off-zh", "北京烤鸭的正宗做法是什么？", (), 5)]
    records = list(get_answerer("extractive-v1", engine=engine, knowledge_base=demo_kb).answer_cases(cases))
    assert [r.refused for r in records] == [True, True]
    assert [r.answer for r in records] == [REFUSAL_PHRASES["en"], REFUSAL_PHRASES["zh"]]
    assert all(r.cited_chunk_ids == [] and r.retrieved_chunk_ids for r in records)


def test_output_is_deterministic(engine, demo_kb) -> None:
    cases = list(load_dataset(ROOT / "datasets" / "demo.json").cases)
    runs = [[r.model_dump(exclude={"latency_ms"}) for r in
             get_answerer("extractive-v1", engine=engine, knowledge_base=demo_kb, batch_size=size).answer_cases(cases)]
            for size in (64, 64, 7)]
    assert runs[0] == runs[1] == runs[2]
    assert any(r["refused"] for r in runs[0]) and any(not r["refused"] for r in runs[0])


def test_identity_is_name_and_params_hash(engine, demo_kb) -> None:
    def identity(**kw) -> str:
        return get_answerer("extractive-v1", engine=engine, knowledge_base=demo_kb, **kw).identity

    base = identity()
    assert base.startswith("extractive-v1@") and len(base) == len("extractive-v1@") + 12
    assert identity(strategy="hybrid-v1", refusal_threshold=extractive.DEFAULT_REFUSAL_THRESHOLD) == base
    assert identity(batch_size=3) == base  # batching changes no answer
    changed = {identity(top_n=2), identity(max_sentences=1), identity(refusal_threshold=0.1),
               identity(strategy="bm25-v1"),
               identity(strategy=get_strategy("hybrid-v1").replace(version="hybrid-x", final_top_k=9))}
    assert base not in changed and len(changed) == 5


def test_bad_names_and_params_are_clear_errors(engine, demo_kb) -> None:
    with pytest.raises(AnswererError, match="unknown answerer 'nope'; known answerers: extractive-v1"):
        get_answerer("nope", engine=engine, knowledge_base=demo_kb)
    with pytest.raises(AnswererError, match="top_n must be a positive integer"):
        get_answerer("extractive-v1", engine=engine, knowledge_base=demo_kb, top_n=0)
    with pytest.raises(AnswererError, match="refusal_threshold must be a finite number, got inf"):
        get_answerer("extractive-v1", engine=engine, knowledge_base=demo_kb, refusal_threshold=float("inf"))
    with pytest.raises(AnswererError, match="temperature"):
        get_answerer("extractive-v1", engine=engine, knowledge_base=demo_kb, temperature=0)
    with pytest.raises(StrategyError, match="unknown strategy version 'nope'"):
        get_answerer("extractive-v1", engine=engine, knowledge_base=demo_kb, strategy="nope")
    with pytest.raises(KnowledgeBaseError, match="unknown knowledge base 'no-such-kb'"):
        get_answerer("extractive-v1", engine=engine, knowledge_base="no-such-kb").answer_cases([])


def test_default_threshold_is_the_one_the_train_split_chooses(engine, demo_kb) -> None:
    spec = importlib.util.spec_from_file_location("answerer_threshold", ROOT / "bench" / "answerer_threshold.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    chosen, curve = bench.choose_threshold(*bench.measure(engine, get_strategy("hybrid-v1"), TRAIN))
    assert chosen == pytest.approx(extractive.DEFAULT_REFUSAL_THRESHOLD, abs=1e-3)
    assert max(acc for _t, acc, _gap in curve) > 0.5  # better than always answering or always refusing
