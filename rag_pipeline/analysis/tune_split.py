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

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sqlalchemy as sa

from rag_pipeline.analysis.stage_tuning import StageConfig, evaluate_stage_configs, stage_grid
from rag_pipeline.analysis.statistics import bootstrap_ci, paired_permutation_test
from rag_pipeline.analysis.tune_runs import PoolRun, TuneError, find_pool_run
from rag_pipeline.analysis.tuning import CVResult, SweepResult, cross_validate
from rag_pipeline.contracts.metrics import METRIC_NAMES
from rag_pipeline.contracts.tuning import RankedStage, SplitTest, SplitTrain, StageTuning
from rag_pipeline.evaluation.pools import load_pools
from rag_pipeline.retrieval.strategies import strategy_entry, strategy_to_yaml


@dataclass
class SplitSide:
    """One dataset's numbers: the chosen and the pool strategy's own configuration, per case."""

    run: PoolRun
    chosen: np.ndarray
    own: np.ndarray

    @property
    def chosen_mean(self) -> float:
        return float(self.chosen.mean())

    @property
    def own_mean(self) -> float:
        return float(self.own.mean())


@dataclass
class SplitTuneResult:
    metric: str
    configs: tuple[StageConfig, ...]
    means: np.ndarray  # train mean of every configuration
    chosen: StageConfig
    strategy: Any
    train: SplitSide
    cv: CVResult
    test: SplitSide | None
    gain_ci: tuple[float, float] | None = None
    p_value: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def base(self):
        return self.train.run.strategy

    @property
    def yaml(self) -> str:
        return strategy_to_yaml(self.strategy)

    def contract(self, top: int = 10) -> StageTuning:
        """The result as the contract ``rag-pipeline tune --train-dataset ... --format json`` prints."""
        train, test = self.train, self.test
        own = StageConfig.from_strategy(self.base)
        ranked = [RankedStage(rank=r + 1, label=self.configs[i].label, train_mean=float(self.means[i]),
                              is_own=self.configs[i] == own, is_chosen=self.configs[i] == self.chosen)
                  for r, i in enumerate(sorted(range(len(self.configs)), key=lambda i: (-self.means[i], i))[:top])]
        return StageTuning(
            metric=self.metric, pool_strategy=self.base.version, configurations=len(self.configs),
            chosen=self.chosen.label, recommended_version=self.strategy.version,
            train=SplitTrain(dataset=train.run.dataset, dataset_version=train.run.dataset_version,
                             run_id=train.run.run_id, cases=int(train.chosen.size), in_sample_mean=train.chosen_mean,
                             own_mean=train.own_mean, cv_mean=self.cv.mean, cv_ci=list(self.cv.ci),
                             fold_choices=[c.label for c in self.cv.chosen]),
            estimate=test.chosen_mean if test else self.cv.mean,
            estimate_source=("held-out test dataset" if test else
                             "cross-validation on the tuning dataset (the in-sample mean is not an estimate)"),
            test=None if test is None else SplitTest(
                dataset=test.run.dataset, dataset_version=test.run.dataset_version, run_id=test.run.run_id,
                cases=int(test.chosen.size), chosen_mean=test.chosen_mean, own_mean=test.own_mean,
                gain=test.chosen_mean - test.own_mean, gain_ci=list(self.gain_ci), p_value=self.p_value),
            top_configurations=ranked, strategy=strategy_entry(self.strategy), yaml=self.yaml, notes=self.notes)


def tune_split(conn: sa.Connection, dataset: str, train_dataset: str | None, pool_strategy: str,
               metric: str = "ndcg_at_k", folds: int = 5, seed: int = 0, *, knowledge_base: str | None = None,
               version: str | None = None, n_resamples: int = 10000) -> SplitTuneResult:
    """Choose a stage configuration on ``train_dataset`` (default: ``dataset`` itself) and report it on
    ``dataset``. Raises :class:`TuneError` when a run is missing or the two runs used other parameters."""
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
    chosen = configs[best]
    own = configs.index(StageConfig.from_strategy(base))
    train = SplitSide(train_run, per_case[metric][best], per_case[metric][own])
    test = gain_ci = p_value = None
    if test_run is not None:
        test_pools = load_pools(conn, test_run.run_id)
        shared = set(map(str, test_pools.case_ids)) & set(map(str, train_pools.case_ids))
        if shared:
            notes.append(f"{len(shared)} case id(s) of {dataset!r} are also in {train_dataset!r}: check the split")
        values = evaluate_stage_configs(test_pools, (chosen, configs[own]), top_n)[metric]
        test = SplitSide(test_run, values[0], values[1])
        diff = values[0] - values[1]
        gain_ci = bootstrap_ci(diff, n_resamples, seed=seed)
        p_value = paired_permutation_test(values[0], values[1], n_resamples, seed=seed)
    where = f"chosen on {train_run.dataset} ({train_pools.n_cases} cases)"
    description = (f"{chosen.label}, {where} from the pools of {base.version}: {metric} {means[best]:.4f} there"
                   + (f", {test.chosen_mean:.4f} on {test_run.dataset}" if test else "") + ".")
    strategy = chosen.apply_to(base, version or f"{base.version}-tuned-{metric}", description)
    if chosen == configs[own]:
        notes.append(f"the best configuration on {train_run.dataset} is {base.version}'s own: the new version "
                     "only renames it")
    return SplitTuneResult(metric, configs, means, chosen, strategy, train, cv, test, gain_ci, p_value, notes)
