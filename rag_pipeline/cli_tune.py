"""``rag-pipeline tune``: tune the fusion of a stored run's candidate pools, offline, with cross-validation.

``tune --dataset NAME_OR_FILE [--knowledge-base KB] [--pool-strategy hybrid-bm25-v1] [--metric ndcg_at_k]
[--folds 5] [--seed 0] [--version NAME] [--format text|json] [--write-strategy FILE]`` reads the current
succeeded run of the pool strategy on the dataset (evaluate it first), re-fuses its stored pools under
every configuration of :func:`rag_pipeline.analysis.tuning.grid` and picks one by k-fold cross-validation
over cases (:func:`rag_pipeline.analysis.tuning.recommend`). It prints the cross-validated metric with its
bootstrap 95 % CI, the gain over the pool strategy's own fusion (CI, p), the recall ceiling, the
configuration each fold chose, the best configurations and the ready-to-paste strategy YAML. No SQL per
case and no embedding: only the stored pools are read.

``--write-strategy FILE`` appends the tuned strategy to the registry file ``FILE``; a missing ``FILE``
starts as a copy of the active registry (``RAG_STRATEGIES_FILE`` or the packaged one), so
``RAG_STRATEGIES_FILE=FILE rag-pipeline evaluate --strategy <tuned version> ...`` runs it next to every
existing version. Exit 0 on success, 2 on user errors (nothing evaluated yet, bad metric or folds, a
version name already used with other parameters).

The Dagster asset ``fusion_sweep`` (:mod:`rag_pipeline.defs.tuning`) uses :func:`find_pool_run` and
:func:`tune` from here, so both always agree; this module does not import Dagster.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
import yaml

from rag_pipeline.cli_diagnose import dataset_name_and_kb
from rag_pipeline.cli_errors import guarded
from rag_pipeline.evaluation.dataset import DatasetError
from rag_pipeline.storage.engine import DatabaseError, get_engine
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError
from rag_pipeline.evaluation.metrics import METRIC_NAMES
from rag_pipeline.evaluation.pools import load_pools
from rag_pipeline.retrieval.strategies import (
    FIELD_NAMES, Strategy, StrategyError, load_registry, parse_registry, registry_path,
    strategy_from_mapping, strategy_to_yaml,
)
from rag_pipeline.analysis.tuning import DEFAULT_METRIC, FusionConfig, Recommendation, recommend

DEFAULT_POOL_STRATEGY = "hybrid-bm25-v1"
DEFAULT_FOLDS = 5
TOP_CONFIGS = 10
SHALLOW_POOL = 50  # a leg with fewer candidates than this leaves the sweep little to re-rank
TABLE_METRICS = ("ndcg_at_k", "recall_at_k", "reciprocal_rank", "precision_at_k")


class TuneError(LookupError):
    """Nothing to tune (no current run of the pool strategy), or a name clash; the message says what to do."""


@dataclass
class PoolRun:
    """The stored run whose candidate pools are tuned, and the exact strategy that produced them."""

    run_id: str
    dataset: str
    dataset_version: str
    knowledge_base: str
    strategy: Strategy
    case_count: int
    finished_at: str | None
    notes: list[str] = field(default_factory=list)


_POOL_RUN_SQL = """
SELECT r.id::text AS run_id, r.strategy_version, r.params_hash, r.strategy_params, r.case_count,
       r.finished_at, d.name AS dataset_name, d.content_hash, kb.name AS kb_name
FROM retrieval_evaluation_runs r
JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
JOIN knowledge_bases kb ON kb.id = r.knowledge_base_id
WHERE r.strategy_version = :sv AND r.is_current AND r.status = 'succeeded'
  AND (d.name = :ds OR r.partition_key = :pk) AND (CAST(:kb AS text) IS NULL OR kb.name = :kb)
