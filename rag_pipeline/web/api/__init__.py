"""The API routers (docs/design.md §6.2), mounted under ``/api/v1`` by :func:`rag_pipeline.web.app.create_app`:
:mod:`.knowledge_bases`, :mod:`.datasets`, :mod:`.evaluations`, :mod:`.comparisons`; :mod:`.health` is
``/healthz`` (outside ``/api/v1``, no token)."""
