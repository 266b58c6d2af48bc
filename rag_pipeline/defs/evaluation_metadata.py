"""Descriptions and Dagster metadata (numbers, tables, markdown) of the evaluation assets."""

import dagster as dg

from rag_pipeline.contracts.metrics import HEADLINE_METRICS, METRIC_LABELS
from rag_pipeline.contracts.reports import CaseOverview, RunTables, TopCandidate
from rag_pipeline.contracts.runs import RunCounts, RunSummary

MAX_TABLE_ROWS = 200
RUN_ASSETS = ("retrieval_candidates", "case_metrics", "evaluation_run_summary")
"""The assets one evaluation run materialises (one step, one transaction)."""
DISPLAY_DECIMALS = 4


def display_number(x: float) -> float:
    """``x`` rounded for display in the Dagster UI (the database keeps full precision): 4 decimals, except a
    tiny non-zero value (a p-value) keeps 4 significant digits rather than showing as 0."""
    x = float(x)
    if x != 0 and abs(x) < 10 ** -DISPLAY_DECIMALS:
        return float(f"{x:.{DISPLAY_DECIMALS}g}")
    return round(x, DISPLAY_DECIMALS)


def display_float(x: float) -> dg.FloatMetadataValue:
    """A float metadata value rounded by :func:`display_number`."""
    return dg.MetadataValue.float(display_number(x))

CANDIDATES_DOC = """The full candidate pool of every case (docs/design.md §4.1), one row per candidate in
``retrieval_evaluation_candidates``: chunk and document ids, document name, final rank, vector/keyword
scores and per-leg ranks, rerank and final score, ``is_relevant``, ``is_selected`` (within the case's k),
strategy version. No chunk text. Written with COPY in the run's single transaction."""

CASE_METRICS_DOC = """Per-case metrics with the case's own k (``retrieval_evaluation_case_results``):
Precision@k, Recall@k, reciprocal rank, nDCG@k, Hit@k, AP@k, R-precision, the retrieved ids and the rank
of the first relevant chunk in the whole pool. Metadata: a per-case table with the top-3 selected."""

SUMMARY_DOC = """The evaluation run (``retrieval_evaluation_runs``): metric averages, counts, strategy version
and parameter hash, dataset version, knowledge base, embedding model, timings, status. The newest
succeeded run of a dataset × strategy is ``is_current``; older runs are kept as history. The four headline
averages are numeric metadata, so the UI plots them across partitions and over time."""


def _top3(top: list[TopCandidate]) -> str:
    return "; ".join(f"{'✓' if c.is_relevant else '✗'} {c.document_name} ({c.final_score:.3f})"
                     for c in top) or "(nothing retrieved)"


def _cut(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def worst_cases_markdown(worst: list[CaseOverview]) -> str:
    head = "| case | question | " + " | ".join(METRIC_LABELS[m] for m in HEADLINE_METRICS) + " | 1st relevant | top-3 |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for c in worst:
        cells = [c.case_id, _cut(c.question, 80), *(f"{getattr(c.metrics, m):.3f}" for m in HEADLINE_METRICS),
                 str(c.first_relevant_rank or "–"), _top3(c.top3)]
        lines.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    return "\n".join(lines)


def stage_seconds(s: RunSummary) -> dict[str, float]:
    """The run's wall time per stage, its stages in order and ``wall`` last (empty: a run without stage times)."""
    if s.stages is None:
        return {}
    return {**{label: display_number(v) for label, v in s.stages.stages()}, "wall": display_number(s.stages.wall_s)}


def run_metadata(t: RunTables) -> dict[str, dict]:
    """The metadata of each asset of one run (:data:`RUN_ASSETS`), from its summary and case tables."""
    s, counts, timings = t.summary, t.summary.counts or RunCounts(), t.summary.timings or {}
    columns = [dg.TableColumn("case_id"), dg.TableColumn("question"), dg.TableColumn("k", "int"),
               *(dg.TableColumn(METRIC_LABELS[m], "float") for m in HEADLINE_METRICS),
               dg.TableColumn("first_relevant_rank", "int"), dg.TableColumn("top3_selected")]
    records = [dg.TableRecord({
        "case_id": c.case_id, "question": _cut(c.question, 160), "k": c.k,
        **{METRIC_LABELS[m]: display_number(getattr(c.metrics, m)) for m in HEADLINE_METRICS},
        "first_relevant_rank": c.first_relevant_rank, "top3_selected": _top3(c.top3),
    }) for c in t.cases]
    candidates = {
        "run_id": s.run_id,
        "dagster/row_count": s.candidate_count,
        "cases": s.case_count,
        "mean_pool_size": round(s.candidate_count / max(s.case_count, 1), 2),
        "relevant_in_pool": counts.relevant_in_pool,
        "relevant_total": counts.relevant_total,
        "cases_without_candidates": counts.cases_without_candidates,
        "embedding_seconds": display_number(timings.get("embedding_s", 0.0)),
        "retrieval_wall_seconds": display_number(timings.get("retrieval_wall_s", 0.0)),
        "retrieval_sql_seconds_summed": display_number(timings.get("retrieval_sql_s", 0.0)),
    }
    case_metrics = {
        "run_id": s.run_id,
        "dagster/row_count": s.case_count,
        "cases_with_hit": counts.cases_with_hit,
        "unanswerable_cases": counts.unanswerable_cases,  # docs/design.md §12.1
        "per_case": dg.MetadataValue.table(records, dg.TableSchema(columns)),
        "per_case_rows_shown": len(records),
        "metrics_seconds": display_number(timings.get("metrics_s", 0.0)),
    }
    summary = {
        **{m: display_float(v) for m, v in (s.metrics.model_dump() if s.metrics else {}).items()},
        "run_id": s.run_id,
        "strategy_version": s.strategy_version,
        "params_hash": s.params_hash,
        "dataset": s.dataset.name,
        "dataset_version": s.dataset.version,
        "knowledge_base": s.knowledge_base.name,
        "knowledge_base_version": s.knowledge_base.version or "",
        "cases": s.case_count,
        "unanswerable_cases": counts.unanswerable_cases,
        "candidates": s.candidate_count,
        "dagster/row_count": 1,
        "timings": dg.MetadataValue.json({k: display_number(v) if isinstance(v, float) else v
                                          for k, v in timings.items()}),
        "stage_seconds": dg.MetadataValue.json(stage_seconds(s)),
        "worst_cases": dg.MetadataValue.md(worst_cases_markdown(t.worst)),
        "miss_reasons": dg.MetadataValue.json(counts.miss_reasons.counts if counts.miss_reasons else {}),
        "headline": dg.MetadataValue.md(counts.first_line or "_metrics are not all zero_"),
    }
    return dict(zip(RUN_ASSETS, (candidates, case_metrics, summary), strict=True))
