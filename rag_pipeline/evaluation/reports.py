"""Evaluation reports, always built from the database (so ``evaluate --output`` and ``show`` agree).

:func:`build_report` returns the whole report as a dict; :func:`write_report` streams the same JSON to a
file page by page (cases in dataset order, candidates by rank), so a large run never sits in memory, or as
JSON Lines (``fmt="jsonl"``: a header line with the summary, then one line per case, written as it is read).

Which candidates a case lists (:data:`CANDIDATE_MODES`, keyword ``candidates`` of :func:`iter_cases`,
:func:`build_report`, :func:`write_report`): ``default`` — the selected ones plus every relevant candidate
(grade >= 1), with the case's ``miss_reasons`` (the diagnosis of each relevant chunk that was missed): all the detail
of docs/design.md §6.3 needs; ``all`` — the full pool; ``selected``; ``relevant``; ``none`` (metrics and miss reasons
only). ``case_id`` restricts a report to one case.
An unanswerable case (docs/design.md §12.1) is listed with its pool, ``answerable`` false, ``metrics`` None and
the reason in ``metrics_skipped``.
Each case shows its ``relevance_grades`` (every judged id -> grade, 0 = judged not relevant) and each
candidate its ``relevance_grade`` (None = not judged by the case). A run with a rerank stage shows both ranks:
``rank`` (after the stage) and ``first_stage_rank`` (re-fused from the stored leg scores exactly as the run fused
them, :func:`rag_pipeline.retrieval.stages.first_stage_ranks`); ``vector_completed`` / ``keyword_completed`` mark
a leg score filled in by ``complete_pool`` (a score without a leg rank: that leg did not retrieve the chunk).
Chunk text is included only with ``include_text=True`` (candidate snapshots never store it; it is
looked up in ``document_chunks``). The shape is :class:`rag_pipeline.contracts.reports.Report`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO

import sqlalchemy as sa

from rag_pipeline.contracts.metrics import METRIC_NAMES
from rag_pipeline.contracts.reports import CANDIDATE_MODES, REPORT_VERSION
from rag_pipeline.evaluation.pools import first_stage_ranks_of_cases
from rag_pipeline.evaluation.queries import candidates as candidate_queries
from rag_pipeline.evaluation.queries import cases as case_queries
from rag_pipeline.evaluation.queries import runs as run_queries
from rag_pipeline.evaluation.run_records import RunNotFoundError, get_run, resolve_run_id
from rag_pipeline.retrieval.stages import stored_strategy

PAGE_CASES = 500
UNANSWERABLE_REASON = ("unanswerable case (\"answerable\": false): no chunk is relevant, so no retrieval metric is "
                       "defined; left out of the run's averages (docs/design.md §12.1)")



class CaseNotFoundError(RunNotFoundError):
    """``case_id`` names no case of the run."""


def check_mode(candidates: str) -> str:
    """``candidates`` if it is one of :data:`CANDIDATE_MODES`, else ValueError naming them."""
    if candidates not in CANDIDATE_MODES:
        raise ValueError(f"candidates must be one of {', '.join(CANDIDATE_MODES)}, got {candidates!r}")
    return candidates


def summary_of(row: sa.Row) -> dict:
    """The ``summary`` object of a report from a :func:`runs.get_run` / :func:`runs.list_runs` row."""
    return {
        "run_id": str(row.id),
        "status": row.status,
        "is_current": row.is_current,
        "strategy_version": row.strategy_version,
        "params_hash": row.params_hash,
        "strategy_params": row.strategy_params,
        "embedding_model": row.embedding_model,
        "dataset": {"id": str(row.dataset_id), "name": row.dataset_name, "version": row.dataset_version,
                    "source_path": row.source_path, "case_count": row.dataset_case_count},
        "knowledge_base": {"id": str(row.knowledge_base_id), "name": row.knowledge_base_name,
                           "version": row.knowledge_base_version},
        **{m: getattr(row, m) for m in METRIC_NAMES},
        "case_count": row.case_count,
        "candidate_count": row.candidate_count,
        "counts": row.summary,
        "timings": row.timings,
        "question_embeddings": (row.summary or {}).get("question_embeddings"),
        "partition_key": row.partition_key,
        "dagster_run_id": row.dagster_run_id,
        "worker": row.worker,
        "error": row.error,
        "started_at": row.started_at.isoformat(),
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
        "queued_at": row.queued_at.isoformat() if row.queued_at else None,
        "cases_done": row.cases_done,
    }


def iter_cases(conn: sa.Connection, run_id, *, include_text: bool = False, page: int = PAGE_CASES,
               candidates: str = "default", case_id: str | None = None, offset: int = 0,
               limit: int | None = None) -> Iterator[dict]:
    """Per-case report entries in dataset order, each with the candidates of mode ``candidates``
    (:data:`CANDIDATE_MODES`, by rank); ``case_id``: only that case (:class:`CaseNotFoundError` if the run has
    none); ``offset`` / ``limit``: a page of cases (by dataset order). Reads :data:`PAGE_CASES` cases at a time,
    so memory stays flat however large the run."""
    check_mode(candidates)
    candidate_sql = candidate_queries.report_statement(candidates, include_text)
    params = run_queries.run_strategy(conn, run_id)
    strategy = stored_strategy(params.strategy_version, params.strategy_params) if params else None
    reranked = strategy is not None and strategy.rerank is not None
    last, seen, left = int(offset) - 1, False, limit
    while left is None or left > 0:
        n = page if left is None else min(page, left)
        rows = case_queries.report_page(conn, run_id, after=last, page=n, case_id=case_id)
        if not rows:
            if case_id is not None and not seen:
                raise CaseNotFoundError(f"run {run_id} has no case {case_id!r}")
            return
        seen = True
        pools: dict[str, list[dict]] = {r.case_id: [] for r in rows}
        if candidates != "none":
            for c in conn.execute(candidate_sql, {"run": run_id, "cases": list(pools)}):
                pools[c.case_id].append(_candidate(c, include_text))
        if reranked and candidates != "none":  # the first stage re-fused from the case's whole stored pool
            for case, before in first_stage_ranks_of_cases(conn, run_id, strategy, list(pools)).items():
                for c in pools[case]:
                    c["first_stage_rank"] = before.get(c["chunk_id"])
        for r in rows:
            yield {
                "case_id": r.case_id,
                "case_index": r.case_index,
                "question": r.question,
                "k": r.k,
                "answerable": r.answerable,
                "retrieved_chunk_ids": r.retrieved_chunk_ids,
                "relevant_chunk_ids": r.relevant_chunk_ids,
                "relevance_grades": _grades(r),
                "first_relevant_rank": r.first_relevant_rank,
                "metrics": {m: getattr(r, m) for m in METRIC_NAMES} if r.answerable else None,
                "metrics_skipped": None if r.answerable else UNANSWERABLE_REASON,
                "miss_reasons": r.miss_reasons,
                "candidates": pools[r.case_id],
            }
        last = rows[-1].case_index
        if left is not None:
            left -= len(rows)


def _grades(r: sa.Row) -> dict[str, int]:
    """Every judged id of a case -> grade (0 = judged not relevant); runs stored before grades existed
    were binary: each relevant id grade 1."""
    if r.relevance_grades is not None:
        return r.relevance_grades
    return dict.fromkeys(r.relevant_chunk_ids, 1)


def _candidate(c: sa.Row, include_text: bool) -> dict:
    out = {
        "chunk_id": str(c.chunk_id), "document_id": str(c.document_id), "document_name": c.document_name,
        "rank": c.rank, "vector_score": c.vector_score, "vector_rank": c.vector_rank,
        "keyword_score": c.keyword_score, "keyword_rank": c.keyword_rank, "rerank_score": c.rerank_score,
        "first_stage_rank": None,
        "vector_completed": c.vector_score is not None and c.vector_rank is None,
        "keyword_completed": c.keyword_score is not None and c.keyword_rank is None,
        "final_score": c.final_score, "is_relevant": c.is_relevant, "relevance_grade": c.relevance_grade,
        "is_selected": c.is_selected, "strategy_version": c.strategy_version,
    }
    if include_text:
        out["content"] = c.content
    return out


def build_report(conn: sa.Connection, run_id, *, include_text: bool = False, candidates: str = "default",
                 case_id: str | None = None) -> dict:
    """The whole report of one run (id or unique id prefix) as a dict (use :func:`write_report` for big runs)."""
    check_mode(candidates)
    run_id = resolve_run_id(conn, run_id)
    summary = summary_of(get_run(conn, run_id))
    return {"report_version": REPORT_VERSION, "candidates": candidates, "summary": summary,
            "cases": list(iter_cases(conn, run_id, include_text=include_text, candidates=candidates,
                                     case_id=case_id))}


REPORT_FORMATS = ("json", "jsonl")


def write_report(conn: sa.Connection, run_id, fp: IO[str], *, include_text: bool = False,
                 candidates: str = "default", case_id: str | None = None, fmt: str = "json") -> int:
    """Stream the report of one run (id or unique id prefix, :func:`resolve_run_id`) to ``fp``; returns the
    number of cases written. ``fmt="json"``: the :func:`build_report` document, indented; ``"jsonl"``: one line
    ``{"report_version", "candidates", "summary"}`` then one line per case, written as it is read."""
    check_mode(candidates)
    if fmt not in REPORT_FORMATS:
        raise ValueError(f"format must be one of {', '.join(REPORT_FORMATS)}, got {fmt!r}")
    run_id = resolve_run_id(conn, run_id)
    summary = summary_of(get_run(conn, run_id))
    cases = iter_cases(conn, run_id, include_text=include_text, candidates=candidates, case_id=case_id)
    first = next(cases, None)  # an unknown case_id fails before anything is written
    stream = _chain(first, cases) if first is not None else iter(())
    n = 0
    if fmt == "jsonl":
        fp.write(_line({"report_version": REPORT_VERSION, "candidates": candidates, "summary": summary}))
        for case in stream:
            fp.write(_line(case))
            n += 1
        return n
    fp.write(f'{{\n  "report_version": {REPORT_VERSION:d},\n  "candidates": {json.dumps(candidates)},\n  "summary": ')
    fp.write(_indented(summary))
    fp.write(',\n  "cases": [')
    for case in stream:
        fp.write(("," if n else "") + "\n    " + _indented(case, 4))
        n += 1
    fp.write("\n  ]\n}\n" if n else "]\n}\n")
    return n


def _chain(first: dict, rest: Iterator[dict]) -> Iterator[dict]:
    yield first
    yield from rest


def _line(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"


def _indented(obj, level: int = 2) -> str:
    text = json.dumps(obj, ensure_ascii=False, indent=2, allow_nan=False)
    return text.replace("\n", "\n" + " " * level)


def case_overview(conn: sa.Connection, run_id, *, worst_first: bool = False, limit: int = 100) -> list[dict]:
    """Per-case headline metrics with the top-3 selected candidates (for Dagster metadata tables)."""
    return case_queries.overview(conn, run_id, worst_first=worst_first, limit=limit)
