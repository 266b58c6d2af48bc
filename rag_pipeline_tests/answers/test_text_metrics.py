"""EM / F1 / containment equal the official SQuAD v2.0 and CMRC 2018 scripts (the oracle in
``official_scripts.py``) to 1e-9, on their kind of data and on random generated pairs."""

from __future__ import annotations

import random

import pytest

from rag_pipeline.answers.metrics.text_metrics import (
    answer_contains,
    cmrc_segments,
    exact_match,
    f1,
    is_mostly_cjk,
    key_point_recall,
    longest_common_run,
)
from rag_pipeline_tests.answers import official_scripts as oracle

SQUAD_PAIRS = [  # (prediction, references)
    ("Denver Broncos", ["Denver Broncos", "The Denver Broncos"]),
    ("the Broncos", ["Denver Broncos"]),
    ("Carolina Panthers!", ["Carolina Panthers"]),
    ("Saint Bernadette Soubirous", ["Saint Bernadette Soubirous"]),
    ("a copper statue of Christ", ["a copper statue of Christ", "Christ"]),
    ("In 1879, the 2nd year.", ["1879"]),
    ("$3.5 million", ["3.5 million dollars", "$3.5m"]),
    ("It's O'Neil's (mostly).", ["O'Neil", "oneils"]),
    ("", ["Paris"]),
    ("", ["the", "a"]),  # every gold normalises to nothing: the gold is ""
    ("an", ["The"]),
    ("Paris", ["the", "Paris"]),  # "the" is dropped as the official script drops it
    ("THE   QUICK\tbrown fox", ["quick brown fox", "fox"]),
    ("the the the", ["the cat"]),
    ("cat cat cat dog", ["cat dog dog"]),
    ("Newton's laws of motion", ["Newton’s laws"]),  # a curly apostrophe is no ASCII punctuation
    ("—", ["-"]),
    ("100", ["one hundred"]),
]
CMRC_PAIRS = [
    ("北京", ["北京"]),
    ("北京市", ["北京"]),
    ("中国的首都是北京。", ["北京", "北京市"]),
    ("《红楼梦》", ["红楼梦"]),
    ("1998年", ["1998年", "一九九八年"]),
    ("在2008年北京奥运会上", ["2008年北京奥运会"]),
    ("iPhone 15 Pro发布会", ["iPhone 15发布会"]),
    ("“三国演义”，罗贯中著", ["《三国演义》", "罗贯中"]),
    ("约3.5万人", ["3.5万人"]),
    ("", ["上海"]),
    ("上海上海上海", ["上海"]),
    ("他是——鲁迅……", ["鲁迅"]),  # "——" and "…" are not in the script's list ("……" is two characters)
    ("Deep Learning（深度学习）", ["深度学习"]),
    ("ＡＢＣ公司", ["ABC公司"]),  # full-width Latin letters are not normalised by the script
    ("十二、三个", ["十二三个"]),
    ("答：是的！", ["是的"]),
    ("第一章 总则", ["第一章总则"]),  # a space is a token boundary, not removed for EM
]
ZH_CHARS = list("北京上海中国的首都是年月日人大学发布会三国演义鲁迅红楼梦")
EN_WORDS = ["the", "a", "an", "Paris", "city", "of", "light", "1879", "3.5", "O'Neil", "U.S.", "don't", "cat",
            "Dog", "x-ray", "e-mail", "New", "York", "is"]
PUNCT = list("，。：？！“”；’《》·、「」（）－～『』-:_*^/\\~`+=.,!?'\"()… ") + ["……", "——"]


def _oracle_squad(prediction, references):
    return oracle.squad_scores(references, prediction)


def _oracle_cmrc(prediction, references):
    return oracle.calc_em_score(references, prediction), oracle.calc_f1_score(references, prediction)


@pytest.mark.parametrize(("prediction", "references"), SQUAD_PAIRS)
def test_squad_pairs_equal_the_official_script(prediction, references) -> None:
    assert not any(is_mostly_cjk(r) for r in references)
    em, score = _oracle_squad(prediction, references)
    assert exact_match(prediction, references) == em
    assert f1(prediction, references) == pytest.approx(score, abs=1e-9)


@pytest.mark.parametrize(("prediction", "references"), CMRC_PAIRS)
def test_cmrc_pairs_equal_the_official_script(prediction, references) -> None:
    assert all(is_mostly_cjk(r) for r in references)
    em, score = _oracle_cmrc(prediction, references)
    assert exact_match(prediction, references) == em
    assert f1(prediction, references) == pytest.approx(score, abs=1e-9)


