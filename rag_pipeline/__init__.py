"""rag_pipeline: measure RAG retrieval quality with Dagster on PostgreSQL + pgvector.

``dagster ... -m rag_pipeline`` finds the ``defs`` below. Dagster-free code lives in ``rag_pipeline.core``.
"""

from rag_pipeline.definitions import defs

__all__ = ["defs"]
