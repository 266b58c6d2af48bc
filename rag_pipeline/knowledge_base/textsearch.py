"""Keyword text: how a knowledge base turns text into a ``tsvector`` and a question into a ``tsquery``.

Modes (a knowledge-base setting, used by ingestion *and* by queries — the same path both ways):

- ``simple``  Postgres ``simple`` configuration: lower-cased words, no stemming (the seed's choice).
- ``english`` Postgres ``english`` configuration: Snowball stemming and stop words.
- ``chinese`` text segmented by ``jieba`` (dictionary shipped in the wheel) into space-separated words,
  then ``simple``. Postgres ``simple`` alone keeps a whole unspaced Chinese sentence as one token,
  which the seed lists as a known weakness.

A question becomes an OR-query over its lexemes (built in SQL by :data:`OR_TSQUERY_SQL`, parameterised,
so operators such as ``& | ! ( ) : * <->`` in a question are searched as text, never parsed).
"""

from __future__ import annotations

import functools
import logging
import re

TEXT_SEARCH_MODES = ("simple", "english", "chinese")

_REGCONFIG = {"simple": "simple", "english": "english", "chinese": "simple"}
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


class TextSearchError(ValueError):
    pass


def regconfig(mode: str) -> str:
    """The Postgres text-search configuration of a mode."""
    try:
        return _REGCONFIG[mode]
    except KeyError:
        raise TextSearchError(
            f"unknown text-search mode {mode!r}; choose one of {', '.join(TEXT_SEARCH_MODES)}"
        ) from None


@functools.cache
def _jieba():
    import jieba  # noqa: PLC0415 - only the chinese mode needs it

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba


def segment(text: str) -> str:
    """Split Chinese runs into words separated by spaces (other text passes through unchanged)."""
    if not _CJK.search(text):
        return text
    return " ".join(tok for tok in _jieba().cut(text) if tok.strip())


def prepare(mode: str, text: str) -> str:
    """The text handed to ``to_tsvector(regconfig(mode), ...)`` for this mode."""
    regconfig(mode)
    # NUL bytes cannot be stored in Postgres text; other control characters are only whitespace to the parser.
    text = text.replace("\x00", " ")
    return segment(text) if mode == "chinese" else text


# Builds an OR tsquery from the lexemes of ``to_tsvector(:cfg, :qtext)``; NULL when the question has none.
# Each lexeme is quoted ('' for ', \\ for \) so nothing in it is read as a tsquery operator.
OR_TSQUERY_SQL = """(
  SELECT string_agg('''' || replace(replace(lex, '\\', '\\\\'), '''', '''''') || '''', ' | ')::tsquery
  FROM unnest(tsvector_to_array(to_tsvector(CAST(:cfg AS regconfig), :qtext))) AS lex
)"""
