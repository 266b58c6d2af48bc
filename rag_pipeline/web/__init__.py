"""The HTTP front end: the API (docs/design.md §6.2: ``/api/v1``, OpenAPI at ``/docs``) and the console (``/admin``).

FastAPI "bigger applications" layout: :func:`rag_pipeline.web.app.create_app` builds the application from the
routers of :mod:`rag_pipeline.web.api` and :mod:`rag_pipeline.web.admin`; :mod:`.dependencies` gives them the
database engine, :mod:`.problems` turns every error into RFC 9457 problem details (never a traceback),
:mod:`.security` holds the token, session and cross-site checks. Evaluations are queued as run rows that Dagster's
``queued_evaluations`` sensor turns into runs: no module of this package imports dagster. Like every front end it
calls :mod:`rag_pipeline.service` and holds no SQL of its own.
"""
