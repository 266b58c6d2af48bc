"""Run history for the admin console: metrics over time, a run's cases, one case's pool, two runs side by side.

Read-only operations over the evaluation tables (docs/design.md §6.1). :func:`metric_history` gives every succeeded run
of a dataset (all versions, oldest first) for the "each metric over time" chart; :func:`run_cases` the per-case
table of a run (metrics, first relevant rank, miss reasons); :func:`case_detail` one case with its whole
candidate pool, each relevant chunk's document and miss reason; :func:`chunk_texts` chunk text on demand (never
stored with candidates); :func:`compare_runs` two runs paired by ``case_id`` with the statistics of
:mod:`rag_pipeline.analysis.comparison` (deltas, bootstrap CI, permutation p, win/tie/loss, moved cases).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa

from rag_pipeline.analysis import comparison
from rag_pipeline.analysis.comparison import StrategyRun
from rag_pipeline.contracts.catalog import StoredVersion
from rag_pipeline.contracts.comparison import StrategyComparison
from rag_pipeline.contracts.metrics import METRIC_NAMES
from rag_pipeline.contracts.runs import HistoryPoint
from rag_pipeline.evaluation import reports, runs
from rag_pipeline.evaluation.queries import cases as case_queries
from rag_pipeline.evaluation.queries import datasets as dataset_queries
from rag_pipeline.evaluation.queries import knowledge_base as kb_queries
from rag_pipeline.evaluation.queries import run_history
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.storage.ids import uuid_strings


def dataset_versions(engine: sa.Engine, dataset: str, knowledge_base: str) -> tuple[str, list[StoredVersion]]:
    """(the knowledge base's name, the stored versions of dataset ``dataset`` on it, latest first)."""
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
        return kb.name, [StoredVersion(**r) for r in dataset_queries.versions(conn, dataset, kb.name)]


PAIRED_METRICS = METRIC_NAMES[:6]
"""What :func:`compare_runs` pairs: the four metrics of docs/design.md §5, hit and AP (MAP)."""


class CaseNotFoundError(LookupError):
    """The run has no case with that id."""


def metric_history(engine: sa.Engine, dataset: str, knowledge_base: str, *, limit: int = 2000) -> list[HistoryPoint]:
    """Every succeeded run of dataset ``dataset`` on ``knowledge_base`` (name or id), all versions, oldest first."""
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
        rows = run_history.succeeded_runs(conn, dataset, kb.id, limit)
    return [HistoryPoint(run_id=r["run_id"], strategy_version=r["strategy_version"], dataset_version=r["content_hash"],
                         is_current=r["is_current"], finished_at=r["finished_at"], case_count=r["case_count"],
                         metrics={m: float(r[m]) for m in METRIC_NAMES if r[m] is not None}) for r in rows]


def _case_row(row) -> dict:
    reasons = row["miss_reasons"] or []
    return {"case_index": row["case_index"], "case_id": row["case_id"], "question": row["question"], "k": row["k"],
            "first_relevant_rank": row["first_relevant_rank"], "relevant_chunk_ids": row["relevant_chunk_ids"],
            "relevance_grades": row["relevance_grades"] or dict.fromkeys(row["relevant_chunk_ids"], 1),
            "metrics": {m: float(row[m]) for m in METRIC_NAMES}, "miss_reasons": reasons,
            "reasons": sorted({r["reason"] for r in reasons if r.get("reason") != "hit"})}


def run_cases(engine: sa.Engine, run_id: str) -> tuple[dict, list[dict]]:
    """(summary, every case of the run in dataset order) — per case: metrics, first relevant rank, miss reasons
    and ``reasons`` (the distinct non-hit reasons, for filtering)."""
    with engine.connect() as conn:
        row = runs.get_run(conn, run_id)
        return reports.summary_of(row), [_case_row(c) for c in case_queries.case_rows(conn, row.id)]


@dataclass
class CaseDetail:
    """One case of one run: the case row, the whole candidate pool by rank, and each relevant chunk with its
    document name, pool rank (None: not in the pool) and miss reason (``reason``, ``detail``, ``gap``)."""

    summary: dict
    case: dict
    candidates: list[dict]
    relevant: list[dict]
    neighbours: dict[str, str | None] = field(default_factory=dict)  # previous / next case id


def case_detail(engine: sa.Engine, run_id: str, case_id: str) -> CaseDetail:
    """The drill-down of case ``case_id`` of run ``run_id``; :class:`CaseNotFoundError` if the run lacks it."""
    with engine.connect() as conn:
        row = runs.get_run(conn, run_id)
        found = next(iter(case_queries.case_rows(conn, row.id, case_id)), None)
        if found is None:
            raise CaseNotFoundError(f"run {str(row.id)[:8]} has no case {case_id!r}")
        case = _case_row(found)
        pool = next(reports.iter_cases(conn, row.id, candidates="all", case_id=case_id))["candidates"]
        neighbours = case_queries.neighbours(conn, row.id, case["case_index"])
        in_pool = {c["chunk_id"]: c for c in pool}
        missing = [cid for cid in case["relevance_grades"] if cid not in in_pool]
        docs = _chunk_rows(conn, missing)
        summary = reports.summary_of(row)
    reasons = {r.get("chunk_id"): r for r in case["miss_reasons"]}
    relevant = []
    for chunk_id, grade in case["relevance_grades"].items():
        member, reason = in_pool.get(chunk_id), reasons.get(chunk_id, {})
        relevant.append({"chunk_id": chunk_id, "grade": grade,
                         "document_name": member["document_name"] if member else
                         (docs.get(chunk_id) or {}).get("document_name"),
                         "rank": member["rank"] if member else None, "reason": reason.get("reason"),
                         "detail": reason.get("detail"), "gap": reason.get("gap"), "miss": reason})
    return CaseDetail(summary, case, pool, relevant, {"previous": neighbours.previous, "next": neighbours.next})


def _chunk_rows(conn: sa.Connection, chunk_ids) -> dict[str, dict]:
    ids = uuid_strings(c for c in chunk_ids if str(c) == str(c).strip())  # a padded id names no chunk here
    return kb_queries.chunk_texts(conn, ids) if ids else {}


def chunk_texts(engine: sa.Engine, chunk_ids) -> dict[str, dict]:
    """Chunk id → ``content``, ``document_name``, ``ordinal``, ``is_current`` (ids that are not UUIDs or not
    found are left out). Looked up live: candidate snapshots never store text."""
    with engine.connect() as conn:
        return _chunk_rows(conn, chunk_ids)


@dataclass
class RunPair:
    """Two runs of the same dataset paired by ``case_id``: run ``a`` is the baseline side of :attr:`comparison`.
    ``labels``: the names the two runs carry in the comparison; ``cases``: every shared case with both metric
    sets and the delta on the primary metric, most moved first."""

    a: dict
    b: dict
    labels: tuple[str, str]
    comparison: StrategyComparison
    cases: list[dict]
    notes: list[str] = field(default_factory=list)


def _labels(a: dict, b: dict) -> tuple[str, str]:
    if a["strategy_version"] != b["strategy_version"]:
        return a["strategy_version"], b["strategy_version"]
    if a["run_id"] == b["run_id"]:
        return f"A: {a['strategy_version']}", f"B: {b['strategy_version']}"
    return f"{a['strategy_version']} @{a['run_id'][:8]}", f"{b['strategy_version']} @{b['run_id'][:8]}"


def compare_runs(engine: sa.Engine, run_a: str, run_b: str, *, n_resamples: int = 10000,
                 primary: str = comparison.PRIMARY_METRIC) -> RunPair:
    """Run ``run_b`` against run ``run_a`` (ids or unique prefixes) on the cases both share: the paired statistics
    of :func:`rag_pipeline.analysis.comparison.compare` with ``a`` as the baseline, and every shared case."""
    (sa_, cases_a), (sb, cases_b) = run_cases(engine, run_a), run_cases(engine, run_b)
    notes = []
    if sa_["status"] != "succeeded" or sb["status"] != "succeeded":
        raise comparison.ComparisonError("only succeeded runs can be compared "
                                         f"({sa_['run_id'][:8]}: {sa_['status']}, {sb['run_id'][:8]}: {sb['status']})")
    if sa_["dataset"]["name"] != sb["dataset"]["name"]:
        notes.append(f"the runs measure different datasets ({sa_['dataset']['name']} vs {sb['dataset']['name']}): "
                     "only the case ids they share are paired")
    if sa_["dataset"]["version"] != sb["dataset"]["version"]:
        notes.append(f"the runs measure different versions of the dataset ({sa_['dataset']['version'][:12]} vs "
                     f"{sb['dataset']['version'][:12]}): labels may differ between them")
    labels = _labels(sa_, sb)
    per_a = {c["case_id"]: c["metrics"] for c in cases_a}
    per_b = {c["case_id"]: c["metrics"] for c in cases_b}
    pair = [StrategyRun(labels[0], sa_["run_id"], per_a), StrategyRun(labels[1], sb["run_id"], per_b)]
    comp = comparison.compare(pair, labels[0], dataset=sa_["dataset"]["name"], metrics=PAIRED_METRICS,
                              n_resamples=n_resamples, primary=primary)
    questions = {c["case_id"]: c["question"] for c in cases_b} | {c["case_id"]: c["question"] for c in cases_a}
    shared = [c for c in per_a if c in per_b]
    rows = [{"case_id": c, "question": questions[c], "a": per_a[c], "b": per_b[c],
             "delta": per_b[c][primary] - per_a[c][primary]} for c in shared]
    rows.sort(key=lambda r: (-abs(round(r["delta"], 12)), r["case_id"]))
    return RunPair(sa_, sb, labels, comp, rows, notes + comp.notes)
