"""Asset group ``answer_evaluation`` (docs/design.md §7.3) over :mod:`rag_pipeline.service.answer_assets`; its config
holds no secret: a header is ``{env: VARIABLE}`` (docs/answers-collection.md)."""

import warnings
from urllib.parse import urlsplit

import dagster as dg

from rag_pipeline.contracts.answers import DEFAULT_REQUEST_TEMPLATE, EndpointConfig
from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.defs.answers.metadata import answer_coverage_result, dataset_view_metadata, summary_metadata
from rag_pipeline.defs.evaluation import KB_OF_THE_DATASET, RETRY_POLICY, evaluation_dataset, fail_fast_unless_transient
from rag_pipeline.defs.instance import ANSWER_POOL, POOL
from rag_pipeline.defs.partitions import (
    ANSWERER_DIMENSION,
    DATASET_DIMENSION,
    STRATEGY_DIMENSION,
    answer_partitions,
    answerer_partitions,
    dataset_partitions,
    every_strategy_of_the_dataset,
    split_answer_key,
)
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.service import answer_assets

GROUP = "answer_evaluation"
ANSWER_COVERAGE_SPEC = dg.AssetCheckSpec(
    "answer_coverage", asset="answers",
    description="Share of the dataset's cases with an answer (status ok): WARN below 1.0, ERROR below the "
                "answers asset's coverage_floor; the metadata lists the missing case ids (first 100).")

with warnings.catch_warnings():  # beta in Dagster 1.13
    warnings.simplefilter("ignore", dg.BetaWarning)
    # every strategy partition of evaluation_dataset of the answer partition's dataset (the same dataset file)
    EVERY_STRATEGY_OF_THE_DATASET = dg.MultiPartitionMapping({
        DATASET_DIMENSION: dg.DimensionPartitionMapping(DATASET_DIMENSION, dg.IdentityPartitionMapping()),
        STRATEGY_DIMENSION: dg.DimensionPartitionMapping(ANSWERER_DIMENSION, dg.AllPartitionMapping()),
    })
DATASET_OF_THE_PARTITION = dg.AssetDep(evaluation_dataset, partition_mapping=EVERY_STRATEGY_OF_THE_DATASET)


class HeaderFromEnv(dg.Config):
    env: str
    """The environment variable that holds the header's value (read when the step runs; never stored)."""


class AnswersConfig(dg.Config):
    endpoint_url: str = ""
    """Endpoint mode: the RAG system's http(s) URL (may hold {question} {case_id} {k}); empty: answerer or file
    mode, chosen by the partition's answerer key."""
    method: str = "POST"
    request_template: str = DEFAULT_REQUEST_TEMPLATE
    answer_path: str = "answer"
    citations_path: str = "citations"
    contexts_path: str = "contexts"
    headers: dict[str, HeaderFromEnv] = {}
    """Header name → ``{env: VARIABLE}``: the value is read from the environment, never logged or stored. A
    literal value has no place here (Dagster would store it with the run)."""
    concurrency: int = 4
    """Requests in flight per partition (the ``rag_answers`` pool bounds the partitions)."""
    timeout_s: float = 30.0
    retries: int = 3
    knowledge_base: str = ""
    """Knowledge base of a bare-array dataset file (object-form files name their own)."""
    strategy: str = ""
    """Strategy the in-process answerer retrieves with (default hybrid-v1)."""
    resume: bool = False
    """Keep the answered lines of the previous collection of this partition (after a failed one)."""
    coverage_floor: float = 0.5
    """``answer_coverage`` is an ERROR below this share of answered cases (a WARN below 1.0)."""


def _has_userinfo(url: str) -> bool:
    try:
        return "@" in urlsplit(url).netloc
    except ValueError:
        return "@" in url


class AnswersConfigError(BadInputError, ValueError):
    """The ``answers`` asset's config cannot be used; the message names the field (and never its secret)."""


def _endpoint(config: AnswersConfig, raw_config: dict) -> EndpointConfig | None:
    """The endpoint of ``config``; ``raw_config``: the config as stored (``{env: …}`` values not read)."""
    if not config.endpoint_url:
        return None
    if isinstance(raw_config.get("endpoint_url"), str) and _has_userinfo(config.endpoint_url):
        raise AnswersConfigError(
            "endpoint_url: credentials written in the URL (user:password@host) are kept in Dagster's run storage "
            "with the run's config (change them); give the URL as {env: VARIABLE}, or the credential as a header: "
            "headers: {Authorization: {env: VARIABLE}}")
    return EndpointConfig(url=config.endpoint_url, method=config.method, request_template=config.request_template,
                          answer_path=config.answer_path, citations_path=config.citations_path,
                          contexts_path=config.contexts_path,
                          headers=tuple(f"{name}: env:{header.env}" for name, header in config.headers.items()),
                          concurrency=config.concurrency, timeout_s=config.timeout_s, retries=config.retries)


@dg.asset(group_name=GROUP, partitions_def=answer_partitions, kinds={"json", "python"}, pool=ANSWER_POOL,
          deps=[DATASET_OF_THE_PARTITION, KB_OF_THE_DATASET], check_specs=[ANSWER_COVERAGE_SPEC])
