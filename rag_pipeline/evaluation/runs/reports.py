"""Evaluation reports, always built from the database (so ``evaluate --output`` and ``show`` agree), written page
by page or as JSON Lines; which candidates a case lists (:data:`CANDIDATE_MODES`): docs/evaluating.md. The shape is
:class:`rag_pipeline.contracts.reports.Report`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import chain
from typing import IO, Any

import sqlalchemy as sa

from rag_pipeline.contracts.reports import CANDIDATE_MODES, REPORT_VERSION, CaseReport
from rag_pipeline.evaluation.pools import first_stage_ranks_of_cases
from rag_pipeline.evaluation.runs import candidate_queries, case_queries
from rag_pipeline.evaluation.runs import queries as run_queries
from rag_pipeline.evaluation.runs.judged import judged_of_cases
from rag_pipeline.evaluation.runs.lifecycle import RunNotFoundError, get_run, resolve_run_id
from rag_pipeline.retrieval.stages import stored_strategy

PAGE_CASES = 500
REPORT_FORMATS = ("json", "jsonl")
_NO_TEXT: Any = {"candidates": {"__all__": {"content"}}}
"""What a case's dump leaves out without ``include_text``."""


class CaseNotFoundError(RunNotFoundError):
    """``case_id`` names no case of the run."""


def check_mode(candidates: str) -> str:
    """``candidates`` if it is one of :data:`CANDIDATE_MODES`, else ValueError naming them."""
    if candidates not in CANDIDATE_MODES:
        raise ValueError(f"candidates must be one of {', '.join(CANDIDATE_MODES)}, got {candidates!r}")
    return candidates


def iter_cases(conn: sa.Connection, run_id, *, include_text: bool = False, page: int = PAGE_CASES,
               candidates: str = "default", case_id: str | None = None, offset: int = 0,
               limit: int | None = None) -> Iterator[CaseReport]:
    """Per-case reports in dataset order, each with the candidates of mode ``candidates``
    (:data:`CANDIDATE_MODES`, by rank); ``case_id``: only that case (:class:`CaseNotFoundError` if the run has
    none); ``offset`` / ``limit``: a page of cases. Reads :data:`PAGE_CASES` cases at a time."""
    check_mode(candidates)
    params = run_queries.run_strategy(conn, run_id)
    strategy = stored_strategy(params.strategy_version, params.strategy_params) if params else None
    last, seen, left = int(offset) - 1, False, limit
    while left is None or left > 0:
        n = page if left is None else min(page, left)
        cases = case_queries.report_page(conn, run_id, after=last, page=n, case_id=case_id)
        if not cases:
            if case_id is not None and not seen:
                raise CaseNotFoundError(f"run {run_id} has no case {case_id!r}")
            return
        seen = True
        judged = judged_of_cases(conn, run_id, [c.case_id for c in cases])
        for case_report in cases:
            case_report.judged = judged.get(case_report.case_id)
        if candidates != "none":
            pools = candidate_queries.report_candidates(conn, run_id, [c.case_id for c in cases], candidates,
                                                        include_text)
            if strategy is not None and strategy.rerank is not None:  # re-fused from the case's whole pool
                for case, before in first_stage_ranks_of_cases(conn, run_id, strategy, list(pools)).items():
                    for c in pools[case]:
                        c.first_stage_rank = before.get(c.chunk_id)
            for case_report in cases:
                case_report.candidates = pools[case_report.case_id]
        yield from cases
        last = cases[-1].case_index
        if left is not None:
            left -= len(cases)


def write_report(conn: sa.Connection, run_id, fp: IO[str], *, include_text: bool = False,
                 candidates: str = "default", case_id: str | None = None, fmt: str = "json") -> int:
    """Stream the report of one run (id or unique id prefix, :func:`resolve_run_id`) to ``fp``; returns the number of
    cases written. ``fmt="json"``: :class:`~rag_pipeline.contracts.reports.Report`, indented; ``"jsonl"``: one line
    ``{"report_version", "candidates", "summary"}`` then one line per case, written as it is read."""
    check_mode(candidates)
    if fmt not in REPORT_FORMATS:
        raise ValueError(f"format must be one of {', '.join(REPORT_FORMATS)}, got {fmt!r}")
    run_id = resolve_run_id(conn, run_id)
    summary = run_queries.summary_of(get_run(conn, run_id))
    cases = iter_cases(conn, run_id, include_text=include_text, candidates=candidates, case_id=case_id)
    first = next(cases, None)  # an unknown case_id fails before anything is written
    stream = chain([first], cases) if first is not None else iter(())
    exclude = None if include_text else _NO_TEXT
    mode, n = json.dumps(candidates), 0
    if fmt == "jsonl":
        fp.write(f'{{"report_version":{REPORT_VERSION:d},"candidates":{mode},"summary":{summary.model_dump_json()}}}\n')
        for case in stream:
            fp.write(case.model_dump_json(exclude=exclude) + "\n")
            n += 1
        return n
    fp.write(f'{{\n  "report_version": {REPORT_VERSION:d},\n  "candidates": {mode},\n  "summary": '
             + summary.model_dump_json(indent=2).replace("\n", "\n  "))
    fp.write(',\n  "cases": [')
    for case in stream:
        text = case.model_dump_json(indent=2, exclude=exclude)
        fp.write(("," if n else "") + "\n    " + text.replace("\n", "\n    "))
        n += 1
    fp.write("\n  ]\n}\n" if n else "]\n}\n")
    return n


