"""An answer's citations against the labels, the retrieved chunks and their text (docs/design.md §12.3)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Mapping, Sequence

from rag_pipeline.answers.metrics.sentences import has_marker, marker_items, split_sentences, strip_markers
from rag_pipeline.contracts.answers import AnswerCitation

Scored = tuple[float | None, str | None]
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NOT_ALNUM = re.compile(r"[\W_]+")
NO_CITATIONS = "no citations"
NO_RELEVANT = "no relevant chunks"


def normalise_id(raw: str) -> str:
    """The comparable form of a chunk id: stripped and lower-cased."""
    return raw.strip().lower()


def is_chunk_id(chunk_id: str) -> bool:
    """Whether a normalised id has the form of a chunk id (a UUID, hyphenated)."""
    return _UUID.fullmatch(chunk_id) is not None


def distinct_cited(cited: Sequence[str] | None) -> list[str]:
    """The cited ids, each once (first occurrence), normalised when they are UUIDs and kept as given otherwise."""
    seen: dict[str, str] = {}
    for raw in cited or ():
        key = normalise_id(raw)
        seen.setdefault(key, key if is_chunk_id(key) else raw)
    return list(seen.values())


def build_citations(cited: Sequence[str] | None, *, grades: Mapping[str, int], retrieved: Sequence[str] | None,
                    kb_chunk_ids: Collection[str] | None) -> list[AnswerCitation]:
    """One :class:`AnswerCitation` per cited id; valid: among ``retrieved``, else ``kb_chunk_ids``."""
    retrieved_set = None if retrieved is None else {normalise_id(c) for c in retrieved}
    out = []
    for cid in distinct_cited(cited):
        form = is_chunk_id(cid)
        grade = grades.get(cid) if form else None
        is_retrieved = None if retrieved_set is None else (form and cid in retrieved_set)
        in_kb = None if kb_chunk_ids is None else (form and cid in kb_chunk_ids)
        valid = bool(is_retrieved) if retrieved_set is not None else bool(in_kb)
        out.append(AnswerCitation(chunk_id=cid, is_relevant=grade is not None and grade >= 1, grade=grade,
                                  is_retrieved=is_retrieved, in_knowledge_base=in_kb, is_valid=valid))
    return out


def citation_precision(citations: Sequence[AnswerCitation], relevant: Collection[str]) -> Scored:
    """|cited ∩ relevant| / |cited| over distinct cited ids; undefined without citations or relevant chunks."""
    if not citations:
        return None, NO_CITATIONS
    if not relevant:
        return None, NO_RELEVANT
    return sum(c.is_relevant for c in citations) / len(citations), None


def citation_recall(citations: Sequence[AnswerCitation], relevant: Collection[str], *, sent: bool) -> Scored:
    """|cited ∩ relevant| / |relevant| (grade >= 1); undefined without relevant chunks, or when the record sent
    no ``cited_chunk_ids`` at all (``sent`` False); an empty list sent is recall 0."""
    if not relevant:
        return None, NO_RELEVANT
    if not sent:
        return None, "no citations sent"
    return sum(c.is_relevant for c in citations) / len(relevant), None


def citation_validity(citations: Sequence[AnswerCitation], *, retrieved_sent: bool, kb_known: bool) -> Scored:
    """Share of the distinct cited ids that are valid (retrieved, or in the KB when no retrieved ids were sent)."""
    if not citations:
        return None, NO_CITATIONS
    if not retrieved_sent and not kb_known:
        return None, "no retrieved ids and no knowledge-base ids to check against"
    return sum(c.is_valid for c in citations) / len(citations), None


def sentence_citation_coverage(answer: str) -> Scored:
    """Share of the answer's sentences with an inline citation marker; undefined without any marker."""
    if not has_marker(answer):
        return None, "citations not inline"
    sentences = split_sentences(answer)
    return sum(has_marker(s) for s in sentences) / len(sentences), None


def _nfkc(text: str) -> str:
    return text if unicodedata.is_normalized("NFKC", text) else unicodedata.normalize("NFKC", text)


def support_text(text: str) -> str:
    """The form lexical support compares: NFKC, case-folded, letters and digits only."""
    return _NOT_ALNUM.sub("", _nfkc(text).casefold())


def numbers(text: str) -> set[str]:
    """The numbers of ``text`` (NFKC digits; thousands commas dropped): ``1,000`` and ``1000`` are one."""
    return {n.replace(",", "") for n in _NUMBER.findall(_nfkc(text))}


def _grams(text: str, n: int) -> set[str]:
    return {text[i:i + n] for i in range(len(text) - n + 1)} if len(text) >= n else ({text} if text else set())


def _resolve(sentence: str, cited: Sequence[str]) -> list[str]:
    ids = []
    for item in marker_items(sentence):
        if item.isdigit():
            if 1 <= int(item) <= len(cited):
                ids.append(normalise_id(cited[int(item) - 1]))
        else:
            ids.append(normalise_id(item))
    return ids


def lexical_support(answer: str, cited: Sequence[str] | None, chunk_text: Mapping[str, str], *, ngram: int,
                    threshold: float) -> Scored:
    """Share of the answer's sentences whose character ``ngram``-grams (at least ``threshold`` of them) and numbers
    occur in the chunks they cite (docs/design.md §12.3); undefined when no cited chunk has text."""
    texts = chunk_text
    cited = list(cited or ())
    inline = has_marker(answer)
    if not texts or not (cited or inline):  # nothing cited has text: decided without splitting the answer
        return None, "no cited chunk text"
    sentences = split_sentences(answer)
    per_sentence = [_resolve(s, cited) if inline else [normalise_id(c) for c in cited] for s in sentences]
    if not any(cid in texts for ids in per_sentence for cid in ids):
        return None, "no cited chunk text"
    gram_cache: dict[str, tuple[set[str], str, set[str]]] = {}
    supported = counted = 0
    for sentence, ids in zip(sentences, per_sentence, strict=True):
        body = strip_markers(sentence)
        norm = support_text(body)
        if not norm:
            continue
        counted += 1
        sources = []
        for cid in dict.fromkeys(ids):
            if cid in texts:
                if cid not in gram_cache:
                    chunk = _nfkc(texts[cid])
                    whole = support_text(chunk)
                    gram_cache[cid] = (_grams(whole, ngram), whole, numbers(chunk))
                sources.append(gram_cache[cid])
        if not sources:
            continue
        grams = _grams(norm, ngram)
        if len(norm) < ngram:
            share = float(any(norm in whole for _, whole, _ in sources))
        else:
            pool = set().union(*(g for g, _, _ in sources))
            share = len(grams & pool) / len(grams)
        found = set().union(*(n for _, _, n in sources))
        if share >= threshold and numbers(body) <= found:
            supported += 1
    if counted == 0:
        return None, "no sentence with text"
    return supported / counted, None
