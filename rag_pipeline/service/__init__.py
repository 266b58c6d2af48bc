"""The operations of rag_pipeline, shared by every front end (CLI, Dagster, HTTP): docs/design.md §11.

Plain arguments in (an engine, names, paths, numbers), typed results out (the models of
:mod:`rag_pipeline.contracts`); no argparse, no Dagster, no JSON rendering here. One module per concern
(:mod:`.knowledge_bases`, :mod:`.datasets`, :mod:`.evaluations`, :mod:`.catalog`, :mod:`.analysis`, the labelling
modules, :mod:`.history`, :mod:`.database`, ...). Errors meant for the user are
:class:`rag_pipeline.contracts.errors.RagError` of one kind, which the front ends map;
:data:`.database.TRANSIENT_ERRORS` are worth a bounded retry. A service module re-exports the constants, result
types and exceptions of its stage that the front ends name.
"""
