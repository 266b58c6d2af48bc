"""The shipped baseline answerer ``extractive-v1``, a floor to beat: the top chunks' sentences sharing the most
:func:`terms` with the question, their chunks cited; it refuses on a low top score. Deterministic."""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from rag_pipeline.answers.metrics.sentences import split_sentences as answer_sentences
from rag_pipeline.contracts.answers import AnswerRecord
from rag_pipeline.evaluation.datasets.load import EvaluationCase
from rag_pipeline.knowledge_base.chunk_lookup import chunks_by_ids
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.retrieval.search import hybrid_search_batch, preflight
from rag_pipeline.retrieval.strategies import Strategy

NAME = "extractive-v1"
DEFAULT_TOP_N = 3
DEFAULT_MAX_SENTENCES = 2
# chosen by bench/answerer_threshold.py on the train questions demo/answerer-train.yaml with the default strategy
# (hybrid-v1); scores of other strategies are on other scales, so re-run the script for one (bench/RESULTS.md)
DEFAULT_REFUSAL_THRESHOLD = 0.3074
BATCH_SIZE = 64
REFUSAL_PHRASES = {"zh": "信息不足，无法回答。", "en": "Insufficient information to answer."}

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_LATIN_WORD = re.compile(f"[^\\W_{_CJK}]+")
_LIST_MARKER = re.compile(r"^(?:[-*+•]\s+|\d+[.)]\s+)")
STOPWORDS = frozenset(
    "a an and are as at be by can do does for from get how i in is it its may of on or our should the this to we "
    "what when where which who why will with you your".split())
"""English words that carry no content; left out of a sentence's and the question's terms."""


def split_sentences(text: str) -> list[str]:
    """The sentences of a chunk's ``text`` (the answers' splitter), list markers stripped, heading lines dropped."""
    sentences = []
    for piece in answer_sentences(text):
        piece = _LIST_MARKER.sub("", piece.strip()).strip()
        if piece and not piece.startswith("#"):
            sentences.append(piece)
    return sentences


def terms(text: str) -> set[str]:
    """The terms overlap is counted on (after NFKC): Chinese character bigrams (a lone character itself), Latin
    lower-cased words and numbers but :data:`STOPWORDS`; no stemming."""
    text = unicodedata.normalize("NFKC", text).lower()
    found: set[str] = set()
    for run in _CJK_RUN.findall(text):
        found.update([run] if len(run) == 1 else (run[i:i + 2] for i in range(len(run) - 1)))
    found.update(w for w in _LATIN_WORD.findall(text) if w not in STOPWORDS)
    return found


def language(text: str) -> str:
    """``zh`` when at least a third of the letters of ``text`` are Chinese characters, else ``en``."""
    letters = [ch for ch in text if ch.isalpha()]
    chinese = sum(1 for ch in letters if _CJK_RUN.match(ch))
    return "zh" if letters and chinese * 3 >= len(letters) else "en"


@dataclass(frozen=True)
class Choice:
    """The decision for one case: the chosen sentences with their chunks, or a refusal and why."""

    sentences: tuple[str, ...]
    chunk_ids: tuple[str, ...]
    refused: bool
    reason: str


def choose(question: str, chunks: Sequence[tuple[str, str]], top_score: float | None, *, max_sentences: int,
           refusal_threshold: float) -> Choice:
    """The answer from ``chunks`` (best first): the sentences sharing most of the question's terms (each next one at
    least half as good as the best), in document order; a refusal on a low ``top_score`` or no shared term."""
    if top_score is None:
        return Choice((), (), True, "nothing retrieved")
    if top_score < refusal_threshold:
        return Choice((), (), True, f"top score {top_score:.4f} < threshold {refusal_threshold:g}")
    wanted = terms(question)
    scored = []
    for rank, (chunk_id, text) in enumerate(chunks):
        for position, sentence in enumerate(split_sentences(text)):
            overlap = len(wanted & terms(sentence)) / len(wanted) if wanted else 0.0
            scored.append((overlap, rank, position, sentence, chunk_id))
    scored.sort(key=lambda s: (-s[0], s[1], s[2]))
    if not scored or scored[0][0] == 0:
        return Choice((), (), True, "no sentence shares a term with the question")
    best = scored[0][0]
    picked = [s for s in scored[:max_sentences] if s[0] >= best / 2]
    picked.sort(key=lambda s: (s[1], s[2]))
    return Choice(tuple(s[3] for s in picked), tuple(dict.fromkeys(s[4] for s in picked)), False, "answered")


