"""The knowledge-base stage's SQL, by what it queries: knowledge bases and documents, chunks, vectors, BM25 statistics.
"""
