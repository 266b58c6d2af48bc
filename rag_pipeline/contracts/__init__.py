"""The shapes rag_pipeline returns: one pydantic model per aggregate, the error kinds, the metric names.

Every operation of :mod:`rag_pipeline.service` returns these models; the front ends render them (the CLI as
JSON via ``model_dump_json`` or as text tables, FastAPI as ``response_model``, Dagster as metadata), and the
published JSON Schemas are generated from them. This package imports nothing of rag_pipeline but settings.
"""
