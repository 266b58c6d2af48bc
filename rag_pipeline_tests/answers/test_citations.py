"""Sentence splitting, inline markers and the citation metrics: every undefined case is None with its reason."""

from __future__ import annotations

import pytest

from rag_pipeline.answers.metrics import citation_metrics as cm
from rag_pipeline.answers.metrics.sentences import marker_items, split_sentences

A = "0b9f3a52-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
B = "1c9f3a52-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
C = "2d9f3a52-1c2d-4e5f-8a9b-0c1d2e3f4a5b"


def test_chinese_sentences_keep_their_markers() -> None:
    text = "北京是中国的首都。[1] 上海是最大的城市！【2】他说：“好。”最后一句"
    assert split_sentences(text) == ["北京是中国的首都。[1]", "上海是最大的城市！【2】", "他说：“好。”", "最后一句"]
    assert split_sentences("真的吗？？是的……对；好") == ["真的吗？？", "是的……", "对；", "好"]


def test_english_sentences_decimals_abbreviations_and_markers() -> None:
    text = "Paris is the capital.[1] It costs 3.5 euros, e.g. bread. Done! [2][3]\nSee example.com now"
    assert split_sentences(text) == ["Paris is the capital.[1]", "It costs 3.5 euros, e.g. bread.",
                                     "Done! [2][3]", "See example.com now"]
    assert split_sentences("One. [1]\n[2]") == ["One. [1]\n[2]"]  # a marker on the next line joins the sentence
    assert split_sentences("") == [] and split_sentences("  \n ") == []


def test_marker_forms() -> None:
    assert marker_items(f"a [1, 2] b 【3】 c [{A.upper()}] d [{A}, {B}] e[x] f[12345]") == \
        ["1", "2", "3", A.upper(), A, B]


def _citations(cited, *, grades=None, retrieved=None, kb=None):
    return cm.build_citations(cited, grades=grades or {}, retrieved=retrieved, kb_chunk_ids=kb)


def test_citations_normalise_ids_and_keep_non_uuid_ids_invalid() -> None:
    cited = [f" {A.upper()} ", A, "doc-7", B]
    citations = _citations(cited, grades={A: 2, B: 0}, retrieved=[A, "doc-7"], kb={A, B, C})
    assert [c.chunk_id for c in citations] == [A, "doc-7", B]  # distinct, the non-UUID id kept as given
    first, other, second = citations
    assert (first.is_relevant, first.grade, first.is_retrieved, first.in_knowledge_base, first.is_valid) == \
        (True, 2, True, True, True)
    assert (other.is_relevant, other.is_retrieved, other.in_knowledge_base, other.is_valid) == \
        (False, False, False, False)  # retrieved "doc-7" does not make it a chunk
    assert (second.is_relevant, second.grade, second.is_retrieved, second.is_valid) == (False, 0, False, False)
    assert cm.citation_precision(citations, [A, C]) == (pytest.approx(1 / 3), None)
    assert cm.citation_recall(citations, [A, C], sent=True) == (0.5, None)
    assert cm.citation_validity(citations, retrieved_sent=True, kb_known=True) == (pytest.approx(1 / 3), None)
    in_kb = _citations(cited, grades={A: 2}, kb={A, B})  # no retrieved ids: validity is "in the KB"
    assert [c.is_valid for c in in_kb] == [True, False, True] and in_kb[0].is_retrieved is None
    assert _citations([A])[0].in_knowledge_base is None  # KB ids not given


def test_undefined_citation_metrics_have_reasons() -> None:
    none: list = []
    assert cm.citation_precision(none, [A]) == (None, "no citations")
    assert cm.citation_precision(_citations([A]), []) == (None, "no relevant chunks")
    assert cm.citation_recall(none, [], sent=True) == (None, "no relevant chunks")
    assert cm.citation_recall(none, [A], sent=False) == (None, "no citations sent")
    assert cm.citation_recall(none, [A], sent=True) == (0.0, None)  # an empty list sent: cited nothing
    assert cm.citation_validity(none, retrieved_sent=True, kb_known=True) == (None, "no citations")
    value, reason = cm.citation_validity(_citations([A]), retrieved_sent=False, kb_known=False)
    assert value is None and "no retrieved ids" in reason


def test_sentence_citation_coverage() -> None:
    assert cm.sentence_citation_coverage("A is B. [1] C is D. E is F [2].") == (pytest.approx(2 / 3), None)
    assert cm.sentence_citation_coverage("北京是首都。【1】上海很大。") == (0.5, None)
    assert cm.sentence_citation_coverage("No markers here. None at all.") == (None, "citations not inline")
    assert cm.sentence_citation_coverage("") == (None, "citations not inline")


def test_lexical_support_inline_and_not_inline() -> None:
    text = {A: "The Eiffel Tower is 330 metres tall and stands in Paris.", B: "北京是中华人民共和国的首都。"}
    kwargs = {"ngram": 4, "threshold": 0.6}
    inline = "The Eiffel Tower is 330 metres tall [1]. 北京是中华人民共和国首都【2】。It is 500 metres wide [1]."
    value, reason = cm.lexical_support(inline, [A, B], text, **kwargs)
    # sentence 1: supported; 2: shares 7 of its 9 4-grams (>= 0.6); 3: the number 500 is not in chunk A
    assert (value, reason) == (pytest.approx(2 / 3), None)
    assert cm.lexical_support("The Eiffel Tower is 330 metres tall. Unrelated words entirely here.", [A.upper()],
                              text, **kwargs) == (0.5, None)  # not inline: every sentence against every cited chunk
    assert cm.lexical_support("Stands in Paris [2].", [A, B], text, **kwargs) == (0.0, None)  # cites the wrong one
    uncited = "The Eiffel Tower is 330 metres tall [1]. The Eiffel Tower stands in Paris."
    assert cm.lexical_support(uncited, [A], text, **kwargs) == (0.5, None)  # inline, no marker: unsupported
    assert cm.lexical_support("1,000 people [1].", [C], {C: "about 1000 people came"}, **kwargs) == (1.0, None)


def test_lexical_support_undefined() -> None:
    kwargs = {"ngram": 4, "threshold": 0.6}
    assert cm.lexical_support("Paris.", [A], {}, **kwargs) == (None, "no cited chunk text")
    assert cm.lexical_support("Paris.", None, {A: "Paris"}, **kwargs) == (None, "no cited chunk text")
    assert cm.lexical_support("Paris [9].", [A], {A: "Paris"}, **kwargs) == (None, "no cited chunk text")
    assert cm.lexical_support("。[1]", [A], {A: "Paris"}, **kwargs) == (None, "no sentence with text")
