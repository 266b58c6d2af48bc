"""The HTTP front end: the API (docs/design.md §6.2: ``/api/v1``, OpenAPI at ``/docs``) and the console (``/admin``).
It imports no dagster and holds no SQL: it calls :mod:`rag_pipeline.service`."""
