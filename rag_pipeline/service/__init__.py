"""The operations of rag_pipeline, shared by every front end (CLI, Dagster, HTTP): docs/design.md §11.

Plain arguments in, typed results out (:mod:`rag_pipeline.contracts`); user errors are
:class:`rag_pipeline.contracts.errors.RagError`. A front end calls a stage function directly where a service
function would only pass the call through.
"""
