"""Evaluation: datasets (validation, versions), label checks, metrics (trec_eval conventions), the runner that
stores every candidate pool, miss diagnosis, persistence, runs and their reports (docs/design.md §6.3)."""