def answers(context: dg.AssetExecutionContext, config: AnswersConfig) -> dg.MaterializeResult:
    """The answers file of ``<dataset>|<answerer>`` (JSON Lines, docs/design.md §12.2), written under
    ``.rag_pipeline/answers/``: from the endpoint, the in-process answerer, or the dropped file."""
    dataset, answerer = split_answer_key(context)
    step = [0]

    def progress(p) -> None:
        every = max(1, p.total // 10)
        if p.done == p.total or p.done // every != step[0]:
            step[0] = p.done // every
            context.log.info(f"{p.done}/{p.total} cases, {p.errors} errors")

    with fail_fast_unless_transient():
        raw = (context.run_config.get("ops", {}).get("answers", {}) or {}).get("config", {}) or {}
        made = answer_assets.produce_answers(dataset, answerer, endpoint=_endpoint(config, raw),
                                             knowledge_base=config.knowledge_base or None,
                                             strategy=config.strategy or None, resume=config.resume,
                                             progress=progress)
    context.log.info(f"{made.mode} mode: {made.answered}/{made.cases} cases answered, {made.errors} errors")
    metadata: dict[str, dg.MetadataValue | str | int | float | None] = {
        "path": dg.MetadataValue.path(str(made.path)), "mode": made.mode, "dagster/row_count": made.lines,
        "lines": made.lines, "cases": made.cases, "answered": made.answered, "errors": made.errors,
        "coverage": made.coverage, "knowledge_base": made.knowledge_base, "answerer": made.answerer or answerer,
        "answerer_named_in_file": made.answerer is not None}
    if made.collection is not None:
        metadata["requests"] = made.collection.requests
        if made.collection.latency_ms_p50 is not None:
            metadata["latency_ms_p50"] = made.collection.latency_ms_p50
    check = answer_coverage_result(made.cases, made.answered, made.missing_case_ids, config.coverage_floor)
    return dg.MaterializeResult(metadata=metadata, check_results=[check])


def _upstream(context: dg.AssetExecutionContext) -> dict:
    """The metadata of the latest ``answers`` materialisation of this partition."""
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=answers.key, asset_partitions=[str(context.partition_key)]), limit=1).records
    if not records:
        raise LookupError(f"answers has not been materialised for partition {context.partition_key}; materialise "
                          "the answer_evaluation group (job evaluate_answers)")
    return {k: v.value for k, v in records[0].asset_materialization.metadata.items()}


@dg.asset(group_name=GROUP, partitions_def=answer_partitions, kinds={"postgres", "python"}, pool=POOL,
          retry_policy=RETRY_POLICY, deps=[answers, KB_OF_THE_DATASET])
def answer_metrics(context: dg.AssetExecutionContext, rag_db: RagDatabase) -> dg.MaterializeResult:
    """The partition's answers scored (docs/design.md §12.3–12.5) and stored as an answer run: each metric's mean
    and ``n_scored``, the refusal figures and the verdict counts."""
    dataset, answerer = split_answer_key(context)
    with fail_fast_unless_transient():
        up = _upstream(context)
        report = answer_assets.score_partition(
            rag_db.engine(), dataset, answerer, up["path"], knowledge_base=up["knowledge_base"],
            named_answerer=up["answerer"] if up.get("answerer_named_in_file") else None,
            partition_key=str(context.partition_key), dagster_run_id=context.run_id)
    summary, run = report.summary, report.stored_run
    context.log.info(f"answer run {run.run_id}: answer_score={summary.metrics['answer_score'].mean}")
    return dg.MaterializeResult(metadata={"run_id": run.run_id, "answerer": run.answerer,
                                          "answerer_version": run.answerer_version, **summary_metadata(summary)})


@dg.asset(group_name=GROUP, partitions_def=dataset_partitions, kinds={"postgres"}, pool=POOL,
          deps=[dg.AssetDep(answer_metrics, partition_mapping=every_strategy_of_the_dataset)])
def answer_run_summary(context: dg.AssetExecutionContext, rag_db: RagDatabase) -> dg.MaterializeResult:
    """The dataset's answers: the latest stored run of every answerer side by side, each compared with the
    ``extractive-v1`` baseline's (paired over the common cases)."""
    with fail_fast_unless_transient():
        view = answer_assets.dataset_answer_view(rag_db.engine(), str(context.partition_key))
    if not view.runs:
        context.log.warning(f"no answer run of dataset {context.partition_key} is stored yet")
    return dg.MaterializeResult(metadata=dataset_view_metadata(view.runs, view.baseline, view.comparisons))


@dg.sensor(name="answer_partitions", minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Answerer partition keys: the in-process answerers and every answers/<dataset>/<answerer>"
                       ".jsonl dropped in the project root (the answers asset's file mode). Adds keys, runs nothing.")
def answer_partitions_sensor(context: dg.SensorEvaluationContext):
    known = set(answerer_partitions.get_partition_keys(dynamic_partitions_store=context.instance))
    new = [k for k in answer_assets.answerer_keys() if k not in known]
    if not new:
        return dg.SkipReason(f"no new answerer ({len(known)} known)")
    return dg.SensorResult(dynamic_partitions_requests=[answerer_partitions.build_add_request(new)])
