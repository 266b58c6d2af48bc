"""Keyword text modes (simple / english / chinese via jieba) and the parameterised OR tsquery, in real Postgres."""

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
    assert [regconfig(m) for m in textsearch.TEXT_SEARCH_MODES] == ["simple", "english", "simple"]


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
    with pytest.raises(TextSearchError, match="simple, english, chinese"):
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
