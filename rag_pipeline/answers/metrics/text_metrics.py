"""Answer text against reference answers (docs/design.md §12.3): under the ``cmrc`` convention by the CMRC 2018
script's rules, under ``squad`` by SQuAD v2.0's, under ``auto`` (or None) a mostly-CJK reference by CMRC's and any
other by SQuAD's (``nltk.word_tokenize`` with ``preserve_line=True``: no download)."""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence
from difflib import SequenceMatcher
from functools import lru_cache

CMRC_PUNCTUATION = frozenset(['-', ':', '_', '*', '^', '/', '\\', '~', '`', '+', '=',
                              '，', '。', '：', '？', '！', '“', '”', '；', '’', '《', '》', '……', '·', '、',
                              '「', '」', '（', '）', '－', '～', '『', '』'])
"""The CMRC script's ``sp_char``, as it is; ``'……'`` is two characters, so it never matches one character."""
_CMRC_CJK = re.compile("[\u4e00-\u9fa5]")
_CMRC_PIECE = re.compile("[\u4e00-\u9fa5]+|[^\u4e00-\u9fa5]+")
_CMRC_DELETE = str.maketrans(dict.fromkeys((c for c in CMRC_PUNCTUATION if len(c) == 1), None))
_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_UNIT = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[^\\W\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_SQUAD_DELETE = str.maketrans(dict.fromkeys(string.punctuation))
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


@lru_cache(maxsize=65536)
def is_mostly_cjk(text: str) -> bool:
    """Whether Han characters are at least half of ``text``'s units (a Han character, or a run of other word
    characters): ``"2018年"`` is, ``"The Beijing Olympics 北京"`` is not."""
    if text.isascii():  # no Han character in it
        return False
    units = _UNIT.findall(text)
    return bool(units) and 2 * sum(1 for u in units if _HAN.fullmatch(u)) >= len(units)


# --- SQuAD v2.0 -------------------------------------------------------------------------------------------

@lru_cache(maxsize=65536)
def squad_normalize(text: str) -> str:
    """SQuAD v2.0 ``normalize_answer``: lower-case, ASCII punctuation removed (each character, as the script's
    ``ch not in exclude``), a/an/the removed, spaces collapsed. Cached: a case's references are normalised by
    every metric."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_SQUAD_DELETE)).split())


@lru_cache(maxsize=65536)
def _squad_tokens(text: str) -> tuple[int, Counter[str]]:
    """The number of ``normalize_answer(text).split()`` tokens and their counts (read only: shared by the cache)."""
    tokens = squad_normalize(text).split()
    return len(tokens), Counter(tokens)


def _squad_f1(reference: str, prediction: str) -> float:
    (n_gold, gold), (n_pred, pred) = _squad_tokens(reference), _squad_tokens(prediction)
    if not n_gold or not n_pred:
        return float(n_gold == n_pred)
    same = sum((gold & pred).values())
    if same == 0:
        return 0.0
    precision, recall = same / n_pred, same / n_gold
    return (2 * precision * recall) / (precision + recall)


# --- CMRC 2018 --------------------------------------------------------------------------------------------

@lru_cache(maxsize=4096)
def _tokenize_run(run: str) -> tuple[str, ...]:
    from nltk.tokenize import word_tokenize  # noqa: PLC0415 - NLTK (about 2 s of imports) only when text is scored

    return tuple(word_tokenize(run, preserve_line=True))


@lru_cache(maxsize=8192)
def cmrc_segments(text: str) -> tuple[str, ...]:
    """CMRC 2018 ``mixed_segmentation(text, rm_punc=True)``: a token per CJK character, nltk for the rest."""
    out: list[str] = []
    for piece in _CMRC_PIECE.findall(text.lower().strip().translate(_CMRC_DELETE)):
        out.extend(piece if _CMRC_CJK.match(piece) else _tokenize_run(piece))  # a CJK run: one token a character
    return tuple(out)


def cmrc_remove_punctuation(text: str) -> str:
    """CMRC 2018 ``remove_punctuation``: lower-case, strip, its punctuation list removed."""
    return text.lower().strip().translate(_CMRC_DELETE)


def longest_common_run(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common contiguous subsequence (the CMRC script's ``find_lcs``), exact, by
    :class:`difflib.SequenceMatcher` without its junk heuristics (tested equal to the script's loop)."""
    if not a or not b:
        return 0
    return SequenceMatcher(None, a, b, autojunk=False).find_longest_match(0, len(a), 0, len(b)).size


def _cmrc_f1(reference: str, prediction: str) -> float:
    gold, pred = cmrc_segments(reference), cmrc_segments(prediction)
    common = longest_common_run(gold, pred)
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return (2 * precision * recall) / (precision + recall)


# --- the metrics ------------------------------------------------------------------------------------------

def _is_cmrc(reference: str, convention: str | None) -> bool:
    """Whether ``reference`` is scored by the CMRC rules: always under ``cmrc``, never under ``squad``, by its
    script under ``auto`` (or None)."""
    return convention == "cmrc" or (convention != "squad" and is_mostly_cjk(reference))


def _check(references: Sequence[str], convention: str | None = None) -> list[str]:
    """The references a score is the maximum over: as SQuAD v2.0's ``get_raw_scores``, a SQuAD-rule reference
    that normalises to nothing is dropped, and when none is left the one reference is ``""``."""
    if isinstance(references, str) or not references:
        raise ValueError("references must be a non-empty sequence of strings")
    return [ref for ref in references if _is_cmrc(ref, convention) or squad_normalize(ref)] or [""]


def exact_match(prediction: str, references: Sequence[str], convention: str | None = None) -> float:
    """1.0 when the prediction equals a reference after that reference's normalisation (CMRC: its
    punctuation removed; SQuAD: ``normalize_answer``), else 0.0 (docs/design.md §12.3); ``convention``: squad,
    cmrc, or auto/None (each reference by its script)."""
    for ref in _check(references, convention):
        if _is_cmrc(ref, convention):
            if cmrc_remove_punctuation(ref) == cmrc_remove_punctuation(prediction):
                return 1.0
        elif squad_normalize(ref) == squad_normalize(prediction):
            return 1.0
    return 0.0


def f1(prediction: str, references: Sequence[str], convention: str | None = None) -> float:
    """The maximum over the references of the token F1 (CMRC: longest common contiguous run of its mixed
    segmentation; SQuAD: bag of ``normalize_answer`` tokens) (docs/design.md §12.3)."""
    return max(_cmrc_f1(ref, prediction) if _is_cmrc(ref, convention) else _squad_f1(ref, prediction)
               for ref in _check(references, convention))


def _units(text: str) -> list[str]:
    return _UNIT.findall(unicodedata.normalize("NFKC", text).lower())


_APPROX = re.compile(r"^\s*(?:大约|大概|约为|约|approximately|approx\.?|about|around|roughly|~|≈)\s*"
                     r"(?=[\d零一二两三四五六七八九十百千万])|(?<=\S)\s*(?:左右|上下|or so)\s*$", re.IGNORECASE)
"""A hedge a reference carries around its figure (``约 30 毫克``, ``30 毫克左右``, ``about 30 mg``)."""
_ASIDE = re.compile(r"\s*(?:\([^()]*\)|（[^（）]*）|\[[^\[\]]*\]|【[^【】]*】)\s*")
"""A bracketed aside in a reference (``5 分钟（RPO）``): the reference is also sought without it."""


def reference_forms(reference: str) -> list[str]:
    """The forms of a reference an answer may contain: as written, without its hedge (约/大约/左右/about …) and
    without its bracketed asides; full- and half-width forms and spaces between a number and its unit are
    already equal in :func:`_contains`'s units."""
    return list(_forms(reference))


@lru_cache(maxsize=65536)
def _forms(reference: str) -> tuple[str, ...]:
    text = unicodedata.normalize("NFKC", reference)
    forms = [reference, _APPROX.sub("", text) if any(ch.isnumeric() for ch in text) else text]  # a figure's hedge
    forms += [_ASIDE.sub(" ", form).strip() for form in forms]
    return tuple(f for i, f in enumerate(forms) if f.strip() and f not in forms[:i]) or (reference,)


def _contains(text: str, part: str) -> bool:
    return any(_contains_form(text, form) for form in _forms(part))


def _contains_form(text: str, part: str) -> bool:
    if _HAN.search(part) or _HAN.search(text):
        # Chinese, or Latin inside Chinese text (no spaces between them): units in a contiguous run
        units, hay = _units(part), _units(text)
        return bool(units) and any(hay[i:i + len(units)] == units for i in range(len(hay) - len(units) + 1))
    needle = squad_normalize(part)
    if not needle:
        return not squad_normalize(text)
    return f" {needle} " in f" {squad_normalize(text)} "


def answer_contains(answer: str, references: Sequence[str]) -> float:
    """1.0 when some normalised reference (or one of its :func:`reference_forms`) occurs in the normalised answer
    as a run of whole units or tokens (``16`` is not in ``160``), else 0.0 (docs/design.md §12.3)."""
    return float(any(_contains(answer, ref) for ref in _check(references)))


def key_point_recall(answer: str, key_points: Sequence[str]) -> float:
    """Share of the key points the answer contains, each tested as :func:`answer_contains` does."""
    if isinstance(key_points, str) or not key_points:
        raise ValueError("key_points must be a non-empty sequence of strings")
    return sum(_contains(answer, point) for point in key_points) / len(key_points)
