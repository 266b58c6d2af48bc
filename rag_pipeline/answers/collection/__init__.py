"""Collecting answers (docs/answers-collection.md): from a user's RAG endpoint (request, retries, reply mapping,
the resumable answers writer) or from an in-process answerer (the registry and the ``extractive-v1`` baseline)."""
