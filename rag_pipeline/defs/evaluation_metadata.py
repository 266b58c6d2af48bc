"""Descriptions and Dagster metadata (numbers, tables, markdown) of the evaluation assets."""

import dagster as dg

from rag_pipeline.service.evaluations import METRIC_LABELS, METRIC_NAMES, EvaluationOutcome

MAX_TABLE_ROWS = 200
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


def candidates_metadata(o: EvaluationOutcome) -> dict:
    return {
        "run_id": o.run_id,
        "dagster/row_count": o.candidate_count,
        "cases": o.case_count,
        "mean_pool_size": round(o.candidate_count / max(o.case_count, 1), 2),
        "relevant_in_pool": o.summary.get("relevant_in_pool", 0),
        "relevant_total": o.summary.get("relevant_total", 0),
        "cases_without_candidates": o.summary.get("cases_without_candidates", 0),
        "embedding_seconds": display_number(o.timings.get("embedding_s", 0.0)),
        "retrieval_wall_seconds": display_number(o.timings.get("retrieval_wall_s", 0.0)),
        "retrieval_sql_seconds_summed": display_number(o.timings.get("retrieval_sql_s", 0.0)),
    }


def _top3(top: list[dict]) -> str:
    return "; ".join(f"{'✓' if c['is_relevant'] else '✗'} {c['document_name']} ({c['final_score']:.3f})"
                     for c in top) or "(nothing retrieved)"


def case_metrics_metadata(o: EvaluationOutcome, cases: list[dict]) -> dict:
    columns = [dg.TableColumn("case_id"), dg.TableColumn("question"), dg.TableColumn("k", "int"),
               *(dg.TableColumn(METRIC_LABELS[m], "float") for m in METRIC_NAMES[:4]),
               dg.TableColumn("first_relevant_rank", "int"), dg.TableColumn("top3_selected")]
    records = [dg.TableRecord({
        "case_id": c["case_id"], "question": _cut(c["question"], 160), "k": c["k"],
        **{METRIC_LABELS[m]: display_number(c[m]) for m in METRIC_NAMES[:4]},
        "first_relevant_rank": c["first_relevant_rank"], "top3_selected": _top3(c["top3"]),
    }) for c in cases]
    return {
        "run_id": o.run_id,
        "dagster/row_count": o.case_count,
        "cases_with_hit": o.summary.get("cases_with_hit", 0),
        "per_case": dg.MetadataValue.table(records, dg.TableSchema(columns)),
        "per_case_rows_shown": len(records),
        "metrics_seconds": display_number(o.timings.get("metrics_s", 0.0)),
    }


def _cut(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def worst_cases_markdown(worst: list[dict]) -> str:
    head = "| case | question | " + " | ".join(METRIC_LABELS[m] for m in METRIC_NAMES[:4]) + " | 1st relevant | top-3 |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for c in worst:
        cells = [c["case_id"], _cut(c["question"], 80), *(f"{float(c[m]):.3f}" for m in METRIC_NAMES[:4]),
                 str(c["first_relevant_rank"] or "–"), _top3(c["top3"])]
        lines.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    return "\n".join(lines)


def summary_metadata(o: EvaluationOutcome, worst: list[dict]) -> dict:
    return {
        **{m: display_float(o.averages[m]) for m in METRIC_NAMES},
        "run_id": o.run_id,
        "strategy_version": o.strategy_version,
        "params_hash": o.params_hash,
        "dataset": o.dataset_name,
        "dataset_version": o.dataset_version,
        "knowledge_base": o.knowledge_base,
        "knowledge_base_version": o.knowledge_base_version or "",
        "cases": o.case_count,
        "candidates": o.candidate_count,
        "dagster/row_count": 1,
        "timings": dg.MetadataValue.json({k: display_number(v) if isinstance(v, float) else v
                                          for k, v in o.timings.items()}),
        "worst_cases": dg.MetadataValue.md(worst_cases_markdown(worst)),
        "miss_reasons": dg.MetadataValue.json(o.summary.get("miss_reasons", {}).get("counts", {})),
        "headline": dg.MetadataValue.md(o.summary.get("first_line") or "_metrics are not all zero_"),
    }
