"""rag_pipeline: measure RAG retrieval quality on PostgreSQL + pgvector, run by Dagster, a CLI or HTTP.

Importing the package loads nothing; the Dagster definitions are :mod:`rag_pipeline.definitions`.
"""
