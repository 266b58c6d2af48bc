"""The operations of rag_pipeline, shared by every front end (CLI, Dagster, HTTP).

Plain arguments in (an engine, names, paths, numbers), typed results out (the models of
:mod:`rag_pipeline.contracts`); no argparse, no Dagster, no JSON rendering here. The front ends parse their
input, call one operation and render its result.

Operations by module:

- :mod:`.knowledge_bases`: ``ingest``, ``import_beir``, ``knowledge_base_stats``, ``set_document_state``
- :mod:`.datasets`: ``register_dataset``, ``check_dataset``, ``check_stored_dataset``, ``resolve_dataset``
- :mod:`.evaluations`: ``plan_evaluation``, ``evaluate``, ``evaluate_stored``, ``knowledge_base_name``, ``list_runs``,
  ``run_page``, ``evaluation_detail``, ``run_summaries``, ``write_report``, ``case_tables``
- :mod:`.catalog`: ``list_knowledge_bases``, ``describe_knowledge_base``, ``choose_strategies``, ``list_datasets``,
  ``find_dataset``, ``store_uploaded_dataset``
- :mod:`.run_queue`: ``queue_evaluations`` (queued runs the HTTP API hands to Dagster), ``queued_runs``, ``fail_queued``
- :mod:`.analysis`: ``compare``, ``tune``, ``tune_stages`` (optionally writing the tuned strategy), ``fusion_sweep``
- :mod:`.labelling`: ``find_chunks`` (list or search the chunk ids to label)
- :mod:`.label_drafts`: ``pool``, ``suggest``, ``export_draft``, ``store_draft``, the console's drafts (pooled judging)
- :mod:`.label_fixes`: ``fix_labels``, ``fix_dataset``, ``fix_stored_labels``, ``remap_note`` (after a re-chunking)
- :mod:`.history`: ``metric_history``, ``dataset_versions``, ``run_cases``, ``case_detail``, ``chunk_texts``,
  ``compare_runs`` (the admin console's reads)
- :mod:`.case_diagnosis`: ``case_diagnosis`` (one case, exact global leg ranks, on demand)
- :mod:`.database`: ``get_engine``, the database URLs, the embedded server, ``TRANSIENT_ERRORS``

Errors meant for the user are :class:`rag_pipeline.contracts.errors.RagError` of one kind (a front end shows the
message, not a traceback, and maps the kind); :data:`.database.TRANSIENT_ERRORS` are worth a bounded retry.
The front ends import nothing of rag_pipeline but the service, the contracts and settings: a service module
re-exports (``import X as X``) the constants, result types and exceptions of its stage that they name.
"""
