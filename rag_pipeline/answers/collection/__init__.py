"""Collecting answers from a user's RAG endpoint or an in-process answerer (docs/answers-collection.md)."""
