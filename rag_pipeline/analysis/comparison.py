"""Which strategy version is really better: paired comparison of the current runs on one dataset against a
baseline (statistics: docs/evaluating.md, :mod:`rag_pipeline.analysis.statistics`); :func:`regression_gate` fails on
a significant loss. :func:`compare` is pure; :func:`select_runs` and :func:`attach_top_chunks` read the database."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import sqlalchemy as sa

from rag_pipeline.analysis import statistics as stats
from rag_pipeline.contracts.comparison import ComparedRun, Gate, MovedCase, PairedResult, StrategyComparison, TopChunk
from rag_pipeline.contracts.errors import NotFoundOrInvalidError
from rag_pipeline.contracts.metrics import HEADLINE_METRICS, METRIC_NAMES
from rag_pipeline.evaluation.datasets import queries as dataset_queries
from rag_pipeline.evaluation.runs import candidate_queries
from rag_pipeline.evaluation.runs import queries as run_history
from rag_pipeline.evaluation.runs.case_queries import metrics_of_runs
from rag_pipeline.evaluation.runs.judged import judged_of_cases
from rag_pipeline.retrieval.strategies import StrategyError, load_registry, unknown_strategy_message

DEFAULT_BASELINE = "hybrid-v1"
PRIMARY_METRIC = "ndcg_at_k"
UNJUDGED_GAP = 0.10
"""A strategy whose top k holds this much more unjudged share than the baseline's (on the paired cases) is
warned about: unjudged chunks score as not relevant, so its figures are lower bounds (docs/metrics.md)."""


class ComparisonError(NotFoundOrInvalidError, LookupError):
    """Nothing to compare (no current run, unknown baseline); the message says what to run."""


@dataclass
class StrategyRun:
    version: str
    run_id: str
    per_case: dict[str, dict[str, float]]  # case_id -> metric -> value
    dataset_version: str = ""
    knowledge_base: str = ""
    judged: dict[str, float | None] = field(default_factory=dict)  # case_id -> Judged@k (None: undefined)

    def mean(self, metric: str) -> float:
        return float(np.mean([v[metric] for v in self.per_case.values()])) if self.per_case else 0.0

    def judged_mean(self, cases: Sequence[str] | None = None) -> float | None:
        """Mean Judged@k over ``cases`` (default: all) where it is defined; None: nowhere (or not known)."""
        values = [v for c in (self.per_case if cases is None else cases) if (v := self.judged.get(c)) is not None]
        return float(np.mean(values)) if values else None


def _registered() -> list[str]:
    """The versions of the strategies file (none when it cannot be read: the runs' versions still count)."""
    try:
        return list(load_registry())
    except StrategyError:
        return []


def compare(runs: Sequence[StrategyRun], baseline: str = DEFAULT_BASELINE, *, dataset: str = "",
            dataset_version: str = "", knowledge_base: str = "", stale: dict[str, str] | None = None,
            margin: float = 0.0, alpha: float = 0.05, metrics: Sequence[str] = HEADLINE_METRICS,
            primary: str = PRIMARY_METRIC, n_resamples: int = 10000, seed: int = 0,
            top_moved: int = 5) -> StrategyComparison:
    """Paired statistics of every run against the baseline run and the regression gate (see module doc)."""
    by_version = {r.version: r for r in runs}
    if baseline not in by_version and baseline not in _registered():  # a typo: say so, with the close names
        raise ComparisonError(unknown_strategy_message(baseline, [*by_version, *_registered()]))
    if baseline not in by_version:
        raise ComparisonError(f"baseline strategy {baseline!r} has no current run on dataset {dataset!r}; "
                              f"runs exist for: {', '.join(sorted(by_version)) or '(none)'} — evaluate the "
                              f"baseline first or pick one of those with --baseline")
    metrics = tuple(dict.fromkeys([*metrics, primary]))
    base = by_version[baseline]
    ordered = [base] + sorted((r for r in runs if r.version != baseline), key=lambda r: r.version)
    notes, paired, moved, warnings = [], [], {}, []
    for run in ordered[1:]:
        shared = [c for c in base.per_case if c in run.per_case]
        if len(shared) != len(base.per_case) or len(shared) != len(run.per_case):
            notes.append(f"{run.version}: paired on the {len(shared)} case ids both runs share "
                         f"(baseline has {len(base.per_case)}, {run.version} has {len(run.per_case)})")
        if not shared:
            continue
        delta = float(np.mean([run.per_case[c][primary] - base.per_case[c][primary] for c in shared]))
        if (warning := unjudged_warning(run, base, shared, primary, delta)) is not None:
            warnings.append(warning)
        for metric in metrics:
            a = np.array([run.per_case[c][metric] for c in shared], dtype=float)
            b = np.array([base.per_case[c][metric] for c in shared], dtype=float)
            low, high = stats.bootstrap_ci(a - b, n_resamples=n_resamples, seed=seed)
            wins, ties, losses = stats.win_tie_loss(a, b)
            paired.append(PairedResult(
                strategy=run.version, metric=metric, n=len(shared), baseline_mean=float(b.mean()),
                strategy_mean=float(a.mean()), delta=float((a - b).mean()),
                p_value=stats.paired_permutation_test(a, b, n_resamples=n_resamples, seed=seed), ci_low=low,
                ci_high=high, ttest_p=stats.paired_ttest(a, b)[1], wins=wins, ties=ties, losses=losses))
        diffs = sorted(shared, key=lambda c: (-round(abs(run.per_case[c][primary] - base.per_case[c][primary]), 12), c))
        moved[run.version] = [
            MovedCase(case_id=c, baseline=base.per_case[c][primary], strategy=run.per_case[c][primary],
                      delta=run.per_case[c][primary] - base.per_case[c][primary])
            for c in diffs[:top_moved] if run.per_case[c][primary] != base.per_case[c][primary]]
    for metric in metrics:
        rows = [p for p in paired if p.metric == metric]
        if rows:
            for p, adj in zip(rows, stats.holm_correction([p.p_value for p in rows]), strict=True):
                p.p_holm = float(adj)
    compared = [ComparedRun(strategy=r.version, run_id=r.run_id, cases=len(r.per_case),
                            dataset_version=r.dataset_version, knowledge_base=r.knowledge_base,
                            judged_at_k=r.judged_mean(), **{m: r.mean(m) for m in metrics}) for r in ordered]
    return StrategyComparison(dataset=dataset, baseline=baseline, dataset_version=dataset_version,
                              knowledge_base=knowledge_base, notes=notes, runs=compared, paired=paired, moved=moved,
                              stale=stale or {}, gate=regression_gate(paired, margin=margin, alpha=alpha),
                              judged_warnings=warnings)


def unjudged_warning(run: StrategyRun, base: StrategyRun, shared: Sequence[str], primary: str,
                     delta: float) -> str | None:
    """Why ``run``'s difference to ``base`` on ``shared`` cases is not to be trusted as it stands: its top k holds
    at least :data:`UNJUDGED_GAP` more unjudged share (1 − Judged@k) than the baseline's; None: no such gap."""
    both = [c for c in shared if run.judged.get(c) is not None and base.judged.get(c) is not None]
    if not both:
        return None
    ours, theirs = 1 - (run.judged_mean(both) or 0.0), 1 - (base.judged_mean(both) or 0.0)
    if ours - theirs < UNJUDGED_GAP:
        return None
    return (f"{run.version}: {ours:.0%} of its top-k chunks are unjudged vs {theirs:.0%} for the baseline "
            f"(+{(ours - theirs) * 100:.0f} points, {len(both)} paired cases); unjudged chunks score as not relevant, "
            f"so its {primary} difference of {delta:+.4f} is a lower bound, not a measurement: judge them "
            f"(`rag-pipeline suggest --from-run {run.run_id[:8]}`) and `rag-pipeline runs rescore` the runs")


def failure_description(p: PairedResult) -> str:
    return (f"{p.strategy} is worse than the baseline on {p.metric} by {-p.delta:.4f} "
            f"(95% CI {p.ci_low:+.4f}..{p.ci_high:+.4f}, Holm p={p.p_holm:.4g}, "
            f"{p.losses} cases worse / {p.wins} better)")


def regression_gate(paired: Sequence[PairedResult], *, margin: float = 0.0, alpha: float = 0.05,
                    metric: str = PRIMARY_METRIC) -> Gate:
    """Fail when some strategy's mean difference to the baseline is below ``-margin`` and significant
    (Holm-adjusted permutation p < ``alpha``)."""
    if margin < 0 or not 0 < alpha < 1:
        raise ValueError(f"need margin >= 0 and 0 < alpha < 1, got margin={margin}, alpha={alpha}")
    failures = [p for p in paired if p.metric == metric and p.p_holm < alpha and p.delta < -margin]
    description = "; ".join(map(failure_description, failures)) or (
        f"no strategy is significantly worse than the baseline on {metric} by more than {margin:g} "
        f"(Holm-adjusted p < {alpha:g})")
    return Gate(passed=not failures, margin=margin, alpha=alpha, metric=metric,
                failing=[p.strategy for p in failures], description=description)


def dataset_version_row(conn: sa.Connection, dataset: str, knowledge_base: str | None = None,
                        dataset_version: str | None = None) -> sa.Row:
    """The stored version of dataset ``dataset`` to analyse: ``dataset_version`` (a content hash or a prefix),
    else the latest one (stored or re-stored last). Columns: ``dataset_id``, ``content_hash``,
    ``knowledge_base_name``, ``kbs`` (how many knowledge bases the name is used with)."""
    versions = dataset_queries.versions_of_name(conn, dataset, knowledge_base, dataset_version)
    if not versions:
        raise ComparisonError(f"no stored dataset {dataset!r}{_scope(knowledge_base, dataset_version)}; evaluate it "
                              "first (rag-pipeline evaluate / the retrieval_evaluation assets)")
    return versions[0]


def _scope(knowledge_base: str | None, dataset_version: str | None) -> str:
    return ((f" and knowledge base {knowledge_base!r}" if knowledge_base else "")
            + (f" with version {dataset_version!r}" if dataset_version else ""))


@dataclass
class RunSelection:
    """The runs a comparison may pair: every strategy's latest-started succeeded run on ONE dataset version."""

    dataset: str
    knowledge_base: str
    dataset_version: str
    runs: list[StrategyRun]
    stale: dict[str, str] = field(default_factory=dict)  # strategy -> "stale: no run on version <hash>"
    notes: list[str] = field(default_factory=list)


def select_runs(conn: sa.Connection, dataset: str, knowledge_base: str | None = None,
                dataset_version: str | None = None) -> RunSelection:
    """The runs of dataset ``dataset`` (its name) to compare: on its latest version (the one stored or
    re-stored last), or on ``dataset_version`` (a content hash or a prefix of one). A strategy whose runs are
    all on other versions is listed in ``stale`` and left out: versions never mix. A dataset name used with
    several knowledge bases: the knowledge base of its latest version (a note says so)."""
    version = dataset_version_row(conn, dataset, knowledge_base, dataset_version)
    selection = RunSelection(dataset, version.knowledge_base_name, version.content_hash, [])
    if version.kbs > 1:
        selection.notes.append(f"dataset {dataset!r} is evaluated on several knowledge bases; comparing on "
                               f"{version.knowledge_base_name!r} (choose with --knowledge-base)")
    rows = run_history.latest_per_strategy(conn, version.dataset_id, version.knowledge_base_name)
    runs = {r.run_id: StrategyRun(r.strategy_version, r.run_id, {}, version.content_hash, version.knowledge_base_name)
            for r in rows}
    for row in metrics_of_runs(conn, list(runs)):
        runs[row["run_id"]].per_case[row["case_id"]] = {m: float(row[m]) for m in METRIC_NAMES}
    for run in runs.values():
        run.judged = {c: j.at_k for c, j in judged_of_cases(conn, run.run_id).items()}
    selection.runs = sorted(runs.values(), key=lambda r: r.version)
    have = {r.version for r in selection.runs}
    for other in run_history.current_on_other_versions(conn, dataset, version.knowledge_base_name, version.dataset_id):
        if other.strategy_version not in have:
            selection.stale[other.strategy_version] = f"stale: no run on version {version.content_hash[:12]}"
    if not selection.runs:
        raise ComparisonError(f"no succeeded run on version {version.content_hash[:12]} of dataset {dataset!r}"
                              f"{_scope(knowledge_base, dataset_version)}; evaluate it first (rag-pipeline "
                              "evaluate / the retrieval_evaluation assets)"
                              + (f"; runs on other versions: {', '.join(selection.stale)}" if selection.stale else ""))
    return selection


def attach_top_chunks(conn: sa.Connection, comparison: StrategyComparison, top: int = 3) -> None:
    """Add the top-``top`` stored candidates of the baseline (``before``) and the strategy (``after``) run
    to every moved case (document name, chunk id, rank, relevant flag)."""
    run_of = {r.strategy: r.run_id for r in comparison.runs}
    wanted = {(run_of[v], m.case_id) for v, moved in comparison.moved.items() for m in moved}
    wanted |= {(run_of[comparison.baseline], c) for _, c in wanted}
    if not wanted:
        return
    rows = candidate_queries.top_candidates(conn, sorted({r for r, _ in wanted}), sorted({c for _, c in wanted}), top)
    pools: dict[tuple[str, str], list[TopChunk]] = {}
    for r in rows:
        pools.setdefault((r.run_id, r.case_id), []).append(
            TopChunk(rank=r.rank, document_name=r.document_name, chunk_id=r.chunk_id, is_relevant=r.is_relevant))
    for version, moved in comparison.moved.items():
        for m in moved:
            m.before = pools.get((run_of[comparison.baseline], m.case_id), [])
            m.after = pools.get((run_of[version], m.case_id), [])
