"""Run history for the admin console, read-only over the tables of docs/design.md §6.1: each metric over time,
a run's cases, one case's whole pool, chunk text on demand, two runs paired by ``case_id`` with the
statistics of :mod:`rag_pipeline.analysis.comparison`, and the runs made outside Dagster (its sensor's feed)."""

from __future__ import annotations

import sqlalchemy as sa

from rag_pipeline.analysis import comparison
from rag_pipeline.analysis.comparison import StrategyRun
from rag_pipeline.contracts.catalog import ChunkText, StoredVersion
from rag_pipeline.contracts.comparison import RunPair
from rag_pipeline.contracts.metrics import METRIC_NAMES
from rag_pipeline.contracts.reports import CaseDetail, PairedCase, RelevantChunk, RunCases
from rag_pipeline.contracts.runs import FinishedRun, HistoryPoint, RunSummary
from rag_pipeline.evaluation.datasets import queries as dataset_queries
from rag_pipeline.evaluation.queries import knowledge_base as kb_queries
from rag_pipeline.evaluation.runs import case_queries, reports
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.evaluation.runs import queries as run_history
from rag_pipeline.evaluation.runs.queries import summary_of
from rag_pipeline.evaluation.runs.reports import CaseNotFoundError
from rag_pipeline.knowledge_base import attached, catalogue
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.storage.ids import uuid_strings


def dataset_versions(engine: sa.Engine, dataset: str, knowledge_base: str) -> tuple[str, list[StoredVersion]]:
    """(the knowledge base's name, the stored versions of dataset ``dataset`` on it, latest first)."""
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
        return kb.name, [StoredVersion(**r) for r in dataset_queries.versions(conn, dataset, kb.name)]


PAIRED_METRICS = METRIC_NAMES[:6]
"""What :func:`compare_runs` pairs: the four metrics of docs/design.md §5, hit and AP (MAP)."""


def metric_history(engine: sa.Engine, dataset: str, knowledge_base: str, *, limit: int = 2000) -> list[HistoryPoint]:
    """Every succeeded run of dataset ``dataset`` on ``knowledge_base`` (name or id), all versions, oldest first."""
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
        rows = run_history.succeeded_runs(conn, dataset, kb.id, limit)
    return [HistoryPoint(run_id=r["run_id"], strategy_version=r["strategy_version"], dataset_version=r["content_hash"],
                         is_current=r["is_current"], finished_at=r["finished_at"], case_count=r["case_count"],
                         metrics={m: float(r[m]) for m in METRIC_NAMES if r[m] is not None}) for r in rows]


def run_cases(engine: sa.Engine, run_id: str) -> RunCases:
    """The run's summary and every case of it in dataset order (without candidates)."""
    with engine.connect() as conn:
        row = run_records.get_run(conn, run_id)
        cases = list(reports.iter_cases(conn, row.id, candidates="none"))
    return RunCases(summary=summary_of(row), cases=cases)


def case_detail(engine: sa.Engine, run_id: str, case_id: str) -> CaseDetail:
    """The drill-down of case ``case_id`` of run ``run_id``; :class:`CaseNotFoundError` if the run lacks it."""
    with engine.connect() as conn:
        row = run_records.get_run(conn, run_id)
        try:
            case = next(reports.iter_cases(conn, row.id, candidates="all", case_id=case_id))
        except CaseNotFoundError:
            raise CaseNotFoundError(f"run {str(row.id)[:8]} has no case {case_id!r}") from None
        neighbours = case_queries.neighbours(conn, row.id, case.case_index)
        in_pool = {c.chunk_id: c for c in case.candidates}
        docs = _chunk_rows(conn, [cid for cid in case.relevance_grades if cid not in in_pool])
        summary = summary_of(row)
    reasons = {r.chunk_id: r for r in case.miss_reasons or []}
    relevant = []
    for chunk_id, grade in case.relevance_grades.items():
        member, reason = in_pool.get(chunk_id), reasons.get(chunk_id)
        document = member.document_name if member else getattr(docs.get(chunk_id), "document_name", None)
        relevant.append(RelevantChunk(chunk_id=chunk_id, grade=grade, document_name=document,
                                      rank=member.rank if member else None, reason=reason and reason.reason,
                                      detail=reason and reason.detail, gap=reason and reason.gap))
    return CaseDetail(summary=summary, case=case, candidates=case.candidates, relevant=relevant,
                      previous=neighbours.previous, next=neighbours.next)


def _chunk_rows(conn: sa.Connection, chunk_ids) -> dict[str, ChunkText]:
    ids = uuid_strings(c for c in chunk_ids if str(c) == str(c).strip())  # a padded id names no chunk here
    return {k: ChunkText(**v) for k, v in kb_queries.chunk_texts(conn, ids).items()} if ids else {}


