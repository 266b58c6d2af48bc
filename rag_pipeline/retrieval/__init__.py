"""Retrieval: strategies as data (``strategies.yaml``), the SQL of each leg in plain sight (vector, ts_rank_cd,
BM25), hybrid search with its trace, and fusion/normalisation of the candidate pool."""
