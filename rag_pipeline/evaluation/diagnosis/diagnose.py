"""Database side of miss diagnosis (docs/design.md §4.3): each batch's missed relevant chunks' own leg scores
(:func:`diagnose_batch`), their exact global ranks only on demand (:func:`diagnose_case`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import sqlalchemy as sa

from rag_pipeline.contracts.reports import MissReason
from rag_pipeline.contracts.runs import LabelIntegrity, RunCounts
from rag_pipeline.evaluation.datasets import label_check
from rag_pipeline.evaluation.diagnosis import miss_reasons as diagnosis
from rag_pipeline.evaluation.diagnosis import queries
from rag_pipeline.evaluation.queries.knowledge_base import knowledge_base_row
from rag_pipeline.evaluation.runs import candidate_queries, case_queries
from rag_pipeline.evaluation.runs import queries as run_queries
from rag_pipeline.knowledge_base import textsearch
from rag_pipeline.knowledge_base.embedding import get_embedder
from rag_pipeline.retrieval.bm25_sql import bm25_params
from rag_pipeline.retrieval.search import text_search_mode
from rag_pipeline.retrieval.strategies import Strategy, StrategyError, get_strategy, strategy_from_mapping
from rag_pipeline.storage.vector_params import VectorArray


def score_chunks(conn: sa.Connection, kb, strategy: Strategy, targets: Sequence[tuple[str, str, str]],
                 query_vectors: Mapping[str, np.ndarray] | None = None, *,
                 ranks: bool = False) -> dict[tuple[str, str], dict]:
    """``{(question, chunk_id): {"<leg>_score", "<leg>_rank"}}`` of ``targets`` = ``(question, chunk_id, leg)``, for
    the legs asked (``None``: no embedding / no query term; ranks only with ``ranks=True``, else ``None``)."""
    out: dict[tuple[str, str], dict] = {}
    for leg in diagnosis.LEGS:
        pairs = sorted({(q, c) for q, c, want in targets if want == leg})
        if not pairs:
            continue
        questions = sorted({q for q, _ in pairs})
        index = {q: i + 1 for i, q in enumerate(questions)}
        params = {"kb": kb.id, "t_ord": [index[q] for q, _ in pairs], "t_chunk": [c for _, c in pairs]}
        if leg == "vector":
            vectors = query_vectors or {}
            missing = [q for q in questions if q not in vectors]
            if missing:
                vectors = {**vectors, **dict(zip(missing, get_embedder(strategy.embedding_model).embed(missing),
                                                 strict=True))}
            params |= {"model": strategy.embedding_model,
                       "query_vectors": VectorArray([np.asarray(vectors[q], dtype=np.float32) for q in questions])}
            rows = queries.vector_scores(conn, params, ranks=ranks)
        else:
            mode = text_search_mode(kb, strategy)
            params |= {"cfg": textsearch.regconfig(mode),
                       "query_texts": [textsearch.prepare(mode, q) for q in questions]}
            if strategy.keyword_scorer == "bm25":
                params |= bm25_params(strategy.bm25_k1, strategy.bm25_b)
            rows = queries.keyword_scores(conn, params, scorer=strategy.keyword_scorer, ranks=ranks)
        for q, c in pairs:
            out.setdefault((q, c), {})[f"{leg}_score"] = None
            out[(q, c)][f"{leg}_rank"] = None
        for row in rows:
            entry = out[(questions[row.ord - 1], row.chunk_id)]
            entry[f"{leg}_score"] = float(row.score)
            entry[f"{leg}_rank"] = None if row.rank is None else int(row.rank)
    return out


def _missing_legs(m: MissReason) -> tuple[str, ...]:
    if m.reason == "not_in_pool":
        return tuple(m.enabled_legs or ())
    if m.reason in ("vector_only", "keyword_only"):
        return ("keyword",) if m.reason == "vector_only" else ("vector",)
    return ()


def diagnose_batch(conn: sa.Connection, kb, strategy: Strategy, cases: Sequence, pools: Sequence[Sequence],
                   labels: label_check.LabelReport | None = None,
                   query_vectors: np.ndarray | None = None, *, ranks: bool = False) -> list[list[MissReason]]:
    """Reasons per case (``cases[i]`` with pool ``pools[i]``), missing-leg scores filled in. ``query_vectors`` (one
    row per case) spare re-embedding; ``ranks=True`` adds the exact global leg ranks."""
    statuses = labels.status_map() if labels else None
    details = {(r.case_id, r.chunk_id): r.detail for r in labels.rows} if labels else None
    legs = diagnosis.legs_of(strategy)
    per_case = [diagnosis.classify_misses(case, pool, label_statuses=statuses, label_details=details, legs=legs)
                for case, pool in zip(cases, pools, strict=True)]
    question = [str(diagnosis._get(case, "question")) for case in cases]
    targets = [(question[i], m.chunk_id, leg) for i, reasons in enumerate(per_case) for m in reasons
               for leg in _missing_legs(m)]
    if not targets:
        return per_case
    vectors = None if query_vectors is None else dict(zip(question, np.asarray(query_vectors), strict=True))
    scores = score_chunks(conn, kb, strategy, targets, vectors, ranks=ranks)
    return [[diagnosis.with_scores(m, scores[(question[i], m.chunk_id)])
             if (question[i], m.chunk_id) in scores else m for m in reasons] for i, reasons in enumerate(per_case)]


LABEL_EXAMPLES = 5


def label_integrity(labels: label_check.LabelReport) -> LabelIntegrity:
    """A run's label check as its summary keeps it, with the first invalid labels and what to do about each."""
    return LabelIntegrity(counts=labels.counts(), summary=labels.summary(),
                          cases_all_invalid=labels.cases_with("all_invalid"),
                          cases_some_invalid=labels.cases_with("some_invalid"),
                          examples=labels.invalid()[:LABEL_EXAMPLES])