ORDER BY r.finished_at DESC, r.id
"""
_OTHER_RUNS_SQL = """
SELECT DISTINCT r.strategy_version FROM retrieval_evaluation_runs r
JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
WHERE d.name = :ds AND r.is_current AND r.status = 'succeeded' ORDER BY 1
"""


def find_pool_run(conn: sa.Connection, dataset: str, pool_strategy: str = DEFAULT_POOL_STRATEGY,
                  knowledge_base: str | None = None,
                  registry: dict[str, Strategy] | None = None) -> PoolRun:
    """The current succeeded run of ``pool_strategy`` on dataset ``dataset`` (its name, or the dataset key
    of an ``evaluate_retrieval`` partition). Several knowledge bases: the most recent run's (a note says so).

    The strategy is rebuilt from the parameters the run stored (with the registry's description when the
    registry holds the same parameters), so the tuned strategy keeps exactly the pools' candidate ks.
    Raises :class:`TuneError` naming the command and the partition to run first.
    """
    rows = conn.execute(sa.text(_POOL_RUN_SQL), {"sv": pool_strategy, "ds": dataset,
                                                 "pk": f"{dataset}|{pool_strategy}",
                                                 "kb": knowledge_base}).all()
    if not rows:
        others = conn.execute(sa.text(_OTHER_RUNS_SQL), {"ds": dataset}).scalars().all()
        where = f" and knowledge base {knowledge_base!r}" if knowledge_base else ""
        raise TuneError(
            f"no current succeeded run of strategy {pool_strategy!r} on dataset {dataset!r}{where}, so there "
            f"are no stored pools to tune: evaluate it first (`rag-pipeline evaluate --dataset <file> --strategy "
            f"{pool_strategy}`, or materialise partition '{dataset}|{pool_strategy}' with job "
            f"evaluate_retrieval); current runs on this dataset: {', '.join(others) or '(none)'}")
    row = rows[0]
    notes = []
    if len({r.kb_name for r in rows}) > 1:
        notes.append(f"dataset {dataset!r} has current runs of {pool_strategy} on several knowledge bases "
                     f"({', '.join(sorted({r.kb_name for r in rows}))}); tuning the latest ({row.kb_name}); "
                     "choose with --knowledge-base")
    strategy = _stored_strategy(row, registry if registry is not None else _registry_or_empty())
    shallow = [f"{leg} {k}" for leg, k in (("vector", strategy.vector_candidate_k),
                                           ("keyword", strategy.keyword_candidate_k)) if 0 < k < SHALLOW_POOL]
    if shallow:
        notes.append(f"{pool_strategy} stores shallow pools ({', '.join(shallow)} candidates per leg): the "
                     f"sweep can only re-rank those; a pool strategy with {SHALLOW_POOL}-100 candidates per "
                     f"leg (e.g. {DEFAULT_POOL_STRATEGY}) leaves more to gain")
    return PoolRun(row.run_id, row.dataset_name, row.content_hash, row.kb_name, strategy, row.case_count,
                   row.finished_at.isoformat() if row.finished_at else None, notes)


def _registry_or_empty() -> dict[str, Strategy]:
    try:
        return load_registry()
    except StrategyError:
        return {}


def _stored_strategy(row: sa.Row, registry: dict[str, Strategy]) -> Strategy:
    known = registry.get(row.strategy_version)
    if known is not None and known.params_hash() == row.params_hash:
        return known
    params = {k: v for k, v in (row.strategy_params or {}).items() if k in FIELD_NAMES}
    try:
        return strategy_from_mapping({**params, "version": row.strategy_version,
                                      "description": known.description if known else ""},
                                     where=f"run {row.run_id}")
    except StrategyError as exc:
        raise TuneError(f"the stored parameters of run {row.run_id} do not make a valid strategy: {exc}") from None


@dataclass
class TuneResult:
    """A recommendation with the run it was computed from (see :func:`tune`)."""

    pool_run: PoolRun
    recommendation: Recommendation
    folds: int
    seed: int
    notes: list[str] = field(default_factory=list)

    @property
    def base_config(self) -> FusionConfig:
        return FusionConfig.from_strategy(self.recommendation.base)

    def per_fold(self) -> list[dict[str, Any]]:
        """Per fold: its cases, the configuration chosen on the other folds, its held-out mean."""
        cv = self.recommendation.cv
        return [{"fold": int(f), "cases": int(np.count_nonzero(cv.fold_of == f)), "chosen": config.label,
                 "held_out_mean": float(cv.out_of_fold[cv.fold_of == f].mean())}
                for f, config in zip(np.unique(cv.fold_of), cv.chosen, strict=True)]

    def top_configurations(self, n: int = TOP_CONFIGS) -> list[dict[str, Any]]:
        """The ``n`` best configurations on all cases (ties: grid order), with every metric's mean,
        how many folds chose them, and whether they are the base / recommended fusion."""
        rec = self.recommendation
        rows = rec.sweep.rows()
        means = rec.sweep.means
        order = sorted(range(len(rows)), key=lambda i: (-means[i], i))[:n]
        chosen = [c.label for c in rec.cv.chosen]
        recommended = FusionConfig.from_strategy(rec.strategy)
        return [{"rank": r + 1, **rows[i], "folds_chosen": chosen.count(rows[i]["label"]),
                 "is_base": rec.sweep.configs[i] == self.base_config,
                 "is_recommended": rec.sweep.configs[i] == recommended}
                for r, i in enumerate(order)]

    def as_dict(self, top: int = TOP_CONFIGS) -> dict[str, Any]:
        """Everything as plain JSON-able values (the ``--format json`` output)."""
        rec, run = self.recommendation, self.pool_run
        return _plain({
            "dataset": run.dataset, "dataset_version": run.dataset_version,
            "knowledge_base": run.knowledge_base, "pool_run_id": run.run_id, "pool_strategy": rec.base.version,
            "folds": self.folds, "seed": self.seed, "base_fusion": self.base_config.label,
            **rec.summary(),
            "per_fold": self.per_fold(),
            "top_configurations": self.top_configurations(top),
            "strategy": {name: getattr(rec.strategy, name) for name in FIELD_NAMES},
            "yaml": rec.yaml,
            "notes": self.notes,
        })


def _plain(value: Any) -> Any:
    """``value`` with numpy scalars as Python ``int`` / ``float`` / ``bool`` and tuples as lists."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def tune(conn: sa.Connection, dataset: str, pool_strategy: str = DEFAULT_POOL_STRATEGY,
         metric: str = DEFAULT_METRIC, folds: int = DEFAULT_FOLDS, seed: int = 0, *,
         knowledge_base: str | None = None, version: str | None = None,
         n_resamples: int = 10000) -> TuneResult:
    """Load the pools of the pool strategy's current run on ``dataset`` and :func:`recommend` a fusion."""
    if metric not in METRIC_NAMES:
        raise ValueError(f"unknown metric {metric!r}; expected one of {list(METRIC_NAMES)}")
    run = find_pool_run(conn, dataset, pool_strategy, knowledge_base)
    pools = load_pools(conn, run.run_id)
    if not 2 <= folds <= pools.n_cases:
        raise ValueError(f"--folds must be between 2 and the number of cases ({pools.n_cases}), got {folds}")
    rec = recommend(pools, run.strategy, metric, folds, seed, version=version, n_resamples=n_resamples)
    notes = list(run.notes)
    if FusionConfig.from_strategy(rec.strategy) == FusionConfig.from_strategy(run.strategy):
        notes.append(f"the best fusion on these pools is {run.strategy.version}'s own "
                     f"({FusionConfig.from_strategy(run.strategy).label}): the new version only renames it")
    stored = conn.execute(sa.text("SELECT params_hash FROM retrieval_strategies WHERE version = :v"),
                          {"v": rec.strategy.version}).scalar()
    if stored is not None and stored != rec.strategy.params_hash():
        notes.append(f"strategy version {rec.strategy.version!r} was already run with other parameters; "
                     "choose a new name with --version before adding this one")
    return TuneResult(run, rec, folds, seed, notes)


