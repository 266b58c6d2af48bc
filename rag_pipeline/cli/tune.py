"""``rag-pipeline tune``: parse and render the offline tuning of :mod:`rag_pipeline.service.analysis`."""

from __future__ import annotations

import argparse
import json
import sys

from rag_pipeline.analysis.text_table import text_table
from rag_pipeline.cli import arguments
from rag_pipeline.cli.errors import guarded
from rag_pipeline.contracts.metrics import METRIC_NAMES
from rag_pipeline.service import analysis
from rag_pipeline.service.analysis import (
    DEFAULT_FOLDS,
    DEFAULT_METRIC,
    DEFAULT_POOL_STRATEGY,
    TOP_CONFIGS,
    FusionTuning,
    StageTuning,
)
from rag_pipeline.storage.engine import get_engine

TABLE_METRICS = ("ndcg_at_k", "recall_at_k", "reciprocal_rank", "precision_at_k")


def render_text(t: FusionTuning, top: int = TOP_CONFIGS) -> str:
    """The human-readable report of ``rag-pipeline tune``."""
    m = t.metric
    rows = [
        ("recommended", f"{t.recommended}  -> new version {t.recommended_version}"
         + (f" (the same fusion as {t.pool_strategy})" if t.recommended == t.base_fusion else "")),
        (f"cross-validated {m}", f"{t.cv_mean:.4f}  95% CI [{t.cv_ci[0]:.4f}, {t.cv_ci[1]:.4f}]  (each fold scored "
                                 "with the configuration chosen on the other folds)"),
        (f"predicted {m}", f"{t.predicted_mean:.4f}  (the recommended configuration on all cases: what a real "
                           "run of the new version reproduces)"),
        (f"{t.pool_strategy}'s own fusion", f"{t.base_mean:.4f}  ({t.base_fusion})"),
        ("gain (CV vs own fusion)", f"{t.gain:+.4f}  95% CI [{t.gain_ci[0]:+.4f}, {t.gain_ci[1]:+.4f}]  "
                                    f"p={t.p_value:.4g}"),
        ("recall ceiling", f"{t.recall_ceiling:.4f}  (share of relevant chunks anywhere in the pools: no "
                           "fusion can beat it)"),
    ]
    chosen_width = max(len(f.chosen) for f in t.per_fold)
    marks = [" (recommended)" if r.is_recommended else " (pool strategy)" if r.is_base else ""
             for r in t.top_configurations]
    lines = [
        f"Fusion tuning of {t.pool_strategy} on dataset {t.dataset} (knowledge base {t.knowledge_base}, "
        f"{t.cases} cases, run {t.pool_run_id})",
        f"{t.configurations} fusion configurations, {t.folds}-fold cross-validation over cases "
        f"(seed {t.seed}), metric {m}",
        "",
        text_table(None, rows),
        "",
        "chosen per fold (on the other folds):",
        *(f"  fold {f.fold + 1}: {f.chosen:<{chosen_width}}  held-out {m} {f.held_out_mean:.4f} "
          f"({f.cases} cases)" for f in t.per_fold),
        "",
        f"top {top} configurations (mean over all cases):",
        text_table([f"{'#':>3}", "configuration", *(f"{x:>15}" for x in TABLE_METRICS), "folds"],
                   [[f"{r.rank:>3}", r.label, *(f"{getattr(r.metrics, x):>15.4f}" for x in TABLE_METRICS),
                     f"{r.folds_chosen:>5}{mark}"] for r, mark in zip(t.top_configurations, marks, strict=True)],
                   indent="  ", rule=False),
        "",
        "strategy definition (paste under `strategies:` in the registry, or use --write-strategy):",
        t.yaml.rstrip("\n"),
    ]
    lines += [f"note: {n}" for n in t.notes]
    return "\n".join(lines) + "\n"


