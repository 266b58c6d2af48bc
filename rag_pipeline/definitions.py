"""The Dagster ``Definitions`` of rag_pipeline (``dagster dev -w workspace.yaml``, ``-m rag_pipeline``)."""


import dagster as dg

from rag_pipeline.defs.knowledge_base import ingest_knowledge_base_job, knowledge_base
from rag_pipeline.defs.resources import RagDatabase

defs = dg.Definitions(
    assets=[knowledge_base],
    jobs=[ingest_knowledge_base_job],
    resources={"rag_db": RagDatabase()},
)