def write_strategy(path: str | Path, strategy: Strategy, comment: str = "") -> str:
    """Append ``strategy`` to the registry file ``path``; returns ``"appended"`` or ``"unchanged"``.

    A missing file starts as a copy of the active registry (:func:`registry_path`). The result is
    validated before it replaces the file (atomically); the text is appended as-is (comments kept) unless
    the file's layout does not allow it, then the registry is re-written as plain YAML. Raises
    :class:`TuneError` if the file already defines the version with other parameters.
    """
    target = Path(path)
    source = target if target.exists() else registry_path()
    text = source.read_text(encoding="utf-8")
    registry = load_registry(source)
    existing = registry.get(strategy.version)
    if existing is not None:
        if existing.params_hash() == strategy.params_hash():
            if source != target:
                _atomic_write(target, text)
            return "unchanged"
        raise TuneError(f"{target} already defines strategy {strategy.version!r} with other parameters; "
                        "choose a new name with --version")
    note = "".join(f"  # {line}\n" for line in comment.splitlines() if line.strip())
    new_text = text.rstrip("\n") + "\n\n" + note + strategy_to_yaml(strategy)
    expected = {**{v: s.params_hash() for v, s in registry.items()}, strategy.version: strategy.params_hash()}
    if _registry_hashes(new_text, str(target)) != expected:
        data = yaml.safe_load(text)
        data["strategies"].append({name: getattr(strategy, name) for name in FIELD_NAMES})
        new_text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10**9)
        if _registry_hashes(new_text, str(target)) != expected:  # pragma: no cover - defensive
            raise StrategyError(f"could not add {strategy.version!r} to {target} as a valid registry")
    _atomic_write(target, new_text)
    return "appended"


