"""Keyword text: how a knowledge base turns text into a ``tsvector`` and a question into a ``tsquery``.

The text modes (``simple``, ``english``, ``chinese``, ``mixed``) are a knowledge-base setting used by ingestion and
queries alike (docs/design.md §3.1). A question becomes an OR-query over at most :data:`MAX_QUERY_TERMS` lexemes,
built in SQL by :data:`OR_TSQUERY_SQL` (parameterised: operators in a question are text, never parsed)."""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Sequence

from rag_pipeline.contracts.errors import BadInputError

TEXT_SEARCH_MODES = ("simple", "english", "chinese", "mixed")

# ``english`` keeps a CJK word unchanged (its stemmer and stop words only touch Latin letters), so ``mixed`` needs
# no configuration of its own: rag_pipeline_tests/knowledge_base/test_textsearch.py checks this on the server.
_REGCONFIG = {"simple": "simple", "english": "english", "chinese": "simple", "mixed": "english"}
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


# Text-mode check (:func:`text_mode_warning`): CJK ideographs (with extensions and compatibility forms),
# kana and hangul, as a share of the non-space characters of the documents.
_CJK_SCRIPT = re.compile(
    "[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]")
_LATIN = re.compile("[A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f]")
_SPACE = re.compile(r"\s+")
CJK_MOSTLY = 0.30  # above: a mode other than ``chinese``/``mixed`` barely matches (unspaced runs are one token)
CJK_ALMOST_NONE = 0.01  # below: ``chinese`` mode is ``simple`` without stemming, ``english`` would fit
CJK_SOME = 0.05  # from here (and up to CJK_MOSTLY) ``simple``/``english`` miss the Chinese part: ``mixed`` fits
LATIN_SOME = 0.20  # from here, with CJK_ALMOST_NONE or more CJK, ``chinese`` matches English stop words: ``mixed``
SAMPLE_DOCUMENTS = 500
SAMPLE_CHARS = 4000


class TextSearchError(BadInputError, ValueError):
    pass


def regconfig(mode: str) -> str:
    """The Postgres text-search configuration of a mode."""
    try:
        return _REGCONFIG[mode]
    except KeyError:
        raise TextSearchError(f"unknown text-search mode {mode!r}; choose one of "
                              f"{', '.join(TEXT_SEARCH_MODES)}") from None


@functools.cache
def _jieba():
    import jieba  # noqa: PLC0415 - only the chinese mode needs it

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba


def segment(text: str) -> str:
    """Split Chinese runs into words separated by spaces (other text passes through unchanged)."""
    return " ".join(tok for tok in _jieba().cut(text) if tok.strip()) if _CJK.search(text) else text


def segment_cjk_runs(text: str) -> str:
    """Split each run of CJK ideographs into words separated by spaces; the rest of ``text`` is left to the
    Postgres parser (so ``e-mail``, ``3.5`` or an address parse as in ``english`` mode)."""
    if not _CJK.search(text):
        return text
    jieba = _jieba()
    return _CJK_RUN.sub(lambda run: " " + " ".join(jieba.cut(run.group())) + " ", text)


def prepare(mode: str, text: str) -> str:
    """The text handed to ``to_tsvector(regconfig(mode), ...)`` for this mode."""
    regconfig(mode)
    # NUL bytes cannot be stored in Postgres text; other control characters are only whitespace to the parser.
    text = text.replace("\x00", " ")
    if mode == "chinese":
        return segment(text)
    return segment_cjk_runs(text) if mode == "mixed" else text