def chunk_texts(engine: sa.Engine, chunk_ids) -> dict[str, ChunkText]:
    """Chunk id → its text, looked up live (ids not UUIDs or not found are left out); an id that is no chunk of the
    project's own is looked up in the chunk catalogues (external systems' documents), then in the attached knowledge
    bases (the user's tables)."""
    with engine.connect() as conn:
        found = _chunk_rows(conn, chunk_ids)
        rest = [i for i in uuid_strings(chunk_ids) if i not in found]
        for cid, row in (catalogue.chunk_rows(conn, None, rest) if rest else {}).items():
            found[cid] = ChunkText(chunk_id=cid, document_name=row.document_name, ordinal=row.ordinal,
                                   is_current=True, content=row.text)
        rest = [i for i in rest if i not in found]
        if rest:
            for cid, row in attached.find_chunks_anywhere(conn, rest).items():
                found[cid] = ChunkText(chunk_id=cid, document_name=row.document_name, ordinal=row.ordinal,
                                       is_current=True, content=row.text)
        return found


def _labels(a: RunSummary, b: RunSummary) -> tuple[str, str]:
    if a.strategy_version != b.strategy_version:
        return a.strategy_version, b.strategy_version
    if a.run_id == b.run_id:
        return f"A: {a.strategy_version}", f"B: {b.strategy_version}"
    return f"{a.strategy_version} @{a.run_id[:8]}", f"{b.strategy_version} @{b.run_id[:8]}"


def compare_runs(engine: sa.Engine, run_a: str, run_b: str, *, n_resamples: int = 10000,
                 primary: str = comparison.PRIMARY_METRIC) -> RunPair:
    """Run ``run_b`` against run ``run_a`` on their shared cases: the paired statistics and every case."""
    a, b = run_cases(engine, run_a), run_cases(engine, run_b)
    sa_, sb = a.summary, b.summary
    notes = []
    if sa_.status != "succeeded" or sb.status != "succeeded":
        raise comparison.ComparisonError("only succeeded runs can be compared "
                                         f"({sa_.run_id[:8]}: {sa_.status}, {sb.run_id[:8]}: {sb.status})")
    if sa_.dataset.name != sb.dataset.name:
        notes.append(f"the runs measure different datasets ({sa_.dataset.name} vs {sb.dataset.name}): "
                     "only the case ids they share are paired")
    if sa_.dataset.version != sb.dataset.version:
        notes.append(f"the runs measure different versions of the dataset ({sa_.dataset.version[:12]} vs "
                     f"{sb.dataset.version[:12]}): labels may differ between them")
    ka, kb_ = sa_.knowledge_base, sb.knowledge_base
    if ka.id == kb_.id and ka.version and kb_.version and ka.version != kb_.version:
        seen_rows = [s.counts.attached.rows if s.counts and s.counts.attached else None for s in (sa_, sb)]
        seen = f"; {seen_rows[0]} vs {seen_rows[1]} rows" if None not in seen_rows else ""
        notes.append(f"the runs saw different content of knowledge base {ka.name} (version {ka.version[:12]} vs "
                     f"{kb_.version[:12]}{seen}): it changed between them, so a difference may not be the strategy's")
    labels = _labels(sa_, sb)
    # answerable cases only: an unanswerable one has no metric to pair (docs/design.md §12.1)
    per_a = {c.case_id: c.metrics for c in a.cases if c.metrics is not None}
    per_b = {c.case_id: c.metrics for c in b.cases if c.metrics is not None}
    pair = [StrategyRun(labels[0], sa_.run_id, {c: m.model_dump() for c, m in per_a.items()},
                        judged={c.case_id: c.judged.at_k for c in a.cases if c.judged is not None}),
            StrategyRun(labels[1], sb.run_id, {c: m.model_dump() for c, m in per_b.items()},
                        judged={c.case_id: c.judged.at_k for c in b.cases if c.judged is not None})]
    comp = comparison.compare(pair, labels[0], dataset=sa_.dataset.name, metrics=PAIRED_METRICS,
                              n_resamples=n_resamples, primary=primary)
    questions = {c.case_id: c.question for c in b.cases} | {c.case_id: c.question for c in a.cases}
    rows = [PairedCase(case_id=c, question=questions[c], a=per_a[c], b=per_b[c],
                       delta=getattr(per_b[c], primary) - getattr(per_a[c], primary)) for c in per_a if c in per_b]
    rows.sort(key=lambda r: (-abs(round(r.delta, 12)), r.case_id))
    return RunPair(a=sa_, b=sb, labels=labels, comparison=comp, cases=rows, notes=notes + comp.notes)


FINISHED_RUN_FIELDS = ("run_id", "dataset", "knowledge_base", "strategy_version", "params_hash", "case_count",
                       "candidate_count", "knowledge_base_version")


def runs_outside_dagster(engine: sa.Engine, after: str | None = None, limit: int = 100) -> list[FinishedRun]:
    """Succeeded runs without a Dagster run that finished after cursor ``after`` (``finished_at|run_id``)."""
    after_at, _, after_id = (after or "").partition("|")
    with engine.connect() as conn:
        rows = run_history.finished_outside_dagster(conn, after_at or "-infinity", after_id, limit)
    return [FinishedRun(**{k: r[k] for k in FINISHED_RUN_FIELDS}, dataset_version=r["content_hash"],
                        finished_at=r["finished_at"].isoformat(),
                        averages={m: float(r[m]) for m in METRIC_NAMES if r[m] is not None}) for r in rows]
