"""Knowledge base: read documents (sources), cut chunks, embed them, keyword text modes, ingest everything with
BM25 term statistics, import BEIR collections, and the documents' lifecycle (ready/published/deleted)."""
