"""What the Dagster answer assets do (docs/design.md §7.3): a dataset × answerer partition's answers file (from an
endpoint, an in-process answerer or a dropped file: :func:`produce_answers`), its coverage and scoring."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from rag_pipeline.answers.answers_file import read_answers
from rag_pipeline.answers.collection.answerers import ANSWERER_NAMES
from rag_pipeline.contracts.answers import (
    AnswerComparison,
    AnswerReport,
    AnswerRun,
    CollectionProgress,
    CollectionResult,
    EndpointConfig,
)
from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.service.answer_collection import collect_answers
from rag_pipeline.service.answer_comparison import compare_answer_runs
from rag_pipeline.service.answers import evaluate_answers, list_answer_runs
from rag_pipeline.settings import datasets_dir, project_root
from rag_pipeline.storage.files import atomic_output, open_regular
from rag_pipeline.storage.names import DATASET, STRATEGY_VERSION, is_valid_name


class AnswerAssetError(BadInputError, ValueError):
    """A partition whose answers cannot be produced (no endpoint, no such answerer, no dropped file)."""


def dropped_answers_dir() -> Path:
    """Where a user drops answers files: ``answers/<dataset>/<answerer>.jsonl`` of the project root."""
    return project_root() / "answers"


def answers_file(dataset: str, answerer: str) -> Path:
    """The answers file of partition ``<dataset>|<answerer>``, under the project's data folder."""
    return project_root() / ".rag_pipeline" / "answers" / dataset / f"{answerer}.jsonl"


def answerer_keys() -> list[str]:
    """The answerer partition keys: the registered in-process answerers, then the answerers of dropped files."""
    dropped = sorted({a for _, a in dropped_partitions()} - set(ANSWERER_NAMES))
    return [*ANSWERER_NAMES, *dropped]


def dropped_partitions() -> list[tuple[str, str]]:
    """``(dataset, answerer)`` of every ``answers/<dataset>/<answerer>.jsonl`` whose names are valid keys."""
    root = dropped_answers_dir()
    if not root.is_dir():
        return []
    out = []
    for path in sorted(root.glob("*/*.jsonl")):
        dataset, answerer = path.parent.name, path.stem
        if path.is_file() and is_valid_name(DATASET, dataset) and is_valid_name(STRATEGY_VERSION, answerer):
            out.append((dataset, answerer))
    return out


@dataclass(frozen=True)
class ProducedAnswers:
    """An answers file of a partition and what is in it."""

    path: Path
    mode: str  # "endpoint", "answerer" or "file"
    knowledge_base: str
    answerer: str | None  # the identity the lines name (None: none does)
    cases: int
    lines: int
    answered: int
    errors: int
    missing_case_ids: list[str] = field(default_factory=list)
    collection: CollectionResult | None = None

    @property
    def coverage(self) -> float:
        """Share of the dataset's cases with an answer (status ok); 0.0 for a dataset without cases."""
        return self.answered / self.cases if self.cases else 0.0


def produce_answers(dataset: str, answerer: str, *, endpoint: EndpointConfig | None = None,
                    knowledge_base: str | None = None, strategy: str | None = None, resume: bool = False,
                    progress: Callable[[CollectionProgress], None] | None = None) -> ProducedAnswers:
    """Write the answers file of a partition, afresh unless ``resume`` (failed: :class:`AnswerAssetError`)."""
    dataset_path = datasets_dir() / f"{dataset}.json"
    data = load_dataset(dataset_path, knowledge_base=knowledge_base)
    output = answers_file(dataset, answerer)
    dropped = dropped_answers_dir() / dataset / f"{answerer}.jsonl"
    collection = None
    if endpoint is not None or answerer in ANSWERER_NAMES:
        mode = "endpoint" if endpoint is not None else "answerer"
        if not resume:
            output.unlink(missing_ok=True)
        output.parent.mkdir(parents=True, exist_ok=True)
        collection = collect_answers(dataset_path, output, endpoint=endpoint,
                                     answerer=None if endpoint is not None else answerer,
                                     knowledge_base=data.knowledge_base, strategy=strategy, progress=progress)
        if collection.status == "failed":
            raise AnswerAssetError(f"collecting the answers of {dataset}|{answerer} failed: {collection.reason} "
                                   f"({collection.answered + collection.skipped_existing} of {collection.total} "
                                   f"cases answered are kept in {output}; resume=true continues)")
    elif dropped.is_file():
        mode = "file"
        read_answers(dropped, case_ids=[c.case_id for c in data.cases])  # every problem at once, nothing copied
        with open_regular(dropped) as source, atomic_output(output, binary=True, parents=True) as copy:
            shutil.copyfileobj(source, copy)
    else:
        raise AnswerAssetError(
            f"no answers for {dataset}|{answerer}: {answerer!r} is not an in-process answerer "
            f"({', '.join(ANSWERER_NAMES)}), no endpoint is configured, and there is no file {dropped}")
    parsed = read_answers(output, case_ids=[c.case_id for c in data.cases])
    answered = {cid for cid, r in parsed.records.items() if r.status == "ok"}
    missing = [c.case_id for c in data.cases if c.case_id not in answered]
    return ProducedAnswers(
        path=output, mode=mode, knowledge_base=data.knowledge_base, answerer=parsed.answerer,
        cases=len(data.cases), lines=len(parsed.records), answered=len(answered),
        errors=sum(r.status == "error" for r in parsed.records.values()), missing_case_ids=missing,
        collection=collection)


def score_partition(engine: sa.Engine, dataset: str, answerer: str, path: str | Path, *, knowledge_base: str,
                    named_answerer: str | None, partition_key: str, dagster_run_id: str) -> AnswerReport:
    """Score and store a partition's answers file; the answerer is the one the lines name, else the partition's."""
    return evaluate_answers(engine, knowledge_base, datasets_dir() / f"{dataset}.json", path,
                            answerer=None if named_answerer else answerer, partition_key=partition_key,
                            dagster_run_id=dagster_run_id)


@dataclass(frozen=True)
class DatasetAnswerView:
    """The latest stored answer run of every answerer of a dataset, and each compared with the baseline's."""

    dataset: str
    baseline: AnswerRun | None
    runs: list[AnswerRun]
    comparisons: list[AnswerComparison]


def dataset_answer_view(engine: sa.Engine, dataset: str, *, baseline: str = "extractive-v1") -> DatasetAnswerView:
    """Latest run per answerer of ``dataset`` (newest first), compared with ``baseline``'s (else the newest)."""
    latest: dict[str, AnswerRun] = {}
    for run in list_answer_runs(engine, dataset=dataset, limit=10_000).runs:
        latest.setdefault(run.answerer, run)
    runs = list(latest.values())
    base = latest.get(baseline) or (runs[0] if runs else None)
    comparisons = [compare_answer_runs(engine, base.run_id, r.run_id) for r in runs if base and r is not base]
    return DatasetAnswerView(dataset=dataset, baseline=base, runs=runs, comparisons=comparisons)
