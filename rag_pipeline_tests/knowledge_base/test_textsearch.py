"""Keyword text modes (simple / english / chinese via jieba / mixed) and the parameterised OR tsquery, in Postgres."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from rag_pipeline.knowledge_base import textsearch
from rag_pipeline.knowledge_base.textsearch import OR_TSQUERY_SQL, TextSearchError, prepare, regconfig, segment

ZH = "差旅报销需要在出差结束后提交"


def test_prepare_per_mode() -> None:
    text = "Running shoes\x00 and 差旅报销"
    assert prepare("simple", text) == "Running shoes  and 差旅报销"
    assert prepare("english", text) == "Running shoes  and 差旅报销"
    zh = prepare("chinese", text)
    assert "\x00" not in zh
    assert zh.split()[:3] == ["Running", "shoes", "and"]
    assert "差旅" in zh.split() and "报销" in zh.split()
    mixed = prepare("mixed", text)
    assert mixed.startswith("Running shoes  and ") and mixed.split()[-2:] == ["差旅", "报销"]
    assert [regconfig(m) for m in textsearch.TEXT_SEARCH_MODES] == ["simple", "english", "simple", "english"]


def test_mixed_segments_only_the_cjk_runs() -> None:
    text = "使用PostgreSQL主库, see e-mail v3.5: how long is a marathon?"
    assert prepare("mixed", text) == " 使用 PostgreSQL 主库 , see e-mail v3.5: how long is a marathon?"
    assert prepare("chinese", text).split()[5:8] == ["e", "-", "mail"], "chinese mode cuts Latin text too"
    assert prepare("mixed", "no Chinese at all") == "no Chinese at all"


def test_chinese_segmentation_splits_words() -> None:
    tokens = prepare("chinese", ZH).split()
    assert "报销" in tokens and "出差" in tokens
    assert "".join(tokens) == ZH  # only spaces were added
    assert len(tokens) >= 5


def test_segment_leaves_text_without_chinese_unchanged() -> None:
    text = "Reset your VPN password, then  reconnect.\n"
    assert segment(text) == text
    assert prepare("chinese", text) == text


@pytest.mark.parametrize("mode", ["", "Chinese", "zh", "german", "jieba"])
def test_unknown_mode_is_an_error(mode: str) -> None:
    with pytest.raises(TextSearchError, match="unknown text-search mode"):
        prepare(mode, "text")
    with pytest.raises(TextSearchError, match="simple, english, chinese, mixed"):
        regconfig(mode)


def _lexemes(conn: sa.Connection, mode: str, text: str) -> list[str]:
    return conn.execute(
        sa.text("SELECT tsvector_to_array(to_tsvector(CAST(:cfg AS regconfig), :t))"),
        {"cfg": regconfig(mode), "t": prepare(mode, text)},
    ).scalar_one()


def test_tsvector_per_mode_in_postgres(engine) -> None:
    with engine.connect() as conn:
        english = _lexemes(conn, "english", "The runners were running to the policies")
        assert "run" in english and "polici" in english
        assert "running" not in english and "the" not in english  # stemmed, stop word dropped
        simple = _lexemes(conn, "simple", "The runners were running")
        assert "running" in simple and "the" in simple and "run" not in simple
        chinese = _lexemes(conn, "chinese", ZH)
        assert {"报销", "出差", "提交"} <= set(chinese)
        # the known weakness of plain `simple`: the whole unspaced sentence is one token
        assert _lexemes(conn, "simple", ZH) == [ZH]


def _or_query(conn: sa.Connection, mode: str, question: str, document: str):
    sql = sa.text(f"SELECT {OR_TSQUERY_SQL}::text AS q, "
                  f"to_tsvector(CAST(:cfg AS regconfig), :doc) @@ {OR_TSQUERY_SQL} AS hit")
    return conn.execute(sql, {"cfg": regconfig(mode), "qtext": prepare(mode, question),
                              "doc": prepare(mode, document)}).one()


HOSTILE = [
    "O'Brien's \\ back\\slash & | ! ( ) : * <-> policy",
    "policy'; DROP TABLE document_chunks; --",
    "policy:* & !(a | b) <2> c",
    "\\'policy\\' ''' \\\\",
    "see http://example.com/a'b\\c?x=1 for the policy",
]


@pytest.mark.parametrize("question", HOSTILE)
def test_or_tsquery_is_safe_and_matches(engine, question: str) -> None:
    with engine.connect() as conn:
        row = _or_query(conn, "english", question, "Our travel policy is strict.")
        assert row.hit is True
        assert "polici" in row.q
        # an unrelated document does not match: the operators were not parsed as a tsquery
        miss = _or_query(conn, "english", question, "Completely unrelated words about lunch.")
        assert miss.hit is False
        assert conn.execute(sa.text("SELECT to_regclass('document_chunks')")).scalar() is not None


def test_or_tsquery_quotes_lexemes_with_apostrophes(engine) -> None:
    question = "open http://example.com/a'b now"
    with engine.connect() as conn:
        row = _or_query(conn, "simple", question, "the link http://example.com/a'b works")
        assert row.hit is True
        assert "''" in row.q  # a lexeme containing a quote was escaped, not cut
        assert _or_query(conn, "simple", question, "nothing in common").hit is False


def test_or_tsquery_is_an_or_over_lexemes(engine) -> None:
    with engine.connect() as conn:
        row = _or_query(conn, "chinese", "出差 以后 怎么 报销", "报销流程见财务手册")
        assert row.hit is True, "one shared word is enough (OR, not AND)"
        assert " | " in row.q and "报销" in row.q
        assert _or_query(conn, "chinese", ZH, "会议室预订规则").hit is False


@pytest.mark.parametrize("question", ["", "   ", "& | ! ( ) <-> :*", "the of and"])
def test_or_tsquery_without_lexemes_is_null(engine, question: str) -> None:
    with engine.connect() as conn:
        q = conn.execute(sa.text(f"SELECT {OR_TSQUERY_SQL}"), {"cfg": "english", "qtext": question}).scalar()
        assert q is None


SOURDOUGH = "# 酸面包\n\n酸面包的发酵时间是 12 小时, a slow rise. 面团 is kept at 24 °C."
MARATHON = "how long is a marathon"


def test_mixed_mode_stems_latin_drops_english_stop_words_and_keeps_chinese_words(engine) -> None:
    with engine.connect() as conn:
        mixed = _lexemes(conn, "mixed", "The runners were running 差旅报销需要在出差结束后提交")
        assert {"run", "差旅", "报销", "出差", "提交"} <= set(mixed)
        assert not {"the", "were", "running", "runners"} & set(mixed)
        for zh in (ZH, "备份数据使用加密，存放在与主库不同的可用区。", "酸面包的发酵时间是十二小时"):  # CJK words kept
            assert sorted(_lexemes(conn, "mixed", zh)) == sorted(_lexemes(conn, "chinese", zh))


def test_english_stop_words_match_in_chinese_mode_but_not_in_mixed(engine) -> None:
    with engine.connect() as conn:
        assert _or_query(conn, "chinese", MARATHON, SOURDOUGH).hit is True, "'is' and 'a' are words in chinese mode"
        row = _or_query(conn, "mixed", MARATHON, SOURDOUGH)
        assert row.hit is False and row.q == "'long' | 'marathon'"
        assert _or_query(conn, "mixed", "酸面包要发酵多久", SOURDOUGH).hit is True
        assert _or_query(conn, "mixed", "marathons", "a marathon is 42 km").hit is True, "stemmed on both sides"


# --- text mode vs script of the documents (pure) ---

EN = "Submit every expense report within thirty days and attach the original receipts."
JA = "経費精算は出張後三十日以内に提出してください。領収書の原本が必要です。"
KO = "출장 후 삼십 일 이내에 경비 보고서를 제출하십시오."


def test_cjk_share_counts_ideographs_kana_and_hangul_among_non_space_characters() -> None:
    assert textsearch.cjk_share([ZH]) == (1.0, len(ZH))
    assert textsearch.cjk_share([EN]) == (0.0, len(EN.replace(" ", "")))
    share, n = textsearch.cjk_share(["差旅 ab", "  \n"])
    assert (share, n) == (0.5, 4), "spaces are not counted, CJK punctuation and Latin count as non-CJK"
    assert textsearch.cjk_share([JA])[0] > 0.9  # kanji + kana; only 。 is not counted as CJK
    assert textsearch.cjk_share([KO])[0] > 0.9
    assert textsearch.cjk_share(["\U00020000\U0002a6d6"])[0] == 1.0, "extension B ideographs (outside the BMP)"
    assert textsearch.cjk_share([]) == (0.0, 0) and textsearch.cjk_share(["", " \t"]) == (0.0, 0)


def test_cjk_share_samples_a_large_corpus() -> None:
    texts = [ZH if (i // 100) % 2 else EN for i in range(10_000)]  # texts 0, 100, 200, ... are measured
    share, counted = textsearch.cjk_share(texts, max_texts=100)
    assert share == pytest.approx(50 * len(ZH) / counted)
    assert counted == 50 * len(ZH) + 50 * len(EN.replace(" ", "")), "100 evenly spaced texts, half of each"
    assert textsearch.cjk_share(["差" * 10 + "a" * 10_000], max_chars=20) == (0.5, 20), "only the head of a text"


@pytest.mark.parametrize("mode", ["simple", "english"])
def test_mostly_cjk_text_in_another_mode_warns_with_the_fix(mode: str) -> None:
    texts = [ZH] * 20 + [EN]  # 280 CJK, 68 Latin letters of 349 non-space characters
    warning = textsearch.text_mode_warning("zh-kb", mode, texts)
    assert warning is not None
    assert warning.startswith(f"knowledge base 'zh-kb' is 80% CJK text but its text mode is '{mode}': keyword search "
                              "will barely match")
    assert warning.endswith("re-create it with --text-search chinese")
    assert textsearch.text_mode_warning("ja-kb", mode, [JA]) is not None
    assert textsearch.text_mode_warning("zh-kb", "chinese", texts) is None
    assert textsearch.text_mode_warning("zh-kb", "mixed", texts) is None
    bilingual = textsearch.text_mode_warning("zh-kb", mode, [ZH] * 5 + [EN])  # 50% CJK, 49% Latin letters
    assert bilingual is not None and " is 50% CJK text " in bilingual and bilingual.endswith("--text-search mixed")


def test_almost_no_cjk_in_chinese_mode_warns_with_the_fix() -> None:
    warning = textsearch.text_mode_warning("en-kb", "chinese", [EN] * 5)
    assert warning == ("knowledge base 'en-kb' is 0% CJK text but its text mode is 'chinese': jieba segmentation has "
                       "nothing to do and words are not stemmed; re-create it with --text-search english (or simple)")
    one_char = textsearch.text_mode_warning("en-kb", "chinese", [EN * 2 + "差"])
    assert one_char is not None and " is <1% CJK text" in one_char
    assert textsearch.text_mode_warning("en-kb", "english", [EN]) is None
    assert textsearch.text_mode_warning("en-kb", "simple", [EN]) is None
    assert textsearch.text_mode_warning("en-kb", "mixed", [EN]) is None, "mixed without CJK is english"


def test_bilingual_text_warns_in_every_mode_but_mixed() -> None:
    texts = [ZH] * 3 + [EN] * 3  # 42 CJK, 204 Latin letters of 249 non-space characters
    assert textsearch.text_mode_warning("kb", "chinese", texts) == (
        "knowledge base 'kb' is 17% CJK text and 82% Latin letters but its text mode is 'chinese': English words are "
        "not stemmed and English stop words (is, a, the) match; re-create it with --text-search mixed")
    for mode in ("simple", "english"):
        assert textsearch.text_mode_warning("kb", mode, texts) == (
            f"knowledge base 'kb' is 17% CJK text but its text mode is '{mode}': its Chinese text will barely match "
            "(an unspaced CJK run is one token); re-create it with --text-search mixed")
    assert textsearch.text_mode_warning("kb", "mixed", texts) is None
    assert textsearch.script_shares(["差旅 ab,", "é1"]) == (2 / 7, 3 / 7, 7), "accented letters are Latin"


def test_thresholds() -> None:
    def text(cjk: int, latin: int, other: int = 0) -> list[str]:
        return ["差" * cjk + "a" * latin + "1" * other]

    assert textsearch.text_mode_warning("kb", "english", text(4, 96)) is None, "under 5% CJK"
    assert textsearch.text_mode_warning("kb", "english", text(5, 95)) is not None
    assert textsearch.text_mode_warning("kb", "english", text(31, 69)) is not None
    assert textsearch.text_mode_warning("kb", "chinese", text(80, 19, 1)) is None, "under 20% Latin letters"
    assert textsearch.text_mode_warning("kb", "chinese", text(80, 20)) is not None
    assert "english (or simple)" in textsearch.text_mode_warning("kb", "chinese", text(1, 199))
    assert "mixed" in textsearch.text_mode_warning("kb", "chinese", text(1, 99)), "1% is not less than 1%"
    for mode in textsearch.TEXT_SEARCH_MODES:  # no text at all says nothing
        assert textsearch.text_mode_warning("kb", mode, ["", "   "]) is None
