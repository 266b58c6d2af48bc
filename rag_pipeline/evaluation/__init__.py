"""Evaluation: datasets (validation, versions), label checks, metrics (trec_eval conventions), the runner that
stores every candidate pool, the miss diagnosis (``diagnosis/``), runs and their reports (``runs/``, docs/design.md
§6.3)."""
