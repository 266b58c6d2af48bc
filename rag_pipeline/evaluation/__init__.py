"""Evaluation: datasets (validation, versions), label checks, metrics (trec_eval conventions), the runner that
stores every candidate pool, miss diagnosis, persistence, runs and their reports (seed §6.3)."""