def _registry_hashes(text: str, source: str) -> dict[str, str] | None:
    try:
        return {v: s.params_hash() for v, s in parse_registry(yaml.safe_load(text), source).items()}
    except (yaml.YAMLError, StrategyError):
        return None


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fp:
            fp.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def render_text(result: TuneResult, top: int = TOP_CONFIGS) -> str:
    """The human-readable report of ``rag-pipeline tune``."""
    rec, run, m = result.recommendation, result.pool_run, result.recommendation.metric
    cv = rec.cv
    own = FusionConfig.from_strategy(rec.strategy) == result.base_config
    rows = [
        ("recommended", f"{FusionConfig.from_strategy(rec.strategy).label}  -> new version {rec.strategy.version}"
         + (f" (the same fusion as {rec.base.version})" if own else "")),
        (f"cross-validated {m}", f"{cv.mean:.4f}  95% CI [{cv.ci[0]:.4f}, {cv.ci[1]:.4f}]  (each fold scored "
                                 "with the configuration chosen on the other folds)"),
        (f"predicted {m}", f"{rec.predicted_mean:.4f}  (the recommended configuration on all cases: what a real "
                           "run of the new version reproduces)"),
        (f"{rec.base.version}'s own fusion", f"{rec.base_mean:.4f}  ({result.base_config.label})"),
        ("gain (CV vs own fusion)", f"{rec.gain:+.4f}  95% CI [{rec.gain_ci[0]:+.4f}, {rec.gain_ci[1]:+.4f}]  "
                                    f"p={rec.p_value:.4g}"),
        ("recall ceiling", f"{rec.recall_ceiling:.4f}  (share of relevant chunks anywhere in the pools: no "
                           "fusion can beat it)"),
    ]
    width = max(len(label) for label, _ in rows)
    per_fold = result.per_fold()
    chosen_width = max(len(f["chosen"]) for f in per_fold)
    lines = [
        f"Fusion tuning of {rec.base.version} on dataset {run.dataset} (knowledge base {run.knowledge_base}, "
        f"{cv.fold_of.size} cases, run {run.run_id})",
        f"{len(rec.sweep.configs)} fusion configurations, {result.folds}-fold cross-validation over cases "
        f"(seed {result.seed}), metric {m}",
        "",
        *(f"{label:<{width}}  {value}" for label, value in rows),
        "",
        "chosen per fold (on the other folds):",
        *(f"  fold {f['fold'] + 1}: {f['chosen']:<{chosen_width}}  held-out {m} {f['held_out_mean']:.4f} "
          f"({f['cases']} cases)" for f in per_fold),
        "",
        f"top {top} configurations (mean over all cases):",
    ]
    rows = result.top_configurations(top)
    label_width = max(len("configuration"), *(len(r["label"]) for r in rows))
    lines.append(f"  {'#':>3}  {'configuration':<{label_width}}  " + "  ".join(f"{x:>15}" for x in TABLE_METRICS)
                 + "  folds")
    for r in rows:
        mark = " (recommended)" if r["is_recommended"] else " (pool strategy)" if r["is_base"] else ""
        lines.append(f"  {r['rank']:>3}  {r['label']:<{label_width}}  "
                     + "  ".join(f"{r[x]:>15.4f}" for x in TABLE_METRICS) + f"  {r['folds_chosen']:>5}{mark}")
    lines += ["", "strategy definition (paste under `strategies:` in the registry, or use --write-strategy):",
              rec.yaml.rstrip("\n")]
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines) + "\n"


