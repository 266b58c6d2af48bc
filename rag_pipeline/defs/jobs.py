"""Jobs of the evaluation group.

``evaluate_retrieval`` materialises the whole ``retrieval_evaluation`` group for one dataset × strategy
partition (in process: its two steps run one after the other anyway)::

    dagster job execute -m rag_pipeline.definitions -j evaluate_retrieval --tags '{"dagster/partition": "demo|hybrid-v1"}'
"""

import dagster as dg

from rag_pipeline.defs.evaluation import GROUP
from rag_pipeline.defs.partitions import evaluation_partitions

evaluate_retrieval_job = dg.define_asset_job(
    "evaluate_retrieval",
    selection=dg.AssetSelection.groups(GROUP),
    partitions_def=evaluation_partitions,
    # Two steps that run one after the other: executing them in the run's own process saves a Python start and
    # a code load per step (the multiprocess default); partitions still run in parallel as separate runs.
    executor_def=dg.in_process_executor,
    description="Evaluate one strategy on one dataset (partition '<dataset>|<strategy>') and store the run.",
)
