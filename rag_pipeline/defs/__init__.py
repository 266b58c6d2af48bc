"""Dagster adapters, one module per asset group (knowledge_base, evaluation, comparison, tuning) plus
partitions, checks, jobs, sensors, schedules, resources and the demo; assembled in :mod:`rag_pipeline.definitions`."""
