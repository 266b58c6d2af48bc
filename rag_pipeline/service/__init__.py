"""The operations of rag_pipeline, shared by every front end (CLI, Dagster, HTTP): docs/design.md §11.

Plain arguments in (an engine, names, paths, numbers), typed results out (the models of
:mod:`rag_pipeline.contracts`); no argparse, no Dagster, no JSON rendering here. One module per concern
(:mod:`.knowledge_bases`, :mod:`.datasets`, :mod:`.stored_datasets`, :mod:`.applicability`, :mod:`.evaluations`,
:mod:`.analysis`, the labelling modules, :mod:`.history`, ...). Errors meant for the user are
:class:`rag_pipeline.contracts.errors.RagError` of one kind, which the front ends map;
:data:`rag_pipeline.storage.engine.TRANSIENT_ERRORS` are worth a bounded retry. A front end calls a stage
function directly where a service function would only pass the call through.
"""