def _random_text(rng: random.Random, zh: bool) -> str:
    parts = []
    for _ in range(rng.randint(0, 12)):
        roll = rng.random()
        if roll < 0.2:
            parts.append(rng.choice(PUNCT))
        elif zh and roll < 0.8:
            parts.append("".join(rng.choices(ZH_CHARS, k=rng.randint(1, 4))))
        else:
            parts.append(rng.choice(EN_WORDS) + rng.choice(["", " ", " ", ","]))
    return "".join(parts) if zh else " ".join(parts)


def test_random_pairs_equal_the_official_scripts() -> None:
    rng = random.Random(20260302)
    checked = {"cmrc": 0, "squad": 0}
    for _ in range(600):
        zh = rng.random() < 0.5
        references = [_random_text(rng, zh) for _ in range(rng.randint(1, 3))]
        references = [r for r in references if is_mostly_cjk(r) == zh] or (["北京"] if zh else ["Paris"])
        prediction = _random_text(rng, zh) if rng.random() < 0.8 else rng.choice(references) + rng.choice(PUNCT)
        em, score = (_oracle_cmrc if zh else _oracle_squad)(prediction, references)
        assert exact_match(prediction, references) == em, (prediction, references)
        assert f1(prediction, references) == pytest.approx(score, abs=1e-9), (prediction, references)
        checked["cmrc" if zh else "squad"] += 1
    assert min(checked.values()) > 200, checked


def test_segmentation_equals_mixed_segmentation() -> None:
    rng = random.Random(7)
    for _ in range(300):
        text = _random_text(rng, True)
        assert list(cmrc_segments(text)) == oracle.mixed_segmentation(text, rm_punc=True), text


def test_longest_common_run_equals_find_lcs_on_random_token_lists() -> None:
    rng = random.Random(11)
    for _ in range(400):
        alphabet = rng.choice([list("ab"), list("abcde"), ZH_CHARS])
        a = rng.choices(alphabet, k=rng.randint(0, 40))
        b = rng.choices(alphabet, k=rng.randint(0, 40))
        assert longest_common_run(a, b) == oracle.find_lcs(a, b)[1], (a, b)
    long_a, long_b = rng.choices(ZH_CHARS, k=300), rng.choices(ZH_CHARS, k=200)
    assert longest_common_run(long_a, long_b) == oracle.find_lcs(long_a, long_b)[1]


def test_mixed_references_each_take_their_own_rule() -> None:
    references = ["北京", "Beijing"]
    assert f1("Beijing city", references) == pytest.approx(oracle.compute_f1("Beijing", "Beijing city"))
    assert f1("北京市", references) == pytest.approx(oracle.calc_f1_score(["北京"], "北京市"))
    assert exact_match("beijing.", references) == 1.0


def test_mostly_cjk_rule() -> None:
    assert is_mostly_cjk("北京") and is_mostly_cjk("2018年") and is_mostly_cjk("iPhone 15 发布会")
    assert is_mostly_cjk("the 北京 Olympics")  # 2 of 4 units: half counts
    assert not is_mostly_cjk("The Beijing Olympics 北京") and not is_mostly_cjk("") and not is_mostly_cjk("。！")


def test_answer_contains_and_key_points() -> None:
    assert answer_contains("The capital of France is Paris.", ["paris"]) == 1.0
    assert answer_contains("Parisian cafés", ["Paris"]) == 0.0  # whole tokens for a Latin reference
    assert answer_contains("中国的首都是 北京 。", ["北京"]) == 1.0
    assert answer_contains("上海", ["北京", "南京"]) == 0.0
    # Latin inside Chinese text, where nothing separates the words by spaces (a demo case)
    answer = "向量列使用 HNSW 索引，参数为 m = 16、ef_construction = 200，距离度量为余弦距离。"
    assert answer_contains(answer, ["参数为 m = 16、ef_construction = 200"]) == 1.0
    assert key_point_recall(answer, ["m = 16", "ef_construction = 200", "m = 32"]) == pytest.approx(2 / 3)
    assert answer_contains("最多 160 天", ["16 天"]) == 0.0  # whole units: 16 is not in 160
    assert answer_contains("ＨＮＳＷ 索引", ["hnsw"]) == 1.0  # NFKC: full-width letters
    assert key_point_recall("首都是北京，人口两千万", ["北京", "两千万", "故宫"]) == pytest.approx(2 / 3)
    assert key_point_recall("founded in 1879 by Edison", ["1879", "Edison", "Tesla", "light bulb"]) == 0.5


def test_empty_reference_lists_are_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        f1("x", [])
    with pytest.raises(ValueError, match="non-empty"):
        exact_match("x", "x")  # a bare string is not a list of references
    with pytest.raises(ValueError, match="non-empty"):
        key_point_recall("x", [])