def join_sentences(sentences: Sequence[str], lang: str) -> str:
    """Chinese sentences are joined as they are, others with a space."""
    return ("" if lang == "zh" else " ").join(sentences)


class ExtractiveAnswerer:
    """``extractive-v1`` over one knowledge base with one strategy, identified by its params hash."""

    def __init__(self, engine: sa.Engine, knowledge_base: str, strategy: Strategy, *, top_n: int = DEFAULT_TOP_N,
                 max_sentences: int = DEFAULT_MAX_SENTENCES,
                 refusal_threshold: float = DEFAULT_REFUSAL_THRESHOLD, batch_size: int = BATCH_SIZE) -> None:
        for field, value in (("top_n", top_n), ("max_sentences", max_sentences), ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"answerer {NAME}: {field} must be a positive integer, got {value!r}")
        if isinstance(refusal_threshold, bool) or not isinstance(refusal_threshold, int | float) \
                or not math.isfinite(refusal_threshold):
            raise ValueError(f"answerer {NAME}: refusal_threshold must be a finite number, got {refusal_threshold!r}")
        self.engine, self.knowledge_base, self.strategy = engine, knowledge_base, strategy
        self.top_n, self.max_sentences, self.batch_size = top_n, max_sentences, batch_size
        self.refusal_threshold = float(refusal_threshold)

    def params(self) -> dict:
        return {"strategy": self.strategy.version, "strategy_params_hash": self.strategy.params_hash(),
                "top_n": self.top_n, "max_sentences": self.max_sentences,
                "refusal_threshold": self.refusal_threshold}

    def params_hash(self) -> str:
        canonical = json.dumps(self.params(), sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    @property
    def identity(self) -> str:
        return f"{NAME}@{self.params_hash()[:12]}"

    def answer_cases(self, cases: Sequence[EvaluationCase]) -> Iterator[AnswerRecord]:
        """One :class:`AnswerRecord` per case, in order, retrieved per batch; bad input raises before the first."""
        with self.engine.connect() as conn:
            kb = resolve_knowledge_base(conn, self.knowledge_base)
            preflight(conn, kb, self.strategy)
        return self._answer(kb.id, list(cases))

    def _answer(self, kb_id, cases: list[EvaluationCase]) -> Iterator[AnswerRecord]:
        for start in range(0, len(cases), self.batch_size):
            batch = list(cases[start:start + self.batch_size])
            t0 = time.perf_counter()
            with self.engine.connect() as conn:
                traces = hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=[c.question for c in batch],
                                             strategy=self.strategy, limits=[c.k for c in batch])
                wanted = {c.chunk_id for t in traces for c in t.selected[:self.top_n]}
                texts = {cid: row.text for cid, row in chunks_by_ids(conn, wanted).items()}
            share_ms = (time.perf_counter() - t0) * 1000 / len(batch)
            for case, trace in zip(batch, traces, strict=True):
                t1 = time.perf_counter()
                record = self._record(case, trace.selected, texts)
                yield record.model_copy(update={"latency_ms": share_ms + (time.perf_counter() - t1) * 1000})

    def _record(self, case: EvaluationCase, selected, texts: dict[str, str]) -> AnswerRecord:
        top = selected[:self.top_n]
        choice = choose(case.question, [(c.chunk_id, texts.get(c.chunk_id, "")) for c in top],
                        selected[0].final_score if selected else None, max_sentences=self.max_sentences,
                        refusal_threshold=self.refusal_threshold)
        lang = language(case.question)
        answer = REFUSAL_PHRASES[lang] if choice.refused else join_sentences(choice.sentences, lang)
        return AnswerRecord(case_id=case.case_id, answer=answer, cited_chunk_ids=list(choice.chunk_ids),
                            retrieved_chunk_ids=[c.chunk_id for c in selected], refused=choice.refused,
                            answerer=self.identity, status="ok")
