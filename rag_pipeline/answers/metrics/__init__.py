"""Scoring answers without an LLM (docs/design.md §12.3–§12.5)."""
