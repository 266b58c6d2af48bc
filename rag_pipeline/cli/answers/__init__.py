"""``rag-pipeline answers``: score, read, compare and collect a RAG system's answers (docs/design.md §7.2, §12)."""
