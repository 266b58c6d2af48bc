"""Lineage from a knowledge base to the evaluations that measured it, with versions (docs/evaluating.md, "Lineage"):
``knowledge_base`` and the observed bridge asset ``dataset_knowledge_base``."""

import json

import dagster as dg
import sqlalchemy as sa

from rag_pipeline.contracts.knowledge_base import KnowledgeBaseVersion
from rag_pipeline.defs.partitions import DATASETS, KNOWLEDGE_BASES, dataset_partitions, knowledge_base_partitions
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.evaluation.datasets.queries import knowledge_base_of_names
from rag_pipeline.service import lineage
from rag_pipeline.storage.names import KNOWLEDGE_BASE, is_valid_name
from rag_pipeline.storage.urls import DatabaseError

DATASET_KB = dg.AssetKey("dataset_knowledge_base")
KNOWLEDGE_BASE_KEY = dg.AssetKey("knowledge_base")
DATA_VERSION_TAG = "dagster/data_version"

dataset_knowledge_base = dg.AssetSpec(
    DATASET_KB, group_name="knowledge_base", partitions_def=dataset_partitions, kinds={"postgres"},
    deps=[dg.AssetDep(KNOWLEDGE_BASE_KEY, partition_mapping=dg.AllPartitionMapping())],
    description="Observed, per dataset: the content version of the knowledge base the dataset names (its data "
                "version). Updated when that knowledge base changes; the evaluation partitions of the dataset "
                "depend on it, so they show as out of date after a re-ingestion that changed something.")


def latest_data_version(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str, *,
                        observed: bool) -> str | None:
    """The data version of the latest observation (``observed``) or materialization of one partition."""
    records_filter = dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition])
    event: dg.AssetObservation | dg.AssetMaterialization | None
    if observed:
        records = instance.fetch_observations(records_filter, limit=1).records
        event = records[0].asset_observation if records else None
    else:
        records = instance.fetch_materializations(records_filter, limit=1).records
        event = records[0].asset_materialization if records else None
    return (event.tags or {}).get(DATA_VERSION_TAG) if event else None


def dataset_observations(instance: dg.DagsterInstance, engine: sa.Engine,
                         versions: dict[str, KnowledgeBaseVersion], datasets: set[str] | None = None
                         ) -> list[dg.AssetObservation]:
    """New ``dataset_knowledge_base`` observations of the dataset partitions whose KB version changed."""
    partitions = set(instance.get_dynamic_partitions(DATASETS))
    out = []
    with engine.connect() as conn:
        dataset_kbs = knowledge_base_of_names(conn)
    for dataset, kb in sorted(dataset_kbs.items()):
        if kb not in versions or dataset not in partitions or (datasets is not None and dataset not in datasets):
            continue
        version = versions[kb]
        if latest_data_version(instance, DATASET_KB, dataset, observed=True) != version.version:
            out.append(dg.AssetObservation(
                asset_key=DATASET_KB, partition=dataset, tags={DATA_VERSION_TAG: version.version},
                description=f"dataset {dataset} names knowledge base {kb}, version {version.short}",
                metadata={"knowledge_base": kb, "knowledge_base_version": version.version,
                          "searchable_chunks": version.searchable_chunks}))
    return out


def observe_dataset(instance: dg.DagsterInstance, engine: sa.Engine, dataset: str, knowledge_base: str) -> str:
    """Record now the version of ``knowledge_base`` as the dataset's ``dataset_knowledge_base`` version."""
    version = lineage.knowledge_base_version(engine, knowledge_base)
    if not instance.has_dynamic_partition(DATASETS, dataset):
        return version.version
    for event in dataset_observations(instance, engine, {version.knowledge_base: version}, {dataset}):
        instance.report_runless_asset_event(event)
    return version.version


def knowledge_base_materialization(version: KnowledgeBaseVersion, description: str) -> dg.AssetMaterialization:
    """A runless materialization of ``knowledge_base[kb]`` for a change made outside Dagster."""
    return dg.AssetMaterialization(
        asset_key=KNOWLEDGE_BASE_KEY, partition=version.knowledge_base, description=description,
        tags={DATA_VERSION_TAG: version.version},
        metadata={"knowledge_base_version": version.version, "searchable_chunks": version.searchable_chunks,
                  "embeddings": dg.MetadataValue.json(version.embeddings), "text_search": version.text_search,
                  "source": "outside Dagster (CLI, service, API or a document lifecycle change)"})


@dg.sensor(
    name="knowledge_base_versions", minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
    description="Knowledge bases in the database → their knowledge_base partitions; a content version that "
                "changed outside Dagster (rag-pipeline ingest / import-beir / doc, the API) → a runless "
                "materialization with the new data version, and the datasets naming it observed again (their "
                "evaluations show as out of date).",
)
def knowledge_base_versions(context: dg.SensorEvaluationContext, rag_db: RagDatabase):
    engine = rag_db.engine()
    try:
        current = {v.knowledge_base: v for v in lineage.knowledge_base_versions(engine)}
        previous = json.loads(context.cursor) if context.cursor else {}
        changed = {kb: v for kb, v in current.items() if previous.get(kb) != v.version}
        if not changed:
            return dg.SkipReason(f"no knowledge base changed ({len(current)} watched)")
        known = set(context.instance.get_dynamic_partitions(KNOWLEDGE_BASES))
        new_keys = sorted(kb for kb in changed if kb not in known and is_valid_name(KNOWLEDGE_BASE, kb))
        events: list = []
        for kb, version in sorted(changed.items()):
            if kb not in known and kb not in new_keys:
                continue
            if latest_data_version(context.instance, KNOWLEDGE_BASE_KEY, kb, observed=False) != version.version:
                context.log.info(f"knowledge base {kb}: version {version.short} (changed outside Dagster)")
                events.append(knowledge_base_materialization(version, f"knowledge base {kb} changed outside "
                                                                      f"Dagster: version {version.short}"))
        events += dataset_observations(context.instance, engine, changed)
    except DatabaseError as exc:
        return dg.SkipReason(f"cannot read the knowledge bases: {exc}")
    cursor = json.dumps({kb: v.version for kb, v in sorted(current.items())})
    partitions = [knowledge_base_partitions.build_add_request(new_keys)] if new_keys else []
    return dg.SensorResult(asset_events=events, cursor=cursor, dynamic_partitions_requests=partitions)
