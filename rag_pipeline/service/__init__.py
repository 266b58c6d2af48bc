"""The operations of rag_pipeline, shared by every front end (CLI, Dagster, HTTP): docs/design.md §11. Plain arguments
in, typed results out; a front end calls a stage function directly where a service function would only pass it on."""