class RunDiagnosisTally:
    """A run's diagnosis accumulated batch by batch (the evaluation loop diagnoses each batch as it goes and
    stores the reasons with the case rows): label statuses and reason counts, never the pools."""

    def __init__(self, knowledge_base: str):
        self.labels = label_check.LabelReport(knowledge_base=knowledge_base, rows=[])
        self.counts: Counter[str] = Counter()

    def add(self, labels: label_check.LabelReport, reasons: Sequence[Sequence[MissReason]]) -> None:
        self.labels.rows.extend(labels.rows)
        self.labels.verdicts.update(labels.verdicts)
        self.counts.update(m.reason for case in reasons for m in case)

    def add_to(self, counts: RunCounts, averages: Mapping[str, float]) -> None:
        """Write the run's ``miss_reasons``, ``first_line`` and ``label_integrity`` into its ``counts``."""
        counts.miss_reasons = diagnosis.summarize_counts(self.counts)
        counts.first_line = diagnosis.first_line(counts.miss_reasons, averages)
        counts.label_integrity = label_integrity(self.labels)


def strategy_of_run(run) -> Strategy:
    """The strategy a run used: its stored parameters (the registry only if they are missing)."""
    if (run.strategy_params or {}).get("external"):
        raise StrategyError(f"{run.strategy_version} is an external strategy (an imported ranking): it has no leg "
                            "of ours to rank its missed chunks in; its stored miss reasons are in `show RUN --case "
                            "ID` without --global-ranks")
    if run.strategy_params:
        return strategy_from_mapping({"version": run.strategy_version, **run.strategy_params})
    return get_strategy(run.strategy_version)


def _run(conn: sa.Connection, run_id) -> sa.Row:
    run = run_queries.run_strategy(conn, run_id)
    if run is None:
        raise LookupError(f"no evaluation run {run_id}")
    return run


def diagnose_case(conn: sa.Connection, run_id, case_id: str) -> tuple[sa.RowMapping, list[MissReason]] | None:
    """One case of a stored run diagnosed *now*, with the exact global leg ranks (on demand; against the KB as it
    is now). Returns ``(case row, reasons)``, or ``None`` if the run has no such case."""
    run = _run(conn, run_id)
    case = next(iter(case_queries.case_rows(conn, run_id, case_id)), None)
    if case is None:
        return None
    pool = candidate_queries.pool_of_case(conn, run_id, case_id)
    kb = knowledge_base_row(conn, run.knowledge_base_id)
    labels = label_check.check_labels(conn, kb, [case])
    (reasons,) = diagnose_batch(conn, kb, strategy_of_run(run), [case], [pool], labels, ranks=True)
    return case, reasons
