"""rag_pipeline: measure RAG retrieval quality on PostgreSQL + pgvector, run by Dagster, a CLI or (next) HTTP.

Importing the package loads nothing: the Dagster definitions live in :mod:`rag_pipeline.definitions`
(``dagster dev -w workspace.yaml``, ``dagster ... -m rag_pipeline.definitions``).
"""
