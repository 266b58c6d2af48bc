"""Asset checks: ``label_integrity`` of ``evaluation_dataset`` (the service's label rule, docs/design.md §8) and
``regression_gate`` of ``strategy_comparison``, evaluated by that asset itself with its config."""

import warnings

import dagster as dg

from rag_pipeline.contracts.label_check import LabelReport
from rag_pipeline.defs.evaluation import evaluation_dataset, stored_dataset_id
from rag_pipeline.defs.partitions import evaluation_partitions
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.service.analysis import StrategyComparison
from rag_pipeline.service.datasets import check_stored_dataset
from rag_pipeline.service.evaluations import label_rule

MAX_ROWS = 100
REGRESSION_GATE_SPEC = dg.AssetCheckSpec(
    "regression_gate", asset="strategy_comparison",
    description="Fails when a strategy is significantly worse than the baseline on nDCG@k (Holm-adjusted "
                "paired permutation p < alpha) by more than the configured margin.")


def label_integrity_result(report: LabelReport) -> dg.AssetCheckResult:
    """The check result of a label report (pure: testable without a Dagster run)."""
    all_bad, some_bad = report.cases_with("all_invalid"), report.cases_with("some_invalid")
    invalid = report.invalid()
    lines = ["| case | label | status | detail |", "|---|---|---|---|"]
    lines += [f"| {r.case_id} | `{r.chunk_id}` | {r.status} | {r.detail.replace('|', '/')} |"
              for r in invalid[:MAX_ROWS]]
    if len(invalid) > MAX_ROWS:
        lines.append(f"| … | | | {len(invalid) - MAX_ROWS} more: rag-pipeline check-dataset --format json |")
    metadata: dict[str, dg.RawMetadataValue] = {
        "summary": report.summary(),
        "invalid_labels": len(invalid),
        "labels": len(report.rows),
        "cases_without_valid_label": len(all_bad),
        "cases_with_some_invalid_labels": len(some_bad),
        "status_counts": dg.MetadataValue.json(report.counts()),
    }
    if invalid:
        metadata["invalid"] = dg.MetadataValue.md("\n".join(lines))
    severity = dg.AssetCheckSeverity.ERROR if label_rule(report) == "refuse" else dg.AssetCheckSeverity.WARN
    return dg.AssetCheckResult(passed=not invalid, severity=severity, metadata=metadata,
                               description=report.summary())


def _label_integrity(context: dg.AssetCheckExecutionContext, rag_db: RagDatabase) -> dg.AssetCheckResult:
    report = check_stored_dataset(rag_db.engine(), stored_dataset_id(context))
    if report.invalid():
        context.log.warning(report.summary())
    return label_integrity_result(report)


with warnings.catch_warnings():  # a partitioned check is a Dagster "preview" feature; the check needs the key
    warnings.simplefilter("ignore", dg.PreviewWarning)
    label_integrity = dg.asset_check(
        asset=evaluation_dataset, name="label_integrity", blocking=True, partitions_def=evaluation_partitions,
        description="Every relevant id must be a current chunk of the knowledge base whose document is READY, "
                    "PUBLISHED and not deleted (docs/design.md §8). ERROR (blocks the evaluation) when no label is "
                    "valid, as the CLI and the API refuse; WARN when some labels are invalid.")(_label_integrity)


def regression_gate_result(comparison: StrategyComparison) -> dg.AssetCheckResult:
    gate = comparison.gate
    margin, alpha = gate.margin, gate.alpha
    rows = [p for p in comparison.paired if p.metric == gate.metric]
    return dg.AssetCheckResult(
        check_name=REGRESSION_GATE_SPEC.name, asset_key=REGRESSION_GATE_SPEC.asset_key, passed=gate.passed,
        severity=dg.AssetCheckSeverity.ERROR, description=gate.description,
        metadata={"baseline": comparison.baseline, "margin": margin, "alpha": alpha,
                  "failing_strategies": gate.failing,
                  "deltas": dg.MetadataValue.json({p.strategy: round(p.delta, 6) for p in rows}),
                  "holm_p": dg.MetadataValue.json({p.strategy: p.p_holm for p in rows})})
