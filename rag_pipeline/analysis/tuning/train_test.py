"""Choose on one dataset, report on another: ``tune --train-dataset TRAIN --dataset TEST``.

The pool strategy's current runs on both datasets (same knowledge base, same parameters) are re-fused under
every :func:`stage_grid` configuration (first-stage fusion, completion, rerank weight and normalisation). The
configuration with the best mean on **train** is chosen; its k-fold cross-validated mean on train estimates
what choosing costs. It is then scored once on **test**: that number — never one tuned on the cases it is
measured on — is the estimate. Without a separate train dataset (or when both are the same version) the best
in-sample mean is printed as what it is, "tuned on these cases: not an estimate", and only the
cross-validated mean is called an estimate.
"""

from __future__ import annotations

import numpy as np
import sqlalchemy as sa

from rag_pipeline.analysis.statistics import bootstrap_ci, paired_permutation_test
from rag_pipeline.analysis.tuning.stages import StageConfig, evaluate_stage_configs, stage_grid
from rag_pipeline.analysis.tuning.stored_run import TuneError, find_pool_run
from rag_pipeline.analysis.tuning.sweep import SweepResult, cross_validate
from rag_pipeline.contracts.metrics import METRIC_NAMES
from rag_pipeline.contracts.tuning import RankedStage, SplitTest, SplitTrain, StageTuning
from rag_pipeline.evaluation.pools import load_pools
from rag_pipeline.retrieval.strategies import Strategy, strategy_entry, strategy_to_yaml


def tune_split(conn: sa.Connection, dataset: str, train_dataset: str | None, pool_strategy: str,
               metric: str = "ndcg_at_k", folds: int = 5, seed: int = 0, *, knowledge_base: str | None = None,
               version: str | None = None, n_resamples: int = 10000, top: int = 10) -> tuple[StageTuning, Strategy]:
    """Choose a stage configuration on ``train_dataset`` (default: ``dataset`` itself) and report it on
    ``dataset``: the result (with the ``top`` best configurations on train) and the chosen strategy. Raises
    :class:`TuneError` when a run is missing or the two runs used other parameters."""
    if metric not in METRIC_NAMES:
        raise ValueError(f"unknown metric {metric!r}; expected one of {list(METRIC_NAMES)}")
    notes: list[str] = []
    train_run = find_pool_run(conn, train_dataset or dataset, pool_strategy, knowledge_base)
    test_run = None
    if train_dataset is not None and train_dataset != dataset:
        test_run = find_pool_run(conn, dataset, pool_strategy, knowledge_base)
        if test_run.strategy.params_hash() != train_run.strategy.params_hash():
            raise TuneError(f"the runs of {pool_strategy} on {train_dataset!r} (run {train_run.run_id}) and on "
                            f"{dataset!r} (run {test_run.run_id}) used different parameters; evaluate both with "
                            "the same strategy version")
        if test_run.knowledge_base != train_run.knowledge_base:
            raise TuneError(f"{train_dataset!r} is evaluated on knowledge base {train_run.knowledge_base!r} and "
                            f"{dataset!r} on {test_run.knowledge_base!r}: tune and report on one knowledge base")
        if test_run.dataset_version == train_run.dataset_version:
            notes.append("the train and test datasets are the same cases: the test number is tuned on them, "
                         "not an estimate")
            test_run = None
    elif train_dataset is not None:
        notes.append("--train-dataset equals --dataset: tuned and reported on the same cases, not an estimate")
    notes += train_run.notes
    train_pools = load_pools(conn, train_run.run_id)
    if not 2 <= folds <= train_pools.n_cases:
        raise ValueError(f"--folds must be between 2 and the number of cases ({train_pools.n_cases}), got {folds}")
    base = train_run.strategy
    top_n = base.rerank.top_n if base.rerank is not None else None
    configs = stage_grid(base, train_pools)
    per_case = evaluate_stage_configs(train_pools, configs, top_n)
    means = per_case[metric].mean(axis=1)
    best = int(np.argmax(means))
    cv = cross_validate(train_pools, metric, folds, seed, n_resamples=n_resamples,
                        sweep_result=SweepResult(metric, configs, per_case, train_pools.case_ids))
    chosen, own = configs[best], configs.index(StageConfig.from_strategy(base))
    train_chosen, train_own = per_case[metric][best], per_case[metric][own]
    test = None
    if test_run is not None:
        test_pools = load_pools(conn, test_run.run_id)
        shared = set(map(str, test_pools.case_ids)) & set(map(str, train_pools.case_ids))
        if shared:
            notes.append(f"{len(shared)} case id(s) of {dataset!r} are also in {train_dataset!r}: check the split")
        values = evaluate_stage_configs(test_pools, (chosen, configs[own]), top_n)[metric]
        chosen_mean, own_mean = float(values[0].mean()), float(values[1].mean())
        test = SplitTest(dataset=test_run.dataset, dataset_version=test_run.dataset_version, run_id=test_run.run_id,
                         cases=int(values[0].size), chosen_mean=chosen_mean, own_mean=own_mean,
                         gain=chosen_mean - own_mean, gain_ci=list(bootstrap_ci(values[0] - values[1], n_resamples,
                                                                                seed=seed)),
                         p_value=paired_permutation_test(values[0], values[1], n_resamples, seed=seed))
    where = f"chosen on {train_run.dataset} ({train_pools.n_cases} cases)"
    description = (f"{chosen.label}, {where} from the pools of {base.version}: {metric} {means[best]:.4f} there"
                   + (f", {test.chosen_mean:.4f} on {test.dataset}" if test else "") + ".")
    strategy = chosen.apply_to(base, version or f"{base.version}-tuned-{metric}", description)
    if chosen == configs[own]:
        notes.append(f"the best configuration on {train_run.dataset} is {base.version}'s own: the new version "
                     "only renames it")
    ranked = [RankedStage(rank=r + 1, label=configs[i].label, train_mean=float(means[i]),
                          is_own=configs[i] == configs[own], is_chosen=configs[i] == chosen)
              for r, i in enumerate(sorted(range(len(configs)), key=lambda i: (-means[i], i))[:top])]
    train = SplitTrain(dataset=train_run.dataset, dataset_version=train_run.dataset_version, run_id=train_run.run_id,
                       cases=int(train_chosen.size), in_sample_mean=float(train_chosen.mean()),
                       own_mean=float(train_own.mean()), cv_mean=cv.mean, cv_ci=list(cv.ci),
                       fold_choices=[c.label for c in cv.chosen])
    return StageTuning(
        metric=metric, pool_strategy=base.version, configurations=len(configs), chosen=chosen.label,
        recommended_version=strategy.version, train=train, estimate=test.chosen_mean if test else cv.mean,
        estimate_source=("held-out test dataset" if test else
                         "cross-validation on the tuning dataset (the in-sample mean is not an estimate)"),
        test=test, top_configurations=ranked, strategy=strategy_entry(strategy), yaml=strategy_to_yaml(strategy),
        notes=notes), strategy
