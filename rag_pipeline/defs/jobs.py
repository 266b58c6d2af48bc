"""Jobs of the evaluation group.

``evaluate_retrieval`` materialises the whole ``retrieval_evaluation`` group for one dataset × strategy
partition::

    dagster job execute -m rag_pipeline.definitions -j evaluate_retrieval --tags '{"dagster/partition": "demo|hybrid-v1"}'
"""

import dagster as dg

from rag_pipeline.defs.evaluation import GROUP
from rag_pipeline.defs.partitions import evaluation_partitions

evaluate_retrieval_job = dg.define_asset_job(
    "evaluate_retrieval",
    selection=dg.AssetSelection.groups(GROUP),
    partitions_def=evaluation_partitions,
    description="Evaluate one strategy on one dataset (partition '<dataset>|<strategy>') and store the run.",
)