def script_shares(texts: Sequence[str], *, max_texts: int = SAMPLE_DOCUMENTS,
                  max_chars: int = SAMPLE_CHARS) -> tuple[float, float, int]:
    """(share of CJK characters, share of Latin letters, non-space characters counted) of ``texts``, measured on at most
    ``max_texts`` evenly spaced texts, the first ``max_chars`` characters of each; ``(0.0, 0.0, 0)`` if empty."""
    n = len(texts)
    picked = texts if n <= max_texts else [texts[i * n // max_texts] for i in range(max_texts)]
    cjk = latin = total = 0
    for text in picked:
        head = _SPACE.sub("", text[:max_chars])
        total += len(head)
        cjk += len(_CJK_SCRIPT.findall(head))
        latin += len(_LATIN.findall(head))
    return (cjk / total if total else 0.0), (latin / total if total else 0.0), total


def cjk_share(texts: Sequence[str], *, max_texts: int = SAMPLE_DOCUMENTS,
              max_chars: int = SAMPLE_CHARS) -> tuple[float, int]:
    """(share of CJK characters among the non-space characters, non-space characters counted) of ``texts``
    (:func:`script_shares`)."""
    share, _, total = script_shares(texts, max_texts=max_texts, max_chars=max_chars)
    return share, total


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%" if share >= 0.01 or share == 0 else "<1%"


def text_mode_warning(knowledge_base: str, mode: str, texts: Sequence[str]) -> str | None:
    """A warning naming the fix when the text mode does not fit the script of ``texts``, else None: mostly CJK
    (> 30 %) or some CJK (5-30 %) in ``simple``/``english``; ``chinese`` with almost no CJK (< 1 %) or with 20 % Latin
    letters or more."""
    cjk, latin, counted = script_shares(texts)
    if not counted:
        return None
    kb, scripts = repr(knowledge_base), f"{_pct(cjk)} CJK text"
    if mode in ("simple", "english") and cjk > CJK_MOSTLY:
        fix = "mixed" if latin >= LATIN_SOME else "chinese"
        return (f"knowledge base {kb} is {scripts} but its text mode is {mode!r}: keyword search will barely match "
                f"(an unspaced CJK run is one token); re-create it with --text-search {fix}")
    if mode in ("simple", "english") and cjk >= CJK_SOME:
        return (f"knowledge base {kb} is {scripts} but its text mode is {mode!r}: its Chinese text will barely "
                "match (an unspaced CJK run is one token); re-create it with --text-search mixed")
    if mode == "chinese" and cjk < CJK_ALMOST_NONE:
        return (f"knowledge base {kb} is {scripts} but its text mode is 'chinese': jieba segmentation has nothing to "
                "do and words are not stemmed; re-create it with --text-search english (or simple)")
    if mode == "chinese" and latin >= LATIN_SOME:
        return (f"knowledge base {kb} is {scripts} and {_pct(latin)} Latin letters but its text mode is 'chinese': "
                "English words are not stemmed and English stop words (is, a, the) match; re-create it with "
                "--text-search mixed")
    return None


# The keyword leg of one question uses at most this many distinct lexemes, the first ones in question order
# (then the tsvector's lexeme order): the same for ts_rank_cd and BM25, and a hostile 10,000-character question
# does not OR ~1,500 terms.
MAX_QUERY_TERMS = 64

# The query lexemes of ``to_tsvector(:cfg, :qtext)``: rows ``(lexeme, i)``, ``i`` the lexeme's index in the
# tsvector (its sort order), at most MAX_QUERY_TERMS of them. Written out (no splicing) in
# :data:`OR_TSQUERY_SQL` and in the BM25 leg (:mod:`rag_pipeline.retrieval.bm25_sql`, with ``q.query_text``
# for ``:qtext``); rag_pipeline_tests/retrieval/test_query_limits.py keeps the three copies and the limit equal.
QUERY_LEXEMES_SQL = """(
    SELECT u.lexeme, u.i
    FROM unnest(to_tsvector(CAST(:cfg AS regconfig), :qtext)) WITH ORDINALITY AS u(lexeme, positions, weights, i)
    ORDER BY u.positions[1], u.i
    LIMIT 64
)"""

# Builds an OR tsquery from the query lexemes (:data:`QUERY_LEXEMES_SQL`) in the tsvector's lexeme order: for
# a question of at most MAX_QUERY_TERMS lexemes exactly the tsquery of all of them. NULL when the question has
# none. Each lexeme is quoted ('' for ', \\ for \) so nothing in it is read as a tsquery operator.
OR_TSQUERY_SQL = """(
  SELECT string_agg('''' || replace(replace(ql.lexeme, '\\', '\\\\'), '''', '''''') || '''', ' | '
                    ORDER BY ql.i)::tsquery
  FROM (
    SELECT u.lexeme, u.i
    FROM unnest(to_tsvector(CAST(:cfg AS regconfig), :qtext)) WITH ORDINALITY AS u(lexeme, positions, weights, i)
    ORDER BY u.positions[1], u.i
    LIMIT 64
) AS ql
)"""