def render_split(t: StageTuning, top: int = TOP_CONFIGS) -> str:
    """The report of a stage tuning (``--train-dataset``, or a pool strategy that completes pools / reranks)."""
    m, train, test = t.metric, t.train, t.test
    lines = [
        f"Stage tuning of {t.pool_strategy}: {t.configurations} configurations (first-stage fusion, "
        f"completion, rerank weight and normalisation), metric {m}",
        f"chosen on  {train.dataset} (version {train.dataset_version[:12]}, {train.cases} cases, "
        f"run {train.run_id})",
        f"chosen:    {t.chosen}  -> new version {t.recommended_version}",
        "",
        f"on {train.dataset} (tuning data):",
        f"  in-sample {m} {train.in_sample_mean:.4f}   (tuned on these cases: NOT an estimate)",
        f"  {t.pool_strategy}'s own configuration {train.own_mean:.4f}",
        f"  {train.cases}-case {len(train.fold_choices)}-fold cross-validated {m} {train.cv_mean:.4f}  95% CI "
        f"[{train.cv_ci[0]:.4f}, {train.cv_ci[1]:.4f}]" + ("" if test else "   <- the estimate"),
    ]
    if test is not None:
        lines += [
            "",
            f"on {test.dataset} (held out: version {test.dataset_version[:12]}, {test.cases} cases, "
            f"run {test.run_id}):",
            f"  chosen configuration {m} {test.chosen_mean:.4f}   <- the estimate (chosen without these cases)",
            f"  {t.pool_strategy}'s own configuration {test.own_mean:.4f};  gain "
            f"{test.gain:+.4f}  95% CI [{test.gain_ci[0]:+.4f}, {test.gain_ci[1]:+.4f}]  p={test.p_value:.4g}",
        ]
    lines += ["", f"top {top} configurations on {train.dataset}:",
              text_table(None, [[f"{r.rank:>3}", r.label, f"{r.train_mean:.4f}"
                                 + (" (chosen)" if r.is_chosen else " (pool strategy)" if r.is_own else "")]
                                for r in t.top_configurations], indent="  ")]
    lines += ["", "strategy definition (paste under `strategies:` in the registry, or use --write-strategy):",
              t.yaml.rstrip("\n")]
    lines += [f"note: {n}" for n in t.notes]
    return "\n".join(lines) + "\n"


def _print(tuning: FusionTuning | StageTuning, args: argparse.Namespace, text: str, ran: str = "") -> int:
    if args.format == "json":
        print(json.dumps(tuning.model_dump(mode="json"), ensure_ascii=False, indent=2))
    else:
        sys.stdout.write(text)
        if tuning.written:
            print(f"\n{tuning.written.status}: {tuning.recommended_version} in {tuning.written.path}{ran}")
    return 0


@guarded(ValueError)
def cmd_tune(args: argparse.Namespace) -> int:
    if args.train_dataset or analysis.has_stages(args.pool_strategy):
        if args.dataset_version:
            raise ValueError("--dataset-version is not supported with --train-dataset or a pool strategy with "
                             "completion / rerank stages (the latest version of each dataset is used)")
        split = analysis.tune_stages(get_engine(), args.dataset, args.train_dataset, args.pool_strategy,
                                     args.metric, args.folds, args.seed, knowledge_base=args.knowledge_base,
                                     version=args.version, n_resamples=args.resamples, top=args.top,
                                     write_to=args.write_strategy)
        return _print(split, args, render_split(split, args.top))
    result = analysis.tune(get_engine(), args.dataset, args.pool_strategy, args.metric, args.folds, args.seed,
                           knowledge_base=args.knowledge_base, version=args.version,
                           dataset_version=args.dataset_version, n_resamples=args.resamples, top=args.top,
                           write_to=args.write_strategy)
    return _print(result, args, render_text(result, args.top),
                  f"; run it with RAG_STRATEGIES_FILE={result.written.path} rag-pipeline evaluate --dataset "
                  f"{args.dataset} --strategy {result.recommended_version}" if result.written else "")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``tune`` to the ``rag-pipeline`` sub-commands."""
    p = sub.add_parser("tune")
    p.add_argument("--dataset", required=True, help="dataset name, or its JSON file (with --train-dataset: the "
                                                    "dataset the chosen configuration is reported on)")
    p.add_argument("--train-dataset", metavar="NAME_OR_FILE",
                   help="choose the configuration on this dataset (e.g. a BEIR train split) and report it on "
                        "--dataset; sweeps first-stage fusion, completion and the rerank mix")
    p.add_argument("--knowledge-base", help="only when the dataset name is used with several knowledge bases "
                                            "(or for a bare-array dataset file)")
    p.add_argument("--dataset-version", metavar="HASH",
                   help="tune on the pools of this dataset version (content hash or a prefix; default: the latest)")
    p.add_argument("--pool-strategy", default=DEFAULT_POOL_STRATEGY,
                   help=f"strategy whose current run's pools are re-fused (default {DEFAULT_POOL_STRATEGY}: "
                        "100 candidates per leg)")
    p.add_argument("--metric", default=DEFAULT_METRIC, choices=METRIC_NAMES,
                   help=f"metric to maximise (default {DEFAULT_METRIC})")
    p.add_argument("--folds", type=arguments.FOLDS, default=DEFAULT_FOLDS, help="cross-validation folds (default 5)")
    p.add_argument("--seed", type=arguments.SEED, default=0, help="fold assignment and bootstrap seed (default 0)")
    p.add_argument("--version", help="version name of the tuned strategy (default <pool-strategy>-tuned-<metric>)")
    p.add_argument("--resamples", type=arguments.RESAMPLES, default=10000, help="bootstrap / permutation resamples")
    p.add_argument("--top", type=arguments.TOP, default=TOP_CONFIGS, help="configurations listed (default 10)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--write-strategy", metavar="FILE",
                   help="append the tuned strategy to this registry file (created from the active registry "
                        "if missing); then RAG_STRATEGIES_FILE=FILE makes it runnable")
    p.set_defaults(func=cmd_tune)