ERRORS = (TuneError, DatasetError, DatabaseError, KnowledgeBaseError, StrategyError, OSError, ValueError)


_guarded = guarded(*ERRORS)


@_guarded
def cmd_tune(args: argparse.Namespace) -> int:
    name, kb = dataset_name_and_kb(args.dataset, args.knowledge_base)
    with get_engine().connect() as conn:
        result = tune(conn, name, args.pool_strategy, args.metric, args.folds, args.seed, knowledge_base=kb,
                      version=args.version, n_resamples=args.resamples)
    rec, written = result.recommendation, None
    if args.write_strategy:
        if any("already run with other parameters" in n for n in result.notes):
            raise TuneError(f"strategy version {result.recommendation.strategy.version!r} was already run with "
                            "other parameters; choose a new name with --version")
        comment = (f"tuned by `rag-pipeline tune` from run {result.pool_run.run_id} of {rec.base.version} on "
                   f"dataset {result.pool_run.dataset} ({result.pool_run.knowledge_base})")
        written = {"path": str(Path(args.write_strategy).resolve()),
                   "status": write_strategy(args.write_strategy, rec.strategy, comment)}
    if args.format == "json":
        print(json.dumps({**result.as_dict(args.top), "written": written}, ensure_ascii=False, indent=2))
    else:
        sys.stdout.write(render_text(result, args.top))
        if written:
            print(f"\n{written['status']}: {rec.strategy.version} in {written['path']}; run it with "
                  f"RAG_STRATEGIES_FILE={written['path']} rag-pipeline evaluate --dataset {args.dataset} "
                  f"--strategy {rec.strategy.version}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``tune`` to the ``rag-pipeline`` sub-commands."""
    p = sub.add_parser("tune", help="tune the fusion on a stored run's candidate pools (weights, normalisation, "
                                    "RRF k) with cross-validation; prints a ready-to-add strategy")
    p.add_argument("--dataset", required=True, help="dataset name, or its JSON file")
    p.add_argument("--knowledge-base", help="only when the dataset name is used with several knowledge bases "
                                            "(or for a bare-array dataset file)")
    p.add_argument("--pool-strategy", default=DEFAULT_POOL_STRATEGY,
                   help=f"strategy whose current run's pools are re-fused (default {DEFAULT_POOL_STRATEGY}: "
                        "100 candidates per leg)")
    p.add_argument("--metric", default=DEFAULT_METRIC, choices=METRIC_NAMES,
                   help=f"metric to maximise (default {DEFAULT_METRIC})")
    p.add_argument("--folds", type=int, default=DEFAULT_FOLDS, help="cross-validation folds (default 5)")
    p.add_argument("--seed", type=int, default=0, help="fold assignment and bootstrap seed (default 0)")
    p.add_argument("--version", help="version name of the tuned strategy (default <pool-strategy>-tuned-<metric>)")
    p.add_argument("--resamples", type=int, default=10000, help="bootstrap / permutation resamples")
    p.add_argument("--top", type=int, default=TOP_CONFIGS, help="configurations listed (default 10)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--write-strategy", metavar="FILE",
                   help="append the tuned strategy to this registry file (created from the active registry "
                        "if missing); then RAG_STRATEGIES_FILE=FILE makes it runnable")
    p.set_defaults(func=cmd_tune)

