"""Partitions: dataset (dynamic) × strategy version (``demo|hybrid-v1``), and dataset × answerer."""

import warnings

import dagster as dg

from rag_pipeline.retrieval.strategies import load_registry

DATASET_DIMENSION = "dataset"
STRATEGY_DIMENSION = "strategy"
ANSWERER_DIMENSION = "system"
"""The answerer dimension: the RAG system that answered. Dagster orders a key's dimensions by name, so a name
after "dataset" keeps keys ``<dataset>|<answerer>`` like the evaluation's ``<dataset>|<strategy>``."""

DATASETS = "dataset"
KNOWLEDGE_BASES = "knowledge_base"
"""The names of the dynamic partitions (one key per dataset, per knowledge base)."""
dataset_partitions = dg.DynamicPartitionsDefinition(name=DATASETS)
knowledge_base_partitions = dg.DynamicPartitionsDefinition(name=KNOWLEDGE_BASES)
strategy_partitions = dg.StaticPartitionsDefinition(list(load_registry()))
evaluation_partitions = dg.MultiPartitionsDefinition({DATASET_DIMENSION: dataset_partitions,
                                                      STRATEGY_DIMENSION: strategy_partitions})
answerer_partitions = dg.DynamicPartitionsDefinition(name="answerer")
answer_partitions = dg.MultiPartitionsDefinition({DATASET_DIMENSION: dataset_partitions,
                                                  ANSWERER_DIMENSION: answerer_partitions})

with warnings.catch_warnings():  # beta in Dagster 1.13; maps dataset "demo" to every "demo|<strategy>"
    warnings.simplefilter("ignore", dg.BetaWarning)
    every_strategy_of_the_dataset = dg.MultiToSingleDimensionPartitionMapping(
        partition_dimension_name=DATASET_DIMENSION)
the_dataset_of_the_partition = every_strategy_of_the_dataset
"""The same mapping seen from the evaluation side: ``demo|hybrid-v1`` depends on dataset partition ``demo``."""


def partition_key(dataset: str, strategy: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({DATASET_DIMENSION: dataset, STRATEGY_DIMENSION: strategy})


def split_key(context: dg.AssetExecutionContext) -> tuple[str, str]:
    """(dataset key, strategy version) of the partition being materialised."""
    key = context.partition_key
    if not isinstance(key, dg.MultiPartitionKey):  # e.g. from the dagster/partition tag of the CLI
        key = evaluation_partitions.get_partition_key_from_str(str(key))
    keys = key.keys_by_dimension
    return keys[DATASET_DIMENSION], keys[STRATEGY_DIMENSION]


def answer_partition_key(dataset: str, answerer: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({DATASET_DIMENSION: dataset, ANSWERER_DIMENSION: answerer})


def split_answer_key(context: dg.AssetExecutionContext) -> tuple[str, str]:
    """(dataset key, answerer key) of the answer partition being materialised."""
    key = context.partition_key
    if not isinstance(key, dg.MultiPartitionKey):
        key = answer_partitions.get_partition_key_from_str(str(key))
    keys = key.keys_by_dimension
    return keys[DATASET_DIMENSION], keys[ANSWERER_DIMENSION]
